"""How a zoo kernel fared (:class:`KernelOutcome`), the documented bugs of TVM that explain a failure,
with their evidence, and how an outcome is matched to one.

A wrong answer or sanitizer alarm is the emulator's failure unless one of these tables explains it:
races and uninitialised reads in TVM's output (:data:`TVM_FINDINGS`), dlight rules that raise
(:data:`TVM_SCHEDULE_FINDINGS`), operators whose kernels touch memory outside their buffers
(:data:`TVM_KERNEL_FINDINGS`), passes that break a kernel (:data:`TVM_PASS_FINDINGS`) or change what it
computes (:data:`TVM_MEANING_FINDINGS`), and code generators that cannot build it
(:data:`TVM_CODEGEN_FINDINGS`).  A failure of TVM's own build needs no entry: :func:`tvm_compile_failure`
is the evidence.  :func:`tvm_finding` matches an outcome to its entry.
"""
from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Callable


@dataclass
class KernelOutcome:
    """How one kernel fared in one flavour."""

    flavour: str
    kernel: str
    outcome: str  # "ok" | "refused" | "crash" | "wrong"
    stage: str = ""
    reason: str = ""
    seconds: float = 0.0
    stages_checked: int = 0
    #: Of ``stages_checked``, the stages whose generated program repeats an earlier checked stage's
    #: (the same text, so the same result on the same inputs): counted, not run again.
    stages_repeated: int = 0
    #: Set when TVM itself fails on the kernel, so that nothing can be emulated: a dlight rule that
    #: raises instead of declining, or a pipeline that ``tvm.compile`` cannot get through either.
    tvm_failure: str = ""


#: Refusals allowed by the zoo test: (flavour, kernel name prefix, construct substring) -> why.
#: Only constructs the emulator cannot run exactly yet belong here; the zoo test fails on any other.
ALLOWED_REFUSALS: dict[tuple[str, str, str], str] = {}

#: FuseTIR (RenewDefs) fails with this message on a fused group that begins with a PrimFunc taking a
#: symbolic size as a scalar parameter, ``arange(m, m + n)`` of two symbolic sizes: the group's Relax
#: function has ``m`` as a PrimValue parameter and ``n`` in its ``tir_vars``, and the fused PrimFunc
#: defines ``m`` twice.  TVM's default pipelines (``relax.get_default_pipeline`` for llvm and cuda, so
#: ``tvm.compile`` for cuda) fail alike; ``_lower`` then lowers the model without FuseOps/FuseTIR, so
#: that its kernels are still checked rather than the whole zoo run ending in TVM's exception.
FUSE_TIR_FINDING_MESSAGE = "VarRemapGet(source) == nullptr"
FUSE_TIR_FINDING = ("relax.transform.FuseTIR raises InternalError (renew_defs.cc: "
                    f"{FUSE_TIR_FINDING_MESSAGE}) on a fused arange(m, m + n) of two symbolic sizes")

#: Starts the note of an outcome whose results are partly undefined on the seeded inputs (the emulation
#: raised :class:`~tvm_hybrid_nb.errors.UndefinedResultError`): those elements are not compared.
UNDEFINED_NOT_COMPARED = "result elements undefined on the seeded inputs, not compared"

#: Starts the note of an outcome whose native reference leaves output elements unwritten (a reduction
#: over an empty axis: TVM's llvm build runs the init in the loop's first iteration; roi_align's bins
#: without samples): those elements hold whatever the memory held and are not compared.
UNWRITTEN_NOT_COMPARED = "reference elements the native build leaves unwritten, not compared"

#: Notes an outcome of a schedule that reorders float arithmetic whose outputs differed beyond the
#: tolerances and were compared again within the reference's sensitivity to rounding-sized input
#: changes (zoo._rounding_noise): a sum with heavy cancellation.
ROUNDING_NOISE_COMPARED = "compared within the reference's sensitivity to rounding-sized input changes"

#: Notes an outcome of a schedule that reorders float16 (bfloat16) sums whose outputs differed beyond the
#: tolerances and were compared with the unscheduled kernel computed in float32 too
#: (zoo_reference._wide_reference): a narrow serial sum can stall far from where a tree of partial sums gets.
WIDE_REFERENCE_COMPARED = ("compared with the unscheduled kernel computed in float32 too (a reordered float16 or "
                           "bfloat16 sum)")

