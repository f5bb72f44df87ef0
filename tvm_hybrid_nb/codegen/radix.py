"""Index algebra the TVM simplifier leaves undone: a mixed-radix decomposition with symbolic radices
folded back into the number it decomposes.

A loop fused over symbolic sizes (dlight's ``b * n * 48`` of a batched linear layer) indexes
``[f // (n * 48), f % (n * 48) // 48, f % 48]``; flattened row-major that is
``f // (n * 48) * n * 48 + f % (n * 48) // 48 * 48 + f % 48``, which is ``f``, but
``tvm.sym.Analyzer`` only folds ``x // c * c + x % c`` for a constant ``c``.  :func:`fold_radix`
applies, in a sum of products, the identities of floor division (``m`` non-zero):

* ``A // m * m + A % m  ==  A``;
* ``A % M // m * m + A % m  ==  A % M`` where ``m`` divides ``M`` (then ``A % M % m == A % m``).
"""
from __future__ import annotations

import tvm

from .names import _dtype, _type_key
from .work import Analyzer


#: More terms than this once products are multiplied out: no fold is tried.
_MAX_TERMS = 64


def _terms(expr) -> list[tuple[int, list]]:
    """``expr`` as a sum of ``(constant, [other factors])`` products, multiplied out."""
    key = _type_key(expr)
    if key == "prim.Add":
        return _terms(expr.a) + _terms(expr.b)
    if key == "prim.Sub":
        return _terms(expr.a) + [(-c, f) for c, f in _terms(expr.b)]
    if key == "prim.Mul":
        a, b = _terms(expr.a), _terms(expr.b)
        if len(a) * len(b) > _MAX_TERMS:
            return [(1, [expr])]
        return [(ca * cb, fa + fb) for ca, fa in a for cb, fb in b]
    if key == "ir.IntImm":
        return [(int(expr.value), [])]
    return [(1, [expr])]


def _same(a, b, analyzer) -> bool:
    diff = analyzer.simplify(a - b)
    return _type_key(diff) == "ir.IntImm" and int(diff.value) == 0


def _times(const: int, factors: list, like):
    out = tvm.tirx.const(const, _dtype(like))
    for f in factors:
        out = out * f
    return out


def _as_multiple(const: int, factors: list, m, analyzer) -> int | None:
    """``c`` when ``const * prod(factors) == c * m`` (``m``'s factors among ``factors``), else None."""
    product = _terms(m)
    if len(product) != 1:
        return None
    ((m_const, m_factors),) = product
    if m_const == 0 or const % m_const:
        return None
    rest = list(factors)
    for f in m_factors:
        match = next((i for i, g in enumerate(rest) if _same(f, g, analyzer)), None)
        if match is None:
            return None
        rest.pop(match)
    return const // m_const if not rest else None


def _fold_once(terms: list, analyzer) -> list | None:
    """``terms`` (``(coefficient, factors)``) with one pair folded, or None when none folds."""
    for i, (ci, fi) in enumerate(terms):
        for d, div in enumerate(fi):
            if _type_key(div) != "prim.FloorDiv":
                continue
            c = _as_multiple(ci, fi[:d] + fi[d + 1:], div.b, analyzer)
            if c is None:
                continue
            a, m = div.a, div.b
            for j, (cj, fj) in enumerate(terms):
                if j == i or cj != c or len(fj) != 1 or _type_key(fj[0]) != "prim.FloorMod":
                    continue
                mod = fj[0]
                if not _same(mod.b, m, analyzer):
                    continue
                if _same(mod.a, a, analyzer):  # A // m * m + A % m
                    folded = a
                elif (_type_key(a) == "prim.FloorMod" and _same(mod.a, a.a, analyzer)
                      and _same(tvm.tirx.FloorMod(a.b, m), tvm.tirx.const(0, _dtype(m)), analyzer)):
                    folded = a  # A % M // m * m + A % m, m dividing M
                else:
                    continue
                rest = [t for k, t in enumerate(terms) if k not in (i, j)]
                return rest + [(c, [folded])]
    return None


def fold_radix(expr, analyzer=None):
    """``expr`` with every mixed-radix decomposition of one number summed back into it (see the
    module's docstring); ``expr`` itself when none is found."""
    analyzer = analyzer or Analyzer()
    terms = _terms(expr)
    if len(terms) > _MAX_TERMS or not any(_type_key(f) == "prim.FloorDiv" for _, fs in terms for f in fs):
        return expr
    changed = False
    while True:
        folded = _fold_once(terms, analyzer)
        if folded is None:
            break
        terms, changed = folded, True
    if not changed:
        return expr
    out = None
    for const, factors in terms:
        term = _times(const, factors, expr)
        out = term if out is None else out + term
    return analyzer.simplify(out)
