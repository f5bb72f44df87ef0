"""Virtual threads (``vthread.x``, MetaSchedule's multi-level tiling) each hold their own copy of a
``local`` buffer, as threads do: after ``CompactBufferAllocation`` an accumulator is indexed per
(vthread, thread), and the emulation once gave every vthread one shared copy (a broadcast error, or
one vthread's sums in the other's results)."""
import numpy as np
import pytest
import tvm
from tvm import s_tir
from tvm.script import tirx as T

import tvm_hybrid_nb as thn


@T.prim_func(s_tir=True)
def matmul(A: T.Buffer((4, 8), "float32"), B: T.Buffer((8, 16), "float32"), C: T.Buffer((4, 16), "float32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    for i, j, k in T.grid(4, 16, 8):
        with T.sblock("C"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]


def _scheduled():
    sch = s_tir.Schedule(matmul)
    block = sch.get_sblock("C")
    i, j, _k = sch.get_loops(block)
    vthread, thread, _inner = sch.split(j, [2, 2, 4])
    sch.bind(i, "blockIdx.x")
    sch.bind(vthread, "vthread.x")
    sch.bind(thread, "threadIdx.x")
    sch.reverse_compute_at(sch.cache_write(block, 0, "local"), thread)
    return sch.mod


def changed_stages(hm) -> list:
    """The input and every changed stage before MakePackedAPI."""
    return [s for s in hm.stages[:hm.packed_api_index] if s.changed or s.index == 0]


def assert_every_stage_multiplies(hm, stages, mode: str) -> None:
    """Each of ``stages`` of a ``matmul`` schedule, with and without the sanitizers, computes A @ B."""
    rng = np.random.default_rng(0)
    a = rng.integers(-4, 5, (4, 8)).astype(np.float32)  # small integers: every order sums exactly
    b = rng.integers(-4, 5, (8, 16)).astype(np.float32)
    for stage in stages:
        for check in (False, True):
            c = np.zeros((4, 16), np.float32)
            hm.emulate(a, b, c, stage=stage.index, mode=mode, check=check)
            np.testing.assert_array_equal(c, a @ b, err_msg=f"{stage.label} check={check}")


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_each_vthread_accumulates_in_its_own_local_copy(mode):
    hm = thn.build(_scheduled(), target="cuda")
    stages = changed_stages(hm)
    assert any(s.name == "s_tir.CompactBufferAllocation" for s in stages)
    assert_every_stage_multiplies(hm, stages, mode)
