"""The zoo's native reference leaves output elements unwritten: those are not compared.

TVM's llvm build runs a reduction block's init in the first iteration of the reduction loop, so a max
over a zero-size axis never writes its output (the value is whatever the memory held), while dlight's
GPU schedule writes the identity: the zoo compared the GPU schedule's -3.4e38 with the reference's
untouched zeros and said "wrong" (empties.max of probe 14a, dlight-gpu).  roi_align's max over a bin
without samples writes nothing at all, natively and emulated.  A second native run on outputs filled
with another value finds such elements where a stage differs from the reference; they are left out of
the comparison, every other element is still compared.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.zoo_outcomes import UNWRITTEN_NOT_COMPARED


def _row_max(columns: int):
    """relax's max over the last axis of a (3, columns) tensor, as LegalizeOps writes it."""

    @T.prim_func(s_tir=True)
    def row_max(x: T.Buffer((T.int64(3), T.int64(columns)), "float32"), out: T.Buffer((T.int64(3),), "float32")):
        T.func_attr({"op_pattern": 3, "tirx.noalias": True, "global_symbol": "main"})
        for i, k in T.grid(T.int64(3), T.int64(columns)):
            with T.sblock("T_max"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    out[vi] = T.float32(-3.4028234663852886e38)
                out[vi] = T.max(out[vi], x[vi, vk])

    return row_max


@T.prim_func(s_tir=True)
def _positives_doubled(x: T.Buffer((8,), "float32"), out: T.Buffer((8,), "float32")):
    """Writes out[i] only where x[i] > 0 (roi_align's bins without samples are left so)."""
    T.func_attr({"global_symbol": "main"})
    for i in range(8):
        with T.sblock("w"):
            vi = T.axis.remap("S", [i])
            if x[vi] > T.float32(0):
                out[vi] = x[vi] * T.float32(2)


@T.prim_func(s_tir=True)
def _accumulate(x: T.Buffer((4,), "float32"), out: T.Buffer((4,), "float32")):
    T.func_attr({"global_symbol": "main"})
    for i in range(4):
        with T.sblock("acc"):
            vi = T.axis.remap("S", [i])
            out[vi] = out[vi] + x[vi]


def test_native_reduction_over_an_empty_axis_leaves_its_output_unwritten():
    # The TVM behaviour itself: the llvm build never writes `out`.
    lib = tvm.compile(tvm.IRModule({"main": _row_max(0)}), target="llvm")
    out = tvm.runtime.tensor(np.full((3,), 7.0, np.float32))
    lib["main"](tvm.runtime.tensor(np.zeros((3, 0), np.float32)), out)
    np.testing.assert_array_equal(out.numpy(), np.full(3, 7.0, np.float32))


def test_unwritten_reference_elements_are_not_compared_in_any_flavour():
    for flavour in zoo.FLAVOURS:
        outcome = zoo.check_kernel("m.max", _row_max(0), flavour)
        assert outcome.outcome == "ok", (flavour, outcome.reason)
        # the llvm schedules leave `out` as the memory held it, as the reference does: nothing to leave
        # out; dlight's GPU schedule writes the identity, and the 3 unwritten reference elements are left out
        assert (f"{UNWRITTEN_NOT_COMPARED}: 3" in outcome.reason) == (flavour == "dlight-gpu"), outcome.reason
    # dlight's GPU schedule writes the identity of max, as numpy's reduction with an initial value does
    target, mod = zoo.schedule(_row_max(0), "dlight-gpu")
    out = np.zeros((3,), np.float32)
    thn.build(mod, target=target).emulate(np.zeros((3, 0), np.float32), out, stage=0, mode="fast")
    np.testing.assert_array_equal(out, np.max(np.zeros((3, 0), np.float32), axis=1, initial=np.finfo(np.float32).min))


def test_the_mask_is_exactly_the_unwritten_elements():
    x = np.array([1.5, -2.0, 3.25, 0.0, -0.5, 4.0, 7.0, -1.0], np.float32)
    native = thn.build(_positives_doubled)
    args = [x.copy(), np.zeros(8, np.float32)]
    native.run_native(*args)
    [mask] = zoo._unwritten_elements(native, [x, np.zeros(8, np.float32)], native.result_values(args, None))
    np.testing.assert_array_equal(mask, ~(x > 0))
    # written elements: the full second output; a kernel writing all gives no masks
    assert zoo._unwritten_elements(thn.build(_row_max(4)), [np.ones((3, 4), np.float32), np.zeros(3, np.float32)],
                                   [np.ones(3, np.float32)]) is None


def test_written_elements_are_still_compared():
    x = np.array([1.5, -2.0, 3.25, 0.0, -0.5, 4.0, 7.0, -1.0], np.float32)
    hm = thn.build(_positives_doubled)
    unwritten = [~(x > 0)]
    good = zoo.KernelOutcome("none", "m.w", "ok")
    zoo.emulate_stages(hm, [x, np.zeros(8, np.float32)], [np.where(x > 0, 2 * x, 123.0).astype(np.float32)],
                       good, unwritten=unwritten)
    assert good.outcome == "ok", good.reason
    bad = zoo.KernelOutcome("none", "m.w", "ok")
    want = np.where(x > 0, 2 * x, 0).astype(np.float32)
    want[2] = 6.0  # a written element the emulation must not match (2 * 3.25 = 6.5)
    zoo.emulate_stages(hm, [x, np.zeros(8, np.float32)], [want], bad, unwritten=unwritten)
    assert bad.outcome == "wrong" and "(2,)" in bad.reason, bad.reason


def test_a_kernel_that_reads_its_output_first_is_not_taken_for_an_unwritten_one():
    native = thn.build(_accumulate)
    x = np.array([1.5, -2.0, 3.25, 0.5], np.float32)
    args = [x.copy(), np.zeros(4, np.float32)]
    native.run_native(*args)
    np.testing.assert_array_equal(args[1], x)  # independent truth: 0 + x
    assert zoo._unwritten_elements(native, [x, np.zeros(4, np.float32)], native.result_values(args, None)) is None
