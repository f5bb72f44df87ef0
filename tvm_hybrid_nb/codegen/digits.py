"""Indices as mixed-radix numbers, for the dependence test (:mod:`.dependence`): an index as a sum of
constant multiples of its terms, the terms as the digits of a number (equal indices, equal digits),
multi-dimensional index tuples as one row-major number, accesses through several views of one
storage as offsets from its start, and the constant offsets of unrolled copies as more digits."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from .analysis import _uses_vars
from .guards import _all_of, _variables
from .names import _dtype, _key, _type_key
from .work import Analyzer


def _loop_ranges(loop, acc):
    """An analyzer knowing the range of ``loop``'s variable and of the loops around and inside it."""
    ranges = Analyzer()
    for var, lo, extent in (*acc.outer, *acc.inner, (loop.loop_var, loop.min, loop.extent)):
        ranges.bind(var, tvm.ir.Range.from_min_extent(lo, extent), allow_override=True)
    return ranges


def _affine_terms(expr) -> tuple[list, int]:
    """``expr`` as ``sum(coef * atom) + constant`` with constant integer coefficients (an atom is
    any other expression: ``x // 128``, ``x % 16``; a subtracted one has coefficient -1)."""
    terms, constant, stack = [], 0, [expr]
    while stack:
        e = stack.pop()
        key = _type_key(e)
        if key == "prim.Add":
            stack += [e.a, e.b]
        elif key == "ir.IntImm":
            constant += int(e.value)
        elif key == "prim.Sub" and _type_key(e.b) == "ir.IntImm":
            stack.append(e.a)
            constant -= int(e.b.value)
        elif key == "prim.Sub":
            stack.append(e.a)
            terms.append((-1, e.b))
        elif key == "prim.Mul" and _type_key(e.b) == "ir.IntImm":
            terms.append((int(e.b.value), e.a))
        elif key == "prim.Mul" and _type_key(e.a) == "ir.IntImm":
            terms.append((int(e.a.value), e.b))
        else:
            terms.append((1, e))
    return terms, constant


def _flat_index_digits(items, loop, acc, expand) -> list | None:
    """One-dimensional accesses whose index is a mixed-radix number of its terms where each access's
    guards hold, as accesses of those terms (most significant first): equal indices have equal
    terms, so the terms are indices of their own (one alone may keep the iterations apart: a block's
    row ``bx * 4096 + by * 128 + t`` of a flattened buffer).  After ``FlattenBuffer`` the rope's
    head split stores ``q[x // 128 * 64 + x % 128 // 16 * 16 + x % 16]`` under ``x % 128 // 16 < 4``:
    there the middle term stays below 4, so equal indices have equal terms, and the terms, as digits
    of their own ranges, are ``x``.  The accesses' terms pair up by coefficient: the same
    coefficients and constant in each, and where their atoms differ (a copy in and a copy out, each in
    its own ``for v`` loop) no coefficient twice in one access.  None otherwise."""
    if any(len(item[2]) != 1 or _type_key(item[2][0]) in ("prim.Ramp", "prim.Broadcast") for item in items):
        return None
    forms = [_affine_terms(expand.simplify(item[2][0])) for item in items]
    if any(len(form[0]) < 2 for form in forms):
        return None
    constant = forms[0][1]
    per_item = [sorted(terms, key=lambda t: t[0]) for terms, _constant in forms]  # smallest coefficient first
    coefs = [coef for coef, _atom in per_item[0]]
    if any(form[1] != constant or [coef for coef, _atom in terms] != coefs for form, terms in zip(forms, per_item)):
        return None
    if len(set(coefs)) < len(coefs) and any(not tvm_ffi.structural_equal(a, b) for terms in per_item[1:]
                                            for (_c, a), (_d, b) in zip(per_item[0], terms)):
        return None  # equal coefficients would pair the atoms arbitrarily
    if any(coef <= 0 for coef in coefs):
        return None
    ranges = _loop_ranges(loop, acc)
    guards = [_all_of([expand.simplify(guard) for guard in item[3]]) for item in items]

    def low_part(position: int, terms) -> object:
        return _sum_of([tirx.const(coef, _dtype(atom)) * atom for coef, atom in terms[:position + 1]])

    def below(position: int) -> bool:
        """Whether the terms up to ``position`` of every access, summed, spread over less than the
        next coefficient (where each access's guards hold)."""
        sums = [ranges.simplify(low_part(position, terms)) for terms in per_item]
        bounds = []
        for total, guard in zip(sums, guards):
            with ranges.constraint_scope(guard):
                bounds.append(ranges.const_int_bound(total))
        base, step = min(b.min_value for b in bounds), coefs[position + 1]
        if base < -(1 << 31) or base >= 1 << 31:
            return False
        for total, guard, bound in zip(sums, guards, bounds):
            if bound.max_value - base >= step:
                with ranges.constraint_scope(guard):  # a guard may bound the sum, not its terms
                    if not ranges.can_prove(total < tirx.const(base + step, _dtype(total))):
                        return False
        return True

    # Digits split where the terms below spread over less than the next coefficient, and every
    # coefficient of the digit above is a multiple of that one: then equal indices have equal
    # digits.  A digit of one term is its atom; of several (a guarded last block's row
    # ``by * 128 + t`` below ``bx * 4100``), their sum.
    splits, top = [], len(coefs) - 1  # positions after which a digit ends; the digit above ends at top
    for position in range(len(coefs) - 2, -1, -1):
        if all(c % coefs[position + 1] == 0 for c in coefs[position + 1:top + 1]) and below(position):
            splits.append(position)
            top = position
    if not splits:
        return None
    edges = [-1, *sorted(splits), len(coefs) - 1]

    def digits(terms) -> list:
        groups = [terms[a + 1:b + 1] for a, b in zip(edges, edges[1:])]
        return [group[0][1] if len(group) == 1 else low_part(len(group) - 1, group) for group in reversed(groups)]

    return [(item[0], item[1], digits(terms), item[3]) for item, terms in zip(items, per_item)]


