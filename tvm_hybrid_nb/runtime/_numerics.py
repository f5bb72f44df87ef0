"""Numerics: TIR's integer, conversion and math semantics on numpy scalars and arrays.

Owns integer wrapping and division (``wrap``, ``truncdiv``, ``truncmod``, ``floordiv``,
``floormod``, their trap check ``_check_divisor``, ``shift_count``, the float ``FloorDiv``/``FloorMod``,
fixed-point ``q_multiply_shift``/``q_multiply_shift_per_axis`` as TVM legalizes them), the value a
function returns as the packed API hands it over (``packed_return``),
conversions as the native x86-64 kernel computes them (``cast``, ``reinterpret`` and the
``_float_to_*`` helpers) and the record of out-of-range float → integer conversions, whose native
value is undefined (:class:`OutOfRangeConversions`, :data:`OUT_OF_RANGE_CONVERSIONS`), ``select``/``minimum``/``maximum``/``ordered_ne``, and math in the operand's dtype
(``rsqrt``, ``sigmoid``, ``erf``, ``clz``, ``popcount``, ``in_double``, ``nan_through``, float64 ``libm``, ``libm_float32``).
"""
from __future__ import annotations

import contextvars
import math

import numpy as np

from ._sanitizers import _lane_note  # named threads in errors (a helper dependency)


# --------------------------------------------------------------------------- integer semantics
def wrap(value, dtype):
    """Wrap a Python int into ``dtype``'s range (two's complement), as the hardware does."""
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value).astype(dtype)[()]
    info = np.iinfo(dtype)
    span = 1 << info.bits
    return (value - info.min) % span + info.min


def _check_divisor(a, b, dtype=None, mask=None):
    """Raise where the hardware traps: a zero divisor, or ``INT_MIN / -1`` of a signed dtype
    (x86's ``idiv`` raises SIGFPE for both; LLVM calls the overflow undefined).  Lanes where
    ``mask`` is false (the untaken arm of a lazy ``if_then_else``, a branch not taken) do not
    divide: a zero divisor there becomes 1.  Returns the divisor to use."""
    if (mask is None and isinstance(b, (int, np.integer)) and isinstance(a, (int, np.integer))
            and b != 0 and b != -1):
        return b  # scalars that cannot trap (the common case of exact mode, once per statement)
    if isinstance(b, (int, np.integer)) and b > 0:
        return b  # a positive scalar divisor traps on no dividend (an index expression over lanes)
    taken = True if mask is None else np.asarray(mask, dtype=bool)
    zero = np.asarray(b) == 0
    if 0 in np.broadcast_shapes(np.shape(a), zero.shape, np.shape(taken)):  # no lane divides (a zero-trip loop)
        if not zero.any():
            return b
        return 1 if isinstance(b, int) else np.where(zero, np.ones((), np.asarray(b).dtype), b)
    if np.any(zero & taken):
        raise ZeroDivisionError("integer division by zero")
    if dtype is None and not (isinstance(a, int) and isinstance(b, int)):
        dtype = np.result_type(a, b)
    if dtype is not None and np.dtype(dtype).kind == "i":
        low = np.iinfo(dtype).min
        if np.any((np.asarray(a) == low) & (np.asarray(b) == -1) & taken):
            raise OverflowError(f"integer division overflow: {low} / -1 does not fit {np.dtype(dtype)} "
                                f"(undefined behaviour: x86's idiv traps with SIGFPE, and LLVM may fold the division by -1 "
                                f"into a negation whose overflow is poison; a CUDA kernel returns an unspecified value)")
    if mask is not None and np.any(zero):
        b = np.where(taken, b, np.ones((), np.asarray(b).dtype))
    return b


def truncdiv(a, b, dtype=None, mask=None):
    """Integer division rounding toward zero (TIR ``Div`` on integers, C semantics)."""
    b = _check_divisor(a, b, dtype, mask)
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)
        return q if (a < 0) == (b < 0) else -q
    r = np.fmod(a, b)
    return (a - r) // b


def truncmod(a, b, dtype=None, mask=None):
    """Remainder with the sign of the dividend (TIR ``Mod`` on integers, C ``%``)."""
    b = _check_divisor(a, b, dtype, mask)
    if isinstance(a, int) and isinstance(b, int):
        r = abs(a) % abs(b)
        return r if a >= 0 else -r
    return np.fmod(a, b)


