"""Nested unary math stays linear in the script: ``log(exp(log(exp(...))))`` (what a dlight GPU
schedule makes of a CTC forward pass once every step is inlined) once gave each level's operand
twice (for the value and for the NaN check), doubling the script at every level: a 5-element CTC
kernel's stage 0 became 73 MB of Python that took 230 s to generate.  The operand is now given once,
and the NaN operand still comes out as itself."""
import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.zoo import cuda_target

DEPTH = 12


def _nested(depth: int):
    @T.prim_func
    def one(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
        T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
        for i in range(8):
            b[i] = T.exp(a[i])

    body = one.body
    value = body.body.value  # exp(a[i])
    for level in range(depth - 1):
        value = tvm.tirx.log(value) if level % 2 == 0 else tvm.tirx.exp(value)
    store = tvm.tirx.BufferStore(body.body.buffer, value, body.body.indices)
    return one.with_body(tvm.tirx.For(body.loop_var, body.min, body.extent, body.kind, store))


def _reference(a: np.ndarray, depth: int) -> np.ndarray:
    value = np.exp(a.astype(np.float64)).astype(np.float32)
    for level in range(depth - 1):
        fn = np.log if level % 2 == 0 else np.exp
        value = fn(value.astype(np.float64)).astype(np.float32)
    return value


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_nested_math_script_is_linear_in_the_nesting(mode):
    hm = thn.build(_nested(DEPTH), target="llvm")
    script = hm.stage(0).kernel(mode).source
    main = script[script.index("def main"):]
    assert main.count("a[") + main.count("load(a") == 1  # the operand once, at any depth (it was 2**12)
    a = np.linspace(-1, 1, 8).astype(np.float32)
    a[3] = np.nan
    b = np.zeros(8, np.float32)
    hm.emulate(a, b, mode=mode)
    native = np.zeros(8, np.float32)
    hm.run_native(a, native)
    np.testing.assert_array_equal(b, native)  # bit for bit with libm's expf/logf, NaN included
    np.testing.assert_allclose(b[~np.isnan(a)], _reference(a, DEPTH)[~np.isnan(a)], rtol=1e-5)
    assert np.isnan(b[3])


def test_nested_math_on_gpu_threads_with_a_guarded_operand():
    @T.prim_func
    def lse(a: T.Buffer((8,), "float32"), b: T.Buffer((8,), "float32")):
        T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
        for tx in T.thread_binding(8, thread="threadIdx.x"):
            b[tx] = T.log(T.exp(T.log(T.exp(a[tx] - T.max(a[tx], T.if_then_else(1 <= tx, a[tx - 1], T.float32(0)))))))

    hm = thn.build(lse, target=cuda_target())
    a = np.linspace(-2, 2, 8).astype(np.float32)
    prev = np.concatenate([[0], a[:-1]]).astype(np.float32)
    want = a - np.maximum(a, prev)
    for _ in range(2):
        want = np.log(np.exp(want.astype(np.float64)).astype(np.float32).astype(np.float64)).astype(np.float32)
    for mode in ("fast", "exact"):
        script = hm.stage(0).kernel(mode, check=True).source
        assert script[script.index("def main"):].count("tx - 1") == 1
        b = np.zeros(8, np.float32)
        hm.emulate(a, b, mode=mode, check=True)
        np.testing.assert_array_equal(b, want)
