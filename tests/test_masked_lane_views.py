"""Accesses under a lane mask as plain reads, views and ``np.copyto`` where the lanes allow it.

A branch whose condition differs between lanes (``if a[i] > 0`` with the iterations ``i`` as lanes)
masks the lanes; it does not constrain the analyzer (only scalar branches do, and every lane takes
those).  So a read the analyzer proves in bounds there is in bounds for the masked-out lanes too,
and reads the array directly (a strided view where the index is affine in the lanes): their
values are never used.  A read in bounds only under the branch's condition (``a[i + 4]`` under
``i < 8188``) keeps the masked ``load``, which must not trap on the lanes past the end.  Before,
every read under a mask went through ``load`` (a third of a 32,000-element GPU top-k's run time
at each stage).  Writes under a mask whose lanes each have an element of their own (a thread's
local copy) go through a view too, ``np.copyto`` where the mask holds; lanes that may share an
element (a row's result raced by its threads) keep the masked ``store``, where the last lane the
mask keeps writes last.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.codegen import plan as P
from tvm_hybrid_nb.errors import EmulationError

N = 8192


@T.prim_func
def masked(a: T.Buffer((N,), "float32"), b: T.Buffer((N,), "float32")):
    for i in range(N):
        if a[i] > T.float32(0):
            b[i] = a[N - 1 - i] * T.float32(2)
        elif i < N - 4:
            b[i] = a[i + 4]
        else:
            b[i] = T.float32(-1)


def _expected(a):
    i = np.arange(N)
    shifted = np.concatenate([a[4:], np.zeros(4, a.dtype)])
    return np.where(a > 0, a[::-1] * np.float32(2), np.where(i < N - 4, shifted, np.float32(-1)))


def test_masked_reads_match_numpy_in_fast_and_exact_mode():
    hm = thn.build(masked, target="llvm")
    loop = next(d for d in hm.stage(0).plan("fast").decisions if d.loop == "i")
    assert loop.strategy == P.LANES, loop.text()
    a = np.random.default_rng(0).standard_normal(N).astype("float32")
    a[-4:] = -1.0  # the last lanes take the branch whose read would be past the end
    for mode in ("fast", "exact"):
        b = np.zeros(N, "float32")
        hm.emulate(a, b, mode=mode)
        np.testing.assert_array_equal(b, _expected(a))


def test_only_the_read_out_of_bounds_for_masked_out_lanes_goes_through_load():
    source = thn.build(masked, target="llvm").stage(0).fast_source()
    main = source[source.index("def masked"):]
    assert "load(a, (i + 4,)" in main and main.count("load(a,") == 1, main


BLOCKS, THREADS = 256, 64


@T.prim_func
def per_thread(a: T.Buffer((BLOCKS, THREADS), "float32"), b: T.Buffer((BLOCKS, THREADS), "float32"),
               c: T.Buffer((BLOCKS,), "float32")):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            acc = T.alloc_buffer((2,), "float32", scope="local")
            acc[0] = T.float32(-1)
            acc[1] = T.float32(0)
            if a[bx, tx] > T.float32(0):
                acc[0] = a[bx, tx] * T.float32(3)
                acc[1] = T.float32(1)
            if tx < THREADS - 4:
                if a[bx, tx] < T.float32(0.5):
                    c[bx] = a[bx, tx]
            b[bx, tx] = acc[0] + acc[1]


def test_masked_writes_of_a_threads_own_copy_and_of_a_raced_row_match_numpy():
    hm = thn.build(per_thread, target="cuda")
    main = hm.stage(0).fast_source()
    assert "np.copyto(lanes_view(acc," in main and "store(acc," not in main, main
    assert "store(c, (bx,)" in main, main  # the row's threads share c[bx]: the masked store
    a = np.random.default_rng(2).standard_normal((BLOCKS, THREADS)).astype("float32")
    kept = (np.arange(THREADS) < THREADS - 4) & (a < 0.5)
    last = np.where(kept.any(axis=1), a[np.arange(BLOCKS), THREADS - 1 - np.argmax(kept[:, ::-1], axis=1)], 0)
    for mode in ("fast", "exact"):
        b, c = np.zeros((BLOCKS, THREADS), "float32"), np.zeros(BLOCKS, "float32")
        hm.emulate(a, b, c, mode=mode)
        np.testing.assert_array_equal(b, np.where(a > 0, a * np.float32(3) + np.float32(1), np.float32(-1)))
        np.testing.assert_array_equal(c, last)  # the last thread the branch keeps, as threads in order


@T.prim_func
def own_scalars(a: T.Buffer((BLOCKS, THREADS), "float32"), limit: T.Buffer((1,), "float32"),
                b: T.Buffer((BLOCKS, THREADS), "float32")):
    for bx in T.thread_binding(BLOCKS, thread="blockIdx.x"):
        for tx in T.thread_binding(THREADS, thread="threadIdx.x"):
            acc = T.alloc_buffer((1,), "float32", scope="local")
            twice = T.alloc_buffer((1,), "float32", scope="local")
            b[bx, tx] = T.float32(-1)
            if a[bx, tx] > T.float32(0):
                acc[0] = a[bx, tx] * T.float32(3)
            if a[bx, tx] > limit[0]:
                twice[0] = acc[0] + acc[0]  # a thread's own memory: a never-written value is carried
                b[bx, tx] = twice[0] - acc[0]


def _checked_run(hm, a, limit):
    b = np.zeros((BLOCKS, THREADS), "float32")
    hm.emulate(a, np.array([limit], "float32"), b, mode="fast", check=True)
    return b


def test_checked_masked_accesses_of_a_threads_own_memory_are_views_that_check_the_kept_lanes():
    """Under ``check=True`` a thread's own scalars read and written under a lane mask (a
    data-dependent branch, a merge path's search loop) are lane views too, the mask passed on:
    only the lanes it keeps must read written elements, and only they are marked written.  Before,
    every such access went through ``access`` (60 % of a 32,000-element GPU top-k's checked run)."""
    hm = thn.build(own_scalars, target="cuda")
    main = hm.stage(0).kernel("fast", check=True).source
    main = main[main.index("def own_scalars"):]
    assert "write_where(lanes_view(acc," in main and "access(acc," not in main, main
    assert "read_or_taint(lanes_view(acc," in main and "mask=" in main, main
    a = np.random.default_rng(3).standard_normal((BLOCKS, THREADS)).astype("float32")
    # Every lane that reads acc wrote it: no alarm, and the values are numpy's.
    np.testing.assert_array_equal(_checked_run(hm, a, 0.0), np.where(a > 0, a * np.float32(3), np.float32(-1)))
    # Lanes with -0.5 < a <= 0 read acc, never written: the first such thread is named.
    with pytest.raises(EmulationError) as raised:
        _checked_run(hm, a, -0.5)
    message = str(raised.value)
    assert "twice[0]" in message or "acc[0]" in message, message
    bx, tx = (int(v) for v in re.search(r"blockIdx\.x=(\d+), threadIdx\.x=(\d+)", message).groups())
    assert -0.5 < a[bx, tx] <= 0, (bx, tx, a[bx, tx], message)
