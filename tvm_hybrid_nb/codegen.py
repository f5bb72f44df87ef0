"""Hybrid code generation: a TIR PrimFunc at any stage before MakePackedAPI → readable numpy Python.

One ``visit_<Node>`` method per TIR node kind; operators come from tables at class level; every
statement and expression is built as a Python ``ast`` node and printed with ``ast.unparse``, so
precedence and indentation are right by construction.  Anything without an exact translation raises
:class:`~tvm_hybrid_nb.errors.UnsupportedConstructError` naming the node or op.

Exactness rules (the emulator must not invent semantics):

* a value is either numpy-typed (``kind="np"``: a numpy scalar or array of its TIR dtype, so
  integers wrap and float32 stays float32), a Python int/bool (``kind="py"``: index arithmetic; the
  generator asks TVM's arithmetic analyzer whether a result fits its dtype and wraps it when it
  cannot prove so), or a Python float literal (``kind="weak"``, only ever combined with a numpy value);
* integer ``Div``/``Mod`` truncate and ``FloorDiv``/``FloorMod`` floor; plain ``//``/``%`` are used
  only where the analyzer proves both agree;
* buffer accesses are plain subscripts where the analyzer proves them in bounds and bounds-checked
  ``load``/``store`` calls otherwise (numpy would silently wrap a negative index);
* ``if_then_else`` is lazy, ``Select`` evaluates both sides with masked-out lanes allowed out of bounds.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import keyword
import math
import unicodedata
from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import tirx

from . import runtime
from .errors import UnsupportedConstructError
from .signature import ParamSpec

#: An outermost loop of at most this many iterations lets the first loop inside it report progress
#: even when that loop is innermost (each outer iteration may take long).
_FEW_OUTER_ITERATIONS = 16
_FOR_KIND_ITERATORS = {0: "range", 1: "parallel", 2: "vectorized", 3: "unrolled", 4: "thread_binding"}
_INT64_MAX = (1 << 63) - 1


def _type_key(node) -> str:
    info = getattr(type(node), "__tvm_ffi_type_info__", None)
    return info.type_key if info is not None else type(node).__name__


def _key(obj) -> int:
    return obj.__chandle__()


def _dtype(expr) -> str:
    dtype = getattr(expr.ty, "dtype", None)
    return str(dtype) if dtype is not None else "handle"  # PointerType: a data pointer


def _scalar_dtype(dtype: str) -> str:
    return dtype.split("x")[0] if "x" in dtype else dtype


def _lanes(dtype: str) -> int:
    return int(dtype.split("x")[1]) if "x" in dtype else 1


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def _float_bits(dtype: str) -> int:
    digits = "".join(c for c in _scalar_dtype(dtype) if c.isdigit())
    return int(digits) if digits else 0


def _is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def _int_range(dtype: str) -> tuple[int, int]:
    base = _scalar_dtype(dtype)
    bits = int(base[4:] if base.startswith("uint") else base[3:])
    if base.startswith("uint"):
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


@dataclass
class Value:
    """A generated expression with what the generator knows about its Python value."""

    node: ast.expr
    kind: str  # "np" | "py" | "weak"
    dtype: str
    varying: bool = False  # fast mode: differs between the lanes of vectorised loops

    @property
    def lanes(self) -> int:
        return _lanes(self.dtype)


def _varying(*values: "Value") -> bool:
    return any(v.varying for v in values)


class _CannotVectorize(Exception):
    """Fast mode met a construct it cannot run for all lanes at once; the loop runs serially."""


@dataclass
class GeneratedKernel:
    """The result of code generation for one stage."""

    source: str
    function_name: str
    params: list[ParamSpec]
    helpers: list[str] = field(default_factory=list)
    #: Number of outermost serial loops that report progress (executed variant only).
    progress_loops: int = 0


@dataclass
class _BufferInfo:
    name: str
    shape: list
    dtype: str
    #: Lane indices prepended to every access of a buffer private to each lane (an allocation inside
    #: a loop that runs as array lanes).
    prefix: list = field(default_factory=list)
    #: Per-thread memory (``local`` scope): indexed by the thread lanes first.
    per_thread: bool = False
    #: Sanitizer (``check=True``): name of the array that marks which elements were written.
    shadow: str | None = None


@dataclass
class _Axis:
    """An array axis standing for the iterations of a loop (fast mode) or the threads of a block."""

    name: str
    lo: ast.expr
    extent: ast.expr
    is_thread: bool
    axis: int = 0
    tag: str = ""
    race: bool = False  # lanes that run concurrently (threads; parallel iterations when checking)
    var: object = None  # the TIR loop or thread variable
    min_expr: object = None


def _name(ident: str) -> ast.Name:
    return ast.Name(id=ident, ctx=ast.Load())


def _store_name(ident: str) -> ast.Name:
    return ast.Name(id=ident, ctx=ast.Store())


def _const(value) -> ast.expr:
    if isinstance(value, float) and not math.isfinite(value):
        if math.isnan(value):
            return ast.Attribute(_name("np"), "nan", ast.Load())
        inf = ast.Attribute(_name("np"), "inf", ast.Load())
        return inf if value > 0 else ast.UnaryOp(ast.USub(), inf)
    return ast.Constant(value)


def _np(attr: str) -> ast.expr:
    return ast.Attribute(_name("np"), attr, ast.Load())


def ascii_identifier(text: str) -> str:
    """``text`` as an ASCII identifier body: NFKC-normalised as Python normalises identifiers
    (``ﬁ`` is ``fi``, ``Ⅻ`` is ``XII``, ``x²`` is ``x2``), every other character an underscore.
    ASCII names are their own NFKC form, so distinct names stay distinct in Python."""
    text = unicodedata.normalize("NFKC", str(text))
    return "".join(c if (c.isascii() and (c.isalnum() or c == "_")) else "_" for c in text)


class _Namer:
    """Distinct objects get distinct names, chosen like TVMScript's printer (``A``, ``A_1``)."""

    def __init__(self, reserved: set[str]):
        self._used = set(reserved)
        self._names: dict[int, str] = {}

    def define(self, obj, hint: str) -> str:
        hint = ascii_identifier(hint or "v") or "v"
        if hint[0].isdigit():
            hint = "v_" + hint
        if hint.startswith("__"):  # dunders are the script's own hooks (``__progress__``)
            hint = "v" + hint
        name, n = hint, 0
        while name in self._used or keyword.iskeyword(name):
            n += 1
            name = f"{hint}_{n}"
        self._used.add(name)
        self._names[_key(obj)] = name
        return name

    def lookup(self, obj) -> str | None:
        return self._names.get(_key(obj))

    def define_name(self, hint: str) -> str:
        """A fresh name that belongs to no TIR object (sanitizer bookkeeping)."""
        name, n = hint, 0
        while name in self._used:
            n += 1
            name = f"{hint}_{n}"
        self._used.add(name)
        return name


@dataclass
class _SerialFrame:
    """Fast mode: a serial loop whose body is being generated, and the lane views hoisted out of it."""

    var: object                 # the TIR loop variable
    min_expr: object            # its TIR start
    lo: ast.expr                # its start and extent in Python
    extent: ast.expr
    name: str                   # its Python name
    outside: set                # Python names defined before the loop (usable in front of it)
    guard_depth: int
    hoisted: list = field(default_factory=list)   # statements to put in front of the loop
    views: dict = field(default_factory=dict)     # ast.dump of a hoisted view -> its name


