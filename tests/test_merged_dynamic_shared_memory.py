"""Views into one merged dynamic shared allocation, one copy per block lane (fast mode).

``MergeSharedMemoryAllocations`` puts a kernel's ``shared.dyn`` buffers into one byte allocation and
declares each as a view of it, indexed past the view's declared size (``sf[t + 32]`` on a view of
32 floats at offset 0).  The bounds of an access belong to the allocation: with the blocks run as
lanes under ``check=True`` the per-block view stopped at its declared size, a false out-of-bounds
write.  An index past the allocation itself is still out of bounds.
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError


def _gather_through_two_dynamic_buffers(shift: int):
    @T.prim_func
    def main(x: T.Buffer((2, 32), "float32"), idx: T.Buffer((2, 32), "int32"), y: T.Buffer((2, 32), "float32")):
        T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
        for bx in T.thread_binding(2, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                sf = T.alloc_buffer((32,), "float32", scope="shared.dyn")
                si = T.alloc_buffer((32,), "int32", scope="shared.dyn")
                sf[(tx + shift) % 33] = x[bx, tx]  # shift 0: in bounds; 1: thread 31 writes sf[32]
                si[tx] = idx[bx, tx]
                T.tvm_storage_sync("shared.dyn")
                y[bx, tx] = sf[si[31 - tx]]
    return main


def _inputs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 32)).astype(np.float32)
    idx = np.stack([rng.permutation(32), rng.permutation(32)]).astype(np.int32)
    return x, idx


def _stages(hm):
    return [s for s in hm.stages[:hm.packed_api_index] if s.emulatable and (s.changed or s.index == 0)]


@pytest.mark.parametrize("check", [False, True])
def test_views_into_the_merged_allocation_match_numpy_at_every_stage(check):
    hm = thn.build(_gather_through_two_dynamic_buffers(0), target="cuda")
    x, idx = _inputs()
    want = np.take_along_axis(x, idx[:, ::-1], 1)
    stages = _stages(hm)
    assert any(s.name.endswith("MergeSharedMemoryAllocations") for s in stages)
    for stage in stages:
        for mode in ("exact", "fast"):
            y = np.zeros((2, 32), np.float32)
            hm.emulate(x, idx, y, stage=stage.index, mode=mode, check=check)
            np.testing.assert_array_equal(y, want, err_msg=f"{stage.label} {mode}")


def test_an_index_past_the_buffer_is_out_of_bounds_before_the_merge():
    hm = thn.build(_gather_through_two_dynamic_buffers(1), target="cuda")
    x, idx = _inputs()
    for mode in ("exact", "fast"):
        # the thread is named: thread 31 writes sf[(31 + 1) % 33]
        with pytest.raises(EmulationError, match=r"out-of-bounds write of sf\[(\d+, )?32\] \(shape [^)]*\)\) "
                                                 r"at \((blockIdx.x=\d, )?threadIdx.x=31\)"):
            hm.emulate(x, idx, np.zeros((2, 32), np.float32), stage=0, mode=mode, check=True)
