"""A captured stage: the module after one pass, and the kernels it runs.

:class:`Stage` owns one stage's views (TVMScript, whether the pass changed the IR, its PrimFuncs),
its hybrid code generation (exact and fast scripts, the emulation plan, why it cannot be emulated)
and loading its kernels with progress hooks (one callback per calling thread, rate-limited in deep
loops: :data:`PROGRESS_INTERVAL`).  :func:`_run_kernel` runs a loaded kernel and turns its failures
into the package's errors.  A stage reads its :class:`~tvm_hybrid_nb.module.HybridModule` (the
owner) duck-typed, so this module sits below :mod:`tvm_hybrid_nb.module` and imports nothing of it.
"""
from __future__ import annotations

import dataclasses
import linecache
import re
import threading
import time
import weakref
from typing import Callable

import numpy as np
import tvm
import tvm_ffi

from . import capture as _capture
from .codegen import generate_kernel
from .codegen.cost import exact_plan_reason, lanes_lose_reason, min_max_nodes, serial_cost, sizes_specialize_reason
from .codegen.names import GeneratedKernel, _dtype
from .codegen.tensorcore import FLOAT_MMA_ATTR, wmma_as_computed
from .errors import (EmulationError, HybridError, InsufficientMemoryError, StageNotEmulatableError,
                     UnsupportedConstructError)
from .loader import hybrid_line, load_kernel
from .runtime import OUT_OF_RANGE_CONVERSIONS
from .specialize import with_sizes

EMULATION_MODES = ("exact", "fast")
#: The name under which a script calls its progress hook (a dunder: user names never are one).
_PROGRESS_HOOK = "__progress__"
#: The name under which a script finds the record of out-of-range float → int conversions (runtime).
_OUT_OF_RANGE_HOOK = "__out_of_range__"
#: A function-attribute line of a printed module (see :meth:`Stage._program_key`).
_FUNC_ATTR_LINE = re.compile(r"^[ \t]*T\.func_attr\(.*\)[ \t]*\n", re.M)
#: Seconds between two progress reports of loops nested more than two deep (the outermost loop and
#: the first inside it report every iteration).
PROGRESS_INTERVAL = 0.05


def bf16_as_computed(func, target):
    """``func`` with its bfloat16 arithmetic as ``target`` computes it.

    A target without bfloat16 arithmetic (llvm) computes it as TVM's ``BF16ComputeLegalize`` rewrites
    it: in float32, bfloat16 allocations held as float32, rounded to nearest even only where a value is
    stored to a bfloat16 parameter (a cast to bfloat16 inside an expression does not round).  The
    pipeline runs that pass after ``FlattenBuffer``, but the native kernel of every earlier stage would
    compute the same, so every stage is emulated through it; the pass itself decides, leaving
    functions for a target with bfloat16 arithmetic (cuda sm_80) as they are.  Functions without
    bfloat16 are returned as they are."""
    if "bfloat16" not in func.script(show_meta=False):
        return func
    own = func.attrs["target"] if "target" in func.attrs else target
    if own is None or _has_bf16_arithmetic(own):
        return func
    legal = tvm.tirx.transform.BF16ComputeLegalize()(
        tvm.IRModule({"main": _hide_array_dtypes(_sblock_bf16_buffers_as_float32(func)).with_attr("target", own)}))
    legal = _show_array_dtypes(legal["main"])
    return legal if "target" in func.attrs else legal.without_attr("target")


#: Intrinsics whose lowering for llvm (TVM's ``LowerIntrin``, after the emulated stages) is a formula of
#: other operations in the operand's dtype rather than a library call: ``tanh`` as
#: ``(1 - exp(-2x)) / (1 + exp(-2x))`` (1-2 float16 ulps from the true value, exactly -1 from x = -4.5
#: in float16), ``sigmoid`` as ``1 / (1 + exp(-x))``, ``rsqrt`` as ``1 / sqrt(x)``, ``tan`` as
#: ``sin / cos``, ``atanh`` through two logs, ``exp10`` through ``exp``.
LLVM_FORMULA_INTRINSICS = ("tirx.tanh", "tirx.sigmoid", "tirx.rsqrt", "tirx.tan", "tirx.atanh", "tirx.exp10")
#: The rules ``LowerIntrin`` tries for an llvm target, in its order; the first that applies decides.
_LOWERING_RULES = ("llvm.FLowerIntrinsic", "llvm.FLegalize", "default.FLowerIntrinsic", "default.FLegalize")