class HybridCodegen:
    """Translate one PrimFunc into hybrid Python source.

    Parameters
    ----------
    func : tvm.tirx.PrimFunc
    function_name : str
        Name of the Python function to define.
    stage : str, optional
        Stage label used in error messages and the script's docstring.
    """

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
    #: Math intrinsics computed by numpy in the operand dtype.
    NUMPY_MATH = {name: name for name in (
        "exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "arcsin",
        "arccos", "arctan", "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "floor", "ceil",
        "trunc", "isnan", "isinf", "isfinite", "fmod", "copysign", "hypot", "nextafter", "power",
        "arctan2")}
    NUMPY_MATH.update({"asin": "arcsin", "acos": "arccos", "atan": "arctan", "asinh": "arcsinh",
                       "acosh": "arccosh", "atanh": "arctanh", "atan2": "arctan2", "pow": "power",
                       "fabs": "abs", "round": "rint", "nearbyint": "rint"})
    #: Intrinsics implemented by a runtime helper of the same meaning.
    HELPER_MATH = {"rsqrt": "rsqrt", "sigmoid": "sigmoid", "erf": "erf", "popcount": "popcount"}
    #: Unary math whose numpy loops already return a NaN operand as libm does (others: nan_through).
    NAN_EXACT_MATH = frozenset({"floor", "ceil", "trunc", "round", "nearbyint", "fabs", "sqrt", "rsqrt", "exp2",
                                "log2", "log1p", "tan", "sinh", "atan", "erf", "popcount"})
    #: float32 math that libm rounds correctly and numpy's float32 loops do not (up to 1 ulp off in a
    #: third of the values): computed in float64 and rounded, as the native kernel's libm results.
    DOUBLE_MATH = frozenset({"exp", "log", "sin", "cos"})
    CALL_BITWISE = {"bitwise_and": ast.BitAnd, "bitwise_or": ast.BitOr, "bitwise_xor": ast.BitXor,
                    "shift_left": ast.LShift, "shift_right": ast.RShift}

    #: Lanes layout: axes 0-3 are the threads of a block (fixed per thread tag, so per-thread memory
    #: can be indexed anywhere), axes 4-10 the loops that fast mode runs as arrays, the last axis
    #: holds vector lanes.
    FAST_AXES = 12
    THREAD_AXES = {"threadIdx.z": 0, "threadIdx.y": 1, "threadIdx.x": 2, "vthread": 3}
    #: Fewer lanes than this are gathered with index arrays rather than viewed with strides.
    VIEW_MIN_ELEMENTS = 16
    FIRST_LOOP_AXIS = 4
    #: Operators of a lane-view store ``X = X op Y`` that update the view in place.
    IN_PLACE_OPS = (ast.Add, ast.Sub, ast.Mult)

    def __init__(self, func, function_name: str, stage: str | None = None, mode: str = "exact",
                 progress: bool = False, module_functions: dict | None = None, check: bool = False,
                 synced: bool = False):
        self.func = func
        self.check = check
        #: Buffers allocated by a block (``s_tir``): where they live is decided later, by
        #: ``PlanAndUpdateBufferAllocationLocation`` (see :meth:`_planned_into`).
        self.block_allocs: dict[int, object] = {}
        self._access_counts: dict[int, int] | None = None
        # Threads race only where barriers are explicit: after s_tir.ThreadSync, or written by the user.
        # Before that pass the IR implies a barrier wherever one is needed.
        self.thread_races = synced or _has_storage_sync(func)
        self.mode = mode
        self.module_functions = dict(module_functions or {})
        self.extra_defs: list[ast.FunctionDef] = []
        self.launched: dict[str, str] = {}
        self.progress = progress
        self.serial_depth = 0
        self.progress_loops = 0
        #: The progress call of the outermost loop being generated (an inner loop may report too).
        self.progress_outer: ast.Call | None = None
        self.function_name = function_name
        self.stage = stage
        self.fast = mode == "fast"
        self.vector_depth = 0
        self.stmt_masks: list[ast.expr] = []
        self.vectorized_loops: list[str] = []
        #: Fast mode: ``T.parallel`` loops whose chunks run on several cores (see _split_parallel).
        self.parallel_loops: list[str] = []
        #: While generating a chunk function: its loop variable and full extent, and the largest
        #: number of lanes one of its statements runs (to decide how many cores it is worth).
        self.chunked_var: int | None = None
        self.chunked_extent: ast.expr | None = None
        self.peak_lanes = 0
        #: Fast mode: the serial loops around the statement being generated (views are hoisted
        #: out of the innermost), and how many analyser guards are open.
        self.serial_frames: list[_SerialFrame] = []
        self.guard_depth = 0
        self.hoisted_views: set[str] = set()
        self.storage_roots: dict[int, int] = {}
        self.axes: list[_Axis] = []
        #: Fast mode: array axis planned for each loop of the current lane nest (see _plan_lane_axes).
        self.axis_plan: dict[int, int] = {}
        self.thread_extents = _thread_extents(func.body)
        self.reducers: list = []
        #: Thread tag -> loop variable of a thread run serially (inside a cross-thread reduction block),
        #: and the per-thread buffers that block reduces into -> the tags it reduces across.
        self.serial_thread_lanes: dict[str, str] = {}
        self.accumulator_tags: dict[str, set] = {}
        self.analyzer = tvm.sym.Analyzer()
        helper_names = {n for n in vars(runtime) if not n.startswith("__")}
        reserved = (set(dir(builtins)) | helper_names | {"np", "math", "race_log", function_name}
                    | set(self.module_functions))
        self.namer = _Namer(reserved)
        self.helpers: set[str] = set()
        self.buffers: dict[int, _BufferInfo] = {}
        self.var_kinds: dict[int, tuple[str, str]] = {}
        self.masks: list[ast.expr] = []
        #: Allocations with explicit strides (by buffer key and by name): their flat storage's name.
        self.strided_storage: dict = {}
        #: Lane conditions of the lazy ``if_then_else`` arms being generated: lanes outside them
        #: do not evaluate the arm, so they must not trap (divide by zero) there.
        self.lazy_masks: list[ast.expr] = []
        #: Sanitizer: generating the value of a store to thread-local memory, where reads of
        #: never-written thread-local elements are deferred (see runtime.access, ``poison``).
        self.defer_poison = False

    # ------------------------------------------------------------------ entry
    def function_def(self) -> tuple[ast.FunctionDef, list[ParamSpec]]:
        """The function's ``def`` (kernels it launches are collected in ``self.extra_defs``)."""
        try:
            args, prologue, params = self._signature()
            body = self.visit_stmt(self.func.body)
        except UnsupportedConstructError as exc:
            raise exc.at_stage(self.stage) if self.stage and not exc.stage else exc
        except _CannotVectorize as exc:  # lanes that no serial fallback encloses (threads of a block)
            raise UnsupportedConstructError("lanes", str(exc), self.stage) from None
        doc = ast.Expr(ast.Constant(self._docstring(params)))
        if self.check:
            prologue = [ast.Assign([_store_name("race_log")], ast.Call(self._use("RaceLog"), [], []))] + prologue
        fdef = ast.FunctionDef(
            name=self.function_name,
            args=ast.arguments(posonlyargs=[], args=[ast.arg(a) for a in args], kwonlyargs=[], kw_defaults=[],
                               defaults=[]),
            body=[doc] + prologue + (body or [ast.Pass()]), decorator_list=[], returns=None, type_params=[])
        return fdef, params

    def generate(self) -> GeneratedKernel:
        fdef, params = self.function_def()
        module = ast.Module(body=self.extra_defs + [fdef], type_ignores=[])
        if self.fast:
            _drop_dead_assignments(module)
        _split_deep_nests(module)
        ast.fix_missing_locations(module)
        kernel_text = ast.unparse(module)
        mode_note = ""
        if self.fast:
            mode_note = (" Fast mode: loops " + (", ".join(self.vectorized_loops) or "(none)")
                         + " run as numpy array operations.")
            if self.parallel_loops:
                mode_note += (" Chunks of parallel loop(s) " + ", ".join(self.parallel_loops)
                              + " run on all cores at once.")
        header = (f'"""Hybrid script of `{self.function_name}`'
                  + (f" at stage {self.stage}" if self.stage else "")
                  + f'.\n\nGenerated by tvm_hybrid_nb from TVM TIR; runs with numpy alone.{mode_note}\n"""\n')
        imports = "import numpy as np\n"
        if self.helpers & runtime.NEEDS_MATH:
            imports = "import math\n\n" + imports
        helpers = runtime.helper_source(self.helpers) if self.helpers else ""
        parts = [header + imports] + ([helpers] if helpers else []) + [kernel_text]
        source = "\n\n".join(p.rstrip("\n") for p in parts) + "\n"
        return GeneratedKernel(source, self.function_name, params, runtime.helper_closure(self.helpers),
                               self.progress_loops)

    def _docstring(self, params: list[ParamSpec]) -> str:
        lines = ", ".join(p.describe() for p in params)
        return f"Parameters: {lines}. Outputs are written into their arrays in place."

    def _signature(self):
        args, prologue, params = [], [], []
        expressions = []  # (shape list, axis, parameter, TIR dim): printed once every plain size is named
        for p in self.func.params:
            if tirx.is_buffer_var(p):
                name = self.namer.define(p, p.name)
                args.append(name)
                shape = []
                for axis, dim in enumerate(p.shape):
                    if _type_key(dim) == "ir.IntImm":
                        shape.append(int(dim.value))
                    elif _type_key(dim) == "ir.Var":
                        dim_name = self.namer.lookup(dim)
                        if dim_name is None:
                            dim_name = self.namer.define(dim, dim.name)
                            self.var_kinds[_key(dim)] = ("py", _dtype(dim), False)
                            prologue.append(ast.Assign([_store_name(dim_name)], ast.Subscript(
                                ast.Attribute(_name(name), "shape", ast.Load()), ast.Constant(axis), ast.Load())))
                            self.analyzer.bind(dim, tvm.ir.Range.from_min_extent(0, 1 << 30), allow_override=True)
                        shape.append(dim_name)
                    else:
                        shape.append(None)
                        expressions.append((shape, axis, p, dim))
                if (len(p.strides) and not _contiguous_strides(p)) or not _is_zero(p.elem_offset):
                    prologue.extend(self._bind_layout_vars(p, name))
                self.buffers[_key(p)] = _BufferInfo(name, list(p.shape), str(p.dtype))
                params.append(shape)
            else:
                dtype = _dtype(p)
                name = self.namer.lookup(p)
                if name is not None:  # a buffer size too: the arguments are checked to agree
                    if not (_is_int(dtype) and _lanes(dtype) == 1):
                        raise UnsupportedConstructError("scalar parameter used as a buffer size", p.name)
                    args.append(name)
                    params.append(None)
                    continue
                name = self.namer.define(p, p.name)
                args.append(name)
                if _is_float(dtype):
                    prologue.append(ast.Assign([_store_name(name)], ast.Call(_np(dtype), [_name(name)], [])))
                    self.var_kinds[_key(p)] = ("np", dtype, False)
                elif _is_int(dtype) or dtype == "bool":
                    self.var_kinds[_key(p)] = ("py", dtype, False)
                elif dtype == "handle":  # a data pointer (device kernels): the storage array itself
                    self.var_kinds[_key(p)] = ("np", dtype, False)
                else:
                    raise UnsupportedConstructError("parameter type", f"{p.name}: {dtype}")
                params.append(None)
        for shape, axis, p, dim in expressions:
            shape[axis] = ast.unparse(self._shape_expr(dim, f"{p.name}.shape[{axis}] = {dim}"))
        specs = []
        for p, shape in zip(self.func.params, params):
            name = self.namer.lookup(p)
            specs.append(ParamSpec(name, str(p.dtype), tuple(shape)) if shape is not None
                         else ParamSpec(name, _dtype(p), None))
        return args, prologue, specs

    def _bind_layout_vars(self, p, name: str) -> list[ast.stmt]:
        """A parameter buffer whose ``elem_offset`` or strides are variables (``offset_factor``, topi's
        scans and sorts) accepts any offset and layout; the arrays it is given are contiguous and
        start at their first element, so the offset is 0 and the strides are row-major.  Constant
        offsets or strides that are not row-major stay refused."""
        out = []
        offset = p.elem_offset
        if not _is_zero(offset):
            if _type_key(offset) != "ir.Var" or self.namer.lookup(offset) is not None:
                raise UnsupportedConstructError("strided or offset parameter buffer", p.name)
            out.append(ast.Assign([_store_name(self.namer.define(offset, offset.name))], ast.Constant(0)))
            self.var_kinds[_key(offset)] = ("py", _dtype(offset), False)
            self.analyzer.bind(offset, tirx.const(0, _dtype(offset)), allow_override=True)
        if len(p.strides) and not _contiguous_strides(p):
            for axis, stride in enumerate(p.strides):
                expected = 1
                for dim in list(p.shape)[axis + 1:]:
                    expected = expected * dim
                if _type_key(stride) == "ir.Var" and self.namer.lookup(stride) is None:
                    row_major = ast.Call(_name("int"), [ast.Call(_np("prod"), [ast.Subscript(
                        ast.Attribute(_name(name), "shape", ast.Load()), ast.Slice(ast.Constant(axis + 1), None, None),
                        ast.Load())], [ast.keyword("dtype", _np("int64"))])], [])
                    out.append(ast.Assign([_store_name(self.namer.define(stride, stride.name))], row_major))
                    self.var_kinds[_key(stride)] = ("py", _dtype(stride), False)
                elif not self.analyzer.can_prove_equal(stride, expected):
                    raise UnsupportedConstructError("strided or offset parameter buffer", p.name)
        return out

    #: Operators a buffer shape expression may use (``Div``/``Mod`` only on sizes proven non-negative).
    SHAPE_OPS = {"prim.Add": ast.Add, "prim.Sub": ast.Sub, "prim.Mul": ast.Mult, "prim.FloorDiv": ast.FloorDiv,
                 "prim.FloorMod": ast.Mod, "prim.Div": ast.FloorDiv, "prim.Mod": ast.Mod}

    def _shape_expr(self, dim, where: str) -> ast.expr:
        """A parameter dimension given by an expression (``A: (n + 2, m)``) as Python over the sizes
        that plain dimensions define; the arguments' shapes are checked against it."""
        key = _type_key(dim)
        if key == "ir.IntImm":
            return ast.Constant(int(dim.value))
        if key == "ir.Var":
            name = self.namer.lookup(dim)
            if name is None:
                raise UnsupportedConstructError("buffer shape expression",
                                                f"{where}: size {dim.name} is no parameter's plain dimension")
            return _name(name)
        if key in self.SHAPE_OPS:
            if key in ("prim.Div", "prim.Mod") and not self.analyzer.can_prove(
                    tirx.all(dim.a >= 0, dim.b > 0)):
                raise UnsupportedConstructError("buffer shape expression", f"{where}: truncating division")
            return ast.BinOp(self._shape_expr(dim.a, where), self.SHAPE_OPS[key](), self._shape_expr(dim.b, where))
        raise UnsupportedConstructError("buffer shape expression", where)

    # ------------------------------------------------------------------ dispatch
    def visit_stmt(self, stmt) -> list[ast.stmt]:
        key = _type_key(stmt)
        method = getattr(self, "visit_" + key.split(".")[-1], None)
        if method is None:
            raise UnsupportedConstructError(key)
        return method(stmt)

    def visit_expr(self, expr) -> Value:
        key = _type_key(expr)
        if key in self.ARITH_OPS or key in self.BITWISE_OPS:
            return self.visit_binary(expr, key)
        if key in self.COMPARE_OPS:
            return self.visit_compare(expr, key)
        if key in self.DIVISION_OPS:
            return self.visit_division(expr, key)
        method = getattr(self, "visit_" + key.split(".")[-1], None)
        if method is None:
            raise UnsupportedConstructError(key)
        return method(expr)

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

    def _bounds(self, expr) -> tuple[int, int]:
        try:
            b = self.analyzer.const_int_bound(expr)
            return b.min_value, b.max_value
        except Exception:
            return -_INT64_MAX, _INT64_MAX

    def _use(self, helper: str) -> ast.expr:
        self.helpers.add(helper)
        return _name(helper)

    def _call(self, helper: str, *args: ast.expr, kw: dict | None = None) -> ast.expr:
        keywords = [ast.keyword(k, v) for k, v in (kw or {}).items()]
        return ast.Call(self._use(helper), list(args), keywords)

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
        if not math.isfinite(value):
            return Value(ast.Call(_np(dtype), [_const(value)], []), "np", dtype)
        return Value(ast.Constant(value), "weak", dtype)

    def visit_StringImm(self, node) -> Value:
        return Value(ast.Constant(str(node.value)), "py", "handle")

    def visit_Var(self, node) -> Value:
        name = self.namer.lookup(node)
        if name is None:
            raise UnsupportedConstructError("free variable", str(node.name))
        kind, dtype, varying = self.var_kinds.get(_key(node), ("py", _dtype(node), False))
        return Value(_name(name), kind, dtype, varying)

    def _set_var(self, var, value: Value) -> None:
        self.var_kinds[_key(var)] = (value.kind, value.dtype, value.varying)

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
            bits = _float_bits(dtype)
            lo, hi = self._bounds(node.b)
            if self.check and not (0 <= lo and hi < bits):
                # A shift by the bit width or more (or by a negative count) is poison in LLVM: the
                # native result depends on how LLVM compiled it.  Without the sanitizer numpy's
                # meaning (0, or the sign for >>) is used in both modes.
                mask = self._mask_expr(self.stmt_masks + self.lazy_masks)
                b = Value(self._call("shift_count", b.node, ast.Constant(bits),
                                     kw={"mask": mask} if mask is not None else None), b.kind, b.dtype, b.varying)
        out = ast.BinOp(a.node, op, b.node)
        if kind == "py" and _is_int(dtype) and key in self.OVERFLOWING and not self._fits(node, dtype):
            out = self._call("wrap", out, ast.Constant(dtype))
        if _is_float(dtype):
            kind = "np"
        return Value(out, kind, dtype, _varying(a, b))

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
        a, b = self.visit_expr(node.a), self.visit_expr(node.b)
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
            extra = [ast.Constant(_scalar_dtype(dtype))] if _scalar_dtype(dtype).startswith("int") else []
            mask = self._mask_expr(self.stmt_masks + self.lazy_masks)
            out = self._call(int_helper, a.node, b.node, *extra, kw={"mask": mask} if mask is not None else None)
        kind = self._result_kind(a, b)
        if kind == "py" and key == "prim.Div" and not self._fits(node, dtype):
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
        return Value(self._call(helper, a.node, b.node), kind, dtype, _varying(a, b))

    def visit_compare(self, node, key: str) -> Value:
        a, b = self._unify(self.visit_expr(node.a), self.visit_expr(node.b))
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
            b = self.visit_expr(node.b)
            return Value(ast.BinOp(a.node, bit_op(), b.node), "np", dtype, _varying(a, b))
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
        a = self.visit_expr(node.a)
        dtype = _dtype(node)
        out = ast.UnaryOp(ast.Invert(), a.node)
        if a.kind == "py" and _scalar_dtype(dtype).startswith("uint"):
            out = self._call("wrap", out, ast.Constant(_scalar_dtype(dtype)))  # Python's ~4 is -5, uint8's 251
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
        saved_defer = self.defer_poison
        self.defer_poison = saved_defer and not lazy
        try:
            cond = self.visit_expr(cond_expr)
        finally:
            self.defer_poison = saved_defer
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
        saved_masks, saved_lazy = list(self.masks), list(self.lazy_masks)
        try:
            for arm_mask, arm in ((cond.node, true_expr), (ast.UnaryOp(ast.Invert(), cond.node), false_expr)):
                self.masks = saved_masks + [arm_mask]
                self.lazy_masks = saved_lazy + [arm_mask] if lazy else saved_lazy
                if arm is true_expr:
                    t = self.visit_expr(arm)
                else:
                    f = self.visit_expr(arm)
        finally:
            self.masks, self.lazy_masks = saved_masks, saved_lazy
        return Value(self._call("select", cond.node, t.node, f.node), "np", dtype, _varying(cond, t, f))

    def _unify_arms(self, t: Value, f: Value) -> tuple[Value, Value]:
        if "np" in (t.kind, f.kind) or "weak" in (t.kind, f.kind):
            return self.to_np(t), self.to_np(f)
        return t, f

    def visit_Select(self, node) -> Value:
        return self._conditional(node.condition, node.true_value, node.false_value, _dtype(node), lazy=False)

    def visit_Let(self, node) -> Value:
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
        return Value(self._call("shuffle", ast.List([v.node for v in values], ast.Load()),
                                ast.List([ast.Constant(i) for i in indices], ast.Load())), "np", _dtype(node))

    # ------------------------------------------------------------------ memory
    def _buffer(self, buf) -> _BufferInfo:
        info = self.buffers.get(_key(buf))
        if info is None:
            raise UnsupportedConstructError("undeclared buffer", str(buf.name))
        return info

    def _index_range(self, idx) -> tuple[int, int]:
        key = _type_key(idx)
        if key == "prim.Ramp":
            lo, hi = self._bounds(idx.base)
            stride_lo, stride_hi = self._bounds(idx.stride)
            if stride_lo != stride_hi:
                return -_INT64_MAX, _INT64_MAX
            span = stride_lo * (int(idx.lanes) - 1)
            return lo + min(0, span), hi + max(0, span)
        if key == "prim.Broadcast":
            return self._bounds(idx.value)
        return self._bounds(idx)

    def _in_bounds(self, info: _BufferInfo, indices) -> bool:
        if len(indices) != len(info.shape):
            return False
        for idx, dim in zip(indices, info.shape):
            lo, hi = self._index_range(idx)
            if lo < 0:
                return False
            if _type_key(dim) == "ir.IntImm":
                if hi >= int(dim.value):
                    return False
                continue
            last = idx
            if _type_key(idx) == "prim.Ramp":
                last = idx.base + idx.stride * (int(idx.lanes) - 1)
            elif _type_key(idx) == "prim.Broadcast":
                last = idx.value
            try:
                if not self.analyzer.can_prove(last < dim):
                    return False
            except Exception:
                return False
        return True

    def _prefix(self, info: _BufferInfo) -> list[ast.expr]:
        """Lane indices in front of a per-lane buffer's own indices."""
        if not info.per_thread:
            return list(info.prefix)
        active = {ax.tag: ax for ax in self.axes if ax.is_thread}
        lanes = []
        for tag, _axis in sorted(self.THREAD_AXES.items(), key=lambda kv: kv[1]):
            ax = active.get(tag)
            if ax is not None:
                lanes.append(_name(ax.name))
            else:  # a thread that runs serially (a cross-thread reduction block) still has its own copy,
                # except of the accumulator it reduces into: thread 0's copy, shared afterwards
                serial = self.serial_thread_lanes.get(tag)
                if tag in self.accumulator_tags.get(info.name, ()):
                    serial = None
                lanes.append(_name(serial) if serial is not None else ast.Constant(0))
        return lanes + list(info.prefix)

    def _subscript(self, info: _BufferInfo, indices, values: list[Value]) -> ast.expr:
        parts = self._prefix(info)
        for idx, val in zip(indices, values):
            if _type_key(idx) == "prim.Ramp" and len(parts) == 0 and len(indices) == 1 and not val.varying:
                s_lo, s_hi = self._bounds(idx.stride)
                if s_lo == s_hi and s_lo >= 1:
                    base = self.visit_expr(idx.base).node
                    span = s_lo * (int(idx.lanes) - 1) + 1
                    if isinstance(base, ast.Constant):
                        stop = ast.Constant(base.value + span)
                    else:
                        stop = ast.BinOp(base, ast.Add(), ast.Constant(span))
                    parts.append(ast.Slice(base, stop, ast.Constant(s_lo) if s_lo > 1 else None))
                    continue
            parts.append(val.node)
        index = parts[0] if len(parts) == 1 else ast.Tuple(parts, ast.Load())
        return ast.Subscript(_name(info.name), index, ast.Load())

    def _mask_expr(self, masks: list[ast.expr]) -> ast.expr | None:
        if not masks:
            return None
        mask = masks[0]
        for m in masks[1:]:
            mask = ast.BinOp(mask, ast.BitAnd(), m)
        return mask

    def _vector_lanes_as_axis(self, info: _BufferInfo, indices, values: list[Value]):
        """A buffer of vectors (a thread's ``float32x4`` accumulator) indexed differently per lane:
        its vector lanes are one more buffer axis, indexed by the lanes axis of the values."""
        lanes = _lanes(info.dtype)
        if lanes == 1 or not (_varying(*values) or info.prefix or info.per_thread):
            return info, indices, values
        if any(_type_key(i) in ("prim.Ramp", "prim.Broadcast") or v.lanes > 1 for i, v in zip(indices, values)):
            return info, indices, values  # refused by _check_vector_buffer
        scalar = _BufferInfo(info.name, list(info.shape) + [tirx.IntImm("int32", lanes)], _scalar_dtype(info.dtype),
                             list(info.prefix), info.per_thread, info.shadow)
        lane = Value(self._call("vector_lane_index", ast.Constant(lanes), ast.Constant(self.FAST_AXES)), "np",
                     f"int32x{lanes}", True)
        return scalar, list(indices) + [tirx.Ramp(tirx.IntImm("int32", 0), tirx.IntImm("int32", 1), lanes)], (
            list(values) + [lane])

    @staticmethod
    def _check_vector_buffer(info: _BufferInfo, values: list[Value]) -> None:
        """Fast mode keeps accesses to a buffer of vectors (an extra lanes axis) serial."""
        if _lanes(info.dtype) > 1 and (_varying(*values) or info.prefix or info.per_thread):
            raise _CannotVectorize(f"buffer of vectors {info.name} indexed per lane")

    def _defers_poison(self, info: _BufferInfo) -> bool:
        """Whether uninitialised thread-local values may flow into ``info`` without an error yet."""
        return self.check and info.per_thread and info.shadow is not None

    def _race_lanes(self) -> list["_Axis"]:
        return [ax for ax in self.axes if ax.race]

    def _statement_lanes(self) -> list["_Axis"]:
        """Sanitizer: threads of a block before explicit barriers (``s_tir.ThreadSync``).  The IR
        implies a barrier between statements, none inside one: conflicting accesses of one
        statement by different threads are a race at every stage."""
        if not self.check or self._race_lanes():
            return []
        return [ax for ax in self.axes if ax.is_thread]

    def _logged_lanes(self) -> list["_Axis"]:
        return self._race_lanes() or self._statement_lanes()

    def _sanitized(self, info: _BufferInfo) -> bool:
        # Copies made per fast-mode lane are still shared by the threads (race lanes) of that lane.
        return self.check and (info.shadow is not None or (not info.per_thread and bool(self._logged_lanes())))

    def _access_call(self, info: _BufferInfo, values: list[Value], write: bool, value: ast.expr | None = None):
        keywords = {}
        if write:
            keywords["write"] = ast.Constant(True)
            keywords["value"] = value
        masks = self.stmt_masks + ([] if write else self.masks)
        if masks:
            keywords["mask"] = self._mask_expr(masks)
        if info.shadow is not None:
            keywords["shadow"] = _name(info.shadow)
        if self._defers_poison(info) and (write or self.defer_poison):
            keywords["poison"] = _name("race_log")
        lanes = self._logged_lanes()
        if lanes and not info.per_thread:
            if not self._race_lanes():
                keywords["statement"] = ast.Constant(True)
            keywords["log"] = _name("race_log")
            keywords["lanes"] = ast.Tuple([ast.Tuple([ast.Constant(ax.axis), ax.extent, ast.Constant(ax.tag)],
                                                     ast.Load()) for ax in lanes], ast.Load())
        index = ast.Tuple(self._prefix(info) + [v.node for v in values], ast.Load())
        return self._call("access", _name(info.name), index, ast.Constant(info.name), kw=keywords)

    def _checked_views(self, info: _BufferInfo, indices, values: list[Value]) -> tuple | None:
        """Sanitizer, fast mode: an allocation's access as lane views of the buffer and of its
        written-marks, where no race record is needed (no racing lanes) and the access is a view."""
        if info.shadow is None or self._logged_lanes():
            return None
        view = self._lane_view(info, indices, values)
        if view is None:
            return None
        marks = _BufferInfo(info.shadow, info.shape, "bool", list(info.prefix), info.per_thread)
        written = self._lane_view(marks, indices, values)
        return None if written is None else (view, written)

    def _lane_view(self, info: _BufferInfo, indices, values: list[Value]) -> ast.expr | None:
        """Fast mode: an access whose index is affine in the lanes is a strided view of the buffer
        (``lanes_view``), not a gather or scatter through index arrays."""
        if (not self.fast or self.stmt_masks or self.masks or info.prefix or info.per_thread
                or info.name in self.strided_storage
                or _lanes(info.dtype) > 1 or not _varying(*values) or not self._in_bounds(info, indices)):
            return None
        axes = [ax for ax in self.axes if ax.var is not None]
        lane_axis = self.FAST_AXES - 1
        bases, coefs = [], {ax.axis: [0] * len(indices) for ax in axes}
        extents = {ax.axis: ax.extent for ax in axes}
        try:
            for d, idx in enumerate(indices):
                key = _type_key(idx)
                if key == "prim.Ramp":
                    if _type_key(idx.stride) != "ir.IntImm":
                        return None
                    coefs.setdefault(lane_axis, [0] * len(indices))[d] = int(idx.stride.value)
                    extents[lane_axis] = ast.Constant(int(idx.lanes))
                    idx = idx.base
                elif key == "prim.Broadcast":
                    return None
                f = self.analyzer.simplify(idx)
                at_min = tvm.sym.Analyzer()
                linear = tirx.const(0, _dtype(f))
                for ax in axes:
                    step = _step(f, ax.var)
                    if step is None:
                        return None
                    coefs[ax.axis][d] = step
                    at_min.bind(ax.var, ax.min_expr, allow_override=True)
                    linear = linear + step * (ax.var - ax.min_expr)
                base = at_min.simplify(f)
                if not _is_zero(tvm.sym.Analyzer().simplify(f - base - linear)):
                    return None
                bases.append(base)
        except Exception:
            return None
        base_nodes = self._same_for_all_lanes(bases)
        if base_nodes is None:
            return None
        used = [axis for axis, cs in sorted(coefs.items()) if any(cs)]
        count = 1
        for axis in used:
            count *= extents[axis].value if isinstance(extents[axis], ast.Constant) else self.VIEW_MIN_ELEMENTS
        if count < self.VIEW_MIN_ELEMENTS:  # building a view costs more than gathering a few elements
            return None
        lanes = [(axis, extents[axis], coefs[axis]) for axis in used]
        hoisted = self._hoisted_view(info, bases, lanes)
        if hoisted is not None:
            return hoisted
        return self._call("lanes_view", _name(info.name), ast.Tuple(base_nodes, ast.Load()), self._lanes_arg(lanes))

    def _same_for_all_lanes(self, exprs) -> list[ast.expr] | None:
        """``exprs`` in Python when none of them differs between lanes, else None."""
        nodes = []
        for expr in exprs:
            value = self.visit_expr(expr)
            if value.varying:
                return None
            nodes.append(value.node)
        return nodes

    @staticmethod
    def _lanes_arg(lanes) -> ast.expr:
        return ast.Tuple([ast.Tuple([ast.Constant(axis), extent, ast.Tuple([ast.Constant(c) for c in coefs],
                                                                            ast.Load())], ast.Load())
                          for axis, extent, coefs in lanes], ast.Load())

    def _hoisted_view(self, info: _BufferInfo, bases, lanes) -> ast.expr | None:
        """A lane view built once in front of the innermost serial loop instead of every iteration:
        as it is when its start does not move with the loop, else with the loop's iterations as a
        leading axis, of which each iteration takes its own (``view[k]``).  Only where everything the
        view depends on exists before the loop and no branch condition was needed to prove it in
        bounds."""
        if not self.serial_frames:
            return None
        frame = self.serial_frames[-1]
        if frame.guard_depth != self.guard_depth or info.name not in frame.outside:
            return None
        steps, starts = [], []
        try:
            for base in bases:
                step = _step(base, frame.var)
                if step is None:
                    return None
                at_min = tvm.sym.Analyzer()
                at_min.bind(frame.var, frame.min_expr)
                start = at_min.simplify(base)
                if not _is_zero(tvm.sym.Analyzer().simplify(base - start - step * (frame.var - frame.min_expr))):
                    return None
                steps.append(step)
                starts.append(start)
        except Exception:
            return None
        start_nodes = self._same_for_all_lanes(starts)
        if start_nodes is None:
            return None
        moving = any(steps)
        if moving:
            lanes = [(0, frame.extent, steps)] + [(axis + 1, extent, coefs) for axis, extent, coefs in lanes]
        call = self._call("lanes_view", _name(info.name), ast.Tuple(start_nodes, ast.Load()), self._lanes_arg(lanes),
                          kw={"ndim": ast.Constant(self.FAST_AXES + 1)} if moving else None)
        used = {n.id for n in ast.walk(call) if isinstance(n, ast.Name)}
        if not used <= frame.outside:  # helpers are reserved names, so they are in it too
            return None
        key = ast.dump(call)
        name = frame.views.get(key)
        if name is None:
            name = self.namer.define_name(f"{info.name}_by_{frame.name}" if moving else f"{info.name}_lanes")
            frame.views[key] = name
            frame.hoisted.append(ast.Assign([_store_name(name)], call))
            self.hoisted_views.add(name)
        if not moving:
            return _name(name)
        index = _name(frame.name)
        if not (isinstance(frame.lo, ast.Constant) and frame.lo.value == 0):
            index = ast.BinOp(index, ast.Sub(), frame.lo)
        return ast.Subscript(_name(name), index, ast.Load())

    def visit_TensorLoad(self, node) -> Value:
        info = self._buffer(node.source)
        indices = list(node.indices)
        saved_defer, self.defer_poison = self.defer_poison, False  # an address must be initialised
        try:
            values = [self.visit_expr(i) for i in indices]
        finally:
            self.defer_poison = saved_defer
        info, indices, values = self._vector_lanes_as_axis(info, indices, values)
        self._check_vector_buffer(info, values)
        if self._sanitized(info):
            views = self._checked_views(info, indices, values)
            if views is not None:
                return Value(self._call("read_written", *views, ast.Constant(info.name), _name(info.shadow)),
                             "np", _dtype(node), True)
            # ``access`` returns one value per lane only where lanes, lane indices or masks are involved.
            varying = (_varying(*values) or bool(info.prefix) or info.per_thread or bool(self._logged_lanes())
                       or bool(self.stmt_masks or self.masks))
            return Value(self._access_call(info, values, write=False), "np", _dtype(node), varying)
        view = self._lane_view(info, indices, values)
        if view is not None:
            return Value(view, "np", _dtype(node), True)
        dtype = _dtype(node)
        varying = _varying(*values) or bool(info.prefix) or info.per_thread
        # In a lane-masked region the analyzer's guard does not hold for masked-out lanes.
        if not self.stmt_masks and self._in_bounds(info, indices):
            return Value(self._subscript(info, indices, values), "np", dtype, varying)
        args = [_name(info.name), ast.Tuple(self._prefix(info) + [v.node for v in values], ast.Load()),
                ast.Constant(info.name)]
        mask = self._mask_expr(self.stmt_masks + self.masks)
        if mask is not None:
            args.append(mask)
        return Value(self._call("load", *args), "np", dtype, varying or bool(self.stmt_masks))

    def visit_BufferStore(self, node) -> list[ast.stmt]:
        info = self._buffer(node.buffer)
        indices = list(node.indices)
        values = [self.visit_expr(i) for i in indices]
        info, indices, values = self._vector_lanes_as_axis(info, indices, values)
        self._check_vector_buffer(info, values)
        saved_defer = self.defer_poison
        self.defer_poison = self._defers_poison(info)
        try:
            stored = self.visit_expr(node.value)
        finally:
            self.defer_poison = saved_defer
        value = stored.node
        if (stored.varying and self.axes and not _varying(*values) and not info.prefix and not info.per_thread
                and not self._sanitized(info)):
            # Every lane writes this one element (a race between threads): the last lane's value is
            # one valid outcome.  (The sanitizer reports it as a race.)
            mask = self._mask_expr(self.stmt_masks)
            value = self._call("last_lane", value, ast.Constant(_lanes(_dtype(node.value)) > 1),
                               *([mask] if mask is not None else []))
        out = self._store(info, indices, values, value)
        if self._statement_lanes() and self._sanitized(info) and not info.per_thread:
            out.insert(0, ast.Expr(ast.Call(ast.Attribute(_name("race_log"), "new_statement", ast.Load()), [], [])))
        return out

    def _store(self, info: _BufferInfo, indices, values: list[Value], value: ast.expr) -> list[ast.stmt]:
        """``buffer[indices] = value`` by the access rules: sanitizer, lane view, proven subscript or
        bounds-checked (and lane-masked) ``store``."""
        if self._sanitized(info):
            views = self._checked_views(info, indices, values)
            if views is not None:
                view, written = views
                return [ast.Assign([ast.Subscript(view, ast.Constant(Ellipsis), ast.Store())], value),
                        ast.Assign([ast.Subscript(written, ast.Constant(Ellipsis), ast.Store())], ast.Constant(True))]
            return [ast.Expr(self._access_call(info, values, write=True, value=value))]
        view = self._lane_view(info, indices, values)
        if view is not None:
            if (isinstance(value, ast.BinOp) and isinstance(value.op, self.IN_PLACE_OPS)
                    and ast.dump(value.left) == ast.dump(view)):
                # ``X[...] = X + Y`` as ``X += Y``: the same numpy loop, without a temporary and a copy.
                if isinstance(view, ast.Name):
                    return [ast.AugAssign(_store_name(view.id), value.op, value.right)]
                lanes = self.namer.define_name(f"{info.name}_lanes")
                return [ast.Assign([_store_name(lanes)], view),
                        ast.AugAssign(_store_name(lanes), value.op, value.right)]
            return [ast.Assign([ast.Subscript(view, ast.Constant(Ellipsis), ast.Store())], value)]
        if not self.stmt_masks and self._in_bounds(info, indices):
            target = self._subscript(info, indices, values)
            target.ctx = ast.Store()
            return [ast.Assign([target], value)]
        args = [_name(info.name), ast.Tuple(self._prefix(info) + [v.node for v in values], ast.Load()), value,
                ast.Constant(info.name)]
        if self.stmt_masks:
            args.append(self._mask_expr(self.stmt_masks))
        return [ast.Expr(self._call("store", *args))]

    def visit_AllocBuffer(self, node) -> list[ast.stmt]:
        buf = node.buffer
        name = self.namer.define(buf, buf.name)
        self._declare_buffer(buf, name, strided_ok=True)
        dims = [self.visit_expr(d) for d in buf.shape]
        if _varying(*dims):
            raise _CannotVectorize("allocation whose size differs between iterations")
        scope = str(buf.scope())
        info = self.buffers[_key(buf)]
        # Per-thread memory gets one copy per thread of the block (wherever it is allocated), an
        # allocation inside a loop that runs as lanes one copy per lane; shared memory is one copy.
        info.per_thread = scope.startswith("local") or (scope == "global" and any(ax.is_thread for ax in self.axes))
        private = [ax for ax in self.axes if not ax.is_thread]
        self._check_lane_copies(buf, private, dims)
        info.prefix = [ast.BinOp(_name(ax.name), ast.Sub(), ax.lo)
                       if not (isinstance(ax.lo, ast.Constant) and ax.lo.value == 0) else _name(ax.name)
                       for ax in private]
        lanes_shape = []
        if info.per_thread:
            running = {ax.axis: ax.extent for ax in self.axes if ax.is_thread}
            if not self.thread_extents and not running:
                info.per_thread = False
            else:
                for tag, axis in sorted(self.THREAD_AXES.items(), key=lambda kv: kv[1]):
                    # A thread extent known only at run time (a device kernel launched with a
                    # computed block size) is the running threads' own.
                    extent = self.thread_extents.get(tag)
                    lanes_shape.append(ast.Constant(extent) if extent is not None
                                       else running.get(axis, ast.Constant(1)))
        # A buffer of vectors (float32x3 after StorageRewrite): each element is a row of lanes.
        vector_lanes = [ast.Constant(_lanes(str(buf.dtype)))] if _lanes(str(buf.dtype)) > 1 else []
        shape = ast.Tuple(lanes_shape + [ax.extent for ax in private] + [d.node for d in dims] + vector_lanes,
                          ast.Load())
        if len(buf.strides) and not _contiguous_strides(buf):
            out = self._strided_alloc(buf, name, lanes_shape + [ax.extent for ax in private], dims)
        else:
            out = [ast.Assign([_store_name(name)],
                              self._call("alloc", shape, ast.Constant(_scalar_dtype(str(buf.dtype)))))]
        if self.check:  # which elements were written: reading any other is reading uninitialised memory
            info.shadow = self.namer.define_name(f"{name}_written")
            out.append(ast.Assign([_store_name(info.shadow)], self._call("alloc", shape, ast.Constant("bool"))))
        return out

    #: Fast mode: the most memory the copies of one allocation made per lane may take; a loop whose
    #: lanes would need more runs serially (one copy at a time), as the compiled kernel does.
    LANE_COPIES_MAX_BYTES = 256 << 20
    #: Sizes only known at run time are not guessed here (a guess refused every symbolic-size dlight
    #: GPU matmul): such copies are allocated, and a MemoryError is the InsufficientMemoryError refusal.
    UNKNOWN_LANES = 1

    def _check_lane_copies(self, buf, private: list, dims: list) -> None:
        if not private:
            return
        nbytes = max(tvm.DataType(str(buf.dtype)).bits // 8, 1) * _lanes(str(buf.dtype))
        for node in [ax.extent if ax.var is None or _key(ax.var) != self.chunked_var else self.chunked_extent
                     for ax in private] + [d.node for d in dims]:
            nbytes *= node.value if isinstance(node, ast.Constant) else self.UNKNOWN_LANES
        if nbytes > self.LANE_COPIES_MAX_BYTES:
            raise _CannotVectorize(f"one copy of {buf.name} per lane would need {nbytes >> 20} MiB")

    def _strided_alloc(self, buf, name: str, lead: list, dims: list) -> list[ast.stmt]:
        """An allocation with explicit strides (``storage_align`` pads rows): flat storage of the
        strides' span per copy and a strided view of it with the buffer's shape."""
        if _lanes(str(buf.dtype)) > 1:
            raise UnsupportedConstructError("strided buffer", f"{buf.name} of vectors")
        strides = [self.visit_expr(st) for st in buf.strides]
        if _varying(*strides):
            raise _CannotVectorize("allocation whose strides differ between iterations")
        storage = self.namer.define_name(f"{name}_storage")
        self.strided_storage[_key(buf)] = storage
        self.strided_storage[name] = storage
        span = self._call("strided_span", ast.Tuple([d.node for d in dims], ast.Load()),
                          ast.Tuple([st.node for st in strides], ast.Load()))
        return [ast.Assign([_store_name(storage)], self._call("alloc", ast.Tuple(lead + [span], ast.Load()),
                                                              ast.Constant(str(buf.dtype)))),
                ast.Assign([_store_name(name)], self._call(
                    "strided", _name(storage), ast.Tuple([d.node for d in dims], ast.Load()),
                    ast.Tuple([st.node for st in strides], ast.Load())))]

    def _declare_buffer(self, buf, name: str, strided_ok: bool = False) -> None:
        if len(buf.strides) and not _contiguous_strides(buf) and not strided_ok:
            raise UnsupportedConstructError("strided buffer", str(buf.name))
        self.buffers[_key(buf)] = _BufferInfo(name, list(buf.shape), str(buf.dtype))

    def visit_DeclBuffer(self, node) -> list[ast.stmt]:
        buf = node.buffer
        data = node.data
        if data is not None and _type_key(data) == "ir.Var" and _dtype(data) == "handle":
            storage = self.visit_expr(data)
            name = self.namer.define(buf, buf.name)
            self._declare_buffer(buf, name)
            offset = self.visit_expr(buf.elem_offset) if buf.elem_offset is not None else Value(
                ast.Constant(0), "py", "int32")
            value = self._view_call(storage.node, str(buf.dtype), self._view_shape(buf, storage.node, offset.node),
                                    offset.node)
            return [ast.Assign([_store_name(name)], value)]
        if (data is not None and _type_key(data) == "ir.Call" and data.op.name == "tirx.address_of"
                and _type_key(data.args[0]) == "ir.TensorLoad"):
            return self._address_view(buf, data.args[0])
        if data is None or _type_key(data) != "ir.Call" or data.op.name != "tirx.buffer_data":
            raise UnsupportedConstructError("tirx.DeclBuffer", f"{buf.name} over data {data}")
        source = self._buffer(data.args[0])
        if source.prefix and not source.per_thread:  # allocated per fast-mode lane: run the loop serially
            raise _CannotVectorize(f"view {buf.name} of per-lane buffer {source.name}")
        if source.per_thread:
            return self._per_thread_view(buf, data.args[0], source)
        name = self.namer.define(buf, buf.name)
        self._declare_buffer(buf, name)
        self.storage_roots[_key(buf)] = self.storage_roots.get(_key(data.args[0]), _key(data.args[0]))
        shape_values = [self.visit_expr(d) for d in buf.shape]
        offset = buf.elem_offset
        offset_value = self.visit_expr(offset) if offset is not None else Value(ast.Constant(0), "py", "int32")
        if _varying(offset_value, *shape_values):
            raise _CannotVectorize("buffer view that differs between iterations")
        shape_nodes = [v.node for v in shape_values]
        vector_lanes = [ast.Constant(_lanes(source.dtype))] if _lanes(source.dtype) > 1 else []
        if str(buf.dtype) == source.dtype and _is_zero(offset) and self._same_size(buf.shape, source.shape):
            value = ast.Call(ast.Attribute(_name(source.name), "reshape", ast.Load()), shape_nodes + vector_lanes, [])
        else:
            value = self._view_call(_name(source.name), str(buf.dtype), shape_nodes, offset_value.node,
                                    to_end=len(shape_nodes) == 1)
        out = [ast.Assign([_store_name(name)], value)]
        if source.shadow is not None and str(buf.dtype) == source.dtype:
            info = self.buffers[_key(buf)]
            info.shadow = self.namer.define_name(f"{name}_written")
            marks = "bool" if _lanes(source.dtype) == 1 else f"boolx{_lanes(source.dtype)}"
            out.append(ast.Assign([_store_name(info.shadow)], self._view_call(
                _name(source.shadow), marks, shape_nodes, offset_value.node, to_end=len(shape_nodes) == 1)))
        return out

    def _address_view(self, buf, load) -> list[ast.stmt]:
        """A buffer declared at the address of an element (``data=T.address_of(A[i, 0])``): a view of
        the element's storage from that element on."""
        source = self._buffer(load.source)
        if source.prefix or source.per_thread or source.name in self.strided_storage:
            raise UnsupportedConstructError("tirx.DeclBuffer", f"{buf.name} at an address in {source.name}")
        if str(buf.dtype) != source.dtype or _lanes(source.dtype) > 1 or _lanes(_dtype(load)) > 1:
            raise UnsupportedConstructError("tirx.DeclBuffer", f"{buf.name} of another dtype at an address in "
                                                                f"{source.name}")
        flat = tirx.const(0, _dtype(load.indices[0]))
        for idx, dim in zip(load.indices, load.source.shape):
            flat = flat * dim + idx
        if not _is_zero(buf.elem_offset):
            flat = flat + buf.elem_offset
        offset = self.visit_expr(tvm.sym.Analyzer().simplify(flat))
        shape_values = [self.visit_expr(d) for d in buf.shape]
        if _varying(offset, *shape_values):
            raise _CannotVectorize("buffer view that differs between iterations")
        name = self.namer.define(buf, buf.name)
        self._declare_buffer(buf, name)
        root = _key(load.source)
        self.storage_roots[_key(buf)] = self.storage_roots.get(root, root)
        storage = ast.Call(ast.Attribute(_name(source.name), "reshape", ast.Load()), [ast.Constant(-1)], [])
        shape_nodes = [v.node for v in shape_values]
        out = [ast.Assign([_store_name(name)], self._view_call(storage, str(buf.dtype), shape_nodes, offset.node,
                                                               to_end=len(shape_nodes) == 1))]
        if source.shadow is not None:
            info = self.buffers[_key(buf)]
            info.shadow = self.namer.define_name(f"{name}_written")
            marks = ast.Call(ast.Attribute(_name(source.shadow), "reshape", ast.Load()), [ast.Constant(-1)], [])
            out.append(ast.Assign([_store_name(info.shadow)], self._view_call(
                marks, "bool", shape_nodes, offset.node, to_end=len(shape_nodes) == 1)))
        return out

    def _per_thread_view(self, buf, source_buf, source: _BufferInfo) -> list[ast.stmt]:
        """A view of per-thread memory (``StorageRewrite`` declares them): the same view of every
        thread's copy, so it is per-thread memory too."""
        shape_values = [self.visit_expr(d) for d in buf.shape]
        offset_value = (self.visit_expr(buf.elem_offset) if buf.elem_offset is not None
                        else Value(ast.Constant(0), "py", "int32"))
        if _varying(offset_value, *shape_values):
            raise UnsupportedConstructError("tirx.DeclBuffer", f"view {buf.name} that differs between threads")
        name = self.namer.define(buf, buf.name)
        self._declare_buffer(buf, name)
        self.storage_roots[_key(buf)] = self.storage_roots.get(_key(source_buf), _key(source_buf))
        info = self.buffers[_key(buf)]
        info.per_thread, info.prefix = True, list(source.prefix)
        lead = ast.Constant(len(self.THREAD_AXES) + len(source.prefix))
        dtype, shape_nodes, offset = str(buf.dtype), [v.node for v in shape_values], offset_value.node
        if _lanes(dtype) > 1:
            shape_nodes = shape_nodes + [ast.Constant(_lanes(dtype))]
            offset = ast.BinOp(offset, ast.Mult(), ast.Constant(_lanes(dtype)))
        out = [ast.Assign([_store_name(name)], self._call(
            "rows_view", _name(source.name), lead, ast.Constant(_scalar_dtype(dtype)),
            ast.Tuple(shape_nodes, ast.Load()), offset))]
        if source.shadow is not None and dtype == source.dtype:
            info.shadow = self.namer.define_name(f"{name}_written")
            out.append(ast.Assign([_store_name(info.shadow)], self._call(
                "rows_view", _name(source.shadow), lead, ast.Constant("bool"), ast.Tuple(shape_nodes, ast.Load()),
                offset)))
        return out

    def _view_call(self, storage: ast.expr, dtype: str, shape_nodes: list, offset: ast.expr,
                   to_end: bool = False) -> ast.expr:
        """``view(storage, ...)`` of a buffer declared over existing storage; a buffer of vectors
        (``float32x16``) is a view of scalars with the lanes as its last axis.  A flat view
        (``to_end``) reaches to the end of its storage: the bounds of an access belong to the
        allocation (``StorageRewrite`` merges allocations and indexes past a view's declared size)."""
        lanes = _lanes(dtype)
        if to_end and lanes == 1:
            return self._call("flat_view", storage, ast.Constant(dtype), shape_nodes[0], offset)
        if lanes > 1:
            shape_nodes = list(shape_nodes) + [ast.Constant(lanes)]
            offset = ast.BinOp(offset, ast.Mult(), ast.Constant(lanes))
        return self._call("view", storage, ast.Constant(_scalar_dtype(dtype)), ast.Tuple(shape_nodes, ast.Load()),
                          offset)

    def _view_shape(self, buf, storage: ast.expr, offset: ast.expr) -> list[ast.expr]:
        """The dimensions of a view over a kernel's pointer parameter.  After SplitHostDevice a
        device kernel may declare a size it is not passed (``reshape1 = T.decl_buffer((cse_v2,),
        data=reshape1_ptr)`` with ``cse_v2`` free): a size used only in the declaration needs no
        value, the storage the host passes has exactly that size, so the dimension is derived from it."""
        free = [self._has_free_var(d) for d in buf.shape]
        if sum(free) != 1:
            return [self.visit_expr(d).node for d in buf.shape]  # none free, or too many to derive
        dims = [None if f else self.visit_expr(d).node for d, f in zip(buf.shape, free)]
        known = [d for d in dims if d is not None]
        derived = self._call("storage_extent", storage, ast.Constant(str(buf.dtype)), offset,
                             ast.Tuple(known, ast.Load()))
        return [derived if d is None else d for d in dims]

    def _has_free_var(self, expr) -> bool:
        found = []
        tvm_ffi.structural_walk(expr, lambda n: found.append(_type_key(n) == "ir.Var" and self.namer.lookup(n) is None)
                                or True, order="post")
        return any(found)

    def _same_size(self, shape_a, shape_b) -> bool:
        prod_a = 1
        for d in shape_a:
            prod_a = prod_a * d
        prod_b = 1
        for d in shape_b:
            prod_b = prod_b * d
        try:
            return bool(self.analyzer.can_prove_equal(prod_a, prod_b))
        except Exception:
            return False

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
        if short == "likely":
            return self.visit_expr(args[0])
        special = self._exact_intrinsic(short, node, args)
        if special is not None:
            return special
        if short == "buffer_data":
            info = self._buffer(args[0])
            if info.prefix or info.per_thread:
                raise UnsupportedConstructError("tirx.buffer_data", f"of per-lane buffer {info.name}")
            storage = self.strided_storage.get(_key(args[0]), info.name)
            flat = ast.Call(ast.Attribute(_name(storage), "reshape", ast.Load()), [ast.Constant(-1)], [])
            return Value(flat, "np", "handle")
        if short in ("tvm_warp_shuffle", "tvm_warp_shuffle_down", "tvm_warp_shuffle_up"):
            if self.stmt_masks:
                raise UnsupportedConstructError(name, "inside a branch that only some threads take")
            kind = {"tvm_warp_shuffle": "idx", "tvm_warp_shuffle_down": "down", "tvm_warp_shuffle_up": "up"}[short]
            value, offset, width = self.visit_expr(args[1]), self.visit_expr(args[2]), self.visit_expr(args[3])
            if offset.varying:
                raise UnsupportedConstructError(name, "with a source lane that differs between threads")
            extents = [ast.Constant(self.thread_extents.get(tag, 1))
                       for tag in ("threadIdx.z", "threadIdx.y", "threadIdx.x")]
            call = self._call("warp_shuffle", ast.Constant(kind), self.to_np(value).node, offset.node, width.node,
                              ast.Tuple(extents, ast.Load()),
                              kw={"poison": _name("race_log")} if self.defer_poison else None)
            return Value(call, "np", dtype, True)
        if short == "tvm_warp_activemask":
            if self.stmt_masks:
                raise UnsupportedConstructError(name, "inside a branch that only some threads take")
            return Value(self._call("warp_activemask"), "np", dtype)
        if short == "tvm_storage_sync":
            call_args = [ast.Constant(str(args[0].value)) if args else ast.Constant("shared")]
            mask = self._mask_expr(self.stmt_masks)
            keywords = {}
            if mask is not None:
                keywords["reached"] = mask
            if self.check:
                keywords["log"] = _name("race_log")
            return Value(self._call("barrier", *call_args, kw=keywords), "py", "int32")
        if short in self.CALL_BITWISE:
            key = {"bitwise_and": "prim.BitwiseAnd", "bitwise_or": "prim.BitwiseOr",
                   "bitwise_xor": "prim.BitwiseXor", "shift_left": "prim.LShift",
                   "shift_right": "prim.RShift"}[short]
            return self.visit_binary(_BinaryLike(args[0], args[1], node), key)
        if short == "bitwise_not":
            a = self.visit_expr(args[0])
            return Value(ast.UnaryOp(ast.Invert(), a.node), a.kind, dtype, a.varying)
        if short == "reinterpret":
            a = self.to_np(self.visit_expr(args[0]))
            return Value(self._call("reinterpret", a.node, ast.Constant(_scalar_dtype(dtype))), "np", dtype,
                         a.varying)
        if short in self.NUMPY_MATH or short in self.HELPER_MATH:
            operands = [self._math_operand(a) for a in args]
            nodes = [o.node for o in operands]
            if short in self.HELPER_MATH:
                call = self._call(self.HELPER_MATH[short], *nodes)
            else:
                call = ast.Call(_np(self.NUMPY_MATH[short]), nodes, [])
                if short in self.DOUBLE_MATH and _scalar_dtype(dtype) in ("float16", "float32"):
                    call = self._call("in_double", _np(self.NUMPY_MATH[short]), *nodes)
            if (len(nodes) == 1 and _is_float(dtype) and short not in self.NAN_EXACT_MATH
                    and _is_float(operands[0].dtype)):
                call = self._call("nan_through", call, nodes[0])
            return Value(call, "np", dtype, _varying(*operands))
        raise UnsupportedConstructError(name, "no exact numpy translation")

    def _launch(self, gv, args) -> Value:
        """A host function calling a device kernel (after SplitHostDevice): generate the kernel too."""
        name = gv.name_hint
        callee = self.module_functions.get(name)
        if callee is None:
            raise UnsupportedConstructError("call to a function", f"{name} is not in the module")
        if name not in self.launched:
            # Unique in the script: a host function ``sum`` becomes ``sum_kernel``, as TVM names its
            # device kernel, which must not become a call of the host function itself.
            python_name = _python_name(name)
            if python_name == self.function_name or (python_name in self.namer._used
                                                     and python_name not in self.module_functions):
                python_name = self.namer.define_name(python_name)
            self.namer._used.add(python_name)
            self.launched[name] = python_name
            sub = HybridCodegen(callee, self.launched[name], self.stage, self.mode, progress=self.progress,
                                module_functions=self.module_functions, check=self.check,
                                synced=self.thread_races)
            # The kernel's block loops report progress too, numbered after the host's loops so far.
            sub.progress_loops = self.progress_loops
            fdef, _ = sub.function_def()
            self.progress_loops = sub.progress_loops
            self.helpers |= sub.helpers
            self.extra_defs.extend(sub.extra_defs + [fdef])
            self.vectorized_loops.extend(sub.vectorized_loops)
        values = [self.visit_expr(a) for a in args]
        return Value(ast.Call(_name(self.launched[name]), [v.node for v in values], []), "py", "int32")

    def _math_operand(self, arg) -> Value:
        value = self.visit_expr(arg)
        if _is_float(value.dtype) or value.kind != "np":
            value = self.to_np(value)
        return value

    # ------------------------------------------------------------------ statements
    def visit_SeqStmt(self, node) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in node.seq:
            out.extend(self.visit_stmt(stmt))
        return out

    def visit_Evaluate(self, node) -> list[ast.stmt]:
        value = node.value
        if _type_key(value) in ("ir.IntImm", "ir.FloatImm"):
            return []
        if _type_key(value) == "ir.Call" and isinstance(value.op, tvm.ir.Op) and value.op.name.endswith(
                "tvm_thread_allreduce"):
            return self._thread_allreduce(list(value.args))
        statement = self._intrinsic_statement(value)
        if statement is not None:
            return statement
        return [ast.Expr(self.visit_expr(value).node)]

    def visit_Bind(self, node) -> list[ast.stmt]:
        value = self.visit_expr(node.value)
        name = self.namer.define(node.var, node.var.name)
        if value.kind == "weak" or (_is_float(value.dtype) and value.kind != "np"):
            value = self.to_np(value)
        node_value = value.node
        is_view = ((isinstance(node_value, ast.Call) and getattr(node_value.func, "id", "") == "lanes_view")
                   or (isinstance(node_value, ast.Name) and node_value.id in self.hoisted_views))
        if (value.lanes > 1 or value.varying) and (isinstance(node_value, (ast.Subscript, ast.IfExp)) or is_view):
            node_value = ast.Call(_np("copy"), [node_value], [])  # a slice would alias the buffer
        self._set_var(node.var, value)
        self._bind_analyzer(node.var, node.value)
        return [ast.Assign([_store_name(name)], node_value)]

    def _bind_analyzer(self, var, value) -> None:
        if _is_int(_dtype(var)) and _lanes(_dtype(var)) == 1:
            try:
                self.analyzer.bind(var, value, allow_override=True)
            except Exception:
                pass

    def visit_For(self, node) -> list[ast.stmt]:
        kind = int(node.kind)
        if kind not in _FOR_KIND_ITERATORS:
            raise UnsupportedConstructError("tirx.For", f"loop kind {kind}")
        step = node.step
        if step is not None and not (_type_key(step) == "ir.IntImm" and int(step.value) == 1):
            return self._stepped_for(node)
        lo = self.visit_expr(node.min)
        extent = self.visit_expr(node.extent)
        if _varying(lo, extent):
            if kind not in (0, 3):
                raise _CannotVectorize("loop bounds that differ between iterations")
            return self._lanes_serial_for(node)
        try:
            self.analyzer.bind(node.loop_var, tvm.ir.Range.from_min_extent(node.min, node.extent),
                               allow_override=True)
        except Exception:
            pass
        if kind == 4:
            tag = str(node.thread_binding.thread_tag) if node.thread_binding is not None else ""
            if not tag.startswith("blockIdx"):
                return self._thread_lanes(node.loop_var, node.min, lo, node.extent, tag, node.body)
        independent = (self.fast or self.check) and _loop_is_independent(node, self.storage_roots)
        if kind == 1 and self.check and not independent and self._free_loop_axis() is not None:
            # Race check: the iterations of a parallel loop run as lanes whose accesses are compared.
            # (Iterations proven to touch disjoint memory cannot race: they need no record.)
            saved = self._save_state()
            try:
                return self._lanes_for(node.loop_var, node.min, lo, node.extent, node.body, is_thread=False,
                                       tag=f"parallel {node.loop_var.name}", race=True,
                                       private_allocs=self._planned_into(node))
            except _CannotVectorize:
                self._restore_state(saved)
        if (self.fast and independent and self._free_loop_axis() is not None
                and self._lanes_can_win(extent, node.body)):
            saved = self._save_state()
            try:
                if kind == 1 and self._can_split_parallel():
                    return self._split_parallel(node, lo, extent)
                return self._vectorized_for(node, lo)
            except _CannotVectorize:
                self._restore_state(saved)
        if _is_zero(node.min):
            bounds = [extent.node]
        else:
            end_value = self.visit_expr(tvm.sym.Analyzer().simplify(node.min + node.extent))
            bounds = [lo.node, end_value.node]
        iterator = _FOR_KIND_ITERATORS[kind]
        keywords = []
        if kind == 4:
            tag = node.thread_binding.thread_tag if node.thread_binding is not None else ""
            keywords = [ast.keyword("thread", ast.Constant(str(tag)))]
        call = (ast.Call(_name("range"), bounds, []) if iterator == "range"
                else ast.Call(self._use(iterator), bounds, keywords))
        outside = set(self.namer._used)
        name = self.namer.define(node.loop_var, node.loop_var.name)
        self.var_kinds[_key(node.loop_var)] = ("py", _dtype(node.loop_var), False)
        frame = _SerialFrame(node.loop_var, node.min, lo.node, extent.node, name, outside, self.guard_depth)
        hook = []
        if self.progress and self.serial_depth == 0:
            # __progress__(loop number, iterations done, extent): only in the executed variant.
            done = ast.BinOp(_name(name), ast.Sub(), lo.node) if not _is_zero(node.min) else _name(name)
            hook = [ast.Expr(ast.Call(_name("__progress__"),
                                      [ast.Constant(self.progress_loops), done, extent.node], []))]
            self.progress_loops += 1
            self.progress_outer = hook[0].value
        self.serial_depth += 1
        self.serial_frames.append(frame)
        try:
            body = self.visit_stmt(node.body)
        finally:
            self.serial_depth -= 1
            self.serial_frames.pop()
        hook = hook or self._inner_progress_hook(name, lo, node, extent, body)
        return frame.hoisted + [ast.For(_store_name(name), call, hook + body or [ast.Pass()], [])]

    def _inner_progress_hook(self, name: str, lo: Value, node, extent: Value, body: list) -> list[ast.stmt]:
        """Progress inside the outermost loop (one that runs long per iteration, or only a few times):
        the first loop nested in it that itself holds a loop (or any first loop, under an outer loop
        of few iterations) reports ``__progress__(loop, done, extent,
        inner done, inner extent)``, so slow can be told from hung; the loop inside keeps the cost of
        a call per iteration negligible.  The outer loop then reports the iterations it completed."""
        outer = self.progress_outer
        if not self.progress or self.serial_depth != 1 or outer is None or len(outer.args) > 3:
            return []
        few = isinstance(outer.args[2], ast.Constant) and outer.args[2].value <= _FEW_OUTER_ITERATIONS
        if not few and not any(isinstance(n, (ast.For, ast.While)) for st in body for n in ast.walk(st)):
            return []
        outer.args.extend([ast.Constant(0), ast.Constant(0)])
        done = ast.BinOp(_name(name), ast.Sub(), lo.node) if not _is_zero(node.min) else _name(name)
        return [ast.Expr(ast.Call(_name("__progress__"), outer.args[:3] + [done, extent.node], []))]

    #: Fast mode runs a loop as lanes only when the statements in it then act on at least this many
    #: lanes: a numpy operation on a few elements costs more than the Python scalar operations.
    FAST_MIN_LANES = 8

    def _lanes_can_win(self, extent: Value, body) -> bool:
        """Whether running this loop as array lanes can beat running it serially (fast mode must
        never be slower than exact): never a unit loop (dlight.cpu's loop nests are full of them),
        and an innermost loop only when its statements then act on enough lanes."""
        if isinstance(extent.node, ast.Constant) and extent.node.value <= 1:
            return False
        lanes = 1
        for size in [ax.extent for ax in self.axes] + [extent.node]:
            if not isinstance(size, ast.Constant):
                return True  # a symbolic extent: assume it is large
            lanes *= size.value
        if lanes >= self.FAST_MIN_LANES:
            return True
        inner = []
        tvm_ffi.structural_walk(body, lambda n: inner.append(_type_key(n) == "tirx.For") or True, order="post")
        return any(inner)  # the loops inside may add lanes

    def _vectorized_for(self, node, lo: Value) -> list[ast.stmt]:
        """All iterations at once: the loop variable becomes an array along its own axis."""
        return self._lanes_for(node.loop_var, node.min, lo, node.extent, node.body, is_thread=False)

    def _can_split_parallel(self) -> bool:
        """Whether a ``T.parallel`` loop here may run in chunks on several cores: outside every
        serial loop, lane loop and lane mask (so it starts once per call), with no sanitizer (which
        compares the accesses of all iterations)."""
        return (self.serial_depth == 0 and not self.axes and not self.stmt_masks and not self.masks
                and not self.check)

    def _split_parallel(self, node, lo: Value, extent: Value) -> list[ast.stmt]:
        """A ``T.parallel`` loop proven independent: a function of one chunk of its iterations (run
        as lanes) and a ``parallel_chunks`` call that runs the chunks on the machine's cores."""
        var = node.loop_var
        dtype = _dtype(var)
        chunk_lo = tirx.Var(f"{var.name}_lo", dtype)
        chunk_extent = tirx.Var(f"{var.name}_extent", dtype)
        for chunk_var, dom in ((chunk_lo, tvm.ir.Range.from_min_extent(node.min, node.extent)),
                               (chunk_extent, tvm.ir.Range.from_min_extent(1, node.extent))):
            self.namer.define(chunk_var, chunk_var.name)
            self.var_kinds[_key(chunk_var)] = ("py", dtype, False)
            try:
                self.analyzer.bind(chunk_var, dom, allow_override=True)
            except Exception:
                pass
        function = self.namer.define_name(f"{var.name}_chunk")
        self.chunked_var, self.chunked_extent, self.peak_lanes = _key(var), extent.node, 0
        try:
            body = self._lanes_for(var, chunk_lo, Value(_name(self.namer.lookup(chunk_lo)), "py", dtype),
                                   chunk_extent, node.body, is_thread=False)
        finally:
            self.chunked_var = self.chunked_extent = None
        self.parallel_loops.append(self.namer.lookup(var))
        args = [ast.arg(self.namer.lookup(chunk_lo)), ast.arg(self.namer.lookup(chunk_extent))]
        fdef = ast.FunctionDef(
            name=function, args=ast.arguments(posonlyargs=[], args=args, kwonlyargs=[], kw_defaults=[],
                                              defaults=[]),
            body=body or [ast.Pass()], decorator_list=[], returns=None, type_params=[])
        return [fdef, ast.Expr(self._call("parallel_chunks", _name(function), lo.node, extent.node,
                                          ast.Constant(self.peak_lanes)))]

    def _free_loop_axis(self) -> int | None:
        used = {ax.axis for ax in self.axes}
        for axis in range(self.FIRST_LOOP_AXIS, self.FAST_AXES - 1):
            if axis not in used:
                return axis
        return None

    @contextlib.contextmanager
    def _guarded(self, condition):
        """Analyse under ``condition`` (a branch, the right side of ``&&``): what is proven there need
        not hold outside, so nothing is hoisted out of it."""
        self.guard_depth += 1
        try:
            with self.analyzer.constraint_scope(condition):
                yield
        finally:
            self.guard_depth -= 1

    def _loop_axis(self, var, body_stmt) -> int:
        """The array axis of a loop that runs as lanes: the one planned for the nest when it is free
        (the outermost loop of a nest plans its loops), else the first free one."""
        if not any(not ax.is_thread for ax in self.axes):
            self.axis_plan = _plan_lane_axes(var, body_stmt, range(self.FIRST_LOOP_AXIS, self.FAST_AXES - 1))
        used = {ax.axis for ax in self.axes}
        axis = self.axis_plan.get(_key(var))
        if axis is None or axis in used:
            axis = self._free_loop_axis()
        if axis is None:
            raise _CannotVectorize("too many nested array axes")
        return axis

    def _planned_into(self, loop) -> list:
        """Block-allocated buffers that only ``loop`` touches: ``PlanAndUpdateBufferAllocationLocation``
        moves their allocation to the lowest common ancestor of their accesses, inside the loop, so
        each iteration of the compiled loop has its own (dlight.cpu's reduction temporaries)."""
        if not self.block_allocs:
            return []
        if self._access_counts is None:
            self._access_counts = _buffer_access_counts(self.func.body)
        inside = _buffer_access_counts(loop.body)
        return [buf for key, buf in self.block_allocs.items()
                if key in self.buffers and str(buf.scope()) in ("global", "local")
                and inside.get(key, 0) and inside[key] == self._access_counts.get(key)]

    def _lanes_for(self, var, min_expr, lo: Value, extent_expr, body_stmt, is_thread: bool,
                   tag: str = "", race: bool = False, private_allocs=()) -> list[ast.stmt]:
        if is_thread:
            axis = self.THREAD_AXES.get("vthread" if tag.startswith("vthread") else tag)
            if axis is None:
                raise _CannotVectorize(f"unknown thread tag {tag}")
            outer = next((ax for ax in self.axes if ax.axis == axis), None)
            if outer is not None:
                return self._same_thread(var, min_expr, extent_expr, body_stmt, outer, tag)
        else:
            axis = self._loop_axis(var, body_stmt)
        name = self.namer.define(var, var.name)
        dtype = _dtype(var)
        shape = [1] * self.FAST_AXES
        shape[axis] = -1
        end = self.visit_expr(tvm.sym.Analyzer().simplify(min_expr + extent_expr))
        extent = self.visit_expr(extent_expr)
        arange = ast.Call(_np("arange"), [lo.node, end.node], [ast.keyword("dtype", ast.Constant(dtype))])
        reshape = ast.Call(ast.Attribute(arange, "reshape", ast.Load()), [ast.Constant(c) for c in shape], [])
        self.var_kinds[_key(var)] = ("np", dtype, True)
        self.vector_depth += 1
        race = race or (is_thread and self.thread_races)
        outermost_race = race and not self._race_lanes()
        self.axes.append(_Axis(name, lo.node, extent.node, is_thread, axis, tag, race, var, min_expr))
        lanes = 1
        for ax in self.axes:
            size = self.chunked_extent if ax.var is not None and _key(ax.var) == self.chunked_var else ax.extent
            lanes *= size.value if isinstance(size, ast.Constant) else 1
        self.peak_lanes = max(self.peak_lanes, lanes)
        try:
            body = [s for buf in private_allocs for s in self.visit_AllocBuffer(_AllocLike(buf))]
            body += self.visit_stmt(body_stmt)
        finally:
            self.vector_depth -= 1
            self.axes.pop()
        self.vectorized_loops.append(name)
        if self.check and outermost_race:  # the lanes end together: check what they did since the last barrier
            body.append(ast.Expr(ast.Call(ast.Attribute(_name("race_log"), "flush", ast.Load()),
                                          [ast.Constant(f"the end of {tag}")], [])))
        return [ast.Assign([_store_name(name)], reshape)] + body

    def _same_thread(self, var, min_expr, extent_expr, body_stmt, outer: "_Axis", tag: str) -> list[ast.stmt]:
        """A loop bound to a thread tag that is already running: the same threads, not new ones
        (before UnifyThreadBinding the IR may bind ``threadIdx.x`` again inside itself)."""
        extent = self.visit_expr(extent_expr)
        same_extent = (isinstance(extent.node, ast.Constant) and isinstance(outer.extent, ast.Constant)
                       and extent.node.value == outer.extent.value)
        if not (_is_zero(min_expr) and same_extent):
            raise _CannotVectorize(f"{tag} bound again with a different extent")
        name = self.namer.define(var, var.name)
        self.var_kinds[_key(var)] = ("np", _dtype(var), True)
        return [ast.Assign([_store_name(name)], _name(outer.name))] + self.visit_stmt(body_stmt)

    def _thread_lanes(self, var, min_expr, lo: Value, extent_expr, tag: str, body) -> list[ast.stmt]:
        """Threads of a block run in lockstep, one array lane each: every statement completes for all
        threads before the next starts, which is what the IR's barriers (explicit after ThreadSync,
        implied before it) guarantee for race-free kernels."""
        try:
            self.analyzer.bind(var, tvm.ir.Range.from_min_extent(min_expr, extent_expr), allow_override=True)
        except Exception:
            pass
        saved = self._save_state()
        try:
            out = self._lanes_for(var, min_expr, lo, extent_expr, body, is_thread=True, tag=tag)
        except _CannotVectorize as exc:
            self._restore_state(saved)
            if any(not ax.is_thread for ax in self.axes):
                raise  # fast mode's lanes around the launch (blocks as lanes) run one after another instead
            raise UnsupportedConstructError("thread-bound loop", f"{tag}: {exc}") from None
        note = ast.Expr(ast.Call(self._use("thread_lanes"), [_name(self.namer.lookup(var)), ast.Constant(tag)], []))
        return out[:1] + [note] + out[1:]

    def _save_state(self):
        return (dict(self.namer._names), set(self.namer._used), dict(self.buffers), dict(self.var_kinds),
                list(self.vectorized_loops), list(self.stmt_masks), self.vector_depth, list(self.axes),
                list(self.parallel_loops), [(len(f.hoisted), dict(f.views)) for f in self.serial_frames])

    def _restore_state(self, saved) -> None:
        (names, used, buffers, kinds, loops, masks, depth, axes, parallel, frames) = saved
        self.namer._names, self.namer._used = names, used | set(self.launched.values())  # defs already made
        self.buffers, self.var_kinds, self.vectorized_loops = buffers, kinds, loops
        self.parallel_loops = parallel
        # Views hoisted by the abandoned attempt go too: their names are free again.
        for frame, (count, views) in zip(self.serial_frames, frames):
            del frame.hoisted[count:]
            frame.views = views
        self.stmt_masks, self.vector_depth, self.axes = masks, depth, axes

    def visit_While(self, node) -> list[ast.stmt]:
        cond = self.visit_expr(node.condition)
        if cond.varying:
            return self._lanes_while(node, cond)
        body = self.visit_stmt(node.body)
        return [ast.While(cond.node, body or [ast.Pass()], [])]

    def _lanes_while(self, node, cond: Value) -> list[ast.stmt]:
        """A while loop whose condition differs between the threads of a block (in lockstep): it runs
        while any thread still loops, each trip writing only for the threads whose condition held on
        every trip so far — a thread leaves for good the first time its condition fails, as on the GPU.
        Barriers inside see the mask, so one that only the still-looping threads reach stays an error."""
        self._require_thread_lanes("while loop whose condition differs between iterations")
        active = self.namer.define_name("looping")
        outer = self._mask_expr(self.stmt_masks)
        first = self.to_np(cond).node
        start = first if outer is None else ast.BinOp(outer, ast.BitAnd(), first)
        body, again = self._lanes_loop_body(active, node.body, lambda: self.visit_expr(node.condition))
        narrow = ast.Assign([_store_name(active)], ast.BinOp(_name(active), ast.BitAnd(), again))
        return [ast.Assign([_store_name(active)], start),
                ast.While(ast.Call(_np("any"), [_name(active)], []), body + [narrow], [])]

    def _lanes_serial_for(self, node) -> list[ast.stmt]:
        """A serial loop whose bounds differ between the threads of a block: each thread counts its own
        loop variable from its own start, the loop running, like a per-thread while loop, until every
        thread is done."""
        self._require_thread_lanes("loop bounds that differ between iterations")
        dtype = _dtype(node.loop_var)
        end = self.to_np(self.visit_expr(tvm.sym.Analyzer().simplify(node.min + node.extent))).node
        lo = self.visit_expr(node.min).node
        name = self.namer.define(node.loop_var, node.loop_var.name)
        self.var_kinds[_key(node.loop_var)] = ("np", dtype, True)
        end_name = self.namer.define_name(f"{name}_end")
        active = self.namer.define_name("looping")
        outer = self._mask_expr(self.stmt_masks)
        first = ast.Compare(_name(name), [ast.Lt()], [_name(end_name)])
        start = first if outer is None else ast.BinOp(outer, ast.BitAnd(), first)
        body, again = self._lanes_loop_body(active, node.body, lambda: None)
        step = ast.Assign([_store_name(name)], ast.BinOp(_name(name), ast.Add(), ast.Constant(1)))
        narrow = ast.Assign([_store_name(active)], ast.BinOp(_name(active), ast.BitAnd(), first))
        zeros = ast.Call(_np("zeros_like"), [_name(end_name)], [])
        return [ast.Assign([_store_name(end_name)], end),
                ast.Assign([_store_name(name)], ast.BinOp(lo, ast.Add(), zeros)),
                ast.Assign([_store_name(active)], start),
                ast.While(ast.Call(_np("any"), [_name(active)], []), body + [step, narrow], [])]

    def _require_thread_lanes(self, what: str) -> None:
        """Per-lane control flow is emulated for threads only: fast mode's vectorised iterations (and
        the race check's parallel ones) fall back to running one after another."""
        if not self.axes or not all(ax.is_thread for ax in self.axes):
            raise _CannotVectorize(what)

    def _lanes_loop_body(self, active: str, body_stmt, condition):
        """``body_stmt`` (and ``condition()``, re-evaluated at the end of each trip) for the lanes in
        ``active`` only; no view is hoisted out of such a loop (what it depends on may change per trip)."""
        frames, self.serial_frames = self.serial_frames, []
        self.stmt_masks.append(_name(active))
        try:
            body = self.visit_stmt(body_stmt)
            again = condition()  # loads masked to the looping lanes
            return body, None if again is None else self.to_np(again).node
        finally:
            self.stmt_masks.pop()
            self.serial_frames = frames

    def _masked(self, cond: ast.expr, stmt) -> list[ast.stmt]:
        """Run ``stmt`` for all lanes, writing only where ``cond`` holds."""
        self.stmt_masks.append(cond)
        try:
            return self.visit_stmt(stmt)
        finally:
            self.stmt_masks.pop()

    def visit_IfThenElse(self, node) -> list[ast.stmt]:
        cond = self.visit_expr(node.condition)
        if cond.varying:
            out, taken = [], cond.node
            if _reads_memory(node.condition):
                # The branches may write what the condition reads (a thread's counter): each lane's
                # branch is decided once, before either runs.
                taken = _name(self.namer.define_name("taken"))
                out.append(ast.Assign([_store_name(taken.id)], cond.node))
            out += self._masked(taken, node.then_case)
            if node.else_case is not None:
                out += self._masked(ast.UnaryOp(ast.Invert(), taken), node.else_case)
            return out
        with self._guarded(node.condition):
            then = self.visit_stmt(node.then_case)
        orelse = []
        if node.else_case is not None:
            with self._guarded(tirx.Not(node.condition)):
                orelse = self.visit_stmt(node.else_case)
        return [ast.If(cond.node, then or [ast.Pass()], orelse)]

    def visit_AssertStmt(self, node) -> list[ast.stmt]:
        cond = self.visit_expr(node.condition)
        message = node.message
        text = str(message.value) if _type_key(message) == "ir.StringImm" else str(message)
        call = ast.Call(_name("AssertionError"), [ast.Constant(text)], [])
        test = ast.Call(_np("all"), [cond.node], []) if cond.varying or cond.lanes > 1 else cond.node
        return [ast.If(ast.UnaryOp(ast.Not(), test), [ast.Raise(call, None)], [])]

    def visit_AttrStmt(self, node) -> list[ast.stmt]:
        if node.attr_key in ("thread_extent", "virtual_thread") and not str(node.node.thread_tag).startswith(
                "blockIdx"):
            iv = node.node
            zero = tirx.const(0, _dtype(iv.var))
            return self._thread_lanes(iv.var, zero, Value(ast.Constant(0), "py", _dtype(iv.var)), node.value,
                                      str(iv.thread_tag), node.body)
        if node.attr_key == "reduce_scope":
            self.reducers.append(node.node)
            try:
                return self.visit_stmt(node.body)
            finally:
                self.reducers.pop()
        if node.attr_key in ("thread_extent", "virtual_thread"):
            iv = node.node
            name = self.namer.define(iv.var, iv.var.name)
            self.var_kinds[_key(iv.var)] = ("py", _dtype(iv.var), False)
            extent = self.visit_expr(node.value)
            try:
                self.analyzer.bind(iv.var, tvm.ir.Range.from_min_extent(0, node.value), allow_override=True)
            except Exception:
                pass
            hook = []
            if self.progress and self.serial_depth == 0:
                # A device kernel's outermost block loop reports progress (one call per block row).
                hook = [ast.Expr(ast.Call(_name("__progress__"),
                                          [ast.Constant(self.progress_loops), _name(name), extent.node], []))]
                self.progress_loops += 1
                self.progress_outer = hook[0].value  # a loop inside may refine it
            self.serial_depth += 1
            try:
                body = self.visit_stmt(node.body)
            finally:
                self.serial_depth -= 1
            call = ast.Call(self._use("thread_binding"), [extent.node],
                            [ast.keyword("thread", ast.Constant(str(iv.thread_tag)))])
            return [ast.For(_store_name(name), call, hook + body or [ast.Pass()], [])]
        return self.visit_stmt(node.body)

    def _thread_allreduce(self, args) -> list[ast.stmt]:
        count = int(args[0].value)
        if count > 1 and self.reducers:
            return self._thread_allreduce_values(args, count)
        if count != 1 or not self.reducers:
            raise UnsupportedConstructError("tirx.tvm_thread_allreduce", f"{count} values or no reduce_scope")
        value, cond, result, threads = args[1], args[2], args[3], args[4:]
        if not _is_true(cond):
            raise UnsupportedConstructError("tirx.tvm_thread_allreduce", "with a lane condition")
        if _type_key(result) != "ir.TensorLoad":
            raise UnsupportedConstructError("tirx.tvm_thread_allreduce", "result is not a buffer element")
        reducer = self.reducers[-1]
        lhs, rhs = reducer.lhs[0], reducer.rhs[0]
        names = [self.namer.define(lhs, lhs.name), self.namer.define(rhs, rhs.name)]
        for var in (lhs, rhs):
            self.var_kinds[_key(var)] = ("np", _dtype(var), True)
        combine = ast.Lambda(ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names], kwonlyargs=[],
                                           kw_defaults=[], defaults=[]), self.visit_expr(reducer.result[0]).node)
        axes, extents = self._allreduce_axes(threads)
        reduced = self._call("thread_allreduce", combine, self.to_np(self.visit_expr(value)).node, axes, extents)
        return self._assign_element(result, reduced)

    def _allreduce_axes(self, threads) -> tuple[ast.Tuple, ast.Tuple]:
        """The lane axes and extents of the threads an allreduce folds over (each a running thread)."""
        axes, extents = [], []
        for var in threads:
            name = self.namer.lookup(var)
            axis = next((ax for ax in self.axes if ax.is_thread and ax.name == name), None)
            if axis is None:
                raise UnsupportedConstructError("tirx.tvm_thread_allreduce", f"over {var}, not a running thread")
            axes.append(ast.Constant(axis.axis))
            extents.append(axis.extent)
        return ast.Tuple(axes, ast.Load()), ast.Tuple(extents, ast.Load())

    def _thread_allreduce_values(self, args, count: int) -> list[ast.stmt]:
        """``tvm_thread_allreduce`` of several values at once (argmax's value and index, group
        norm's sum and sum of squares): the reducer's combiner maps two tuples to one."""
        args = list(args)
        values, cond = args[1:1 + count], args[1 + count]
        results, threads = args[2 + count:2 + 2 * count], args[2 + 2 * count:]
        if not _is_true(cond):
            raise UnsupportedConstructError("tirx.tvm_thread_allreduce", "with a lane condition")
        if any(_type_key(r) != "ir.TensorLoad" for r in results):
            raise UnsupportedConstructError("tirx.tvm_thread_allreduce", "result is not a buffer element")
        reducer = self.reducers[-1]
        if len(reducer.lhs) != count:
            raise UnsupportedConstructError("tirx.tvm_thread_allreduce", f"{count} values, reducer of {len(reducer.lhs)}")
        names = []
        for var in list(reducer.lhs) + list(reducer.rhs):
            names.append(self.namer.define(var, var.name))
            self.var_kinds[_key(var)] = ("np", _dtype(var), True)
        combined = ast.Tuple([self.to_np(self.visit_expr(r)).node for r in reducer.result], ast.Load())
        combine = ast.Lambda(ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names], kwonlyargs=[],
                                           kw_defaults=[], defaults=[]), combined)
        axes, extents = self._allreduce_axes(threads)
        operands = ast.Tuple([self.to_np(self.visit_expr(v)).node for v in values], ast.Load())
        reduced = self.namer.define_name("reduced")
        out: list[ast.stmt] = [ast.Assign([_store_name(reduced)], self._call(
            "thread_allreduce_values", combine, operands, axes, extents))]
        for k, result in enumerate(results):
            out.extend(self._assign_element(result, ast.Subscript(_name(reduced), ast.Constant(k), ast.Load())))
        return out

    def _assign_element(self, load, value: ast.expr) -> list[ast.stmt]:
        """``buffer[indices] = value`` for the element ``load`` names."""
        info = self._buffer(load.source)
        indices = list(load.indices)
        return self._store(info, indices, [self.visit_expr(i) for i in indices], value)

    def visit_Break(self, node) -> list[ast.stmt]:
        if self.vector_depth:
            raise _CannotVectorize("break")
        return [ast.Break()]

    def visit_Continue(self, node) -> list[ast.stmt]:
        if self.vector_depth:
            raise _CannotVectorize("continue")
        return [ast.Continue()]

    # ------------------------------------------------------------------ constructs with an exact meaning
    def _intrinsic_statement(self, call) -> list[ast.stmt] | None:
        """Intrinsics evaluated as statements: ``assume`` (no run-time effect), ``break_loop``,
        ``continue_loop`` and ``masked_store``; None for any other expression."""
        if _type_key(call) != "ir.Call" or not isinstance(call.op, tvm.ir.Op):
            return None
        name = call.op.name
        if name == "tirx.assume":
            return []
        if name == "tirx.break_loop":
            return self.visit_Break(call)
        if name == "tirx.continue_loop":
            return self.visit_Continue(call)
        if name == "tirx.masked_store":
            return self._masked_store(list(call.args))
        return None

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
        if short == "masked_load":
            self.masks.append(self.to_np(self.visit_expr(args[-1])).node)
            try:
                return self.visit_TensorLoad(tirx.BufferLoad(args[0], list(args[1:-1])))
            finally:
                self.masks.pop()
        return None

    #: Runtime functions called through ``tvm_call_packed`` that the emulator implements exactly.
    PACKED_FUNCTIONS = ("tvm.contrib.sort.sort", "tvm.contrib.sort.argsort", "tvm.contrib.sort.topk")

    def _packed_call(self, node, args) -> Value:
        """``tvm_call_packed`` of one of TVM's sort functions (topi's CPU sort, argsort, topk): the
        same stable sort in numpy (``contrib_sort``).  Any other packed function is refused by name."""
        function = str(args[0].value) if _type_key(args[0]) == "ir.StringImm" else str(args[0])
        if function not in self.PACKED_FUNCTIONS:
            raise UnsupportedConstructError("tirx.tvm_call_packed", function)
        if self.vector_depth or self.stmt_masks:
            raise _CannotVectorize(f"{function} in a loop that runs as lanes")
        nodes = []
        for arg in args[1:]:
            if _type_key(arg) == "ir.Call" and isinstance(arg.op, tvm.ir.Op) and arg.op.name == "tirx.tvm_stack_make_array":
                nodes.append(self._stack_array(function, arg))
            else:
                value = self.visit_expr(arg)
                if value.varying:
                    raise _CannotVectorize(f"{function} argument that differs between lanes")
                nodes.append(value.node)
        return Value(self._call("contrib_sort", ast.Constant(function), *nodes), "py", _dtype(node))

    def _stack_array(self, function: str, call) -> ast.expr:
        """``tvm_stack_make_array(data, shape, strides, ndim, dtype, elem_offset)``: a view of the data."""
        data, shape, strides, _ndim, dtype_hint, offset = call.args
        if not _is_zero(strides):
            raise UnsupportedConstructError("tirx.tvm_stack_make_array", f"with strides, passed to {function}")
        if not (_type_key(shape) == "ir.Call" and shape.op.name == "tirx.tvm_stack_make_shape"):
            raise UnsupportedConstructError("tirx.tvm_stack_make_array", f"shape {shape}")
        dims = [self.visit_expr(d) for d in shape.args]
        storage, offset_value = self.visit_expr(data), self.visit_expr(offset)
        if _varying(storage, offset_value, *dims):
            raise _CannotVectorize(f"{function} argument that differs between lanes")
        return self._call("view", storage.node, ast.Constant(_scalar_dtype(_dtype(dtype_hint))),
                          ast.Tuple([d.node for d in dims], ast.Load()), offset_value.node)

    def _masked_store(self, args) -> list[ast.stmt]:
        """``masked_store(buffer, value, *indices, mask)``: the lanes where ``mask`` holds are written."""
        info = self._buffer(args[0])
        indices = list(args[2:-1])
        values = [self.visit_expr(i) for i in indices]
        value = self.visit_expr(args[1]).node
        self.stmt_masks.append(self.to_np(self.visit_expr(args[-1])).node)
        try:
            return self._store(info, indices, values, value)
        finally:
            self.stmt_masks.pop()

    def _stepped_for(self, node) -> list[ast.stmt]:
        """A loop with a step: ``range(min, min + extent, step)``, always run serially."""
        if int(node.kind) == 4:
            raise UnsupportedConstructError("tirx.For", "thread-bound loop with a step")
        lo = self.visit_expr(node.min)
        end = self.visit_expr(tvm.sym.Analyzer().simplify(node.min + node.extent))
        step = self.visit_expr(node.step)
        if _varying(lo, end, step):
            raise _CannotVectorize("loop bounds that differ between iterations")
        try:
            self.analyzer.bind(node.loop_var, tvm.ir.Range.from_min_extent(node.min, node.extent),
                               allow_override=True)
        except Exception:
            pass
        name = self.namer.define(node.loop_var, node.loop_var.name)
        self.var_kinds[_key(node.loop_var)] = ("py", _dtype(node.loop_var), False)
        # No serial frame: hoisted views assume a loop that advances by one.
        if self.serial_depth == 0:
            self.progress_outer = None  # no progress call of its own for loops inside to refine
        self.serial_depth += 1
        try:
            body = self.visit_stmt(node.body)
        finally:
            self.serial_depth -= 1
        call = ast.Call(_name("range"), [lo.node, end.node, step.node], [])
        return [ast.For(_store_name(name), call, body or [ast.Pass()], [])]

    def visit_SBlockRealize(self, node) -> list[ast.stmt]:
        block = node.block
        threads = [ax for ax in self.axes if ax.is_thread]
        # A reduction into per-thread memory is across the threads too when the block has its init
        # (as scheduled); LowerCrossThreadReduction's in-thread blocks (no init) keep each thread's own.
        if (threads and self._reduces_across(node, threads) and not _calls_allreduce(block)
                and (block.init is not None or not self._writes_only_per_thread(block))):
            return self._serialized_block(node, threads)
        out: list[ast.stmt] = []
        reduce_checks: list[Value] = []
        for iv, value in zip(block.iter_vars, node.iter_values):
            v = self.visit_expr(value)
            name = self.namer.define(iv.var, iv.var.name)
            self._set_var(iv.var, v)
            out.append(ast.Assign([_store_name(name)], v.node))
            self._bind_analyzer(iv.var, value)
            if int(iv.iter_type) == 2:  # reduction axis: init runs at its first value
                lo = self.visit_expr(iv.dom.min)
                reduce_checks.append(Value(ast.Compare(_name(name), [ast.Eq()], [lo.node]), "py", "bool", v.varying))
            elif int(iv.iter_type) not in (0, 3, 4):  # data-parallel, ordered, opaque: plain bindings
                raise UnsupportedConstructError("s_tir.SBlock", f"iterator kind {int(iv.iter_type)}")
        pred = None if _is_true(node.predicate) else self.visit_expr(node.predicate)
        if pred is not None and pred.varying:
            self.stmt_masks.append(pred.node)  # lanes outside the predicate neither init nor update
        try:
            inner: list[ast.stmt] = []
            for buf in block.alloc_buffers:
                inner.extend(self.visit_AllocBuffer(_AllocLike(buf)))
                self.block_allocs[_key(buf)] = buf
            for match in block.match_buffers:
                inner.extend(self._match_buffer(match))
            if block.init is not None:
                if not reduce_checks:
                    inner.extend(self.visit_stmt(block.init))
                elif _varying(*reduce_checks):
                    test = reduce_checks[0].node
                    for c in reduce_checks[1:]:
                        test = ast.BinOp(test, ast.BitAnd(), c.node)
                    inner.extend(self._masked(test, block.init))
                else:
                    nodes = [c.node for c in reduce_checks]
                    test = nodes[0] if len(nodes) == 1 else ast.BoolOp(ast.And(), nodes)
                    inner.append(ast.If(test, self.visit_stmt(block.init) or [ast.Pass()], []))
            inner.extend(self.visit_stmt(block.body))
        finally:
            if pred is not None and pred.varying:
                self.stmt_masks.pop()
        if pred is not None and not pred.varying:
            inner = [ast.If(pred.node, inner or [ast.Pass()], [])]
        out.extend(inner)
        if (block.name_hint == "root" and not block.iter_vars) or self.fast:
            return out  # fast mode runs the statements without the (empty) block marker
        with_item = ast.withitem(ast.Call(self._use("sblock"), [ast.Constant(str(block.name_hint))], []), None)
        return [ast.With([with_item], out or [ast.Pass()])]

    @staticmethod
    def _reduces_across(node, threads: list["_Axis"]) -> bool:
        """Whether a reduction axis of the block is bound to one of the running threads."""
        return bool(HybridCodegen._cross_thread_tags(node, threads))

    @staticmethod
    def _cross_thread_tags(node, threads: list["_Axis"]) -> set[str]:
        """Tags of the running threads that the block reduces across: their variable appears in a
        reduction iterator's binding and in no spatial one (as LowerCrossThreadReduction reads it;
        a thread that also picks the block's spatial element, as in an rfactor, keeps its own)."""
        in_reduce, in_spatial = set(), set()
        keys = {_key(ax.var) for ax in threads}
        for iv, value in zip(node.block.iter_vars, node.iter_values):
            found = set()
            tvm_ffi.structural_walk(value, lambda n: (found.add(_key(n)) if _type_key(n) == "ir.Var"
                                                      and _key(n) in keys else None) or True, order="post")
            (in_reduce if int(iv.iter_type) == 2 else in_spatial).update(found)
        return {ax.tag for ax in threads if _key(ax.var) in in_reduce - in_spatial}

    def _serialized_block(self, node, threads: list["_Axis"]) -> list[ast.stmt]:
        """A block that reduces across threads (before LowerCrossThreadReduction lowers it): its
        threads contribute one after another, in thread order, which is one valid order of the
        reduction; everything around it still runs in lockstep."""
        saved = (dict(self.namer._names), dict(self.var_kinds), list(self.axes))
        saved_serial = self.serial_thread_lanes
        self.serial_thread_lanes = dict(saved_serial)
        # Per-thread memory the block reduces into is one accumulator for the threads it reduces
        # across: they update one copy in turn, and all of them hold the result afterwards.
        across = self._cross_thread_tags(node, threads)
        accumulators = self._per_thread_writes(node.block)
        saved_accumulators = self.accumulator_tags
        self.accumulator_tags = {**saved_accumulators, **{info.name: across for info in accumulators}}
        loops = []
        for ax in sorted(threads, key=lambda a: a.axis):
            lane = self.namer.define_name(f"{ax.name}_serial")
            self.namer._names[_key(ax.var)] = lane
            self.var_kinds[_key(ax.var)] = ("py", _dtype(ax.var), False)
            self.serial_thread_lanes[ax.tag] = lane  # per-thread memory is indexed by the serial thread
            loops.append((lane, ax))
        self.axes = [ax for ax in self.axes if not ax.is_thread]
        try:
            body = self.visit_SBlockRealize(node)
        finally:
            self.namer._names, self.var_kinds, self.axes = saved
            self.serial_thread_lanes, self.accumulator_tags = saved_serial, saved_accumulators
        for lane, ax in reversed(loops):
            bounds = ([ax.extent] if isinstance(ax.lo, ast.Constant) and ax.lo.value == 0
                      else [ax.lo, ast.BinOp(ax.lo, ast.Add(), ax.extent)])
            body = [ast.For(_store_name(lane), ast.Call(_name("range"), bounds, []), body, [])]
        return body + self._share_accumulators(accumulators, across)

    def _per_thread_writes(self, block) -> list[_BufferInfo]:
        """The per-thread buffers (allocated outside ``block``) that ``block`` stores to."""
        stores = []
        for part in (block.init, block.body):
            if part is not None:
                tvm_ffi.structural_walk(part, lambda n: stores.append(n) or True
                                        if _type_key(n) == "tirx.BufferStore" else True, order="post")
        infos = {}
        for st in stores:
            info = self.buffers.get(_key(st.buffer))
            if info is not None and info.per_thread:
                infos[info.name] = info
        return list(infos.values())

    def _share_accumulators(self, accumulators: list[_BufferInfo], across: set[str]) -> list[ast.stmt]:
        """``acc[all threads] = acc[thread 0]`` along the thread axes reduced across."""
        reduced = {self.THREAD_AXES["vthread" if t.startswith("vthread") else t] for t in across}
        out = []
        for info in accumulators:
            for name in [info.name] + ([info.shadow] if info.shadow else []):
                every = ast.Tuple([ast.Slice(None, None, None)] * len(self.THREAD_AXES), ast.Load())
                first = ast.Tuple([ast.Slice(ast.Constant(0), ast.Constant(1), None) if axis in reduced
                                   else ast.Slice(None, None, None) for axis in range(len(self.THREAD_AXES))],
                                  ast.Load())
                out.append(ast.Assign([ast.Subscript(_name(name), every, ast.Store())],
                                      ast.Subscript(_name(name), first, ast.Load())))
        return out

    def _writes_only_per_thread(self, block) -> bool:
        """Whether every store in ``block`` goes to memory private to each thread."""
        private = {_key(b) for b in block.alloc_buffers}
        private |= {k for k, info in self.buffers.items() if info.per_thread}
        stores = []
        tvm_ffi.structural_walk(block.body, lambda n: stores.append(n) or True
                                if _type_key(n) == "tirx.BufferStore" else True, order="post")
        return all(_key(st.buffer) in private for st in stores)

    def _match_buffer(self, match) -> list[ast.stmt]:
        buf = match.buffer
        region = match.source
        source = self._buffer(region.source)
        ranges = list(region.region)
        if len(ranges) != len(buf.shape):
            raise UnsupportedConstructError("s_tir.MatchBufferRegion", f"{buf.name} changes the number of dimensions")
        name = self.namer.define(buf, buf.name)
        self._declare_buffer(buf, name, strided_ok=True)  # a slice keeps its source's layout
        layout = self._match_layout(buf, region, source)
        slices = []
        for r in ranges:
            lo = self.visit_expr(r.min)
            hi = self.visit_expr(tvm.sym.Analyzer().simplify(r.min + r.extent))
            if _varying(lo, hi):
                raise _CannotVectorize("match_buffer region that differs between iterations")
            slices.append(ast.Slice(lo.node, hi.node, None))
        value = ast.Subscript(_name(source.name), ast.Tuple(slices, ast.Load()), ast.Load())
        return layout + [ast.Assign([_store_name(name)], value)]

    def _match_layout(self, buf, region, source: _BufferInfo) -> list[ast.stmt]:
        """A match_buffer's ``elem_offset`` and strides that are variables (``offset_factor``,
        tensor intrinsics' ``strides=[s0, s1]``) take the region's place in its source's layout
        (row-major, or the allocation's explicit strides); constant ones are refused unless they
        are that layout."""
        src = region.source
        strides = list(src.strides) if len(src.strides) else None
        if strides is None:
            strides = []
            for axis in range(len(src.shape)):
                stride = tirx.const(1, "int32")
                for dim in list(src.shape)[axis + 1:]:
                    stride = stride * dim
                strides.append(stride)
        offset = src.elem_offset if not _is_zero(src.elem_offset) else tirx.const(0, "int32")
        for r, stride in zip(region.region, strides):
            offset = offset + r.min * stride
        out = []
        simplify = tvm.sym.Analyzer().simplify
        pairs = [(buf.elem_offset, offset)] + list(zip(buf.strides, strides[len(strides) - len(buf.strides):]))
        for var, value in pairs:
            if var is None or (_is_zero(var) and _is_zero(simplify(value))):
                continue
            if _type_key(var) == "ir.Var" and self.namer.lookup(var) is None:
                node = self.visit_expr(simplify(value))
                if node.varying:
                    raise _CannotVectorize("match_buffer region that differs between iterations")
                out.append(ast.Assign([_store_name(self.namer.define(var, var.name))], node.node))
                self.var_kinds[_key(var)] = ("py", _dtype(var), False)
            elif not self.analyzer.can_prove_equal(var, value):
                raise UnsupportedConstructError("s_tir.MatchBufferRegion", f"{buf.name}: layout of its region")
        return out


