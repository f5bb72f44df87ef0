"""HybridModule: one schedule compiled by TVM's real pipeline, with every pass kept and runnable.

Layering: this module joins pipeline capture (TVM) and hybrid code generation (TVM → Python) with
the numpy-only emulation runtime.  Presentation (``_repr_html_``) is imported lazily.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import te

from . import capture as _capture
from .codegen import generate_kernel, kernel_signature
from .compare import CompareResult, compare_outputs
from .errors import (ArgumentCountError, ArgumentShapeError, ArgumentTypeError, BuildError, EmulationError,
                     HybridError, InsufficientMemoryError, StageLookupError, StageNotEmulatableError,
                     UnsupportedConstructError)
from .loader import hybrid_line, load_kernel
from .signature import ParamSpec, bind_arguments, random_arguments

EMULATION_MODES = ("exact", "fast")


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

    def __init__(self, owner: "HybridModule", index: int, name: str, mod, seconds: float):
        self._owner = owner
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
        """Whether the IR differs from the previous stage (stage 0 counts as changed)."""
        if self._changed is None:
            if self.index == 0:
                self._changed = True
            else:
                prev = self._owner.stages[self.index - 1].mod
                self._changed = not tvm_ffi.structural_equal(prev, self.mod)
        return self._changed

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

    def _generate(self):
        if self._generated is None and self._reason is None:
            packed = self._owner.packed_api_index
            if packed is not None and self.index >= packed:
                self._reason = (f"after {_capture.PACKED_API_PASS} the function is a packed-API wrapper "
                                f"around the kernel, not the kernel")
            elif self.function is None:
                self._reason = f"the module has no function {self._owner.func_name!r} at this stage"
            else:
                try:
                    generated = generate_kernel(self.function, self._owner.name, stage=self.label,
                                                module_functions=self.module_functions)
                    compile(generated.source, f"<hybrid:{self.label}>", "exec")  # emulatable means it loads
                    self._generated = generated
                except UnsupportedConstructError as exc:
                    self._reason = str(exc)
                except Exception as exc:  # a generator bug must not take the session down
                    self._reason = f"hybrid code generation failed at stage {self.label}: {type(exc).__name__}: {exc}"
        return self._generated

    @property
    def emulatable(self) -> bool:
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
        if self._fast is None:
            self._fast = generate_kernel(self.function, self._owner.name, stage=self.label, mode="fast",
                                         module_functions=self.module_functions)
        return self._fast.source

    def kernel(self, mode: str = "exact", check: bool = False) -> Callable:
        """The executed function of this stage: its hybrid source (``mode`` "exact" or "fast") with
        progress hooks in the outermost loops.  Call it as ``kernel(*arrays, progress=callback)``.
        """
        if not self.emulatable:
            raise StageNotEmulatableError(f"stage {self.label} cannot be emulated: {self.reason}")
        key = (mode, check)
        if key not in self._kernels:
            synced = any(st.name == "s_tir.ThreadSync" for st in self._owner.stages[:self.index + 1])
            gen = generate_kernel(self.function, self._owner.name, stage=self.label, mode=mode, progress=True,
                                  module_functions=self.module_functions, check=check, synced=synced)
            # One callback per calling thread: concurrent calls each get their own reports, and the
            # chunks of a parallel loop on worker threads (which progress alike) report nothing.
            state = threading.local()
            total = max(gen.progress_loops, 1)

            def report(loop_no, done, extent):
                callback = getattr(state, "callback", None)
                if callback is not None and extent:
                    try:
                        callback(min(1.0, (loop_no + (int(done) + 1) / int(extent)) / total))
                    except Exception as exc:  # the user's error, not the kernel's: see _run_kernel
                        raise _ProgressCallbackError(exc) from None

            fn = load_kernel(gen.source, self._owner.name, label=f"{self.label} {mode}",
                             namespace={_PROGRESS_HOOK: report})

            def run(*arrays, progress=None):
                outer = getattr(state, "callback", None)
                state.callback = progress
                try:
                    return fn(*arrays)
                finally:
                    state.callback = outer

            run.source = gen.source
            self._kernels[key] = run
        return self._kernels[key]

    def __repr__(self) -> str:
        return f"<Stage {self.index} {self.name} changed={self.changed} {self.seconds * 1e3:.2f} ms>"


class HybridModule:
    """A kernel compiled by TVM with every pass captured: readable, runnable, comparable.

    Call it with numpy arrays to emulate stage 0 (destination passing: outputs are written in place
    and returned), or with ``te.Tensor`` inputs to get the output tensor(s) of an op running it.
    """

    def __init__(self, func_name: str, target: Any, raw_stages: Sequence[_capture.RawStage],
                 native=None, build_seconds: float | None = None, name: str | None = None,
                 first_index: int = 0, packed_api_index: int | None = None):
        # first_index: number of stage 0 in the pipeline it came from (a resumed module starts mid-way);
        # packed_api_index: override for modules whose stage 0 is already past MakePackedAPI.
        self.first_index = first_index
        self.func_name = func_name
        self.target = target
        self.stages: list[Stage] = [Stage(self, i, r.name, r.mod, r.seconds) for i, r in enumerate(raw_stages)]
        self._native = native
        self.build_seconds = build_seconds
        self.name = name or _python_function_name(func_name)
        self.last_compare: CompareResult | None = None
        self.packed_api_index = packed_api_index if packed_api_index is not None else next(
            (s.index for s in self.stages if s.name == _capture.PACKED_API_PASS), None)
        try:
            func = self.stages[0].function
            self._params = _mark_outputs(kernel_signature(func, self.name), func)
        except UnsupportedConstructError as exc:
            self._params = None
            self._signature_error = str(exc)

    # ------------------------------------------------------------------ lookup
    @property
    def params(self) -> list[ParamSpec]:
        """The kernel's parameters, in order, with outputs marked."""
        if self._params is None:
            raise StageNotEmulatableError(f"the kernel's parameters cannot be emulated: {self._signature_error}")
        return self._params

    @property
    def outputs(self) -> list[ParamSpec]:
        return [p for p in self.params if p.is_output]

    def stage(self, key: int | str | Stage) -> Stage:
        """A stage by index (negative counts from the end), pass name or short name."""
        if isinstance(key, Stage):
            return key
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            n = len(self.stages)
            if not -n <= key < n:
                raise StageLookupError(f"stage {key} is out of range: this module has stages 0..{n - 1}")
            return self.stages[int(key)]
        if isinstance(key, str):
            for s in self.stages:
                if key in (s.name, s.short_name, s.label):
                    return s
            raise StageLookupError(f"no stage named {key!r}; passes are: "
                                   + ", ".join(s.name for s in self.stages[1:]))
        raise StageLookupError(f"stage must be an index or a pass name, got {type(key).__name__}")

    def get_source(self, stage: int | str = 0) -> str:
        """The hybrid script of ``stage``: Python that runs with numpy alone."""
        s = self.stage(stage)
        if not s.emulatable:
            raise StageNotEmulatableError(f"stage {s.label} has no hybrid source: {s.reason}")
        return s.source

    @property
    def emulatable_stages(self) -> list[Stage]:
        return [s for s in self.stages if s.emulatable]

    # ------------------------------------------------------------------ running
    def __call__(self, *args):
        if args and all(isinstance(a, te.Tensor) for a in args):
            return self.as_op(*args)
        if any(isinstance(a, te.Tensor) for a in args):
            raise ArgumentTypeError("give either all te.Tensor inputs (to make an op) or numpy arrays (to emulate)")
        return self.emulate(*args)

    def emulate(self, *arrays, stage: int | str = 0, mode: str = "exact", check: bool = False,
                progress: Callable[[float], None] | None = None):
        """Run ``stage``'s hybrid source on numpy arrays (every parameter, in order).

        Outputs are written into the given arrays and returned (one array or a tuple).  ``mode``
        is ``"exact"`` (the IR interpreted as written) or ``"fast"`` (independent loops as numpy
        array operations, bit-identical).  ``progress(fraction)`` is called as the outermost loops
        advance; KeyboardInterrupt stops the emulation and propagates unchanged.
        """
        if mode not in EMULATION_MODES:
            raise ValueError(f"mode must be one of {EMULATION_MODES}, got {mode!r}")
        if progress is not None and not callable(progress):
            raise ArgumentTypeError(f"progress must be a callable taking the fraction done, got "
                                    f"{type(progress).__name__}")
        s = self.stage(stage)
        kernel = s.kernel(mode, check)
        bound = bind_arguments(self.params, arrays)
        values = list(bound.values)
        aliased = _aliased_arguments(self.params, arrays)
        for k in aliased:  # as run_native: each parameter sees its own copy of what it was given
            values[k] = np.array(values[k], copy=True)
        _run_kernel(kernel, values, s, progress)
        for k in aliased:  # outputs written back in parameter order, as run_native does
            if self.params[k].is_output:
                bound.values[k][...] = values[k]
        bound.finish()
        return self._outputs_of(arrays)

    def _outputs_of(self, arrays):
        outs = [a for a, p in zip(arrays, self.params) if p.is_output]
        return outs[0] if len(outs) == 1 else tuple(outs)

    @property
    def native(self):
        """The natively compiled runtime module (built on demand after :func:`load`)."""
        if self._native is None:
            try:
                self._native = tvm.tirx.build(self.stages[0].mod, target=self.target)
            except Exception as exc:
                raise BuildError(f"native build failed: {_capture.short_tvm_message(exc)}") from exc
        return self._native

    def run_native(self, *arrays, _emulated: bool = False):
        """Run the natively compiled kernel on numpy arrays, same convention as :meth:`emulate`.

        Inputs on which the emulation traps (integer division by zero or ``INT_MIN / -1``, an
        out-of-bounds access) are refused with an :class:`EmulationError` before the native kernel
        runs: it would kill the process (SIGFPE, SIGSEGV) or read outside its buffers.
        """
        bound = bind_arguments(self.params, arrays)
        if not _emulated:
            self._refuse_trapping_inputs(bound.values)
        dev = tvm.cpu()
        tensors = [tvm.runtime.tensor(v, dev) if isinstance(v, np.ndarray) else v for v in bound.values]
        self.native[self.func_name](*tensors)
        for spec, value, tensor in zip(self.params, bound.values, tensors):
            if spec.is_output:
                value[...] = tensor.numpy()
        bound.finish()
        return self._outputs_of(arrays)

    def _refuse_trapping_inputs(self, values: list) -> None:
        """Emulate stage 0 (fast mode, on copies) before a native run when its kernel has
        operations that can trap, and refuse the run when the emulation traps."""
        s = self.stages[0]
        gen = s._generate()
        if gen is None or not set(gen.helpers) & _TRAPPING_HELPERS:
            return
        copies = [np.array(v, copy=True) if isinstance(v, np.ndarray) else v for v in values]
        try:
            _run_kernel(s.kernel("fast"), copies, s)
        except EmulationError as exc:
            if isinstance(exc.__cause__, (ZeroDivisionError, OverflowError, IndexError)):
                raise EmulationError(f"native run refused: on these inputs {exc}; the native kernel would "
                                     f"crash the process or touch memory outside its buffers") from None

    def random_inputs(self, seed: int = 0, sizes: dict[str, int] | None = None) -> list[np.ndarray]:
        """Seeded random arrays for every parameter (outputs zero-filled)."""
        return random_arguments(self.params, seed=seed, sizes=sizes)

    def compare(self, *arrays, reference: str | Callable = "native", stage: int | str = 0,
                rtol: float | None = None, atol: float | None = None, mode: str = "exact",
                seed: int = 0, sizes: dict[str, int] | None = None, check: bool = False) -> CompareResult:
        """Emulate ``stage`` and compare its outputs with ``reference``.

        ``reference`` is ``"native"`` (the compiled kernel) or a callable that takes the input
        arrays and returns the expected output(s).  Without arrays, seeded random inputs are made.
        Neither run changes the arrays given.
        """
        s = self.stage(stage)
        if not arrays:
            arrays = tuple(self.random_inputs(seed=seed, sizes=sizes))
        bind_arguments(self.params, arrays)  # validate once, with parameter names in errors
        emu_args = [a.copy() if isinstance(a, np.ndarray) else a for a in arrays]
        start = time.perf_counter()
        self.emulate(*emu_args, stage=s.index, mode=mode, check=check)
        emulate_seconds = time.perf_counter() - start
        actual = [a for a, p in zip(emu_args, self.params) if p.is_output]
        start = time.perf_counter()
        if isinstance(reference, str):
            if reference != "native":
                raise ValueError(f"reference must be 'native' or a callable, got {reference!r}")
            ref_args = [a.copy() if isinstance(a, np.ndarray) else a for a in arrays]
            # The emulation above would have raised on inputs that make the native kernel trap.
            self.run_native(*ref_args, _emulated=True)
            expected = [a for a, p in zip(ref_args, self.params) if p.is_output]
            ref_name = "native"
        elif callable(reference):
            inputs = [a for a, p in zip(arrays, self.params) if not p.is_output]
            got = reference(*[a.copy() if isinstance(a, np.ndarray) else a for a in inputs])
            expected = list(got) if isinstance(got, (tuple, list)) else [got]
            ref_name = getattr(reference, "__name__", "reference")
        else:
            raise ValueError("reference must be 'native' or a callable")
        reference_seconds = time.perf_counter() - start
        names = [p.name for p in self.params if p.is_output]
        result = CompareResult(stage=s.label, reference=ref_name,
                               outputs=compare_outputs(names, actual, [np.asarray(e) for e in expected], rtol, atol),
                               emulate_seconds=emulate_seconds, reference_seconds=reference_seconds, mode=mode)
        self.last_compare = result
        return result

    # ------------------------------------------------------------------ op
    def as_op(self, *tensors):
        """The output tensor(s) of a TE op that runs this kernel on the given input tensors."""
        func = self.stages[0].function
        inputs = [p for p in self.params if not p.is_output]
        if len(tensors) != len(inputs):
            raise ArgumentCountError(
                f"expected {len(inputs)} input tensors ({', '.join(p.name for p in inputs)}), got {len(tensors)}")
        buffers = [p for p in func.params if tvm.tirx.is_buffer_var(p)]
        input_buffers = [b for b, p in zip(buffers, self.params) if not p.is_output]
        for tensor, buf, spec in zip(tensors, input_buffers, inputs):
            if str(tensor.dtype) != str(buf.dtype):
                raise ArgumentTypeError(f"parameter {spec.name}: expected dtype {buf.dtype}, got {tensor.dtype}")
            if len(tensor.shape) != len(buf.shape):
                raise ArgumentShapeError(
                    f"parameter {spec.name}: expected {len(buf.shape)} dimensions, got shape {tuple(tensor.shape)}")
        sizes = _bind_sizes(tensors, input_buffers, inputs)
        if sizes:  # the kernel's symbolic sizes become the inputs' sizes (else they would stay free)
            func = _specialized(func, sizes, self.name)
            buffers = [p for p in func.params if tvm.tirx.is_buffer_var(p)]
            input_buffers = [b for b, p in zip(buffers, self.params) if not p.is_output]
        adapted = []
        for tensor, buf, spec in zip(tensors, input_buffers, inputs):
            # TVM checks shape objects by identity: re-express the input over the buffer's own shape.
            adapted.append(te.compute(buf.shape, _element_reader(tensor), name=f"{spec.name}_in"))
        try:
            out = te.extern_primfunc(adapted, func, name=self.name)
        except Exception as exc:
            raise BuildError(f"could not make an op from {self.name}: {_capture.short_tvm_message(exc)}") from exc
        return out

    # ------------------------------------------------------------------ dumps and display
    def save(self, directory, overwrite: bool = False, sizes: dict[str, int] | None = None):
        """Write every stage as ``.py``, ``.tvmscript.py`` and ``.json`` plus ``index.json``
        (``sizes``: the symbolic sizes the ``.py`` files run with by default)."""
        from .dump import save

        return save(self, directory, overwrite=overwrite, sizes=sizes)

    def __repr__(self) -> str:
        changed = sum(1 for s in self.stages[1:] if s.changed)
        try:
            sig = ", ".join(p.describe() for p in self.params)
        except HybridError:
            sig = "?"
        target = getattr(getattr(self.target, "kind", None), "name", self.target)
        return (f"<HybridModule {self.name}({sig}) target={target} stages={len(self.stages)} "
                f"({changed} passes changed the IR)>")

    def _repr_html_(self) -> str:
        from .presentation import module_html

        return module_html(self)


