"""The values a guard lets through (TIR analysis, no Python ast): a lanes loop whose body is guarded
by a bound on its variable (a predicated split) runs only over the values that can pass
(:func:`predicate_cut`), and the dependence test reads an index under its guards as the values they
leave it (:func:`within_guards`, :func:`guarded_digit`, :func:`spread_under_guards`)."""
from __future__ import annotations

import contextlib

import tvm
from tvm import tirx

from .analysis import _conjuncts, _contains, _reads_memory, _step, _uses_vars, walk_typed
from .names import _dtype, _key, _type_key
from .work import Analyzer


def predicate_cut(loop) -> tuple[int, int] | None:
    """The values ``[lo, hi)`` of ``loop``'s variable outside which its iterations provably do
    nothing, when narrower than the loop's constant range; else None.

    The loop's body must be loops down to one guard (a block predicate, an ``if`` without ``else``)
    and nothing else: an iteration then does something only where the guard can hold.  For each
    conjunct of the guard that uses the variable, the values at either end where the conjunct is
    false whatever the inner loops' variables are (a split ``i0 * 6 + i1 * 3 + i2 < 128`` over
    ``i0 < 1000``) are found by bisection and then proven false over the whole cut range with the
    analyzer, so the cut is exact (what the bisection assumes, the proof checks)."""
    lo, extent = _const(loop.min), _const(loop.extent)
    if lo is None or extent is None or extent < 2:
        return None
    end = lo + extent
    x = loop.loop_var
    moves = {_key(x)}  # the variable and the bindings that depend on it
    inner, binds, node = [], [], loop.body
    while True:
        key = _type_key(node)
        if key == "tirx.For":
            if _uses_vars(node.min, moves) or _uses_vars(node.extent, moves):
                return None
            inner.append((node.loop_var, node.min, node.extent))
            node = node.body
        elif key == "tirx.SeqStmt" and len(node.seq) > 1 and all(
                _type_key(s) == "tirx.Bind" and _dtype(s.var) != "handle"
                and not _contains(s.value, lambda n: _type_key(n) == "ir.Call") for s in node.seq[:-1]):
            for s in node.seq[:-1]:  # bindings only (CommonSubexprElim's): nothing happens before the guard
                binds.append((s.var, s.value))
                if _uses_vars(s.value, moves):
                    moves.add(_key(s.var))
            node = node.seq[-1]
        else:
            break
    key = _type_key(node)
    if key == "tirx.IfThenElse" and node.else_case is None:
        guard = node.condition
    elif key == "s_tir.SBlockRealize":
        guard = node.predicate
    else:
        return None

    def never(conj, a: int, b: int) -> bool:
        """Whether ``conj`` is false for every value of the variable in ``[a, b)``."""
        analyzer = Analyzer()
        try:
            for var, vmin, vext in inner:
                analyzer.bind(var, tvm.ir.Range.from_min_extent(vmin, vext), allow_override=True)
            for var, value in binds:
                analyzer.bind(var, value, allow_override=True)
            analyzer.bind(x, tvm.ir.Range.from_min_extent(tirx.const(a, _dtype(x)), tirx.const(b - a, _dtype(x))),
                          allow_override=True)
            return bool(analyzer.can_prove(tirx.Not(conj)))
        except Exception:  # an analysis, not a requirement: no proof, no cut
            return False

    new_lo, new_hi = lo, end
    for conj in _conjuncts(guard):
        if not _uses_vars(conj, moves) or _reads_memory(conj) or _contains(conj, lambda n: _type_key(n) == "ir.Call"):
            continue
        if never(conj, end - 1, end):  # the last values do nothing: the first of them
            a, b = lo, end - 1
            while a < b:
                mid = (a + b) // 2
                a, b = (a, mid) if never(conj, mid, mid + 1) else (mid + 1, b)
            if never(conj, a, end):
                new_hi = min(new_hi, a)
        if never(conj, lo, lo + 1):  # the first values do nothing: the last of them
            a, b = lo, end - 1
            while a < b:
                mid = (a + b + 1) // 2
                a, b = (mid, b) if never(conj, mid, mid + 1) else (a, mid - 1)
            if never(conj, lo, a + 1):
                new_lo = max(new_lo, a + 1)
    if new_lo >= new_hi or (new_lo, new_hi) == (lo, end):
        return None
    return new_lo, new_hi


def _const(expr) -> int | None:
    return int(expr.value) if _type_key(expr) == "ir.IntImm" else None


