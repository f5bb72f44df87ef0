"""``break``/``continue`` in a serial loop inside GPU threads, taken by some threads and not others.

The threads run in lockstep as lanes, so a Python ``break`` would stop every thread.  The loop
keeps a mask of the threads still in the iteration (``going``) and of those that have not left
the loop (``alive``); a thread reaching ``continue`` drops out of the iteration, one reaching
``break`` out of the loop, and the loop ends when no thread is left.
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn


@T.prim_func
def _skip_some_columns(x: T.Buffer((3, 8), "float32"), y: T.Buffer((3, 8), "float32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for b in T.thread_binding(3, thread="threadIdx.x"):
        for j in range(8):
            y[b, j] = T.float32(-1)
            if j % 3 == b:
                continue
            y[b, j] = x[b, j]


@T.prim_func
def _copy_until_a_negative(x: T.Buffer((4, 8), "float32"), y: T.Buffer((4, 8), "float32"),
                           n: T.Buffer((4,), "int32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for t in T.thread_binding(4, thread="threadIdx.x"):
        n[t] = 0
        for j in range(8):
            if x[t, j] < T.float32(0):
                y[t, j] = T.float32(100)
                if j > 0:
                    T.break_loop()
                y[t, j] = T.float32(200)  # only a thread whose first element is negative gets here
            y[t, j] = y[t, j] + x[t, j]
            n[t] = n[t] + 1


def _numpy_copy_until_a_negative(x):
    y, n = np.zeros_like(x), np.zeros(len(x), np.int32)
    for t in range(len(x)):
        for j in range(x.shape[1]):
            if x[t, j] < 0:
                y[t, j] = 100
                if j > 0:
                    break
                y[t, j] = 200
            y[t, j] = y[t, j] + x[t, j]
            n[t] += 1
    return y, n


def _stages(hm):
    return [s for s in hm.stages[:hm.packed_api_index] if s.emulatable and (s.changed or s.index == 0)]


@pytest.mark.parametrize("check", [False, True])
def test_continue_taken_by_some_threads_skips_only_their_iteration(check):
    hm = thn.build(_skip_some_columns, target="cuda")
    x = np.arange(24, dtype=np.float32).reshape(3, 8)
    want = np.where(np.arange(8)[None, :] % 3 == np.arange(3)[:, None], np.float32(-1), x)
    stages = _stages(hm)
    assert len(stages) > 5 and "going" in stages[0].kernel("exact").source
    for stage in stages:
        for mode in ("exact", "fast"):
            out = hm.emulate(x, np.zeros_like(x), stage=stage.index, mode=mode, check=check)
            np.testing.assert_array_equal(out, want, err_msg=f"{stage.label} {mode}")


@pytest.mark.parametrize("check", [False, True])
def test_break_taken_by_some_threads_ends_only_their_loop(check):
    hm = thn.build(_copy_until_a_negative, target="cuda")
    x = np.arange(1, 33, dtype=np.float32).reshape(4, 8)
    x[0, 0] = -1   # negative first: no break, 200 - 1
    x[1, 3] = -2   # breaks at 3
    x[3, 6] = -3   # breaks at 6; row 2 never breaks
    want_y, want_n = _numpy_copy_until_a_negative(x)
    assert list(want_n) == [8, 3, 8, 6]
    stages = _stages(hm)
    assert len(stages) > 5
    for stage in stages:
        for mode in ("exact", "fast"):
            y, n = hm.emulate(x, np.zeros_like(x), np.zeros(4, np.int32), stage=stage.index, mode=mode, check=check)
            np.testing.assert_array_equal(y, want_y, err_msg=f"{stage.label} {mode}")
            np.testing.assert_array_equal(n, want_n, err_msg=f"{stage.label} {mode}")


@T.prim_func
def _halvings_until_one(x: T.Buffer((64,), "int32"), y: T.Buffer((64,), "int32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        v = T.alloc_buffer((1,), "int32", scope="local")
        c = T.alloc_buffer((1,), "int32", scope="local")
        v[0] = x[tx]
        c[0] = 0
        while c[0] < 100:  # differs between threads: each loops on its own
            if v[0] <= 1:
                T.break_loop()
            v[0] = T.shift_right(v[0], 1)
            c[0] = c[0] + 1
        y[tx] = c[0]


@T.prim_func
def _odd_countdown(x: T.Buffer((64,), "int32"), y: T.Buffer((64,), "int32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        v = T.alloc_buffer((1,), "int32", scope="local")
        c = T.alloc_buffer((1,), "int32", scope="local")
        v[0] = x[tx]
        c[0] = 0
        while v[0] > 0:
            v[0] = v[0] - 1
            if v[0] % 2 == 0:
                T.continue_loop()
            c[0] = c[0] + 1
        y[tx] = c[0]


@pytest.mark.parametrize("kernel, truth", [
    (_halvings_until_one, lambda x: np.array([int(v).bit_length() - 1 if v > 1 else 0 for v in x], np.int32)),
    (_odd_countdown, lambda x: np.array([v // 2 if v > 0 else 0 for v in x], np.int32))])
def test_break_and_continue_in_a_while_loop_of_each_thread(kernel, truth):
    hm = thn.build(kernel, target="cuda")
    x = np.random.default_rng(5).integers(-3, 300, 64).astype(np.int32)
    want = truth(x)
    stages = _stages(hm)
    assert len(stages) > 5
    for stage in stages:
        for mode in ("exact", "fast"):
            for check in (False, True):
                y = hm.emulate(x, np.zeros(64, np.int32), stage=stage.index, mode=mode, check=check)
                np.testing.assert_array_equal(y, want, err_msg=f"{stage.label} {mode} check={check}")


@T.prim_func
def _count_up_under_a_flag(x: T.Buffer((64,), "int32"), flag: T.Buffer((1,), "int32"), y: T.Buffer((64,), "int32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        c = T.alloc_buffer((1,), "int32", scope="local")
        c[0] = 0
        while flag[0] > 0:  # the same for every thread: each leaves by its own break
            if c[0] >= x[tx]:
                T.break_loop()
            c[0] = c[0] + 1
        y[tx] = c[0]


def test_break_out_of_a_while_loop_whose_condition_all_threads_share():
    hm = thn.build(_count_up_under_a_flag, target="cuda")
    x = np.random.default_rng(7).integers(-2, 40, 64).astype(np.int32)
    stages = _stages(hm)
    assert len(stages) > 5
    source = stages[0].kernel("exact").source
    assert "while " in source and "alive" in source and "looping" not in source  # the shared condition's loop
    for stage in stages:
        for mode in ("exact", "fast"):
            for check in (False, True):
                y = hm.emulate(x, np.ones(1, np.int32), np.zeros(64, np.int32), stage=stage.index, mode=mode,
                               check=check)
                np.testing.assert_array_equal(y, np.maximum(x, 0), err_msg=f"{stage.label} {mode} check={check}")
