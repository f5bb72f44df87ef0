"""The real-model zoo: kernels that TVM's own Relax pipeline and dlight schedules produce, emulated at
every stage and compared with the native build.

The small ``tvm.relax.frontend.nn`` models of :mod:`.zoo_models` are lowered as TVM's CPU and CUDA backends do
(``DispatchSampling``, ``DispatchSortScan``, ``LegalizeOps``, ``AnnotateTIROpPattern``, ``FoldConstant``,
``FuseOps``, ``FuseTIR`` under the target), their PrimFuncs collected and deduplicated structurally, and each is
scheduled three ways (:data:`FLAVOURS`).  Every changed stage before ``MakePackedAPI`` is emulated in
fast mode on seeded inputs and compared with the native llvm build of the *unscheduled* PrimFunc (the
reference for the cuda schedules too: no GPU is needed).

A wrong answer whose stage the sanitizers flag while stage 0 is clean is a pass of TVM breaking the
kernel (:func:`.zoo_diagnosis.explain_wrong`); :mod:`.zoo_outcomes` documents the ones found, with their evidence.
TVM bugs that leave nothing to compare are reported apart: a dlight rule that raises (any; the
known ones documented in :data:`TVM_SCHEDULE_FINDINGS`), a pipeline that ``tvm.compile`` itself
cannot get through (:func:`tvm_compile_failure` is the evidence: the staged build failing alone
would be the emulator's crash), and LLVM code generation that fails (:data:`TVM_CODEGEN_FINDINGS`:
there, every stage is still emulated, against the native build of a rewrite to the same meaning).
Kernel names are ``model.function``; findings name the function (the operator), so they hold for any
model (:func:`kernel_op`).  Symbolic sizes other than :data:`SYMBOLIC_SIZES` get
:data:`OTHER_SYMBOLIC_SIZE`; kernels whose inputs must have a form get it (:data:`INPUT_CONTRACTS`).
``python -m tvm_hybrid_nb zoo`` prints the table; ``tests/test_zoo.py`` asserts it.  With
``--tvm-tests PATH`` it checks the TIR of a local TVM checkout's tests instead (:mod:`.tvm_corpus`).
"""
from __future__ import annotations

import re
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

# Re-exported: the tests and the CLI read the findings and references through this module.
from .zoo_diagnosis import cause_first, explain_wrong, meaning_change, schedule_meaning_change  # noqa: F401
from .zoo_outcomes import (ALLOWED_REFUSALS, FLAGGED_AS_WRITTEN, FUSE_TIR_FINDING_MESSAGE,  # noqa: F401
                           MEANING_CHANGE, ROUNDING_NOISE_COMPARED, SCHEDULE_CHANGE, TVM_CODEGEN_FINDINGS,
                           TVM_FINDING, TVM_FINDINGS, TVM_KERNEL_FINDINGS, TVM_MEANING_FINDINGS,
                           TVM_PASS_FINDINGS, TVM_SCHEDULE_FINDINGS, UNDEFINED_NOT_COMPARED,
                           UNWRITTEN_NOT_COMPARED, WIDE_REFERENCE_COMPARED, KernelOutcome, codegen_finding,
                           finding_matches, kernel_op, refusal_allowed, schedule_failure, tvm_compile_failure,
                           tvm_finding)
from .zoo_reference import (GPU_REFERENCE, _arithmetic_eps, _bf16_native, _expected_on_gpu,  # noqa: F401
                            _no_native_reference, _outputs_equal, _reference_run, _rounding_noise,
                            _unwritten_elements, _wide_reference)
from .zoo_thread_local import HOST_ACCESS, host_access_evidence, thread_local_evidence  # noqa: F401
from .zoo_undefined import (PROMOTION_ALARM, REFERENCE_UNDEFINED, UNDEFINED_ALARMS, c_promotion_evidence,
                            llvm_poison_evidence, reference_undefined, refused_reference_evidence,
                            zero_trip_evidence)

#: Sizes bound to the symbolic dimensions of the models.
SYMBOLIC_SIZES = {"n": 5, "m": 3}
#: The size of every other symbolic dimension (and integer scalar parameter) a kernel has.
OTHER_SYMBOLIC_SIZE = 4

#: How each kernel is scheduled (see :func:`schedule`): unscheduled for llvm, dlight.cpu rules for llvm,
#: dlight's GPU default rules for cuda.
FLAVOURS = ("none", "dlight-cpu", "dlight-gpu")
#: Flavours checked when asked for (``--flavour``): dlight's GPU default rules for metal, whose
#: ``Matmul`` tensorizes float16 matmuls into simdgroup matrices.  The kernel is the one lowered for
#: cuda (the Relax lowering is the same for GPU targets); dlight's findings hold for both targets.
OPT_IN_FLAVOURS = ("dlight-metal",)
#: The flavours that schedule the GPU lowering of a kernel.
GPU_FLAVOURS = ("dlight-gpu", "dlight-metal")

@dataclass
class ZooReport:
    """Every outcome of a zoo run, with the table per flavour."""

    outcomes: list[KernelOutcome] = field(default_factory=list)

    def counts(self, flavour: str) -> dict[str, int]:
        """Outcomes of ``flavour`` by kind; a crash (sanitizer alarm) or wrong answer that
        :data:`TVM_FINDINGS` documents as TVM's bug counts as a "TVM finding", not against the emulator."""
        counts = {k: 0 for k in ("ok", "refused", "crash", "wrong", "TVM finding")}
        for o in self.outcomes:
            if o.flavour == flavour:
                counts["TVM finding" if tvm_finding(o) else o.outcome] += 1
        return counts

    def table(self) -> str:
        lines = ["| flavour | ok | refused | crash | wrong | TVM finding |", "|---|---|---|---|---|---|"]
        for flavour in dict.fromkeys(o.flavour for o in self.outcomes):
            c = self.counts(flavour)
            lines.append(f"| {flavour} | {c['ok']} | {c['refused']} | {c['crash']} | {c['wrong']} | "
                         f"{c['TVM finding']} |")
        return "\n".join(lines)

    def problems(self) -> list[KernelOutcome]:
        return [o for o in self.outcomes if o.outcome != "ok"]