def _sum_of(terms: list):
    """``terms[0] + terms[1] + ...`` (a TIR expression)."""
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def _index_tuple_numbers(items, loop, acc, expand) -> list | None:
    """Each access's index tuple as one mixed-radix number whose digits are its indices, each digit
    ranging over the values its index takes: equal numbers only for equal tuples, and distinct tuples
    of in-bounds indices (the emulation checks every index) are distinct elements.  It proves what
    the row-major index misses where an index does not span its dimension: the head split of TVM's
    rope kernel stores ``q[x // 128, x % 128 // 16, x % 16]`` for heads 0-3 of 8 (then
    ``128 * (x // 128) + 16 * (x % 128 // 16) + x % 16`` is ``x``).  None for vector indices or
    digits without a constant range."""
    ndim = len(items[0][2])
    if ndim < 2 or any(_type_key(i) in ("prim.Ramp", "prim.Broadcast") for item in items for i in item[2]):
        return None
    ranges = _loop_ranges(loop, acc)
    radices = [None]  # the most significant digit needs none
    for d in range(1, ndim):
        bounds = [ranges.const_int_bound(ranges.simplify(expand.simplify(item[2][d]))) for item in items]
        low, high = min(b.min_value for b in bounds), max(b.max_value for b in bounds)
        if low < -(1 << 31) or high >= 1 << 31:
            return None
        radices.append(high - low + 1)
    # Row-major over the radices (digits offset by their common lowest value change no comparison).
    return _flat_indices(items, radices)


def _element_offsets(items, acc) -> list | None:
    """The element each access of ``items`` (through several views of one storage) touches, as its
    offset from the storage's start: ``elem_offset`` plus the row-major index, for views of one
    dtype, without strides of their own and with scalar indices; None otherwise (no claim)."""
    offsets = []
    for buf_key, _is_write, indices, _guards in items:
        buf = acc.buffers.get(buf_key)
        if buf is None or len(buf.strides) or str(buf.dtype) != str(acc.buffers[items[0][0]].dtype):
            return None
        if any(_type_key(i) in ("prim.Ramp", "prim.Broadcast") for i in indices) or not len(indices):
            return None
        flat = indices[0]
        for index, dim in zip(indices[1:], list(buf.shape)[1:]):
            flat = flat * dim + index
        offsets.append(flat + buf.elem_offset)
    return offsets


def _flat_indices(items, shape) -> list | None:
    """Row-major flat indices of multi-dimensional accesses (``v0 = x // 128``, ``v1 = x % 128``
    keep iterations apart only together: ``v0 * 128 + v1 = x``); None for vector indices."""
    if shape is None or len(shape) < 2:
        return None
    flats = []
    for item in items:
        indices = item[2]
        if any(_type_key(i) in ("prim.Ramp", "prim.Broadcast") for i in indices):
            return None
        flat = indices[0]
        for index, dim in zip(indices[1:], list(shape)[1:]):
            flat = flat * dim + index
        flats.append(flat)
    return flats


def _offset_digits(offsets: list[int]) -> list[tuple[int, int]] | None:
    """The constant offsets of unrolled copies as more digits of the mixed-radix number:
    ``[(gap, count), ...]`` such that the offsets are exactly the smallest plus
    ``{k_1 * gap_1 + k_2 * gap_2 + ... : k_i < count_i}`` (a tile unrolled over 4 rows of 1,000 and 4
    columns: 0-3, 1,000-1,003, ...), or None when they are not such a set."""
    low = min(offsets)
    rest = sorted({o - low for o in offsets})
    digits = []
    while len(rest) > 1:
        gap, count = rest[1], 1
        while count < len(rest) and rest[count] == count * gap:
            count += 1
        heads = rest[::count]
        if len(rest) != count * len(heads) or any(rest[i * count + k] != head + k * gap
                                                  for i, head in enumerate(heads) for k in range(count)):
            return None
        digits.append((gap, count))
        rest = heads
    return digits


