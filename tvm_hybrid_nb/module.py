"""HybridModule: one schedule compiled by TVM's real pipeline, with every pass kept and runnable.

Layering: this module joins pipeline capture (TVM) and hybrid code generation (TVM → Python) with
the numpy-only emulation runtime.  ``save`` writes through :mod:`tvm_hybrid_nb.dump_write` (below
this module; :mod:`tvm_hybrid_nb.dump`, which reads dumps back, is above it).  The one upward import
is ``_repr_html_``'s: Jupyter asks the object for its HTML, and it is rendered by
:mod:`tvm_hybrid_nb.presentation`, imported only then (presentation imports nothing of this package,
so no cycle; ``tests/test_import_layers.py`` allows exactly this hook).
"""
from __future__ import annotations

import dataclasses
import linecache
import re
import threading
import time
import weakref
from typing import Any, Callable, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import te

from . import capture as _capture
from . import dump_write
from .codegen import generate_kernel, kernel_signature
from .compare import CompareResult, check_tolerance, compare_outputs, reference_outputs
from .errors import (ArgumentCountError, ArgumentShapeError, ArgumentTypeError, BuildError, CompareError,
                     DeviceUnavailableError, EmulationError, HybridError, InsufficientMemoryError, StageLookupError,
                     StageNotEmulatableError, UnsupportedConstructError)
from .dlpack import strided_tensor
from .loader import hybrid_line, load_kernel
from .runtime import param_storage
from .signature import ParamSpec, bind_arguments, strided_argument, check_native_transfer, random_arguments

EMULATION_MODES = ("exact", "fast")
_NATIVE_BUILD_LOCK = threading.RLock()
#: The references :meth:`HybridModule.compare` knows by name (besides a callable).
REFERENCES = ("native", "input")
#: How a comparison with ``reference="input"`` names its reference.
INPUT_REFERENCE_NAME = "input stage (emulated)"
#: How comparisons name the value a kernel returns (``tirx.Return``).
RETURN_VALUE_NAME = "return value"


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

    def _generate(self):
        with self._lock:
            return self._generate_locked()

    def _generate_locked(self):
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
        with self._lock:
            if self._fast is None:
                self._fast = generate_kernel(self.function, self._owner.name, stage=self.label, mode="fast",
                                             module_functions=self.module_functions)
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
        return generate_kernel(self.function, self._owner.name, stage=self.label, mode=mode, check=check,
                               module_functions=self.module_functions).plan

    def kernel(self, mode: str = "exact", check: bool = False) -> Callable:
        """The executed function of this stage: its hybrid source (``mode`` "exact" or "fast") with
        progress hooks in the outermost loops.  Call it as ``kernel(*arrays, progress=callback)``.
        """
        if not self.emulatable:
            raise StageNotEmulatableError(f"stage {self.label} cannot be emulated: {self.reason}")
        key = (mode, check)
        with self._lock:
            if key not in self._kernels:
                self._kernels[key] = self._load_kernel(mode, check)
        return self._kernels[key]

    def _load_kernel(self, mode: str, check: bool) -> Callable:
        synced = any(st.name == "s_tir.ThreadSync" for st in self._owner.stages[:self.index + 1])
        gen = generate_kernel(self.function, self._owner.name, stage=self.label, mode=mode, progress=True,
                              module_functions=self.module_functions, check=check, synced=synced)
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
                         namespace={_PROGRESS_HOOK: report})
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
        return run

    def __repr__(self) -> str:
        return f"<Stage {self.index} {self.name} changed={self.changed} {self.seconds * 1e3:.2f} ms>"


