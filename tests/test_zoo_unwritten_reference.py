"""The zoo's native reference leaves an output unwritten: a reduction over an empty axis.

TVM's llvm build runs a reduction block's init in the first iteration of the reduction loop, so a max
over a zero-size axis never writes its output (the value is whatever the memory held), while dlight's
GPU schedule writes the identity.  The zoo compared the GPU schedule's -3.4e38 with the reference's
untouched zeros and said "wrong" (empties.max of probe 14a, dlight-gpu); it now sees that the native
reference leaves its output unwritten and says that this is TVM's.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn


@T.prim_func(s_tir=True)
def max_empty(x: T.Buffer((T.int64(3), T.int64(0)), "float32"), out: T.Buffer((T.int64(3),), "float32")):
    T.func_attr({"op_pattern": 3, "tirx.noalias": True})
    for i, k in T.grid(T.int64(3), T.int64(0)):
        with T.sblock("T_max"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                out[vi] = T.float32(-3.4028234663852886e38)
            out[vi] = T.max(out[vi], x[vi, vk])


def test_native_reduction_over_an_empty_axis_leaves_its_output_unwritten():
    # The TVM behaviour itself: the llvm build never writes `out`.
    lib = tvm.compile(tvm.IRModule({"main": max_empty.with_attr("global_symbol", "main")}), target="llvm")
    x = tvm.runtime.tensor(np.zeros((3, 0), np.float32))
    out = tvm.runtime.tensor(np.full((3,), 7.0, np.float32))
    lib["main"](x, out)
    np.testing.assert_array_equal(out.numpy(), np.full(3, 7.0, np.float32))


def test_zoo_names_the_unwritten_reference_as_tvms():
    from tvm_hybrid_nb import zoo
    from tvm_hybrid_nb.zoo_outcomes import tvm_finding

    func = max_empty.with_attr("global_symbol", "main")
    for flavour in zoo.FLAVOURS:
        outcome = zoo.check_kernel("m.max", func, flavour)
        assert outcome.outcome != "wrong", (flavour, outcome.reason)
        assert outcome.outcome == "crash" and "unwritten" in outcome.reason and tvm_finding(outcome), outcome.reason
    # dlight's GPU schedule writes the identity of max, as numpy's reduction with an initial value does
    target, mod = zoo.schedule(func, "dlight-gpu")
    hm = thn.build(mod, target=target)
    out = np.zeros((3,), np.float32)
    hm.emulate(np.zeros((3, 0), np.float32), out, stage=0, mode="fast")
    np.testing.assert_array_equal(out, np.max(np.zeros((3, 0), np.float32), axis=1, initial=np.finfo(np.float32).min))


def test_kernels_that_write_their_outputs_are_not_flagged():
    from tvm_hybrid_nb import zoo

    @T.prim_func(s_tir=True)
    def row_max(x: T.Buffer((T.int64(3), T.int64(4)), "float32"), out: T.Buffer((T.int64(3),), "float32")):
        T.func_attr({"global_symbol": "main"})
        for i, k in T.grid(T.int64(3), T.int64(4)):
            with T.sblock("T_max"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    out[vi] = T.float32(-3.4028234663852886e38)
                out[vi] = T.max(out[vi], x[vi, vk])

    for flavour in zoo.FLAVOURS:
        assert zoo.check_kernel("m.max", row_max, flavour).outcome == "ok", flavour
