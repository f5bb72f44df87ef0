"""CUDA's ``atomicAdd`` (``tirx.cuda.atomic_add``): the threads' adds applied one after another.

CUDA leaves the order among threads open; for integers every order gives the same element, and each
thread's returned value (what it found) is a distinct step of the count.  The emulation applies the
adds in lane order, so its tickets are one valid outcome.
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError


def _shared_histogram(initialise: bool):
    @T.prim_func
    def main(x: T.Buffer((256,), "int32"), h: T.Buffer((8,), "int32"), ticket: T.Buffer((256,), "int32")):
        T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            sh = T.alloc_buffer((8,), "int32", scope="shared")
            if initialise and tx < 8:
                sh[tx] = 0
            T.tvm_storage_sync("shared")
            for k in range(4):
                ticket[k * 64 + tx] = T.call_intrin("int32", "tirx.cuda.atomic_add",
                                                    T.address_of(sh[x[k * 64 + tx]]), 1)
            T.tvm_storage_sync("shared")
            if tx < 8:
                h[tx] = sh[tx]
    return main


@T.prim_func
def _global_float_sum(x: T.Buffer((4, 64), "float32"), total: T.Buffer((1,), "float32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            T.evaluate(T.call_intrin("float32", "tirx.cuda.atomic_add", T.address_of(total[0]), x[bx, tx]))


def _stages(hm):
    return [s for s in hm.stages[:hm.packed_api_index] if s.emulatable and (s.changed or s.index == 0)]


def test_a_shared_histogram_counts_every_value_and_hands_out_distinct_tickets():
    hm = thn.build(_shared_histogram(True), target="cuda")
    x = np.random.default_rng(0).integers(0, 8, 256).astype(np.int32)
    stages = _stages(hm)
    assert len(stages) > 5
    for stage in stages:
        for mode in ("exact", "fast"):
            for check in (False, True):
                h, ticket = hm.emulate(x, np.zeros(8, np.int32), np.zeros(256, np.int32), stage=stage.index,
                                       mode=mode, check=check)
                np.testing.assert_array_equal(h, np.bincount(x, minlength=8), err_msg=f"{stage.label} {mode}")
                for value in range(8):  # each bin's tickets: 0, 1, ... its count, in some order
                    np.testing.assert_array_equal(np.sort(ticket[x == value]), np.arange((x == value).sum()))


def test_float_atomic_adds_from_every_block_sum_exactly_on_small_integers():
    hm = thn.build(_global_float_sum, target="cuda")
    x = np.random.default_rng(1).integers(-50, 50, (4, 64)).astype(np.float32)
    for stage in _stages(hm):
        for mode in ("exact", "fast"):
            total = hm.emulate(x, np.zeros(1, np.float32), stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(total, [x.sum()], err_msg=f"{stage.label} {mode}")


def test_an_atomic_add_on_never_written_shared_memory_is_reported():
    hm = thn.build(_shared_histogram(False), target="cuda")
    x = np.random.default_rng(0).integers(0, 8, 256).astype(np.int32)
    for mode in ("exact", "fast"):
        with pytest.raises(EmulationError, match=r"atomic add on sh\[[\d, ]+\], an element never written"):
            hm.emulate(x, np.zeros(8, np.int32), np.zeros(256, np.int32), stage=0, mode=mode, check=True)
