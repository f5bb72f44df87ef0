#!/usr/bin/env python
"""Benchmark of tvm_hybrid_nb: emulation speed (fast, exact) against native, capture overhead, bisect time.

Run from the repository root::

    python bench/run.py            # full run (a few minutes)
    python bench/run.py --quick    # short run (smaller set, fewer repetitions, 10 s exact budget)
    python bench/run.py --no-cpu --peers --peers-python /tmp/peers-venv/bin/python
                                   # GPU rows only, with numba-cuda's simulator and Triton's interpreter

Prints a table and the targets with PASS/FAIL, writes ``<out>/results.json`` and ``<out>/bench.png``.
See bench/README.md for the method.  Targets are checked here and only here (never in unit tests).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import inspect
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout without installing
    sys.path.insert(0, str(ROOT))
if str(HERE) not in sys.path:  # bench/peers.py
    sys.path.insert(0, str(HERE))

import tvm  # noqa: E402
from tvm import te  # noqa: E402

import tvm_hybrid_nb as thn  # noqa: E402
from tvm_hybrid_nb import examples as ex  # noqa: E402
from tvm_hybrid_nb.bisect import find_first_divergence  # noqa: E402
from tvm_hybrid_nb.errors import EmulationError  # noqa: E402

# Targets of issue 5.
TARGET_FAST_VS_EXACT = 100.0    # 256³ matmul: exact / fast >= 100
TARGET_FAST_VS_NATIVE = 5.0     # 256³ matmul: fast / native <= 5
TARGET_CAPTURE = 1.5            # thn.build / tvm.build <= 1.5
TARGET_BISECT_S = 2.0           # bisect of a 64³ matmul <= 2 s

PV_SCHEDULE = "split 8x8, reorder, parallel, unroll, vectorize"
CACHE_SCHEDULE = "split 16x16, reorder, cache_read A + cache_write C (local), compute_at"


@dataclass
class Case:
    kernel: str
    size: str
    schedule: str
    make: Callable[[], Any]     # -> examples.Example (fresh schedule each call)
    target_256: bool = False    # the case the 256³ targets are checked on
    capture: bool = True        # include in the capture-overhead measurement


def cases(quick: bool) -> list[Case]:
    out = []
    sizes = (128, 256) if quick else (128, 256, 512)
    for n in sizes:
        # building does not depend on the size much: capture overhead is measured up to 256³
        out.append(Case("matmul", f"{n}^3", PV_SCHEDULE, lambda n=n: ex.matmul_parallel_vectorize(n),
                        target_256=(n == 256), capture=(n <= 256)))
        if not quick or n == 128:
            out.append(Case("matmul", f"{n}^3", CACHE_SCHEDULE, lambda n=n: ex.matmul_cache_compute_at(n),
                            capture=(n <= 256)))
    if quick:
        out.append(Case("conv2d", "1x8x16x16, 8 filters 3x3", "pad inlined, split x by 5, vectorize",
                        lambda: ex.conv2d_padded(1, 8, 16, 15, 8)))
        out.append(Case("softmax", "128x256", "split j by 8, vectorize", lambda: ex.softmax(128, 256)))
    else:
        out.append(Case("conv2d", "1x16x30x30, 16 filters 3x3", "pad inlined, split x by 5, vectorize",
                        lambda: ex.conv2d_padded(1, 16, 30, 30, 16)))
        out.append(Case("softmax", "256x512", "split j by 8, vectorize", lambda: ex.softmax(256, 512)))
    return out


# ---------------------------------------------------------------------- timing helpers
def best_of(fn: Callable[[], Any], repeat: int, max_seconds: float = 5.0,
            min_seconds: float = 0.0) -> tuple[float, list[float]]:
    """Best wall time of ``repeat`` calls, more while under ``min_seconds`` in all; stops early once
    ``max_seconds`` are spent."""
    times = []
    spent = 0.0
    while len(times) < repeat or spent < min_seconds:
        start = time.perf_counter()
        fn()
        t = time.perf_counter() - start
        times.append(t)
        spent += t
        if spent >= max_seconds:
            break
    return min(times), times


#: Native and fast mode are both timed as the best call of at least 10 and this many seconds.
TIMING_WINDOW_S = 0.5


def autorange(fn: Callable[[], Any], min_total: float = TIMING_WINDOW_S, min_calls: int = 10,
              max_calls: int = 2000) -> tuple[float, int, float]:
    """Best and median time of many short calls (native kernels): at least ``min_calls`` and
    ``min_total`` seconds.  Returns (best, calls, median)."""
    times = []
    start_all = time.perf_counter()
    while len(times) < max_calls and (len(times) < min_calls or time.perf_counter() - start_all < min_total):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), len(times), statistics.median(times)


class _Abort(Exception):
    """Raised from the progress callback to stop an exact emulation that would exceed the budget."""


def time_exact(hm, arrays, budget: float, probe_min: float = 1.0, stage: int = 0) -> dict:
    """Run exact mode, extrapolating from progress when it would not finish within ``budget`` seconds.

    The progress callback sees the fraction of the outermost loops done.  Once ``probe_min`` seconds
    have passed, the rate between the first and the latest callback gives an estimate of the total;
    when that estimate exceeds the budget (or the run itself does), the callback raises to stop the
    emulation and the estimate is reported, marked as extrapolated.  Otherwise the run completes and
    its time is measured.
    """
    points: list[tuple[float, float]] = []
    state = {"start": 0.0, "estimate": None}

    def progress(fraction: float) -> None:
        now = time.perf_counter()
        points.append((now, float(fraction)))
        elapsed = now - state["start"]
        if len(points) >= 2 and points[-1][1] > points[0][1]:
            rate = (points[-1][0] - points[0][0]) / (points[-1][1] - points[0][1])
            state["estimate"] = rate  # seconds for the whole (fraction 0 → 1)
            if (elapsed >= probe_min and rate > budget) or elapsed > budget:
                raise _Abort()
        elif elapsed > budget:
            raise _Abort()

    state["start"] = time.perf_counter()
    try:
        hm.emulate(*arrays, stage=stage, mode="exact", progress=progress)
    except (EmulationError, _Abort) as exc:
        if not isinstance(exc, _Abort) and not isinstance(exc.__cause__, _Abort):
            raise
        elapsed = time.perf_counter() - state["start"]
        done = points[-1][1] - points[0][1] if len(points) >= 2 else 0.0
        est = state["estimate"]
        return {"seconds": est, "estimated": True, "measured_seconds": elapsed,
                "fraction_timed": done, "progress_calls": len(points),
                "note": (f"extrapolated from {done * 100:.1f}% of the outer loops in {elapsed:.1f} s"
                         if est is not None else f"stopped after {elapsed:.1f} s without a usable estimate")}
    first = time.perf_counter() - state["start"]
    return {"seconds": first, "estimated": False, "measured_seconds": first, "runs": [first],
            "note": "measured (1 run)"}


def output_arrays(hm, arrays):
    return [a for a, p in zip(arrays, hm.params) if p.is_output]


# ---------------------------------------------------------------------- the three measurements
def bench_kernel(case: Case, repeat: int, exact_budget: float, log) -> dict:
    example = case.make()
    hm = thn.build(example.obj)
    arrays = example.inputs(hm, seed=0)
    stage = hm.stages[0]
    row: dict[str, Any] = {"kernel": case.kernel, "size": case.size, "schedule": case.schedule,
                           "example": example.name}

    # First-call codegen + compile of the hybrid source (generate_kernel + exec), per mode.
    for mode in ("fast", "exact"):
        start = time.perf_counter()
        stage.kernel(mode)
        row[f"codegen_{mode}_ms"] = (time.perf_counter() - start) * 1e3

    # Native: raw call on TVM tensors (used for ratios) and run_native (numpy → tvm → numpy).
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
    fn = hm.native[hm.func_name]
    fn(*tensors)  # first call (thread pool start)
    native_raw, calls, native_median = autorange(lambda: fn(*tensors))
    run_native, _ = best_of(lambda: hm.run_native(*[a.copy() for a in arrays]), max(repeat, 5), 2.0)
    native_out = [t.numpy() for t, p in zip(tensors, hm.params) if p.is_output]
    row.update(native_raw_ms=native_raw * 1e3, native_raw_calls=calls, native_median_ms=native_median * 1e3,
               run_native_ms=run_native * 1e3)

    # Fast: warm, timed like native (the first call above compiled the source; one warm-up call first).
    fast_args = [a.copy() for a in arrays]
    hm.emulate(*fast_args, mode="fast")
    fast_best, fast_runs = best_of(lambda: hm.emulate(*fast_args, mode="fast"), max(repeat, 10), 10.0,
                                   min_seconds=TIMING_WINDOW_S)
    fast_out = [a.copy() for a in output_arrays(hm, fast_args)]
    row.update(fast_ms=fast_best * 1e3, fast_median_ms=statistics.median(fast_runs) * 1e3,
               fast_runs_ms=[t * 1e3 for t in fast_runs])
    ref_in = [a for a, p in zip(arrays, hm.params) if not p.is_output]
    expected = example.reference(*[a.copy() for a in ref_in])
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    row["fast_max_abs_err_vs_reference"] = float(max(np.max(np.abs(f.astype(np.float64) - np.asarray(e, np.float64)))
                                                     for f, e in zip(fast_out, expected)))
    row["fast_max_abs_err_vs_native"] = float(max(np.max(np.abs(f.astype(np.float64) - n.astype(np.float64)))
                                                  for f, n in zip(fast_out, native_out)))

    # Exact: measured when it finishes within the budget, else extrapolated from progress.
    exact_args = [a.copy() for a in arrays]
    exact = time_exact(hm, exact_args, exact_budget)
    if not exact["estimated"] and exact["seconds"] < 1.0 and repeat > 1:
        more, runs = best_of(lambda: hm.emulate(*exact_args, mode="exact"), repeat - 1, 3.0)
        exact["runs"] += runs
        exact["seconds"] = min(exact["seconds"], more)
        exact["note"] = f"measured (best of {len(exact['runs'])})"
    if not exact["estimated"]:
        exact_out = output_arrays(hm, exact_args)
        row["fast_bitwise_equal_exact"] = all(np.array_equal(f, e, equal_nan=True)
                                              for f, e in zip(fast_out, exact_out))
    else:
        row["fast_bitwise_equal_exact"] = None
    row["exact_ms"] = exact["seconds"] * 1e3 if exact["seconds"] is not None else None
    row["exact_estimated"] = exact["estimated"]
    row["exact_note"] = exact["note"]
    row["exact_detail"] = {k: v for k, v in exact.items() if k not in ("seconds", "note", "estimated")}
    row["fast_over_native"] = row["fast_ms"] / row["native_raw_ms"]
    row["exact_over_fast"] = row["exact_ms"] / row["fast_ms"] if row["exact_ms"] is not None else None
    row["target_256"] = case.target_256
    log(f"  {case.kernel} {case.size} [{case.schedule}]: native {row['native_raw_ms']:.3f} ms, "
        f"fast {row['fast_ms']:.1f} ms, exact {fmt_ms(row['exact_ms'], row['exact_estimated'])} ({exact['note']})")
    return row


def bench_capture(case_list: list[Case], reps: int, log) -> list[dict]:
    """thn.build vs tvm.tirx.build (what tvm.build runs) on fresh schedules, alternating, median of reps."""
    rows = []
    seen = set()
    for case in case_list:
        key = case.make().name + case.size
        if key in seen:
            continue
        seen.add(key)
        # warm-up of both paths (LLVM initialisation, first-call caches)
        thn.build(case.make().obj)
        tvm.tirx.build(case.make().obj.mod, target="llvm")
        plain, captured, inside = [], [], []
        for _ in range(reps):
            mod = case.make().obj.mod
            start = time.perf_counter()
            tvm.tirx.build(mod, target="llvm")
            plain.append(time.perf_counter() - start)
            sch = case.make().obj
            start = time.perf_counter()
            hm = thn.build(sch, target="llvm")
            captured.append(time.perf_counter() - start)
            inside.append(hm.build_seconds)
        p, c, i = statistics.median(plain), statistics.median(captured), statistics.median(inside)
        rows.append({"kernel": case.kernel, "size": case.size, "schedule": case.schedule, "reps": reps,
                     "tvm_build_ms": p * 1e3, "thn_build_ms": c * 1e3, "thn_build_seconds_attr_ms": i * 1e3,
                     "ratio": c / p, "ratio_pipeline_only": i / p})
        log(f"  {case.kernel} {case.size} [{case.schedule}]: tvm.build {p * 1e3:.1f} ms, "
            f"thn.build {c * 1e3:.1f} ms ({c / p:.2f}x)")
    return rows


def bench_bisect(log) -> dict:
    """find_first_divergence on a 64³ matmul (parallel/vectorize schedule), reference native."""
    params = inspect.signature(find_first_divergence).parameters
    kwargs = {}
    if "mode" in params:
        kwargs["mode"] = "fast"
        mode = "fast"
    else:
        mode = "exact (find_first_divergence has no mode parameter; hm.compare defaults to exact)"

    def fresh():
        hm = thn.build(ex.matmul_parallel_vectorize(64).obj)
        return hm, hm.random_inputs(seed=0)

    hm, arrays = fresh()
    start = time.perf_counter()
    result = find_first_divergence(hm, *arrays, reference="native", **kwargs)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    find_first_divergence(hm, *arrays, reference="native", **kwargs)
    warm = time.perf_counter() - start
    out = {"kernel": "matmul 64^3", "schedule": PV_SCHEDULE, "mode": mode, "cold_s": cold, "warm_s": warm,
           "stages_checked": len(result.checked), "stages_total": len(hm.stages),
           "divergence_found": result.found,
           "per_stage_emulate_ms": [(s.label, r.emulate_seconds * 1e3) for s, r in result.checked]}
    log(f"  cold {cold:.2f} s, warm {warm:.2f} s, {len(result.checked)} stages checked, mode {mode}")

    # For comparison: the same walk done by hand with fast mode (not find_first_divergence itself).
    if "mode" not in params:
        hm, arrays = fresh()
        start = time.perf_counter()
        n = 0
        for s in hm.stages:
            if s.index > 0 and not s.changed:
                continue
            if not s.emulatable:
                continue
            r = hm.compare(*arrays, reference="native", stage=s.index, mode="fast")
            n += 1
            if not r.ok:
                break
        out["manual_fast_walk_cold_s"] = time.perf_counter() - start
        out["manual_fast_walk_stages"] = n
        log(f"  (hand-written fast-mode walk of the same stages: {out['manual_fast_walk_cold_s']:.2f} s)")
    return out


# ---------------------------------------------------------------------- reporting
def fmt_ms(ms, estimated=False) -> str:
    if ms is None:
        return "-"
    text = f"{ms:.3f}" if ms < 1 else f"{ms:.1f}" if ms < 1000 else f"{ms:,.0f}"
    return ("est. " + text) if estimated else text


def fmt_ratio(r, estimated=False) -> str:
    if r is None:
        return "-"
    text = f"{r:.1f}x" if r < 1000 else f"{r:,.0f}x"
    return ("est. " + text) if estimated else text


def table(rows: list[dict]) -> str:
    head = ["kernel", "size", "schedule", "native ms", "run_native ms", "fast ms", "fast median", "exact ms",
            "fast/native", "median/median", "exact/fast"]
    body = [[r["kernel"], r["size"], r["schedule"], fmt_ms(r["native_raw_ms"]), fmt_ms(r["run_native_ms"]),
             fmt_ms(r["fast_ms"]), fmt_ms(r["fast_median_ms"]), fmt_ms(r["exact_ms"], r["exact_estimated"]),
             fmt_ratio(r["fast_over_native"]), fmt_ratio(r["fast_median_ms"] / r["native_median_ms"]),
             fmt_ratio(r["exact_over_fast"], r["exact_estimated"])] for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(b) for b in body])


# ---------------------------------------------------------------------- GPU rows (issue 15)
GPU_MM16_SCHEDULE = "cuda: 16x16 threads, shared A/B tiles"
GPU_MM8_SCHEDULE = "cuda: 8x8 threads, shared A/B tiles, local accumulator"
GPU_SOFTMAX_SCHEDULE = "cuda: 4 kernels, 32 threads/row, cross-thread max/sum"


def gpu_matmul_local_accumulator(n: int, tile: int = 8) -> ex.Example:
    """The shared-tile CUDA matmul with each thread's sum kept in a local (register) accumulator."""
    example = ex.gpu_tiled_matmul(n, tile)
    sch = example.obj
    block = sch.get_sblock("C")
    local = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(local, sch.get_loops(block)[3])  # under (blockIdx.y, blockIdx.x, threadIdx.y, threadIdx.x)
    example.name = "gpu_matmul_local_accumulator"
    return example


