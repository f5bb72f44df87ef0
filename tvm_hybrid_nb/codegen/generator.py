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
* ``if_then_else`` is lazy, ``Select`` evaluates both sides with masked-out lanes allowed out of bounds."""
from __future__ import annotations

import ast
import builtins

from tvm import tirx
import numpy as np
import tvm
import tvm_ffi

from .. import runtime
from ..errors import UnsupportedConstructError
from ..loader import cyclic_gc_paused
from ..signature import ParamSpec
from .analysis import _contiguous_strides, _has_threads, _injective, _thread_extents, host_device_accesses, walk_typed
from .names import (GeneratedKernel, Value, _BufferInfo, _CannotVectorize, _Namer, _buffer_of, _dtype,
    _is_float, _is_int, _is_zero, _key, _lanes, _name, _np, _packed_function, _scalar_dtype, _store_name, _type_key)
from .pyast import _drop_dead_assignments, _number_statements, _split_deep_nests
from .buffers import BuffersMixin
from .control import ControlFlowMixin
from .constants import ConstantsMixin
from .exprs import ExpressionsMixin
from .gpu import GpuMixin
from .lanes import LanesMixin
from .memory import MemoryAccessMixin
from .sanitize import SanitizerMixin
from .tensorcore import FLOAT_MMA_ATTR, FLOAT_MMA_NOTE
from .interchange import reductions_inside
from .cost import analysis_outgrown_reason, exact_plan_decision, lanes_lose_reason, per_call_rule
from .plan import EmulationPlan, emit_with_plan, plan_emulation
from .targets import GPU_KINDS, cuda_float_note, target_kind
from .state import GpuState, LaneState, ProgressHooks, Scope, SerialState
from .work import AnalysisOutgrown


class HybridCodegen(ExpressionsMixin, ConstantsMixin, MemoryAccessMixin, BuffersMixin, ControlFlowMixin, LanesMixin, GpuMixin,
                    SanitizerMixin):
    """Translate one PrimFunc into hybrid Python source.

    Parameters
    ----------
    func : tvm.tirx.PrimFunc
    function_name : str
        Name of the Python function to define.
    stage : str, optional
        Stage label used in error messages and the script's docstring.
    """

    def __init__(self, func, function_name: str, stage: str | None = None, mode: str = "exact",
                 progress: bool = False, module_functions: dict | None = None, check: bool = False,
                 synced: bool = False, plan: EmulationPlan | None = None):
        self.func = func
        #: How each loop runs (decided before emission; see :mod:`.plan`).
        self.plan = plan if plan is not None else plan_emulation(func, mode, check)
        self.function_name = function_name
        self.stage = stage
        self.mode = mode
        self.fast = mode == "fast"
        self.check = check
        self.analyzer = tvm.sym.Analyzer()
        self.scope = Scope()
        self.lanes = LaneState()
        self.serial = SerialState()
        self.hooks = ProgressHooks(enabled=progress)
        self.gpu = GpuState(thread_extents=_thread_extents(func.body), device_code=_has_threads(func.body),
                            thread_races=synced,
                            module_functions=dict(module_functions or {}))
        #: The target kind the function is compiled for (:mod:`.targets`).
        self.target_kind = target_kind(func, self.gpu.device_code)
        #: Sanitizer: the loads and stores of device memory that host code makes (node key -> buffer).
        self.host_accesses = host_device_accesses(func.body) if check and self.target_kind in GPU_KINDS else {}
        helper_names = {n for n in vars(runtime) if not n.startswith("__")}
        reserved = (set(dir(builtins)) | helper_names | {"np", "math", "race_log", function_name}
                    | set(self.gpu.module_functions))
        self.namer = _Namer(reserved)
        #: Sanitizer: generating the value of a store to thread-local memory, where reads of
        #: never-written thread-local elements are deferred (see runtime.access, ``poison``).
        self.defer_poison = False
        #: Sanitizer: generating the value of a store into an allocation on an LLVM target, where an
        #: overflowing nsw/nuw operation is poison that may be stored and dropped (see
        #: ``_defers_overflow``); ``overflow_deferred``: such an operation was emitted for it.
        self.defer_overflow = False
        self.overflow_deferred = False
        #: Sanitizer, C targets: the narrow integer operations whose result a store truncates
        #: before anything reads it (``_note_truncated``).
        self.c_truncated: set = set()
        #: Generating a constant expression computed once (see :mod:`.constants`).
        self.hoisting = False

    # ------------------------------------------------------------------ entry
    def function_def(self) -> tuple[ast.FunctionDef, list[ParamSpec]]:
        """The function's ``def`` (kernels it launches are collected in ``self.gpu.extra_defs``)."""
        try:
            args, prologue, params = self._signature()
            body = self.visit_stmt(self.func.body)
        except UnsupportedConstructError as exc:
            raise exc.at_stage(self.stage) if self.stage and not exc.stage else exc
        except _CannotVectorize as exc:  # lanes that no serial fallback encloses (threads of a block)
            raise UnsupportedConstructError("lanes", str(exc), self.stage) from None
        doc = ast.Expr(ast.Constant(self._docstring(params)))
        if self.check:
            watched = ast.Tuple([ast.Constant(n) for n in sorted(self.gpu.region_written)], ast.Load())
            keywords = [ast.keyword("watched", watched)] if self.gpu.region_written else []
            prologue = [ast.Assign([_store_name("race_log")], ast.Call(self._use("RaceLog"), [], keywords))] + prologue
        fdef = ast.FunctionDef(
            name=self.function_name,
            args=ast.arguments(posonlyargs=[], args=[ast.arg(a) for a in args], kwonlyargs=[], kw_defaults=[],
                               defaults=[]),
            body=[doc] + prologue + self.scope.constants + (body or [ast.Pass()]), decorator_list=[], returns=None,
            type_params=[])
        return fdef, params

    def generate(self) -> GeneratedKernel:
        fdef, params = self.function_def()
        self.plan.launched.update(self.gpu.launched_plans)
        module = ast.Module(body=self.gpu.extra_defs + [fdef], type_ignores=[])
        if self.fast:
            _drop_dead_assignments(module)
        _split_deep_nests(module)
        _number_statements(module)
        kernel_text = ast.unparse(module)
        mode_note = ""
        if self.plan.exact_reason:
            mode_note = f" Fast mode runs the exact plan: {self.plan.exact_reason}."
        if self.fast:
            mode_note = (" Fast mode: loops " + (", ".join(self.lanes.vectorized_loops) or "(none)")
                         + " run as numpy array operations.")
            if self.plan.interchanges:
                mode_note += " " + "; ".join(note[0].upper() + note[1:] for note in self.plan.interchanges) + "."
            if self.lanes.parallel_loops:
                mode_note += (" Chunks of parallel loop(s) " + ", ".join(self.lanes.parallel_loops)
                              + " run on all cores at once.")
        functions = [self.func, *self.gpu.module_functions.values()]
        inexact = [FLOAT_MMA_NOTE] if any(FLOAT_MMA_ATTR in f.attrs for f in functions
                                          if f is not None and f.attrs is not None) else []
        if self.target_kind == "cuda":
            inexact.append(cuda_float_note(functions))
        if any(inexact):
            mode_note += f" Not bit-exact to a GPU: {'; '.join(filter(None, inexact))}."
        header = (f'{_HEADER_START}`{self.function_name}`'
                  + (f" at stage {self.stage}" if self.stage else "")
                  + f'.\n\nGenerated by tvm_hybrid_nb from TVM TIR; runs with numpy alone.{mode_note}{_HEADER_END}')
        imports = "import numpy as np\n"
        if self.scope.helpers & runtime.NEEDS_MATH:
            imports = "import math\n\n" + imports
        helpers = runtime.helper_source(self.scope.helpers) if self.scope.helpers else ""
        parts = [header + imports] + ([helpers] if helpers else []) + [kernel_text]
        source = "\n\n".join(p.rstrip("\n") for p in parts) + "\n"
        return GeneratedKernel(source, self.function_name, params, runtime.helper_closure(self.scope.helpers),
                               self.hooks.loops,
                               plan=self.plan)

    def _docstring(self, params: list[ParamSpec]) -> str:
        lines = ", ".join(p.describe() for p in params)
        return f"Parameters: {lines}. Outputs are written into their arrays in place."

    def _signature(self):
        args, prologue, params = [], [], []
        expressions = []  # (shape list, axis, parameter, TIR dim): printed once every plain size is named
        layouts = {}  # strides and elem_offset of strided or offset parameter buffers
        deferred = []  # (parameter, name, shape): layouts over scalar parameters, once they are named
        given = {_key(q) for q in self.func.params if not tirx.is_buffer_var(q)}
        given |= {_key(d) for q in self.func.params if tirx.is_buffer_var(q) for d in q.shape
                  if _type_key(d) == "ir.Var"}
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
                            self.scope.var_kinds[_key(dim)] = ("py", _dtype(dim), False)
                            prologue.append(ast.Assign([_store_name(dim_name)], ast.Subscript(
                                ast.Attribute(_name(name), "shape", ast.Load()), ast.Constant(axis), ast.Load())))
                            self.analyzer.bind(dim, tvm.ir.Range.from_min_extent(0, 1 << 30), allow_override=True)
                        shape.append(dim_name)
                    else:
                        shape.append(None)
                        expressions.append((shape, axis, p, dim))
                layout = None
                if (len(p.strides) and not _contiguous_strides(p)) or not _is_zero(p.elem_offset):
                    layout = self._constant_layout(p)
                    if layout is not None:
                        prologue.extend(self._strided_param(p, name, shape, *layout))
                    elif self._layout_given(p, given):
                        deferred.append((p, name, shape))
                    else:
                        prologue.extend(self._bind_layout_vars(p, name))
                layouts[_key(p)] = layout
                self.scope.buffers[_key(p)] = _BufferInfo(name, list(p.shape), str(p.dtype))
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
                    self.scope.var_kinds[_key(p)] = ("np", dtype, False)
                elif _is_int(dtype) or dtype == "bool":
                    self.scope.var_kinds[_key(p)] = ("py", dtype, False)
                elif dtype == "handle":  # a data pointer (device kernels): the storage array itself
                    self.scope.var_kinds[_key(p)] = ("np", dtype, False)
                else:
                    raise UnsupportedConstructError("parameter type", f"{p.name}: {dtype}")
                params.append(None)
        for shape, axis, p, dim in expressions:
            shape[axis] = ast.unparse(self._shape_expr(dim, f"{p.name}.shape[{axis}] = {dim}"))
        for p, name, shape in deferred:
            layout, statement = self._symbolic_layout(p, name)
            layouts[_key(p)] = layout
            prologue.append(statement)
        specs = []
        index_extents = _index_extents(self.func)
        for p, shape in zip(self.func.params, params):
            name = self.namer.lookup(p)
            if shape is None:
                specs.append(ParamSpec(name, _dtype(p), None))
                continue
            if _lanes(str(p.dtype)) > 1:
                # A buffer of vectors (float32x4) is an array with a last axis of lanes, as allocations are.
                shape = list(shape) + [_lanes(str(p.dtype))]
            layout = layouts.get(_key(p))
            strides, offset = layout if layout is not None else (None, 0)
            extent = index_extents.get(_key(p))
            if extent is not None and not isinstance(extent, int):
                extent = self._extent_text(extent)
            specs.append(ParamSpec(name, str(p.dtype), tuple(shape), strides=strides, elem_offset=offset,
                                   index_extent=extent))
        return args, prologue, specs

    def _extent_text(self, extent):
        """The text of a symbolic ``index_extent``: a size that a plain dimension defines (``n``), or an
        expression over such sizes (``n * 12``: the length of a reshape that flattens a symbolic
        shape); None where the shape expressions cannot write it (the inputs then stay random)."""
        if _type_key(extent) == "ir.Var":
            return self.namer.lookup(extent)
        try:
            return ast.unparse(self._shape_expr(extent, f"index extent {extent}"))
        except UnsupportedConstructError:
            return None

    def _constant_layout(self, p) -> tuple[tuple[int, ...] | None, int] | None:
        """``(strides or None, elem_offset)`` of a parameter buffer whose strides and offset are
        constants with a constant shape (a strided view of its storage); None otherwise."""
        offset = p.elem_offset
        if offset is not None and _type_key(offset) != "ir.IntImm":
            return None
        if any(_type_key(d) != "ir.IntImm" for d in p.shape):
            return None
        strides = None
        if len(p.strides) and not _contiguous_strides(p):
            if any(_type_key(st) != "ir.IntImm" for st in p.strides):
                return None
            strides = tuple(int(st.value) for st in p.strides)
        elem_offset = int(offset.value) if offset is not None else 0
        if elem_offset < 0 or (strides is not None and any(st < 0 for st in strides)):
            raise UnsupportedConstructError("strided or offset parameter buffer", f"{p.name} with negative strides "
                                                                                  f"or offset")
        if _lanes(str(p.dtype)) > 1:
            raise UnsupportedConstructError("strided or offset parameter buffer", f"{p.name} of vectors")
        return strides, elem_offset

    @staticmethod
    def _layout_given(p, given: set) -> bool:
        """Whether the strides and ``elem_offset`` of parameter buffer ``p`` are expressions over the
        function's scalar parameters and sizes (``strides=[p, 1], elem_offset=q``): the caller gives
        the layout, as opposed to variables the arrays bind (``offset_factor``)."""
        exprs = [p.elem_offset] if p.elem_offset is not None else []
        if len(p.strides) and not _contiguous_strides(p):
            exprs += list(p.strides)
        found = []
        for e in exprs:
            walk_typed(e, ("ir.Var",), lambda n: found.append(n) if _type_key(n) == "ir.Var" else None)
        return bool(found) and all(_key(v) in given for v in found)

    def _symbolic_layout(self, p, name: str):
        """A parameter buffer whose strides or ``elem_offset`` are expressions over scalar parameters
        and sizes: ``(strides or None, elem_offset)`` as dimensions of its ParamSpec, and the
        statement naming its storage."""
        if _lanes(str(p.dtype)) > 1:
            raise UnsupportedConstructError("strided or offset parameter buffer", f"{p.name} of vectors")
        where = f"layout of parameter {p.name}"
        offset = p.elem_offset if p.elem_offset is not None else tirx.const(0, "int32")
        offset_ast = self._shape_expr(offset, where)
        strides_ast = None
        strides = None
        if len(p.strides) and not _contiguous_strides(p):
            strides_ast = [self._shape_expr(st, where) for st in p.strides]
            strides = tuple(a.value if isinstance(a, ast.Constant) else ast.unparse(a) for a in strides_ast)
            self.scope.overlapping.add(_key(p))  # known at run time only: stores keep the loop's order
        storage = self.namer.define_name(f"{name}_storage")
        self.scope.strided_storage[_key(p)] = storage
        self.scope.strided_storage[name] = storage
        elem_offset = offset_ast.value if isinstance(offset_ast, ast.Constant) else ast.unparse(offset_ast)
        call = self._call("param_storage", _name(name), offset_ast,
                          ast.Tuple(strides_ast, ast.Load()) if strides_ast is not None else ast.Constant(None))
        return (strides, elem_offset), ast.Assign([_store_name(storage)], call)

    def _strided_param(self, p, name: str, shape: list, strides, elem_offset: int) -> list[ast.stmt]:
        """A parameter buffer with constant strides or ``elem_offset``: the kernel receives the
        strided view; its storage from the data pointer on (what ``buffer_data`` and flattened
        views address, offset included) is ``<name>_storage``."""
        steps = strides if strides is not None else tuple(
            int(np.prod(shape[axis + 1:], dtype=np.int64)) for axis in range(len(shape)))
        storage = self.namer.define_name(f"{name}_storage")
        self.scope.strided_storage[_key(p)] = storage
        self.scope.strided_storage[name] = storage
        if not _injective(shape, steps):
            self.scope.overlapping.add(_key(p))
        return [ast.Assign([_store_name(storage)], self._call(
            "param_storage", _name(name), ast.Constant(elem_offset), ast.Constant(steps)))]

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
            self.scope.var_kinds[_key(offset)] = ("py", _dtype(offset), False)
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
                    self.scope.var_kinds[_key(stride)] = ("py", _dtype(stride), False)
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
        if key == "ir.FloatImm":  # a resize by a float scale: int64(float32(2.0) * float32(h))
            return ast.Call(_np(_scalar_dtype(_dtype(dim))), [ast.Constant(float(dim.value))], [])
        if key == "prim.Cast":
            return self._shape_cast(dim, where)
        if key in self.SHAPE_FLOAT_OPS and _is_float(_dtype(dim)):  # numpy scalars: rounded in the dtype
            return ast.BinOp(self._shape_expr(dim.a, where), self.SHAPE_FLOAT_OPS[key](),
                             self._shape_expr(dim.b, where))
        if key in self.SHAPE_OPS and not _is_float(_dtype(dim)):
            if key in ("prim.Div", "prim.Mod") and not self.analyzer.can_prove(
                    tirx.all(dim.a >= 0, dim.b > 0)):
                raise UnsupportedConstructError("buffer shape expression", f"{where}: truncating division")
            return ast.BinOp(self._shape_expr(dim.a, where), self.SHAPE_OPS[key](), self._shape_expr(dim.b, where))
        if key in ("prim.Min", "prim.Max"):  # a dynamic strided slice: (min(100, n) + 1 - min(1, n)) // 2
            return ast.Call(_name(key[5:].lower()), [self._shape_expr(dim.a, where), self._shape_expr(dim.b, where)], [])
        if key == "prim.Select" or (key == "ir.Call"
                                    and str(getattr(dim.op, "name", "")).split(".")[-1] == "if_then_else"):
            # a ceil-mode pool over a symbolic length: if_then_else(n % 2 == 0, n // 2, n // 2 + 1)
            cond, a, b = (dim.condition, dim.true_value, dim.false_value) if key == "prim.Select" else dim.args
            return ast.IfExp(self._shape_cond(cond, where), self._shape_expr(a, where), self._shape_expr(b, where))
        raise UnsupportedConstructError("buffer shape expression", where)

    #: Float operators a buffer shape expression may use (on numpy scalars of the operation's dtype).
    SHAPE_FLOAT_OPS = {"prim.Add": ast.Add, "prim.Sub": ast.Sub, "prim.Mul": ast.Mult, "prim.Div": ast.Div}

    def _shape_cast(self, cast, where: str) -> ast.expr:
        """A cast in a shape expression, as TVM computes it: to a float dtype rounds to it (a numpy
        scalar of that dtype), from a float to an integer truncates toward zero (``fptosi``), and
        between integer dtypes a size keeps its value."""
        dtype, source = _scalar_dtype(_dtype(cast)), _dtype(cast.value)
        value = self._shape_expr(cast.value, where)
        if _is_float(dtype):
            return ast.Call(_np(dtype), [value], [])
        if _is_int(dtype) and _is_float(source):
            return ast.Call(_name("int"), [value], [])
        if _is_int(dtype) and _is_int(source):
            return value
        raise UnsupportedConstructError("buffer shape expression", f"{where}: a cast from {source} to {dtype}")

    #: Comparisons a buffer shape expression's condition may use.
    SHAPE_COMPARES = {"prim.EQ": ast.Eq, "prim.NE": ast.NotEq, "prim.LT": ast.Lt, "prim.LE": ast.LtE,
                      "prim.GT": ast.Gt, "prim.GE": ast.GtE}

    def _shape_cond(self, cond, where: str) -> ast.expr:
        """The condition of a conditional buffer dimension, as Python over the sizes."""
        key = _type_key(cond)
        if key in self.SHAPE_COMPARES:
            return ast.Compare(self._shape_expr(cond.a, where), [self.SHAPE_COMPARES[key]()],
                               [self._shape_expr(cond.b, where)])
        if key in ("prim.And", "prim.Or"):
            return ast.BoolOp(ast.And() if key == "prim.And" else ast.Or(),
                              [self._shape_cond(cond.a, where), self._shape_cond(cond.b, where)])
        if key == "prim.Not":
            return ast.UnaryOp(ast.Not(), self._shape_cond(cond.a, where))
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
        if not self.hoisting and key not in ("ir.IntImm", "ir.FloatImm") and self._constant_math(expr):
            self.hoisting = True
            try:
                return self._hoisted_constant(expr, self.visit_expr)
            finally:
                self.hoisting = False
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

    def _use(self, helper: str) -> ast.expr:
        self.scope.helpers.add(helper)
        return _name(helper)

    def _call(self, helper: str, *args: ast.expr, kw: dict | None = None) -> ast.expr:
        keywords = [ast.keyword(k, v) for k, v in (kw or {}).items()]
        return ast.Call(self._use(helper), list(args), keywords)