class _BinaryLike:
    """Adapts a bitwise intrinsic call to the binary-node interface (``a``, ``b``, ``ty``)."""

    def __init__(self, a, b, call):
        self.a, self.b, self.ty = a, b, call.ty
        self._call = call

    def __getattr__(self, item):
        return getattr(self._call, item)


class _AllocLike:
    def __init__(self, buffer):
        self.buffer = buffer


def _is_zero(expr) -> bool:
    return expr is None or (_type_key(expr) == "ir.IntImm" and int(expr.value) == 0)


def _is_true(expr) -> bool:
    return expr is None or (_type_key(expr) == "ir.IntImm" and bool(expr.value))


def generate_kernel(func, function_name: str, stage: str | None = None, mode: str = "exact",
                    progress: bool = False, module_functions: dict | None = None,
                    check: bool = False, synced: bool = False) -> GeneratedKernel:
    """Generate the hybrid script of ``func`` (see :class:`HybridCodegen`).

    ``mode="exact"`` interprets the IR as written; ``mode="fast"`` runs loops whose iterations are
    provably independent as numpy array operations (bit-identical results).  ``progress=True`` makes
    the variant that is executed: each outermost loop iteration calls ``__progress__``.
    """
    return HybridCodegen(func, function_name, stage, mode, progress, module_functions, check, synced).generate()