@dataclass
class GpuCase:
    kernel: str
    size: str
    schedule: str
    make: Callable[[], Any]             # -> examples.Example for target cuda
    unscheduled: Callable[[], Any]      # -> IRModule: the same TE compute, unscheduled (native llvm build)
    cpu_scheduled: Callable[[], Any]    # -> IRModule: the project's CPU schedule of it (second native column)
    workload: dict                      # the peers' request for the same work


def gpu_cases(quick: bool) -> list[GpuCase]:
    n = 64 if quick else 256
    rows, cols = (64, 128) if quick else (256, 512)
    matmul_plain = lambda: tvm.IRModule({"main": te.create_prim_func(list(ex._matmul_te(n, n, n)))})  # noqa: E731
    matmul_cpu = lambda: ex.matmul_parallel_vectorize(n).obj.mod  # noqa: E731
    softmax_plain = lambda: ex._softmax_schedule(rows, cols).mod  # noqa: E731
    softmax_cpu = lambda: ex.softmax(rows, cols).obj.mod  # noqa: E731
    mm = {"workload": "matmul", "n": n}
    return [
        GpuCase("matmul", f"{n}^3", GPU_MM16_SCHEDULE, lambda: ex.gpu_tiled_matmul(n, 16), matmul_plain,
                matmul_cpu, mm),
        GpuCase("matmul", f"{n}^3", GPU_MM8_SCHEDULE, lambda: gpu_matmul_local_accumulator(n, 8), matmul_plain,
                matmul_cpu, mm),
        GpuCase("softmax", f"{rows}x{cols}", GPU_SOFTMAX_SCHEDULE, lambda: ex.gpu_softmax(rows, cols, 32),
                softmax_plain, softmax_cpu, {"workload": "softmax", "rows": rows, "cols": cols}),
    ]