def intrinsics_as_computed(func, target):
    """``func`` with the intrinsics of :data:`LLVM_FORMULA_INTRINSICS` rewritten as TVM's own rules
    (:data:`_LOWERING_RULES`) rewrite them for an llvm target, where the rule that decides gives a
    formula (not a library call); functions for other targets (or none known) are returned as they are."""
    own = func.attrs["target"] if "target" in func.attrs else target
    if own is None or str(own.kind.name) != "llvm":
        return func

    def lower(call):
        name = getattr(call.op, "name", "")
        if name not in LLVM_FORMULA_INTRINSICS:
            return call
        op = tvm.ir.Op.get(name)
        for attr in _LOWERING_RULES:
            rule = op.get_attr(attr)
            lowered = None if rule is None else rule(call)
            if lowered is not None:
                text = str(lowered)
                return call if any(c in text for c in ("call_pure_extern", "call_extern", "call_llvm")) else lowered
        return call

    return tvm_ffi.structural_map(func, (tvm.ir.Call, lower))


#: Stands for a bfloat16 dtype hint of ``tvm_stack_make_array`` while BF16ComputeLegalize runs.
_HIDDEN_BF16 = 0xBF16


def _hide_array_dtypes(func):
    """``func`` with the bfloat16 dtype hints of ``tvm_stack_make_array`` (the arrays handed to
    ``tvm.contrib.sort``) as a uint16 marker: BF16ComputeLegalize makes them float32, so the library
    reads a bfloat16 array as float32 (twice its size: a TVM bug of the pass's stage, not of the
    earlier stages, whose kernel hands over bfloat16)."""
    from tvm import tirx

    def hide(call):
        if getattr(call.op, "name", "") != "tirx.tvm_stack_make_array" or str(call.args[4].ty) != "bfloat16":
            return call
        args = list(call.args)
        args[4] = tirx.const(_HIDDEN_BF16, "uint16")
        return tvm.ir.Call(call.op, args, ret_ty=call.ty)

    return tvm_ffi.structural_map(func, (tvm.ir.Call, hide))


def _show_array_dtypes(func):
    """:func:`_hide_array_dtypes` undone."""
    from tvm import tirx

    def show(call):
        if getattr(call.op, "name", "") != "tirx.tvm_stack_make_array" or str(call.args[4].ty) != "uint16" \
                or int(call.args[4].value) != _HIDDEN_BF16:
            return call
        args = list(call.args)
        args[4] = tirx.const(0, "bfloat16")
        return tvm.ir.Call(call.op, args, ret_ty=call.ty)

    return tvm_ffi.structural_map(func, (tvm.ir.Call, show))


_BF16_ARITHMETIC: dict[str, bool] = {}


def _has_bf16_arithmetic(target) -> bool:
    """Whether ``target`` computes bfloat16 as bfloat16: whether ``BF16ComputeLegalize`` leaves a
    bfloat16 addition for it as it is (TVM's own decision: cuda from sm_80 on, not llvm)."""
    key = str(target)
    if key not in _BF16_ARITHMETIC:
        from tvm import te

        a = te.placeholder((2,), "bfloat16", name="a")
        b = te.compute((2,), lambda i: a[i] + a[i], name="b")
        probe = te.create_prim_func([a, b]).with_attr("target", target)
        legal = tvm.tirx.transform.BF16ComputeLegalize()(tvm.IRModule({"main": probe}))["main"]
        _BF16_ARITHMETIC[key] = tvm_ffi.structural_equal(legal, probe)
    return _BF16_ARITHMETIC[key]


