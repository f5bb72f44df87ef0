#!/usr/bin/env python
"""Benchmark of thn.verify: scaling over worker processes and the per-kernel cost of the job machinery.

Run from the repository root::

    python bench/verify.py                   # llvm and dlight-cuda, 1 and 2 workers
    python bench/verify.py --flavours llvm   # one flavour
    python bench/verify.py --workers 1 2 4   # more worker counts (on a machine with the cores)

A stack of transformer-like blocks of different widths gives a Relax model of >= 30 distinct
kernels.  For each flavour (``llvm``: no schedule; ``cuda``: dlight's default GPU rules, emulated on
the CPU) it verifies every changed stage of every kernel:

* in this process (``workers=0``): the work itself, without the job machinery;
* with N local workers: the wall time, against the target ``wall(N) <= 1.3 * wall(1) / N``;
* the job machinery's cost per kernel: ``(wall(1 worker) - wall(in-process)) / kernels`` — starting
  the worker process (forked from the forkserver) and its first, cold build and emulation, spread
  over the kernels it runs; the JSON round trip of the PrimFunc; pickling the job and its result
  through the pipes — against the target ``<= 10 %`` of the mean job time (the in-process run pays
  its own first, cold kernel too).

Writes ``bench/out/verify.json``.  Timings on a shared machine vary; the targets are checked here
and only here.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TARGET_SCALING = 1.3    # wall(N) <= 1.3 * wall(1) / N
TARGET_OVERHEAD = 0.10  # job machinery <= 10 % of the mean job time


def make_model(widths=(16, 24, 32, 40, 48, 56)):
    """A Relax model: one block per width (LayerNorm, Linear, GELU, Linear, residual, softmax),
    joined by projections, so every block's kernels have distinct shapes (FuseTIR keeps them apart)."""
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import op, spec

    class Block(nn.Module):
        def __init__(self, d: int):
            self.ln = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, 2 * d)
            self.fc2 = nn.Linear(2 * d, d)

        def forward(self, x):
            y = self.fc2(op.gelu(self.fc1(self.ln(x))))
            return op.softmax(x + y, axis=-1)

    class Stack(nn.Module):
        def __init__(self):
            self.blocks = nn.ModuleList([Block(d) for d in widths])
            self.proj = nn.ModuleList([nn.Linear(a, b, bias=False) for a, b in zip(widths, widths[1:])])

        def forward(self, x):
            for i, block in enumerate(self.blocks):
                x = block(x)
                if i < len(self.proj):
                    x = self.proj[i](x)
            return x

    mod, _ = Stack().export_tvm(spec={"forward": {"x": spec.Tensor((8, widths[0]), "float32")}})
    return mod


def run_flavour(mod, flavour: str, worker_counts) -> dict:
    from tvm_hybrid_nb.verification import verify

    settings = {"llvm": {"target": "llvm"}, "cuda": {"target": "cuda", "schedule": "dlight"}}[flavour]
    out: dict = {"flavour": flavour, "runs": {}}
    for workers in [0, *worker_counts]:
        start = time.perf_counter()
        report = verify(mod, workers=workers, **settings)
        wall = time.perf_counter() - start
        job_seconds = sum(k.seconds for k in report.kernels)
        load = os.getloadavg()[0]
        out["runs"][workers] = {"wall_s": wall, "sum_job_s": job_seconds, "counts": report.counts,
                                "load_average_1min": load}
        print(f"  {flavour:5s} workers={workers:<2d} wall {wall:7.1f} s   sum of job times {job_seconds:7.1f} s   "
              f"load average {load:.1f}   {report.counts}", flush=True)
        out["kernels"] = len(report.kernels)
        out["stages_checked"] = sum(k.stages_checked for k in report.kernels)
    runs = out["runs"]
    n = out["kernels"]
    in_process = runs[0]["wall_s"]
    serial = runs[1]["wall_s"] if 1 in runs else None
    if serial is not None:
        overhead = (serial - in_process) / n
        mean_job = runs[0]["sum_job_s"] / n
        out["overhead_per_kernel_s"] = overhead
        out["mean_job_s"] = mean_job
        out["overhead_fraction"] = overhead / mean_job
        for workers in worker_counts:
            if workers > 1:
                ratio = runs[workers]["wall_s"] / (serial / workers)
                out.setdefault("scaling", {})[workers] = ratio
    return out


