"""Sanitizer: a thread reading a global element that a thread of *another warp* wrote in an earlier
statement, or changing one that another warp read, with no barrier in between, races.

``s_tir.ThreadSync`` plans no barrier for global memory, so the CUDA kernel keeps the race: warps
do not run in lockstep (here 128 threads write ``tmp[t]`` then read ``tmp[127 - t]``).  Threads of
one warp are left to the lockstep TVM's warp-synchronous code relies on (the paged-KV merge kernel),
and a barrier between the statements orders the warps.
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError
from stage_helpers import device_stages


def _reversed_through_global(threads: int, barrier: bool = False):
    @T.prim_func
    def main(x: T.Buffer((2, threads), "float32"), tmp: T.Buffer((2, threads), "float32"),
             y: T.Buffer((2, threads), "float32")):
        T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
        for bx in T.thread_binding(2, thread="blockIdx.x"):
            for tx in T.thread_binding(threads, thread="threadIdx.x"):
                tmp[bx, tx] = x[bx, tx] * T.float32(2)
                if barrier:
                    T.tvm_storage_sync("shared")
                y[bx, tx] = tmp[bx, threads - 1 - tx]
    return main


@T.prim_func
def _every_thread_stores_one_value(x: T.Buffer((64,), "float32"), s: T.Buffer((1,), "float32"),
                                   y: T.Buffer((64,), "float32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        s[0] = x[0] + T.float32(1)  # every warp stores the same value, then reads it
        y[tx] = x[tx] + s[0]


def _inputs(threads):
    x = np.random.default_rng(threads).standard_normal((2, threads)).astype(np.float32)
    return x, np.zeros_like(x), np.zeros_like(x)


def test_a_read_of_another_warps_write_races_at_every_stage():
    hm = thn.build(_reversed_through_global(128), target="cuda")
    stages = device_stages(hm)
    assert len(stages) > 5
    for stage in stages:
        x, tmp, y = _inputs(128)
        hm.emulate(x, tmp, y, stage=stage.index)  # lockstep: the reversed rows land
        np.testing.assert_array_equal(y, (x * np.float32(2))[:, ::-1])
        for mode in ("exact", "fast"):
            with pytest.raises(EmulationError, match=r"data race on tmp(_\d+)?\[[\d, ]+\]: written by thread "
                                                     r"\(threadIdx.x=127\) of warp 3 and read in a later statement "
                                                     r"by thread \(threadIdx.x=0\) of warp 0"):
                hm.emulate(*_inputs(128), stage=stage.index, mode=mode, check=True)


@pytest.mark.parametrize("threads, barrier", [(32, False), (128, True)])
def test_one_warp_or_a_barrier_orders_the_read(threads, barrier):
    hm = thn.build(_reversed_through_global(threads, barrier), target="cuda")
    for stage in device_stages(hm):
        for mode in ("exact", "fast"):
            x, tmp, y = _inputs(threads)
            hm.emulate(x, tmp, y, stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(y, (x * np.float32(2))[:, ::-1], err_msg=f"{stage.label} {mode}")


def test_warps_that_all_store_one_value_then_read_it_do_not_race():
    hm = thn.build(_every_thread_stores_one_value, target="cuda")
    x = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    for stage in device_stages(hm):
        for mode in ("exact", "fast"):
            y = np.zeros(64, np.float32)
            hm.emulate(x, np.zeros(1, np.float32), y, stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(y, x + (x[0] + np.float32(1)), err_msg=f"{stage.label} {mode}")


def _overwrite_what_another_warp_read(threads: int):
    @T.prim_func
    def main(x: T.Buffer((threads,), "float32"), y: T.Buffer((threads,), "float32")):
        T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
        for tx in T.thread_binding(threads, thread="threadIdx.x"):
            y[tx] = x[threads - 1 - tx]  # reads another thread's x ...
            x[tx] = x[tx] * T.float32(2)  # ... which that thread then doubles: no barrier between
    return main


@pytest.mark.parametrize("threads", [32, 128])
def test_overwriting_what_another_warp_read_races(threads):
    hm = thn.build(_overwrite_what_another_warp_read(threads), target="cuda")
    x = np.arange(1, threads + 1, dtype=np.float32)
    for stage in device_stages(hm):
        for mode in ("exact", "fast"):
            y = np.zeros(threads, np.float32)
            args = (x.copy(), y)
            if threads == 32:  # one warp: lockstep, every read before every write
                hm.emulate(*args, stage=stage.index, mode=mode, check=True)
                np.testing.assert_array_equal(y, x[::-1], err_msg=f"{stage.label} {mode}")
                continue
            with pytest.raises(EmulationError, match=r"data race on x(_\d+)?\[\d+\]: read by a thread of warp \d "
                                                     r"and overwritten in a later statement by thread "
                                                     r"\(threadIdx.x=\d+\) of warp \d"):
                hm.emulate(*args, stage=stage.index, mode=mode, check=True)


@T.prim_func
def _reads_a_neighbour_never_written(x: T.Buffer((64,), "float32"), y: T.Buffer((64,), "float32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        sh = T.alloc_buffer((65,), "float32", scope="shared")
        sh[tx] = x[tx]
        T.tvm_storage_sync("shared")
        y[tx] = sh[tx + 1]  # thread 63 reads sh[64], which no thread wrote


def test_a_read_of_never_written_shared_memory_names_the_thread():
    hm = thn.build(_reads_a_neighbour_never_written, target="cuda")
    for mode in ("exact", "fast"):
        with pytest.raises(EmulationError, match=r"read of sh\[[\d, ]*64\], an element of a buffer allocation that "
                                                 r"was never written at \(threadIdx.x=63\)"):
            hm.emulate(np.ones(64, np.float32), np.zeros(64, np.float32), stage=0, mode=mode, check=True)