def floordiv(a, b, dtype=None, mask=None):
    """Integer division rounding toward minus infinity (TIR ``FloorDiv``)."""
    b = _check_divisor(a, b, dtype, mask)
    return a // b


def floormod(a, b, dtype=None, mask=None):
    """Remainder with the sign of the divisor (TIR ``FloorMod``)."""
    b = _check_divisor(a, b, dtype, mask)
    return a % b


def shift_count(count, bits, mask=None):
    """Sanitizer: a shift count must lie in ``[0, bits)`` (LLVM makes other shifts poison)."""
    bad = (np.asarray(count) < 0) | (np.asarray(count) >= bits)
    if mask is not None:
        bad = bad & np.asarray(mask, dtype=bool)
    if np.any(bad):
        first = np.broadcast_to(np.asarray(count), np.shape(bad))[bad].reshape(-1)[0]
        raise ValueError(f"shift by {int(first)} of a {bits}-bit integer: counts outside [0, {bits}) are "
                         f"undefined in LLVM and C (the native result depends on how it was compiled)")
    return count


def checked_arith(a, b, op, dtype, mask=None, poison=None, at=(), promoted=False,
                  _limits={}):  # noqa: B006 (the default is the cache)
    """Sanitizer: ``a op b`` (``"+"``, ``"-"``, ``"*"``) of 32- or 64-bit integers, computed as the
    plain operator computes it (wrapping), after checking that the exact result fits ``dtype``.  TVM's
    llvm code generator emits these with ``nsw`` (signed) or ``nuw`` (unsigned), so a result that does
    not fit is poison, and LLVM folds what depends on it as it likes (``clz(x * K + C)`` to 0 for every
    x once ``nuw`` says the sum is at least C).  Lanes where ``mask`` is false are not checked.
    With ``poison`` (a ``RaceLog``: the value is on its way into an allocation, on an LLVM target,
    where poison is a value until used) the lanes that overflow are tainted instead of reported, and
    the report comes if the stored element is read.  ``lanes`` (as ``access`` takes them) name the
    first thread that overflows.  ``_limits`` keeps each dtype's range (a kernel calls this once per
    statement execution).

    ``promoted``: an 8- or 16-bit ``+``, ``-``, ``*`` or ``<<`` on a target printed as C, whose result
    something other than a store reads (a widening cast, a comparison, a division, a right shift):
    C computes it in the promoted ``int``, so an overflow there is seen unwrapped by the compiled
    kernel, where the TIR wraps it; reported, as the two then differ."""
    limits = _limits.get(dtype)
    if limits is None:
        info = np.iinfo(dtype)
        limits = _limits[dtype] = (int(info.min), int(info.max), info.bits)
    lo, hi, bits = limits
    fn = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y, "<<": lambda x, y: x << y}[op]
    if isinstance(a, int) and isinstance(b, int):
        out = exact = fn(a, b)
        bad = np.asarray(exact < lo or exact > hi)
    elif bits <= 32:  # exact in 64 bits: uint32 products in uint64, the rest in int64
        a, b = np.asarray(a), np.asarray(b)
        wide = np.uint64 if op == "*" and lo == 0 else np.int64
        exact = fn(a.astype(wide), b.astype(wide))
        out = exact.astype(dtype, copy=False)  # the operation's dtype, not numpy's promotion of a constant
        bad = (exact < lo) | (exact > hi) if lo < 0 else exact > hi
        if wide is np.int64 and lo == 0:
            bad = bad | (exact < 0)
        out = out[()] if out.ndim == 0 else out
    else:  # 64 bits: candidates by a float64 estimate, decided exactly in Python ints
        with np.errstate(over="ignore"):
            out = fn(a, b)
        estimate = fn(np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64))
        near = (estimate < float(lo) * (1 - 2.0 ** -40)) | (estimate > float(hi) * (1 - 2.0 ** -40))
        bad = np.zeros(np.shape(near), bool)
        if near.any():
            wide_a = np.broadcast_to(np.asarray(a), np.shape(near))[near].astype(object)
            wide_b = np.broadcast_to(np.asarray(b), np.shape(near))[near].astype(object)
            bad[near] = [v < lo or v > hi for v in fn(wide_a, wide_b)]
    if mask is not None:
        bad = bad & np.asarray(mask, dtype=bool)
    if bad.any():
        record = globals().get("__out_of_range__")
        record = record.get() if record is not None else None
        if record is not None and record.probing:
            # A rerun that gives poison conversions the type's min/max/zero to see which outputs
            # depend on them: sums of those stand-ins are not the kernel's (the run with the native
            # values checked its own).  Wrapped into the dtype, as the plain operator wraps.
            return wrap(out, dtype)
        lane = np.asarray(bad, dtype=bool)
        x, y = (int(np.broadcast_to(np.asarray(v), lane.shape)[lane].reshape(-1)[0]) for v in (a, b))
        name = np.dtype(dtype)
        if promoted:
            raise ValueError(
                f"{name} overflow: {x} {op} {y} = {fn(x, y)}, outside [{lo}, {hi}], read before any store "
                f"truncates it: the target's C code computes {name} arithmetic in int (C's integer "
                f"promotion), so the compiled kernel uses {fn(x, y)} where the TIR wraps it to "
                f"{wrap(fn(x, y), dtype)}; the kernel and its TIR differ here{_lane_note(lane, at)}")
        message = (f"{name} overflow: {x} {op} {y} = {fn(x, y)}, outside [{lo}, {hi}]; "
                   f"the target leaves it undefined (TVM's llvm code marks {name} {op} "
                   f"{'nsw' if lo < 0 else 'nuw'}; C's signed overflow on cuda), so the wrapped value is "
                   f"poison (the native result depends on how the compiler used that)"
                   f"{_lane_note(lane, at)}")
        if poison is None:
            raise ValueError(message)
        poison.taint(lane)
        poison.note = poison.note or message
        return wrap(out, dtype)  # the poison's stand-in (it is stored, and reported if read)
    return out