#: Marks a wrong answer where the sanitizers show that TVM's pass, not the emulator, is at fault.
TVM_FINDING = "TVM finding"

#: Sanitizer alarms (``check=True``) on kernels whose TVM output really is racy or reads
#: uninitialised memory: (flavour, operator prefix, message substring) -> the evidence.  The operator
#: is the kernel's PrimFunc name without its model (``cumsum`` of ``shapes.cumsum``,
#: :func:`kernel_op`): the same TVM bug shows in any model that uses the operator.
#: Every other alarm in the zoo is a false alarm, and a bug of the sanitizers.
TVM_FINDINGS: dict[tuple[str, str, str], str] = {
    ("dlight-gpu", "gpu_2d_continuous_cumsum", "data race on shared_buf"):
        "relax/backend/gpu_generic/cumsum.py scans a warp Hillis-Steele style, "
        "`shared_buf[idx + j] += shared_buf[idx - (1 << i) * N + N - 1]` under `tx >= 1 << i`: thread tx reads "
        "the last element of thread tx - 2**i while that thread writes it in the same statement; "
        "s_tir.ThreadSync puts barriers only between the steps, so the race stays at every stage down to "
        "the CUDA source (warp-synchronous code without __syncwarp: a data race in CUDA's memory model).",
}
TVM_FINDINGS[("dlight-gpu", "fused_conv2d", "read of group_conv2d_nchw_intermediate_local")] = (
    "s_tir/dlight/gpu/reduction.py on a depthwise conv2d with channel multiplier 2 (nn.Conv2D(3, 6, 3, "
    "groups=3) + bias): the reduction block writes its per-thread (`local`) result at `ax1_1 * 9 + tx` while "
    "the bias block, bound to the threads another way, reads it at `2 * tx + ax1_1`: thread 0 reads element "
    "1, which only thread 1 wrote, in its own registers.  The CUDA source keeps both index expressions "
    "(`group_conv2d_nchw_intermediate_local[18]` written at `ax1_1*9 + threadIdx.x`, read at "
    "`threadIdx.x*2 + ...`): on a GPU the output reads uninitialised registers.  TVM's "
    "LowerCrossThreadReduction raises on the variants without dilation, a TVM failure of its own.")
TVM_FINDINGS[("dlight-gpu", "parallel_sampling_from_prob", "data race on cumsum")] = (
    "relax/backend/gpu_generic/sampling.py (gpu_multinomial_from_uniform, relax's GPU multinomial_from_uniform) "
    "scans a warp in block_cumsum as cumsum.py does: `output_shared[idx + j] += output_shared[idx - (1 << i) * "
    "thread_elem + thread_elem - 1]` under `tx >= 1 << i`, thread tx reading the last element of thread "
    "tx - 2**i while that thread writes it in the same statement, with no barrier (warp-synchronous code "
    "without __syncwarp: a data race in CUDA's memory model).")
_SCAN_LOCALS_RACE = (
    "topi/gpu/scan.py (exclusive_scan_ir: a scan over a non-last axis, any cumprod, an exclusive cumsum) declares the per-thread "
    "indices start_buf/middle_buf/end_buf (and tmp_buf) with scope='local' outside the thread_extent "
    "frame; SplitHostDevice makes them kernel parameters, one int* for all threads: the CUDA source "
    "has `_ptr[0] = threadIdx.x * 2; if (_ptr[0] < 2) ...` and every thread of every block writes and "
    "reads the same element.  Stage 0 gives each thread its own (clean under check=True); from "
    "ConvertSSA on, the emulation shares them as the CUDA kernel does and the result goes wrong.")
for _scan in ("cumsum", "cumprod"):
    TVM_FINDINGS[("dlight-gpu", _scan, "data race on buffer")] = _SCAN_LOCALS_RACE
