"""Sanitizer: a warp's tensor-core store (``tvm_store_matrix_sync``) and the lanes that read the tile back.

The warp stores a tile together, each element by one of its lanes, which one unspecified; a lane
reading the tile back (a kernel's epilogue copying it out) needs the barrier that ``ThreadSync``
puts after the store.  The emulator runs the store as a loop nest in every lane of the warp, so each
lane had written every element itself and a read back without the barrier went unreported.  The
store's elements are now recorded as the warp's (``RaceLog.record(warp_store=True)``): any lane
reading them back before a barrier races with it.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import tirx
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError
from stage_helpers import built_with_thread_sync_followed_by, device_stages


@T.prim_func
def tile_transposed(A: T.Buffer((256,), "float16"), B: T.Buffer((256,), "float16")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 32)
    tile = T.alloc_buffer((256,), "float16", scope="shared")
    acc = T.alloc_buffer((256,), "float16", scope="wmma.accumulator")
    T.tvm_load_matrix_sync(acc.data, 16, 16, 16, 0, T.tvm_access_ptr(T.type_annotation("float16"), A.data, 0, 256, 1),
                           16, "row_major")
    T.tvm_store_matrix_sync(acc.data, 16, 16, 16, 0,
                            T.tvm_access_ptr(T.type_annotation("float16"), tile.data, 0, 256, 2), 16, "col_major")
    for i in range(8):
        B[i * 32 + tx] = tile[i * 32 + tx]  # ThreadSync puts a barrier before this loop


def _drop_barrier_after_tile_store(stmt):
    """``SeqStmt`` mapper: drop the barrier right after a warp's tile store (a ThreadSync that missed it)."""
    seq = list(stmt.seq)
    for i in range(1, len(seq)):
        call = getattr(seq[i], "value", None)
        if (isinstance(call, tvm.ir.Call) and call.op.name == "tirx.tvm_storage_sync"
                and "tvm_store_matrix_sync" in str(seq[i - 1])):
            return tirx.SeqStmt(seq[:i] + seq[i + 1:])
    return stmt


def _built_without_that_barrier(func, target, scope):
    return built_with_thread_sync_followed_by(func, target, scope, _drop_barrier_after_tile_store,
                                              "DropBarrierAfterTileStore")


def test_a_tile_read_back_after_its_barrier_is_clean_and_right_at_every_stage():
    a = np.arange(256, dtype=np.float16) / 8
    hm = thn.build(tile_transposed, target="cuda")
    for stage in device_stages(hm):
        for mode in ("exact", "fast"):
            out = hm.emulate(a, np.zeros(256, np.float16), stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(out, a.reshape(16, 16).T.reshape(-1), err_msg=f"{stage.label} {mode}")


def test_a_tile_read_back_without_a_barrier_after_the_warps_store_is_a_race():
    a = np.arange(256, dtype=np.float16) / 8
    hm = _built_without_that_barrier(tile_transposed, "cuda", "shared")
    stages = device_stages(hm)
    first = next(k for k, s in enumerate(stages) if s.name == "DropBarrierAfterTileStore")
    after = stages[first:]
    assert "tvm_storage_sync" not in hm.stages[after[-1].index].script  # the one barrier was dropped
    for stage in after:
        for mode in ("exact", "fast"):
            with pytest.raises(EmulationError, match=r"data race on tile(_\d+)?\[\d+\]: lanes \(threadIdx.x=\d+\) "
                               r"and \(the warp of threads 0-31, storing a tensor-core tile\)"):
                hm.emulate(a, np.zeros(256, np.float16), stage=stage.index, mode=mode, check=True)


def test_dlights_tensorized_prefill_without_the_barrier_after_its_tile_stores_is_a_race():
    """The real kernel (dlight's Matmul rule, sm_80): each warp stores its output tiles into the pool,
    then the threads copy rows out, with ThreadSync's barrier in between; dropped, that read-back
    was not reported (every lane had run the whole store)."""
    from test_race_in_byte_pools import _tensorized_prefill

    target, mod = _tensorized_prefill("float16")
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((1, 40, 128)).astype(np.float16), rng.standard_normal((128, 128)).astype(np.float16),
            rng.standard_normal((128,)).astype(np.float16), np.zeros((1, 40, 128), np.float16)]
    broken = _built_without_that_barrier(mod["main"], target, "shared.dyn")
    last = broken.packed_api_index - 1
    hm = thn.build(mod["main"], target=target)
    syncs = hm.stages[hm.packed_api_index - 1].script.count("tvm_storage_sync")
    assert broken.stages[last].script.count("tvm_storage_sync") == syncs - 1
    clean = hm.emulate(*[a.copy() for a in args], stage=hm.packed_api_index - 1, mode="fast", check=True)
    np.testing.assert_array_equal(broken.emulate(*[a.copy() for a in args], stage=last, mode="fast"), clean)
    with pytest.raises(EmulationError, match=r"data race on \w+\[\d+\] \(bytes \d+-\d+ of buf_dyn_shmem\): lanes "
                       r"\(.*threadIdx.*\) and \(.*the warp of threads \d+-\d+, storing a tensor-core tile\)"):
        broken.emulate(*args, stage=last, mode="fast", check=True)
