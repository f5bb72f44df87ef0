"""Guarantees of the emulation semantics (issue 11): no crash of the process, no silent wrong
answer, sanitizers that catch bugs without false alarms, generated names that are always valid.

Every expectation is checked against an independent truth: numpy, or TVM's natively compiled
kernel (run in a subprocess where it would kill the process).
"""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
import tvm
from tvm import te, tirx
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError, UndefinedResultError

MODES = ("exact", "fast")
SIGNED = ("int8", "int16", "int32", "int64")
DIVISIONS = {"truncdiv": tirx.truncdiv, "truncmod": tirx.truncmod, "floordiv": tirx.floordiv,
             "floormod": tirx.floormod}


def _binary_kernel(dtype: str, fn, n: int = 4, name: str = "main"):
    a = te.placeholder((n,), dtype, name="A")
    b = te.placeholder((n,), dtype, name="B")
    c = te.compute((n,), lambda i: fn(a[i], b[i]), name="C")
    return thn.build(tvm.IRModule({name: te.create_prim_func([a, b, c])}))


def _changed_stages(hm):
    return [s for s in hm.emulatable_stages if s.changed]


# =========================================================================== crashes
@pytest.mark.parametrize("dtype", SIGNED)
@pytest.mark.parametrize("op", sorted(DIVISIONS))
def test_int_min_divided_by_minus_one_is_flagged_like_division_by_zero(dtype, op):
    hm = _binary_kernel(dtype, DIVISIONS[op])
    low = np.iinfo(dtype).min
    a = np.array([7, -7, low, low], dtype)
    b = np.array([2, 2, 2, -1], dtype)
    for mode in MODES:
        with pytest.raises(EmulationError, match="overflow"):
            hm.emulate(a, b, np.zeros(4, dtype), mode=mode)
    # Without the trapping lane the emulation agrees with the native kernel.
    b[3] = 3
    native = hm.run_native(a, b, np.zeros(4, dtype))
    for mode in MODES:
        np.testing.assert_array_equal(hm.emulate(a, b, np.zeros(4, dtype), mode=mode), native)


_TRAP_SCRIPT = """
import numpy as np, tvm, sys
from tvm import te, tirx
import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError, UndefinedResultError
a = te.placeholder((4,), "int32", name="A"); b = te.placeholder((4,), "int32", name="B")
c = te.compute((4,), lambda i: tirx.truncdiv(a[i], b[i]), name="C")
hm = thn.build([a, b, c])
for x, y in [([1, -2**31, 3, 4], [1, -1, 1, 1]), ([1, 2, 3, 4], [1, 0, 1, 1])]:
    args = (np.array(x, "int32"), np.array(y, "int32"), np.zeros(4, "int32"))
    for call in (hm.run_native, hm.compare):
        try:
            call(*args)
            print("NOT REFUSED", call.__name__)
        except EmulationError as exc:
            assert "\\n" not in str(exc)
            print("REFUSAL", call.__name__)
print("survived", flush=True)
# The truth: the native kernel itself does trap on these inputs (this kills the process).
tensors = [tvm.runtime.tensor(v) for v in (np.array([-2**31] * 4, "int32"), np.array([-1] * 4, "int32"),
                                           np.zeros(4, "int32"))]
hm.native["main"](*tensors)
print("native did not trap", flush=True)
"""


def test_native_kernel_never_runs_on_inputs_whose_emulation_traps():
    proc = subprocess.run([sys.executable, "-c", _TRAP_SCRIPT], capture_output=True, text=True, timeout=300)
    assert "survived" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.count("REFUSAL") == 4 and "NOT REFUSED" not in proc.stdout, proc.stdout
    assert proc.returncode == -signal.SIGFPE, (proc.returncode, proc.stdout)


@T.prim_func
def _while_kernel(A: T.Buffer((8,), "int32"), B: T.Buffer((8,), "int32")):
    T.func_attr({"global_symbol": "main"})
    for i in T.parallel(8):
        B[i] = 0
        while B[i] < A[i]:
            B[i] = B[i] + 1
    for j in range(8):
        acc = T.alloc_buffer((1,), "int32")
        acc[0] = 0
        while acc[0] < 3:
            acc[0] = acc[0] + 1
        B[j] = B[j] + acc[0]


def test_check_true_works_on_a_kernel_with_while_loops_at_every_stage():
    hm = thn.build(_while_kernel)
    a = np.array([0, 5, 1, 7, 2, 0, 3, 4], "int32")
    native = hm.run_native(a, np.zeros(8, "int32"))
    np.testing.assert_array_equal(native, a + 3)
    for stage in _changed_stages(hm):
        for mode in MODES:
            out = hm.emulate(a, np.zeros(8, "int32"), stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(out, native, err_msg=f"{stage.label} {mode}")


def _scale_kernel():
    a = te.placeholder((64,), "float32", name="A")
    b = te.compute((64,), lambda i: a[i] * 2, name="B")
    return thn.build([a, b])


@T.prim_func
def _prefix_sum(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "main"})
    B[0] = A[0]
    for i in range(1, 64):  # a carried dependence: a serial loop (with progress) in both modes
        B[i] = B[i - 1] + A[i]


def test_progress_must_be_callable_and_its_errors_are_the_users():
    hm = thn.build(_prefix_sum)
    a = np.arange(64, dtype="float32")
    with pytest.raises(TypeError, match="progress"):
        hm.emulate(a, np.zeros(64, "float32"), progress=5)
    boom = ValueError("the user's callback failed")

    def callback(fraction):
        raise boom

    for mode in MODES:
        with pytest.raises(ValueError) as info:
            hm.emulate(a, np.zeros(64, "float32"), mode=mode, progress=callback)
        assert info.value is boom