_INDEX_PUT_RACE = (
    "topi/index_put.py (relax's index_put) runs its updates in `T.parallel(0, index_len)`: with a repeated "
    "index two iterations write one element of out_buf (with accumulate=True each reads it first, "
    "`out[idx] = out[idx] + values[k]`, so a concurrent update is lost; without it which write lands is "
    "unspecified).  numpy's `np.add.at` and PyTorch's `index_put_(accumulate=True)` sum every duplicate.")
for _flavour in ("none", "dlight-cpu", "dlight-gpu"):
    TVM_FINDINGS[(_flavour, "index_put", "data race on out_buf")] = _INDEX_PUT_RACE


#: dlight rules that raise on a kernel instead of declining it (a rule returns None for what it does not
#: schedule), so that ``ApplyDefaultSchedule`` fails: (flavour, where and what, as
#: :func:`schedule_failure` words it) -> the evidence.  There is no scheduled kernel to emulate.
TVM_SCHEDULE_FINDINGS: dict[tuple[str, str], str] = {}
_GEMV_UNIT_REDUCTION = (
    "s_tir/dlight/analysis/gemv.py normalize() asserts that a GEMV-shaped kernel keeps a reduction loop; a "
    "matmul whose reduction has extent 1 (the attention probabilities (1, h, 1, 1) @ v (1, h, 1, d) of a "
    "one-token decoder step without a KV cache) has none once its unit loop is folded, and the GEMV rule "
    "raises AssertionError instead of declining: ApplyDefaultSchedule fails for the whole module, with "
    "dl.cpu.GEMV and with dl.gpu.GEMV.")
_GEMV_BATCH_ONLY = (
    "s_tir/dlight/analysis/gemv.py normalize() asserts that a GEMV-shaped kernel has a spatial loop that is "
    "not a batch loop (a loop whose variable every buffer uses); the sum over the last axis of "
    "exp(logits - max) with keepdims (a log-sum-exp written out, (4, 10) -> (4, 1)) has only batch loops "
    "and a unit one, and the GEMV rule raises AssertionError instead of declining: ApplyDefaultSchedule "
    "fails for the whole module, with dl.cpu.GEMV and with dl.gpu.GEMV.")
for _flavour in ("dlight-cpu", "dlight-gpu"):
    TVM_SCHEDULE_FINDINGS[(_flavour, "dlight/analysis/gemv.py:158: assert r_loops")] = _GEMV_UNIT_REDUCTION
    TVM_SCHEDULE_FINDINGS[(_flavour, "dlight/analysis/gemv.py:157: assert s_loops")] = _GEMV_BATCH_ONLY

#: Operators that TVM lowers into kernels touching memory outside their buffers on valid inputs, so
#: that there is no native reference (``run_native`` refuses a run the emulation shows would do it):
#: (operator prefix, what the emulation reports) -> the evidence.
TVM_KERNEL_FINDINGS: dict[tuple[str, str], str] = {
    ("slice_scatter", "out-of-bounds read of"):
        "topi/slice_scatter.py gathers src for every column of the output before `where` keeps the sliced "
        "ones: the gather index is clipped into the input's axis (dim_size - 1), not src's, and topi.take "
        "runs in its default mode 'fast' (no bounds), so each column past src's extent reads src out of "
        "bounds (relax.op.slice_scatter legalizes to it).",
}

#: Operators whose kernels touch memory outside their buffers at sizes outside the operator's domain that
#: relax nevertheless accepts (a symbolic axis cannot be checked when the model compiles, and no runtime
#: check is emitted): (operator prefix, what the emulation reports) -> the evidence.  A model run at such
#: sizes (``SYMBOLIC_SIZES`` of 1) has no defined result; the emulation (or ``run_native``'s refusal) finds
#: the out-of-bounds access, in any flavour and at any stage.
TVM_DOMAIN_FINDINGS: dict[tuple[str, str], str] = {
    ("reflect_pad", "out-of-bounds read of"):
        "topi/nn/pad.py reflect_pad maps an output index to `m - abs(m - abs(i - before))` with m = size - 1 "
        "(reflect-101), which stays in the input only while the pad width is below the axis extent; "
        "relax.op.nn.pad(pad_mode='reflect') accepts any width on a symbolic axis and emits no runtime check, "
        "so at extent <= pad (n=1, pad 1: x[..., -1, ...]) the native kernel reads outside the input "
        "(PyTorch's reflection pad raises for these sizes).",
    ("topk", "out-of-bounds read of values_buf"):
        "topi/gpu/sort.py topk sorts the whole axis into values_buf/indices_buf and slices the first k with "
        "strided_slice; relax.op.topk accepts k above the extent of a symbolic axis (no runtime check), and "
        "for k > n the slice reads rows n..k-1 of values_buf, outside it (torch.topk raises for these sizes).",
}

