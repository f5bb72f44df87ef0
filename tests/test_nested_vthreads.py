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
from test_vthread_local_copies import assert_every_stage_multiplies, changed_stages, matmul


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


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("extents", [(2, 1, 1), (1, 1, 2), (1, 2, 1)])
def test_nested_vthreads_of_one_thread_each_but_one(mode, extents):
    hm = thn.build(_scheduled(*extents), target="cuda")
    stages = changed_stages(hm)
    assert any(s.name == "s_tir.InjectVirtualThread" for s in stages)
    assert_every_stage_multiplies(hm, stages, mode)


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_two_nested_vthread_tags_of_several_threads_are_refused_by_name_never_aliased(mode):
    hm = thn.build(_scheduled(1, 2, 2), target="cuda")
    stages = changed_stages(hm)
    injected = next(n for n, s in enumerate(stages) if s.name == "s_tir.InjectVirtualThread")
    for stage in stages[:injected]:
        a, b, c = np.ones((4, 8), np.float32), np.ones((8, 16), np.float32), np.zeros((4, 16), np.float32)
        with pytest.raises(StageNotEmulatableError, match=r"vthread\.x nested in vthread\.y"):
            hm.emulate(a, b, c, stage=stage.index, mode=mode, check=True)
    # From InjectVirtualThread on, the virtual threads are unrolled into each thread's code: emulated.
    assert_every_stage_multiplies(hm, stages[injected:], mode)