# ---------------------------------------------------------------------- models
def _models():
    """(name, nn.Module, spec) of every zoo model (:mod:`tvm_hybrid_nb.zoo_models`)."""
    from .zoo_models import models

    return models()


def _lower(mod, target):
    import tvm
    from tvm import relax

    with target:
        mod = relax.backend.DispatchSampling()(mod)
        mod = relax.backend.DispatchSortScan()(mod)
        mod = relax.transform.LegalizeOps()(mod)
        mod = relax.transform.AnnotateTIROpPattern()(mod)
        mod = relax.transform.FoldConstant()(mod)
        unfused = mod
        mod = relax.transform.FuseOps()(mod)
        try:
            mod = relax.transform.FuseTIR()(mod)
        except tvm.error.InternalError as exc:
            if FUSE_TIR_FINDING_MESSAGE not in str(exc):
                raise
            # TVM's own pipeline fails here too (FUSE_TIR_FINDING): the model's kernels are checked unfused.
            mod = unfused
    return [(gv.name_hint, f) for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)], _call_order(mod)


def _call_order(mod) -> list[str]:
    """The PrimFuncs that the Relax functions of ``mod`` call (``call_tir``), in binding order: the two
    lowerings of a model bind the same calls in the same order, whatever each backend dispatches to."""
    import tvm
    import tvm_ffi

    order: list[str] = []

    def visit(node) -> None:
        if isinstance(node, tvm.relax.Call) and getattr(node.op, "name", "") == "relax.call_tir":
            order.append(node.args[0].name_hint)

    for _, func in mod.functions.items():
        if isinstance(func, tvm.relax.Function):
            tvm_ffi.structural_walk(func.body, visit, order="pre")
    return order


def cuda_target():
    import tvm
    return tvm.target.Target({"kind": "cuda", "arch": "sm_80"})


@dataclass
class ZooKernel:
    """One distinct PrimFunc: as lowered for llvm and for cuda, and the reference run natively.

    The two lowerings differ only where a backend dispatches differently (sort and scan); a cuda
    kernel that llvm cannot build (a GPU sort) is checked against its llvm twin of the same model
    and signature.
    """

    name: str
    llvm: object = None
    cuda: object = None
    reference: object = None


def collect_kernels(models: list | None = None) -> list[ZooKernel]:
    """Distinct PrimFuncs of the zoo models, lowered for llvm and for cuda.

    Each model is ``(name, nn.Module, spec)``: ``spec`` maps the parameters of ``forward`` to their
    specs (``{"x": spec.Tensor(...)}``), or, for a module with several methods (a decoder's
    ``prefill`` and ``decode``), each method's name to such a mapping, as ``export_tvm`` takes it.
    """
    import tvm
    import tvm_ffi

    from .errors import BuildError

    kernels: list[ZooKernel] = []
    for model_name, model, spec in models if models is not None else _models():
        specs = method_specs(model_name, model, spec)
        try:
            mod, _ = model.export_tvm(spec=specs)
        except Exception as exc:  # the model or its spec: TVM's frontend cannot trace it
            raise BuildError(f"zoo model {model_name!r}: export_tvm raised {crash_reason(exc)}") from exc
        own: list[ZooKernel] = []
        # Per lowering: the PrimFunc name -> its kernel, and the order of the calls (twins of a
        # cuda-only kernel are found by call position: names shift where a backend dispatches).
        named: dict[str, dict[str, ZooKernel]] = {"llvm": {}, "cuda": {}}
        calls: dict[str, list[str]] = {}
        for target, attr in ((tvm.target.Target("llvm"), "llvm"), (cuda_target(), "cuda")):
            try:
                funcs, calls[attr] = _lower(mod, target)
            except Exception as exc:  # TVM's Relax pipeline (a legalization's assert) cannot lower it
                raise BuildError(f"zoo model {model_name!r}: TVM's lowering for {attr} raised "
                                 f"{crash_reason(exc)}") from exc
            for name, func in funcs:
                func = func.with_attr("global_symbol", "main")
                known = next((k for k in kernels + own if any(
                    f is not None and tvm_ffi.structural_equal(func, f) for f in (k.llvm, k.cuda))), None)
                if known is not None:
                    if getattr(known, attr) is None:
                        setattr(known, attr, func)
                    named[attr][name] = known
                    continue
                own.append(ZooKernel(f"{model_name}.{name}", **{attr: func}))
                named[attr][name] = own[-1]
        for k in own:
            k.reference = k.llvm
            if k.llvm is None:
                op = k.name.split(".", 1)[1]
                twins = []
                if len(calls["llvm"]) == len(calls["cuda"]):
                    at = {calls["llvm"][i] for i, c in enumerate(calls["cuda"]) if c == op}
                    twins = [named["llvm"][n] for n in at if n in named["llvm"]]
                    twins = [t for t in twins if _param_types(t.llvm) == _param_types(k.cuda)]
                    if len({id(t) for t in twins}) != 1:
                        twins = []
                numpy_ref = next((fn for key, fn in NUMPY_REFERENCES.items() if key in op), None)
                k.reference = twins[0].llvm if twins else numpy_ref or k.cuda
        kernels += own
    return kernels