#: Passes of TVM that break a kernel so that its emulation traps from their stage on (earlier stages
#: clean): (flavour, pass name, what the emulation reports) -> the evidence.
TVM_PASS_FINDINGS: dict[tuple[str, str, str], str] = {}
_BF16_SORT_ARRAYS = (
    "tirx.BF16ComputeLegalize promotes every bfloat16 expression to float32, the dtype hint of "
    "tvm_stack_make_array included: relax's sort/argsort/topk of bfloat16 on a CPU then hand "
    "tvm.contrib.sort a DLTensor of float32 over bfloat16 storage, twice its size: the library sorts "
    "garbage and writes past the output (the process aborts: free(): invalid next size).  The stages "
    "before the pass hand over bfloat16 and emulate to numpy's sort.")
for _flavour in ("none", "dlight-cpu"):
    TVM_PASS_FINDINGS[(_flavour, "BF16ComputeLegalize", "exceeds its storage")] = _BF16_SORT_ARRAYS
TVM_PASS_FINDINGS[("dlight-gpu", "InjectVirtualThread", "an element of a buffer allocation that was never written")] = (
    "tirx.InjectVirtualThread (VTInjector) gives every virtual thread its own copy of a buffer that a "
    "vthread writes at an index depending on the vthread (its \"touched\" allocations: the copies are "
    "placed side by side, the accesses offset by vthread * size), shared memory included, and "
    "UnifyThreadBinding has already moved a block's allocation under the vthread launch.  A kernel whose "
    "virtual threads exchange data through shared memory (vthread 0 writes half a tile, a barrier, "
    "vthread 1 reads it) reads its own copy's never-written half from this stage on, in the CUDA source "
    "too; the stages before share one buffer as the TIR says.")
TVM_PASS_FINDINGS[("dlight-gpu", "LowerCrossThreadReduction", "out-of-bounds write of")] = (
    "s_tir/transform/lower_cross_thread_reduction.cc builds the predicate of the write-back block from the "
    "clauses it finds under an `And` of the reduction block's predicate (a StructuralWalk over And nodes "
    "only): a predicate of one comparison has no And, so the write-back block loses it.  dlight's GPU "
    "reduction of a 1x1 convolution on a 1x1 map (MobileNetV3/EfficientNet squeeze-excite: 8 or 24 output "
    "channels, 16 rows of threadIdx.y) guards its rows with `ty < 8` alone, and from this stage on threads "
    "ty = 8..15 store their (garbage) sums past the end of the reduction buffer.  CompactBufferAllocation "
    "later shrinks a local or shared buffer to each thread's or block's region, which hides it; a global "
    "write-back buffer keeps the store in the CUDA source: a plain 1x1 conv2d (1, 24, 1, 1) -> (1, 8, 1, 1) "
    "compiles to `if (threadIdx.x == 0) conv2d_nchw[threadIdx.y] = ...` for 16 rows, 8 past the output "
    "(the emulation traps at every stage down to ConvertSSA).  A predicate of two clauses keeps the "
    "spatial one.")

TVM_PASS_FINDINGS[("dlight-gpu", "LiftThreadBinding", "out-of-bounds write of")] = (
    "s_tir/transform/lift_thread_binding.cc lifts every loop bound to a thread tag to one launch of the "
    "first such loop's extent and substitutes the other loops' variables without a guard.  dlight's GPU "
    "GEMV for metal (256 threads a block) binds threadIdx.x to 128 for the partial sums (guarded "
    "`< 80`) and to 80 for the rfactor sum and the write-back of an 80-wide float16 GEMV: from this stage "
    "on threads 80..127 run those too, past the end of the reduction buffer and, in the Metal source "
    "TVM generates, of the output (`if (threadIdx.y == 0) matmul_ptr[threadIdx.x] = ...` over 128 "
    "threads for 80 elements).  The stages before keep the 80-thread loops.")