#: Index arithmetic that clamps a value into range (``T.max(T.min(i, 49), 0)``).
_CLAMPS = ("prim.Min", "prim.Max")
#: Shifts, whose count must lie in [0, bits of the shifted value).
_SHIFTS = ("prim.LShift", "prim.RShift", "tirx.shift_left", "tirx.shift_right")


def _without_casts(expr):
    """``expr`` under any casts around it."""
    while _type_key(expr) == "prim.Cast":
        expr = expr.value
    return expr


def _copies_of(func, params: set[int]) -> dict[int, int]:
    """Scratch buffers that only ever hold one of ``params``' values as they are (gather_nd's and
    scatter_nd's transposed indices, ``T_transpose[i, j] = indices[j, i]``; casts between integer
    types allowed), by key: the parameter, followed through chains of such copies."""
    sources: dict[int, set] = {}

    def visit(node):
        if _type_key(node) != "tirx.BufferStore" or _key(node.buffer) in params:
            return
        value = node.value
        while _type_key(value) == "prim.Cast" and _is_int(_dtype(value)):
            value = value.value
        copied = _key(value.source) if _type_key(value) == "ir.TensorLoad" and _is_int(_dtype(value)) else None
        sources.setdefault(_key(node.buffer), set()).add(copied)  # None: a store of anything else

    walk_typed(func.body, ("tirx.BufferStore",), visit)
    alias: dict[int, int] = {}
    for _ in range(len(sources)):  # each round follows one more link of a chain
        found = {buf: next(iter(srcs)) for buf, srcs in sources.items() if len(srcs) == 1 and None not in srcs}
        resolved = {buf: src if src in params else alias.get(src) for buf, src in found.items()}
        resolved = {buf: src for buf, src in resolved.items() if src is not None}
        if resolved == alias:
            break
        alias = resolved
    return alias


