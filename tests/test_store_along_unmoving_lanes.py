"""Threads whose store index does not move along one thread axis (``S[ty] = v`` by every ``threadIdx.x``).

TVM's paged-KV merge kernel (``merge_state_inplace``) has every ``threadIdx.x`` of a row read the
row's state and store the merged value from its own register: one element per ``threadIdx.y``, the
same value from each writer.  The lockstep emulation crashed on it (a value with a lane per thread
stored into one element per row); the last writer in thread order is one valid outcome, and the
sanitizer accepts writers that agree and reads that come before the writes.
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError


@T.prim_func(s_tir=True)
def merge_rows_in_place(S: T.Buffer((4,), "float32")):
    T.func_attr({"tirx.is_scheduled": True})
    for ty in T.thread_binding(4, thread="threadIdx.y"):
        for tx in T.thread_binding(4, thread="threadIdx.x"):
            with T.sblock("merge"):
                v = T.sblock_alloc_buffer((1,), "float32", scope="local")
                v[0] = S[ty] * T.float32(2)
                S[ty] = v[0] + T.float32(1)


@T.prim_func(s_tir=True)
def one_writer_per_row(S: T.Buffer((4,), "float32")):
    T.func_attr({"tirx.is_scheduled": True})
    for ty in T.thread_binding(4, thread="threadIdx.y"):
        for tx in T.thread_binding(4, thread="threadIdx.x"):
            with T.sblock("pick"):
                v = T.sblock_alloc_buffer((1,), "float32", scope="local")
                v[0] = T.Cast("float32", ty * 10 + tx)
                if tx == 2:
                    S[ty] = v[0]


@T.prim_func(s_tir=True)
def writers_that_disagree(S: T.Buffer((4,), "float32")):
    T.func_attr({"tirx.is_scheduled": True})
    for ty in T.thread_binding(4, thread="threadIdx.y"):
        for tx in T.thread_binding(4, thread="threadIdx.x"):
            with T.sblock("race"):
                v = T.sblock_alloc_buffer((1,), "float32", scope="local")
                v[0] = T.Cast("float32", tx)
                S[ty] = v[0]


def _stages(hm):
    return [s for s in hm.stages[:hm.packed_api_index] if s.emulatable and (s.changed or s.index == 0)]


@pytest.mark.parametrize("func, want", [(merge_rows_in_place, np.arange(4, dtype=np.float32) * 2 + 1),
                                        (one_writer_per_row, np.arange(4, dtype=np.float32) * 10 + 2)])
def test_rows_stored_by_all_threads_of_the_row_or_by_one_match_numpy_at_every_stage(func, want):
    hm = thn.build(func, target="cuda")
    stages = _stages(hm)
    assert len(stages) > 5
    for stage in stages:
        for mode in ("exact", "fast"):
            for check in (False, True):
                out = hm.emulate(np.arange(4, dtype=np.float32), stage=stage.index, mode=mode, check=check)
                np.testing.assert_array_equal(out, want, err_msg=f"{stage.label} {mode} check={check}")


def test_threads_of_a_row_storing_different_values_keep_the_last_and_race_under_the_sanitizer():
    hm = thn.build(writers_that_disagree, target="cuda")
    for stage in _stages(hm):
        for mode in ("exact", "fast"):
            out = hm.emulate(np.zeros(4, np.float32), stage=stage.index, mode=mode)
            np.testing.assert_array_equal(out, np.full(4, 3, np.float32))  # the last thread's value
            with pytest.raises(EmulationError, match=r"data race on S(_\d+)?\[\d\]"):
                hm.emulate(np.zeros(4, np.float32), stage=stage.index, mode=mode, check=True)


def test_last_lane_along_picks_the_last_writer_of_each_element_in_thread_order():
    from tvm_hybrid_nb import runtime

    rng = np.random.default_rng(0)
    shape = [1] * 12
    shape[1], shape[2], shape[3] = 3, 4, 5  # threadIdx.z, .y, .x lanes
    value = rng.standard_normal(shape).astype(np.float32)
    mask = rng.random(shape) < 0.4
    index = (np.arange(4).reshape([1, 1, 4] + [1] * 9),)  # the store index moves along .y only
    out = runtime.last_lane_along(value, index, (1, 2, 3), mask=mask)
    assert out.shape == tuple(1 if a in (1, 3) else n for a, n in enumerate(shape))
    for y in range(4):
        writers = [(z, x) for z in range(3) for x in range(5) if mask[0, z, y, x].all()]
        if writers:  # the last in thread order (x fastest, then z)
            z, x = max(writers)
            assert out[0, 0, y, 0].item() == value[0, z, y, x].item()
    no_mask = runtime.last_lane_along(value, index, (1, 2, 3))
    np.testing.assert_array_equal(no_mask[0, 0, :, 0].ravel(), value[0, 2, :, 4].ravel())


@T.prim_func(s_tir=True)
def vector_row_from_every_z_thread(A: T.Buffer((16,), "float32"), O: T.Buffer((16,), "float32")):
    T.func_attr({"tirx.is_scheduled": True})
    for tx in T.thread_binding(4, thread="threadIdx.x"):
        for tz in T.thread_binding(4, thread="threadIdx.z"):
            with T.sblock("b"):
                loc = T.sblock_alloc_buffer((4,), "float32", scope="local")
                for v in T.vectorized(4):
                    loc[v] = A[tx * 4 + v] * T.float32(2)
                for v in T.vectorized(4):  # after VectorizeLoop: a ramp index that ignores tz
                    O[tx * 4 + v] = loc[v]


def test_a_vector_store_whose_index_ignores_a_thread_axis_matches_numpy_at_every_stage():
    """TVM's paged-KV decode kernel stores its output row from every threadIdx.z after the
    cross-z reduction; once VectorizeLoop makes the store a vector one, it crashed unchecked."""
    hm = thn.build(vector_row_from_every_z_thread, target="cuda")
    a = np.arange(16, dtype=np.float32)
    stages = [s for s in hm.stages[:hm.packed_api_index] if s.changed or s.index == 0]
    assert any(s.name == "tirx.VectorizeLoop" for s in stages)
    for stage in stages:
        for mode in ("exact", "fast"):
            for check in (False, True):
                out = hm.emulate(a, np.zeros(16, np.float32), stage=stage.index, mode=mode, check=check)
                np.testing.assert_array_equal(out, a * 2, err_msg=f"{stage.label} {mode} check={check}")