def last_emulatable_stage(hm):
    """The last stage before MakePackedAPI that emulates (``ConvertSSA`` for these kernels)."""
    return [s for s in hm.stages[:hm.packed_api_index] if s.emulatable][-1]


def time_native_module(mod, arrays, hm) -> dict:
    """Build ``mod`` for llvm and time its raw call on TVM tensors of ``arrays`` (best of many)."""
    lib = tvm.tirx.build(mod, target="llvm")
    fn = lib[hm.func_name]
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(a, dev) for a in arrays]
    fn(*tensors)
    best, calls, median = autorange(lambda: fn(*tensors))
    out = [t.numpy() for t, p in zip(tensors, hm.params) if p.is_output]
    return {"best": best, "median": median, "calls": calls, "fn": fn, "tensors": tensors, "out": out}


def max_err(outs, expected) -> float:
    return float(max(np.max(np.abs(o.astype(np.float64) - np.asarray(e, np.float64))) for o, e in zip(outs, expected)))


def bench_gpu(case: GpuCase, repeat: int, exact_budget: float, log) -> tuple[list[dict], dict]:
    """Stage 0 and the last emulatable stage, fast and exact, against the native llvm build.

    Returns the two rows and what the peer phase needs (module, arrays, stages, native call)."""
    example = case.make()
    hm = thn.build(example.obj, target="cuda")
    arrays = example.inputs(hm, seed=0)
    ref_in = [a for a, p in zip(arrays, hm.params) if not p.is_output]
    expected = example.reference(*[a.copy() for a in ref_in])
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    plain = time_native_module(case.unscheduled(), [a.copy() for a in arrays], hm)
    cpu = time_native_module(case.cpu_scheduled(), [a.copy() for a in arrays], hm)
    rows = []
    stages = [hm.stages[0], last_emulatable_stage(hm)]
    for stage in stages:
        row: dict[str, Any] = {"kernel": case.kernel, "size": case.size, "schedule": case.schedule,
                               "example": example.name, "stage": stage.index, "stage_label": stage.label,
                               "native_ms": plain["best"] * 1e3, "native_median_ms": plain["median"] * 1e3,
                               "native_err_vs_reference": max_err(plain["out"], expected),
                               "native_cpu_schedule_ms": cpu["best"] * 1e3}
        for mode in ("fast", "exact"):
            start = time.perf_counter()
            stage.kernel(mode)
            row[f"codegen_{mode}_ms"] = (time.perf_counter() - start) * 1e3
        fast_args = [a.copy() for a in arrays]
        start = time.perf_counter()
        hm.emulate(*fast_args, stage=stage.index, mode="fast")  # warm-up
        first = time.perf_counter() - start
        # Slow rows (seconds per call) get fewer calls: at most ~3x the first call or 10 s in all.
        fast_best, fast_runs = best_of(lambda: hm.emulate(*fast_args, stage=stage.index, mode="fast"),
                                       max(repeat, 10) if first < 1.0 else max(2, min(repeat, 3)),
                                       max(10.0, 2.5 * first), min_seconds=TIMING_WINDOW_S)
        fast_out = [a.copy() for a in output_arrays(hm, fast_args)]
        row.update(fast_ms=fast_best * 1e3, fast_median_ms=statistics.median(fast_runs) * 1e3,
                   fast_runs_ms=[t * 1e3 for t in fast_runs], fast_err_vs_reference=max_err(fast_out, expected),
                   fast_err_vs_native=max_err(fast_out, plain["out"]))
        exact_args = [a.copy() for a in arrays]
        exact = time_exact(hm, exact_args, exact_budget, stage=stage.index)
        if not exact["estimated"] and exact["seconds"] < 1.0 and repeat > 1:
            more, runs = best_of(lambda: hm.emulate(*exact_args, stage=stage.index, mode="exact"), repeat - 1, 3.0)
            exact["runs"] += runs
            exact["seconds"] = min(exact["seconds"], more)
            exact["note"] = f"measured (best of {len(exact['runs'])})"
        row["fast_bitwise_equal_exact"] = (None if exact["estimated"] else
                                           all(np.array_equal(f, e, equal_nan=True)
                                               for f, e in zip(fast_out, output_arrays(hm, exact_args))))
        row["exact_ms"] = exact["seconds"] * 1e3 if exact["seconds"] is not None else None
        row["exact_estimated"] = exact["estimated"]
        row["exact_note"] = exact["note"]
        row["fast_over_native"] = row["fast_ms"] / row["native_ms"]
        row["exact_over_fast"] = row["exact_ms"] / row["fast_ms"] if row["exact_ms"] is not None else None
        rows.append(row)
        log(f"  {case.kernel} {case.size} [{case.schedule}] stage {stage.index} ({stage.label}): native "
            f"{row['native_ms']:.3f} ms, fast {row['fast_ms']:.1f} ms, exact "
            f"{fmt_ms(row['exact_ms'], row['exact_estimated'])} ({exact['note']}), fast==exact "
            f"{row['fast_bitwise_equal_exact']}")
    return rows, {"hm": hm, "arrays": arrays, "stages": stages, "native": plain}