def machinery_cost(mod, repeats: int = 20) -> dict:
    """The job machinery measured directly, without the work: the JSON round trip of every kernel
    (``save_json`` in the parent, ``load_json`` in the job), and per job: the pipes there and back,
    plus one worker's start (fork from the forkserver) and stop spread over ``repeats`` jobs that
    fail at once, run on one worker."""
    import tvm

    from tvm_hybrid_nb.verification import model_kernels, run_local

    funcs = model_kernels(mod, tvm.target.Target("llvm"))
    start = time.perf_counter()
    for func in funcs.values():
        tvm.ir.load_json(tvm.ir.save_json(func))
    json_s = (time.perf_counter() - start) / len(funcs)
    empty = [{"name": f"empty{i}", "func": "", "target": "", "spec": b""} for i in range(repeats)]
    run_local(empty[:2], 1, None, lambda r: None)  # the forkserver starts once per session
    start = time.perf_counter()
    run_local(empty, 1, None, lambda r: None)
    process_s = (time.perf_counter() - start) / repeats
    return {"json_round_trip_s": json_s, "process_per_job_s": process_s}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flavours", nargs="+", default=["llvm", "cuda"], choices=["llvm", "cuda"])
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--out", default=str(HERE / "out"))
    args = parser.parse_args(argv)
    worker_counts = sorted(set(args.workers) | {1})
    mod = make_model()
    print(f"machine: {os.cpu_count()} cores (nproc), {platform.processor() or platform.machine()}, "
          f"Python {platform.python_version()}", flush=True)
    results = {"cores": os.cpu_count(), "flavours": [], "machinery": machinery_cost(mod)}
    m = results["machinery"]
    print(f"job machinery: JSON round trip {m['json_round_trip_s'] * 1e3:.1f} ms/kernel, "
          f"process (pipes; a worker's start and stop over 20 jobs) {m['process_per_job_s'] * 1e3:.1f} ms/job",
          flush=True)
    for flavour in args.flavours:
        results["flavours"].append(run_flavour(mod, flavour, worker_counts))
    print()
    direct = m["json_round_trip_s"] + m["process_per_job_s"]
    for r in results["flavours"]:
        r["direct_overhead_fraction"] = direct / r["mean_job_s"] if "mean_job_s" in r else None
        if r["direct_overhead_fraction"] is not None:
            print(f"{r['flavour']}: direct machinery cost {direct * 1e3:.0f} ms = "
                  f"{r['direct_overhead_fraction'] * 100:.1f} % of the mean job ({r['mean_job_s']:.2f} s)")
    print("| flavour | kernels | stages checked | in-process s | " +
          " | ".join(f"{w} worker{'s' if w > 1 else ''} s" for w in worker_counts) +
          " | scaling (target <= 1.3) | overhead/kernel | of mean job (target <= 10 %) |")
    print("|" + "---|" * (6 + len(worker_counts)))
    for r in results["flavours"]:
        walls = " | ".join(f"{r['runs'][w]['wall_s']:.1f}" for w in worker_counts)
        scaling = ", ".join(f"N={w}: {v:.2f}{' PASS' if v <= TARGET_SCALING else ' FAIL'}"
                            for w, v in r.get("scaling", {}).items())
        frac = r.get("overhead_fraction")
        print(f"| {r['flavour']} | {r['kernels']} | {r['stages_checked']} | {r['runs'][0]['wall_s']:.1f} | {walls} "
              f"| {scaling} | {r.get('overhead_per_kernel_s', float('nan')) * 1e3:.0f} ms "
              f"| {frac * 100:.1f} %{' PASS' if frac is not None and frac <= TARGET_OVERHEAD else ' FAIL'} |")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "verify.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
