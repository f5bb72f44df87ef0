"""Checking one case: build it, emulate its stages in exact and fast mode, compare with the native kernel.

:func:`check_case` requires the two modes to be bit-identical and both to match the native kernel
within :func:`~tvm_hybrid_nb.compare.compare_arrays`' tolerances (integers exactly), runs the
sanitizers once more on a kernel that matches, and classifies every disagreement (a failure, or a
TVM miscompilation per :mod:`.findings`).  :func:`check_case_within` adds a wall-clock limit.
"""
from __future__ import annotations

import signal
import time
from typing import Any

import numpy as np

from ..compare import compare_arrays
from ..errors import BuildError, EmulationError, InsufficientMemoryError
from .cases import CaseResult, FuzzCase
from .computes import Compute, make_compute
from .findings import _out_of_bounds_finding, _tvm_finding
from .schedules import schedule_for

__all__ = ["check_case", "check_case_within", "CaseTimeout"]


def _inputs(hm, compute: Compute, seed: int) -> list:
    args = hm.random_inputs(seed=seed, sizes=compute.sizes)
    if not compute.allows_special:
        return args
    rng = np.random.default_rng([seed, 5])
    for arg, spec in zip(args, hm.params):
        if spec.is_output or not np.issubdtype(arg.dtype, np.floating) or arg.size < 4:
            continue
        flat = arg.reshape(-1)
        spots = rng.choice(flat.size, size=min(3, flat.size), replace=False)
        flat[spots] = rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan], size=len(spots))
    return args


def check_case(case: FuzzCase, stages: str = "changed") -> CaseResult:
    """Build ``case`` and emulate its stages (both modes) against the native kernel."""
    from ..module import build

    start = time.perf_counter()

    def result(ok, category="", detail="", runs=0):
        return CaseResult(case, ok, category, detail, runs, time.perf_counter() - start)

    compute = make_compute(case.kind, case.seed)
    try:
        sch, applied = schedule_for(compute, case.steps)
    except Exception as exc:
        return result(True, "tvm_rejected", f"TVM refused the compute: {str(exc).strip().splitlines()[-1]}")
    if len(applied) != len(case.steps):  # a reduced case: steps that no longer apply are dropped
        case = FuzzCase(case.kind, case.seed, applied)
    try:
        hm = build(sch)
    except BuildError as exc:
        return result(True, "tvm_rejected", str(exc))
    except Exception as exc:  # anything else from our capture or code generation is a bug
        return result(False, "crash", f"build raised {type(exc).__name__}: {exc}")
    packed = hm.packed_api_index if hm.packed_api_index is not None else len(hm.stages)
    if not hm.stages[0].emulatable:  # an honest refusal, not a wrong answer
        return result(True, "unsupported", f"stage {hm.stages[0].label}: {hm.stages[0].reason}")
    try:
        args = _inputs(hm, compute, case.seed)
    except Exception as exc:
        return result(False, "crash", f"random inputs raised {type(exc).__name__}: {exc}")
    outputs = [i for i, p in enumerate(hm.params) if p.is_output]
    seen: set[str] = set()
    runs = 0
    verdicts: list[tuple[Any, Any]] = []  # (stage, exact outputs) or (stage, out-of-bounds message)
    first_bad: tuple[str, str] | None = None
    for stage in hm.stages[:packed]:
        if stages == "changed" and not stage.changed:
            continue
        if not stage.emulatable:
            return result(True, "unsupported", f"stage {stage.label}: {stage.reason}", runs)
        if stage.source in seen:
            continue
        seen.add(stage.source)
        got: dict[str, Any] = {}
        for mode in ("exact", "fast"):
            work = [a.copy() for a in args]
            try:
                hm.emulate(*work, stage=stage.index, mode=mode)
            except InsufficientMemoryError as exc:  # refused before allocating: honest, not wrong
                return result(True, "unsupported", f"stage {stage.label}: {exc}", runs)
            except EmulationError as exc:
                if "out-of-bounds" not in str(exc):
                    return result(False, "emulation_error", f"stage {stage.label} {mode}: {exc}", runs)
                got[mode] = str(exc)
            except Exception as exc:
                return result(False, "emulation_error",
                              f"stage {stage.label} {mode}: {type(exc).__name__}: {exc}", runs)
            else:
                got[mode] = work
            runs += 1
        if isinstance(got["exact"], str) or isinstance(got["fast"], str):
            if not (isinstance(got["exact"], str) and isinstance(got["fast"], str)):
                return result(False, "fast_exact_differ",
                              f"stage {stage.label}: only one mode read or wrote out of bounds", runs)
            verdicts.append((stage, got["exact"]))
            first_bad = first_bad or ("emulation_error", f"stage {stage.label}: {got['exact']}")
            continue
        for i in outputs:
            exact, fast = got["exact"][i], got["fast"][i]
            if not np.array_equal(exact, fast, equal_nan=np.issubdtype(exact.dtype, np.floating)):
                where = np.argwhere(~_same(exact, fast))[0].tolist()
                return result(False, "fast_exact_differ", f"stage {stage.label} output {hm.params[i].name}: "
                                                          f"fast differs from exact at {where}", runs)
        verdicts.append((stage, [got["exact"][i] for i in outputs]))
    if first_bad is not None:
        # A program that accesses memory out of bounds may crash the process when run natively
        # (TVM 0.27 has such schedules): the native kernel is not run, the unscheduled build decides.
        finding = _out_of_bounds_finding(compute, hm, args, outputs, verdicts)
        if finding is not None:
            return result(True, finding[0], finding[1], runs)
        return result(False, first_bad[0], first_bad[1], runs)
    try:
        native = [a.copy() for a in args]
        hm.run_native(*native)
    except Exception as exc:
        return result(False, "crash", f"the native run raised {type(exc).__name__}: {exc}")
    for stage, outs in verdicts:
        for o, i in zip(outs, outputs):
            cmp = compare_arrays(hm.params[i].name, o, native[i])
            if not cmp.ok and first_bad is None:
                first_bad = ("native_mismatch", f"stage {stage.label}: {cmp.summary()}")
    if first_bad is None:
        sanitized = _check_sanitizers(hm, args, outputs, verdicts)
        if sanitized is not None:
            return result(False, sanitized[0], sanitized[1], runs + len(verdicts))
        return result(True, runs=runs + len(verdicts))
    finding = _tvm_finding(compute, hm, args, outputs, native, verdicts)
    if finding is not None:
        return result(True, finding[0], finding[1], runs)
    return result(False, first_bad[0], first_bad[1], runs)


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    same = a == b
    if np.issubdtype(a.dtype, np.floating):
        same |= np.isnan(a) & np.isnan(b)
    return same