def _index_extents(func) -> dict[int, object]:
    """Integer input buffers whose elements index a dimension of another buffer as they are (an
    embedding's token ids, a gather's indices), by key: the smallest extent they index (a constant,
    a size var such as ``batch`` in ``(batch, vocab)``, an expression such as ``n * 12``, or the
    ``min`` of such where they index several); else, where they
    take part in an index expression that does not clamp them (``idx + (idx < 0) * 6``), the smallest
    extent there, constant or symbolic, likewise; the row counts of ``argsort_nms``: [0, row length].
    Random inputs for them lie in [0, extent): values outside would make the kernel read outside
    its buffers, so an emulation (or a native run) on them would test nothing."""
    params = {_key(p) for p in func.params if tirx.is_buffer_var(p) and _is_int(str(p.dtype))
              and _lanes(str(p.dtype)) == 1}
    if not params:
        return {}
    extents: dict[int, int] = {}
    alias = _copies_of(func, params)

    def source_of(load) -> int:
        return alias.get(_key(load.source), _key(load.source))

    def visit(node):
        shift = _type_key(node) in _SHIFTS or (_type_key(node) == "ir.Call" and len(node.args) == 2
                                               and str(getattr(node.op, "name", "")) in _SHIFTS)
        if shift:
            # A shift count outside [0, bits) is undefined in LLVM (and a sanitizer error here): the
            # counts a kernel reads from an input (relax's right_shift of two tensors) lie within.
            shifted, count = (node.a, node.b) if _type_key(node) in _SHIFTS else node.args
            count = _without_casts(count)
            if _type_key(count) == "ir.TensorLoad" and source_of(count) in params:
                bits = tvm.runtime.DataType(_scalar_dtype(_dtype(shifted))).bits
                add(extents, source_of(count), tirx.IntImm("int64", bits))
            return
        if _type_key(node) == "ir.Call" and _packed_function(node) == "tvm.contrib.sort.argsort_nms":
            # argsort_nms(data, sort_num, out, axis, ...) sorts each row's first sort_num values: counts
            # past the sorted axis read past the row.
            data, counts, axis = node.args[1], node.args[2], node.args[4]
            owner = _buffer_of(counts.args[0]) if _type_key(counts) == "ir.Call" and counts.args else None
            count_key = alias.get(_key(owner), _key(owner)) if owner is not None else None
            if (count_key in params and _type_key(axis) == "ir.IntImm" and _type_key(data) == "ir.Call"
                    and _type_key(data.args[1]) == "ir.Call"):
                shape = data.args[1].args
                extent = shape[int(axis.value) % len(shape)]
                add(extents, count_key, extent + 1 if _type_key(extent) != "ir.IntImm" else int(extent.value) + 1)
            return
        if _type_key(node) not in ("ir.TensorLoad", "tirx.BufferStore"):
            return
        shape = getattr(node.source, "shape", None) if _type_key(node) == "ir.TensorLoad" else node.buffer.shape
        if shape is None or len(shape) != len(node.indices):
            return
        for index, extent in zip(node.indices, shape):
            index = _without_casts(index)
            if _type_key(index) == "ir.TensorLoad" and source_of(index) in params:
                add(extents, source_of(index), extent)
            else:  # the value inside arithmetic: `idx + (idx < 0) * 6`, `i * 6 + idx` of a fused index
                inner: list = []
                walk_typed(index, (*_CLAMPS, "ir.TensorLoad"), lambda n: inner.append(n) if _type_key(n) in _CLAMPS or (
                    _type_key(n) == "ir.TensorLoad" and source_of(n) in params) else None)
                if any(_type_key(n) in _CLAMPS for n in inner):
                    continue  # clamped into range: any value is valid, and random ones test the clamp
                for load in inner:
                    add(nested, source_of(load), extent)

    def add(found: dict, key: int, extent) -> None:
        known = found.get(key)
        if _type_key(extent) == "ir.IntImm":
            extent = int(extent.value)
        if known is None or (isinstance(known, int) and isinstance(extent, int)):
            found[key] = extent if known is None else min(known, extent)
        elif not isinstance(extent, int) and tvm_ffi.structural_equal(known, extent):
            pass
        else:
            # Indices of several dimensions, one symbolic at least (gather_nd's (k, 2) tuples into
            # (n, m, 4), or into (n, 8)): the smallest of them, min(n, m) or min(8, n), as an
            # expression of sizes (a symbolic one alone: the size var of ``batch`` in ``(batch, vocab)``).
            a, b = (known, extent) if not isinstance(known, int) else (extent, known)
            if isinstance(b, int):
                b = tirx.IntImm(_dtype(a), b)
            if _dtype(a) == _dtype(b):
                found[key] = tirx.min(a, b)

    # Values that index inside arithmetic (scatter's and gather's negative-index wrap) count only where
    # none indexes as it is: their range is then the smallest extent they take part in, symbolic ones
    # included (scatter_elements into (b, m) stores at `(i * m + (idx + (idx < 0) * m)) // m, ... % m`:
    # min(b, m); without it the indices stayed random and the native reference was refused).
    nested: dict[int, object] = {}
    walk_typed(func.body, ("prim.LShift", "prim.RShift", "ir.Call", "ir.TensorLoad", "tirx.BufferStore"), visit)
    return {**nested, **extents}