def promoted_invert(value, operand, dtype, mask=None, at=()):
    """Sanitizer, C targets: ``value``, the TIR's ``~operand`` of an unsigned 8- or 16-bit integer,
    read other than through a store's truncation (compared, widened, divided).  C computes ``~`` in
    the promoted ``int``, where ``~x`` is ``-(x + 1)``, never the TIR's ``2**bits - 1 - x``: the
    compiled kernel and its TIR differ in every lane where ``mask`` holds; reported."""
    lanes = np.ones(np.shape(value), bool) if mask is None else np.broadcast_to(np.asarray(mask, bool),
                                                                                np.shape(value))
    if lanes.any():
        x = int(np.broadcast_to(np.asarray(operand), lanes.shape)[lanes].reshape(-1)[0])
        raise ValueError(
            f"{np.dtype(dtype)} ~{x} = {(1 << np.dtype(dtype).itemsize * 8) - 1 - x} in the TIR, read before any "
            f"store truncates it: the target's C code computes ~ in int (C's integer promotion), where ~{x} is "
            f"{-(x + 1)}, so the compiled kernel uses {-(x + 1)}; the kernel and its TIR differ here"
            f"{_lane_note(lanes, at)}")
    return value


def packed_return(value, dtype):
    """The value of ``return value`` (``tirx.Return``) as TVM's packed API hands it to the caller:
    MakePackedAPI stores an integer as int64 (a Python int; uint64 wraps), a float as float64 (a
    Python float) and a bool as a bool."""
    kind = np.dtype(dtype).kind
    if kind == "b":
        return bool(value)
    if kind in "iu":
        value = int(value)
        return (value + (1 << 63)) % (1 << 64) - (1 << 63)
    return float(np.float64(value))


def _fixed_point_shift(x, left, right, q, multiplier):
    """``int32((x64 << left) * multiplier + (1 << (right + q - 1)) >> (right + q))`` with x64 =
    int64(x), the shift ``left`` applied only where it is non-zero (a ``Select``), ``right + q``
    computed in int32, products and sums wrapping in int64 and shift counts outside ``[0, 64)``
    refused (undefined in LLVM)."""
    x64 = np.asarray(x).astype(np.int64)
    left = np.asarray(left).astype(np.int64)
    total = (np.asarray(right).astype(np.int64) + np.asarray(q).astype(np.int64)).astype(np.int32).astype(np.int64)
    low = (total - 1).astype(np.int32).astype(np.int64)
    for count, used in ((left, left != 0), (low, True), (total, True)):
        if np.any(((count < 0) | (count >= 64)) & used):
            raise ValueError("fixed-point multiply: shift by a count outside [0, 64) of an int64 is undefined "
                             "in LLVM (the native result depends on how it was compiled)")
    with np.errstate(over="ignore"):  # int64 wraps, as LLVM's does
        shifted = np.where(left != 0, (x64.astype(np.uint64) << np.where(left != 0, left, 0).astype(np.uint64))
                           .astype(np.int64), x64)
        product = (shifted.astype(np.uint64) * np.asarray(multiplier).astype(np.int64).astype(np.uint64))
        rounded = (product + (np.uint64(1) << low.astype(np.uint64))).astype(np.int64)
        out = (rounded >> total).astype(np.int32)
    return out[()] if out.ndim == 0 else out


