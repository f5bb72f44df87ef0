#!/usr/bin/env python
"""Benchmark of tvm_hybrid_nb: emulation speed (fast, exact) against native, capture overhead, bisect time.

Run from the repository root::

    python bench/run.py            # full run (a few minutes)
    python bench/run.py --quick    # short run (smaller set, fewer repetitions, 10 s exact budget)
    python bench/run.py --no-cpu --peers --peers-python /tmp/peers-venv/bin/python
                                   # GPU rows only, with numba-cuda's simulator and Triton's interpreter

Prints a table and the targets with PASS/FAIL, writes ``<out>/results.json`` and ``<out>/bench.png``.
See bench/README.md for the method.  Targets are checked here and only here (never in unit tests).
The cases, measurements, peers and output live in ``bench/benchlib/`` (one module per concern).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout without installing
    sys.path.insert(0, str(ROOT))
if str(HERE) not in sys.path:  # bench/peers.py, bench/benchlib/
    sys.path.insert(0, str(HERE))

from benchlib.cases import cases, gpu_cases  # noqa: E402
from benchlib.machine import load_average, machine_info  # noqa: E402
from benchlib.measure import bench_bisect, bench_capture, bench_gpu, bench_kernel  # noqa: E402
from benchlib.peer_runs import bench_peers  # noqa: E402
from benchlib.report import check_targets, gpu_table, peers_table, plot, table  # noqa: E402


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
