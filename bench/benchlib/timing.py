"""Timing helpers: best of N calls, autorange for short calls, exact mode extrapolated from progress."""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

from tvm_hybrid_nb.errors import EmulationError


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