class HybridModule:
    """A kernel compiled by TVM with every pass captured: readable, runnable, comparable.

    Call it with numpy arrays to emulate stage 0 (destination passing: outputs are written in place
    and returned), or with ``te.Tensor`` inputs to get the output tensor(s) of an op running it.
    """

    def __init__(self, func_name: str, target: Any, raw_stages: Sequence[_capture.RawStage],
                 native=None, build_seconds: float | None = None, name: str | None = None,
                 first_index: int = 0, packed_api_index: int | None = None,
                 failure: _capture.BuildFailure | None = None):
        #: Set when TVM's lowering failed: the failing pass, its stage number and TVM's full message.
        self.failure = failure
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
        self._returns = _returned_dtype(self.stages[0].function)

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

    @property
    def returns(self) -> str | None:
        """The dtype of the scalar the kernel returns (``return value`` in TVMScript: ``tirx.Return``),
        or None when it returns nothing.  :meth:`emulate` and :meth:`run_native` give that value after
        the outputs, as TVM's packed API hands it over: an integer as a Python int (int64), a float as
        a Python float (float64), a bool as a bool."""
        return self._returns

    def result_values(self, arrays, result) -> list[np.ndarray]:
        """The outputs among ``arrays`` (every parameter, in order) and, when the kernel returns a
        value, the value in ``result`` (what :meth:`emulate` or :meth:`run_native` returned) as a
        0-d array: what a comparison compares, in :attr:`result_names` order."""
        values = [a for a, p in zip(arrays, self.params) if p.is_output]
        if self._returns is not None:
            returned = result[-1] if isinstance(result, tuple) else result
            values.append(np.asarray(returned))
        return values

    @property
    def result_names(self) -> list[str]:
        """The names of :meth:`result_values`: the outputs, then ``return value`` if there is one."""
        return [p.name for p in self.params if p.is_output] + (
            [RETURN_VALUE_NAME] if self._returns is not None else [])

    def stage(self, key: int | str | Stage) -> Stage:
        """A stage by index (negative counts from the end), pass name, short name or label.

        A name that more than one stage has (``"StmtSimplify"`` of both ``s_tir.`` and ``tirx.``, or a
        pass that runs twice) is refused with the matching stage indices: give one of those instead.
        """
        if isinstance(key, Stage):
            if key._owner is not self:
                raise StageLookupError(f"stage {key.label} belongs to another module ({key._owner.name}); "
                                       f"give its index or pass name instead")
            return key
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            n = len(self.stages)
            if not -n <= key < n:
                raise StageLookupError(f"stage {key} is out of range: this module has stages 0..{n - 1}")
            return self.stages[int(key)]
        if isinstance(key, str):
            matches = [s for s in self.stages if key in (s.name, s.short_name, s.label)]
            if len(matches) == 1:
                return matches[0]
            if matches:
                listed = ", ".join(f"{s.index} ({s.name})" for s in matches)
                raise StageLookupError(f"{len(matches)} stages match {key!r}: {listed}; give the stage index")
            raise StageLookupError(f"no stage named {key!r}; passes are: "
                                   + ", ".join(s.name for s in self.stages[1:]))
        raise StageLookupError(f"stage must be an index or a pass name, got {type(key).__name__}")

    def get_source(self, stage: int | str = 0) -> str:
        """The hybrid script of ``stage``: Python that runs with numpy alone."""
        s = self.stage(stage)
        if not s.emulatable:
            raise StageNotEmulatableError(f"stage {s.label} has no hybrid source: {s.reason}")
        return s.source

    def explain(self, stage: int | str = 0, mode: str = "fast", check: bool = False) -> str:
        """Why ``mode`` runs ``stage`` the way it does: one line a loop (lanes, parallel chunks or
        serial, and the reason), e.g. ``k: serial (carried dependence on C_local ...)``."""
        return self.stage(stage).plan(mode, check).text()

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

        Outputs are written into the given arrays and returned (one array or a tuple); a kernel that
        returns a value (:attr:`returns`) gives it last (alone when it has no outputs).  ``mode``
        is ``"exact"`` (the IR interpreted as written) or ``"fast"`` (independent loops as numpy
        array operations, bit-identical).  ``progress(fraction)`` is called as the outermost loops
        advance; an exception it raises stops the emulation and reaches the caller unchanged, and so
        does KeyboardInterrupt.
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
            values[k] = (strided_argument(self.params[k], values[k], True, bound.layouts[k]) if self.params[k].is_strided
                         else np.array(values[k], copy=True))
        returned = _run_kernel(kernel, values, s, progress)
        for k in aliased:  # outputs written back in parameter order, as run_native does
            if self.params[k].is_output:
                bound.values[k][...] = values[k]
        bound.finish()
        return self._outputs_of(arrays, returned)

    def _outputs_of(self, arrays, returned=None):
        outs = [a for a, p in zip(arrays, self.params) if p.is_output]
        if self._returns is not None:
            outs.append(returned)
        return outs[0] if len(outs) == 1 else tuple(outs)

    @property
    def native(self):
        """The natively compiled runtime module (built on demand after :func:`load`)."""
        if self._native is not None:
            return self._native
        if self.failure is not None:
            raise BuildError(f"no native build: {self.failure.summary}")
        with _NATIVE_BUILD_LOCK:  # threads comparing at once build it once
            if self._native is None:
                mod = self.stages[0].mod
                try:
                    self._native = _capture.run_interruptibly(lambda: tvm.tirx.build(mod, target=self.target))
                except Exception as exc:
                    raise BuildError(f"native build failed: {_capture.short_tvm_message(exc)}") from exc
        return self._native

    def run_native(self, *arrays, _emulated: bool = False):
        """Run the natively compiled kernel on numpy arrays, same convention as :meth:`emulate`.

        The kernel runs on the target's device (the CPU for ``llvm``); a target whose device this
        machine lacks (``cuda`` without a GPU) raises :class:`DeviceUnavailableError`.  Inputs on
        which the emulation traps (integer division by zero or ``INT_MIN / -1``, an out-of-bounds
        access) are refused with an :class:`EmulationError` before the native kernel runs: it would
        kill the process (SIGFPE, SIGSEGV) or read outside its buffers.
        """
        dev = self.native_device()
        bound = bind_arguments(self.params, arrays)
        check_native_transfer(self.params)  # int4 & co: one line, not TVM's size mismatch
        if not _emulated:
            self._refuse_trapping_inputs(bound.values)
        function = self._native_function()
        keep = []  # strided tensors share the arrays' storage: it lives until the kernel returns
        tensors = [_native_tensor(spec, v, dev, keep, bound.layouts.get(k)) if isinstance(v, np.ndarray) else v
                   for k, (spec, v) in enumerate(zip(self.params, bound.values))]
        returned = function(*tensors)
        for spec, value, tensor in zip(self.params, bound.values, tensors):
            if spec.is_output and not spec.is_strided:
                value[...] = tensor.numpy()
        bound.finish()
        return self._outputs_of(arrays, returned)

    def native_device(self):
        """The device the native kernel runs on; :class:`DeviceUnavailableError` when there is none here."""
        kind = getattr(getattr(self.target, "kind", None), "name", None) or str(self.target).split()[0]
        if kind in ("llvm", "c"):
            return tvm.cpu()
        instead = ("compare with a numpy reference instead (hm.compare(reference=numpy_fn)) or with the "
                   "emulation of the input stage (hm.compare(reference='input'))")
        try:
            dev = tvm.device(kind)
            present = dev.exist
        except Exception:
            raise DeviceUnavailableError(f"a {kind} kernel cannot run natively here; {instead}") from None
        if not present:
            raise DeviceUnavailableError(f"there is no {kind.upper()} device here, so the {kind} kernel cannot "
                                         f"run natively; {instead}")
        return dev

    def _native_function(self):
        """The compiled kernel.  TVM exports it under the PrimFunc's ``global_symbol``, which need not
        be the name it had in the IRModule (``IRModule({"scale2": f})`` with f's symbol still "main")."""
        lib = self.native
        func = self.stages[0].function
        symbol = func.attrs.get("global_symbol") if func is not None and func.attrs is not None else None
        candidates = [str(symbol)] if symbol else []
        candidates += [self.func_name] if self.func_name not in candidates else []
        for name in candidates:
            if lib.implements_function(name, query_imports=True):
                return lib.get_function(name, query_imports=True)
        raise BuildError(f"the native module exports no function {' or '.join(map(repr, candidates))}")

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
        """Seeded random arrays for every parameter (outputs zero-filled); ``seed`` is an integer >= 0."""
        if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise CompareError(f"seed must be an integer >= 0, got {seed!r}")
        return random_arguments(self.params, seed=seed, sizes=sizes)

    def compare(self, *arrays, reference: str | Callable = "native", stage: int | str = 0,
                rtol: float | None = None, atol: float | None = None, mode: str = "exact",
                seed: int = 0, sizes: dict[str, int] | None = None, check: bool = False,
                progress: Callable[[float], None] | None = None, on_error: str = "raise") -> CompareResult:
        """Emulate ``stage`` and compare its outputs with ``reference``.

        ``reference`` is ``"native"`` (the compiled kernel), ``"input"`` (the emulation of stage 0,
        for any target: does every pass keep the kernel's meaning?) or a callable that takes the
        input arrays (copies) and returns the expected output(s): one array, or a tuple with one per
        output.  Without arrays, seeded random inputs are made.  Neither run changes the arrays given.

        Each reference output must have its output's shape (nothing is broadcast).  Values are
        compared, never cast: a wider reference dtype is fine (float64 for float32), bfloat16 and
        float8 are compared as decoded floats, but an integer output needs an integer reference
        (:func:`~tvm_hybrid_nb.compare.compare_arrays` has the rules).  ``rtol``/``atol`` must be
        finite and >= 0.  Anything else raises :class:`CompareError` naming the output.

        ``progress(fraction)`` follows the emulation; an exception it raises stops the run.
        ``on_error="partial"``: when the emulation fails part-way (EmulationError), compare what it
        wrote before failing; the result carries the error and is a MISMATCH.
        """
        if on_error not in ("raise", "partial"):
            raise ValueError(f"on_error must be 'raise' or 'partial', got {on_error!r}")
        s = self.stage(stage)
        rtol, atol = check_tolerance("rtol", rtol), check_tolerance("atol", atol)
        if not (isinstance(reference, str) or callable(reference)):
            raise CompareError(f"reference must be one of {REFERENCES} or a callable, got {type(reference).__name__}")
        if isinstance(reference, str) and reference not in REFERENCES:
            raise CompareError(f"reference must be one of {REFERENCES} or a callable, got {reference!r}")
        if isinstance(reference, str) and reference == "native":
            self.native_device()  # before emulating: a build for a missing GPU cannot be the reference
        if not arrays:
            arrays = tuple(self.random_inputs(seed=seed, sizes=sizes))
        emu_args = [a.copy() if isinstance(a, np.ndarray) else a for a in arrays]
        # Validate once, with parameter names in errors; on copies, as read-only outputs are never written.
        bind_arguments(self.params, emu_args)
        start = time.perf_counter()
        # With an emulated reference the bar covers both runs: the stage first, then stage 0.
        share = 0.5 if reference == "input" else 1.0
        failure = None
        result = None
        try:
            result = self.emulate(*emu_args, stage=s.index, mode=mode, check=check,
                                  progress=None if progress is None else (lambda f: progress(share * f)))
        except EmulationError as exc:
            if on_error != "partial":
                raise
            failure = str(exc)
        emulate_seconds = time.perf_counter() - start
        actual = self.result_values(emu_args, result)
        start = time.perf_counter()
        if isinstance(reference, str):
            ref_args = [a.copy() if isinstance(a, np.ndarray) else a for a in arrays]
            if reference == "native":
                # The emulation above raised on inputs that make the native kernel trap (unless it was
                # kept going by on_error='partial': then the native run checks them itself).
                ref_result = self.run_native(*ref_args, _emulated=failure is None)
                ref_name = "native"
            else:
                ref_result = self.emulate(*ref_args, stage=0, mode=mode,
                                          progress=None if progress is None else (lambda f: progress(0.5 + 0.5 * f)))
                ref_name = INPUT_REFERENCE_NAME
            expected = self.result_values(ref_args, ref_result)
        elif callable(reference):
            inputs = [a for a, p in zip(arrays, self.params) if not p.is_output]
            got = reference(*[a.copy() if isinstance(a, np.ndarray) else a for a in inputs])
            ref_name = getattr(reference, "__name__", "reference")
            expected = reference_outputs(got, self.result_names, ref_name)
        else:
            raise CompareError(f"reference must be one of {REFERENCES} or a callable, got {reference!r}")
        reference_seconds = time.perf_counter() - start
        names = self.result_names
        result = CompareResult(stage=s.label, reference=ref_name,
                               outputs=compare_outputs(names, actual, expected, rtol, atol),
                               emulate_seconds=emulate_seconds, reference_seconds=reference_seconds, mode=mode,
                               error=failure)
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
        (``sizes``: the symbolic sizes the ``.py`` files run with by default; see
        :func:`tvm_hybrid_nb.dump.save`, and :func:`tvm_hybrid_nb.dump.load` to read it back)."""
        return dump_write.save(self, directory, overwrite=overwrite, sizes=sizes)

    def __repr__(self) -> str:
        changed = sum(1 for s in self.stages[1:] if s.changed)
        try:
            sig = ", ".join(p.describe() for p in self.params)
        except HybridError:
            sig = "?"
        target = getattr(getattr(self.target, "kind", None), "name", self.target)
        failed = (f"; lowering FAILED in {self.failure.step}" if self.failure is not None else "")
        return (f"<HybridModule {self.name}({sig}) target={target} stages={len(self.stages)} "
                f"({changed} passes changed the IR{failed})>")

    def _repr_html_(self) -> str:
        # Jupyter's display hook: the only upward import of this layer (pygments loads on display only).
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
#: Seconds between two progress reports of loops nested more than two deep (the outermost loop and
#: the first inside it report every iteration).
PROGRESS_INTERVAL = 0.05
#: Helpers of a stage-0 script that mean the native kernel can trap on some inputs.
_TRAPPING_HELPERS = frozenset({"_check_divisor", "load", "store", "access"})


class _ProgressCallbackError(Exception):
    """Carries an exception raised by the user's progress callback through the kernel."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