def method_specs(model_name: str, model, spec: dict) -> dict:
    """``export_tvm``'s ``{method: {parameter: spec}}`` for ``spec`` (see :func:`collect_kernels`)."""
    if not isinstance(spec, dict):
        raise TypeError(f"zoo model {model_name!r}: spec must be a dict, got {type(spec).__name__}")
    methods = {name: value for name, value in spec.items() if isinstance(value, dict)}
    if not methods:
        return {"forward": spec}
    if len(methods) != len(spec):
        raise TypeError(f"zoo model {model_name!r}: spec mixes methods ({', '.join(methods)}) with parameters "
                        f"({', '.join(k for k in spec if k not in methods)}); give each method its own dict")
    missing = [name for name in methods if not callable(getattr(model, name, None))]
    if missing:
        raise TypeError(f"zoo model {model_name!r}: {type(model).__name__} has no method {missing[0]!r}")
    return methods


def _param_types(func) -> list:
    return [(str(getattr(p.ty, "shape", None)), str(getattr(p.ty, "dtype", None))) for p in func.params]


def _sampling_from_prob(prob, usample, rows, out_dtypes):
    """relax's GPU ``multinomial_from_uniform`` (``parallel_sampling_from_prob``): per sample, the row
    ``rows[i]`` of ``prob`` with entries <= 0 dropped, and the first position where its cumulative sum
    reaches ``u - 1e-6`` (a position with a positive entry; the last one when none)."""
    p = prob[rows[:, 0].astype(np.int64)]
    p = np.where(p > 0, p, 0).astype(prob.dtype)
    reached = np.cumsum(p, axis=-1, dtype=p.dtype) >= (usample.astype(np.float32) - np.float32(1e-6))
    first = reached & ~np.concatenate([np.zeros_like(reached[:, :1]), reached[:, :-1]], axis=-1) & (p > 0)
    token = np.where(first.any(axis=-1), first.argmax(axis=-1), p.shape[-1] - 1)
    return token.reshape(-1, 1).astype(out_dtypes[0])


#: Kernels that only the cuda lowering has and that llvm cannot build (topi's GPU scan launches its
#: own threads): their numpy meaning, compared with a tolerance (a parallel scan adds in another order).
#: Called with the inputs and ``out_dtypes``, the dtypes of the kernel's outputs (a cumsum with
#: ``dtype="float64"`` sums a float32 input in float64).
NUMPY_REFERENCES = {"cumsum": lambda x, out_dtypes: np.cumsum(x.astype(out_dtypes[0]), axis=-1, dtype=out_dtypes[0]),
                    "parallel_sampling_from_prob": _sampling_from_prob}


def schedule(func, flavour: str):
    """``(target, IRModule)`` of ``func`` scheduled the ``flavour`` way, on a fresh module."""
    import tvm
    from tvm.s_tir import dlight as dl

    from .verification.kernels import dlight_rules

    mod = tvm.IRModule({"main": func})
    if flavour == "none":
        return tvm.target.Target("llvm"), mod
    if flavour in ("dlight-cpu", *GPU_FLAVOURS):
        target = cuda_target() if flavour == "dlight-gpu" else tvm.target.Target(
            "metal" if flavour == "dlight-metal" else "llvm")
        with target:
            mod = dl.ApplyDefaultSchedule(*dlight_rules(target))(mod)
        return target, mod
    raise ValueError(f"flavour must be one of {FLAVOURS + OPT_IN_FLAVOURS}, got {flavour!r}")


def _sorted_cumsum_inputs(arrays: dict, rng) -> None:
    """relax's ``get_index_from_sorted`` (``sample_top_p_top_k_from_sorted_prob``) picks, per sample,
    the one position j where ``cumsum_sorted[j-1] <= u * renorm_prob < cumsum_sorted[j]``: on a
    cumulative sum of probabilities.  On random rows several positions match, and in parallel their
    threads race on the one output element."""
    cumsum, renorm, usample = arrays["cumsum_sorted"], arrays["renorm_prob"], arrays["usample"]
    probs = -np.sort(-rng.uniform(0.01, 1, cumsum.shape), axis=-1)
    probs /= probs.sum(axis=-1, keepdims=True)
    cumsum[...] = np.cumsum(probs.astype(cumsum.dtype), axis=-1, dtype=cumsum.dtype)
    renorm[...] = cumsum[:, -1:] * rng.uniform(0.5, 1, renorm.shape).astype(renorm.dtype)
    usample[...] = rng.uniform(0, 1, usample.shape).astype(usample.dtype)


def _prob_rows_inputs(arrays: dict, rng) -> None:
    """relax's GPU ``multinomial_from_uniform`` (``parallel_sampling_from_prob``) samples from rows of
    probabilities with a uniform draw in [0, 1) per sample: random values in [-1, 1) would pick the first
    or last position only, and a draw within a rounding of a cumulative sum depends on the order of the
    parallel scan."""
    prob, usample, rows = arrays["prob"], arrays["uniform_samples"], arrays["row_indices"]
    p = rng.uniform(0.01, 1, prob.shape)
    prob[...] = (p / p.sum(axis=-1, keepdims=True)).astype(prob.dtype)
    usample[...] = rng.uniform(0, 1, usample.shape).astype(usample.dtype)
    rows[...] = rng.integers(0, prob.shape[0], rows.shape).astype(rows.dtype)


def _sorted_prob_inputs(arrays: dict, rng) -> None:
    """relax's ``get_renorm_cutoff`` (``renormalize_top_p_top_k_prob``) and ``get_renorm_prob``
    (``sample_top_p_top_k_from_sorted_prob``) write one element per row from the one position j where
    ``cumsum_sorted[j] < top_p and j + 1 < top_k`` stops holding: on a nondecreasing cumulative sum of
    probabilities sorted in descending order.  On random rows the condition flips several times, and in
    parallel their threads race on the one output element (the serial run keeps the last)."""
    cumsum = arrays["cumsum_sorted"]
    probs = -np.sort(-rng.uniform(0.01, 1, cumsum.shape), axis=-1)
    probs /= probs.sum(axis=-1, keepdims=True)
    cumsum[...] = np.cumsum(probs.astype(cumsum.dtype), axis=-1, dtype=cumsum.dtype)
    if "sorted_prob" in arrays:
        arrays["sorted_prob"][...] = probs.astype(arrays["sorted_prob"].dtype)