# =========================================================================== silent wrong answers
def test_fast_mode_keeps_if_then_else_lazy():
    x = te.placeholder((16,), "int32", name="X")
    y = te.placeholder((16,), "int32", name="Y")
    z = te.compute((16,), lambda i: tirx.if_then_else(y[i] != 0, tirx.truncdiv(x[i], y[i]), 0), name="Z")
    hm = thn.build([x, y, z])
    xs = np.arange(16, dtype="int32") - 8
    ys = np.array([0, 1, -1, 3] * 4, "int32")
    expected = np.where(ys != 0, np.trunc(xs / np.where(ys == 0, 1, ys)), 0).astype("int32")
    np.testing.assert_array_equal(hm.run_native(xs, ys, np.zeros(16, "int32")), expected)
    for stage in _changed_stages(hm):
        for mode in MODES:
            out = hm.emulate(xs, ys, np.zeros(16, "int32"), stage=stage.index, mode=mode)
            np.testing.assert_array_equal(out, expected, err_msg=f"{stage.label} {mode}")


@T.prim_func
def _guarded_division(X: T.Buffer((16,), "int32"), Y: T.Buffer((16,), "int32"), Z: T.Buffer((16,), "int32")):
    T.func_attr({"global_symbol": "main"})
    for i in range(16):
        Z[i] = 0
        if Y[i] != 0:
            Z[i] = T.truncdiv(X[i], Y[i])


def test_fast_mode_divides_only_in_the_lanes_that_take_the_branch():
    hm = thn.build(_guarded_division)
    xs = np.arange(16, dtype="int32") - 8
    ys = np.array([0, 2, -1, 0] * 4, "int32")
    native = hm.run_native(xs, ys, np.zeros(16, "int32"))
    for mode in MODES:
        np.testing.assert_array_equal(hm.emulate(xs, ys, np.zeros(16, "int32"), mode=mode), native)


_SPECIAL_FLOATS = [np.nan, -np.nan, np.inf, -np.inf, -3e9, 3e9, 5e9, -1.5, 1.5, 1e20, -1e20, 2.0 ** 31,
                   -2.0 ** 31, 2.0 ** 32, 2.0 ** 63, 300.0, -129.0, 255.9, 65536.0, 70000.0, -40000.0, 4e9]


