"""Fast mode on several cores: ``T.parallel`` loops in chunks, lane views hoisted out of serial loops."""
from __future__ import annotations

import functools
import os
import re
import threading
import time

import numpy as np
import pytest
from tvm import s_tir, te

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import runtime
from tvm_hybrid_nb.codegen import generate_kernel
from tvm_hybrid_nb.loader import load_kernel


@pytest.fixture
def cores(monkeypatch):
    """Pretend the machine has ``n`` cores (the chunk count follows ``os.sched_getaffinity``)."""
    def set_cores(n):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(n)), raising=False)
    return set_cores


def chunk_threads_alive() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("parallel-chunk")]


def test_chunks_cover_every_iteration_once_across_threads(cores):
    cores(3)
    seen, lock = [], threading.Lock()

    def body(lo, extent):
        with lock:
            seen.append((lo, extent, threading.current_thread().name))

    runtime.parallel_chunks(body, 5, 10, lanes=10, min_lanes=1)
    covered = sorted(i for lo, extent, _ in seen for i in range(lo, lo + extent))
    assert covered == list(range(5, 15))
    assert len(seen) == 3  # one chunk per core
    names = {name for *_, name in seen}
    assert names <= {threading.current_thread().name, "parallel-chunk-1", "parallel-chunk-2"}


def test_a_grid_too_large_for_memory_runs_in_more_chunks_than_threads(cores):
    cores(2)
    seen, lock = [], threading.Lock()

    def body(lo, extent):
        with lock:
            seen.append((lo, extent))

    # 1000 iterations of 4096 lanes each, at most 8192 lanes a chunk: 500 chunks of 2 iterations.
    runtime.parallel_chunks(body, 0, 1000, lanes=1000 * 4096, min_lanes=1, max_lanes=8192)
    assert sorted(seen) == [(lo, 2) for lo in range(0, 1000, 2)]


def test_short_operations_stay_on_one_thread(cores):
    cores(8)
    idents = set()
    runtime.parallel_chunks(lambda lo, n: idents.add(threading.get_ident()), 0, 32, lanes=1 << 15)
    assert idents == {threading.get_ident()}


def test_the_first_failing_chunk_in_order_propagates(cores):
    cores(3)

    def body(lo, extent):
        if lo == 0:
            time.sleep(0.05)  # the caller's chunk finishes last
        elif lo == 3:
            raise ValueError("chunk at 3")
        else:
            raise KeyError("chunk at 6")

    with pytest.raises(ValueError, match="chunk at 3"):
        runtime.parallel_chunks(body, 0, 9, lanes=9, min_lanes=1)
    assert not chunk_threads_alive()


def test_keyboard_interrupt_stops_the_other_chunks(cores):
    cores(2)
    started = threading.Event()

    def body(lo, extent):
        if lo == 0:
            started.wait(5)
            raise KeyboardInterrupt
        started.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # a long chunk: only the interrupt ends it early
            np.add(np.ones(10), 1)

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        runtime.parallel_chunks(body, 0, 2, lanes=2, min_lanes=1)
    assert time.monotonic() - t0 < 10
    assert not chunk_threads_alive()


def test_chunks_keep_the_callers_numpy_errstate(cores):
    cores(2)

    def body(lo, extent):
        if lo == 1:
            np.float32(3e38) * np.float32(10)

    with np.errstate(over="raise"):
        with pytest.raises(FloatingPointError):
            runtime.parallel_chunks(body, 0, 2, lanes=2, min_lanes=1)