YES_NO = {True: "yes", False: "NO", None: "-"}


def gpu_table(rows: list[dict]) -> str:
    head = ["kernel", "size", "schedule", "stage", "fast ms", "fast median", "exact ms", "native ms",
            "native (CPU sched) ms", "fast/native", "fast/native (CPU sched)", "exact/fast", "fast==exact"]
    body = [[r["kernel"], r["size"], r["schedule"], f"{r['stage']} {r['stage_label'].split()[-1]}",
             fmt_ms(r["fast_ms"]), fmt_ms(r["fast_median_ms"]), fmt_ms(r["exact_ms"], r["exact_estimated"]),
             fmt_ms(r["native_ms"]), fmt_ms(r["native_cpu_schedule_ms"]), fmt_ratio(r["fast_over_native"]),
             fmt_ratio(r["fast_ms"] / r["native_cpu_schedule_ms"]),
             fmt_ratio(r["exact_over_fast"], r["exact_estimated"]),
             YES_NO[r["fast_bitwise_equal_exact"]]] for r in rows]
    return _format_table(head, body)


def _format_table(head, body) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(b) for b in body])


# ---------------------------------------------------------------------- peers (numba-cuda simulator, Triton)
class PeerProcess:
    """One ``bench/peers.py serve PEER`` process: the peer's environment variable is set there only."""

    def __init__(self, name: str, python: str, log_dir: Path):
        from peers import PEER_ENV  # bench/peers.py: numpy only

        env = os.environ.copy()
        env.pop("PYTHONPATH", None)  # the peers' python has its own site-packages
        env.update(PEER_ENV[name])
        self.name = name
        self.stderr = open(log_dir / f"peer-{name}.log", "w")
        try:
            self.proc = subprocess.Popen([python, str(HERE / "peers.py"), "serve", name], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=env)
        except OSError:
            self.stderr.close()
            raise

    def request(self, **req) -> dict:
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError) as exc:
            return {"ok": False, "error": f"peer process: {exc}"}
        if not line:
            return {"ok": False, "error": f"peer process exited (see {self.stderr.name})"}
        return json.loads(line)

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()
        self.stderr.close()