@pytest.mark.parametrize("src", ["float16", "float32", "float64"])
@pytest.mark.parametrize("dst", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"])
def test_float_to_int_casts_of_special_values_are_undefined_results(src, dst):
    """NaN, infinities and out-of-range floats: LLVM calls such casts poison, and the native values
    depend on how LLVM vectorises the loop (its scalar remainder iterations differ).  The emulation
    says which results are undefined (exactly those elements) and keeps one model of the values in
    both modes, bit for bit: that of the native 16-lane vectorised loop."""
    for n, against_native in ((16, True), (100, False)):
        a = te.placeholder((n,), src, name="A")
        c = te.compute((n,), lambda i: a[i].astype(dst), name="C")
        hm = thn.build([a, c])
        with np.errstate(over="ignore", invalid="ignore"):
            x = np.resize(np.array(_SPECIAL_FLOATS, src), n)
            t = np.trunc(x.astype("float64"))
        info = np.iinfo(dst)
        undefined = ~((t >= float(info.min)) & (t < float(info.max + 1)))  # 2**63 is out of int64
        outs = []
        for mode in MODES:
            with pytest.raises(UndefinedResultError, match=f"C\\[{np.flatnonzero(undefined)[0]}\\] is undefined") as caught:
                hm.emulate(x, np.zeros(n, dst), mode=mode)
            np.testing.assert_array_equal(caught.value.undefined[0], undefined)
            outs.append(caught.value.results[0])
        np.testing.assert_array_equal(outs[0].view(f"u{outs[0].itemsize}"), outs[1].view(f"u{outs[1].itemsize}"))
        if against_native:
            np.testing.assert_array_equal(outs[0], hm.run_native(x, np.zeros(n, dst)))
        np.testing.assert_array_equal(outs[0][~undefined], t[~undefined].astype(dst))


def _matmul_kernel(n=8):
    a = te.placeholder((n, n), "float32", name="A")
    b = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return thn.build([a, b, c])


def test_an_output_aliasing_an_input_gets_the_native_runs_answer():
    hm = _matmul_kernel()
    rng = np.random.default_rng(0)
    x0 = rng.integers(-3, 4, (8, 8)).astype("float32")  # small integers: exact sums in any order
    b = rng.integers(-3, 4, (8, 8)).astype("float32")
    x = x0.copy()
    hm.run_native(x, b, x)
    np.testing.assert_array_equal(x, x0 @ b)
    for mode in MODES:
        x = x0.copy()
        hm.emulate(x, b, x, mode=mode)
        np.testing.assert_array_equal(x, x0 @ b, err_msg=mode)


def test_reversal_called_in_place_is_the_same_in_both_modes_and_natively():
    a = te.placeholder((64,), "float32", name="A")
    r = te.compute((64,), lambda i: 2 * a[63 - i], name="B")
    hm = thn.build([a, r])
    x0 = np.arange(64, dtype="float32")
    x = x0.copy()
    hm.run_native(x, x)
    np.testing.assert_array_equal(x, 2 * x0[::-1])
    for mode in MODES:
        x = x0.copy()
        hm.emulate(x, x, mode=mode)
        np.testing.assert_array_equal(x, 2 * x0[::-1], err_msg=mode)
    # A view of the same memory is aliasing too.
    x = x0.copy()
    hm.emulate(x, x[:], mode="fast")
    np.testing.assert_array_equal(x, 2 * x0[::-1])


def test_two_threads_emulating_one_module_each_get_all_their_progress():
    hm = _scale_kernel()
    a = np.arange(64, dtype="float32")
    stage = hm.stages[0]
    serial = []
    hm.emulate(a, np.zeros(64, "float32"), progress=serial.append)
    assert serial and serial[-1] == 1.0
    reports = {1: [], 2: []}
    second_started = threading.Event()

    def first(fraction):
        reports[1].append(fraction)
        second_started.wait(timeout=20)  # the second call starts while this one runs

    def second(fraction):
        reports[2].append(fraction)
        second_started.set()

    threads = [threading.Thread(target=hm.emulate, args=(a, np.zeros(64, "float32")),
                                kwargs={"stage": stage.index, "progress": cb}) for cb in (first, second)]
    threads[0].start()
    while not reports[1]:
        threads[0].join(0.01)
    threads[1].start()
    for t in threads:
        t.join(60)
    assert reports[1] == serial and reports[2] == serial


@T.prim_func
def _racy_shared_write(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32")):
    T.func_attr({"global_symbol": "main"})
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        S = T.alloc_buffer((64,), "float32", scope="shared")
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            S[0] = A[tx]
            B[tx] = S[0]


def test_a_racy_kernel_without_sanitizers_runs_deterministically():
    hm = thn.build(_racy_shared_write, target="cuda")
    a = np.arange(64, dtype="float32") + 1
    for stage in _changed_stages(hm):
        outs = [hm.emulate(a, np.zeros(64, "float32"), stage=stage.index, mode=mode) for mode in MODES]
        # One valid outcome of the race: every thread reads the value one thread wrote.
        assert len(np.unique(outs[0])) == 1 and outs[0][0] in a, stage.label
        np.testing.assert_array_equal(outs[0], outs[1])


@T.prim_func
def _one_thread_writes_one_element(A: T.Buffer((64,), "float32"), B: T.Buffer((1,), "float32")):
    T.func_attr({"global_symbol": "main"})
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            if tx == 5:
                B[0] = A[tx]


def test_a_store_masked_to_one_thread_keeps_that_threads_value():
    """No race: only thread 5 stores (LowerThreadAllreduce writes its result so, from thread 0).
    The other lanes' values must not stand in for it (dlight argmax read thread 63's value)."""
    hm = thn.build(_one_thread_writes_one_element, target="cuda")
    a = np.arange(64, dtype="float32") * 3 + 1
    for stage in _changed_stages(hm):
        for mode in MODES:
            out = hm.emulate(a, np.zeros(1, "float32"), stage=stage.index, mode=mode)
            assert out[0] == a[5], (stage.label, mode, out)


# =========================================================================== sanitizers
def test_many_threads_writing_one_shared_element_is_a_race_at_every_stage():
    hm = thn.build(_racy_shared_write, target="cuda")
    a = np.arange(64, dtype="float32")
    stages = _changed_stages(hm)
    assert any(s.name == "tirx.FlattenBuffer" for s in stages) and any(s.name == "s_tir.ThreadSync" for s in stages)
    for stage in stages:
        for mode in MODES:
            with pytest.raises(EmulationError, match="data race on S"):
                hm.emulate(a, np.zeros(64, "float32"), stage=stage.index, mode=mode, check=True)


def _relax_kernels(model, target):
    """The PrimFuncs of a small relax.frontend.nn model, lowered as TVM's backends do."""
    from tvm import relax
    from tvm.relax.frontend import nn
    from tvm.s_tir import dlight as dl

    mod, _ = model.export_tvm(spec={"forward": {"x": nn.spec.Tensor((4, 64), "float32")}})
    target = tvm.target.Target(target)
    with target:
        for transform in (relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                          relax.transform.FoldConstant(), relax.transform.FuseOps(), relax.transform.FuseTIR()):
            mod = transform(mod)
        rules = ([dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]
                 if target.kind.name == "cuda" else [dl.cpu.GEMV(), dl.cpu.Reduction()])
        mod = dl.ApplyDefaultSchedule(*rules)(mod)
    return [thn.build(tvm.IRModule({gv.name_hint: f.with_attr("global_symbol", gv.name_hint)}), target=target,
                      name=gv.name_hint)
            for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]


def _norm_models():
    from tvm.relax.frontend import nn

    class Softmax(nn.Module):
        def forward(self, x):
            return nn.op.softmax(x, axis=-1)

    class LayerNorm(nn.Module):
        def __init__(self):
            self.norm = nn.LayerNorm(64)

        def forward(self, x):
            return self.norm(x)

    class RMSNorm(nn.Module):
        def __init__(self):
            self.norm = nn.RMSNorm(64, axes=-1)

        def forward(self, x):
            return self.norm(x)

    return {"softmax": Softmax, "layer_norm": LayerNorm, "rms_norm": RMSNorm}


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("model", ["softmax", "layer_norm"])
def test_no_false_alarm_on_lower_thread_allreduce_output(model):
    """dlight's GPU reduction rules lower with LowerThreadAllreduce, whose second warp stage reads
    ``red_buf0`` of threads that never wrote it; those values reach only discarded lanes."""
    (hm,) = _relax_kernels(_norm_models()[model](), {"kind": "cuda", "arch": "sm_80"})
    stages = _changed_stages(hm)
    assert any(s.name == "s_tir.LowerThreadAllreduce" for s in stages)
    args = hm.random_inputs(seed=1)
    first = None
    for stage in stages:
        for mode in MODES:
            work = [a.copy() for a in args]
            hm.emulate(*work, stage=stage.index, mode=mode, check=True)
            (out,) = [w for w, p in zip(work, hm.params) if p.is_output]
            if model == "softmax":
                np.testing.assert_allclose(out, _softmax(args[0 if hm.params[0].name == "x" else 1]),
                                           rtol=1e-5, atol=1e-6)
            first = out if first is None else first
            np.testing.assert_allclose(out, first, rtol=1e-5, atol=1e-6, err_msg=f"{stage.label} {mode}")


def test_parallel_iterations_writing_the_same_value_are_no_race():
    """dlight.cpu's rms_norm copies the weight into a shared buffer in every parallel iteration."""
    (hm,) = _relax_kernels(_norm_models()["rms_norm"](), "llvm")
    args = hm.random_inputs(seed=2)
    for mode in MODES:
        result = hm.compare(*args, mode=mode, check=True)
        assert result.ok, result


@T.prim_func(s_tir=True)
def _parallel_rows_reduced_into_one_block_buffer(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4,), "float32")):
    T.func_attr({"global_symbol": "main"})
    with T.sblock("root"):
        S = T.sblock_alloc_buffer((1,), "float32")
        for p in T.parallel(4):
            for j in range(8):
                with T.sblock("acc"):
                    vp, vj = T.axis.remap("SR", [p, j])
                    with T.init():
                        S[0] = T.float32(0)
                    S[0] = S[0] + A[vp, vj]
            with T.sblock("out"):
                vp = T.axis.spatial(4, p)
                B[vp] = S[0]