# ---------------------------------------------------------------------- deep loop nests
#: Python compiles at most 20 statically nested blocks (loops, ``with``) per function; a loop that
#: would be nested deeper than this moves into a function of its own.
_MAX_NESTED_BLOCKS = 16


def _split_deep_nests(module: ast.Module) -> None:
    """Move every loop nested deeper than :data:`_MAX_NESTED_BLOCKS` into a nested function called
    in its place (``nonlocal`` for the names it shares with the enclosing function)."""
    counter = [0]
    for node in list(module.body):
        if isinstance(node, ast.FunctionDef):
            _split_function(node, counter)


def _split_function(fdef: ast.FunctionDef, counter: list) -> None:
    fdef.body = _split_block(fdef, fdef.body, 0, counter)


def _split_block(fdef, stmts: list, depth: int, counter: list) -> list:
    out = []
    for st in stmts:
        if isinstance(st, ast.FunctionDef):
            _split_function(st, counter)
        elif isinstance(st, (ast.For, ast.While)) and depth + 1 > _MAX_NESTED_BLOCKS:
            out.extend(_outline_loop(fdef, st, counter))
            continue
        elif isinstance(st, (ast.For, ast.While)):
            st.body = _split_block(fdef, st.body, depth + 1, counter)
            st.orelse = _split_block(fdef, st.orelse, depth + 1, counter)
        elif isinstance(st, ast.With):
            st.body = _split_block(fdef, st.body, depth + 1, counter)
        elif isinstance(st, ast.If):
            st.body = _split_block(fdef, st.body, depth, counter)
            st.orelse = _split_block(fdef, st.orelse, depth, counter)
        out.append(st)
    return out