def _without_floordiv(e, hi: int, analyzer):
    """``e <= hi`` restated without the divisions RenormalizeSplitPattern writes: ``x // c <= hi`` is
    ``x <= (hi + 1) * c - 1`` and ``a + y // c`` is ``(a * c + y) // c`` (``c > 0``; a truncating
    division only of a value proven non-negative)."""
    for _ in range(8):
        key = _type_key(e)
        if key == "prim.Add":
            for a, d in ((e.a, e.b), (e.b, e.a)):
                if _is_division(d, analyzer):
                    c = int(d.b.value)
                    e = a * c + d.a
                    hi = (hi + 1) * c - 1
                    break
            else:
                return e, hi
        elif _is_division(e, analyzer):
            hi = (hi + 1) * int(e.b.value) - 1
            e = e.a
        else:
            return e, hi
    return e, hi


def _is_division(e, analyzer) -> bool:
    key = _type_key(e)
    if key not in ("prim.FloorDiv", "prim.Div") or _type_key(e.b) != "ir.IntImm" or int(e.b.value) <= 0:
        return False
    return key == "prim.FloorDiv" or analyzer.const_int_bound(e.a).min_value >= 0


def within_guards(f, guards, x, acc, expand, over_range, at_min, lanes: list, fresh: dict):
    """``f`` (an index) where ``guards`` hold: each conjunct ``e < c`` (``e <= c``) with ``e`` over the
    inner loops only, that ``f`` holds as ``coef * e`` plus terms free of ``e``'s variables, becomes a
    fresh variable of range ``[min e, c]`` (one more digit of the mixed-radix test, shared by accesses
    under the same guard).  What the iterations touch can only grow, so a claim of independence on
    the result holds for ``f``: a predicated split ``k0 * 43 + k1 < 128`` keeps its ``129`` values
    within the row of ``128`` it indexes."""
    inner = {_key(v) for v, _, _ in acc.inner}
    for cond in guards:
        for conj in _conjuncts(cond):
            bounded = _upper_bound(conj)
            if bounded is None or _reads_memory(bounded[0]) or _contains(bounded[0], lambda n: _type_key(n) == "ir.Call"):
                continue
            e, hi = _without_floordiv(expand.simplify(bounded[0]), bounded[1], over_range)
            used = _variables(e)
            if not used or any(_key(v) not in inner or v.same_as(x) for v in used):
                continue
            step_e = _step(e, used[0])
            step_f = _step(f, used[0])
            if not step_e or step_f is None or step_f % step_e:
                continue
            coef = step_f // step_e
            rest = Analyzer().simplify(f - coef * e)
            if _contains(rest, lambda n: _type_key(n) == "ir.Var" and any(n.same_as(v) for v in used)):
                continue
            lo = over_range.const_int_bound(over_range.simplify(e)).min_value
            if lo < -(1 << 40) or hi < lo:
                continue
            name = (str(e), lo, hi)
            if name not in fresh:
                dtype = _dtype(e)
                var = tirx.Var("guarded", dtype)
                at_min.bind(var, tirx.const(0, dtype))
                over_range.bind(var, tvm.ir.Range.from_min_extent(0, hi - lo + 1))
                lanes.append((var, tirx.const(0, dtype), tirx.const(hi - lo + 1, dtype)))
                fresh[name] = (var, lo)
            var, lo = fresh[name]
            f = Analyzer().simplify(rest + coef * (var + lo))
    return f


def guarded_digit(indices, guards, x, acc, expand) -> tuple | None:
    """Accesses under a guard ``e < c`` (or ``e <= c``) where ``e = s * x + r``, with ``r`` over other
    loops' variables and ``0 <= r < s``, so that ``e // s`` is ``x`` (``x`` counting from 0): distinct
    iterations have distinct ``e``, and ``e`` stays in ``[0, c)``.  When every index is ``coef * e``
    plus terms free of ``e``'s variables, returns the indices with ``e`` as a fresh variable ``g``,
    ``g`` and its extent: iterations that ``g`` keeps apart there are apart in the indices.  dlight's
    GPU matmul stores its output after ``FlattenBuffer`` at ``row * 1000 + (bx * 8 + tx) * 4 + a``
    under ``bx * 8 + tx < 250``: over all 32 blocks the index would run into the next row.  Each
    access may have its own ``e`` of the same ``s`` and ``c`` (``r`` over loops of its own: TVM's GPU
    sort copies a run in under ``2 * tx + v + by * 128 < 300`` and out under the same guard over
    another ``v``): each ``e`` has ``e // s == x`` and stays below ``c``, so one ``g`` stands for all.
    None when the accesses are not of this form (``acc``: the loops around and inside, as
    ``(var, min, extent)``)."""
    if not guards or not all(guards) or any(_type_key(i) in ("prim.Ramp", "prim.Broadcast") for i in indices):
        return None
    ranges = Analyzer()
    for var, lo, extent in list(acc.outer) + list(acc.inner):
        ranges.bind(var, tvm.ir.Range.from_min_extent(lo, extent), allow_override=True)
    for e, hi in _bounded_expressions(guards[0], x, ranges, expand):
        s = _step(e, x)
        if not s or s < 0 or _block_digit(e, s, x, ranges) is None:
            continue
        g = tirx.Var("guarded_block", _dtype(e))
        rewritten = []
        for index, index_guards in zip(indices, guards):
            own = next((found for other, other_hi in _bounded_expressions(index_guards, x, ranges, expand)
                        if other_hi == hi and _step(other, x) == s
                        and (found := _block_digit(other, s, x, ranges)) is not None), None)
            if own is None:
                break
            f = expand.simplify(index)
            step = _step(f, x)
            if not step or step % s:
                break
            coef = step // s
            rest = Analyzer().simplify(f - coef * own[0])
            if _uses_vars(rest, own[1]):
                break
            rewritten.append(rest + coef * g)
        else:
            return rewritten, g, hi + 1
    return None