#: Per peer and workload, the calls stop once they add up to this many seconds (at least one timed call).
PEER_BUDGET_S = 60.0
#: A peer's float32 output must be this close to the float64 numpy result (absolute, inputs ~ N(0, 1)).
PEER_TOLERANCE = {"matmul": 1e-3, "softmax": 1e-6}


def scaled_workload(workload: dict, peer: PeerProcess, budget: float, log) -> tuple[dict, float]:
    """The largest size of ``workload`` whose predicted call time fits ``budget`` / 4, and the factor
    that scales its time to the full size (work grows as n³ for matmul, as rows for softmax)."""
    if workload["workload"] == "matmul":
        full = workload["n"]
        sizes = [s for s in (32, 64, 128, 256, 512) if s < full] + [full]
        make, factor = (lambda s: {"workload": "matmul", "n": s}), (lambda s: (full / s) ** 3)
    else:
        full = workload["rows"]
        sizes = [s for s in (8, 16, 32, 64, 128) if s < full] + [full]
        make = lambda s: {"workload": "softmax", "rows": s, "cols": workload["cols"]}  # noqa: E731
        factor = lambda s: full / s  # noqa: E731
    chosen = sizes[0]
    peer.request(op="run", **make(chosen))  # warm-up (tracing, setup)
    reply = peer.request(op="run", **make(chosen))
    if not reply.get("ok"):
        return make(chosen), factor(chosen)
    per_unit = reply["seconds"] * factor(chosen)  # predicted seconds at full size
    for s in sizes:
        if per_unit / factor(s) <= budget / 4:
            chosen = s
    return make(chosen), factor(chosen)