def _sblock_bf16_buffers_as_float32(func):
    """``func`` with the bfloat16 buffers that its sblocks allocate held as float32, as
    ``BF16ComputeLegalize`` holds the allocations it meets once the pipeline has lowered the sblocks
    (it leaves sblock allocations as they are)."""
    from tvm import tirx

    old, load_types = [], []

    def visit(node):
        if type(node).__name__ == "TensorLoad" and not load_types:
            load_types.append(type(node))
        for buf in getattr(node, "alloc_buffers", None) or ():
            if str(buf.ty.dtype) == "bfloat16" and not any(buf.same_as(b) for b in old):
                old.append(buf)

    tvm_ffi.structural_walk(func.body, visit, order="post")
    if not old:
        return func
    new = [tirx.decl_buffer(b.ty.shape, "float32", b.name, strides=list(b.ty.strides) or None,
                            scope=b.ty.storage_scope) for b in old]

    def buffer(var):
        return next((n for o, n in zip(old, new) if var.same_as(o)), var)

    def load(node):  # a load of a remapped buffer reads float32
        if str(node.ty) != "float32" and any(node.source.same_as(n) for n in new):
            return tirx.BufferLoad(node.source, node.indices)
        return node

    retyped = tvm_ffi.structural_map(func, [(tvm.ir.Var, buffer)] + [(t, load) for t in load_types])
    return tvm_ffi.structural_map(retyped, [(t, _float32_operands) for t in _ARITHMETIC]
                                  + [(tirx.BufferStore, _stored_as_buffer_type)])


def _as_float32(expr):
    return tvm.tirx.Cast("float32", expr) if _dtype(expr) == "bfloat16" else expr


def _float32_operands(node):
    """An arithmetic node over a float32 load of a held-as-float32 buffer and a bfloat16 value, or
    still typed bfloat16 over float32 operands: rebuilt in float32, as ``BF16ComputeLegalize``
    computes it (a bfloat16 operand widens exactly), its type recomputed from the operands."""
    operands = [node.a, node.b] if hasattr(node, "b") else [node.true_value, node.false_value]
    kinds = {_dtype(x) for x in operands}
    if "float32" not in kinds or not ({"bfloat16"} & (kinds | {_dtype(node)})):
        return node
    a, b = (_as_float32(x) for x in operands)
    return type(node)(node.condition, a, b) if isinstance(node, tvm.tirx.Select) else type(node)(a, b)


def _stored_as_buffer_type(node):
    """A store whose value's type is not its buffer's after the retyping: a float32 value into a
    bfloat16 parameter rounds (the native store's rounding), a bfloat16 one into a held-as-float32
    buffer widens exactly."""
    want, got = _dtype(node.buffer), _dtype(node.value)
    if want == got or {want, got} != {"float32", "bfloat16"}:
        return node
    return tvm.tirx.BufferStore(node.buffer, tvm.tirx.Cast(want, node.value), node.indices)


#: The float operations whose operands :func:`_float32_operands` makes agree after the retyping.
_ARITHMETIC = (tvm.tirx.Add, tvm.tirx.Sub, tvm.tirx.Mul, tvm.tirx.Div, tvm.tirx.Min, tvm.tirx.Max,
               tvm.tirx.EQ, tvm.tirx.NE, tvm.tirx.LT, tvm.tirx.LE, tvm.tirx.GT, tvm.tirx.GE, tvm.tirx.Select)