def _outline_loop(fdef: ast.FunctionDef, loop: ast.stmt, counter: list) -> list:
    counter[0] += 1
    name = f"_nest_{counter[0]}"
    stored = _names_in([loop], ast.Store)
    params = {a.arg for a in fdef.args.args}
    shared = stored & (_names_in(fdef.body, None, skip=loop) | params)
    prebind = [ast.Assign([_store_name(n)], ast.Constant(None))
               for n in sorted(shared - _names_in(fdef.body, ast.Store, skip=loop) - params)]
    body = ([ast.Nonlocal(sorted(shared))] if shared else []) + [loop]
    inner = ast.FunctionDef(name=name, args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                                        defaults=[]),
                            body=body, decorator_list=[], returns=None, type_params=[])
    _split_function(inner, counter)
    return prebind + [inner, ast.Expr(ast.Call(_name(name), [], []))]


def _names_in(nodes, kind, skip=None) -> set[str]:
    """Names that ``nodes`` bind (``kind`` ast.Store: assignments, ``nonlocal``, ``def``) or use at
    all (``kind`` None, including inside nested functions), leaving out the statement ``skip``."""
    found: set[str] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if node is skip:
            continue
        if isinstance(node, ast.Name) and (kind is None or isinstance(node.ctx, kind)):
            found.add(node.id)
        elif isinstance(node, ast.Nonlocal):
            found.update(node.names)
        elif isinstance(node, ast.FunctionDef):
            found.add(node.name)
            if kind is not None:  # its own assignments are its locals
                continue
        stack.extend(ast.iter_child_nodes(node))
    return found