def bench_peers(gpu_rows: list[dict], contexts: list[tuple[GpuCase, dict]], python: str, rounds: int,
                out_dir: Path, log) -> dict:
    """Time ours (fast, every GPU row of the workload), native and the peers in alternating rounds."""
    peers = {}
    status = {}
    for name in ("triton", "numba"):
        try:
            p = PeerProcess(name, python, out_dir)
        except OSError as exc:  # --peers-python that does not exist or cannot run
            status[name] = {"available": False, "error": f"{type(exc).__name__}: {exc}"}
            log(f"  {name}: cannot start {python} ({exc}); its column is skipped")
            continue
        probe = p.request(op="probe")
        if probe.get("ok"):
            peers[name] = p
            status[name] = {"available": True, "versions": probe.get("versions")}
            log(f"  {name}: {', '.join(f'{k} {v}' for k, v in (probe.get('versions') or {}).items())}")
        else:
            p.close()
            status[name] = {"available": False, "error": probe.get("error")}
            log(f"  {name}: not available with {python} ({probe.get('error')}); its column is skipped")
    results = []
    if not peers:
        return {"status": status, "python": python, "rounds": 0, "budget_s": PEER_BUDGET_S, "workloads": []}
    by_workload: dict[str, list] = {}
    for case, ctx in contexts:
        by_workload.setdefault(json.dumps(case.workload, sort_keys=True), []).append((case, ctx))
    for key, group in by_workload.items():
        workload = json.loads(key)
        ctx0 = group[0][1]
        sizes = {}
        for name, p in peers.items():
            sizes[name] = scaled_workload(workload, p, PEER_BUDGET_S, log)
            req, factor = sizes[name]
            if factor != 1:
                log(f"  {name} {workload['workload']}: timed at {req}, scaled by {factor:g}")
        ours = {(case.schedule, s.index): [] for case, ctx in group for s in ctx["stages"]}
        native = []
        peer_times = {name: [] for name in peers}
        peer_errs = {name: [] for name in peers}
        spent = {name: 0.0 for name in peers}
        for rnd in range(rounds):
            for case, ctx in group:
                hm, args = ctx["hm"], [a.copy() for a in ctx["arrays"]]
                for s in ctx["stages"]:
                    start = time.perf_counter()
                    hm.emulate(*args, stage=s.index, mode="fast")
                    ours[(case.schedule, s.index)].append(time.perf_counter() - start)
            nat = ctx0["native"]
            native.append(autorange(lambda: nat["fn"](*nat["tensors"]), min_total=0.1)[0])
            for name, p in peers.items():
                if rnd > 0 and spent[name] >= PEER_BUDGET_S:
                    continue
                req, factor = sizes[name]
                reply = p.request(op="run", **req)
                if not reply.get("ok"):
                    log(f"  {name} {workload['workload']}: {reply.get('error')}")
                    continue
                spent[name] += reply["seconds"]
                peer_times[name].append(reply["seconds"] * factor)
                peer_errs[name].append(reply["max_abs_err"])
        entry = {"workload": workload, "rounds": rounds, "native_best_ms": min(native) * 1e3,
                 "native_median_ms": statistics.median(native) * 1e3, "ours": [], "peers": {}}
        for (schedule, stage_index), times in ours.items():
            entry["ours"].append({"schedule": schedule, "stage": stage_index, "fast_best_ms": min(times) * 1e3,
                                  "fast_median_ms": statistics.median(times) * 1e3, "runs": len(times)})
        for name in peers:
            req, factor = sizes[name]
            times = peer_times[name]
            entry["peers"][name] = {"timed_request": req, "scale": factor, "runs": len(times),
                                    "best_ms": min(times) * 1e3 if times else None,
                                    "median_ms": statistics.median(times) * 1e3 if times else None,
                                    "max_abs_err_vs_numpy": max(peer_errs[name]) if peer_errs[name] else None,
                                    "matches_numpy": (max(peer_errs[name]) <= PEER_TOLERANCE[workload["workload"]]
                                                      if peer_errs[name] else None)}
        results.append(entry)
        log(f"  {workload}: " + "; ".join(f"{n} {fmt_ms(v['best_ms'], v['scale'] != 1)} ms (err "
                                           f"{v['max_abs_err_vs_numpy']})" for n, v in entry["peers"].items()))
    for p in peers.values():
        p.close()
    return {"status": status, "python": python, "rounds": rounds, "budget_s": PEER_BUDGET_S, "workloads": results}


def peers_table(peer_results: dict) -> str:
    available = [n for n in ("triton", "numba") if peer_results["status"][n]["available"]]
    head = ["workload", "schedule", "stage", "fast best ms", "fast median"]
    for n in available:
        head += [f"{n} best ms", f"{n} median"]
    head += ["native ms"] + [f"{n}/fast" for n in available] + ["fast/native", "peers match numpy"]
    body = []
    for w in peer_results["workloads"]:
        wl = w["workload"]
        name = f"matmul {wl['n']}^3" if wl["workload"] == "matmul" else f"softmax {wl['rows']}x{wl['cols']}"
        for o in w["ours"]:
            cells = [name, o["schedule"].replace("cuda: ", ""), o["stage"], fmt_ms(o["fast_best_ms"]),
                     fmt_ms(o["fast_median_ms"])]
            for n in available:
                p = w["peers"][n]
                est = p["scale"] != 1
                cells += [fmt_ms(p["best_ms"], est), fmt_ms(p["median_ms"], est)]
            cells.append(fmt_ms(w["native_best_ms"]))
            for n in available:
                p = w["peers"][n]
                cells.append(fmt_ratio(p["best_ms"] / o["fast_best_ms"], p["scale"] != 1) if p["best_ms"] else "-")
            cells.append(fmt_ratio(o["fast_best_ms"] / w["native_best_ms"]))
            cells.append(", ".join(f"{n} {YES_NO[w['peers'][n]['matches_numpy']]}" for n in available))
            body.append(cells)
    return _format_table(head, body)


