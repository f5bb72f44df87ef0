"""Constant subexpressions computed once: math on constants only (``ceil(log2(128.0))``, which
TVM's GPU sorts and scans write into every index of their merge loops and do not fold) is
assigned to a name at the top of the function, as written, and read from there.  A script
evaluated it at every use: a quarter of a GPU topk's run went to ``libm('log2', 128.0)``.

The expression is evaluated once while generating: only one that gives a finite number without
a warning is hoisted, so the function's prologue cannot raise where the inline expression (in a
branch never taken) would not have run.  Under the sanitizers too: an expression whose checks
name the thread or a lane mask (names of the loop body) does not evaluate here, so it stays inline.
"""
from __future__ import annotations

import ast
import math
import warnings

import numpy as np
import tvm

from .. import runtime
from .names import Value, _key, _name, _store_name, _type_key

#: The binary nodes a constant expression may hold besides immediates, casts and math calls: no
#: division (a constant division by zero in a branch never taken must stay where it is).
_CLOSED_KINDS = frozenset({"prim.Add", "prim.Sub", "prim.Mul", "prim.Min", "prim.Max"})


class ConstantsMixin:
    """Hoists math on constants out of the statements that use it (see the module docstring)."""

    def _constant_math(self, expr) -> bool:
        """Whether ``expr`` is math on constants alone, with at least one math call in it."""
        closed, math_call = self._closed(expr)
        return closed and math_call

    def _closed(self, expr) -> tuple[bool, bool]:
        """Whether ``expr`` holds constants, casts, arithmetic and math calls alone, and whether a
        math call is among them (memoized per node: the generator asks at every node)."""
        key = _key(expr)
        known = self.scope.closed_exprs.get(key)
        if known is not None:
            return known
        kind = _type_key(expr)
        short = expr.op.name.split(".", 1)[-1] if kind == "ir.Call" and isinstance(expr.op, tvm.ir.Op) else None
        if kind in ("ir.IntImm", "ir.FloatImm"):
            parts, math_call = [], False
        elif kind == "prim.Cast":
            parts, math_call = [expr.value], False
        elif kind in _CLOSED_KINDS:
            parts, math_call = [expr.a, expr.b], False
        elif short is not None and (short in self.NUMPY_MATH or short in self.HELPER_MATH):
            parts, math_call = list(expr.args), True
        else:
            parts, math_call = None, False
        closed = parts is not None
        for part in parts or ():
            part_closed, part_math = self._closed(part)
            closed, math_call = closed and part_closed, math_call or part_math
        self.scope.closed_exprs[key] = (closed, math_call)
        return closed, math_call

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
