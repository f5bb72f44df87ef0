"""A GPU schedule that reads another thread's ``local`` memory is TVM's bug, shown by evidence that
does not come from the emulation: the scheduled kernel's loops, block bindings and predicates
evaluated over every thread (``zoo_thread_local``).  dlight's GEMV rule does it on a reduction whose
spatial axes its two rfactor stages fuse in opposite orders: thread ty writes its partial sums at
(ty % 6, ty // 6) and reads them back at (ty // 2, ty % 2)."""
import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import zoo, zoo_models
from tvm_hybrid_nb.errors import EmulationError
from tvm_hybrid_nb.zoo_thread_local import thread_local_evidence


@T.prim_func(s_tir=True)
def head_scores(kv: T.Buffer((T.int64(6), T.int64(2), T.int64(4)), "float32"),
                q: T.Buffer((T.int64(2), T.int64(4)), "float32"), out: T.Buffer((T.int64(6), T.int64(2)), "float32")):
    T.func_attr({"tirx.noalias": True})
    prod = T.sblock_alloc_buffer((T.int64(6), T.int64(2), T.int64(4)))
    for a0, a1, a2 in T.grid(T.int64(6), T.int64(2), T.int64(4)):
        with T.sblock("multiply"):
            v0, v1, v2 = T.axis.remap("SSS", [a0, a1, a2])
            prod[v0, v1, v2] = kv[v0, v1, v2] * q[v1, v2]
    for a0, a1, k in T.grid(T.int64(6), T.int64(2), T.int64(4)):
        with T.sblock("sum"):
            v0, v1, vk = T.axis.remap("SSR", [a0, a1, k])
            with T.init():
                out[v0, v1] = T.float32(0.0)
            out[v0, v1] = out[v0, v1] + prod[v0, v1, vk]


def _two_nests(shift: int, in_select: bool = False):
    """``rf[tx] = A[tx]`` in one thread nest; ``B[tx] = rf[(tx + shift) % 8]`` in another (in a
    Select arm that no thread takes with ``in_select``)."""
    @T.prim_func(s_tir=True)
    def func(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
        T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
        rf = T.sblock_alloc_buffer((8,), scope="local")
        for tx in T.thread_binding(8, thread="threadIdx.x"):
            with T.sblock("copy"):
                v = T.axis.spatial(8, tx)
                rf[v] = A[v]
        for tx in T.thread_binding(8, thread="threadIdx.x"):
            with T.sblock("out"):
                v = T.axis.spatial(8, tx)
                B[v] = T.Select(v < 8, rf[v], rf[(v + shift) % 8]) if in_select else rf[(v + shift) % 8]
    return func


def test_dlight_gemv_reading_another_threads_partial_sums_is_a_tvm_finding():
    for check in (True, False):
        outcome = zoo.check_kernel("evidence.head_scores", head_scores, "dlight-gpu", check=check,
                                   reference=head_scores)
        assert outcome.outcome == ("crash" if check else "wrong") and outcome.stage.startswith("0 "), outcome.reason
        evidence = zoo.tvm_finding(outcome)
        assert evidence is not None and "reads another thread's local memory" in evidence
        assert "threadIdx.y=1) reads out.rf_local[0, 0, 1], which it never writes" in evidence
        assert "(blockIdx.x=0, threadIdx.x=0, threadIdx.y=6) writes that element" in evidence


def test_evidence_only_where_a_thread_reads_what_it_never_wrote():
    assert thread_local_evidence(_two_nests(0)) is None
    assert thread_local_evidence(_two_nests(1, in_select=True)) is None  # an arm's read may be unused
    evidence = thread_local_evidence(_two_nests(1))
    assert "thread (threadIdx.x=0) reads rf[1], which it never writes (thread (threadIdx.x=1)" in evidence
    # The emulation says the same on its own: thread 0 reads its never-written copy of rf[1].
    hm = thn.build(_two_nests(1), target=zoo.cuda_target())
    a = np.arange(8, dtype=np.float32)
    with pytest.raises(EmulationError, match=r"read of rf(_\d+)?\[1\], an element of a buffer allocation that "
                                             r"was never written"):
        hm.emulate(a, np.zeros(8, np.float32), check=True)
    b = np.zeros(8, np.float32)
    thn.build(_two_nests(0), target=zoo.cuda_target()).emulate(a, b, check=True)
    np.testing.assert_array_equal(b, a)


def test_the_depthwise_conv_finding_has_the_same_evidence():
    """The zoo's documented dlight Reduction finding (a depthwise conv2d with channel multiplier 2):
    the evidence, which counts a nest outside a threadIdx loop as run by every thread, finds the read
    of a thread's never-written partial sum that the emulation reports."""
    (kernel,) = [k for k in zoo.collect_kernels([m for m in zoo_models.models() if m[0] == "edge"])
                 if k.name == "edge.fused_conv2d_add1"]
    _target, mod = zoo.schedule(kernel.cuda, "dlight-gpu")
    evidence = thread_local_evidence(mod["main"])
    assert evidence is not None and "reads group_conv2d_nchw_intermediate_local[" in evidence