#: Kernels that mean something only on inputs of a form random values lack: (operator prefix,
#: the parameters it fills) -> a function filling them (in place) from a seeded generator.
INPUT_CONTRACTS: dict[tuple[str, tuple[str, ...]], Callable] = {
    ("get_renorm_cutoff", ("sorted_prob", "cumsum_sorted")): _sorted_prob_inputs,
    ("get_renorm_prob", ("cumsum_sorted",)): _sorted_prob_inputs,
    ("get_index_from_sorted", ("cumsum_sorted", "renorm_prob", "usample")): _sorted_cumsum_inputs,
    ("parallel_sampling_from_prob", ("prob", "uniform_samples", "row_indices")): _prob_rows_inputs,
}


def _inputs(params, seed: int, kernel: str = "", narrow: bool = False) -> list:
    """Seeded inputs; symbolic sizes and scalar size parameters (``m``) from :data:`SYMBOLIC_SIZES`
    (others :data:`OTHER_SYMBOLIC_SIZE`); the inputs of ``kernel`` (its zoo name) as :data:`INPUT_CONTRACTS` says;
    token ids and other index arrays in range (:func:`~tvm_hybrid_nb.signature.in_range_indices`).
    ``narrow``: integer arrays of 16 bits and more in [-1, 1] (:data:`NARROW_INTEGERS`)."""
    from .signature import dim_symbols, dim_value, in_range_indices, seeded_values

    # Operators bring their own symbolic names (``batch``, ``vocab_size`` of the sampling ops).  Distinct
    # variables that share a name are told apart as TVMScript prints them (``m``, ``m_1``): a model's
    # ``nn.Linear("m", 8)`` over an input of shape ``("n", "m")`` has two, and the model means them equal
    # (relax's matmul checks nothing), so a renamed one gets the size of its name.
    sizes = dict(SYMBOLIC_SIZES)
    for p in params:
        for name in [s for d in (p.shape or ()) for s in dim_symbols(d)] + ([] if p.is_buffer else [p.name]):
            base = re.fullmatch(r"(.+)_[0-9]+", name)
            sizes.setdefault(name, SYMBOLIC_SIZES.get(base.group(1), OTHER_SYMBOLIC_SIZE) if base
                             else OTHER_SYMBOLIC_SIZE)
    specs = []
    for p in params:
        shape = [dim_value(d, sizes) for d in p.shape] if p.is_buffer else None
        specs.append((p.name, p.dtype, shape, p.is_output))
    values = seeded_values(specs, seed, sizes, scalars=sizes)
    if narrow:
        rng = np.random.default_rng(seed)
        values = [rng.integers(-1, 2, v.shape).astype(v.dtype) if isinstance(v, np.ndarray) and not p.is_output
                  and v.dtype.kind in "iu" and v.dtype.itemsize >= 2 else v for v, p in zip(values, params)]
        values = [np.abs(v) if isinstance(v, np.ndarray) and v.dtype.kind == "u" else v for v in values]
    values = in_range_indices(params, values, seed, sizes)
    names = {p.name: v for p, v in zip(params, values) if p.is_buffer and not p.is_output}
    for (prefix, needed), fill in INPUT_CONTRACTS.items():
        if kernel_op(kernel).startswith(prefix) and all(n in names for n in needed):
            fill(names, np.random.default_rng(seed))
    return values


