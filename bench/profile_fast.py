#!/usr/bin/env python
"""Where fast mode spends its time: warm time and cProfile top entries per changed stage.

    python bench/profile_fast.py                 # 256³ matmul (parallel/vectorize schedule)
    python bench/profile_fast.py --n 128 --top 6 --example matmul_cache_compute_at

The generated kernel shows up as ``<hybrid:N pass fast#i>:(main)``; its *tottime* is the numpy work done
inline (indexing, arithmetic), while runtime helpers (``ramp``, ``broadcast``, ``load``) appear as their
own entries.  Not a benchmark: profiling overhead inflates the helper-heavy stages.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import tvm_hybrid_nb as thn  # noqa: E402
from tvm_hybrid_nb import examples as ex  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--example", default="matmul_parallel_vectorize", help="a function of tvm_hybrid_nb.examples")
    ap.add_argument("--n", type=int, default=256, help="size argument of the example")
    ap.add_argument("--top", type=int, default=8, help="entries per stage")
    args = ap.parse_args(argv)
    example = getattr(ex, args.example)(args.n)
    hm = thn.build(example.obj)
    arrays = example.inputs(hm, seed=0)
    for stage in hm.stages:
        if not (stage.changed and stage.emulatable):
            continue
        hm.emulate(*arrays, stage=stage.index, mode="fast")  # compile + warm up
        start = time.perf_counter()
        hm.emulate(*arrays, stage=stage.index, mode="fast")
        warm = time.perf_counter() - start
        prof = cProfile.Profile()
        prof.enable()
        hm.emulate(*arrays, stage=stage.index, mode="fast")
        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(args.top)
        lines = [ln for ln in text.getvalue().splitlines() if ln.strip()]
        start_at = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls")), 0)
        print(f"===== stage {stage.label}: {warm * 1e3:.1f} ms warm")
        print("\n".join(lines[start_at:start_at + args.top + 1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
