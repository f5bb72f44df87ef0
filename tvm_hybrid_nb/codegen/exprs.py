"""Expression semantics: constants, arithmetic with TVM's wrap-around, division families, casts,
comparisons, lazy conditionals, vectors (ramp/broadcast/shuffle) and calls to intrinsics."""
from __future__ import annotations

import ast
import copy
import math

from tvm import tirx
import tvm

from ..errors import UnsupportedConstructError
from .names import (Value, _BinaryLike, _CannotVectorize, _INT64_MAX, _const, _dtype, _float_bits, _int_range,
    _is_float, _is_int, _is_zero, _key, _lanes, _name, _np, _packed_function, _scalar_dtype, _store_name, _type_key,
    _varying)
from .targets import C_KINDS, min_max_ignores_nan, operand_bits, short_circuits


class ExpressionsMixin:
    """The exprs room of :class:`~.generator.HybridCodegen` (see the module docstring)."""

    #: TIR arithmetic nodes that map to a Python operator when no special semantics apply.
    ARITH_OPS = {"prim.Add": ast.Add, "prim.Sub": ast.Sub, "prim.Mul": ast.Mult}
    BITWISE_OPS = {"prim.BitwiseAnd": ast.BitAnd, "prim.BitwiseOr": ast.BitOr, "prim.BitwiseXor": ast.BitXor,
                   "prim.LShift": ast.LShift, "prim.RShift": ast.RShift}
    COMPARE_OPS = {"prim.EQ": ast.Eq, "prim.NE": ast.NotEq, "prim.LT": ast.Lt, "prim.LE": ast.LtE,
                   "prim.GT": ast.Gt, "prim.GE": ast.GtE}
    #: Integer division family: (plain operator when provably equivalent, helper otherwise, float helper).
    DIVISION_OPS = {"prim.Div": (ast.FloorDiv, "truncdiv", None), "prim.Mod": (ast.Mod, "truncmod", "np.fmod"),
                    "prim.FloorDiv": (ast.FloorDiv, "floordiv", "float_floordiv"),
                    "prim.FloorMod": (ast.Mod, "floormod", "float_floormod")}
    #: Operators that can overflow the dtype of Python-int operands.
    OVERFLOWING = {"prim.Add", "prim.Sub", "prim.Mul", "prim.LShift"}
    #: Sanitizer: the operators TVM's llvm code generator emits with ``nsw``/``nuw`` for 32- and 64-bit
    #: integers (``CodeGenLLVM::CreateAdd``/``Sub``/``Mul``), whose overflow is poison, not a wrap
    #: (see :func:`.targets.overflow_is_poison` for the other targets).
    POISON_ON_OVERFLOW = {"prim.Add": "+", "prim.Sub": "-", "prim.Mul": "*"}
    #: Sanitizer, C targets: the 8- and 16-bit operators whose result C keeps in the promoted ``int``
    #: until a store or a narrowing cast truncates it (``_note_truncated``).
    PROMOTED_OPS = {**POISON_ON_OVERFLOW, "prim.LShift": "<<"}
    #: Math intrinsics computed by numpy in the operand dtype.
    NUMPY_MATH = {name: name for name in (
        "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "arcsin",
        "arccos", "arctan", "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "floor", "ceil",
        "trunc", "isnan", "isinf", "isfinite", "fmod", "copysign", "hypot", "nextafter", "power",
        "arctan2", "ldexp")}
    NUMPY_MATH.update({"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh",
                       "acosh": "arccosh", "atanh": "arctanh", "atan2": "arctan2", "pow": "power",
                       "fabs": "abs", "round": "rint", "nearbyint": "rint"})
    #: Intrinsics implemented by a runtime helper of the same meaning.
    HELPER_MATH = {"rsqrt": "rsqrt", "sigmoid": "sigmoid", "erf": "erf", "popcount": "popcount", "exp10": "exp10"}
    #: Unary math whose numpy loops already return a NaN operand as libm does (others: nan_through).
    NAN_EXACT_MATH = frozenset({"floor", "ceil", "trunc", "round", "nearbyint", "fabs", "sqrt", "rsqrt", "exp2",
                                "log2", "log1p", "tan", "sinh", "atan", "erf", "popcount"})
    #: float32 and float16 math that TVM's llvm code takes from libm (``expf``, ``powf``...), whose results
    #: numpy's float32 loops miss in up to half of the values: computed in float64 and rounded, libm's
    #: correctly rounded result (float32 functions glibc rounds otherwise are :data:`LIBM_FLOAT32`).
    DOUBLE_MATH = frozenset({"exp", "log", "sin", "cos", "exp2", "log2", "log10", "pow", "atan2", "asin", "acos",
                             "atan", "cosh"})
    #: float64 math that TVM's llvm code takes from libm and numpy's float64 loops compute otherwise in
    #: up to a quarter of the values (``sinh``: 26 %, ``exp``: 4 % here): through libm (``libm``).
    LIBM_FLOAT64 = frozenset({"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan",
                              "sinh", "cosh", "tanh", "arcsin", "arccos", "arctan", "arcsinh", "arccosh",
                              "arctanh", "power", "arctan2"})
    #: float32 math whose libm function (``sinhf``, ``log10f``, ``atan2f``, ``erff``...) glibc does not
    #: round correctly: 1 ulp off in 1 % to 28 % of values however numpy computes it: through libm
    #: (``libm_float32``, a call per element; ``exp``, ``log``, ``pow``... stay :data:`DOUBLE_MATH`).
    LIBM_FLOAT32 = frozenset({"log10", "log1p", "sin", "cos", "tan", "sinh", "cosh", "arcsin", "arccos", "arctan",
                              "arcsinh", "arccosh", "arctanh", "arctan2", "erf"})
    CALL_BITWISE = {"bitwise_and": ast.BitAnd, "bitwise_or": ast.BitOr, "bitwise_xor": ast.BitXor,
                    "shift_left": ast.LShift, "shift_right": ast.RShift}

    # ------------------------------------------------------------------ value helpers
    def to_np(self, value: Value) -> Value:
        """Make ``value`` numpy-typed (scalars become ``np.<dtype>(...)``)."""
        if value.kind == "np":
            return value
        dtype = _scalar_dtype(value.dtype)
        ctor = "bool_" if dtype == "bool" else dtype
        return Value(ast.Call(_np(ctor), [value.node], []), "np", value.dtype, value.varying)

    def _unify(self, a: Value, b: Value) -> tuple[Value, Value]:
        """Operands whose combination keeps the result's dtype."""
        if (_is_float(a.dtype) or _is_float(b.dtype)) and a.kind != "np" and b.kind != "np":
            a = self.to_np(a)
        return a, b

    def _result_kind(self, a: Value, b: Value) -> str:
        return "np" if "np" in (a.kind, b.kind) else "py"

    def _fits(self, expr, dtype: str) -> bool:
        lo, hi = _int_range(dtype)
        try:
            bound = self.analyzer.const_int_bound(expr)
        except Exception:
            return False
        return bound.min_value >= lo and bound.max_value <= hi

    def _may_overflow(self, expr, dtype: str) -> bool:
        """Whether the analyzer cannot prove that integer ``expr`` fits ``dtype``.  Its bounds saturate at
        the int64 range, which then means "unknown", not "fits" (``x * 2**40`` of an int64 ``x``)."""
        lo, hi = _int_range(dtype)
        low, high = self._bounds(expr)
        if _float_bits(dtype) >= 64:
            return low <= -_INT64_MAX or high >= _INT64_MAX or low < lo
        return low < lo or high > hi

    def _used_lanes(self) -> list[ast.expr]:
        """Sanitizer: the lane conditions under which the value being generated is used: a poison
        value (an overflow, an out-of-range shift) in a lane that a branch does not take, an arm of
        ``if_then_else`` does not evaluate or a ``Select`` does not choose is harmless (LLVM's
        ``select c, poison, x`` is ``x`` where ``c`` is false)."""
        return self.lanes.stmt_masks + self.lanes.masks

    def _bounds(self, expr) -> tuple[int, int]:
        try:
            b = self.analyzer.const_int_bound(expr)
            return b.min_value, b.max_value
        except Exception:
            return -_INT64_MAX, _INT64_MAX

    def _scalar_lanes(self, *values: Value) -> bool:
        """Whether Python scalar operators (``and``, ``if``-expressions, ``min``) may be used."""
        return all(v.lanes == 1 and not v.varying for v in values)

    # ------------------------------------------------------------------ leaves
    def visit_IntImm(self, node) -> Value:
        dtype = _dtype(node)
        if dtype == "bool":
            return Value(ast.Constant(bool(node.value)), "py", dtype)
        return Value(ast.Constant(int(node.value)), "py", dtype)

    def visit_FloatImm(self, node) -> Value:
        dtype = _dtype(node)
        value = float(node.value)
        if not math.isfinite(value) or _scalar_dtype(dtype).startswith("bfloat"):
            # ml_dtypes' bfloat16 arrays do not take Python floats as weak: ``a * 3.0`` is float32.
            return Value(ast.Call(_np(_scalar_dtype(dtype)), [_const(value)], []), "np", dtype)
        return Value(ast.Constant(value), "weak", dtype)

    def visit_StringImm(self, node) -> Value:
        return Value(ast.Constant(str(node.value)), "py", "handle")

    def visit_Var(self, node) -> Value:
        name = self.namer.lookup(node)
        if name is None and _key(node) in self.scope.address_binds:
            raise UnsupportedConstructError("tirx.address_of", f"pointer {node.name} used other than as a "
                                            f"buffer's data")
        if name is None:
            raise UnsupportedConstructError("free variable", str(node.name))
        kind, dtype, varying = self.scope.var_kinds.get(_key(node), ("py", _dtype(node), False))
        return Value(_name(name), kind, dtype, varying)

    def _set_var(self, var, value: Value) -> None:
        self.scope.var_kinds[_key(var)] = (value.kind, value.dtype, value.varying)

    # ------------------------------------------------------------------ arithmetic
    def visit_binary(self, node, key: str) -> Value:
        dtype = _dtype(node)
        identity = self._float_identity(node, key, dtype) if _is_float(dtype) else None
        if identity is not None:
            return identity
        a, b = self.visit_expr(node.a), self.visit_expr(node.b)
        a, b = self._unify(a, b)
        op = (self.ARITH_OPS.get(key) or self.BITWISE_OPS[key])()
        kind = self._result_kind(a, b)
        if key in ("prim.LShift", "prim.RShift") and _is_int(dtype):
            bits = operand_bits(self.target_kind, dtype)
            lo, hi = self._bounds(node.b)
            if self.check and not (0 <= lo and hi < bits):
                # A shift by the bit width or more (or by a negative count) is poison in LLVM and
                # undefined in C (of the promoted int: a uint8 shifted by 8..31 is defined there,
                # numpy's 0 or sign fill after the store's truncation): the native result depends
                # on how it was compiled.  Without the sanitizer numpy's meaning is used.
                mask = self._mask_expr(self._used_lanes())
                b = Value(self._call("shift_count", b.node, ast.Constant(bits),
                                     kw={"mask": mask} if mask is not None else None), b.kind, b.dtype, b.varying)
            elif kind == "py" and lo < 0:
                # Python's ``16 << -1`` raises where numpy's meaning is wanted: shift a numpy scalar.
                a = Value(ast.Call(_np(_scalar_dtype(dtype)), [a.node], []), "np", dtype, a.varying)
                kind = "np"
        out = ast.BinOp(a.node, op, b.node)
        if self._promotion_observed(node, key, dtype) and self._may_overflow(node, dtype):
            mask = self._mask_expr(self._used_lanes())
            keywords = self._name_threads({"mask": mask} if mask is not None else {})
            keywords["promoted"] = ast.Constant(True)
            checked = self._call("checked_arith", a.node, b.node, ast.Constant(self.PROMOTED_OPS[key]),
                                 ast.Constant(_scalar_dtype(dtype)), kw=keywords)
            return Value(checked, kind, dtype, _varying(a, b))  # in range: nothing left to wrap
        if (self.check and key in self.POISON_ON_OVERFLOW and self._poison_on_overflow(dtype)
                and self._may_overflow(node, dtype)):
            # Compiled with nsw/nuw (or as C's signed arithmetic): a result that does not fit is
            # poison (undefined), not a wrap.
            mask = self._mask_expr(self._used_lanes())
            keywords = self._name_threads({"mask": mask} if mask is not None else {})
            if self.defer_overflow:  # on its way into an allocation: poison until used (see sanitize.py)
                keywords["poison"] = _name("race_log")
                self.overflow_deferred = True
            operands = [a.node, b.node]
            if kind == "py" and mask is None:
                # Python ints (a serial loop's index arithmetic): compared inline, the helper called
                # only to report an overflow; the result is then in range, with nothing to wrap.  The
                # helper takes the operands by the names they were held in: spelled out again, nested
                # index arithmetic doubled at each level (a symbolic pooled extent: 169 MB of script).
                held_operands = [self._held(node) for node in operands]
                out = ast.BinOp(held_operands[0][0], op, held_operands[1][0])
                operands = [held for _, held in held_operands]
            checked = self._call("checked_arith", *operands, ast.Constant(self.POISON_ON_OVERFLOW[key]),
                                 ast.Constant(_scalar_dtype(dtype)), kw=keywords)
            if kind == "py" and mask is None:
                lo, hi = _int_range(_scalar_dtype(dtype))
                held = self.namer.define_name("exact")
                exact = ast.NamedExpr(_store_name(held), out)
                test = ast.Compare(ast.Constant(lo), [ast.LtE(), ast.LtE()], [exact, ast.Constant(hi)])
                return Value(ast.IfExp(test, _name(held), checked), kind, dtype, _varying(a, b))
            out = checked
        if kind == "py" and _is_int(dtype) and key in self.OVERFLOWING and not self._fits(node, dtype):
            out = self._call("wrap", out, ast.Constant(dtype))
        if _is_float(dtype):
            kind = "np"
        return Value(out, kind, dtype, _varying(a, b))

    def _held(self, node: ast.expr) -> tuple[ast.expr, ast.expr]:
        """``(where node is evaluated, what reads its value again)``: a name or constant as itself, any
        other expression held in a fresh name by ``:=`` where it is evaluated."""
        if isinstance(node, (ast.Name, ast.Constant)):
            return node, node
        name = self.namer.define_name("operand")
        return ast.NamedExpr(_store_name(name), node), _name(name)

    def _float_identity(self, node, key: str, dtype: str) -> Value | None:
        """What LLVM makes of float ``x * 1``, ``x * -1``, ``x - 0`` and ``x + -0``: ``x`` itself
        and its negation (a sign flip, NaNs included), not an arithmetic operation (which would
        quiet a signalling NaN and keep a NaN's sign)."""
        def constant(expr):
            if _type_key(expr) == "prim.Broadcast":
                expr = expr.value
            return float(expr.value) if _type_key(expr) == "ir.FloatImm" else None

        a_const, b_const = constant(node.a), constant(node.b)
        operand = None
        if key == "prim.Mul" and b_const in (1.0, -1.0):
            operand, negate = node.a, b_const < 0
        elif key == "prim.Mul" and a_const in (1.0, -1.0):
            operand, negate = node.b, a_const < 0
        elif key in ("prim.Add", "prim.Sub") and b_const == 0.0 and (
                math.copysign(1.0, b_const) < 0) == (key == "prim.Add"):
            operand, negate = node.a, False
        if operand is None:
            return None
        value = self.visit_expr(operand)
        if value.dtype != dtype:
            return None
        value = self.to_np(value)
        if negate:
            return Value(ast.UnaryOp(ast.USub(), value.node), "np", dtype, value.varying)
        return value
    def visit_division(self, node, key: str) -> Value:
        a = self.visit_expr(node.a)
        saved, self.defer_overflow = self.defer_overflow, False  # a poison divisor is undefined behaviour
        try:
            b = self.visit_expr(node.b)
        finally:
            self.defer_overflow = saved
        dtype = _dtype(node)
        varying = _varying(a, b)
        plain_op, int_helper, float_helper = self.DIVISION_OPS[key]
        if _is_float(dtype):
            a, b = self._unify(a, b)
            if key == "prim.Div":
                return Value(ast.BinOp(a.node, ast.Div(), b.node), "np", dtype, varying)
            if float_helper == "np.fmod":
                return Value(ast.Call(_np("fmod"), [a.node, b.node], []), "np", dtype, varying)
            return Value(self._call(float_helper, a.node, b.node), "np", dtype, varying)
        if not _is_int(dtype):
            raise UnsupportedConstructError(key, f"on {dtype}")
        b_lo, _ = self._bounds(node.b)
        a_lo, _ = self._bounds(node.a)
        floor_family = key in ("prim.FloorDiv", "prim.FloorMod")
        if b_lo >= 1 and (floor_family or a_lo >= 0):
            out = ast.BinOp(a.node, plain_op(), b.node)
        else:
            # A narrow division is done in C's promoted int on C targets: int8 -128 / -1 does not trap.
            divided = (_scalar_dtype(dtype) if operand_bits(self.target_kind, dtype) == _float_bits(dtype)
                       else "int32")
            extra = [ast.Constant(divided)] if _scalar_dtype(dtype).startswith("int") else []
            mask = self._mask_expr(self.lanes.stmt_masks + self.lanes.lazy_masks)
            out = self._call(int_helper, a.node, b.node, *extra, kw={"mask": mask} if mask is not None else None)
        kind = self._result_kind(a, b)
        if kind == "py" and key in ("prim.Div", "prim.FloorDiv") and not self._fits(node, dtype):
            out = self._call("wrap", out, ast.Constant(dtype))  # INT_MIN / -1
        return Value(out, kind, dtype, varying)

    def visit_Min(self, node) -> Value:
        return self._min_max(node, "min", "minimum")

    def visit_Max(self, node) -> Value:
        return self._min_max(node, "max", "maximum")

    def _min_max(self, node, builtin_name: str, helper: str) -> Value:
        a, b = self._unify(self.visit_expr(node.a), self.visit_expr(node.b))
        dtype = _dtype(node)
        kind = "np" if _is_float(dtype) else self._result_kind(a, b)
        if _is_int(dtype) and self._scalar_lanes(a, b):
            return Value(ast.Call(_name(builtin_name), [a.node, b.node], []), kind, dtype)
        if kind == "np" and a.kind != "np":
            a = self.to_np(a)
        if min_max_ignores_nan(self.target_kind, dtype):
            helper += "_ignoring_nan"
        return Value(self._call(helper, a.node, b.node), kind, dtype, _varying(a, b))

    def visit_compare(self, node, key: str) -> Value:
        a, b = self._unify(self.visit_expr(node.a), self.visit_expr(node.b))
        if key == "prim.NE" and _is_float(a.dtype) and self.target_kind not in C_KINDS:
            # TVM's llvm backend (CPU, rocm, nvptx) emits float ``!=`` as ``fcmp one``: false when a
            # side is NaN (C, CUDA and numpy say true).
            a, b = self.to_np(a), self.to_np(b)
            return Value(self._call("ordered_ne", a.node, b.node), "np", _dtype(node), _varying(a, b))
        op = self.COMPARE_OPS[key]()
        return Value(ast.Compare(a.node, [op], [b.node]), self._result_kind(a, b), _dtype(node), _varying(a, b))

    def visit_And(self, node) -> Value:
        return self._logical(node, ast.And, ast.BitAnd, negate_first=False)

    def visit_Or(self, node) -> Value:
        return self._logical(node, ast.Or, ast.BitOr, negate_first=True)

    def _logical(self, node, bool_op, bit_op, negate_first: bool) -> Value:
        dtype = _dtype(node)
        a = self.visit_expr(node.a)
        if not self._scalar_lanes(a) or _lanes(dtype) > 1:
            if not short_circuits(self.target_kind):  # LLVM evaluates both sides (CreateAnd/CreateOr)
                b = self.visit_expr(node.b)
                return Value(ast.BinOp(a.node, bit_op(), b.node), "np", dtype, _varying(a, b))
            # C's ``&&``/``||`` (cuda): lanes the left side decides do not evaluate the right, so a
            # read there guarded by the left (``tx < 4 && A[tx] > 0``) must not trap.
            held = self.namer.define_name("lhs")
            rest = ast.UnaryOp(ast.Invert(), _name(held)) if negate_first else _name(held)  # evaluate the right
            saved_masks, saved_lazy = list(self.lanes.masks), list(self.lanes.lazy_masks)
            self.lanes.masks, self.lanes.lazy_masks = saved_masks + [rest], saved_lazy + [rest]
            try:
                b = self.visit_expr(node.b)
            finally:
                self.lanes.masks, self.lanes.lazy_masks = saved_masks, saved_lazy
            left = ast.NamedExpr(_store_name(held), a.node)
            return Value(ast.BinOp(left, bit_op(), b.node), "np", dtype, _varying(a, b))
        # Short-circuit like the guard it usually is; the right side is analysed under the left.
        guard = tirx.Not(node.a) if negate_first else node.a
        with self._guarded(guard):
            b = self.visit_expr(node.b)
        if not self._scalar_lanes(b):
            return Value(ast.BinOp(a.node, bit_op(), b.node), "np", dtype, _varying(a, b))
        return Value(ast.BoolOp(bool_op(), [a.node, b.node]), self._result_kind(a, b), dtype)

    def visit_Not(self, node) -> Value:
        a = self.visit_expr(node.a)
        if not self._scalar_lanes(a):
            return Value(ast.UnaryOp(ast.Invert(), a.node), "np", a.dtype, a.varying)
        return Value(ast.UnaryOp(ast.Not(), a.node), a.kind, _dtype(node))

    def visit_BitwiseNot(self, node) -> Value:
        return self._invert(node, self.visit_expr(node.a))

    def _invert(self, node, a: Value) -> Value:
        """``~a`` (``node``: a ``BitwiseNot`` or a ``bitwise_not`` call) in the node's dtype."""
        dtype = _dtype(node)
        scalar = _scalar_dtype(dtype)
        observed = (self.check and self.target_kind in C_KINDS and scalar in ("uint8", "uint16")
                    and _lanes(dtype) == 1 and _key(node) not in self.c_truncated)
        operand, again = self._held(a.node) if observed else (a.node, None)
        out = ast.UnaryOp(ast.Invert(), operand)
        if a.kind == "py" and scalar.startswith("uint"):
            out = self._call("wrap", out, ast.Constant(scalar))  # Python's ~4 is -5, uint8's 251
        if observed:
            # C computes ~ of a narrow unsigned value in the promoted int: negative, unlike the TIR's.
            mask = self._mask_expr(self._used_lanes())
            keywords = self._name_threads({"mask": mask} if mask is not None else {})
            out = self._call("promoted_invert", out, again, ast.Constant(scalar), kw=keywords)
        return Value(out, a.kind, dtype, a.varying)

    def visit_Cast(self, node) -> Value:
        value = self.visit_expr(node.value)
        src, dst = value.dtype, _dtype(node)
        v = value.varying
        if src == dst:
            return value
        dst_scalar = _scalar_dtype(dst)
        inner = node.value
        if (_type_key(inner) == "prim.Cast" and _dtype(inner.value) == dst and _is_float(dst) and _is_float(src)
                and _float_bits(src) > _float_bits(dst)):
            return self.visit_expr(inner.value)  # a float widened and narrowed back: LLVM drops both casts
        if dst_scalar == "bool":
            return Value(ast.Compare(value.node, [ast.NotEq()], [ast.Constant(0)]), value.kind, dst, v)
        if _is_int(dst) and _is_int(src) and value.kind == "py":
            if self._fits(node.value, dst):
                return Value(value.node, "py", dst)
            return Value(self._call("wrap", value.node, ast.Constant(dst)), "py", dst)
        if _is_int(dst) and _scalar_dtype(src) == "bool" and value.kind == "py":
            return Value(ast.Call(_name("int"), [value.node], []), "py", dst)
        if _is_float(dst) and _is_float(src) and "float16" in (_scalar_dtype(src), dst_scalar):
            # NaNs through float16 as the hardware converts them (runtime._float_to_float)
            return Value(self._call("cast", self.to_np(value).node, ast.Constant(dst_scalar)), "np", dst, v)
        if _is_float(dst) and (_is_int(src) or _is_float(src) or src.startswith("bool")):
            return Value(ast.Call(_np(dst_scalar), [value.node], []), "np", dst, v)
        if _is_int(dst) and (_is_int(src) or _is_float(src) or src.startswith("bool")):
            return Value(self._call("cast", value.node, ast.Constant(dst_scalar)), "np", dst, v)
        raise UnsupportedConstructError("prim.Cast", f"{src} -> {dst}")

    # ------------------------------------------------------------------ conditionals
    def _conditional(self, cond_expr, true_expr, false_expr, dtype: str, lazy: bool) -> Value:
        # A branch (lazy if_then_else) must be decided by initialised values; a Select is no branch:
        # as in MemorySanitizer, an uninitialised condition only poisons the value it selects.
        self._note_arms_truncated(cond_expr, true_expr, false_expr, lazy)
        saved_defer = self.defer_poison, self.defer_overflow
        self.defer_poison, self.defer_overflow = saved_defer[0] and not lazy, saved_defer[1] and not lazy
        try:
            cond = self.visit_expr(cond_expr)
        finally:
            self.defer_poison, self.defer_overflow = saved_defer
        lanes = _lanes(dtype)
        if self._scalar_lanes(cond) and (lazy or lanes == 1):
            # Scalar condition: only the chosen side runs (identical values; the unchosen side of a
            # Select may read out of bounds harmlessly on hardware, so it must not fail here).
            with self._guarded(cond_expr):
                t = self.visit_expr(true_expr)
            with self._guarded(tirx.Not(cond_expr)):
                f = self.visit_expr(false_expr)
            t, f = self._unify_arms(t, f)
            return Value(ast.IfExp(cond.node, t.node, f.node), t.kind, dtype, _varying(t, f))
        # Vector condition: both sides evaluated, lanes picked; reads in a side may be out of bounds
        # only in lanes that side does not supply.
        # The condition is named where select gets it (its first argument, evaluated before the arms):
        # the arms' masks refer to the name, not to copies of the condition (nested if_then_else of
        # roi_align inlined a condition into every load of its arms: 11 MB of fast-mode source).
        cond_node, bound = cond.node, cond.node
        if not isinstance(cond_node, (ast.Name, ast.Constant)):
            held = self.namer.define_name("cond")
            bound, cond_node = ast.NamedExpr(_store_name(held), cond.node), _name(held)
        saved_masks, saved_lazy = list(self.lanes.masks), list(self.lanes.lazy_masks)
        try:
            for arm_mask, arm in ((cond_node, true_expr), (ast.UnaryOp(ast.Invert(), cond_node), false_expr)):
                self.lanes.masks = saved_masks + [arm_mask]
                self.lanes.lazy_masks = saved_lazy + [arm_mask] if lazy else saved_lazy
                if arm is true_expr:
                    t = self.visit_expr(arm)
                else:
                    f = self.visit_expr(arm)
        finally:
            self.lanes.masks, self.lanes.lazy_masks = saved_masks, saved_lazy
        return Value(self._call("select", bound, t.node, f.node), "np", dtype, _varying(cond, t, f))

    def _unify_arms(self, t: Value, f: Value) -> tuple[Value, Value]:
        if "np" in (t.kind, f.kind) or "weak" in (t.kind, f.kind):
            return self.to_np(t), self.to_np(f)
        return t, f

    def visit_Select(self, node) -> Value:
        return self._conditional(node.condition, node.true_value, node.false_value, _dtype(node), lazy=False)

    def visit_Let(self, node) -> Value:
        self._note_truncated(node.value)
        value = self.visit_expr(node.value)
        name = self.namer.define(node.var, node.var.name)
        if value.kind == "weak":
            value = self.to_np(value)
        self._set_var(node.var, value)
        self._bind_analyzer(node.var, node.value)
        body = self.visit_expr(node.body)
        pair = ast.Tuple([ast.NamedExpr(_store_name(name), value.node), body.node], ast.Load())
        return Value(ast.Subscript(pair, ast.Constant(1), ast.Load()), body.kind, body.dtype, body.varying)

    # ------------------------------------------------------------------ vectors
    def visit_Ramp(self, node) -> Value:
        base, stride = self.visit_expr(node.base), self.visit_expr(node.stride)
        dtype = _dtype(node)
        return Value(self._call("ramp", base.node, stride.node, ast.Constant(int(node.lanes)),
                                ast.Constant(_scalar_dtype(dtype))), "np", dtype, _varying(base, stride))

    def visit_Broadcast(self, node) -> Value:
        value = self.visit_expr(node.value)
        dtype = _dtype(node)
        return Value(self._call("broadcast", value.node, ast.Constant(int(node.lanes)),
                                ast.Constant(_scalar_dtype(dtype))), "np", dtype, value.varying)

    def visit_Shuffle(self, node) -> Value:
        values = [self.visit_expr(v) for v in node.vectors]
        if _varying(*values):
            raise _CannotVectorize("Shuffle of lanes that differ between iterations")
        indices = [int(i.value) for i in node.indices]
        picked = self._call("shuffle", ast.List([v.node for v in values], ast.Load()),
                            ast.List([ast.Constant(i) for i in indices], ast.Load()))
        if _lanes(_dtype(node)) == 1:  # one lane picked: a scalar, not a vector of one
            picked = ast.Subscript(picked, ast.Constant(0), ast.Load())
        return Value(picked, "np", _dtype(node))

    # ------------------------------------------------------------------ calls
    def visit_Call(self, node) -> Value:
        op = node.op
        if isinstance(op, tvm.ir.GlobalVar):
            return self._launch(op, list(node.args))
        if not isinstance(op, tvm.ir.Op):
            raise UnsupportedConstructError("call to a function", str(op))
        name = op.name
        short = name.split(".", 1)[1] if "." in name else name
        dtype = _dtype(node)
        args = list(node.args)
        if short == "if_then_else":
            return self._conditional(args[0], args[1], args[2], dtype, lazy=True)
        if short in ("likely", "tvm_thread_invariant"):  # hints: the condition itself
            return self.visit_expr(args[0])
        special = self._exact_intrinsic(short, node, args)
        if special is not None:
            return special
        if short == "buffer_data":
            info = self._buffer(args[0])
            if info.prefix or info.per_thread:
                raise UnsupportedConstructError("tirx.buffer_data", f"of per-lane buffer {info.name}")
            storage = self.scope.strided_storage.get(_key(args[0]), info.name)
            flat = ast.Call(ast.Attribute(_name(storage), "reshape", ast.Load()), [ast.Constant(-1)], [])
            return Value(flat, "np", "handle")
        if short in ("tvm_warp_shuffle", "tvm_warp_shuffle_down", "tvm_warp_shuffle_up", "tvm_warp_shuffle_xor"):
            warp_extents, taking = self._warp()
            kind = {"tvm_warp_shuffle": "idx", "tvm_warp_shuffle_down": "down", "tvm_warp_shuffle_up": "up",
                    "tvm_warp_shuffle_xor": "xor"}[short]
            value, offset, width = self.visit_expr(args[1]), self.visit_expr(args[2]), self.visit_expr(args[3])
            if width.varying:
                raise UnsupportedConstructError(name, "with a width that differs between threads")
            if offset.varying:  # a source lane per thread (LowerThreadAllreduce's `threadIdx.y * 32`)
                offset = self.to_np(offset)
            keywords = {"poison": _name("race_log")} if self.defer_poison else {}
            if taking is not None:
                keywords["active"] = taking
                if self.check and not self.defer_poison:
                    keywords["strict"] = ast.Constant(True)
            call = self._call("warp_shuffle", ast.Constant(kind), self.to_np(value).node, offset.node, width.node,
                              ast.Tuple(warp_extents, ast.Load()), kw=keywords)
            return Value(call, "np", dtype, True)
        if short == "tvm_warp_activemask":
            warp_extents, taking = self._warp()
            call = self._call("warp_activemask", ast.Tuple(warp_extents, ast.Load()),
                              kw={"active": taking} if taking is not None else None)
            return Value(call, "np", dtype, True)
        if short == "tvm_storage_sync":
            call_args = [ast.Constant(str(args[0].value)) if args else ast.Constant("shared")]
            mask = self._mask_expr(self.lanes.stmt_masks)
            keywords = {}
            if mask is not None:
                keywords["reached"] = mask
                self._name_threads(keywords)
                if any(not ax.is_thread for ax in self.lanes.axes):  # blocks as lanes: each block its own
                    keywords["thread_axes"] = ast.Tuple([ast.Constant(a) for a in self.THREAD_AXES.values()],
                                                        ast.Load())
                    keywords["ndim"] = ast.Constant(self.FAST_AXES)
            if self.check:
                keywords["log"] = _name("race_log")
            return Value(self._call("barrier", *call_args, kw=keywords), "py", "int32")
        if short in self.CALL_BITWISE:
            key = {"bitwise_and": "prim.BitwiseAnd", "bitwise_or": "prim.BitwiseOr",
                   "bitwise_xor": "prim.BitwiseXor", "shift_left": "prim.LShift",
                   "shift_right": "prim.RShift"}[short]
            return self.visit_binary(_BinaryLike(args[0], args[1], node), key)
        if short == "bitwise_not":
            return self._invert(node, self.visit_expr(args[0]))
        if short == "reinterpret":
            a = self.to_np(self.visit_expr(args[0]))
            return Value(self._call("reinterpret", a.node, ast.Constant(_scalar_dtype(dtype))), "np", dtype,
                         a.varying)
        if short in self.NUMPY_MATH or short in self.HELPER_MATH:
            operands = [self._math_operand(a) for a in args]
            nodes = [o.node for o in operands]
            fn = self._use(self.HELPER_MATH[short]) if short in self.HELPER_MATH else _np(self.NUMPY_MATH[short])
            double = (short not in self.HELPER_MATH and short in self.DOUBLE_MATH
                      and _scalar_dtype(dtype) in ("float16", "float32"))
            if _scalar_dtype(dtype) == "float64" and self.NUMPY_MATH.get(short) in self.LIBM_FLOAT64:
                call = self._call("libm", ast.Constant(self.NUMPY_MATH[short]), *nodes)
            elif (_scalar_dtype(dtype) == "float32" and self.NUMPY_MATH.get(short, short) in self.LIBM_FLOAT32
                  and all(_scalar_dtype(o.dtype) == "float32" for o in operands)):
                call = self._call("libm_float32", ast.Constant(self.NUMPY_MATH.get(short, short)), *nodes)
            elif (len(nodes) == 1 and _is_float(dtype) and short not in self.NAN_EXACT_MATH
                    and _is_float(operands[0].dtype)):
                # The operand once, not once for the value and once for the NaN check: nested
                # math (log of exp of ...) would double the script at every level.
                call = self._call("nan_through", fn, nodes[0], kw={"double": ast.Constant(True)} if double else None)
            elif double and short == "pow":
                call = self._call("power_in_double", *nodes)
            elif double:
                call = self._call("in_double", fn, *nodes)
            else:
                call = ast.Call(fn, nodes, [])
            return Value(call, "np", dtype, _varying(*operands))
        raise UnsupportedConstructError(name, "no exact numpy translation")

    def _math_operand(self, arg) -> Value:
        value = self.visit_expr(arg)
        if _is_float(value.dtype) or value.kind != "np":
            value = self.to_np(value)
        return value

    def _warp(self) -> tuple[list[ast.expr], ast.expr | None]:
        """A warp intrinsic's view of the block: the thread extents (z, y, x) of the launch it is in
        (the threads running as lanes around it: a function of several launches, before
        SplitHostDevice, binds other extents elsewhere), and the mask of the threads taking the
        branch it is in (None outside any; see ``runtime.warp_shuffle``)."""
        running = {ax.tag: ax.extent for ax in self.lanes.axes if ax.is_thread}
        extents = [running.get(tag, ast.Constant(1) if running else ast.Constant(self.gpu.thread_extents.get(tag, 1)))
                   for tag in ("threadIdx.z", "threadIdx.y", "threadIdx.x")]
        return extents, (self._mask_expr(self.lanes.stmt_masks) if self.lanes.stmt_masks else None)

    def _exact_intrinsic(self, short: str, node, args) -> Value | None:
        """Intrinsics used as values that have an exact meaning; None for any other."""
        if short == "assume":
            return Value(ast.Constant(True), "py", "bool")
        if short == "ignore_loop_partition":
            return self.visit_expr(args[0])
        if short == "clz":
            a = self.to_np(self.visit_expr(args[0]))
            return Value(self._call("clz", a.node, ast.Constant(_scalar_dtype(_dtype(node)))), "np", _dtype(node),
                         a.varying)
        if short == "tvm_call_packed":
            return self._packed_call(node, args)
        if short in ("q_multiply_shift", "q_multiply_shift_per_axis"):
            return self._fixed_point_multiply(short, node, args)
        if short == "cuda.atomic_add":
            return self._atomic_add(node, args)
        if (short == "isnullptr" and _type_key(args[0]) == "ir.Call" and isinstance(args[0].op, tvm.ir.Op)
                and args[0].op.name == "tirx.address_of"):
            return Value(ast.Constant(False), "py", "bool")  # the address of a value is never null
        if short == "get_active_lane_mask":  # lane i is active when base + i < limit
            base, limit = args
            lanes = _lanes(_dtype(node))
            return self.visit_expr(tirx.LT(tirx.Ramp(base, tirx.const(1, _dtype(base)), lanes),
                                           tirx.Broadcast(limit, lanes)))
        if short == "masked_load":
            self.lanes.masks.append(self.to_np(self.visit_expr(args[-1])).node)
            try:
                return self.visit_TensorLoad(tirx.BufferLoad(args[0], list(args[1:-1])))
            finally:
                self.lanes.masks.pop()
        return None

    def _fixed_point_multiply(self, short: str, node, args) -> Value:
        """``q_multiply_shift(x, y, q, s)`` and ``q_multiply_shift_per_axis(x, y, ls, rs, q, l, r)``: the
        runtime helpers compute TVM's own lowering of them (``default.FLegalize``, applied by
        LowerIntrin after MakePackedAPI).  That lowering needs ``q_multiply_shift``'s multiplier ``y``
        to be a constant, and its shift ``s`` too when ``y`` is ``1 << 30`` (then a plain int32 shift)."""
        keywords = None
        if short == "q_multiply_shift":
            multiplier = _int_constant(args[1])
            if multiplier is None:
                raise UnsupportedConstructError("tirx.q_multiply_shift", "with a multiplier that is not a constant "
                                                "(TVM's lowering needs one)")
            if multiplier == 1 << 30:
                if _int_constant(args[3]) is None:
                    raise UnsupportedConstructError("tirx.q_multiply_shift", "with the multiplier 1 << 30 and a "
                                                    "shift that is not a constant (TVM's lowering needs one)")
                keywords = {"power_of_two": ast.Constant(True)}
        values = [self.visit_expr(a) for a in args]
        call = self._call(short, *[v.node for v in values], kw=keywords)
        return Value(call, "np", _dtype(node), _varying(*values))

    def _atomic_add(self, node, args) -> Value:
        """``tirx.cuda.atomic_add(address_of(B[i]), v)`` (CUDA's ``atomicAdd``): the threads' adds
        applied one after another in lane order, each returning the value it found (``atomic_add``).
        The loops around run serially (``dependence``): only threads run it as lanes."""
        target = args[0]
        if not (_type_key(target) == "ir.Call" and isinstance(target.op, tvm.ir.Op)
                and target.op.name == "tirx.address_of" and _type_key(target.args[0]) == "ir.TensorLoad"):
            raise UnsupportedConstructError("tirx.cuda.atomic_add", "on an address that is not a buffer element")
        element = target.args[0]
        info = self._buffer(element.source)
        if info.per_thread or _lanes(_dtype(node)) > 1 or _lanes(info.dtype) > 1:
            raise UnsupportedConstructError("tirx.cuda.atomic_add", f"on {info.name}: per-thread memory or vectors")
        values = [self.visit_expr(i) for i in element.indices]
        value = self.to_np(self.visit_expr(args[1]))
        index = ast.Tuple(self._prefix(info) + [v.node for v in values], ast.Load())
        keywords = {}
        mask = self._mask_expr(self.lanes.stmt_masks)
        if mask is not None:
            keywords["mask"] = mask
        if self.check and info.shadow is not None:
            keywords["shadow"] = _name(info.shadow)
        call = self._call("atomic_add", _name(info.name), index, value.node, ast.Constant(info.name), kw=keywords)
        return Value(call, "np", _dtype(node), True)

    #: Runtime functions called through ``tvm_call_packed`` that the emulator implements exactly.
    PACKED_FUNCTIONS = ("tvm.contrib.sort.sort", "tvm.contrib.sort.argsort", "tvm.contrib.sort.topk",
                        "tvm.contrib.sort.argsort_nms")

    def _packed_call(self, node, args) -> Value:
        """``tvm_call_packed`` of one of TVM's sort functions (topi's CPU sort, argsort, topk; vision's
        argsort_nms): the same stable sort in numpy (``contrib_sort``, ``argsort_nms``).  Any other packed
        function is refused by name."""
        function = _packed_function(node) or str(args[0])
        if function not in self.PACKED_FUNCTIONS:
            raise UnsupportedConstructError("tirx.tvm_call_packed", function)
        if self.lanes.vector_depth or self.lanes.stmt_masks:
            raise _CannotVectorize(f"{function} in a loop that runs as lanes")
        nodes, marks = [], []
        for arg in args[1:]:
            if _type_key(arg) == "ir.Call" and isinstance(arg.op, tvm.ir.Op) and arg.op.name == "tirx.tvm_stack_make_array":
                array, written = self._stack_array(function, arg)
                nodes.append(array)
                marks.append(written)
            else:
                value = self.visit_expr(arg)
                if value.varying:
                    raise _CannotVectorize(f"{function} argument that differs between lanes")
                nodes.append(value.node)
                marks.append(ast.Constant(None))
        # check=True: the library writes its outputs; marking them written keeps the uninitialised-read
        # sanitizer from flagging the kernel's reads of them (argsort into a scratch buffer: median).
        kw = ({"written": ast.Tuple(marks, ast.Load())}
              if any(not (isinstance(m, ast.Constant) and m.value is None) for m in marks) else None)
        if function == "tvm.contrib.sort.argsort_nms":
            return Value(self._call("argsort_nms", *nodes, kw=kw), "py", _dtype(node))
        return Value(self._call("contrib_sort", ast.Constant(function), *nodes, kw=kw), "py", _dtype(node))

    def _stack_array(self, function: str, call) -> tuple[ast.expr, ast.expr]:
        """``tvm_stack_make_array(data, shape, strides, ndim, dtype, elem_offset)``: a view of the data,
        and (check=True) the same view of a scratch buffer's written-marks, else a None constant."""
        data, shape, strides, _ndim, dtype_hint, offset = call.args
        if not _is_zero(strides):
            raise UnsupportedConstructError("tirx.tvm_stack_make_array", f"with strides, passed to {function}")
        if not (_type_key(shape) == "ir.Call" and shape.op.name == "tirx.tvm_stack_make_shape"):
            raise UnsupportedConstructError("tirx.tvm_stack_make_array", f"shape {shape}")
        dims = [self.visit_expr(d) for d in shape.args]
        storage, offset_value = self.visit_expr(data), self.visit_expr(offset)
        if _varying(storage, offset_value, *dims):
            raise _CannotVectorize(f"{function} argument that differs between lanes")
        array = self._call("view", storage.node, ast.Constant(_scalar_dtype(_dtype(dtype_hint))),
                           ast.Tuple([d.node for d in dims], ast.Load()), offset_value.node)
        written: ast.expr = ast.Constant(None)
        if self.check and _type_key(data) == "ir.Call" and isinstance(data.op, tvm.ir.Op) \
                and data.op.name == "tirx.buffer_data":
            info = self._buffer(data.args[0])
            if info.shadow is not None and not info.prefix and not info.per_thread:
                marks = ast.Call(ast.Attribute(_name(info.shadow), "reshape", ast.Load()), [ast.Constant(-1)], [])
                written = self._call("view", marks, ast.Constant("bool"),
                                     copy.deepcopy(ast.Tuple([d.node for d in dims], ast.Load())),
                                     copy.deepcopy(offset_value.node))
        return array, written


def _int_constant(expr) -> int | None:
    """The value of an integer constant (or a broadcast of one), else None."""
    if _type_key(expr) == "prim.Broadcast":
        expr = expr.value
    return int(expr.value) if _type_key(expr) == "ir.IntImm" else None