def q_multiply_shift(x, y, q, s, power_of_two=False):
    """TIR ``q_multiply_shift(x, y, q, s)``: ``round(x * y * 2**(s - q))`` of int32 Q-numbers, exactly as
    TVM legalizes it for llvm (``tirx.q_multiply_shift``'s ``default.FLegalize``).

    Generally: ``left = max(s, 0)``, ``right = s > 0 ? 0 : -s``; in int64
    ``((x << left) * y + (1 << (right + q - 1))) >> (right + q)``, truncated to int32.  When the
    multiplier is the constant ``1 << 30`` (0.5; ``power_of_two``, the generator knows it), TVM ignores
    ``q`` and stays in int32: ``x << (s - 1)`` when ``s > 1``, else ``(x + (1 << (-s))) >> (1 - s)``
    (``s`` is then a constant).  Integer overflow wraps; undefined shift counts raise ValueError."""
    if power_of_two:
        s = np.asarray(s).astype(np.int64)
        x32 = np.asarray(x).astype(np.int32)
        left = s - 1
        right = 1 - s
        for count in (np.where(left > 0, left, 0), np.where(left > 0, 0, right - 1), np.where(left > 0, 0, right)):
            if np.any((count < 0) | (count >= 32)):
                raise ValueError("q_multiply_shift: shift by a count outside [0, 32) of an int32 is undefined "
                                 "in LLVM (the native result depends on how it was compiled)")
        wide = x32.astype(np.uint32)
        with np.errstate(over="ignore"):  # int32 wraps, as LLVM's does
            up = (wide << np.where(left > 0, left, 0).astype(np.uint32)).astype(np.int32)
            rounding = (np.uint32(1) << np.where(left > 0, 0, right - 1).astype(np.uint32))
            down = (wide + rounding).astype(np.int32) >> np.where(left > 0, 0, right).astype(np.int32)
        out = np.where(left > 0, up, down).astype(np.int32)
        return out[()] if out.ndim == 0 else out
    s32 = np.asarray(s).astype(np.int64)
    left = np.where(s32 > 0, s32, 0)
    right = np.where(s32 > 0, 0, -s32)  # -INT_MIN wraps in int32, as TVM's 0 - s does
    return _fixed_point_shift(x, left, right.astype(np.int32), q, y)


def q_multiply_shift_per_axis(x, y, ls, rs, q, is_lshift_required, is_rshift_required):
    """TIR ``q_multiply_shift_per_axis``: the general ``q_multiply_shift`` with the shifts given apart, as
    TVM legalizes it: ``int32(((x64 << ls if is_lshift_required else x64) * y + (1 << (rs + q - 1)))
    >> (rs + q))`` in int64 (``is_rshift_required`` does not change TVM's lowering)."""
    left = np.where(np.asarray(is_lshift_required, dtype=bool), np.asarray(ls).astype(np.int64), 0)
    return _fixed_point_shift(x, left, rs, q, y)


def float_floordiv(a, b):
    """TIR ``FloorDiv`` on floats: ``floor(a / b)`` in the operands' dtype."""
    return np.floor(a / b)


def float_floormod(a, b):
    """TIR ``FloorMod`` on floats: ``a - floor(a / b) * b`` in the operands' dtype."""
    return a - np.floor(a / b) * b


# --------------------------------------------------------------------------- conversions
def _float_to_int32_or_64(x, bits):
    """x86 ``cvttss2si``/``cvttsd2si``: truncate toward zero; NaN and out-of-range values give
    the "integer indefinite" ``INT_MIN`` of the width.  Returns int64."""
    t = np.trunc(np.asarray(x, np.float64))
    limit = 2.0 ** (bits - 1)
    ok = (t >= -limit) & (t < limit)  # False for NaN
    return np.where(ok, t, -limit).astype(np.int64)


def _in_int_range(t, dtype):
    """Where the truncated floats ``t`` lie inside integer ``dtype``'s range (False for NaN).  The
    bounds, zero or powers of two, are exact in ``t``'s dtype (float16 values: compare as float32)."""
    info = np.iinfo(dtype)
    return (t >= float(info.min)) & (t < float(info.max + 1))


