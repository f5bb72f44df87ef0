"""Comparison of emulated outputs with a reference: tolerances by dtype and readable results."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .errors import CompareError

#: (rtol, atol) by float dtype.  The native build may contract a*b+c into one fused multiply-add,
#: which rounds once where the IR (and so the emulation) rounds twice; the tolerances allow that.
#: Narrow floats without an entry (float8, float6, float4 of ml_dtypes) allow one unit in the last
#: place: ``(eps, smallest normal)`` of the dtype.
FLOAT_TOLERANCES = {
    "float16": (1e-2, 1e-3),
    "bfloat16": (1e-2, 1e-3),
    "float32": (1e-4, 1e-5),
    "float64": (1e-9, 1e-12),
}


def _ml_dtypes():
    try:
        import ml_dtypes
    except ImportError:  # pragma: no cover - TVM depends on it
        return None
    return ml_dtypes


def float_info(dtype) -> Any | None:
    """``finfo`` of a float dtype, numpy's own or ml_dtypes' (bfloat16, float8...); None for others."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        try:
            return np.finfo(dtype)
        except ValueError:
            pass
    ml = _ml_dtypes()
    if ml is not None and dtype.kind in "fV":
        try:
            return ml.finfo(dtype)
        except (ValueError, TypeError):
            return None
    return None


def is_integer_dtype(dtype) -> bool:
    """Integers of numpy or ml_dtypes (int4, uint2...); bool counts as an integer (0 and 1)."""
    dtype = np.dtype(dtype)
    if dtype.kind in "iub":
        return True
    ml = _ml_dtypes()
    if ml is not None and dtype.kind == "V":
        try:
            ml.iinfo(dtype)
            return True
        except (ValueError, TypeError):
            return False
    return False


def _kind_text(dtype: np.dtype) -> str:
    if float_info(dtype) is not None:
        return "float"
    if is_integer_dtype(dtype):
        return "integer"
    return "non-numeric"