def machine_info() -> dict:
    model = None
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                model = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        nproc = str(len(os.sched_getaffinity(0)))
    try:
        mem = next(ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal"))
        mem_gib = round(int(mem.split()[1]) / 2 ** 20, 1)
    except Exception:
        mem_gib = None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                    capture_output=True, text=True).stdout.strip())
    except Exception:
        commit, dirty = None, None
    return {"nproc": nproc, "cpu_model": model, "mem_gib": mem_gib, "platform": platform.platform(),
            "python": platform.python_version(), "numpy": np.__version__, "tvm": tvm.__version__,
            "tvm_hybrid_nb": thn.__version__, "TVM_NUM_THREADS": os.environ.get("TVM_NUM_THREADS"),
            "git_commit": commit, "git_dirty": dirty}


def check_targets(rows, capture_rows, bisect) -> list[dict]:
    targets = []
    t256 = next((r for r in rows if r["target_256"]), None)
    if t256 is not None:
        ratio = t256["exact_over_fast"]
        targets.append({
            "name": "256^3 matmul: fast >= 100x faster than exact",
            "value": (f"exact/fast = {fmt_ratio(ratio, t256['exact_estimated'])}"
                      + (" (exact extrapolated)" if t256["exact_estimated"] else "")),
            "pass": ratio is not None and ratio >= TARGET_FAST_VS_EXACT,
            "estimated": t256["exact_estimated"]})
        targets.append({
            "name": "256^3 matmul: fast within 5x of native (raw native call)",
            "value": f"fast/native = {fmt_ratio(t256['fast_over_native'])} "
                     f"({t256['fast_ms']:.1f} ms vs {t256['native_raw_ms']:.3f} ms, best calls; median calls "
                     f"{t256['fast_median_ms']:.1f} vs {t256['native_median_ms']:.3f} ms = "
                     f"{fmt_ratio(t256['fast_median_ms'] / t256['native_median_ms'])})",
            "pass": t256["fast_over_native"] <= TARGET_FAST_VS_NATIVE, "estimated": False})
    if capture_rows:
        worst = max(capture_rows, key=lambda r: r["ratio"])
        targets.append({
            "name": "capture overhead: thn.build <= 1.5x tvm.build (worst kernel)",
            "value": f"{worst['ratio']:.2f}x ({worst['kernel']} {worst['size']}: "
                     f"{worst['thn_build_ms']:.1f} vs {worst['tvm_build_ms']:.1f} ms)",
            "pass": worst["ratio"] <= TARGET_CAPTURE, "estimated": False})
    if bisect is not None:
        targets.append({
            "name": "bisect of a 64^3 matmul <= 2 s (fresh module)",
            "value": f"{bisect['cold_s']:.2f} s ({bisect['stages_checked']} stages, mode {bisect['mode'].split()[0]})",
            "pass": bisect["cold_s"] <= TARGET_BISECT_S, "estimated": False})
    return targets