def _constant_offsets(rests: list) -> list[int] | None:
    """Each of ``rests`` less the first, when all are constants; None otherwise."""
    offsets = []
    for rest in rests:
        diff = Analyzer().simplify(rest - rests[0])
        if _type_key(diff) != "ir.IntImm":
            return None
        offsets.append(int(diff.value))
    return offsets


def _one_form(rests: list, acc) -> tuple[list, list]:
    """``rests`` with each one's inner loop variables of constant range renamed, in the order they
    appear, to variables shared by all the rests (the k-th of a range: the k-th shared one of that
    range), and those shared ``(var, min, extent)``.  Accesses in loops of their own touch, per
    iteration, the values their form takes over their loops' ranges: rests that become one form
    touch the values of that form over the shared ranges, so the mixed-radix test of the form holds
    for all of them.  TVM's GPU sort copies a block's run in and out through two loops
    ``for v in range(2)``: ``row * 300 + v`` and ``row * 300 + v'`` are one form."""
    ranged = {_key(var): (_dtype(var), int(lo.value), int(extent.value)) for var, lo, extent in acc.inner
              if _type_key(lo) == "ir.IntImm" and _type_key(extent) == "ir.IntImm"}
    shared: dict[tuple, list] = {}  # (dtype, min, extent) -> the shared variables of that range
    renamed_rests = []
    for rest in rests:
        renamer, renamed, taken = Analyzer(), set(), {}  # taken: per range, the shared variables used
        for var in _variables(rest):
            kind = ranged.get(_key(var))
            if kind is None or _key(var) in renamed:
                continue
            renamed.add(_key(var))
            order = taken[kind] = taken.get(kind, -1) + 1
            pool = shared.setdefault(kind, [])
            if order == len(pool):
                pool.append(tirx.Var("shared_loop", kind[0]))
            renamer.bind(var, pool[order])
        renamed_rests.append(renamer.simplify(rest))
    return renamed_rests, [(var, tirx.const(lo, dtype), tirx.const(extent, dtype))
                           for (dtype, lo, extent), pool in shared.items() for var in pool]


def spread_within_extents(rests: list, bounds: list, inner, over_range) -> int:
    """The spread of ``rests`` (simplified, each with its ``bounds``) where a loop inside with a
    symbolic extent has its variable enter a rest as a term of its own: that term is at most
    ``lo + extent - 1`` wherever the loop runs, so the rest is at most what it is there.  A block's
    last run of a merge, ``start + tx * step + v`` with ``v < min(min(end, start + run) - start - tx *
    step, step)``, stays below ``end``; the sum is pushed into the extent's ``min`` so that the
    simplifier cancels it."""
    lows, highs = [b.min_value for b in bounds], [b.max_value for b in bounds]
    extents = {_key(var): (lo, extent) for var, lo, extent in inner if _type_key(extent) != "ir.IntImm"}
    for position, expr in enumerate(rests if extents else ()):
        terms, constant = _affine_terms(expr)
        bounded = [coef > 0 and _type_key(atom) == "ir.Var" and _key(atom) in extents for coef, atom in terms]
        moving = [term for term, by_extent in zip(terms, bounded) if by_extent]
        others = [term for term, by_extent in zip(terms, bounded) if not by_extent]
        if not moving or any(_uses_vars(atom, {_key(a) for _c, a in moving}) for _c, atom in others):
            continue
        dtype = _dtype(expr)
        top = _sum_of([tirx.const(constant, dtype)] + [tirx.const(c, dtype) * a for c, a in others])
        for coef, atom in moving:
            lo, extent = extents[_key(atom)]
            top = _add_into_min(top, tirx.const(coef, dtype) * (lo + extent - tirx.const(1, dtype)), dtype)
        highs[position] = min(highs[position], over_range.const_int_bound(over_range.simplify(top)).max_value)
    return max(highs) - min(lows)


def _add_into_min(a, b, dtype: str):
    """``a + b``, as ``min(a + c + x, a + c + y)`` where ``b`` is ``min(x, y) + c`` (a constant
    multiple of one)."""
    expanded = Analyzer().simplify(b)
    terms, constant = _affine_terms(expanded)
    mins = [position for position, (coef, t) in enumerate(terms) if _type_key(t) == "prim.Min" and coef > 0]
    if len(mins) != 1:
        return a + b
    coef, low = terms[mins[0]]
    rest = _sum_of([a, tirx.const(constant, dtype)]
                   + [tirx.const(c, dtype) * t for position, (c, t) in enumerate(terms) if position != mins[0]])
    scale = tirx.const(coef, dtype)
    return tirx.Min(rest + scale * low.a, rest + scale * low.b)