def _block_digit(e, s: int, x, ranges) -> tuple | None:
    """``(e, the keys of x and of the variables of r)`` when ``e = s * x + r`` with ``0 <= r < s`` over
    the loops' ranges and ``r`` free of ``x`` (then ``e // s`` is ``x``); None otherwise."""
    r = ranges.simplify(e - s * x)
    bound = ranges.const_int_bound(r)
    if _uses_vars(r, {_key(x)}) or bound.min_value < 0 or bound.max_value >= s:
        return None
    return e, {_key(x)} | {_key(v) for v in _variables(r)}


def _bounded_expressions(conditions, x, ranges, expand) -> list[tuple]:
    """``(e, hi)`` for each conjunct of ``conditions`` that bounds an expression ``e`` of ``x`` (and
    loop variables, no memory or calls) by a constant from above: ``e <= hi``, ``e`` simplified and
    without the divisions of RenormalizeSplitPattern (``(bx * 4 + tx // 2) // 125 < 1`` is
    ``bx * 8 + tx <= 249``)."""
    found = []
    for cond in conditions:
        for conj in _conjuncts(cond):
            bounded = _upper_bound(conj)
            if bounded is None:
                continue
            e = expand.simplify(bounded[0])  # through the bindings (CommonSubexprElim's ``cse_v1 < 125``)
            if not _uses_vars(e, {_key(x)}) or _reads_memory(e) or _contains(e, lambda n: _type_key(n) == "ir.Call"):
                continue
            e, hi = _without_floordiv(ranges.simplify(e), bounded[1], ranges)
            found.append((ranges.simplify(e), hi))
    return found


def _upper_bound(conj) -> tuple | None:
    """``(e, hi)`` when comparison ``conj`` says ``e <= hi`` for a constant ``hi`` (``e < c``, ``c > e``...)."""
    key = _type_key(conj)
    if key in ("prim.LT", "prim.LE"):
        e, bound = conj.a, conj.b
    elif key in ("prim.GT", "prim.GE"):
        e, bound = conj.b, conj.a
    else:
        return None
    if _type_key(bound) != "ir.IntImm":
        return None
    return e, int(bound.value) - (1 if key in ("prim.LT", "prim.GT") else 0)


def _variables(expr) -> list:
    found = []
    walk_typed(expr, ("ir.Var",), lambda n: found.append(n) if _type_key(n) == "ir.Var" else None)
    return found


def spread_under_guards(rests: list, base, guards: list, over_range, same, expand) -> int:
    """The spread of ``rests`` (less ``base``) over the values where each access's guards hold (an
    access happens only there): ``start[0] < 128`` bounds ``start[0] + 1`` in TVM's GPU scan.  Each
    bound is the tighter of the simplified and the unsimplified expression's (simplifying can
    rewrite it past what a guard bounds)."""
    lows, highs = [], []
    read: dict[int, object] = {}  # each guard once: the accesses of one branch share them
    for rest, held in zip(rests, guards):
        # Simplified over the loops' ranges too: a block index of one value (``by * 1024 + tx < 64``,
        # by in [0, 1)) leaves a bound the constraint scope reads (``tx < 64``).
        held = [read[_key(g)] if _key(g) in read else read.setdefault(
            _key(g), over_range.simplify(same.simplify(expand.simplify(g)))) for g in held]
        with over_range.constraint_scope(_all_of(held)) if held else contextlib.nullcontext():
            bounds = [over_range.const_int_bound(e) for e in (over_range.simplify(rest - base), rest - base)]
        lows.append(max(b.min_value for b in bounds))
        highs.append(min(b.max_value for b in bounds))
    return max(highs) - min(lows)


def _all_of(conditions) -> object:
    """The conjunction of ``conditions`` (true for none)."""
    condition = tirx.const(True, "bool")
    for c in conditions:
        condition = tirx.And(condition, c)
    return condition