def _native_tensor(spec: ParamSpec, value: np.ndarray, dev, keep: list, layout=None):
    """The TVM tensor the native kernel runs on: a copy of ``value`` on ``dev`` (a buffer of vectors
    as a tensor of that dtype); for a strided or
    offset parameter buffer, a DLTensor over the view's own storage (data pointer at the storage,
    ``byte_offset`` the ``elem_offset``, the buffer's strides), which only the CPU can share."""
    if not spec.is_strided:
        if re.search(r"x\d+$", spec.dtype):
            # A buffer of vectors (float32x4), whose array has a last axis of lanes: a tensor of that
            # dtype without the lanes axis.
            tensor = tvm.runtime.empty(value.shape[:-1], spec.dtype, dev)
            tensor.copyfrom(value)
            return tensor
        return tvm.runtime.tensor(value, dev)
    if dev.dlpack_device_type() != 1:
        raise DeviceUnavailableError(f"parameter {spec.name}: a strided or offset buffer runs natively only on "
                                     f"the CPU (TVM copies arrays to a device contiguously)")
    strides, offset = layout
    storage = param_storage(value, offset, strides)
    return strided_tensor(storage, value.shape, strides, offset, keep)


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


def _returned_dtype(func) -> str | None:
    """The dtype of the value ``func`` returns (its ``tirx.Return`` statements), or None."""
    if func is None:
        return None
    found: list[str] = []

    def visit(node):
        info = getattr(type(node), "__tvm_ffi_type_info__", None)
        if not found and info is not None and info.type_key == "tirx.Return":
            found.append(str(getattr(node.value.ty, "dtype", "handle")))
        return bool(found)  # pre-order: a true result skips the node's children

    tvm_ffi.structural_walk(func.body, visit, order="pre")
    return found[0] if found else None


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
    indirect = _written_indirectly(func)
    written |= {i for i, buf in enumerate(buffers) if any(buf.same_as(w) for w in indirect)}
    out = []
    buf_index = 0
    for spec in params:
        if spec.is_buffer:
            spec = dataclasses.replace(spec, is_output=buf_index in written)
            buf_index += 1
        out.append(spec)
    return out


