"""The fuzzing run: a batch of seeds, reduction of failing cases, the report and the command line.

:func:`run_fuzz` checks ``n`` random cases, reduces each failure or TVM finding (schedule steps
dropped one at a time while the same failure remains, :func:`reduce_case`) and sums them up in a
:class:`FuzzReport`; :func:`main` is ``python -m tvm_hybrid_nb.fuzz``.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from .cases import TVM_FINDINGS, CaseResult, FuzzCase, random_case
from .oracle import check_case_within

__all__ = ["reduce_case", "FuzzReport", "run_fuzz", "main"]

#: The command line's description (the first line of :mod:`tvm_hybrid_nb.fuzz`'s docstring).
DESCRIPTION = "Schedule fuzzer: random computes × random schedules, emulated at every stage against the native build."


def reduce_case(case: FuzzCase, failure: CaseResult, stages: str = "changed",
                timeout: float = 0) -> tuple[FuzzCase, CaseResult]:
    """Drop schedule steps one at a time while the case still fails the same way (same category)."""
    current, current_result = case, failure
    progress = True
    while progress and current.steps:
        progress = False
        for i in range(len(current.steps)):
            candidate = FuzzCase(current.kind, current.seed, current.steps[:i] + current.steps[i + 1:])
            res = check_case_within(candidate, stages, timeout)
            if res.category == failure.category:
                current, current_result = res.case, res
                progress = True
                break
    return current, current_result


@dataclass
class FuzzReport:
    """Summary of a fuzzing run."""

    cases: int = 0
    steps: int = 0
    stage_runs: int = 0
    tvm_rejected: int = 0
    by_kind: dict = field(default_factory=dict)
    by_primitive: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)  # (reduced CaseResult, original CaseResult)
    #: TVM miscompilations the emulator exposed (they do not fail the run), reduced like failures.
    tvm_findings: list = field(default_factory=list)
    #: Cases with a stage the emulator refused (UnsupportedConstructError): reason → first CaseResult.
    unsupported: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.by_kind.items()))
        prims = ", ".join(f"{k} {v}" for k, v in sorted(self.by_primitive.items()))
        lines = [f"{self.cases} schedules fuzzed in {self.seconds:.1f} s: {self.steps} schedule steps applied, "
                 f"{self.stage_runs} stage emulations compared, {self.tvm_rejected} refused by TVM's build, "
                 f"{len(self.tvm_findings)} TVM miscompilations caught, {len(self.failures)} failures",
                 f"  kinds: {kinds}", f"  primitives: {prims}"]
        for reason, res in self.unsupported.items():
            lines.append(f"refused by the emulator: {reason}, e.g. "
                         f"{res.case.kind} seed {res.case.seed} {res.case.steps!r}")
        for title, found in (("TVM miscompilation", self.tvm_findings), ("FAILURE", self.failures)):
            for reduced, original in found:
                lines.append(f"{title}: {reduced}  (found with {len(original.case.steps)} steps, reduced to "
                             f"{len(reduced.case.steps)})")
                lines.append("  reproducer:\n    " + reduced.case.reproducer().replace("\n", "\n    "))
        return "\n".join(lines)


def _reason_kind(detail: str) -> str:
    """The construct an UnsupportedConstructError names (``unsupported construct X ...``)."""
    marker = "unsupported construct "
    if "nothing was allocated" in detail:
        return "buffer larger than the machine's memory (InsufficientMemoryError)"
    if marker in detail:
        rest = detail.split(marker, 1)[1]
        return rest.split(" at stage")[0].split(":")[0]
    return detail.split(":")[-1].strip()[:80]


def run_fuzz(n: int, seed: int = 0, stages: str = "changed", keep: str | Path | None = None,
             reduce: bool = True, log: Callable[[str], None] | None = None, timeout: float = 60) -> FuzzReport:
    """Fuzz ``n`` random cases with seeds ``seed .. seed + n - 1``; failing cases are reduced.

    ``timeout`` limits each check of a case (seconds, 0 for none).
    """
    report = FuzzReport()
    start = time.perf_counter()
    for case_seed in range(seed, seed + n):
        case = random_case(case_seed)
        res = check_case_within(case, stages, timeout)
        report.cases += 1
        report.steps += len(res.case.steps)
        report.stage_runs += res.stages_emulated
        report.tvm_rejected += res.category == "tvm_rejected"
        if res.category == "unsupported":
            report.unsupported.setdefault(_reason_kind(res.detail), res)
        report.by_kind[case.kind] = report.by_kind.get(case.kind, 0) + 1
        for step in res.case.steps:
            report.by_primitive[step[0]] = report.by_primitive.get(step[0], 0) + 1
        if not res.ok or res.category in TVM_FINDINGS:
            reduced = reduce_case(res.case, res, stages, timeout)[1] if reduce else res
            (report.failures if not res.ok else report.tvm_findings).append((reduced, res))
            if keep is not None:
                directory = Path(keep)
                directory.mkdir(parents=True, exist_ok=True)
                (directory / f"case_{case_seed}.py").write_text(
                    f"# {reduced}\n" + reduced.case.reproducer() + "\n")
        if log is not None:
            found = report.failures if not res.ok else report.tvm_findings
            reduced_line = f"\n  reduced: {found[-1][0]}" if res.category in TVM_FINDINGS or not res.ok else ""
            log(f"{res}{reduced_line}")
    report.seconds = time.perf_counter() - start
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m tvm_hybrid_nb.fuzz --n N --seed S [--stages all|changed] [--keep DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m tvm_hybrid_nb.fuzz", description=DESCRIPTION)
    parser.add_argument("--n", type=int, default=100, help="number of schedules (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--stages", choices=("changed", "all"), default="changed",
                        help="emulate stage 0 and the stages that changed the IR (default), or every stage")
    parser.add_argument("--keep", default=None, metavar="DIR", help="write each reduced failure to DIR as a .py")
    parser.add_argument("--no-reduce", action="store_true", help="report failures as found")
    parser.add_argument("--timeout", type=float, default=60, help="seconds per case check (default 60, 0: none)")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    args = parser.parse_args(argv)
    log = (lambda line: print(line, flush=True)) if args.verbose else None
    report = run_fuzz(args.n, args.seed, args.stages, args.keep, not args.no_reduce, log, args.timeout)
    print(report.summary())
    return 0 if report.ok else 1