class OutOfRangeConversions:
    """The float → integer conversions of one emulation run whose value is outside the integer type
    (NaN, infinities, too large).  ``fptosi``/``fptoui`` make them poison in LLVM IR: the native
    value depends on how the loop was compiled (saturated in one vectorised loop, wrapped in another,
    ``INT_MIN`` in a scalar tail).  ``policy`` is the value a run gives them: ``"native"`` (the x86-64
    sequences :func:`_float_to_int` models), or the type's ``"min"``, ``"max"`` or ``"zero"``; a run
    under each that changes an output shows that the output depends on an undefined value.
    ``first`` is the first such conversion seen: (value, source dtype, destination dtype).
    Orders the kernel leaves open are undefined alike (:meth:`unordered`: TVM's runtime sort of NaN, a
    cross-thread min of NaN before LowerThreadAllreduce): ``unordered_cause`` says the first, and the
    policy picks the order of each run.
    ``probing``: a rerun that only looks for outputs depending on those values; the overflow
    sanitizer (``checked_arith``) stays quiet in it, the stand-ins' sums not being the kernel's."""

    POLICIES = ("native", "min", "max", "zero")

    def __init__(self, policy: str = "native", probing: bool = False):
        if policy not in self.POLICIES:
            raise ValueError(f"policy must be one of {self.POLICIES}, got {policy!r}")
        self.policy = policy
        self.probing = probing
        self.first = None
        self.unordered_cause = None

    def unordered(self, cause: str) -> str:
        """The policy by which a computation whose order the kernel leaves open orders its values
        this run (a sort of NaN, a cross-thread min of NaN); ``cause`` says what depends on it (the
        first is recorded)."""
        if self.unordered_cause is None:
            self.unordered_cause = cause
        return self.policy

    def convert(self, x, native, dtype):
        """``native`` (the converted ``x``), with this run's value where ``x`` is out of ``dtype``'s range."""
        bad = ~_in_int_range(np.trunc(np.asarray(x, np.float64)), dtype)
        if not bad.any():
            return native
        if self.first is None:
            self.first = (np.asarray(x)[bad].reshape(-1)[0].item(), str(np.asarray(x).dtype), str(np.dtype(dtype)))
        if self.policy == "native":
            return native
        info = np.iinfo(dtype)
        value = {"min": info.min, "max": info.max, "zero": 0}[self.policy]
        return np.where(bad, np.asarray(value, dtype), native)


#: The :class:`OutOfRangeConversions` of the run in progress (None: none recorded, the native model).
#: The loader puts it into each script's namespace as ``__out_of_range__``; worker threads of parallel
#: loops run in a copy of the caller's context, so they see the same record.
OUT_OF_RANGE_CONVERSIONS: contextvars.ContextVar = contextvars.ContextVar("out_of_range_conversions", default=None)


def _float_to_int(x, dtype):
    """Float → integer as the native LLVM kernel computes it on x86-64 (measured, vectorised
    loops): in-range values truncate; NaN, infinities and out-of-range values follow the
    instruction sequences LLVM emits (``fptosi``/``fptoui`` of such values are poison in LLVM
    IR, so scalar remainder iterations of a native loop may differ).  Under an emulation run
    those values go through its :class:`OutOfRangeConversions` (a script run alone has none)."""
    arr = np.asarray(x)
    if arr.dtype in (np.float16, np.float32, np.float64):  # the common case first: every value in range
        t = np.trunc(arr.astype(np.float32) if arr.dtype == np.float16 else arr)
        if np.all(_in_int_range(t, dtype)):
            return t.astype(dtype)
    record = globals().get("__out_of_range__")
    record = record.get() if record is not None else None
    out = _float_to_int_native(x, dtype)
    return out if record is None else record.convert(x, out, dtype)