def check_tolerance(name: str, value) -> float | None:
    """``value`` as a float when it is a usable tolerance (finite, >= 0); None stays None."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise CompareError(f"{name} must be a number >= 0, got {type(value).__name__} {value!r}")
    value = float(value)
    if not np.isfinite(value) or value < 0:
        raise CompareError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


def default_tolerance(dtype: np.dtype) -> tuple[float, float]:
    """(rtol, atol) for ``dtype``: exact (0, 0) for integers and bool."""
    dtype = np.dtype(dtype)
    info = float_info(dtype)
    if info is None:
        return (0.0, 0.0)
    if dtype.name in FLOAT_TOLERANCES:
        return FLOAT_TOLERANCES[dtype.name]
    return (float(info.eps), float(info.smallest_normal))


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
    #: Fast mode that ran the exact plan (its analysis would cost more than this call's serial
    #: run, see :func:`~tvm_hybrid_nb.codegen.cost.exact_plan_reason`): why; "" otherwise.
    exact_reason: str = ""

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
        ran = [f"  {self.mode} mode ran the exact plan: {self.exact_reason}"] if self.exact_reason else []
        return "\n".join([head] + ran + failed + ["  " + o.summary() for o in self.outputs])

    __repr__ = __str__


def compare_arrays(name: str, actual: np.ndarray, expected: np.ndarray,
                   rtol: float | None = None, atol: float | None = None) -> OutputComparison:
    """Compare an output (``actual``) with its reference (``expected``) element by element.

    Values are compared, never casts of them: floats (bfloat16 and float8 decoded) in float64 with
    the output dtype's tolerances, NaNs in the same places and infinities of the same sign equal,
    -0.0 equal to 0.0; integers exactly, at any width.  The reference may be wider than the output
    (float64 for a float32 output, int64 for int32) and a float output may have an integer
    reference, but an integer or bool output needs an integer reference: a float reference cannot
    be compared exactly, so it is refused.  Shapes must be equal (no broadcasting).

    Raises
    ------
    CompareError
        Shapes differ, a dtype is not numeric, an integer output has a float reference, or a
        tolerance is negative or not finite.
    """
    rtol = check_tolerance("rtol", rtol)
    atol = check_tolerance("atol", atol)
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    if actual.shape != expected.shape:
        raise CompareError(f"output {name}: the reference has shape {expected.shape}, the output "
                           f"{actual.shape} ({actual.dtype}); shapes must be equal, nothing is broadcast")
    for which, dtype in (("output", actual.dtype), ("reference", expected.dtype)):
        if _kind_text(dtype) == "non-numeric":
            raise CompareError(f"output {name}: the {which} has dtype {dtype}, not bool, int or float "
                               f"(the output is {actual.dtype})")
    out_float = float_info(actual.dtype) is not None
    if not out_float and float_info(expected.dtype) is not None:
        raise CompareError(f"output {name}: the reference is {expected.dtype} but the output is "
                           f"{actual.dtype}; integer and bool outputs are compared exactly, so return integers "
                           f"(e.g. .astype(np.{actual.dtype.name}))")
    d_rtol, d_atol = default_tolerance(actual.dtype)
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    if out_float:
        diff, rel, bad = _float_errors(actual, expected, rtol, atol)
    else:
        diff, rel, bad = _integer_errors(actual, expected, rtol, atol)
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


def _float_errors(actual, expected, rtol, atol):
    """(abs error, rel error, mismatch mask) of two arrays decoded to float64."""
    a = actual.astype(np.float64)
    e = expected.astype(np.float64)
    both_nan = np.isnan(a) & np.isnan(e)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        same_inf = np.isinf(a) & np.isinf(e) & (np.sign(a) == np.sign(e))
        diff = np.abs(a - e)
        diff = np.where(both_nan | same_inf, 0.0, diff)
        diff = np.where(np.isnan(diff), np.inf, diff)  # NaN on one side only, or inf against -inf
        rel = diff / np.maximum(np.abs(e), np.finfo(np.float64).tiny)
        rel = np.where(diff == 0, 0.0, rel)
        bad = diff > atol + rtol * np.where(np.isfinite(e), np.abs(e), 0.0)
    return diff, rel, bad


def _exact_integers(x: np.ndarray) -> np.ndarray:
    """``x`` as int64, or as uint64 when it is uint64 (both hold every value exactly)."""
    return x if x.dtype == np.uint64 else x.astype(np.int64)


def _integer_errors(actual, expected, rtol, atol):
    """(abs error, rel error, mismatch mask) of two integer arrays; the difference is exact in uint64."""
    a = _exact_integers(actual)
    e = _exact_integers(expected)
    if a.dtype == e.dtype:
        equal = a == e
        ua, ue = a.astype(np.uint64), e.astype(np.uint64)  # two's complement: the difference wraps exactly
        diff = np.where(a >= e, ua - ue, ue - ua).astype(np.float64)
    else:  # one int64, one uint64: a negative value never equals an unsigned one
        signed, unsigned = (a, e) if a.dtype == np.int64 else (e, a)
        negative = signed < 0
        as_unsigned = np.where(negative, 0, signed).astype(np.uint64)
        equal = ~negative & (as_unsigned == unsigned)
        exact = np.where(as_unsigned >= unsigned, as_unsigned - unsigned, unsigned - as_unsigned)
        diff = np.where(negative, unsigned.astype(np.float64) - signed.astype(np.float64),
                        exact.astype(np.float64))
    diff = np.where(equal, 0.0, np.maximum(diff, 1.0))  # a difference never rounds to 0 in float64
    magnitude = np.abs(e.astype(np.float64))
    rel = diff / np.maximum(magnitude, 1.0)
    bad = ~equal if (rtol == 0 and atol == 0) else diff > atol + rtol * magnitude
    return diff, rel, bad


def compare_outputs(names: Sequence[str], actual: Sequence[np.ndarray], expected: Sequence[np.ndarray],
                    rtol: float | None = None, atol: float | None = None) -> list[OutputComparison]:
    """Compare each output with its reference (see :func:`compare_arrays` for the rules)."""
    if len(actual) != len(expected):
        raise CompareError(f"the reference returned {len(expected)} outputs, the kernel has {len(actual)} "
                           f"({', '.join(names)})")
    return [compare_arrays(n, a, e, rtol, atol) for n, a, e in zip(names, actual, expected)]


def reference_outputs(got: Any, names: Sequence[str], reference_name: str = "reference") -> list[np.ndarray]:
    """The arrays a reference function returned, one per output, checked for count and kind.

    One output: an array (or array-like).  Several: a tuple or list with one array per output, in
    parameter order.  None, a wrong count, or something that is not an array of numbers is refused
    with a :class:`CompareError` that names the output.
    """
    wanted = f"{len(names)} output{'s' if len(names) != 1 else ''} ({', '.join(names)})"
    if got is None:
        raise CompareError(f"{reference_name} returned None; it must return the expected {wanted}")
    items = list(got) if isinstance(got, (tuple, list)) else [got]
    if len(items) != len(names):
        raise CompareError(f"{reference_name} returned {len(items)} outputs, the kernel has {wanted}")
    arrays = []
    for name, item in zip(names, items):
        if item is None:
            raise CompareError(f"{reference_name} returned None for output {name}")
        if not isinstance(item, np.ndarray) and callable(getattr(item, "numpy", None)):
            item = item.numpy()  # tvm.runtime.Tensor, torch.Tensor
        try:
            array = np.asarray(item)
        except Exception as exc:  # ragged lists, objects numpy cannot hold
            raise CompareError(f"{reference_name} returned a {type(item).__name__} for output {name}, "
                               f"not an array: {str(exc).splitlines()[0] if str(exc) else exc!r}") from None
        if _kind_text(array.dtype) == "non-numeric":
            raise CompareError(f"{reference_name} returned a {type(item).__name__} of dtype {array.dtype} "
                               f"for output {name}, not an array of bool, int or float")
        arrays.append(array)
    return arrays