def _int_matmul(m: int, n: int, k: int):
    a = te.placeholder((m, k), "int32", name="A")
    b = te.placeholder((k, n), "int32", name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    sch = s_tir.Schedule(te.create_prim_func([a, b, c]))
    i, j, kk = sch.get_loops(sch.get_sblock("C"))
    io, ii = sch.split(i, [None, 8])
    jo, ji = sch.split(j, [None, 8])
    sch.reorder(io, jo, kk, ii, ji)
    sch.parallel(io)
    sch.vectorize(ji)
    return sch


def _int_inputs(hm, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(-1000, 1000, size=p.shape).astype(p.dtype) if not p.is_output
            else np.zeros(p.shape, p.dtype) for p in hm.params]


def test_split_parallel_loop_matches_exact_and_numpy_at_every_chunk_count(cores):
    hm = thn.build(_int_matmul(40, 24, 7))  # io has 5 iterations: chunks of uneven size
    stage = hm.stage(0)
    source = stage.fast_source()
    assert "parallel_chunks(" in source and "Chunks of parallel loop(s) i_0 run on all cores" in source
    a, b, c = _int_inputs(hm)
    expected = a @ b
    exact = hm.emulate(a, b, c.copy()).copy()
    np.testing.assert_array_equal(exact, expected)
    fast = load_kernel(generate_kernel(stage.function, "main", mode="fast").source, "main", label="chunks")
    fast.__globals__["parallel_chunks"] = functools.partial(runtime.parallel_chunks, min_lanes=1)
    for n in (1, 2, 3, 5, 8):
        cores(n)
        out = np.zeros_like(c)
        fast(a, b, out)
        np.testing.assert_array_equal(out, exact, err_msg=f"{n} cores")


def test_threaded_emulation_reports_progress_from_the_caller_and_can_be_interrupted(cores, monkeypatch):
    cores(2)
    hm = thn.build(_int_matmul(256, 256, 8))  # 65536 lanes per statement: two chunks
    a, b, c = _int_inputs(hm, seed=1)
    started = []
    original_start = threading.Thread.start

    def counting_start(thread):
        started.append(thread.name)
        return original_start(thread)

    monkeypatch.setattr(threading.Thread, "start", counting_start)
    reports = []
    out = hm.emulate(a, b, c.copy(), mode="fast",
                     progress=lambda f: reports.append((f, threading.get_ident()))).copy()
    np.testing.assert_array_equal(out, a @ b)
    assert "parallel-chunk-1" in started
    assert reports and {ident for _, ident in reports} == {threading.get_ident()}
    fractions = [f for f, _ in reports]
    assert fractions == sorted(fractions) and fractions[-1] == pytest.approx(1.0)

    def interrupt(fraction):
        if fraction > 0.3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        hm.emulate(a, b, c.copy(), mode="fast", progress=interrupt)
    assert not chunk_threads_alive()
    np.testing.assert_array_equal(hm.emulate(a, b, c.copy(), mode="fast"), a @ b)  # still usable


def test_views_are_hoisted_out_of_serial_loops():
    hm = thn.build(_int_matmul(64, 256, 16))
    source = hm.stage(0).fast_source()
    loop = source.index("for k in range(16):")
    for view in ("C_lanes_memory = lanes_view(C", "A_by_k = lanes_view(A", "B_by_k = lanes_view(B"):
        assert -1 < source.index(view) < loop  # built once, in front of the loop
    # the accumulator, which the loop reaches only through its view, is held contiguous across it
    assert source.index("C_lanes = held_copy(C_lanes_memory)") < loop < source.index("hold_back(C_lanes_memory, C_lanes)")
    # Indexed, not rebuilt, inside the loop (a strided slice that other lanes reuse is copied once a step).
    assert re.search(r"(np\.ascontiguousarray\()?A_by_k\[k\]\)? \* (np\.ascontiguousarray\()?B_by_k\[k\]", source)
    assert "lanes_view" not in source[loop:]


def test_views_proven_in_bounds_only_under_a_branch_stay_in_the_branch():
    from tvm.script import tirx as T

    @T.prim_func
    def guarded(A: T.Buffer((16, 256), "float32"), B: T.Buffer((16, 256), "float32")):
        for k in range(16):
            if k < 4:
                for i in range(256):
                    B[k, i] = A[k * 4 + 3, i]  # row 4k + 3 exists only for k < 4
            else:
                for i in range(256):
                    B[k, i] = B[k - 1, i]  # reads the row before: k stays a serial loop

    hm = thn.build(guarded)
    a = np.random.default_rng(3).random((16, 256), dtype=np.float32)
    expected = np.empty((16, 256), np.float32)
    expected[:4] = a[3:16:4]
    expected[4:] = a[15]
    fast = hm.emulate(a, np.full((16, 256), np.nan, np.float32), mode="fast").copy()
    np.testing.assert_array_equal(fast, expected)
    np.testing.assert_array_equal(hm.emulate(a, np.full((16, 256), np.nan, np.float32)), expected)
    assert "_by_k" not in hm.stage(0).fast_source()


def test_a_value_bound_from_a_hoisted_view_is_a_snapshot():
    from tvm.script import tirx as T

    @T.prim_func
    def snapshot(A: T.Buffer((1, 256), "float32"), B: T.Buffer((16, 256), "float32")):
        for k in range(16):  # writes A[0, i] every iteration: stays serial, A's view is hoisted
            for i in range(256):
                x = T.Bind(A[0, i])
                A[0, i] = A[0, i] + T.float32(1)
                B[k, i] = x  # the value before the update

    hm = thn.build(snapshot)
    assert "A_lanes_memory = lanes_view(A" in hm.stage(0).fast_source()  # (held across k: x must be a copy)
    a = np.random.default_rng(0).random((1, 256), dtype=np.float32)
    expected = np.empty((16, 256), np.float32)
    expected[0] = a[0]
    for k in range(1, 16):
        expected[k] = expected[k - 1] + np.float32(1)
    for mode in ("exact", "fast"):
        _, out = hm.emulate(a.copy(), np.zeros((16, 256), np.float32), mode=mode)  # A and B are written
        np.testing.assert_array_equal(out, expected, err_msg=mode)


def test_sanitizers_record_no_races_for_parallel_loops_proven_independent():
    # What the notebook's button runs (fast, check=True): a parallel loop whose iterations provably
    # touch disjoint memory cannot race, so its accesses are not logged lane by lane (256^3 took
    # 10 s that way).  A loop that is not proven independent still is (tests/test_gpu.py).
    hm = thn.build(_int_matmul(64, 256, 16))
    kernel = hm.stage(0).kernel("fast", check=True)
    assert "log=race_log" not in kernel.source
    a, b, c = _int_inputs(hm, seed=5)
    np.testing.assert_array_equal(hm.emulate(a, b, c.copy(), mode="fast", check=True), a @ b)


def test_chunks_report_the_iterations_done_in_the_calling_thread(cores):
    cores(1)
    reports = []
    runtime.parallel_chunks(lambda lo, n: None, 0, 10, lanes=10, min_lanes=1, max_lanes=2,
                            report=lambda done: reports.append((done, threading.get_ident())))
    assert [d for d, _ in reports] == [2, 4, 6, 8, 10]
    assert {t for _, t in reports} == {threading.get_ident()}


def _fused_spatial_sums(width: int):
    """dlight.cpu's form: one parallel loop over the fused spatial axes of a (4, 8, width) output,
    each dimension indexed by a quotient or remainder of the fused variable, a serial reduction inside
    (``width`` 16: the elements in order are the fused variable itself; 18: the input's rows are
    padded to 18, so its offsets are no strided view)."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def fused(A: T.Buffer((4, 8, width + 2), "float32"), B: T.Buffer((4, 8, 16), "float32")):
        for f in T.parallel(512):
            for k in range(3):
                with T.sblock("sum"):
                    v0 = T.axis.spatial(4, f // 128)
                    v1 = T.axis.spatial(8, f % 128 // 16)
                    v2 = T.axis.spatial(16, f % 16)
                    vk = T.axis.reduce(3, k)
                    with T.init():
                        B[v0, v1, v2] = T.float32(0)
                    B[v0, v1, v2] = B[v0, v1, v2] + A[v0, v1, v2 + vk] * T.Cast("float32", vk + 1)

    return fused


@pytest.mark.parametrize("width", [16, 18])
def test_an_index_of_quotients_and_remainders_of_one_variable_is_a_view_of_the_flat_buffer(width):
    # dlight.cpu's 3 x 3 conv (16 -> 64 channels on 64 x 64) gathered and scattered its 262,144-element
    # accumulator through three index arrays at each of 144 reduction steps: 25 s for the kernel, 18 s
    # with the accumulator (in order, the fused variable itself) as one view.
    hm = thn.build(_fused_spatial_sums(width))
    source = hm.stage(0).fast_source()
    # the chunk's elements of B, in order: one view with a step of one element
    assert re.search(r"B_lanes(_memory)? = lanes_view\(B, \(0, 0, f_lo\), \(\(\d+, f_extent, \(0, 0, 1\)\),\)\)", source), source
    if width == 18:  # the input's offsets are f // 16 * 18 + f % 16 + k: a gather, still exact
        assert "lanes_view(A" not in source
    a = np.random.default_rng(1).standard_normal((4, 8, width + 2)).astype(np.float32)
    want = np.zeros((4, 8, 16), np.float32)
    for k in range(3):
        want = want + a[:, :, k:k + 16] * np.float32(k + 1)
    for mode in ("fast", "exact"):
        for check in (False, True):
            got = hm.emulate(a, np.full((4, 8, 16), np.nan, np.float32), mode=mode, check=check)
            np.testing.assert_array_equal(got, want, err_msg=f"{mode} check={check}")


def test_block_bindings_over_the_lanes_are_computed_once_in_front_of_the_serial_loop():
    # The bindings depend on the lanes (f) only: each of the 3 reduction steps computed them again
    # (dlight.cpu's conv: three integer divisions of 262,144 lanes at each of 144 steps).  vk moves
    # with k and stays inside; a division by a size (n) is never computed where the loop may not run.
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def sums(a: T.handle, b: T.handle, n: T.int32):
        A = T.match_buffer(a, (512, 3), "float32")
        B = T.match_buffer(b, (512,), "float32")
        for f in T.parallel(512):
            for k in range(3):
                with T.sblock("sum"):
                    v0 = T.axis.spatial(512, f // 128 * 128 + f % 128)
                    v1 = T.axis.spatial(512, f // n * n + f % n)
                    vk = T.axis.reduce(3, k)
                    with T.init():
                        B[v0] = T.float32(0)
                    B[v0] = B[v0] + A[v1, vk]

    hm = thn.build(sums)
    source = hm.stage(0).fast_source()
    body = source[source.rindex("def sums"):]
    loop = body.index("for k in range(3):")
    assert -1 < body.index("v0 = ") < loop and body.index("vk = ") > loop, body
    assert body.index("v1 = ") > loop, body  # divides by n
    a = np.random.default_rng(2).standard_normal((512, 3)).astype(np.float32)
    want = a[:, 0] + a[:, 1] + a[:, 2]
    for mode in ("fast", "exact"):
        np.testing.assert_array_equal(hm.emulate(a, np.zeros(512, np.float32), 64, mode=mode), want)