def _float_to_int_native(x, dtype):
    """:func:`_float_to_int` without a record: the x86-64 model alone."""
    dtype = np.dtype(dtype)
    src = np.asarray(x).dtype
    if dtype.itemsize == 8:
        t1 = _float_to_int32_or_64(x, 64)
        if dtype.kind == "i":
            return t1
        t2 = _float_to_int32_or_64(np.asarray(x, np.float64) - 2.0 ** 63, 64)
        return (t1 | (t2 & (t1 >> 63))).view(np.uint64)
    t1 = _float_to_int32_or_64(x, 32)
    if dtype == np.uint32:
        t2 = _float_to_int32_or_64(np.asarray(x, np.float64) - 2.0 ** 31, 32)
        sign = np.where(t1 < 0, np.int64(-1), np.int64(0))
        return ((t1 | (t2 & sign)) & 0xFFFFFFFF).astype(np.uint32)
    if dtype == np.int32:
        return t1.astype(np.int32)
    if dtype == np.uint16 or (dtype == np.int16 and src == np.float16):
        return t1.astype(dtype)  # the low bits (wrap)
    info = np.iinfo(dtype)
    return np.clip(t1, info.min, info.max).astype(dtype)  # packed with saturation


def _float_to_float(arr, dtype):
    """Float → float as the native kernel converts (x86-64, F16C): numpy's values, but a NaN
    leaves a conversion quiet (its quiet bit set), as ``cvtss2sd``/``vcvtps2ph`` and compiler-rt
    make it, except float16 → float32 (``vcvtph2ps`` keeps the payload as it is)."""
    out = arr.astype(dtype)
    nan = np.isnan(arr)
    if not nan.any() or (arr.dtype == np.float16 and out.dtype == np.float32):
        return out
    out = np.array(out, copy=True)
    bits = out.view(f"u{out.itemsize}")
    if out.dtype == np.float16:  # sign, quiet NaN, the top 9 payload bits of the source
        src_bits = arr.view(f"u{arr.itemsize}").astype(np.uint64)
        mant_bits = np.finfo(arr.dtype).nmant
        sign = (src_bits >> (arr.itemsize * 8 - 1)).astype(np.uint16) << 15
        payload = ((src_bits >> (mant_bits - 10)) & 0x1FF).astype(np.uint16)
        bits[nan] = (sign | 0x7E00 | payload)[nan]
    else:
        quiet = np.array(1 << (np.finfo(out.dtype).nmant - 1), bits.dtype)
        bits[nan] |= quiet
    return out


def cast(value, dtype):
    """Convert like TVM's ``Cast``: integers wrap, floats round to nearest, float→int truncates
    (NaN and out-of-range values as the native kernel converts them, see ``_float_to_int``)."""
    if type(value) in (np.float32, np.float64):  # a scalar script's common cases first, 8 times faster
        if dtype == "int32" or dtype == "int64":
            limit = 2147483648.0 if dtype == "int32" else 9223372036854775808.0
            if -limit <= value < limit:  # exact powers of two; NaN and infinities take the general path
                return np.int32(int(value)) if dtype == "int32" else np.int64(int(value))  # int() truncates
        elif (dtype == "float32" or dtype == "float64") and value == value:  # a NaN keeps its quiet bit below
            return np.float32(value) if dtype == "float32" else np.float64(value)  # rounds to nearest even
    arr = np.asarray(value)
    if dtype == "bool":
        out = arr != 0
    elif arr.dtype.kind == "f" and np.dtype(dtype).kind in "iu":
        out = _float_to_int(arr, dtype)
    elif arr.dtype.kind == "f" and np.dtype(dtype).kind == "f":
        out = _float_to_float(arr, dtype)
    else:
        out = arr.astype(dtype)
    return out[()] if out.ndim == 0 else out


def reinterpret(value, dtype):
    """Reinterpret the bits of ``value`` as ``dtype`` (same total width); a scalar stays a scalar."""
    scalar = np.ndim(value) == 0
    out = np.ascontiguousarray(value).view(dtype)  # at least 1-D: a scalar becomes one element
    return out.reshape(())[()] if scalar and out.size == 1 else out


# --------------------------------------------------------------------------- selection
def select(condition, true_value, false_value):
    """TIR ``Select``: both sides are already evaluated; pick per lane."""
    out = np.where(condition, true_value, false_value)
    return out[()] if out.ndim == 0 else out


def ordered_ne(a, b):
    """TIR ``NE`` on floats as TVM's llvm backend emits it, ``fcmp one``: false where a side is NaN
    (C's, CUDA's and numpy's ``!=`` say true)."""
    out = np.less(a, b) | np.greater(a, b)
    return out[()] if np.ndim(out) == 0 else out


def minimum(a, b):
    """TIR ``Min`` as the backend emits it, ``select(a < b, a, b)`` (NaN picks ``b``)."""
    return select(a < b, a, b)


def maximum(a, b):
    """TIR ``Max`` as the backend emits it, ``select(a > b, a, b)`` (NaN picks ``b``)."""
    return select(a > b, a, b)


