"""The measurements: emulation vs native (CPU rows), capture overhead, bisect, GPU rows."""
from __future__ import annotations

import inspect
import statistics
import time
from typing import Any

import numpy as np
import tvm

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import examples as ex
from tvm_hybrid_nb.bisect import find_first_divergence

from .cases import PV_SCHEDULE, Case, GpuCase
from .report import fmt_ms
from .timing import TIMING_WINDOW_S, autorange, best_of, output_arrays, time_exact


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