#: The words a wrong answer's reason gets when the sanitizers flag the kernel at stage 0 (its alarm
#: follows): the native result is no reference, and the alarm may be a documented one (:data:`TVM_FINDINGS`).
FLAGGED_AS_WRITTEN = "the sanitizers flag the kernel as written (stage 0)"

#: The words :func:`.zoo_diagnosis.meaning_change` adds to a wrong answer's reason, before the stage it names.
MEANING_CHANGE = "the emulated result changes at stage"

#: The words :func:`.zoo_diagnosis.schedule_meaning_change` adds to a wrong answer at stage 0 of a
#: scheduled kernel when TVM's own build of the schedule computes the emulation's values.
SCHEDULE_CHANGE = "TVM's own llvm build of the scheduled kernel computes these values too"
#: Why that is TVM's failure, not the emulator's: the evidence is TVM's own build.
SCHEDULE_CHANGE_EVIDENCE = (
    "the schedule rule changed what the kernel computes: TVM's own llvm build of the scheduled PrimFunc, "
    "its thread-bound loops run as serial loops (a schedule's block-level meaning: the bindings are "
    "annotations there), computes the values the emulation of stage 0 computes, not the reference's.  "
    "Seen: dlight's Fallback rule inlines an add that follows a reduction of extent 1 (nn.Linear(1, n) "
    "with a bias, a 1x1 convolution of one input channel) into the reduction block, into its T.init and "
    "into its update, so the bias is added twice (s_tir.Schedule.reverse_compute_inline).")

#: Passes of TVM that change what a kernel computes (no sanitizer can see it: every stage is clean, the
#: stages before the pass all give one result and the stages from it on all give another, the native
#: build's): pass name -> the evidence.  A wrong answer :func:`.zoo_diagnosis.meaning_change` pins on one is TVM's.
TVM_MEANING_FINDINGS: dict[str, str] = {
    "StmtSimplify":
        "arith's rewrite rules, written for integers, fold float expressions too: `x - x` to 0, `x == x` to "
        "true, `!(x < c)` to `x >= c`, `(x + c) - c` to `x`; IEEE gives NaN for x = NaN or +-inf, false for "
        "x == x with a NaN, true for !(NaN < c), and 0 for (-1 + 1e30) - 1e30 in float32.  A fused kernel "
        "with `where(x == x, x, 0)` (nan_to_num), `x != x` (isnan) or `(s < t) | (s >= t)` of a sqrt that "
        "may be NaN computes something else natively than its TIR says (numpy is the truth).",
    "FP8ComputeLegalize":
        "on llvm (no native fp8) tirx.FP8ComputeLegalize promotes float8 compute to float32 and gets both ends "
        "wrong: a float8 buffer the kernel allocates becomes a float32 buffer, so `T.Cast(\"float8_e4m3fn\", x)` "
        "stored there no longer rounds (0.2739 stays 0.2739, e4m3fn gives 0.28125; 1000 stays 1000, e4m3fn has "
        "no such value: NaN), and a float8_e4m3fn input is decoded with `exp + 120` for every exponent field, "
        "subnormals and zero included (0x00 decodes to 2**-7 = 0.0078125, 0x01 to 0.0088 instead of 0.00195, "
        "the NaN 0x7F to 480).  Any relax `astype` to or from float8_e4m3fn (fp8 weight dequantize, fp8 "
        "fake-quantize) computes something else natively than its TIR says (ml_dtypes is the truth).",
    "VectorizeLoop":
        "tirx.VectorizeLoop does not widen a `local` accumulator allocated inside a vectorized loop that "
        "wraps a serial reduction loop: the accumulator keeps one element and every lane stores to it "
        "(`acc[Broadcast(0, 4)]`), so each lane's result is the last lane's sum.  TVM's Adreno `Pool2D` "
        "rule schedules max_pool2d and adaptive_avg_pool2d so (texture path); a column sum written that "
        "way builds to [36, 36, 36, 36] for the column sums [24, 28, 32, 36] of arange(16).reshape(4, 4) "
        "natively on llvm (numpy is the truth).",
}