# ---------------------------------------------------------------------- helpers
def _element_reader(tensor):
    """An fcompute that reads ``tensor`` at the same indices (te.compute rejects default arguments)."""
    return lambda *indices: tensor(*indices)


def _bind_sizes(tensors, buffers, specs) -> dict:
    """The kernel's symbolic sizes given by the input tensors' shapes (size var → value).

    A plain dimension ``n`` binds ``n``; a dimension ``n + 2`` binds ``n`` when it is its only unknown
    (solved for a whole number), and is checked otherwise.  Errors name the parameter and dimension.
    """
    sizes: dict = {}
    pending = []
    for tensor, buf, spec in zip(tensors, buffers, specs):
        for axis, (got, want) in enumerate(zip(tensor.shape, buf.shape)):
            if isinstance(want, tvm.tirx.Var):
                if want in sizes and not _same_dim(got, sizes[want]):
                    raise ArgumentShapeError(f"parameter {spec.name}: dimension {axis} is {got}, but {want} = "
                                             f"{sizes[want]} from an earlier input")
                sizes[want] = got
            else:
                pending.append((got, want, axis, spec))
    for got, want, axis, spec in pending:
        _solve_size(want, got, sizes)
        analyzer = tvm.sym.Analyzer()
        for var, value in sizes.items():
            analyzer.bind(var, value)
        if not _same_dim(got, analyzer.simplify(want)):
            raise ArgumentShapeError(f"parameter {spec.name}: dimension {axis} is {got}, expected {want}")
    return sizes