def test_a_block_buffer_used_only_inside_a_parallel_loop_is_each_iterations_own():
    """dlight.cpu's rms_norm/group_norm: a root-block temporary that every parallel iteration
    reduces into.  PlanAndUpdateBufferAllocationLocation allocates it inside the loop, so the
    compiled kernel has one per iteration: no race, and each row gets its own sum."""
    hm = thn.build(_parallel_rows_reduced_into_one_block_buffer, target="llvm")
    a = (np.arange(32, dtype="float32").reshape(4, 8) % 5) + 1
    stages = _changed_stages(hm)
    assert any(s.name == "s_tir.PlanAndUpdateBufferAllocationLocation" for s in stages)
    for stage in stages:
        for mode in MODES:
            out = hm.emulate(a, np.zeros(4, "float32"), stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(out, a.sum(axis=1), err_msg=f"{stage.label} {mode}")


@T.prim_func
def _every_thread_copies_one_shared_element_onto_itself(A: T.Buffer((32,), "float32"),
                                                        B: T.Buffer((32,), "float32")):
    T.func_attr({"global_symbol": "main"})
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            S[tx] = A[tx]
            T.evaluate(T.tvm_storage_sync("shared"))
            S[0] = S[0]  # LowerThreadAllreduce's result copy: every thread stores what is there
            B[tx] = S[0]


def test_silent_stores_racing_with_reads_are_no_race():
    """dlight GEMV after LowerThreadAllreduce: ``red_buf0[tx * 16] = red_buf0[tx * 16]`` in every
    threadIdx.y, read by threadIdx.y 0.  The element never changes, so every read sees its value."""
    hm = thn.build(_every_thread_copies_one_shared_element_onto_itself, target="cuda")
    a = np.arange(32, dtype="float32") + 3
    for stage in _changed_stages(hm):
        for mode in MODES:
            out = hm.emulate(a, np.zeros(32, "float32"), stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(out, np.full(32, a[0]), err_msg=f"{stage.label} {mode}")


@T.prim_func
def _uninitialised_lanes_decide_a_select_whose_value_is_discarded(A: T.Buffer((32,), "float32"),
                                                                   B: T.Buffer((32,), "float32")):
    T.func_attr({"global_symbol": "main"})
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            r = T.alloc_buffer((1,), "float32", scope="local")
            t = T.alloc_buffer((1,), "float32", scope="local")
            if tx < 8:
                r[0] = A[tx]
            # garbage in lanes >= 8 only (no load in an arm: RewriteUnsafeSelect keeps it a Select)
            t[0] = T.Select(r[0] > T.float32(0), T.float32(1), T.float32(0))
            if tx < 8:
                B[tx] = t[0]


@T.prim_func
def _uninitialised_select_stored(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
    T.func_attr({"global_symbol": "main"})
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            r = T.alloc_buffer((1,), "float32", scope="local")
            t = T.alloc_buffer((1,), "float32", scope="local")
            if tx < 8:
                r[0] = A[tx]
            t[0] = T.Select(r[0] > T.float32(0), T.float32(1), T.float32(0))
            B[tx] = t[0]  # the garbage-decided value reaches global memory


def test_a_select_decided_by_uninitialised_lanes_only_poisons_its_value():
    """dlight argmax after LowerThreadAllreduce: ``select(red_buf1 > t1 ..., ...)`` reads registers
    that only some threads wrote; as in MemorySanitizer, a Select is no branch: the lanes whose
    condition is uninitialised carry an uninitialised value, an error only where it is used."""
    hm = thn.build(_uninitialised_lanes_decide_a_select_whose_value_is_discarded, target="cuda")
    a = np.arange(32, dtype="float32") - 3
    for stage in _changed_stages(hm):
        for mode in MODES:
            out = hm.emulate(a, np.zeros(32, "float32"), stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(out[:8], (a[:8] > 0).astype("float32"), err_msg=f"{stage.label} {mode}")


@T.prim_func
def _parallel_different_values(A: T.Buffer((4, 8), "float32"), B: T.Buffer((4, 8), "float32")):
    T.func_attr({"global_symbol": "main"})
    S = T.alloc_buffer((8,), "float32")
    for p in T.parallel(4):
        for j in range(8):
            S[j] = A[p, j]
        for j in range(8):
            B[p, j] = S[j]


@T.prim_func
def _uninitialised_local_used(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
    T.func_attr({"global_symbol": "main"})
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            r = T.alloc_buffer((1,), "float32", scope="local")
            t = T.alloc_buffer((1,), "float32", scope="local")
            if tx < 8:
                r[0] = A[tx]
            t[0] = r[0] * T.float32(2)  # threads >= 8 carry garbage: no error yet
            B[tx] = t[0]                 # ... until it reaches global memory


@T.prim_func
def _uninitialised_local_decides_a_branch(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
    T.func_attr({"global_symbol": "main"})
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            r = T.alloc_buffer((1,), "float32", scope="local")
            if tx < 8:
                r[0] = A[tx]
            B[tx] = T.if_then_else(r[0] > T.float32(0), T.float32(1), T.float32(0))


@T.prim_func
def _out_of_bounds(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
    T.func_attr({"global_symbol": "main"})
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            B[tx] = A[tx + 1]


@T.prim_func
def _divergent_barrier(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
    T.func_attr({"global_symbol": "main"})
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            S[tx] = A[tx]
            if tx < 16:
                T.evaluate(T.tvm_storage_sync("shared"))
            B[tx] = S[31 - tx]


@T.prim_func
def _exchange_in_one_statement(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
    T.func_attr({"global_symbol": "main"})
    for bx in T.thread_binding(1, thread="blockIdx.x"):
        S = T.alloc_buffer((32,), "float32", scope="shared")
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            S[tx] = A[tx]
            S[tx] = S[31 - tx]  # no barrier can separate another thread's read from this write
            B[tx] = S[tx]


@pytest.mark.parametrize("kernel,target,message", [
    (_parallel_different_values, "llvm", "data race on S"),
    (_uninitialised_local_used, "cuda", "never written"),
    (_uninitialised_local_decides_a_branch, "cuda", "never written"),
    (_uninitialised_select_stored, "cuda", "never written"),
    (_out_of_bounds, "cuda", "out-of-bounds read of A"),
    (_divergent_barrier, "cuda", "barrier"),
    (_exchange_in_one_statement, "cuda", "data race on S"),
])
def test_each_sanitizer_still_catches_its_planted_bug(kernel, target, message):
    hm = thn.build(kernel, target=target)
    args = hm.random_inputs(seed=0)
    for mode in MODES:
        with pytest.raises(EmulationError, match=message):
            hm.emulate(*[a.copy() for a in args], mode=mode, check=True)


# =========================================================================== names
NAME_CASES = [("ﬁ", "fi", "main"), ("Ⅻ", "XII", "main"), ("x²", "B", "main"), ("A", "B", "ℌ"),
              ("__progress__", "B", "main"), ("truncdiv", "np", "cast"), ("cast", "math", "truncdiv"),
              ("race_log", "load", "access"), ("select", "__name__", "np"), ("A", "B", "_check_divisor")]


@pytest.mark.parametrize("a_name,b_name,func_name", NAME_CASES)
def test_any_names_give_ascii_identifiers_unique_after_nfkc(a_name, b_name, func_name):
    import unicodedata

    a = te.placeholder((4,), "float32", name=a_name)
    # Uses the runtime helpers ``cast`` and ``truncdiv``, which a kernel named so must not shadow.
    b = te.compute((4,), lambda i: tirx.truncdiv(a[i].astype("int32"), i - 5).astype("float32") * 2 + 1,
                   name=b_name)
    func = te.create_prim_func([a, b]).with_attr("global_symbol", func_name)
    hm = thn.build(tvm.IRModule({func_name: func}))
    names = [p.name for p in hm.params]
    for name in names + [hm.name]:
        assert name.isascii() and name.isidentifier() and unicodedata.normalize("NFKC", name) == name
    assert len(set(names)) == 2
    x = np.array([-7.5, 12.0, 3.9, -20.0], "float32")
    native = hm.run_native(x, np.zeros(4, "float32"))
    np.testing.assert_array_equal(native, np.trunc(np.trunc(x) / (np.arange(4) - 5)) * 2 + 1)
    for stage in hm.stages:
        if stage.changed and stage.emulatable:  # truthful: an emulatable stage runs, and right
            for mode in MODES:
                reports = []
                out = hm.emulate(x, np.zeros(4, "float32"), stage=stage.index, mode=mode, progress=reports.append)
                np.testing.assert_array_equal(out, native, err_msg=f"{stage.label} {mode}")
        elif not stage.emulatable:
            assert stage.index >= hm.packed_api_index, stage.reason
    assert hm.stages[0].emulatable


# =========================================================================== adversarial: emulation vs native
def _bits(x):
    x = np.asarray(x)
    return x.view(f"u{x.itemsize}") if x.dtype != np.bool_ else x.view(np.uint8)


def _elementwise(dtype, fn, n, vectorize=False, inputs=1):
    from tvm import s_tir

    tensors = [te.placeholder((n,), dtype, name=name) for name in "AB"[:inputs]]
    out = te.compute((n,), lambda i: fn(*[t[i] for t in tensors], i), name="C")
    sch = s_tir.Schedule(te.create_prim_func(tensors + [out]))
    if vectorize:
        (loop,) = sch.get_loops(sch.get_sblock("C"))
        sch.vectorize(sch.split(loop, [None, 4])[1])
    return thn.build(sch)


def _assert_bit_identical_to_native(hm, args):
    """The input stage and the last emulatable one, both modes: the outputs' bits equal the native
    kernel's."""
    native = hm.run_native(*[a.copy() for a in args])
    native = native if isinstance(native, tuple) else (native,)
    stages = _changed_stages(hm)
    for stage in {stages[0].index: stages[0], stages[-1].index: stages[-1]}.values():
        for mode in MODES:
            got = hm.emulate(*[a.copy() for a in args], stage=stage.index, mode=mode)
            got = got if isinstance(got, tuple) else (got,)
            for g, n in zip(got, native):
                np.testing.assert_array_equal(_bits(g), _bits(n), err_msg=f"{stage.label} {mode}")


_NAN_PAYLOADS = np.array([0x7FC00000, 0xFFC00000, 0x7FC00001, 0xFFC12345, 0x7F800001, 0xFF800001, 0x7FBFFFFF,
                          0x00000000, 0x80000000, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000, 0x00000001,
                          0x80000001, 0x7F7FFFFF], np.uint32).view(np.float32)
_NAN_KERNELS = {
    "negation": lambda x, i: -x,
    "times minus one": lambda x, i: x * tirx.const(-1.0, "float32"),
    "select of a negation": lambda x, i: tirx.Select(x > 0, x, -x),
    "max": lambda x, i: tirx.max(x, tirx.const(0.0, "float32")),
    "min with -0": lambda x, i: tirx.min(x, tirx.const(-0.0, "float32")),
    "float64 round trip": lambda x, i: x.astype("float64").astype("float32"),
    "float16 round trip": lambda x, i: x.astype("float16").astype("float32"),
    "exp of a NaN": lambda x, i: tirx.if_then_else(x != x, tirx.exp(x), x),
    "log of a NaN": lambda x, i: tirx.if_then_else(x != x, tirx.log(x), x),
    "sin of a NaN": lambda x, i: tirx.if_then_else(x != x, tirx.sin(x), x),
    "tanh of a NaN": lambda x, i: tirx.if_then_else(x != x, tirx.tanh(x), x),
    "sigmoid of a NaN": lambda x, i: tirx.if_then_else(x != x, tirx.sigmoid(x), x),
}


@pytest.mark.parametrize("vectorize", [False, True])
@pytest.mark.parametrize("kernel", sorted(_NAN_KERNELS))
def test_nan_payloads_and_signs_are_the_natives_in_both_modes(kernel, vectorize):
    hm = _elementwise("float32", _NAN_KERNELS[kernel], 16, vectorize)
    _assert_bit_identical_to_native(hm, [_NAN_PAYLOADS.copy(), np.zeros(16, "float32")])


def test_float16_nans_and_edges_are_the_natives():
    halves = np.array([0x7E00, 0xFE00, 0x7C01, 0xFC01, 0x7DFF, 0x0001, 0x8000, 0x7BFF, 0xFBFF, 0x3C00, 0x0400, 0x03FF],
                      np.uint16).view(np.float16)
    for fn in (lambda x, i: x.astype("float64"), lambda x, i: -x, lambda x, i: x * x + x,
               lambda x, i: x.astype("float32")):
        _assert_bit_identical_to_native(_elementwise("float16", fn, 12), [halves.copy(), np.zeros(12, "float16")]
                                        if fn(te.placeholder((1,), "float16")[0], 0).ty.dtype == "float16" else
                                        [halves.copy(), np.zeros(12, str(fn(te.placeholder((1,), "float16")[0],
                                                                             0).ty.dtype))])
    doubles = np.array([0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FF0000020000000, 1],
                       np.uint64).view(np.float64)
    hm = _elementwise("float64", lambda x, i: x.astype("float16"), 5)
    _assert_bit_identical_to_native(hm, [doubles.copy(), np.zeros(5, "float16")])
    big = np.array([65504, 65504, 6e-8, -6e-8, 300, 1e-4], "float16")
    hm = _elementwise("float16", lambda a, b, i: a * b + a, 6, inputs=2)
    _assert_bit_identical_to_native(hm, [big.copy(), np.array([16, 32, 6e-8, 6e-8, 300, 1e-4], "float16"),
                                         np.zeros(6, "float16")])


@pytest.mark.parametrize("vectorize", [False, True])
def test_negative_zero_survives_as_natively(vectorize):
    a = np.array([0.0, -0.0, -0.0, 0.0, -0.3, -0.5, 0.4, -0.0], "float32")
    b = np.array([-0.0, 0.0, -0.0, 0.0, -0.0, -1.0, 0.0, 2.0], "float32")
    for fn in (lambda x, y, i: x - y, lambda x, y, i: tirx.Select(x == y, x, y), lambda x, y, i: -x * y,
               lambda x, y, i: tirx.floor(x) * y + tirx.round(x), lambda x, y, i: tirx.max(x, y) + tirx.min(y, x)):
        _assert_bit_identical_to_native(_elementwise("float32", fn, 8, vectorize, inputs=2),
                                        [a.copy(), b.copy(), np.zeros(8, "float32")])


@pytest.mark.parametrize("vectorize", [False, True])
def test_integer_overflow_wraps_as_natively(vectorize):
    cases = [("int32", lambda a, b, i: a + b, [2**31 - 1, -2**31, 5, 7], [1, -1, 2**31 - 1, -2**31]),
             ("int16", lambda a, b, i: a * b, [300, -300, 32767, -32768], [300, 300, 2, -1]),
             ("uint8", lambda a, b, i: a * b - b, [30, 200, 255, 0], [30, 2, 255, 1]),
             ("int8", lambda a, b, i: -a + tirx.abs(b), [-128, 127, 0, -1], [-128, 1, 0, -1]),
             ("int32", lambda a, b, i: i * 1000000007 + a * b, [65536, 1, -65536, 3], [65536, 2, 65536, 4]),
             ("uint16", lambda a, b, i: ~a + b, [0, 1, 65535, 4], [0, 65535, 1, 2])]
    for dtype, fn, x, y in cases:
        _assert_bit_identical_to_native(_elementwise(dtype, fn, 4, vectorize, inputs=2),
                                        [np.array(x, dtype), np.array(y, dtype), np.zeros(4, dtype)])


@T.prim_func
def _index_overflow(A: T.Buffer((16,), "int32"), B: T.Buffer((16,), "int32")):
    T.func_attr({"global_symbol": "main"})
    for i in T.parallel(16):
        B[i] = A[T.floormod(A[i] * 1000003 + i * 7, 16)] + A[i] * A[i] * 65536 + i * 2147483647


def test_index_arithmetic_overflow_wraps_as_natively():
    hm = thn.build(_index_overflow)
    _assert_bit_identical_to_native(hm, [np.arange(16, dtype="int32") * 300007, np.zeros(16, "int32")])


def test_shift_counts_outside_the_bit_width_are_caught_by_the_sanitizer():
    hm = _elementwise("int32", lambda a, b, i: a << b, 4, inputs=2)
    x = np.array([1, -1, 5, -8], "int32")
    in_range = np.array([0, 1, 31, 30], "int32")
    native = hm.run_native(x, in_range, np.zeros(4, "int32"))
    for mode in MODES:
        np.testing.assert_array_equal(hm.emulate(x, in_range, np.zeros(4, "int32"), mode=mode, check=True), native)
        with pytest.raises(EmulationError, match="shift by 32 of a 32-bit integer"):
            hm.emulate(x, np.array([0, 32, 1, 2], "int32"), np.zeros(4, "int32"), mode=mode, check=True)


@T.prim_func
def _shift_by_negative_loop_var(A: T.Buffer((16,), "float32")):
    # TVM's test_left_shift_by_negative_value: a count that is a Python int in exact mode
    T.func_attr({"global_symbol": "main"})
    for i in range(16):
        if T.shift_left(16, -i, dtype="int32") <= 16:
            A[i] = T.float32(0)


def test_a_negative_shift_count_has_numpys_meaning_in_both_modes_and_the_sanitizer_names_it():
    # Python's 16 << -1 raises ValueError("negative shift count"); the exact script crashed there.
    hm = thn.build(_shift_by_negative_loop_var)
    start = np.full(16, 7.0, "float32")
    want = np.where(np.left_shift(np.int32(16), -np.arange(16, dtype="int32")) <= 16, 0.0, 7.0).astype("float32")
    for mode in MODES:
        np.testing.assert_array_equal(hm.emulate(start.copy(), mode=mode), want)
        with pytest.raises(EmulationError, match="shift by -1 of a 32-bit integer"):
            hm.emulate(start.copy(), mode=mode, check=True)


@T.prim_func
def _bools(A: T.Buffer((8,), "bool"), B: T.Buffer((8,), "bool"), C: T.Buffer((8,), "int32")):
    T.func_attr({"global_symbol": "main"})
    for i in T.parallel(8):
        B[i] = T.Or(T.And(A[i], T.Not(A[7 - i])), T.And(T.Not(A[i]), A[7 - i]))
    for i in range(8):
        C[i] = T.Cast("int32", A[i]) + T.Cast("int32", B[i]) * 2 + T.Select(A[i], 5, 6)


def test_bool_buffers_as_natively():
    hm = thn.build(_bools)
    _assert_bit_identical_to_native(hm, [np.array([1, 0, 1, 1, 0, 0, 1, 0], bool), np.zeros(8, bool),
                                         np.zeros(8, "int32")])


@T.prim_func
def _empty_loops(A: T.Buffer((4,), "int32"), B: T.Buffer((4,), "int32")):
    T.func_attr({"global_symbol": "main"})
    for i in range(4):
        B[i] = A[i]
    for j in range(0):
        B[j] = 99
    for k in T.parallel(0):
        B[k] = 98
    for w in T.serial(2, 2):
        B[w] = 96


def test_zero_size_buffers_and_zero_extent_loops_as_natively():
    from tvm import s_tir

    _assert_bit_identical_to_native(thn.build(_empty_loops), [np.arange(4, dtype="int32"), np.zeros(4, "int32")])
    n = te.var("n")
    for schedule in ("serial", "parallel", "vectorize"):
        a = te.placeholder((n,), "float32", name="A")
        c = te.compute((n,), lambda i: a[i] * 2, name="C")
        sch = s_tir.Schedule(te.create_prim_func([a, c]))
        (loop,) = sch.get_loops(sch.get_sblock("C"))
        if schedule == "parallel":
            sch.parallel(loop)
        elif schedule == "vectorize":
            sch.vectorize(sch.split(loop, [None, 4])[1])
        hm = thn.build(sch)
        assert [x.shape for x in hm.random_inputs(sizes={"n": 0})] == [(0,), (0,)]
        for size in (0, 5):
            _assert_bit_identical_to_native(hm, [np.arange(size, dtype="float32"), np.zeros(size, "float32")])
    m = te.var("m")
    a = te.placeholder((4, m), "float32", name="A")
    k = te.reduce_axis((0, m), name="k")
    for reduce in (te.sum, te.max):
        c = te.compute((4,), lambda i: reduce(a[i, k], axis=k), name="C")
        _assert_bit_identical_to_native(thn.build([a, c]), [np.zeros((4, 0), "float32"), np.full(4, 7, "float32")])


@T.prim_func
def _row_double(A: T.Buffer((4, 32), "float32"), B: T.Buffer((4, 32), "float32")):
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            B[bx, tx] = A[bx, tx] * T.float32(2)


def test_a_device_kernel_never_takes_its_host_functions_name():
    """A function named like a builtin (``sum``) becomes ``sum_kernel`` in Python, which is also the
    name TVM gives its device kernel after SplitHostDevice: the host must call the kernel, not itself."""
    hm = thn.build(tvm.IRModule({"sum": _row_double.with_attr("global_symbol", "sum")}), target="cuda")
    a = np.arange(128, dtype="float32").reshape(4, 32)
    split = [s for s in _changed_stages(hm) if s.module_functions]  # host and device functions
    assert split
    for stage in split:
        for mode in MODES:
            np.testing.assert_array_equal(hm.emulate(a, np.zeros((4, 32), "float32"), stage=stage.index, mode=mode),
                                          2 * a, err_msg=f"{stage.label} {mode}")


@pytest.mark.parametrize("fn", ["exp", "log", "sin", "cos"])
def test_float32_math_is_rounded_as_the_natives_libm(fn):
    """numpy's float32 loops are up to 1 ulp off in a third of the values; libm's are correctly
    rounded, which float64 rounded to float32 reproduces (all but a handful of values)."""
    n = 1024
    x = (np.random.default_rng(0).standard_normal(n) * 10).astype("float32")
    x = np.abs(x) + np.float32(0.1) if fn == "log" else x
    hm = _elementwise("float32", lambda v, i: getattr(tirx, fn)(v), n)
    native = hm.run_native(x, np.zeros(n, "float32"))
    outs = [hm.emulate(x, np.zeros(n, "float32"), mode=mode) for mode in MODES]
    np.testing.assert_array_equal(_bits(outs[0]), _bits(outs[1]))
    assert int((_bits(outs[0]) != _bits(native)).sum()) <= n // 50
    np.testing.assert_allclose(outs[0], native, rtol=2e-7, atol=0)


@T.prim_func(s_tir=True)
def _bf16_matmul(a: T.Buffer((4, 16), "bfloat16"), b: T.Buffer((16, 8), "bfloat16"), x: T.Buffer((4,), "float32"),
                 c: T.Buffer((4, 8), "bfloat16"), d: T.Buffer((4,), "float32")):
    acc = T.alloc_buffer((4, 8), "bfloat16")
    for i, j, k in T.grid(4, 8, 16):
        with T.sblock("acc"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                acc[vi, vj] = T.bfloat16(0)
            acc[vi, vj] = acc[vi, vj] + a[vi, vk] * b[vk, vj]
    for i, j in T.grid(4, 8):
        with T.sblock("c"):
            vi, vj = T.axis.remap("SS", [i, j])
            c[vi, vj] = acc[vi, vj] * T.bfloat16(2)
    for i in range(4):
        with T.sblock("d"):
            vi = T.axis.remap("S", [i])
            d[vi] = T.Cast("float32", T.Cast("bfloat16", x[vi]) * a[vi, 0])


def test_bfloat16_arithmetic_on_a_cpu_is_float32_rounded_where_stored_at_every_stage():
    # llvm has no bfloat16 arithmetic: TVM's BF16ComputeLegalize makes it float32, holds the bf16
    # accumulator as float32 and rounds only the stores to bfloat16 parameters (the cast to bfloat16
    # inside d's expression does not round).  The native kernel of every stage computes that.
    import ml_dtypes

    from tvm_hybrid_nb import zoo

    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (4, 16)).astype(ml_dtypes.bfloat16)
    b = rng.uniform(-1, 1, (16, 8)).astype(ml_dtypes.bfloat16)
    x = rng.uniform(-1, 1, 4).astype(np.float32)
    acc = np.zeros((4, 8), np.float32)
    for k in range(16):  # float32 sums in the kernel's order
        acc = acc + a[:, k:k + 1].astype(np.float32) * b[k:k + 1, :].astype(np.float32)
    want_c = (acc * np.float32(2)).astype(ml_dtypes.bfloat16)
    want_d = x * a[:, 0].astype(np.float32)
    assert not np.array_equal(want_d, x.astype(ml_dtypes.bfloat16).astype(np.float32) * a[:, 0].astype(np.float32))
    hm = thn.build(_bf16_matmul)
    for stage in (0, len(hm.stages) // 2):
        c, d = np.zeros((4, 8), ml_dtypes.bfloat16), np.zeros(4, np.float32)
        hm.emulate(a, b, x, c, d, stage=stage, mode="fast")
        np.testing.assert_array_equal(c.view(np.uint16), want_c.view(np.uint16))
        np.testing.assert_array_equal(d, want_d)
    c, d = np.zeros((4, 8), ml_dtypes.bfloat16), np.zeros(4, np.float32)
    hm.run_native(a, b, x, c, d)
    np.testing.assert_array_equal(c.view(np.uint16), want_c.view(np.uint16))
    np.testing.assert_array_equal(d, want_d)
    outcome = zoo.check_kernel("t.bf16", _bf16_matmul, "none")  # every changed stage against the native build
    assert outcome.outcome == "ok" and outcome.stages_checked > 2, outcome


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("op", ["tanh", "sigmoid"])
def test_tanh_and_sigmoid_are_tvms_llvm_formulas_in_the_operand_dtype(dtype, op):
    # TVM's llvm code lowers tanh to (1 - exp(-2x)) / (1 + exp(-2x)) and sigmoid to 1 / (1 + exp(-x)) in
    # x's dtype (LowerIntrin, after the emulated stages): a float16 gelu_tanh's 1 + tanh(x) is 0
    # natively from x = -4.5 on, where the true tanh rounds to -0.9995 (a Gemma MLP's output came out
    # 1.2e-4 instead of 0); the true values differ in the last place for many others.
    a = te.placeholder((512,), dtype, name="A")
    c = te.compute((512,), lambda i: getattr(tirx, op)(a[i]), name="C")
    hm = thn.build([a, c])
    with np.errstate(over="ignore"):
        x = np.concatenate([np.linspace(-12, 12, 500), [0.0, -0.0, 1e-3, -1e-3, 30, -30, np.inf, -np.inf,
                                                          np.nan, 1e-8, -1e-8, 4.5]]).astype(dtype)
    native = hm.run_native(x, np.zeros(512, dtype))
    true = {"tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v))}[op](x[:500].astype(np.float64))
    assert not np.array_equal(native[:500], true.astype(dtype))  # not the correctly rounded values
    for stage in _changed_stages(hm)[:3] + [hm.stages[0]]:
        for mode in MODES:
            got = hm.emulate(x, np.zeros(512, dtype), stage=stage.index, mode=mode)
            np.testing.assert_array_equal(got, native, err_msg=f"{stage.label} {mode}")


def test_ldexp_scales_exactly_as_the_natives_ldexpf_at_every_stage():
    """``ldexp(x, n)`` is exact (a subnormal result rounds once, past the range gives inf or 0):
    numpy's ``ldexp`` is that operation; it was refused."""
    n = 64
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(n) * 1e3).astype("float32")
    x[:4] = [np.nan, -np.inf, 0.0, -0.0]
    e = rng.integers(-160, 140, n).astype("int32")
    a = te.placeholder((n,), "float32", name="A")
    b = te.placeholder((n,), "int32", name="B")
    c = te.compute((n,), lambda i: tirx.ldexp(a[i], b[i]), name="C")
    hm = thn.build(te.create_prim_func([a, b, c]))
    native = hm.run_native(x, e, np.zeros(n, "float32"))
    np.testing.assert_array_equal(_bits(native), _bits(np.ldexp(x, e)))
    assert np.isinf(native).sum() > 4 and ((native != 0) & (np.abs(native) < np.finfo("float32").tiny)).any()
    for stage in _changed_stages(hm):
        for mode in MODES:
            out = hm.emulate(x, e, np.zeros(n, "float32"), stage=stage.index, mode=mode)
            np.testing.assert_array_equal(_bits(out), _bits(native), err_msg=f"{stage.label} {mode}")


def test_exp10_is_ten_to_the_power_rounded_once_on_cuda_and_tvms_formula_on_llvm():
    n = 256
    x = np.linspace(-30, 30, n).astype("float32")
    a = te.placeholder((n,), "float32", name="A")
    c = te.compute((n,), lambda i: tirx.exp10(a[i]), name="C")
    func = te.create_prim_func([a, c])
    want = np.power(10.0, x.astype(np.float64)).astype(np.float32)
    on_cuda = thn.build(func, target="cuda")
    for mode in MODES:
        np.testing.assert_array_equal(on_cuda.emulate(x, np.zeros(n, "float32"), mode=mode), want)
    on_llvm = thn.build(func)  # TVM computes exp(x * ln 10) there: a few ulps from 10 ** x
    native = on_llvm.run_native(x, np.zeros(n, "float32"))
    np.testing.assert_array_equal(_bits(on_llvm.emulate(x, np.zeros(n, "float32"))), _bits(native))
    np.testing.assert_allclose(native, want, rtol=1e-5)