def schedule_failure(exc: BaseException) -> str:
    """One line for an exception a schedule rule raised: its type, then the innermost frame of TVM's
    Python code (``dlight/analysis/gemv.py:158: assert r_loops``)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/tvm/" in f.filename.replace("\\", "/")]
    where = ""
    if frames:
        f = frames[-1]
        path = f.filename.replace("\\", "/").split("/tvm/s_tir/", 1)[-1]
        where = f" at {path}:{f.lineno}: {(f.line or '').strip()}"
    message = str(exc).splitlines()[0] if str(exc) else ""
    return f"dlight could not schedule it: {type(exc).__name__}{': ' + message if message else ''}{where}"


def _bool_comparisons_as_int8(func):
    """``func`` with every ``==``/``!=`` of two bools compared as int8 (the same meaning)."""
    import tvm_ffi
    from tvm import tirx

    def widen(node):
        if str(node.a.ty) != "bool":
            return node
        return type(node)(tirx.Cast("int8", node.a), tirx.Cast("int8", node.b))

    return tvm_ffi.structural_map(func, ((tirx.EQ, tirx.NE), widen))


#: Bugs of TVM's code generators that stop a kernel from building at all: (regular expression on TVM's
#: message) -> (the evidence, a rewrite of the PrimFunc to the same meaning without the construct, the
#: llvm target the rewrite is built for).  Every stage is captured before code generation, so the zoo
#: still emulates them all, against the native build of the rewritten reference.
TVM_CODEGEN_FINDINGS: dict[str, tuple[str, Callable, dict]] = {
    r"fcmp \w+ i1 ": (
        "codegen_llvm compares two bools (`(a < b) == T.bool(False)`, `A[i] == B[i]` of bool buffers) with "
        "LLVM's fcmp, which i1 operands make invalid IR: the module fails to verify and nothing builds "
        "(llvm, and the host code of cuda).  relax's renormalize_top_p_top_k_prob (get_renorm_cutoff, "
        "nn.op.renormalize_top_p_top_k_prob) writes such comparisons, so TVM cannot build it for a CPU.",
        _bool_comparisons_as_int8, {"kind": "llvm"}),
    r"= shufflevector <\d+ x \w+> ": (
        "TVM's llvm build at its default opt-level 3 leaves IR that fails to verify (a `shufflevector` "
        "joining two 2-lane vectors) on some plain elementwise kernels: `x * sigmoid(x)` (SiLU, as the torch "
        "frontend lowers it) over float32 (4, 10) or (4, 18), while (4, 12), (4, 16) and (8, 10) build.  "
        "The same module builds at opt-level 2: that build is the reference (the same program; no fast-math "
        "at either level).",
        lambda func: func, {"kind": "llvm", "opt-level": 2}),
}


def codegen_finding(message: str) -> tuple[str, Callable, dict] | None:
    """The :data:`TVM_CODEGEN_FINDINGS` entry that explains a failed code generation, or None."""
    import re

    return next((entry for pattern, entry in TVM_CODEGEN_FINDINGS.items() if re.search(pattern, message)), None)


def tvm_compile_failure(mod, target) -> str:
    """The evidence that TVM itself cannot build ``mod`` for ``target`` (``tvm.compile`` raises), or
    "" when it can: a failure of the staged build is then the emulator's."""
    import tvm

    from .capture import short_tvm_message

    try:
        tvm.compile(mod, target=target)
    except Exception as exc:  # noqa: BLE001 - any failure of TVM's own build is the evidence
        # TVM 0.27's messages end with the failing Python line underlined (^^^^): not the cause.
        return f"TVM cannot build it: tvm.compile raises {type(exc).__name__}: {short_tvm_message(exc)[:300]}"
    return ""


def kernel_op(kernel: str) -> str:
    """The PrimFunc name of a zoo kernel name ``model.function`` (``cumsum`` of ``moe.cumsum``)."""
    return kernel.split(".", 1)[-1]