_HEADER_START = '"""Hybrid script of '
_HEADER_END = '\n"""\n'


def program_text(source: str) -> str:
    """``source`` (a generated script) without its header docstring, which names the stage and the
    loops the fast plan vectorised: scripts with the same program text compute the same thing, so a
    stage whose program repeats an earlier stage's need not run again."""
    if source.startswith(_HEADER_START):
        end = source.find(_HEADER_END)
        if end >= 0:
            return source[end + len(_HEADER_END):]
    return source


def generate_kernel(func, function_name: str, stage: str | None = None, mode: str = "exact",
                    progress: bool = False, module_functions: dict | None = None,
                    check: bool = False, synced: bool = False, sizes: dict | None = None,
                    exact_reason: str = "") -> GeneratedKernel:
    """Generate the hybrid script of ``func`` (see :class:`HybridCodegen`).

    ``mode="exact"`` interprets the IR as written; ``mode="fast"`` runs loops whose iterations are
    provably independent as numpy array operations (bit-identical results).  ``progress=True`` makes
    the variant that is executed: each outermost loop iteration calls ``__progress__``.

    Fast mode never loses to exact: when the serial run is cheaper than the lanes analysis would be
    (:func:`~.cost.exact_plan_reason`) or than the planned lanes (:func:`~.cost.lanes_lose_reason`),
    it is the exact script, and its plan says why.  ``sizes``
    (name -> value) binds symbolic extents for that estimate: the script is then for those sizes.
    ``exact_reason``: the caller already decided that fast mode runs the exact plan, for this reason.
    """
    with cyclic_gc_paused():
        return _generate_kernel(func, function_name, stage, mode, progress, module_functions, check, synced,
                                sizes, exact_reason)