def plot(rows, capture_rows, bisect, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 6), gridspec_kw={"width_ratios": [3, 1.3]})
    labels = ["\n".join([r["kernel"], r["size"].replace(", ", ",\n"),
                          "cache" if "cache" in r["schedule"] else r["schedule"][:18]]) for r in rows]
    x = np.arange(len(rows))
    w = 0.27
    native = [r["native_raw_ms"] for r in rows]
    fast = [r["fast_ms"] for r in rows]
    exact = [r["exact_ms"] or np.nan for r in rows]
    ax1.bar(x - w, native, w, label="native (raw call)", color="#4c72b0")
    ax1.bar(x, fast, w, label="emulate fast", color="#55a868")
    bars = ax1.bar(x + w, exact, w, label="emulate exact", color="#c44e52")
    for bar, r in zip(bars, rows):
        if r["exact_estimated"]:
            bar.set_hatch("//")
            bar.set_alpha(0.6)
            ax1.annotate("est.", (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center",
                         va="bottom", fontsize=7)
    ax1.set_yscale("log")
    ax1.set_ylabel("ms (log scale, best call)")
    ax1.set_xticks(x, labels, fontsize=7)
    ax1.set_title("Kernel time: native vs emulation (hatched exact = extrapolated)")
    ax1.legend(fontsize=8)
    ax1.grid(axis="y", which="both", alpha=0.3)

    names, vals, colors = [], [], []
    for r in capture_rows:
        tag = f"{r['kernel']} {r['size']}" + (" cache" if "cache" in r["schedule"] else "")
        names += [f"tvm.build\n{tag}", f"thn.build\n{tag}"]
        vals += [r["tvm_build_ms"], r["thn_build_ms"]]
        colors += ["#4c72b0", "#dd8452"]
    if bisect is not None:
        names.append("bisect 64^3\n(fresh)")
        vals.append(bisect["cold_s"] * 1e3)
        colors.append("#8172b3")
    y = np.arange(len(names))
    ax2.barh(y, vals, color=colors)
    ax2.set_xscale("log")
    ax2.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # decades only: minor labels collide
    ax2.set_yticks(y, names, fontsize=6)
    ax2.invert_yaxis()
    ax2.set_xlabel("ms (log scale, median)")
    ax2.set_title("Build: capture vs plain; bisect")
    ax2.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run: fewer kernels and repetitions, small GPU sizes")
    ap.add_argument("--out", default=str(HERE / "out"), help="output folder (default: bench/out)")
    ap.add_argument("--exact-budget", type=float, default=None, metavar="SECONDS",
                    help="run exact mode fully only when it is estimated to finish within this many seconds "
                         "per kernel, else extrapolate (default: 60, or 10 with --quick; 30 for GPU rows)")
    ap.add_argument("--repeat", type=int, default=None, help="best of N for emulation (default 5, 3 with --quick)")
    ap.add_argument("--no-cpu", action="store_true", help="skip the CPU rows, capture overhead and bisect")
    ap.add_argument("--no-gpu", action="store_true", help="skip the GPU (cuda target) rows")
    ap.add_argument("--peers", action="store_true",
                    help="also time numba-cuda's simulator and Triton's interpreter on the GPU workloads "
                         "(optional; skipped with one line each when not installed)")
    ap.add_argument("--peers-python", default=sys.executable, metavar="PATH",
                    help="the python that has numba-cuda / triton + CPU torch (default: this one)")
    ap.add_argument("--peer-rounds", type=int, default=3, help="alternating rounds with the peers (default 3)")
    args = ap.parse_args(argv)
    budget = args.exact_budget if args.exact_budget is not None else (10.0 if args.quick else 60.0)
    gpu_budget = args.exact_budget if args.exact_budget is not None else (10.0 if args.quick else 30.0)
    repeat = args.repeat or (3 if args.quick else 5)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    def log(msg):
        print(msg, flush=True)

    t0 = time.perf_counter()
    info = machine_info()
    info["load_average_start"] = load_average()
    log(f"machine: {info['nproc']} cores, {info['cpu_model']}, numpy {info['numpy']}, TVM {info['tvm']}, "
        f"load average {info['load_average_start']}")
    log(f"exact budget {budget:.0f} s per kernel ({gpu_budget:.0f} s for GPU rows), best of {repeat}")

    rows, capture_rows, bisect, targets = [], [], None, []
    if not args.no_cpu:
        case_list = cases(args.quick)
        log("emulation vs native:")
        rows = [bench_kernel(c, repeat, budget, log) for c in case_list]
        log("capture overhead:")
        capture_rows = bench_capture([c for c in case_list if c.capture], 3 if args.quick else 7, log)
        log("bisect:")
        bisect = bench_bisect(log)
        targets = check_targets(rows, capture_rows, bisect)
    gpu_rows, peer_results = [], None
    if not args.no_gpu:
        log("GPU (cuda target) emulation vs the native llvm build of the unscheduled compute:")
        contexts = []
        for case in gpu_cases(args.quick):
            case_rows, ctx = bench_gpu(case, repeat, gpu_budget, log)
            gpu_rows += case_rows
            contexts.append((case, ctx))
        if args.peers:
            log(f"peers (python {args.peers_python}), {args.peer_rounds} alternating rounds:")
            peer_results = bench_peers(gpu_rows, contexts, args.peers_python, args.peer_rounds, out_dir, log)
    total = time.perf_counter() - t0
    info["load_average_end"] = load_average()

    if rows:
        print()
        print(table(rows))
        print("native ms = raw hm.native['main'](*tvm_tensors) call (used for ratios); run_native ms includes "
              "numpy->TVM->numpy conversion. 'est.' = exact extrapolated from a timed fraction "
              "(progress callback).")
        print()
        print("capture (median): " + "; ".join(
            f"{r['kernel']} {r['size']}{' cache' if 'cache' in r['schedule'] else ''}"
            f" {r['thn_build_ms']:.1f}/{r['tvm_build_ms']:.1f} ms = {r['ratio']:.2f}x" for r in capture_rows))
        print(f"bisect 64^3 matmul: {bisect['cold_s']:.2f} s fresh, {bisect['warm_s']:.2f} s warm, "
              f"mode {bisect['mode']}")
        print()
        print("targets:")
        for t in targets:
            print(f"  [{'PASS' if t['pass'] else 'FAIL'}] {t['name']}: {t['value']}")
    if gpu_rows:
        print()
        print(gpu_table(gpu_rows))
        print("native ms = the unscheduled TE compute built for llvm (ratios); native (CPU sched) = the project's "
              "CPU schedule of it. Stages: 0 and the last emulatable one (before MakePackedAPI). "
              "'est.' = extrapolated.")
    if peer_results is not None:
        print()
        if peer_results["workloads"] and any(s["available"] for s in peer_results["status"].values()):
            print(peers_table(peer_results))
            print("all columns timed in the same alternating rounds; peers' 'est.' = timed at a smaller size "
                  "and scaled (see the log lines above / results.json).")
        for name, st in peer_results["status"].items():
            if not st["available"]:
                print(f"{name}: not installed for {peer_results['python']} - column skipped")
    print(f"\ntotal bench time {total:.0f} s, load average {info['load_average_start']} at start, "
          f"{info['load_average_end']} at end")

    results = {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
               "args": {"quick": args.quick, "exact_budget_s": budget, "gpu_exact_budget_s": gpu_budget,
                        "repeat": repeat, "no_cpu": args.no_cpu, "no_gpu": args.no_gpu, "peers": args.peers},
               "machine": info, "kernels": rows, "capture": capture_rows, "bisect": bisect,
               "targets": targets, "gpu": gpu_rows, "peers": peer_results, "total_seconds": total}
    (out_dir / "results.json").write_text(json.dumps(results, indent=2, default=str))
    written = [str(out_dir / "results.json")]
    if rows:
        plot(rows, capture_rows, bisect, out_dir / "bench.png")
        written.append(str(out_dir / "bench.png"))
    print(f"wrote {' and '.join(written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