def _findings_flavour(flavour: str) -> str:
    """The flavour whose documented findings hold for ``flavour``: dlight's GPU rules schedule a
    kernel alike for metal as for cuda (``dlight-metal`` differs in the matmuls it tensorizes), so
    the findings about their schedules are the same."""
    return "dlight-gpu" if flavour == "dlight-metal" else flavour


def finding_matches(outcome: KernelOutcome, flavour: str, prefix: str, message: str) -> bool:
    """Whether ``outcome`` is the alarm of the :data:`TVM_FINDINGS` entry ``(flavour, prefix, message)``."""
    return (_findings_flavour(outcome.flavour) == flavour and kernel_op(outcome.kernel).startswith(prefix)
            and message in outcome.reason)


def refusal_allowed(outcome: KernelOutcome) -> bool:
    """Whether a refusal is on the documented allow-list (:data:`ALLOWED_REFUSALS`)."""
    return any(_findings_flavour(outcome.flavour) == flavour and outcome.kernel.startswith(prefix)
               and construct in outcome.reason for flavour, prefix, construct in ALLOWED_REFUSALS)


def tvm_finding(outcome: KernelOutcome) -> str | None:
    """The evidence when a sanitizer alarm (``check=True``: a crash) or a wrong answer that the
    sanitizers flag at its stage but not at stage 0 (:func:`.zoo_diagnosis.explain_wrong`) is a documented bug of
    TVM's output (:data:`TVM_FINDINGS`).  An undocumented one stays a failure of the zoo: the
    sanitizers and the emulation share code, so their agreement alone proves nothing.  A failure
    of TVM itself (``outcome.tvm_failure``: dlight raises, ``tvm.compile`` raises) needs no document:
    TVM's own code is the evidence."""
    if outcome.outcome == "crash" or (outcome.outcome == "wrong" and TVM_FINDING in outcome.reason):
        # emulate_stages stops at the first failing stage: earlier ones are clean (a wrong answer:
        # the sanitizers flag its stage, not stage 0)
        found = next((why for (flavour, pass_name, message), why in TVM_PASS_FINDINGS.items()
                      if _findings_flavour(outcome.flavour) == flavour and outcome.stage.endswith(pass_name)
                      and message in outcome.reason), None)
        if found is not None:
            return found
    if outcome.outcome == "crash" and outcome.stage == "schedule":
        return next((why for (flavour, message), why in TVM_SCHEDULE_FINDINGS.items()
                     if _findings_flavour(outcome.flavour) == flavour and message in outcome.reason),
                    None) or outcome.tvm_failure
    if outcome.outcome == "crash" and outcome.tvm_failure:
        return outcome.tvm_failure
    if outcome.outcome == "crash" and "out-of-bounds" in outcome.reason:
        found = next((why for (prefix, message), why in TVM_DOMAIN_FINDINGS.items()
                      if kernel_op(outcome.kernel).startswith(prefix) and message in outcome.reason), None)
        if found is not None:
            return found
    if outcome.outcome == "crash" and "native run refused" in outcome.reason:
        return next((why for (prefix, message), why in TVM_KERNEL_FINDINGS.items()
                     if kernel_op(outcome.kernel).startswith(prefix) and message in outcome.reason), None)
    if outcome.outcome == "wrong" and outcome.tvm_failure:
        return outcome.tvm_failure  # evidence found in TVM's own output (a schedule's thread mapping)
    if outcome.outcome == "wrong" and SCHEDULE_CHANGE in outcome.reason:
        return SCHEDULE_CHANGE_EVIDENCE
    if outcome.outcome == "wrong" and MEANING_CHANGE in outcome.reason:
        changed_at = outcome.reason.rsplit(MEANING_CHANGE, 1)[1]
        return next((why for pass_name, why in TVM_MEANING_FINDINGS.items()
                     if changed_at.split(" and stays")[0].endswith(pass_name)), None)
    if outcome.outcome == "wrong" and TVM_FINDING not in outcome.reason and FLAGGED_AS_WRITTEN not in outcome.reason:
        return None
    if outcome.outcome not in ("crash", "wrong"):
        return None
    return next((why for key, why in TVM_FINDINGS.items() if finding_matches(outcome, *key)), None)
