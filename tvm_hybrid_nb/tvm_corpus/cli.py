"""``python -m tvm_hybrid_nb zoo --tvm-tests PATH``: the table per test directory, then every crash,
wrong answer and timeout with its origin, the refusals by construct and (``-v``) why functions
were not tested."""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from ..zoo import TVM_FINDING, KernelOutcome
from .check import NOT_TESTED, TESTED, no_reference_category
from .harvest import HarvestedFunc, harvest
from .run import run_corpus


def _refusal_construct(reason: str) -> str:
    """The construct a refusal names, without the stage (``tirx.call_extern: no exact numpy translation``)."""
    import re

    found = re.search(r"unsupported construct (.+?)(?: at stage [^:]*)?(?::\s*(.*))?$", reason)
    if not found:
        return reason[:100]
    detail = (found.group(2) or "").split(";")[0]
    return (found.group(1) + (f": {detail}" if detail else ""))[:100]


def cli_main(args) -> int:
    """``zoo --tvm-tests PATH``: the table, then every crash, wrong answer and timeout by origin."""
    if args.timeout <= 0 or args.jobs < 1 or args.memory_gib < 0:
        print("error: --timeout must be > 0, --jobs >= 1 and --memory-gib >= 0", file=sys.stderr)
        return 2
    items = harvest(args.tvm_tests)
    if args.match:
        items = [i for i in items if any(m in i.origin for m in args.match)]
    if not items:
        print(f"error: no @T.prim_func definitions under {args.tvm_tests}"
              + (f" matching {args.match}" if args.match else ""), file=sys.stderr)
        return 2
    start = time.perf_counter()

    def show(item: HarvestedFunc, o: KernelOutcome) -> None:
        if args.verbose:
            print(f"{o.outcome:15s} {o.seconds:6.1f} s  {item.origin}"
                  + (f"  [{o.stage}] {o.reason[:160]}" if o.outcome in ("crash", "wrong", "timeout") else "")
                + (f"  ({no_reference_category(o.reason)}) {o.reason[:300]}" if o.outcome == "no native reference"
                   else "")
                + (f"  {o.reason}" if o.outcome == "ok" and o.reason else ""),
                  flush=True)

    report = run_corpus(items, mode=args.mode, timeout=args.timeout, jobs=args.jobs, memory_gib=args.memory_gib,
                        progress=show)
    print(report.table())
    tested = [o for _, o in report.outcomes if o.outcome in TESTED]
    print(f"\n{len(report.outcomes)} @T.prim_func definitions harvested from {args.tvm_tests}; {len(tested)} "
          f"distinct functions built and run by TVM were emulated at {sum(o.stages_checked for o in tested)} "
          f"changed stages{_repeated_note(tested)} in {time.perf_counter() - start:.0f} s ({args.mode} mode, limit {args.timeout:g} s each)")
    by_origin = {o.kernel: item for item, o in report.outcomes}
    for kind in ("crash", "wrong", "timeout"):
        bad = [o for _, o in report.outcomes if o.outcome == kind]
        if bad:
            print(f"\n{kind} ({len(bad)}):")
        for o in bad:
            item = by_origin[o.kernel]
            print(f"  {item.rel}:{item.lineno} {item.qualname} at stage {o.stage or '-'} "
                  f"({o.seconds:.0f} s): {o.reason}")
    refused = Counter(_refusal_construct(o.reason) for _, o in report.outcomes if o.outcome == "refused")
    if refused:
        print(f"\nrefused ({sum(refused.values())}), by construct:")
        for construct, n in refused.most_common():
            print(f"  {n:4d}  {construct}")
    if args.verbose:
        categories = Counter(no_reference_category(o.reason) for _, o in report.outcomes
                             if o.outcome == "no native reference")
        if categories:
            print(f"\nno native reference ({sum(categories.values())}), by category:")
            for category, n in categories.most_common():
                print(f"  {n:4d}  {category}")
        for kind in NOT_TESTED[:2]:
            why = Counter(o.reason[:100] for _, o in report.outcomes if o.outcome == kind)
            if why:
                print(f"\n{kind} ({sum(why.values())}), most common reasons:")
                for reason, n in why.most_common(15):
                    print(f"  {n:4d}  {reason}")
    failed = [o for _, o in report.outcomes if o.outcome in ("crash", "timeout")
              or (o.outcome == "wrong" and TVM_FINDING not in o.reason)]
    return 1 if failed else 0


def _repeated_note(outcomes) -> str:
    repeated = sum(o.stages_repeated for o in outcomes)
    return f" ({repeated} of them the program of an earlier stage, not run again)" if repeated else ""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``--tvm-tests`` options of the ``zoo`` subcommand."""
    p.add_argument("--tvm-tests", metavar="PATH",
                   help="instead of the models: harvest every @T.prim_func in the .py files under PATH (a TVM "
                        "checkout's tests/python, a subdirectory or one file) and emulate each against its native "
                        "llvm build")
    p.add_argument("--match", action="append", metavar="TEXT",
                   help="with --tvm-tests: only functions whose origin (file:qualname) contains TEXT (repeatable)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="with --tvm-tests: seconds each function may take (default 60)")
    p.add_argument("--jobs", type=int, default=1, help="with --tvm-tests: worker processes (default 1)")
    p.add_argument("--memory-gib", type=float, default=8.0,
                   help="with --tvm-tests: address-space limit of each worker in GiB (default 8; 0: none)")