def _check_sanitizers(hm, args, outputs, verdicts) -> tuple[str, str] | None:
    """Run every verified stage of a kernel that matches its native build once more with the
    sanitizers on (fast mode, what the notebook button runs): they must stay silent and must not
    change a single output bit."""
    for stage, outs in verdicts:
        work = [a.copy() for a in args]
        try:
            hm.emulate(*work, stage=stage.index, mode="fast", check=True)
        except EmulationError as exc:
            return ("sanitizer_false_alarm", f"stage {stage.label}: the sanitizers flag a kernel that matches "
                                             f"its native build: {exc}")
        for o, i in zip(outs, outputs):
            if not np.array_equal(o, work[i], equal_nan=np.issubdtype(o.dtype, np.floating)):
                return ("sanitizer_changed_result", f"stage {stage.label} output {hm.params[i].name}: "
                                                    f"check=True changed the result")
    return None


class CaseTimeout(BaseException):
    """A case ran past its time limit (BaseException: the emulator's error translation lets it through)."""


def check_case_within(case: FuzzCase, stages: str = "changed", seconds: float = 0) -> CaseResult:
    """:func:`check_case` with a wall-clock limit (Unix main thread; ``0`` means none).

    A case past the limit fails as ``timeout``: on these tiny sizes every stage emulates in well
    under a second, so a slow one means a loop the emulation cannot finish.
    """
    if not seconds or not hasattr(signal, "setitimer"):
        return check_case(case, stages)

    def expire(signum, frame):
        raise CaseTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.perf_counter()
    try:
        return check_case(case, stages)
    except CaseTimeout:
        return CaseResult(case, False, "timeout", f"no result within {seconds:g} s", 0, time.perf_counter() - start)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