#: The runtime functions the emulator knows: which of their arguments (a slice) are outputs.
_PACKED_OUTPUTS = {"tvm.contrib.sort.sort": (1, -2), "tvm.contrib.sort.argsort": (1, -2),
                   "tvm.contrib.sort.topk": (1, -4)}


def _written_indirectly(func) -> list:
    """Buffers written where the access analysis does not look: through a block's match_buffer (its
    ``T.writes`` regions), ``masked_store``, the output arguments of packed calls, and buffers
    declared at the address of an element (``address_of(B[i, 0])``, or a pointer bound to one)."""
    found: list = []
    pointers: dict = {}  # pointer variable -> address_of(B[...])
    views: dict = {}  # buffer declared at an element's address -> the buffer of the element
    stored: list = []

    def address(data):
        if isinstance(data, tvm.tirx.Var) and data.__chandle__() in pointers:
            data = pointers[data.__chandle__()]
        if isinstance(data, tvm.ir.Call) and isinstance(data.op, tvm.ir.Op) and data.op.name == "tirx.address_of":
            load = data.args[0]
            return load.buffer if hasattr(load, "buffer") else getattr(load, "source", None)
        return None

    def visit(node):
        info = getattr(type(node), "__tvm_ffi_type_info__", None)
        key = info.type_key if info is not None else ""
        if key == "tirx.Bind" and address(node.value) is not None:
            pointers[node.var.__chandle__()] = node.value
        elif key == "tirx.DeclBuffer" and address(node.data) is not None:
            views[node.buffer.__chandle__()] = address(node.data)
        elif key == "tirx.BufferStore":
            stored.append(node.buffer)
        if isinstance(node, tvm.s_tir.SBlock):
            for region in node.writes:
                found.append(region.source)
        elif isinstance(node, tvm.ir.Call) and isinstance(node.op, tvm.ir.Op):
            if node.op.name == "tirx.masked_store":
                found.append(node.args[0])
            elif node.op.name == "tirx.tvm_call_packed" and str(node.args[0].value) in _PACKED_OUTPUTS:
                first, last = _PACKED_OUTPUTS[str(node.args[0].value)]
                for arg in list(node.args)[1 + first:len(node.args) + last]:
                    if isinstance(arg, tvm.ir.Call) and arg.op.name == "tirx.tvm_stack_make_array":
                        found.append(arg.args[0])
        return True

    tvm_ffi.structural_walk(func.body, visit, order="post")  # a Bind before the statements after it
    for buf in stored:
        while buf.__chandle__() in views:  # a view of a view: the buffer it finally points into
            buf = views.pop(buf.__chandle__())
            found.append(buf)
    out = []
    for node in found:
        if isinstance(node, tvm.ir.Call):  # buffer_data(B)
            node = node.args[0]
        out.append(node)
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