class Stage:
    """The module after one pass (``index`` 0 is the input).  Text is rendered on first use.

    Attributes
    ----------
    index : int
    name : str
        Pass name, e.g. ``"tirx.FlattenBuffer"``; ``"input"`` for stage 0.
    seconds : float
        Time the pass took.
    mod : tvm.IRModule
        Snapshot of the module after the pass.
    """

    def __init__(self, owner, index: int, name: str, mod, seconds: float):
        self._owner = owner  # the HybridModule, read duck-typed: this module sits below tvm_hybrid_nb.module
        self.index = index
        self.name = name
        self.mod = mod
        self.seconds = seconds
        self._changed: bool | None = None
        self._script: str | None = None
        self._generated = None
        self._reason: str | None = None
        self._kernels: dict[str, Callable] = {}
        self._fast = None
        self._symbolic_cost: bool | None = None
        self._sizes_reason: str | None = None  # see _planned_per_sizes
        self._min_max: int | None = None
        #: Fast mode's decision per binding of the symbolic sizes: why it runs the exact plan ("" for lanes).
        self._exact_reasons: dict[tuple, str] = {}
        self._computed: tuple | None = None  # (computed_function, computed_module_functions)
        # Threads may emulate one stage at once: code generation runs once, under this lock.
        self._lock = threading.RLock()

    @property
    def short_name(self) -> str:
        """The pass name without its namespace (``FlattenBuffer``)."""
        return self.name.rsplit(".", 1)[-1]

    @property
    def number(self) -> int:
        """Position in the whole pipeline: ``index`` plus the module's ``first_index`` (resumed modules)."""
        return self.index + self._owner.first_index

    @property
    def label(self) -> str:
        return f"{self.number} {self.short_name}"

    @property
    def changed(self) -> bool:
        """Whether the printed IR (TVMScript) differs from the previous stage's, which is what a diff
        shows; stage 0 counts as changed.  A pass that rebuilds nodes the printer shows the same
        (``tirx.FP8StorageLegalize`` does) counts as unchanged: see :attr:`structurally_changed`."""
        if self._changed is None:
            if self.index == 0:
                self._changed = True
            else:
                prev = self._owner.stages[self.index - 1]
                self._changed = self.structurally_changed and prev.script != self.script
        return self._changed

    @property
    def structurally_changed(self) -> bool:
        """Whether the module differs structurally (``tvm_ffi.structural_equal``) from the previous stage."""
        if self.index == 0:
            return True
        return not tvm_ffi.structural_equal(self._owner.stages[self.index - 1].mod, self.mod)

    @property
    def script(self) -> str:
        """TVMScript of the module at this stage."""
        if self._script is None:
            self._script = self.mod.script()
        return self._script

    @property
    def function(self):
        """The kernel's PrimFunc at this stage, or None when the stage no longer has it."""
        for gv, func in self.mod.functions.items():
            if gv.name_hint == self._owner.func_name:
                return func
        return None

    @property
    def module_functions(self) -> dict:
        """The stage's other PrimFuncs by name (device kernels that the entry function launches)."""
        return {gv.name_hint: f for gv, f in self.mod.functions.items()
                if isinstance(f, tvm.tirx.PrimFunc) and gv.name_hint != self._owner.func_name}

    @property
    def computed_function(self):
        """:attr:`function` as its target computes it (:func:`bf16_as_computed`,
        :func:`intrinsics_as_computed`): what is emulated."""
        return self._computed_functions()[0]

    @property
    def computed_module_functions(self) -> dict:
        """:attr:`module_functions` as their targets compute them (:func:`bf16_as_computed`)."""
        return dict(self._computed_functions()[1])

    def _computed_functions(self) -> tuple:
        # Once per stage: every plan, kernel and cost estimate of the stage reads them.
        with self._lock:
            if self._computed is None:
                func, others = self.function, self.module_functions
                if any(text in self.script for text in ("_sync(", "tvm_fill_fragment", "simdgroup_")):
                    func = None if func is None else wmma_as_computed(func)
                    others = {name: wmma_as_computed(f) for name, f in others.items()}
                target = getattr(self._owner, "target", None)
                if "bfloat16" in self.script:
                    func = None if func is None else bf16_as_computed(func, target)
                    others = {name: bf16_as_computed(f, target) for name, f in others.items()}
                if any(f"T.{name[5:]}(" in self.script for name in LLVM_FORMULA_INTRINSICS):
                    func = None if func is None else intrinsics_as_computed(func, target)
                    others = {name: intrinsics_as_computed(f, target) for name, f in others.items()}
                self._computed = (func, others)
            return self._computed

    def _generate_kernel(self, bound_sizes: tuple = (), **options) -> GeneratedKernel:
        """:func:`~tvm_hybrid_nb.codegen.generate_kernel` of this stage with ``options``; with
        ``bound_sizes`` ((name, value) pairs), of its functions with those symbolic sizes bound
        (:func:`_planned_per_sizes`).  A stage whose
        module differs from an earlier stage's only in function attributes that the code generator does
        not read (BindTarget's target, AnnotateEntryFunc's entry mark) gets that stage's script under its
        own label: code generation is most of a stage's cost."""
        generated_by_program = getattr(self._owner, "_generated_by_program", None)
        key = None
        if generated_by_program is not None:
            key = (self._program_key(), bound_sizes,
                   tuple(sorted((name, tuple(sorted(value.items())) if isinstance(value, dict)
                                 else value) for name, value in options.items())))
            earlier = generated_by_program.get(key)
            if earlier is not None:
                label, generated = earlier
                return dataclasses.replace(generated, source=generated.source.replace(
                    f" at stage {label}.", f" at stage {self.label}.", 1))
        func, others = self.computed_function, self.computed_module_functions
        if bound_sizes:
            sizes = dict(bound_sizes)
            func, others = with_sizes(func, sizes), {name: with_sizes(f, sizes) for name, f in others.items()}
            if func is None or None in others.values():
                raise _SizesNotBound(bound_sizes)
        generated = generate_kernel(func, self._owner.name, stage=self.label, module_functions=others, **options)
        if bound_sizes:
            generated.plan.per_call = ("planned for this call's sizes " + ", ".join(
                f"{name} = {value}" for name, value in bound_sizes) + ": " + self._sizes_reason)
        if key is not None:
            generated_by_program[key] = (self.label, generated)
        return generated

    def _program_key(self) -> str:
        """The module's script without its function attributes, but with the one the code generator
        reads (:data:`~tvm_hybrid_nb.codegen.tensorcore.FLOAT_MMA_ATTR`, a header note)."""
        functions = [self.computed_function, *self.computed_module_functions.values()]
        mma = any(f is not None and f.attrs is not None and FLOAT_MMA_ATTR in f.attrs for f in functions)
        return f"{mma}\n" + _FUNC_ATTR_LINE.sub("", self.script)

    def _generate(self):
        with self._lock:
            return self._generate_locked()

    def _static_reason(self) -> str | None:
        """Why this stage has no kernel to emulate, known without generating code."""
        packed = self._owner.packed_api_index
        if packed is not None and self.index >= packed:
            return (f"after {_capture.PACKED_API_PASS} the function is a packed-API wrapper "
                    f"around the kernel, not the kernel")
        if self.function is None:
            return f"the module has no function {self._owner.func_name!r} at this stage"
        return None

    def _generate_locked(self):
        if self._generated is None and self._reason is None:
            self._reason = self._static_reason()
            if self._reason is None:
                try:
                    generated = self._generate_kernel()
                    compile(generated.source, f"<hybrid:{self.label}>", "exec")  # emulatable means it loads
                    self._generated = generated
                except UnsupportedConstructError as exc:
                    self._reason = str(exc)
                except Exception as exc:  # a generator bug must not take the session down
                    self._reason = f"hybrid code generation failed at stage {self.label}: {type(exc).__name__}: {exc}"
        return self._generated

    @property
    def emulatable(self) -> bool:
        if self._kernels and self._reason is None:
            return True  # a kernel was generated: the constructs are supported (see kernel())
        return self._generate() is not None

    @property
    def reason(self) -> str | None:
        """Why this stage cannot be emulated (None when it can)."""
        self._generate()
        return self._reason

    @property
    def source(self) -> str | None:
        """Hybrid Python source of the kernel at this stage, or None when not emulatable."""
        gen = self._generate()
        return gen.source if gen is not None else None

    def fast_source(self) -> str:
        """The fast-mode script: provably independent loops run as numpy array operations."""
        if not self.emulatable:
            raise StageNotEmulatableError(f"stage {self.label} cannot be emulated: {self.reason}")
        with self._lock:
            if self._fast is None:
                self._fast = self._generate_kernel(mode="fast")
        return self._fast.source

    def plan(self, mode: str = "fast", check: bool = False):
        """How each loop of this stage's kernel runs in the ``mode`` script, and why.

        Returns
        -------
        tvm_hybrid_nb.codegen.plan.EmulationPlan
            ``.summary()`` (one line), ``.text()`` (one line a loop), ``.as_dict()`` (JSON-ready) and
            ``.decisions`` (each loop's ``strategy`` and ``reason``).
        """
        if mode not in EMULATION_MODES:
            raise ValueError(f"mode must be one of {EMULATION_MODES}, got {mode!r}")
        if not self.emulatable:
            raise StageNotEmulatableError(f"stage {self.label} cannot be emulated: {self.reason}")
        if mode == "fast" and not check:
            self.fast_source()
            return self._fast.plan
        if mode == "exact" and not check:
            return self._generated.plan
        return self._generate_kernel(mode=mode, check=check).plan

    def kernel(self, mode: str = "exact", check: bool = False, sizes: dict | None = None) -> Callable:
        """The executed function of this stage: its hybrid source (``mode`` "exact" or "fast") with
        progress hooks in the outermost loops.  Call it as ``kernel(*arrays, progress=callback)``.

        ``sizes`` (symbolic size name -> value, from the arguments): in fast mode, a kernel whose loop
        extents are symbolic runs the exact plan when at these sizes its serial run is cheaper than
        the lanes analysis (see :func:`~tvm_hybrid_nb.codegen.cost.exact_plan_reason`) or than the
        planned lanes (:func:`~tvm_hybrid_nb.codegen.cost.lanes_lose_reason`).
        """
        if self._generated is None and self._reason is None and self._static_reason() is None:
            # The kernel asked for decides: generating the exact script first only to learn that
            # the stage is emulatable would cost a fifth of a GPU stage's code generation.
            try:
                return self._kernel(mode, check, sizes)
            except Exception:
                if self.emulatable:
                    raise  # this kernel's own failure (a construct the exact script does not have)
        if not self.emulatable:
            raise StageNotEmulatableError(f"stage {self.label} cannot be emulated: {self.reason}")
        return self._kernel(mode, check, sizes)

    def _kernel(self, mode: str, check: bool, sizes: dict | None) -> Callable:
        key: tuple = (mode, check)
        reason = ""
        bound = tuple(sorted((str(k), int(v)) for k, v in sizes.items())) if sizes else ()
        if mode == "fast" and self._planned_per_sizes():
            if bound:
                try:
                    return self._cached_kernel((mode, check, "sizes", bound), mode, check, bound_sizes=bound)
                except _SizesNotBound:  # TVM's specialize refused them: the script for every size
                    pass
            if not check:  # the script for every size: the exact plan, its analysis could not end
                return self._cached_kernel(key, mode, check, exact_reason=(
                    self._sizes_reason + ": each call is planned for the sizes of its arguments"))
        if bound and mode == "fast" and not check and self._cost_is_symbolic():
            sizes = dict(bound)
            reason = self._exact_reasons.get(bound)
            if reason is None:  # decided once per binding: the cost walks take up to 60 ms a call
                func, functions = self.computed_function, self.computed_module_functions
                reason = (exact_plan_reason(func, functions, sizes)
                          or lanes_lose_reason(func, self._kernel(mode, check, None).plan, functions, sizes))
                with self._lock:
                    self._exact_reasons[bound] = reason
            if reason:
                key = (mode, check, bound)  # the exact plan, for these sizes
            else:
                sizes = None
        else:
            sizes = None
        return self._cached_kernel(key, mode, check, sizes, reason)

    def _cached_kernel(self, key: tuple, *load_args, **load_options) -> Callable:
        """The kernel under ``key``, loaded once (:func:`_load_kernel` with these arguments)."""
        with self._lock:
            if key not in self._kernels:
                self._kernels[key] = self._load_kernel(*load_args, **load_options)
            return self._kernels[key]

    def _planned_per_sizes(self) -> bool:
        """Whether fast mode plans this stage for the sizes of each call (symbolic sizes in too many
        nested mins and maxes to plan for every size: :func:`~.codegen.cost.sizes_specialize_reason`)."""
        with self._lock:
            if self._sizes_reason is None:
                stages = getattr(self._owner, "stages", None) or [self]
                nodes = max(stage._min_max_nodes() for stage in stages[:self.index + 1] if stage.function is not None)
                self._sizes_reason = sizes_specialize_reason(self.computed_function, self.computed_module_functions,
                                                             nodes)
        return bool(self._sizes_reason)

    def _min_max_nodes(self) -> int:
        if self._min_max is None:
            self._min_max = min_max_nodes(self.function, self.module_functions)
        return self._min_max

    def _cost_is_symbolic(self) -> bool:
        """Whether the serial run's cost depends on symbolic sizes (unknown without them)."""
        with self._lock:
            if self._symbolic_cost is None:
                self._symbolic_cost = serial_cost(self.computed_function, self.computed_module_functions) is None
        return self._symbolic_cost

    def _load_kernel(self, mode: str, check: bool, sizes: dict | None = None, exact_reason: str = "",
                     bound_sizes: tuple = ()) -> Callable:
        synced = any(st.name == "s_tir.ThreadSync" for st in self._owner.stages[:self.index + 1])
        gen = self._generate_kernel(mode=mode, progress=True, check=check, synced=synced, sizes=sizes,
                                    exact_reason=exact_reason, bound_sizes=bound_sizes)
        # One callback per calling thread, so that threads emulating this stage at once each get
        # their own reports.  Chunks of a parallel loop run on other threads (no callback there)
        # and progress alike; the caller's chunk reports.
        callbacks: dict[int, Callable] = {}
        last: dict[int, float] = {}  # per thread: reports never go backwards
        sent: dict[int, float] = {}  # per thread: when the callback last ran (rate limit of deep loops)
        held: dict[int, float] = {}  # per thread: a fraction the rate limit held back
        total = max(gen.progress_loops, 1)

        def report(loop_no, *pairs):
            # pairs: (done, extent) of each reporting loop, outermost first; an iteration of the
            # innermost starts (it counts as done), or, after a trailing (0, 0), the iterations done.
            me = threading.get_ident()
            callback = callbacks.get(me)
            if callback is None or not pairs[1]:
                return
            n = len(pairs)
            part = 1.0
            if not pairs[-1]:
                n, part = n - 2, 0.0
            for i in range(n - 2, -1, -2):
                part = (int(pairs[i]) + part) / int(pairs[i + 1])
            fraction = max(last.get(me, 0.0), min(1.0, (loop_no + part) / total))
            last[me] = fraction
            if n > 4:  # the loops inside the first inner one report at most every PROGRESS_INTERVAL s
                now = time.monotonic()
                if now - sent.get(me, 0.0) < PROGRESS_INTERVAL:
                    held[me] = fraction
                    return
                sent[me] = now
            held.pop(me, None)
            try:
                callback(fraction)
            except Exception as exc:  # the user's error, not the kernel's: see _run_kernel
                raise _ProgressCallbackError(exc) from None

        fn = load_kernel(gen.source, self._owner.name, label=f"{self.label} {mode}",
                         namespace={_PROGRESS_HOOK: report, _OUT_OF_RANGE_HOOK: OUT_OF_RANGE_CONVERSIONS})
        # Its lines stay in linecache (for tracebacks) as long as the kernel lives, not for good.
        weakref.finalize(fn, linecache.cache.pop, fn.__code__.co_filename, None)

        def run(*arrays, progress=None):
            me = threading.get_ident()
            outer = callbacks.get(me)
            last.pop(me, None)
            held.pop(me, None)
            if progress is None:
                callbacks.pop(me, None)
            else:
                callbacks[me] = progress
            try:
                result = fn(*arrays)
                if progress is not None and me in held:  # the last report the rate limit held back
                    try:
                        progress(held.pop(me))
                    except Exception as exc:
                        raise _ProgressCallbackError(exc) from None
                return result
            finally:
                if outer is None:
                    callbacks.pop(me, None)
                else:
                    callbacks[me] = outer

        run.source = gen.source
        run.plan = gen.plan
        run.converts_float_to_int = "_float_to_int" in gen.helpers
        # Orders of NaN the kernel leaves open: TVM's runtime sort, a cross-thread reduction's combine order.
        run.leaves_orders_open = bool({"contrib_sort", "thread_allreduce", "thread_allreduce_values"} & set(gen.helpers))
        return run

    def __repr__(self) -> str:
        return f"<Stage {self.index} {self.name} changed={self.changed} {self.seconds * 1e3:.2f} ms>"



class _SizesNotBound(Exception):
    """TVM's ``PrimFunc.specialize`` refused to bind a stage's symbolic sizes (see :func:`with_sizes`)."""


class _ProgressCallbackError(Exception):
    """Carries an exception raised by the user's progress callback through the kernel."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error



def _run_kernel(kernel: Callable, values: list, stage: Stage, progress=None):
    """Run the kernel on ``values``; returns what it returns (the value of a ``tirx.Return``, or None)."""
    try:
        with np.errstate(all="ignore"):
            return kernel(*values, progress=progress)
    except _ProgressCallbackError as exc:
        raise exc.error from None
    except (KeyboardInterrupt, HybridError):
        raise
    except MemoryError as exc:
        raise InsufficientMemoryError(f"emulation of stage {stage.label} refused: {exc}") from None
    except Exception as exc:
        line = hybrid_line(exc, stage._owner.name)
        where = f" at line {line[0]}: {line[1]}" if line else ""
        raise EmulationError(f"emulation of stage {stage.label} failed{where}: "
                             f"{type(exc).__name__}: {exc}") from exc