def minimum_ignoring_nan(a, b):
    """TIR ``Min`` of float32/float64 in CUDA code: CUDA's ``min(float, float)`` is ``fminf`` (``fmin``
    for double), so a NaN on one side gives the other side; otherwise ``select(a < b, a, b)``, as PTX's
    ``min.f32`` orders the rest."""
    return select(np.isnan(b) | (a < b), a, b)


def maximum_ignoring_nan(a, b):
    """TIR ``Max`` of float32/float64 in CUDA code: ``fmaxf``/``fmax`` (a NaN on one side gives the
    other side); otherwise ``select(a > b, a, b)``."""
    return select(np.isnan(b) | (a > b), a, b)


# --------------------------------------------------------------------------- math in the operand dtype
def rsqrt(x):
    """``1 / sqrt(x)`` in ``x``'s dtype."""
    x = np.asarray(x)
    out = np.asarray(1, dtype=x.dtype) / np.sqrt(x)
    return out[()] if out.ndim == 0 else out


def sigmoid(x):
    """``1 / (1 + exp(-x))`` in ``x``'s dtype."""
    x = np.asarray(x)
    one = np.asarray(1, dtype=x.dtype)
    out = one / (one + np.exp(-x))
    return out[()] if out.ndim == 0 else out


def erf(x):
    """The error function, computed in double and rounded to ``x``'s dtype."""
    x = np.asarray(x)
    out = np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)
    return out[()] if out.ndim == 0 else out


def _c_math(c_name: str, ctype, arity: int):
    """The C math library's function ``c_name`` of ``arity`` arguments of ``ctype`` (``ctypes.c_float``,
    ``c_double``) through ``ctypes``, looked up once; None without a C math library."""
    import ctypes
    import ctypes.util

    cache = _c_math.__dict__.setdefault("functions", {})
    if c_name not in cache:
        path = ctypes.util.find_library("m")
        function = getattr(ctypes.CDLL(path), c_name, None) if path else None
        if function is not None:
            function.restype = ctypes.c_float if ctype == "float" else ctypes.c_double
            function.argtypes = [function.restype] * arity
        cache[c_name] = function
    return cache[c_name]


def _c_name(name: str) -> str:
    """The C math library's name of numpy's ``name`` (its float64 function; float32 adds ``f``)."""
    return {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh", "arccosh": "acosh",
            "arctanh": "atanh", "arctan2": "atan2", "power": "pow"}.get(name, name)


def libm(name, x, *more):
    """float64 ``np.<name>`` of ``x`` (and ``more`` operands: ``power``, ``arctan2``) as the C library
    computes it: TVM's llvm code calls libm (``exp``, ``sinh``, ``pow``...), whose last bit numpy's own
    float64 loops miss in up to a quarter of the values.  Each element goes through Python's ``math``
    (the same libm); where ``math`` raises instead of returning (overflow, a domain error) the C
    function itself gives the value (its infinity, its NaN's sign)."""
    c_name = _c_name(name)
    exact = getattr(math, c_name)
    operands = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (x, *more)))

    def one(*values):
        try:
            return exact(*values)
        except (OverflowError, ValueError):
            function = _c_math(c_name, "double", len(values))
            if function is not None:
                return function(*values)
            with np.errstate(all="ignore"):
                return float(getattr(np, name)(*values))

    out = np.asarray(np.frompyfunc(one, len(operands), 1)(*operands), dtype=np.float64).reshape(operands[0].shape)
    return out[()] if out.ndim == 0 else out


def libm_float32(name, x, *more):
    """float32 ``np.<name>`` of ``x`` (and ``more``: ``arctan2``) as the C library's float function
    computes it (``sinhf``, ``log10f``, ``atan2f``, ``erff``...), which TVM's llvm code calls: glibc
    does not round those correctly, so neither numpy's float32 loops nor a float64 value rounded give
    its last bit (1 ulp off in 1 % to 28 % of values).  Each element is a call through ``ctypes``;
    without a C math library (none found) the float64 value rounded."""
    c_name = _c_name(name) + "f"
    operands = np.broadcast_arrays(*(np.asarray(v, np.float32) for v in (x, *more)))
    function = _c_math(c_name, "float", len(operands))
    if function is None:
        exact = math.erf if name == "erf" else getattr(np, name)
        out = np.frompyfunc(exact, len(operands), 1)(*(o.astype(np.float64) for o in operands))
    else:
        out = np.frompyfunc(function, len(operands), 1)(*operands)
    out = np.asarray(out, dtype=np.float64).astype(np.float32).reshape(operands[0].shape)
    return out[()] if out.ndim == 0 else out