def _solve_size(want, got, sizes: dict) -> None:
    """Bind the one size of the expression ``want`` that ``sizes`` lacks so that ``want == got``,
    when ``want`` is linear in it with a whole-number solution; otherwise bind nothing."""
    free = [v for v in tvm.tirx.analysis.undefined_vars(want) if v not in sizes]
    if len(free) != 1:
        return
    (var,) = free
    at = []
    for trial in (0, 1):
        analyzer = tvm.sym.Analyzer()
        for known, value in sizes.items():
            analyzer.bind(known, value)
        analyzer.bind(var, tvm.tirx.const(trial, str(var.ty.dtype)))
        at.append(analyzer.simplify(want))
    try:
        base, slope = int(at[0]), int(at[1]) - int(at[0])
    except (TypeError, ValueError):
        return
    if slope == 0:
        return
    try:
        diff = int(got) - base
    except (TypeError, ValueError):  # a symbolic input size: solvable when the slope is 1
        if slope == 1:
            sizes[var] = tvm.sym.Analyzer().simplify(got - base)
        return
    if diff % slope == 0 and diff // slope >= 0:
        sizes[var] = diff // slope


def _specialized(func, sizes: dict, name: str):
    """``func`` with its symbolic sizes replaced by ``sizes`` (through parameters whose dimensions are
    plain sizes, which is how ``PrimFunc.specialize`` binds them)."""
    param_map, covered = {}, set()
    for p in func.params:
        if not tvm.tirx.is_buffer_var(p) or not any(isinstance(d, tvm.tirx.Var) and d in sizes for d in p.shape):
            continue
        if all(isinstance(d, (tvm.tirx.Var, tvm.tirx.IntImm)) for d in p.shape):
            shape = [sizes.get(d, d) if isinstance(d, tvm.tirx.Var) else d for d in p.shape]
            param_map[p] = tvm.tirx.decl_buffer(shape, p.dtype, name=p.name)
            covered |= {d for d in p.shape if isinstance(d, tvm.tirx.Var)}
    missing = [str(v) for v in sizes if v not in covered]
    if missing:
        raise BuildError(f"could not make an op from {name}: size {missing[0]} is no parameter's plain dimension")
    try:
        return func.specialize(param_map)
    except Exception as exc:
        raise BuildError(f"could not make an op from {name}: {_capture.short_tvm_message(exc)}") from exc


