"""Virtual threads of several tags, nested: TVM's Adreno ``Conv2d`` rule binds ``vthread.z`` (8),
``vthread.y`` (1) and ``vthread.x`` (1) around its threads, dlight's ``Matmul`` ``vthread.x`` inside
``vthread.y``.  Every ``vthread*`` tag shares the threads' one vthread lane axis, and an inner tag was
taken for the outer one bound again: refused when the extents differed ("bound again with a
different extent", every Adreno texture-path conv kernel), and with equal extents both variables
were the same lanes, so half of the output was never written (a wrong answer in both modes).  Now
a vthread loop of one iteration is the constant 0, and two nested tags of several virtual threads
each are refused by name until InjectVirtualThread has lowered them."""
import numpy as np
import pytest
from tvm import s_tir

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import StageNotEmulatableError
from test_vthread_local_copies import matmul  # C = A @ B, (4, 8) x (8, 16)


def _scheduled(vz: int, vy: int, vx: int):
    """``j`` split over three nested vthread tags, two threads and the rest serial, with a ``local``
    accumulator per (vthread, thread), as Adreno's Conv2d schedules its output channels."""
    sch = s_tir.Schedule(matmul)
    block = sch.get_sblock("C")
    i, j, _k = sch.get_loops(block)
    z, y, x, thread, _inner = sch.split(j, [vz, vy, vx, 2, None])
    sch.bind(i, "blockIdx.x")
    sch.bind(z, "vthread.z")
    sch.bind(y, "vthread.y")
    sch.bind(x, "vthread.x")
    sch.bind(thread, "threadIdx.x")
    sch.reverse_compute_at(sch.cache_write(block, 0, "local"), thread)
    return sch.mod


def _inputs():
    rng = np.random.default_rng(0)
    a = rng.integers(-4, 5, (4, 8)).astype(np.float32)  # small integers: every order sums exactly
    b = rng.integers(-4, 5, (8, 16)).astype(np.float32)
    return a, b


def _stages(hm):
    return [s for s in hm.stages[:hm.packed_api_index] if s.changed or s.index == 0]


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("extents", [(2, 1, 1), (1, 1, 2), (1, 2, 1)])
def test_nested_vthreads_of_one_thread_each_but_one(mode, extents):
    hm = thn.build(_scheduled(*extents), target="cuda")
    a, b = _inputs()
    stages = _stages(hm)
    assert any(s.name == "s_tir.InjectVirtualThread" for s in stages)
    for stage in stages:
        for check in (False, True):
            c = np.zeros((4, 16), np.float32)
            hm.emulate(a, b, c, stage=stage.index, mode=mode, check=check)
            np.testing.assert_array_equal(c, a @ b, err_msg=f"{stage.label} check={check}")


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_two_nested_vthread_tags_of_several_threads_are_refused_by_name_never_aliased(mode):
    hm = thn.build(_scheduled(1, 2, 2), target="cuda")
    a, b = _inputs()
    injected = False
    for stage in _stages(hm):
        injected = injected or stage.name == "s_tir.InjectVirtualThread"
        c = np.zeros((4, 16), np.float32)
        if injected:  # the virtual threads are unrolled into each thread's code: emulated
            hm.emulate(a, b, c, stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(c, a @ b, err_msg=stage.label)
            continue
        with pytest.raises(StageNotEmulatableError, match=r"vthread\.x nested in vthread\.y"):
            hm.emulate(a, b, c, stage=stage.index, mode=mode, check=True)
    assert injected