def _generate_kernel(func, function_name, stage, mode, progress, module_functions, check, synced, sizes,
                     exact_reason) -> GeneratedKernel:
    limit = None
    if mode != "fast" or check:
        exact_reason = ""
    elif not exact_reason:
        exact_reason, limit = exact_plan_decision(func, module_functions, sizes)
    emitted = "exact" if exact_reason else mode
    as_written, interchanges = func, []
    if mode == "fast" and not check and not exact_reason:
        func, interchanges = reductions_inside(func)  # the fast plan's nest order; the exact plan's is the IR's

    def emit(plan: EmulationPlan) -> GeneratedKernel:
        plan.interchanges = list(interchanges) if emitted == "fast" else []
        return HybridCodegen(func if emitted == "fast" else as_written, function_name, stage, emitted, progress,
                             module_functions, check, synced, plan=plan).generate()

    try:
        generated, plan = emit_with_plan(func, mode, check, emit, exact_reason, limit)
    except AnalysisOutgrown as exc:  # stopped while planning, before any emission of its plan
        exact_reason, emitted = analysis_outgrown_reason(exc, limit), "exact"
        generated, plan = emit_with_plan(as_written, mode, check, emit, exact_reason)
    if mode == "fast" and not check and not exact_reason:
        exact_reason = lanes_lose_reason(func, plan, module_functions, sizes)
        if exact_reason:  # the lanes were planned and emitted, and would lose: the exact plan
            emitted = "exact"
            generated, _ = emit_with_plan(as_written, mode, check, emit, exact_reason)
        elif not sizes:
            generated.plan.per_call = per_call_rule(func, module_functions)
    return generated


def kernel_signature(func, function_name: str) -> list[ParamSpec]:
    """The parameters of ``func`` as the hybrid script takes them (whether or not its body translates)."""
    return HybridCodegen(func, function_name)._signature()[2]