# ---------------------------------------------------------------------- fast-mode dead code
#: Expression nodes that cannot raise or have effects (with the operators below and np.arange/reshape).
_PURE_NODES = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Tuple,
               ast.Load, ast.Add, ast.Sub, ast.Mult, ast.USub, ast.Not, ast.Invert, ast.And, ast.Or,
               ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _is_pure(expr: ast.expr) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            func = node.func
            if not (isinstance(func, ast.Attribute) and (func.attr == "reshape" or (
                    func.attr == "arange" and isinstance(func.value, ast.Name) and func.value.id == "np"))):
                return False
        elif isinstance(node, (ast.Attribute, ast.keyword)):
            continue
        elif not isinstance(node, _PURE_NODES):
            return False
    return True


def _drop_dead_assignments(module: ast.Module) -> None:
    """Fast mode: remove assignments of pure expressions to names nothing reads (block iterators
    and lane index arrays whose accesses all became strided views), until none is left."""
    while True:
        loaded = {n.id for n in ast.walk(module) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        removed = False
        for node in ast.walk(module):
            for field_name in ("body", "orelse"):
                stmts = getattr(node, field_name, None)
                if not isinstance(stmts, list) or not stmts or not isinstance(stmts[0], ast.stmt):
                    continue
                kept = [st for st in stmts if not (
                    isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
                    and st.targets[0].id not in loaded and _is_pure(st.value))]
                if len(kept) != len(stmts):
                    removed = True
                    setattr(node, field_name, kept or ([ast.Pass()] if field_name == "body" else []))
        if not removed:
            return


# ---------------------------------------------------------------------- fast-mode axis plan
def _step(expr, var) -> int | None:
    """How much ``expr`` changes when ``var`` grows by one, when that is a constant; else None."""
    fresh = tirx.Var("next", _dtype(var))
    bumped, same = tvm.sym.Analyzer(), tvm.sym.Analyzer()
    bumped.bind(var, fresh + 1)
    same.bind(var, fresh)
    delta = tvm.sym.Analyzer().simplify(bumped.simplify(expr) - same.simplify(expr))
    return int(delta.value) if _type_key(delta) == "ir.IntImm" else None


def _plan_lane_axes(var, body, axes: range) -> dict[int, int]:
    """Array axes for the loops from ``var`` down to the first store of its body, in the order of
    their strides in that store's flattened index (largest first).

    numpy walks an expression's arrays in axis order and merges neighbouring axes whose strides
    chain, so lanes laid out in the store's memory order run as a few long contiguous loops instead
    of many short ones.  Only performance depends on the plan: any axis assignment gives the same
    values.  Loops the store does not move along get no planned axis.
    """
    path = _first_store(body, [var], [])
    if path is None:
        return {}
    store, loops, binds = path
    analyzer = tvm.sym.Analyzer()
    try:
        for v, value in binds:
            analyzer.bind(v, value, allow_override=True)
        flat = None
        for idx, dim in zip(store.indices, store.buffer.shape):
            if _type_key(idx) == "prim.Ramp":
                idx = idx.base
            elif _type_key(idx) == "prim.Broadcast":
                idx = idx.value
            flat = idx if flat is None else flat * dim + idx
        if flat is None:
            return {}
        flat = analyzer.simplify(flat)
        strides = []
        for position, x in enumerate(loops):
            step = _step(flat, x)
            if step:
                strides.append((-abs(step), position, x))
    except Exception:  # a plan is an optimisation: no plan rather than a failed generation
        return {}
    return {_key(x): axis for axis, (_, _, x) in zip(axes, sorted(strides, key=lambda t: t[:2]))}


def _first_store(stmt, loops: list, binds: list):
    """The first ``BufferStore`` under ``stmt`` in program order, with the (non-thread) loop
    variables and the scalar bindings (block iterators, ``Bind``) on the way to it."""
    key = _type_key(stmt)
    if key == "tirx.BufferStore":
        return stmt, loops, binds
    if key == "tirx.SeqStmt":
        for child in stmt.seq:
            found = _first_store(child, loops, binds)
            if found is not None:
                return found
            if _type_key(child) == "tirx.Bind":
                binds = binds + [(child.var, child.value)]
        return None
    if key == "tirx.For":
        inner = loops if int(stmt.kind) == 4 else loops + [stmt.loop_var]
        return _first_store(stmt.body, inner, binds)
    if key == "s_tir.SBlockRealize":
        block = stmt.block
        inner = binds + list(zip([iv.var for iv in block.iter_vars], stmt.iter_values))
        if block.init is not None:
            found = _first_store(block.init, loops, inner)
            if found is not None:
                return found
        return _first_store(block.body, loops, inner)
    if key in ("tirx.AttrStmt", "tirx.While"):
        return _first_store(stmt.body, loops, binds)
    if key == "tirx.IfThenElse":
        return _first_store(stmt.then_case, loops, binds)
    return None


# ---------------------------------------------------------------------- fast-mode dependence test
class _LoopAccesses:
    """Buffer accesses, scalar bindings and inner loops of one loop body, for the dependence test."""

    def __init__(self, roots: dict[int, int]):
        self.roots = dict(roots)
        self.binds: list = []
        self.inner: list = []
        self.accesses: list[tuple[int, int, bool, list]] = []
        self.private = False
        #: Allocations made inside the body: each iteration has its own (fast mode gives one per lane).
        self.local: set[int] = set()
        #: Shape of each accessed buffer (for the flattened-index test).
        self.shapes: dict[int, object] = {}

    def root(self, buf) -> int:
        self.shapes[_key(buf)] = buf.shape
        return self.roots.get(_key(buf), _key(buf))

    def expr(self, expr) -> None:
        def visit(node):
            key = _type_key(node)
            if key == "ir.TensorLoad":
                self.accesses.append((self.root(node.source), _key(node.source), False, list(node.indices)))
            elif key == "ir.Call":
                self.call(node)
            return True

        tvm_ffi.structural_walk(expr, visit, order="post")

    def call(self, node) -> None:
        """Calls that write memory: a kernel launch touches what its kernel touches (no claim of
        independence), ``tvm_thread_allreduce`` writes its result elements."""
        op = node.op
        if isinstance(op, tvm.ir.GlobalVar):
            self.private = True
        elif isinstance(op, tvm.ir.Op) and op.name.endswith("tvm_thread_allreduce"):
            count = int(node.args[0].value)
            for result in list(node.args)[2 + count:2 + 2 * count]:
                if _type_key(result) == "ir.TensorLoad":
                    self.accesses.append((self.root(result.source), _key(result.source), True, list(result.indices)))
                else:
                    self.private = True

    def stmt(self, stmt) -> None:
        key = _type_key(stmt)
        if key == "tirx.SeqStmt":
            for s in stmt.seq:
                self.stmt(s)
        elif key == "tirx.For":
            self.expr(stmt.min)
            self.expr(stmt.extent)
            self.inner.append((stmt.loop_var, stmt.min, stmt.extent))
            self.stmt(stmt.body)
        elif key == "tirx.Bind":
            self.expr(stmt.value)
            self.binds.append((stmt.var, stmt.value))
        elif key == "tirx.BufferStore":
            for idx in stmt.indices:
                self.expr(idx)
            self.expr(stmt.value)
            self.accesses.append((self.root(stmt.buffer), _key(stmt.buffer), True, list(stmt.indices)))
        elif key in ("tirx.IfThenElse",):
            self.expr(stmt.condition)
            self.stmt(stmt.then_case)
            if stmt.else_case is not None:
                self.stmt(stmt.else_case)
        elif key == "tirx.While":
            self.expr(stmt.condition)
            self.stmt(stmt.body)
        elif key in ("tirx.Evaluate",):
            self.expr(stmt.value)
        elif key == "tirx.AssertStmt":
            self.expr(stmt.condition)
        elif key == "tirx.AttrStmt":
            self.stmt(stmt.body)
        elif key == "tirx.DeclBuffer":
            if stmt.data is not None and _type_key(stmt.data) == "ir.Call" and stmt.data.args:
                if _type_key(stmt.data.args[0]) == "ir.TensorLoad":
                    # A view at an element's address (address_of): where it starts moves with the
                    # indices, so no claim of independence.
                    self.private = True
                else:
                    self.roots[_key(stmt.buffer)] = self.root(stmt.data.args[0])
        elif key == "s_tir.SBlockRealize":
            block = stmt.block
            for value in stmt.iter_values:
                self.expr(value)
            for iv, value in zip(block.iter_vars, stmt.iter_values):
                self.binds.append((iv.var, value))
            self.expr(stmt.predicate)
            if len(block.match_buffers):
                self.private = True
            self.local |= {_key(b) for b in block.alloc_buffers}
            if block.init is not None:
                self.stmt(block.init)
            self.stmt(block.body)
        elif key == "tirx.AllocBuffer":
            self.local.add(_key(stmt.buffer))
        else:  # break/continue and anything unknown: no claim of independence
            self.private = True


def _buffer_access_counts(stmt) -> dict[int, int]:
    """How many loads and stores of each buffer (by key) ``stmt`` holds."""
    counts: dict[int, int] = {}

    def visit(node):
        key = _type_key(node)
        buf = node.source if key == "ir.TensorLoad" else node.buffer if key == "tirx.BufferStore" else None
        if buf is not None:
            counts[_key(buf)] = counts.get(_key(buf), 0) + 1
        return True

    tvm_ffi.structural_walk(stmt, visit, order="post")
    return counts


def _loop_is_independent(loop, roots: dict[int, int]) -> bool:
    """Whether the iterations of ``loop`` touch disjoint memory wherever one of them writes.

    Sufficient test, per written buffer: in some dimension every access index has the form
    ``c * x + g`` with the same constant ``c`` and the values of all the ``g`` (over the inner loops
    and vector lanes) spread over less than ``|c|``, so the elements that iteration ``x`` touches are
    disjoint from those of any other iteration.
    """
    acc = _LoopAccesses(roots)
    acc.stmt(loop.body)
    if acc.private:
        return False
    groups: dict[int, list] = {}
    for root, buf_key, is_write, indices in acc.accesses:
        groups.setdefault(root, []).append((buf_key, is_write, indices))
    expand = tvm.sym.Analyzer()
    for var, value in acc.binds:
        expand.bind(var, value, allow_override=True)
    for root, items in groups.items():
        if root in acc.local or not any(w for _, w, _ in items):
            continue
        if len({k for k, _, _ in items}) > 1 or len({len(ix) for _, _, ix in items}) > 1:
            return False
        ndim = len(items[0][2])
        x_extent = int(loop.extent.value) if _type_key(loop.extent) == "ir.IntImm" else None
        if not any(_separates_iterations([ix[d] for _, _, ix in items], loop.loop_var, acc, expand, x_extent)
                   for d in range(ndim)):
            flat = _flat_indices(items, acc.shapes.get(items[0][0]))
            if flat is None or not _separates_iterations(flat, loop.loop_var, acc, expand, x_extent):
                return False
    return True


def _flat_indices(items, shape) -> list | None:
    """Row-major flat indices of multi-dimensional accesses (``v0 = x // 128``, ``v1 = x % 128``
    keep iterations apart only together: ``v0 * 128 + v1 = x``); None for vector indices."""
    if shape is None or len(shape) < 2:
        return None
    flats = []
    for _, _, indices in items:
        if any(_type_key(i) in ("prim.Ramp", "prim.Broadcast") for i in indices):
            return None
        flat = indices[0]
        for index, dim in zip(indices[1:], list(shape)[1:]):
            flat = flat * dim + index
        flats.append(flat)
    return flats


def _separates_iterations(indices, x, acc: _LoopAccesses, expand, x_extent: int | None = None) -> bool:
    """Whether these index expressions of one dimension keep different iterations of ``x`` apart."""
    lanes: list = []
    try:
        x_next = tirx.Var("x_next", _dtype(x))
        shifted, same = tvm.sym.Analyzer(), tvm.sym.Analyzer()
        shifted.bind(x, x_next + 1)
        same.bind(x, x_next)
        at_min, over_range = tvm.sym.Analyzer(), tvm.sym.Analyzer()
        for var, lo, extent in acc.inner:
            at_min.bind(var, lo, allow_override=True)
            over_range.bind(var, tvm.ir.Range.from_min_extent(lo, extent), allow_override=True)
        step = None
        rests = []
        for index in indices:
            key = _type_key(index)
            if key == "prim.Ramp":
                # One lane variable per vector width, shared by all accesses, so their forms compare.
                lane_dtype = _scalar_dtype(_dtype(index.base))
                known = [v for v, _, e in lanes if int(e.value) == int(index.lanes) and _dtype(v) == lane_dtype]
                if known:
                    lane = known[0]
                else:
                    lane = tirx.Var("lane", lane_dtype)
                    at_min.bind(lane, tirx.const(0, lane_dtype))
                    over_range.bind(lane, tvm.ir.Range.from_min_extent(0, int(index.lanes)))
                    lanes.append((lane, tirx.const(0, lane_dtype), tirx.const(int(index.lanes), lane_dtype)))
                index = index.base + index.stride * lane
            elif key == "prim.Broadcast":
                return False
            f = expand.simplify(index)
            f_same = same.simplify(f)
            delta = tvm.sym.Analyzer().simplify(shifted.simplify(f) - f_same)
            if _type_key(delta) != "ir.IntImm" or int(delta.value) == 0:
                return False
            if step is not None and int(delta.value) != step:
                return False
            step = int(delta.value)
            rest = tvm.sym.Analyzer().simplify(f_same - delta * x_next)
            uses_x = []
            tvm_ffi.structural_walk(rest, lambda n: uses_x.append(
                _type_key(n) == "ir.Var" and n.same_as(x_next)) or True, order="post")
            if any(uses_x):
                return False
            rests.append(rest)
        base = at_min.simplify(rests[0])
        lows, highs = [], []
        for rest in rests:
            bound = over_range.const_int_bound(over_range.simplify(rest - base))
            lows.append(bound.min_value)
            highs.append(bound.max_value)
        if max(highs) - min(lows) < abs(step):
            return True
        # Unrolled copies touch the same form at constant offsets: an arithmetic progression of offsets
        # is one more digit of the mixed-radix number.
        offsets = []
        for rest in rests:
            diff = tvm.sym.Analyzer().simplify(rest - rests[0])
            if _type_key(diff) != "ir.IntImm":
                return False
            offsets.append(int(diff.value))
        distinct = sorted(set(offsets))
        extra = []
        if len(distinct) > 1:
            gaps = {b - a for a, b in zip(distinct, distinct[1:])}
            if len(gaps) != 1:
                return False
            extra = [(gaps.pop(), len(distinct))]
        return _mixed_radix_injective(rests[0], step, x_extent, acc, lanes, extra)
    except Exception:  # anything the analyzer cannot reason about: no claim of independence
        return False


def _mixed_radix_injective(rest, step: int, x_extent, acc: "_LoopAccesses", lanes: list,
                           extra: list | None = None) -> bool:
    """Whether ``step * x + rest`` is one-to-one in ``x`` and the inner loop variables.

    ``rest`` must be affine in the inner variables (``i_1 * 256 + j_1``) with constant extents; sorted
    by coefficient, each coefficient must exceed the largest value all smaller terms can add up to —
    a mixed-radix number, like the flat index of a row-major array.
    """
    terms = [(abs(step), x_extent)] + list(extra or [])
    remainder = rest
    for var, lo, extent in list(acc.inner) + lanes:
        fresh = tirx.Var("v_next", _dtype(var))
        bumped, same = tvm.sym.Analyzer(), tvm.sym.Analyzer()
        bumped.bind(var, fresh + 1)
        same.bind(var, fresh)
        delta = tvm.sym.Analyzer().simplify(bumped.simplify(rest) - same.simplify(rest))
        if _type_key(delta) != "ir.IntImm":
            return False
        coef = int(delta.value)
        if coef == 0:
            continue
        if _type_key(extent) != "ir.IntImm" or not _is_zero(lo):
            return False
        terms.append((abs(coef), int(extent.value)))
        remainder = remainder - delta * var
    remainder = tvm.sym.Analyzer().simplify(remainder)
    inner_keys = {_key(v) for v, _, _ in list(acc.inner) + lanes}
    used = []
    tvm_ffi.structural_walk(remainder, lambda n: used.append(_type_key(n) == "ir.Var" and _key(n) in inner_keys)
                            or True, order="post")
    if any(used):
        return False
    terms.sort(key=lambda t: t[0])
    reach = 0
    for coef, extent in terms:
        if coef <= reach:
            return False
        if extent is None:
            return coef == terms[-1][0] and (coef, extent) == terms[-1]
        reach += coef * (extent - 1)
    return True



def _python_name(name: str) -> str:
    clean = ascii_identifier(name) or "kernel"
    if (clean[0].isdigit() or keyword.iskeyword(clean) or hasattr(builtins, clean) or clean.startswith("_")
            or clean in vars(runtime) or clean == "race_log"):
        clean = "k_" + clean
    return clean


def _thread_extents(body) -> dict[str, int]:
    """Constant extent of each thread tag launched in ``body`` (for per-thread memory)."""
    extents: dict[str, int] = {}

    def visit(node):
        key = _type_key(node)
        if key == "tirx.For" and int(node.kind) == 4 and node.thread_binding is not None:
            tag, extent = str(node.thread_binding.thread_tag), node.extent
        elif key == "tirx.AttrStmt" and node.attr_key in ("thread_extent", "virtual_thread"):
            tag, extent = str(node.node.thread_tag), node.value
        else:
            return True
        tag = "vthread" if tag.startswith("vthread") else tag
        if _type_key(extent) == "ir.IntImm":
            extents[tag] = max(extents.get(tag, 0), int(extent.value))
        return True

    tvm_ffi.structural_walk(body, visit, order="post")
    return extents


def _contiguous_strides(buf) -> bool:
    """Whether explicit strides are just the row-major ones (``strides=(1,)`` on a 1-D buffer)."""
    expected = 1
    for dim, stride in reversed(list(zip(buf.shape, buf.strides))):
        if _type_key(stride) != "ir.IntImm" or int(stride.value) != expected:
            return False
        if _type_key(dim) != "ir.IntImm":
            return False
        expected *= int(dim.value)
    return True


def kernel_signature(func, function_name: str) -> list[ParamSpec]:
    """The parameters of ``func`` as the hybrid script takes them (whether or not its body translates)."""
    return HybridCodegen(func, function_name)._signature()[2]


def _contains(node, matches) -> bool:
    """Whether any node of the tree ``node`` satisfies ``matches``."""
    found = []

    def visit(n):
        if not found and matches(n):
            found.append(n)
        return True

    tvm_ffi.structural_walk(node, visit, order="post")
    return bool(found)


def _is_call_of(node, op_suffix: str) -> bool:
    return _type_key(node) == "ir.Call" and isinstance(node.op, tvm.ir.Op) and node.op.name.endswith(op_suffix)


def _calls_allreduce(block) -> bool:
    """Whether ``block`` reduces with ``tvm_thread_allreduce`` (LowerCrossThreadReduction's output:
    the threads run it together, in lockstep)."""
    return _contains(block.body, lambda n: _is_call_of(n, "tvm_thread_allreduce"))


def _reads_memory(expr) -> bool:
    """Whether ``expr`` loads from a buffer (so a store may change its value)."""
    return _contains(expr, lambda n: _type_key(n) in ("ir.TensorLoad", "ir.BufferLoad"))


def _has_storage_sync(func) -> bool:
    """Whether ``func`` has explicit barriers (``tvm_storage_sync``)."""
    return _contains(func.body, lambda n: _is_call_of(n, "tvm_storage_sync"))