def _same_dim(got, want) -> bool:
    try:
        return int(got) == int(want)
    except (TypeError, ValueError):
        return tvm_ffi.structural_equal(got, want)


#: The name under which a script calls its progress hook (a dunder: user names never are one).
_PROGRESS_HOOK = "__progress__"
#: Helpers of a stage-0 script that mean the native kernel can trap on some inputs.
_TRAPPING_HELPERS = frozenset({"_check_divisor", "load", "store", "access"})


class _ProgressCallbackError(Exception):
    """Carries an exception raised by the user's progress callback through the kernel."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


def _aliased_arguments(params: list[ParamSpec], arrays) -> list[int]:
    """Indices of buffer arguments that may share memory with another argument where at least one
    of the two is an output."""
    buffers = [k for k, (p, a) in enumerate(zip(params, arrays)) if p.is_buffer and isinstance(a, np.ndarray)]
    found = set()
    for i, k in enumerate(buffers):
        for m in buffers[i + 1:]:
            if (params[k].is_output or params[m].is_output) and np.may_share_memory(arrays[k], arrays[m]):
                found |= {k, m}
    return sorted(found)


def _run_kernel(kernel: Callable, values: list, stage: Stage, progress=None) -> None:
    try:
        with np.errstate(all="ignore"):
            kernel(*values, progress=progress)
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


def _python_function_name(name: str) -> str:
    import builtins
    import keyword

    from . import runtime
    from .codegen import ascii_identifier

    clean = ascii_identifier(name) or "kernel"
    if clean[0].isdigit():
        clean = "k_" + clean
    if (keyword.iskeyword(clean) or hasattr(builtins, clean) or clean in vars(runtime)
            or clean.startswith("__") or clean == "race_log"):
        clean += "_kernel"
    return clean


def _mark_outputs(params: list[ParamSpec], func) -> list[ParamSpec]:
    """Mark the buffers ``func`` writes as outputs (TVM's own access analysis)."""
    buffers = [p for p in func.params if tvm.tirx.is_buffer_var(p)]
    written: set[int] = set()
    try:
        access = tvm.s_tir._ffi_api.DomainTouchedAccessMap(func)
        for i, buf in enumerate(buffers):
            if buf in access and len(access[buf][1]):
                written.add(i)
    except Exception:  # analysis not applicable: fall back to "the last buffer"
        written = {len(buffers) - 1} if buffers else set()
    out = []
    buf_index = 0
    for spec in params:
        if spec.is_buffer:
            spec = ParamSpec(spec.name, spec.dtype, spec.shape, buf_index in written)
            buf_index += 1
        out.append(spec)
    return out


def _select_function(mod, name: str | None):
    funcs = {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    if not funcs:
        raise BuildError("the IRModule has no PrimFunc to build")
    if name is not None:
        if name not in funcs:
            raise BuildError(f"the IRModule has no PrimFunc named {name!r} (it has: {', '.join(funcs)})")
        return name, funcs[name]
    if len(funcs) > 1:
        raise BuildError(f"the IRModule has {len(funcs)} PrimFuncs ({', '.join(funcs)}): choose one with name=")
    return next(iter(funcs.items()))


def as_ir_module(obj: Any, name: str | None = None) -> tuple[str, "tvm.IRModule"]:
    """Normalise what users pass to :func:`build` into (function name, single-function IRModule)."""
    from tvm import s_tir

    if isinstance(obj, HybridModule):
        return obj.func_name, obj.stages[0].mod
    if isinstance(obj, s_tir.Schedule):
        obj = obj.mod
    if isinstance(obj, tvm.tirx.PrimFunc):
        symbol = obj.attrs.get("global_symbol") if obj.attrs is not None else None
        fname = name or (str(symbol) if symbol else "main")
        return fname, tvm.IRModule({fname: obj})
    if isinstance(obj, (list, tuple)) and obj and all(isinstance(t, te.Tensor) for t in obj):
        try:
            func = te.create_prim_func(list(obj))
        except Exception as exc:
            raise BuildError(f"te.create_prim_func failed: {_capture.short_tvm_message(exc)}") from exc
        fname = name or "main"
        return fname, tvm.IRModule({fname: func})
    if isinstance(obj, tvm.IRModule):
        fname, func = _select_function(obj, name)
        return fname, tvm.IRModule({fname: func})
    raise BuildError(
        f"cannot build a {type(obj).__name__}: expected a tvm.s_tir.Schedule, a tvm.IRModule, "
        f"a tvm.tirx.PrimFunc or a list of te.Tensor")


def build(obj: Any, target: Any = "llvm", name: str | None = None, pipeline: str = "default") -> HybridModule:
    """Compile ``obj`` with TVM's real pipeline (``tvm.build``) and capture every pass.

    Parameters
    ----------
    obj : tvm.s_tir.Schedule, tvm.IRModule, tvm.tirx.PrimFunc or list of te.Tensor
        What to build.  A list of tensors is given to ``te.create_prim_func``.
    target : str or tvm.target.Target
        Anything ``tvm.build`` accepts.
    name : str, optional
        Which PrimFunc of an IRModule to build.
    pipeline : str
        A TIR pipeline name registered with ``tvm.tirx.register_tir_pipeline`` (default: TVM's own).

    Returns
    -------
    HybridModule
    """
    fname, mod = as_ir_module(obj, name)
    try:
        target_obj = tvm.target.Target(target) if not isinstance(target, tvm.target.Target) else target
    except Exception as exc:
        raise BuildError(f"unknown target {target!r}: {_capture.short_tvm_message(exc)}") from exc
    lib, raw, seconds = _capture.run_pipeline(
        mod, target_obj, build=lambda m, target: tvm.tirx.build(m, target=target, pipeline=pipeline))
    return HybridModule(fname, target_obj, raw, native=lib, build_seconds=seconds)
