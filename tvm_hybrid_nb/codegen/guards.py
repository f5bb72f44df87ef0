"""The values a loop's guard lets through (TIR analysis, no Python ast): a lanes loop whose body is
guarded by a bound on its variable (a predicated split) runs only over the values that can pass."""
from __future__ import annotations

import tvm
from tvm import tirx

from .analysis import _conjuncts, _contains, _reads_memory, _uses_vars
from .names import _dtype, _key, _type_key


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
        analyzer = tvm.sym.Analyzer()
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
