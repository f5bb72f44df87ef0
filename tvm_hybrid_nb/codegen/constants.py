"""Constant subexpressions computed once: math on constants only (``ceil(log2(128.0))``, which
TVM's GPU sorts and scans write into every index of their merge loops and do not fold) is
assigned to a name at the top of the function, as written, and read from there.  A script
evaluated it at every use: a quarter of a GPU topk's run went to ``libm('log2', 128.0)``.

The expression is evaluated once while generating: only one that gives a finite number without
a warning is hoisted, so the function's prologue cannot raise where the inline expression (in a
branch never taken) would not have run.  Not under the sanitizers (their records follow the
statement that computes).
"""
from __future__ import annotations

import ast
import math
import warnings

import numpy as np
import tvm

from .. import runtime
from .names import Value, _key, _name, _store_name, _type_key

#: The node kinds a constant expression may hold besides math calls: immediates, casts and
#: arithmetic (no division: a constant division by zero in a dead branch must stay where it is).
_CLOSED_KINDS = frozenset({"ir.IntImm", "ir.FloatImm", "prim.Cast", "prim.Add", "prim.Sub", "prim.Mul",
                           "prim.Min", "prim.Max"})


class ConstantsMixin:
    """Hoists math on constants out of the statements that use it (see the module docstring)."""

    def _constant_math(self, expr) -> bool:
        """Whether ``expr`` is math on constants alone, with at least one math call in it."""
        memo = self.scope.closed_math
        key = _key(expr)
        if key in memo:
            return memo[key]
        kind = _type_key(expr)
        found = False
        if kind in ("ir.IntImm", "ir.FloatImm"):
            closed = True
        elif kind == "prim.Cast":
            closed = self._closed(expr.value)
            found = closed and self._constant_math(expr.value)
        elif kind in _CLOSED_KINDS:
            closed = self._closed(expr.a) and self._closed(expr.b)
            found = closed and (self._constant_math(expr.a) or self._constant_math(expr.b))
        elif kind == "ir.Call" and isinstance(expr.op, tvm.ir.Op):
            short = expr.op.name.split(".", 1)[-1]
            closed = (short in self.NUMPY_MATH or short in self.HELPER_MATH) and all(
                self._closed(arg) for arg in expr.args)
            found = closed
        else:
            closed = False
        self.scope.closed_exprs[key] = closed
        memo[key] = found
        return found

    def _closed(self, expr) -> bool:
        key = _key(expr)
        if key not in self.scope.closed_exprs:
            self._constant_math(expr)
        return self.scope.closed_exprs[key]

    def _hoisted_constant(self, expr, generate) -> Value:
        """``generate(expr)``'s value, assigned once to a name in the function's prologue when it
        evaluates here to a finite number without a warning; the inline value otherwise."""
        value = generate(expr)
        text = ast.unparse(value.node)
        name = self.scope.constant_names.get(text)
        if name is None:
            if not _evaluates_cleanly(value.node, self.scope.helpers):
                return value
            name = self.namer.define_name(f"{_math_name(value.node)}_once")
            self.scope.constant_names[text] = name
            self.scope.constants.append(ast.Assign([_store_name(name)], value.node))
        return Value(_name(name), value.kind, value.dtype, False)


def _evaluates_cleanly(node: ast.expr, helpers) -> bool:
    namespace = {"np": np, "math": math}
    namespace.update({name: getattr(runtime, name) for name in runtime.helper_closure(helpers)})
    try:
        with warnings.catch_warnings(), np.errstate(all="raise"):
            warnings.simplefilter("error")
            result = eval(compile(ast.fix_missing_locations(ast.Expression(node)), "<constant>", "eval"),
                          namespace)
    except Exception:  # noqa: BLE001 - any failure: left inline, where it happens if ever reached
        return False
    return np.ndim(result) == 0 and bool(np.isfinite(result))


def _math_name(node: ast.expr) -> str:
    """The outermost math function's name in ``node`` (``ceil`` of ``cast(np.ceil(...))``)."""
    for call in ast.walk(node):
        if not isinstance(call, ast.Call):
            continue
        if isinstance(call.func, ast.Attribute):
            return call.func.attr
        if isinstance(call.func, ast.Name) and call.func.id.startswith("libm") and call.args \
                and isinstance(call.args[0], ast.Constant):
            return str(call.args[0].value)
    return "constant"