#: What :func:`build` does when a TVM pass fails.
ON_FAILURE = ("raise", "keep")


def build(obj: Any, target: Any = "llvm", name: str | None = None, pipeline: str = "default",
          on_failure: str = "raise") -> HybridModule:
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
    on_failure : {"raise", "keep"}
        When a TVM pass fails: ``"raise"`` a :class:`BuildError` whose ``stages``, ``failure`` and
        ``module`` keep what was captured; ``"keep"`` return that module, with ``hm.failure`` (pass
        name, stage number, TVM's full message) and every stage up to the failing pass.

    Returns
    -------
    HybridModule
    """
    if on_failure not in ON_FAILURE:
        raise ValueError(f"on_failure must be one of {ON_FAILURE}, got {on_failure!r}")
    fname, mod = as_ir_module(obj, name)
    try:
        target_obj = tvm.target.Target(target) if not isinstance(target, tvm.target.Target) else target
    except Exception as exc:
        raise BuildError(f"unknown target {target!r}: {_capture.short_tvm_message(exc)}") from exc
    start = time.perf_counter()
    try:
        lib, raw, seconds = _capture.run_pipeline(
            mod, target_obj, build=lambda m, target: tvm.tirx.build(m, target=target, pipeline=pipeline))
    except BuildError as exc:
        if exc.failure is None:
            raise
        exc.module = HybridModule(fname, target_obj, exc.stages, build_seconds=time.perf_counter() - start,
                                  failure=exc.failure)
        if on_failure == "keep":
            return exc.module
        raise
    return HybridModule(fname, target_obj, raw, native=lib, build_seconds=seconds)