def crash_reason(exc: BaseException) -> str:
    """One line for an unexpected exception: its type, first message line and where it was raised."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" ({tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno})" if tb else ""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}{where}"


def emulate_stages(hm, inputs, expected, outcome: KernelOutcome, mode: str = "fast", check: bool = False,
                   on_stage: Callable[[str], None] | None = None,
                   unwritten: list | Callable[[], list | None] | None = None,
                   find_noise: Callable[[], list] | None = None, known_results: dict | None = None,
                   find_wide: Callable[[], list | None] | None = None) -> None:
    """Emulate every changed stage of ``hm`` before MakePackedAPI on copies of ``inputs`` and compare
    its outputs with ``expected``; the first stage that is refused, cannot be generated or differs
    sets ``outcome`` (its stage, reason and kind) and ends the walk.  ``on_stage(label)`` is called
    before each stage runs.  A stage whose generated program is the text of an earlier checked
    stage's (a pass that changed only what the emulation does not read) has that stage's result and
    is not run again.  ``unwritten``: per result, the mask of the reference elements its native run
    left unwritten (:func:`_unwritten_elements`), which are not compared; or a function that finds
    them and the elements the reference leaves undefined (:func:`_left_out_elements`: masks, masks,
    reason), called when a stage first differs (a second native run, only where it can matter).
    ``find_noise``: a function giving the reference's sensitivity to rounding-sized input changes
    (:func:`_rounding_noise`), called when a schedule that reorders arithmetic first differs beyond
    the tolerances; differences within it are no wrong answer.  ``find_wide``: a function giving
    the unscheduled kernel's results computed in float32 (:func:`_wide_reference`), called when a
    schedule that reorders float16 or bfloat16 arithmetic still differs; an element near them is no
    wrong answer either.  ``known_results``: the results of
    fast-mode programs (by their text) already run on ``inputs`` without the sanitizers (the corpus's
    trap check of stage 0), used instead of running them again.  Exceptions other than refusals
    reach the caller."""
    from .codegen import program_text
    from .errors import StageNotEmulatableError, UndefinedResultError, UnsupportedConstructError
    from .signature import bind_arguments

    # The sizes the inputs bind: a kernel with symbolic loop extents that is cheap at these sizes
    # runs the exact plan in fast mode (its analysis would cost more than the serial run).
    sizes = bind_arguments(hm.params, [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]).sizes

    def leave_out_unwritten(masks):
        outcome.reason = "; ".join(filter(None, [outcome.reason, f"{UNWRITTEN_NOT_COMPARED}: "
                                                 f"{sum(int(m.sum()) for m in masks)}"]))
        return masks

    find_unwritten = unwritten if callable(unwritten) else None
    unwritten = None if find_unwritten is not None or unwritten is None else leave_out_unwritten(unwritten)
    noise = None
    wide: list = []
    undefined_so_far = None  # the result elements a stage has shown undefined on these inputs
    checked_programs: set[str] = set()
    bf16_native = _bf16_native(hm)
    arithmetic_eps = _arithmetic_eps(hm) if outcome.flavour != "none" else 0.0
    for stage in hm.stages:
        if hm.packed_api_index is not None and stage.index >= hm.packed_api_index:
            break
        if not stage.changed:
            continue
        outcome.stage = stage.label
        if on_stage is not None:
            on_stage(stage.label)
        try:
            program = program_text(stage.kernel(mode, check, sizes=sizes).source)
        except (UnsupportedConstructError, StageNotEmulatableError) as exc:
            if stage.emulatable:  # this mode's own refusal
                outcome.outcome, outcome.reason = "refused", str(exc)
            else:
                outcome.reason = stage.reason or ""
                outcome.outcome = "refused" if outcome.reason.startswith("unsupported construct") else "crash"
            return
        if program in checked_programs:
            outcome.stages_checked += 1
            outcome.stages_repeated += 1
            continue
        args = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
        known = (known_results or {}).get(program) if mode == "fast" and not check else None
        try:
            if known is not None:
                got = [np.array(a, copy=True) for a in known]
            else:
                result = hm.emulate(*args, stage=stage.index, mode=mode, check=check)
                got = hm.result_values(args, result)  # the outputs, and the value the kernel returns
        except (UnsupportedConstructError, StageNotEmulatableError) as exc:
            outcome.outcome, outcome.reason = "refused", str(exc)
            return
        except UndefinedResultError as exc:
            # The native reference is undefined there too (or the kernel leaves an order open that
            # the reference fixed): compare the defined elements only, at this stage and the later
            # ones, whose passes may fix one value for them (LowerThreadAllreduce an order).
            undefined_so_far = (exc.undefined if undefined_so_far is None
                                else [a | b for a, b in zip(undefined_so_far, exc.undefined)])
            got = list(exc.results)
            if UNDEFINED_NOT_COMPARED not in outcome.reason:
                count = sum(int(m.sum()) for m in exc.undefined)
                cause = ("out-of-range float -> int conversions, LLVM poison" if "poison in LLVM" in str(exc)
                         else str(exc).split(": it depends on ", 1)[-1].split(":", 1)[0][:160])
                outcome.reason = "; ".join(filter(None, [outcome.reason, f"{UNDEFINED_NOT_COMPARED}: {count} "
                                                         f"({cause})"]))
        if undefined_so_far is not None:
            got = [np.where(mask, want, have) for have, want, mask in zip(got, expected, undefined_so_far)]
        problem = _outputs_equal(got, expected, bf16_native, reordered=outcome.flavour != "none",
                                 arithmetic_eps=arithmetic_eps)
        if problem and find_unwritten is not None:
            (masks, undefined, cause), find_unwritten = find_unwritten(), None
            unwritten = None if masks is None else leave_out_unwritten(masks)
            if undefined is not None:  # the reference's own value is undefined there
                outcome.reason = "; ".join(filter(None, [outcome.reason, f"{UNDEFINED_NOT_COMPARED}: "
                                                         f"{sum(int(m.sum()) for m in undefined)} (in the native "
                                                         f"reference: {cause[:200]})"]))
                unwritten = undefined if unwritten is None else [a | b for a, b in zip(unwritten, undefined)]
        if problem and unwritten is not None:
            got = [np.where(mask, want, have) for have, want, mask in zip(got, expected, unwritten)]
            problem = _outputs_equal(got, expected, bf16_native, reordered=outcome.flavour != "none",
                                     arithmetic_eps=arithmetic_eps)
        if problem and outcome.flavour != "none" and (find_noise is not None or noise is not None):
            if noise is None:
                noise, find_noise = find_noise(), None
                outcome.reason = "; ".join(filter(None, [outcome.reason, ROUNDING_NOISE_COMPARED]))
            problem = _outputs_equal(got, expected, bf16_native, reordered=True, arithmetic_eps=arithmetic_eps,
                                     noise=noise)
        if (problem and outcome.flavour != "none" and arithmetic_eps >= float(np.finfo(np.float16).eps)
                and (find_wide is not None or wide)):
            if find_wide is not None:
                wide, find_wide = find_wide() or [], None
                if wide:
                    outcome.reason = "; ".join(filter(None, [outcome.reason, WIDE_REFERENCE_COMPARED]))
            if wide:
                problem = _outputs_equal(got, expected, bf16_native, reordered=True, arithmetic_eps=arithmetic_eps,
                                         noise=noise, wide=wide)
        outcome.stages_checked += 1
        if problem:
            outcome.outcome, outcome.reason = "wrong", problem
            return
        checked_programs.add(program)
    outcome.stage = ""


def _native_reference(func):
    """The llvm build of ``func``; where TVM's code generation fails on a documented bug
    (:data:`TVM_CODEGEN_FINDINGS`), the build of its rewrite to the same meaning."""
    import tvm

    from . import module as hmodule

    hm = hmodule.build(func, target="llvm", on_failure="keep")
    if hm.failure is not None and hm.failure.step == "code generation":
        finding = codegen_finding(hm.failure.message)
        if finding is not None:
            _evidence, rewrite, reference_target = finding
            return hmodule.build(rewrite(func), target=tvm.target.Target(reference_target))
    if hm.failure is not None:
        from .errors import BuildError
        error = BuildError(hm.failure.summary)
        error.tvm_failure = tvm_compile_failure(tvm.IRModule({"main": func}), "llvm")
        raise error
    return hm


def _in_parameter_order(params, reference_params, inputs: list) -> list:
    """``inputs`` (in the order of ``reference_params``) in the order of ``params``: buffers in their order,
    scalar parameters matched by name.  The two lowerings of a model may list a kernel's scalar size
    parameters in different orders (cuda ``(n, m)``, llvm ``(m, n)``, from run to run): the kernels then differ
    structurally, and a cuda-only kernel is checked against its llvm twin (:func:`collect_kernels`), whose
    scalar inputs must be passed by name, not position (buffer names may differ between the lowerings)."""
    scalars = {p.name: v for p, v in zip(reference_params, inputs) if not p.is_buffer}
    wanted = [p.name for p in params if not p.is_buffer]
    if (len(params) != len(reference_params) or sorted(wanted) != sorted(scalars)
            or [p.is_buffer for p in params] != [p.is_buffer for p in reference_params]):
        return inputs
    return [v if p.is_buffer else scalars[p.name] for p, v in zip(params, inputs)]


#: Notes an outcome checked on integer inputs in [-1, 1]: on the seeded ones (in [-100, 100]) the
#: kernel's integer arithmetic overflows at stage 0, which the target leaves undefined (a product
#: of many of them: an integer cumprod), so the native result there is no reference.
NARROW_INTEGERS = "integer inputs in [-1, 1]: on the seeded ones stage 0 overflows (undefined)"


def check_kernel(name: str, func, flavour: str, mode: str = "fast", seed: int = 0,
                 reference=None, check: bool = False) -> KernelOutcome:
    """Build ``func`` scheduled the ``flavour`` way and emulate every changed stage before
    MakePackedAPI against the native llvm build of ``reference`` (default: the unscheduled ``func``;
    a Python function is a numpy reference, called with the input arrays and ``out_dtypes``, the
    dtypes of the outputs).  ``check`` runs the sanitizers: an alarm is a crash; where the alarm (or
    the sanitizers' explanation of a wrong answer) is an integer overflow at stage 0 on the seeded
    inputs (undefined), the kernel is checked again on
    integer inputs in [-1, 1] (:data:`NARROW_INTEGERS`) and that outcome, said so, stands if it is
    ok or a TVM finding.  So is a difference at stage 0 where the native reference itself is
    undefined on the seeded inputs (:data:`REFERENCE_UNDEFINED`: a shift by its bit width).  Undefined
    on every input, the alarm is TVM's when its llvm code shows the poison instruction
    (:func:`.zoo_undefined.llvm_poison_evidence`).  A ``target`` attribute on ``func`` or
    ``reference`` (``BindTarget``'s, on kernels taken from a Relax pipeline) is dropped: the flavour
    and the llvm reference choose the targets."""
    func, reference = _without_target(func), _without_target(reference)
    outcome = _check_kernel(name, func, flavour, mode, seed, reference, check)
    undefined = ((check and outcome.outcome == "crash" and outcome.stage.startswith("0 ")
                  and any(alarm in outcome.reason for alarm in UNDEFINED_ALARMS))
                 or outcome.reason.startswith(REFERENCE_UNDEFINED)
                 or (outcome.outcome == "wrong" and f"{FLAGGED_AS_WRITTEN}: ValueError: " in outcome.reason
                     and " overflow: " in outcome.reason.split(FLAGGED_AS_WRITTEN, 1)[1]))
    if not undefined:
        return outcome
    narrowed = _check_kernel(name, func, flavour, mode, seed, reference, check, narrow=True)
    if narrowed.outcome != "ok" and not tvm_finding(narrowed):
        if outcome.outcome == "crash" and not outcome.tvm_failure:
            outcome.tvm_failure = _undefined_evidence(func, flavour, reference, outcome) or ""
        return outcome
    narrowed.reason = "; ".join(filter(None, [NARROW_INTEGERS, narrowed.reason]))
    narrowed.seconds += outcome.seconds
    return narrowed


def _without_target(func):
    """``func`` without the ``target`` attribute that TVM's build would follow over the one asked for."""
    attrs = getattr(func, "attrs", None)
    return func.without_attr("target") if attrs is not None and "target" in attrs else func


def _undefined_evidence(func, flavour: str, reference, outcome: KernelOutcome) -> str | None:
    """TVM's own code as the evidence for an alarm that no input avoids: the CUDA (Metal) source of
    the scheduled kernel for a narrow result C keeps in ``int`` (:data:`PROMOTION_ALARM`), else the
    LLVM IR of the llvm kernel the alarm is about."""
    if PROMOTION_ALARM in outcome.reason:
        if flavour not in GPU_FLAVOURS:
            return None
        return c_promotion_evidence(*schedule(func, flavour)[::-1], outcome.reason)
    llvm_func, llvm_flavour = _undefined_llvm_kernel(func, flavour, reference, outcome)
    return None if llvm_func is None else llvm_poison_evidence(*schedule(llvm_func, llvm_flavour)[::-1], outcome.reason)


def _undefined_llvm_kernel(func, flavour: str, reference, outcome: KernelOutcome) -> tuple:
    """``(PrimFunc, flavour)`` of the llvm kernel an undefined-behaviour alarm is about: the scheduled
    kernel's own on an llvm flavour, the unscheduled reference's when the reference was found undefined
    (:data:`REFERENCE_UNDEFINED`) or the kernel is a GPU one; ``(None, None)`` for a numpy reference."""
    import tvm

    if flavour not in GPU_FLAVOURS and not outcome.reason.startswith(REFERENCE_UNDEFINED):
        return func, flavour
    unscheduled = func if reference is None else reference
    return (unscheduled, "none") if isinstance(unscheduled, tvm.tirx.PrimFunc) else (None, None)



def _check_kernel(name: str, func, flavour: str, mode: str, seed: int, reference, check: bool,
                  narrow: bool = False) -> KernelOutcome:
    import tvm

    from . import module as hmodule
    from .errors import BuildError, EmulationError, StageNotEmulatableError, UnsupportedConstructError

    start = time.perf_counter()
    outcome = KernelOutcome(flavour, name, "ok")
    try:
        try:
            target, mod = schedule(func, flavour)
        except Exception as exc:  # noqa: BLE001 - a rule that raises: TVM's failure, said as such
            outcome.outcome, outcome.stage, outcome.reason = "crash", "schedule", schedule_failure(exc)
            outcome.tvm_failure = ("a dlight rule raises on this kernel instead of declining it: TVM's own "
                                   "ApplyDefaultSchedule fails, there is no scheduled kernel to emulate")
            outcome.seconds = time.perf_counter() - start
            return outcome
        hm = hmodule.build(mod, target=target, on_failure="keep")
        if hm.failure is not None and not (hm.failure.step == "code generation"
                                           and codegen_finding(hm.failure.message)):
            outcome.tvm_failure = tvm_compile_failure(mod, target)
            raise BuildError(hm.failure.summary)
        unwritten = find_noise = find_wide = None
        if reference is not None and not isinstance(reference, tvm.tirx.PrimFunc):  # a numpy function
            inputs = _inputs(hm.params, seed, name, narrow=narrow)
            outs = reference(*[a for a, p in zip(inputs, hm.params) if not p.is_output],
                             out_dtypes=[p.dtype for p in hm.params if p.is_output])
            expected = list(outs) if isinstance(outs, tuple) else [outs]
        elif (no_native := _no_native_reference(reference, func)) is not None:
            # The later stages are checked against the exact emulation of the unscheduled kernel.
            unscheduled = hmodule.build(reference if reference is not None else func, target=target)
            inputs = _inputs(unscheduled.params, seed, name, narrow=narrow)
            expected_args = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
            result = unscheduled.emulate(*expected_args, stage=0, mode="exact")
            expected = unscheduled.result_values(expected_args, result)
            outcome.reason = f"reference: the exact emulation of the unscheduled kernel ({no_native})"
        else:
            native_func = reference if reference is not None else func
            native = _native_reference(native_func)
            inputs = _inputs(native.params, seed, name, narrow=narrow)
            try:
                inputs, expected, unwritten = _reference_run(native, inputs, outcome)
            except EmulationError as exc:  # TVM's own kernel may divide by a size that is 0
                if "native run refused" in str(exc):
                    exc.tvm_failure = refused_reference_evidence(native_func, inputs, str(exc)) or ""
                raise
            reference_inputs = inputs
            if unwritten is not None:  # a native reference
                find_noise = lambda: _rounding_noise(native, reference_inputs, expected)  # noqa: E731
                find_wide = lambda: _wide_reference(native_func, reference_inputs)  # noqa: E731
            inputs = _in_parameter_order(hm.params, native.params, inputs)
        emulate_stages(hm, inputs, expected, outcome, mode=mode, check=check, unwritten=unwritten,
                       find_noise=find_noise, find_wide=find_wide)
        if (outcome.outcome == "wrong" and flavour in GPU_FLAVOURS and unwritten is not None
                and (on_gpu := _expected_on_gpu(native_func, target, reference_inputs, expected)) is not None):
            outcome = KernelOutcome(flavour, name, "ok",
                                    reason=GPU_REFERENCE.format(target="CUDA" if flavour == "dlight-gpu" else "Metal"))
            emulate_stages(hm, inputs, on_gpu, outcome, mode=mode, check=check, unwritten=unwritten,
                           find_noise=find_noise, find_wide=find_wide)
        if outcome.outcome == "wrong" and unwritten is not None and outcome.stage == hm.stages[0].label:
            alarm = reference_undefined(native, reference_inputs, mode) if check else None
            if alarm is not None:
                outcome.outcome, outcome.reason = "crash", f"{REFERENCE_UNDEFINED}: {alarm}"
            else:
                schedule_meaning_change(hm, mod["main"], inputs, expected, outcome, mode)
        if outcome.outcome == "wrong":
            # Under check=True every stage up to the one that differs ran clean under the sanitizers:
            # only a pass that changed the meaning is left to look for.
            first = explain_wrong(hm, inputs, outcome, mode) if not check else None
            if first is not None:
                outcome.reason += f"; {FLAGGED_AS_WRITTEN}: {first}"
            elif TVM_FINDING not in outcome.reason:
                meaning_change(hm, inputs, outcome, mode)
    except (UnsupportedConstructError, StageNotEmulatableError) as exc:  # the parameters, at build
        outcome.outcome, outcome.stage, outcome.reason = "refused", outcome.stage or "build", str(exc)
    except Exception as exc:  # the zoo reports every failure rather than stopping at the first
        outcome.outcome, outcome.stage, outcome.reason = "crash", outcome.stage or "build", crash_reason(exc)
        outcome.tvm_failure = outcome.tvm_failure or getattr(exc, "tvm_failure", "")
        if outcome.tvm_failure and outcome.stage == "build":
            outcome.reason += f"; {outcome.tvm_failure}"
    if outcome.outcome == "crash" and not outcome.tvm_failure and HOST_ACCESS in outcome.reason:
        outcome.tvm_failure = host_access_evidence(mod["main"], target) or ""
    if (outcome.outcome in ("crash", "wrong") and not outcome.tvm_failure and outcome.stage.startswith("0 ")
            and NEVER_WRITTEN in outcome.reason):
        # dlight's schedule may read another thread's local memory
        outcome.tvm_failure = ((thread_local_evidence(mod["main"]) if flavour in GPU_FLAVOURS else None)
                               or zero_trip_evidence(mod["main"], inputs, outcome.reason) or "")
    outcome.seconds = time.perf_counter() - start
    return outcome


#: The sanitizers' words for a read of memory that nothing wrote.
NEVER_WRITTEN = "an element of a buffer allocation that was never written"
def run_zoo(flavours=FLAVOURS, mode: str = "fast", progress: Callable[[KernelOutcome], None] | None = None,
            kernels: list | None = None, check: bool = False) -> ZooReport:
    """Check every zoo kernel in every flavour; ``progress(outcome)`` is called after each."""
    report = ZooReport()
    for kernel in kernels if kernels is not None else collect_kernels():
        for flavour in flavours:
            func = kernel.cuda if flavour in GPU_FLAVOURS else kernel.llvm
            if func is None:
                continue
            outcome = check_kernel(kernel.name, func, flavour, mode=mode, reference=kernel.reference, check=check)
            report.outcomes.append(outcome)
            if progress is not None:
                progress(outcome)
    return report


def cli_main(args, models: list | None = None) -> int:
    """``python -m tvm_hybrid_nb zoo``: the table, then every kernel that is not ok; ``models``: the
    ``(name, nn.Module, spec)`` to check instead of the zoo's (``--models``)."""
    flavours = args.flavour or list(FLAVOURS)
    start = time.perf_counter()

    def show(outcome: KernelOutcome) -> None:
        if args.verbose:
            print(f"{outcome.flavour:11s} {outcome.outcome:8s} {outcome.seconds:6.1f} s  {outcome.kernel}", flush=True)

    kernels = collect_kernels(models)
    if args.kernel:
        kernels = [k for k in kernels if any(k.name.startswith(prefix) for prefix in args.kernel)]
    report = run_zoo(flavours, mode=args.mode, progress=show, check=args.check, kernels=kernels)
    print(report.table())
    repeated = sum(o.stages_repeated for o in report.outcomes)
    print(f"\n{len(report.outcomes)} kernel builds, {sum(o.stages_checked for o in report.outcomes)} stages "
          + (f"({repeated} of them the program of an earlier stage, not run again) " if repeated else "")
          + f"compared with the native build in {time.perf_counter() - start:.0f} s ({args.mode} mode"
          + (", sanitizers on" if args.check else "") + ")")
    problems = report.problems()
    if problems:
        print("\nnot ok:")
    for o in problems:
        allowed = " [allowed]" if o.outcome == "refused" and refusal_allowed(o) else ""
        if tvm_finding(o):
            allowed = (" [TVM finding: dlight fails on it]" if o.stage == "schedule"
                       else " [TVM finding: TVM cannot build it]" if o.tvm_failure and o.stage == "build"
                       else " [TVM finding: the kernel itself is wrong]")
        print(f"  {o.flavour} {o.kernel}: {o.outcome}{allowed} at stage {o.stage}: {o.reason}")
        if o.tvm_failure and o.stage not in ("schedule", "build"):
            print(f"    evidence: {o.tvm_failure}")
    return 1 if any(o.outcome in ("crash", "wrong") and not tvm_finding(o) for o in problems) else 0


def add_parser(sub, parents, formatter_class):
    """The ``zoo`` subcommand of the command line."""
    from .zoo_random import FAMILIES, INTEGER_DTYPES

    p = sub.add_parser("zoo", parents=parents, formatter_class=formatter_class,
                       help="emulate every kernel of the real-model zoo at every stage",
                       description="Lower small tvm.relax.frontend.nn models as TVM's backends do, schedule "
                                   "each kernel three ways (none/llvm, dlight.cpu, dlight GPU rules for cuda), "
                                   "emulate every changed stage before MakePackedAPI and compare it with the "
                                   "native llvm build.  Exit status 1 when a kernel crashes or is wrong.  With "
                                   "--tvm-tests PATH: the @T.prim_func definitions of a TVM checkout's tests "
                                   "instead, each against its own native build.")
    p.add_argument("--flavour", action="append", choices=FLAVOURS + OPT_IN_FLAVOURS,
                   help="only this flavour (repeatable); dlight-metal (dlight's GPU rules for metal) only when "
                        "named")
    p.add_argument("--kernel", action="append", metavar="PREFIX",
                   help="only kernels whose name (model.function) starts with PREFIX (repeatable)")
    p.add_argument("--mode", choices=("fast", "exact"), default="fast", help="emulation mode (default fast)")
    p.add_argument("--check", action="store_true", help="run the sanitizers too (an alarm counts as a crash)")
    p.add_argument("--models", metavar="SCRIPT.py",
                   help="your own models instead of the zoo's: SCRIPT.py defines models() returning "
                        "[(name, nn.Module, spec), ...], spec as zoo.collect_kernels takes it")
    p.add_argument("--random", type=int, metavar="N",
                   help="N random models instead of the zoo's (zoo_random): chains of nn operators (fused "
                        "combinations no single-operator model makes), decoder layers or conv nets (--family); "
                        "model rSEED (dSEED, iSEED) replays with --random 1 --seed SEED")
    p.add_argument("--family", choices=FAMILIES, default="chain",
                   help="what --random draws: chains of operators (default), decoder layers (heads, grouped "
                        "kv heads, rope, norms, gated MLPs, a past cache, static or symbolic length), image "
                        "conv nets (convolutions, pooling, group norm, upsampling, static or symbolic size) or "
                        "integer chains (wrap-around, division and remainder, shifts, casts, scans, argmax)")
    p.add_argument("--seed", type=int, default=0, help="the first random model's seed (default 0)")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16") + INTEGER_DTYPES, default=None,
                   help="the random models' dtype (default float32; the integer family draws one per model "
                        "unless an integer dtype is given)")
    p.add_argument("-v", "--verbose", action="store_true", help="print each kernel as it finishes")
    p.set_defaults(func=cli_main)
    return p