def exp10(x):
    """``10 ** x``, computed in double and rounded to ``x``'s dtype (CUDA's ``exp10f`` is within 2
    ulps of it; on llvm TVM lowers ``exp10`` to ``exp`` before the emulated stages end)."""
    x = np.asarray(x)
    out = np.power(10.0, x.astype(np.float64)).astype(x.dtype)
    return out[()] if out.ndim == 0 else out


def _unary_in_dtype(fn, x):
    x = np.asarray(x)
    out = np.asarray(fn(x.astype(np.float64))).astype(x.dtype)
    return out[()] if out.ndim == 0 else out


def clz(x, dtype):
    """Leading zero bits of each integer in its own width, as ``dtype``.  Zero is refused: TVM's
    llvm backend emits ``ctlz`` with a poisoned zero, so the compiled kernel's result is undefined."""
    x = np.asarray(x)
    if not np.all(x):
        raise ValueError("clz(0) is undefined in TVM's llvm code (ctlz with is_zero_poison)")
    bits = x.dtype.itemsize * 8
    rest = x.astype(np.dtype(f"uint{bits}"))
    length = np.zeros(rest.shape, np.int64)
    shift = bits // 2
    while shift:
        high = rest >= (np.uint64(1) << np.uint64(shift)).astype(rest.dtype)
        length += np.where(high, shift, 0)
        rest = np.where(high, rest >> rest.dtype.type(shift), rest)
        shift //= 2
    out = (bits - length - (rest > 0)).astype(dtype)
    return out[()] if out.ndim == 0 else out


def in_double(fn, x, *more):
    """``fn`` of a float32 (or float16) ``x`` (and ``more`` operands: ``pow``, ``atan2``) computed in
    float64 and rounded to float32 (then to ``x``'s dtype): the correctly rounded value, which is
    what libm's ``expf``/``logf``/``powf``... give the native kernel nearly always."""
    x = np.asarray(x)
    out = fn(x.astype(np.float64), *(np.asarray(m).astype(np.float64) for m in more)).astype(np.float32).astype(x.dtype)
    return out[()] if out.ndim == 0 else out


def power_in_double(x, y):
    """float32 (or float16) ``pow`` as libm's ``powf`` gives the native kernel: computed in float64 and
    rounded (:func:`in_double`), and where a side is a special value (a zero, negative, infinite or NaN
    base, an infinite, NaN or zero exponent) by the C library's ``pow``: numpy's float64 loop gives
    ``pow(-inf, 0.5)`` NaN and ``pow(-0.0, 0.5)`` -0.0 (it takes the square root), C +inf and +0.0."""
    x = np.asarray(x)
    base, exponent = np.broadcast_arrays(x.astype(np.float64), np.asarray(y).astype(np.float64))
    with np.errstate(all="ignore"):
        out = np.power(base, exponent)
    special = ~(base > 0) | ~np.isfinite(base) | ~np.isfinite(exponent) | (exponent == 0)
    if special.any():
        out = np.array(out, dtype=np.float64)
        out[special] = libm("power", base[special], exponent[special])
    out = np.asarray(out).astype(np.float32).astype(x.dtype)
    return out[()] if out.ndim == 0 else out


def nan_through(fn, x, double=False):
    """``fn(x)`` (computed in float64 as :func:`in_double` does, where ``double``), a NaN operand
    coming out as itself, quieted, as libm returns it (numpy's vector loops may give their own NaN
    instead), so NaN signs and payloads do not depend on how numpy ran.  ``x`` is given once: a
    script nesting these calls stays linear in the kernel's expression."""
    out = in_double(fn, x) if double else fn(x)
    nan = np.isnan(x)
    if not np.any(nan):
        return out
    res = np.where(nan, x + x, out).astype(np.result_type(out), copy=False)
    return res[()] if res.ndim == 0 else res


def popcount(x):
    """Number of set bits, in ``x``'s dtype."""
    x = np.asarray(x)
    bits = np.unpackbits(np.ascontiguousarray(x).reshape(-1).view(np.uint8)).reshape(x.size, -1).sum(axis=1)
    out = bits.astype(x.dtype).reshape(x.shape)
    return out[()] if out.ndim == 0 else out
