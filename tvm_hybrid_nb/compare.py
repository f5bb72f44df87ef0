"""Comparison of emulated outputs with a reference: tolerances by dtype and readable results."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

#: (rtol, atol) by float dtype.  The native build may contract a*b+c into one fused multiply-add,
#: which rounds once where the IR (and so the emulation) rounds twice; the tolerances allow that.
FLOAT_TOLERANCES = {
    "float16": (1e-2, 1e-3),
    "float32": (1e-4, 1e-5),
    "float64": (1e-9, 1e-12),
}


def default_tolerance(dtype: np.dtype) -> tuple[float, float]:
    """(rtol, atol) for ``dtype``: exact (0, 0) for integers and bool."""
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating):
        return FLOAT_TOLERANCES.get(dtype.name, (1e-4, 1e-5))
    return (0.0, 0.0)


@dataclass
class OutputComparison:
    """How one output of the emulation compares with the reference."""

    name: str
    dtype: str
    shape: tuple
    max_abs_error: float
    max_rel_error: float
    mismatches: int
    first_mismatch: tuple | None
    rtol: float
    atol: float
    mismatch_mask: np.ndarray | None = field(default=None, repr=False)
    #: |emulated − reference| per element (kept when some element mismatches, for heat maps).
    abs_error: np.ndarray | None = field(default=None, repr=False)
    #: (index, emulated value, reference value) of the element with the largest error.
    worst: tuple | None = None

    @property
    def ok(self) -> bool:
        return self.mismatches == 0

    def summary(self) -> str:
        where = f", first at {self.first_mismatch}" if self.first_mismatch is not None else ""
        total = int(np.prod(self.shape)) if self.shape else 1
        return (f"{self.name} ({self.dtype}{list(self.shape)}): max abs err {self.max_abs_error:.3g}, "
                f"max rel err {self.max_rel_error:.3g}, {self.mismatches}/{total} mismatches{where}")


@dataclass
class CompareResult:
    """Result of :meth:`HybridModule.compare`; ``ok`` when every output matches."""

    stage: str
    reference: str
    outputs: list[OutputComparison]
    emulate_seconds: float
    reference_seconds: float
    mode: str = "exact"
    #: Set when the emulation failed part-way (``compare(..., on_error="partial")``): the outputs
    #: compared are what it wrote before failing, and the result is never ``ok``.
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and all(o.ok for o in self.outputs)

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        verdict = "MATCH" if self.ok else "MISMATCH"
        head = (f"{verdict}: stage {self.stage} emulated ({self.mode}) vs {self.reference} — "
                f"emulation {self.emulate_seconds * 1e3:.1f} ms, reference {self.reference_seconds * 1e3:.1f} ms")
        failed = [f"  the emulation failed part-way; compared what it wrote: {self.error}"] if self.error else []
        return "\n".join([head] + failed + ["  " + o.summary() for o in self.outputs])

    __repr__ = __str__


def compare_arrays(name: str, actual: np.ndarray, expected: np.ndarray,
                   rtol: float | None = None, atol: float | None = None) -> OutputComparison:
    """Compare two arrays element by element; NaNs in the same places are equal."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    d_rtol, d_atol = default_tolerance(actual.dtype)
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    if actual.shape != expected.shape:
        expected = np.broadcast_to(expected, actual.shape)
    if np.issubdtype(actual.dtype, np.floating) or np.issubdtype(expected.dtype, np.floating):
        a = actual.astype(np.float64)
        e = expected.astype(np.float64)
        both_nan = np.isnan(a) & np.isnan(e)
        with np.errstate(invalid="ignore", over="ignore"):
            same_inf = np.isinf(a) & np.isinf(e) & (np.sign(a) == np.sign(e))
            diff = np.abs(a - e)
            diff = np.where(both_nan | same_inf, 0.0, diff)
            diff = np.where(np.isnan(diff), np.inf, diff)
            rel = diff / np.maximum(np.abs(e), np.finfo(np.float64).tiny)
            rel = np.where(diff == 0, 0.0, rel)
        bad = diff > atol + rtol * np.where(np.isfinite(e), np.abs(e), 0.0)
    else:
        a = actual.astype(np.int64) if actual.dtype != np.uint64 else actual
        e = expected.astype(np.int64) if expected.dtype != np.uint64 else expected
        diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
        rel = diff / np.maximum(np.abs(e.astype(np.float64)), 1.0)
        bad = (actual != expected) if (rtol == 0 and atol == 0) else diff > atol + rtol * np.abs(e)
    mismatches = int(np.count_nonzero(bad))
    worst = None
    if diff.size and mismatches:
        at = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff)), diff.shape))
        worst = (at, actual[at].item(), expected[at].item())
    first = tuple(int(i) for i in np.argwhere(bad)[0]) if mismatches else None
    return OutputComparison(
        name=name, dtype=str(actual.dtype), shape=tuple(actual.shape),
        max_abs_error=float(np.max(diff)) if diff.size else 0.0,
        max_rel_error=float(np.max(rel)) if rel.size else 0.0,
        mismatches=mismatches, first_mismatch=first, rtol=rtol, atol=atol,
        mismatch_mask=np.asarray(bad) if mismatches else None,
        abs_error=np.asarray(diff, dtype=np.float64) if mismatches else None, worst=worst)


def compare_outputs(names: Sequence[str], actual: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                    rtol: float | None = None, atol: float | None = None) -> list[OutputComparison]:
    """Compare each output with its reference."""
    if len(actual) != len(expected):
        raise ValueError(f"reference returned {len(expected)} outputs, the kernel has {len(actual)}")
    return [compare_arrays(n, a, e, rtol, atol) for n, a, e in zip(names, actual, expected)]
