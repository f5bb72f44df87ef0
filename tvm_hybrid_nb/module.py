"""HybridModule: one schedule compiled by TVM's real pipeline, with every pass kept and runnable.

This module owns :class:`HybridModule` (lookup, running emulated and native, comparison, ``as_op``,
``save``, display) and :func:`build` with its input normalisation (:func:`as_ir_module`).  Its
helpers have rooms of their own, each below this module: :mod:`~tvm_hybrid_nb.stage` (a captured
stage: code generation, plan, kernels with progress hooks), :mod:`~tvm_hybrid_nb.native` (the TVM
tensors of a native run, aliased arguments), :mod:`~tvm_hybrid_nb.specialize` (``as_op``'s sizes
and specialisation) and :mod:`~tvm_hybrid_nb.tir_info` (outputs, return value and names read off
the TIR).  ``Stage`` and ``EMULATION_MODES`` are importable from here as before.

Layering: this module joins pipeline capture (TVM) and hybrid code generation (TVM → Python) with
the numpy-only emulation runtime.  ``save`` writes through :mod:`tvm_hybrid_nb.dump_write` (below
this module; :mod:`tvm_hybrid_nb.dump`, which reads dumps back, is above it).  The one upward import
is ``_repr_html_``'s: Jupyter asks the object for its HTML, and it is rendered by
:mod:`tvm_hybrid_nb.presentation`, imported only then (presentation imports nothing of this package,
so no cycle; ``tests/test_import_layers.py`` allows exactly this hook).
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Callable, Sequence

import numpy as np
import tvm
import tvm_ffi
from tvm import te

from . import capture as _capture
from . import dump_write
from .codegen import kernel_signature
from .codegen.names import _packed_function, _type_key
from .compare import CompareResult, check_tolerance, compare_outputs, reference_outputs
from .errors import (ArgumentCountError, ArgumentShapeError, ArgumentTypeError, BuildError, CompareError,
                     DeviceUnavailableError, EmulationError, HybridError, StageLookupError,
                     StageNotEmulatableError, UndefinedResultError, UnsupportedConstructError)
from .native import _TRAPPING_HELPERS, _aliased_arguments, _native_tensor
from .signature import ParamSpec, bind_arguments, strided_argument, check_native_transfer, random_arguments
from .specialize import _bind_sizes, _element_reader, _specialized
from .runtime import OUT_OF_RANGE_CONVERSIONS, OutOfRangeConversions
from .stage import EMULATION_MODES, Stage, _run_kernel
from .tir_info import (_addresses_from_data, _mark_outputs, _python_function_name, _returned_dtype,
                       _select_function)

_NATIVE_BUILD_LOCK = threading.RLock()
#: The references :meth:`HybridModule.compare` knows by name (besides a callable).
REFERENCES = ("native", "input")
#: How a comparison with ``reference="input"`` names its reference.
INPUT_REFERENCE_NAME = "input stage (emulated)"
#: How comparisons name the value a kernel returns (``tirx.Return``).
RETURN_VALUE_NAME = "return value"


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
        #: Generated scripts by program and options, shared by stages that differ only in function
        #: attributes (see :meth:`Stage._generate_kernel`).
        self._generated_by_program: dict = {}
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
        bound = bind_arguments(self.params, arrays)
        # Raises StageNotEmulatableError; fast mode: cheap sizes run the exact plan.
        kernel = s.kernel(mode, check, sizes=bound.sizes)
        pristine = (_copies(arrays) if getattr(kernel, "converts_float_to_int", False)
                    or getattr(kernel, "leaves_orders_open", False) else None)
        record = OutOfRangeConversions()
        try:
            returned = self._run_bound(kernel, s, bound, arrays, progress, record)
        except EmulationError as exc:
            if not (check and record.first is not None and pristine is not None and _is_overflow(exc)):
                raise
            # An overflow after a conversion that LLVM makes poison may be the poison's (x86's
            # INT_MIN stand-in times 3): run again with 0 for those values, the overflow sanitizer
            # on; an overflow there too is the kernel's.  The probes below then find the outputs that
            # depend on the poison.
            for a, p in zip(arrays, pristine):
                if isinstance(a, np.ndarray):
                    a[...] = p
            record = OutOfRangeConversions("zero")
            try:
                returned = self._run_bound(kernel, s, bind_arguments(self.params, arrays), arrays, progress, record)
            except EmulationError:
                raise exc from None
        result = self._outputs_of(arrays, returned)
        if record.first is not None or record.unordered_cause is not None:
            self._refuse_undefined_results(kernel, s, pristine, self.result_values(arrays, result), record)
        return result

    def _run_bound(self, kernel, s: Stage, bound, arrays, progress, record: OutOfRangeConversions):
        """Run ``kernel`` on the arguments ``bound`` from ``arrays``, out-of-range conversions given
        ``record``'s values; returns what the kernel returns."""
        values = list(bound.values)
        aliased = _aliased_arguments(self.params, arrays)
        for k in aliased:  # as run_native: each parameter sees its own copy of what it was given
            values[k] = (strided_argument(self.params[k], values[k], True, bound.layouts[k]) if self.params[k].is_strided
                         else np.array(values[k], copy=True))
        token = OUT_OF_RANGE_CONVERSIONS.set(record)
        try:
            returned = _run_kernel(kernel, values, s, progress)
        finally:
            OUT_OF_RANGE_CONVERSIONS.reset(token)
        for k in aliased:  # outputs written back in parameter order, as run_native does
            if self.params[k].is_output:
                bound.values[k][...] = values[k]
        bound.finish()
        return returned

    def _refuse_undefined_results(self, kernel, s: Stage, pristine: list, results: list,
                                  record: OutOfRangeConversions) -> None:
        """A run converted floats out of an integer type's range, or ordered values where the kernel
        leaves the order open (``record.unordered``): run again from ``pristine`` with those values at
        the type's min, max and zero (the values in other orders), and raise
        :class:`UndefinedResultError` when a result element changes (it depends on LLVM poison or on
        an unspecified order; a discarded value changes none)."""
        undefined = [np.zeros(np.shape(r), bool) for r in results]
        for policy in OutOfRangeConversions.POLICIES[1:]:
            args = _copies(pristine)
            returned = self._run_bound(kernel, s, bind_arguments(self.params, args), args, None,
                                       OutOfRangeConversions(policy, probing=True))
            for mask, a, b in zip(undefined, results, self.result_values(args, self._outputs_of(args, returned))):
                mask |= _bits_differ(a, b)
        counts = [int(m.sum()) for m in undefined]
        if not any(counts):
            return
        k = next(i for i, c in enumerate(counts) if c)
        index = [int(i) for i in np.argwhere(undefined[k])[0]] if undefined[k].ndim else []
        if record.first is not None:
            value, src, dst = record.first
            cause = (f"a {src} -> {dst} conversion of a value out of {dst}'s range (first seen: {value!r}), which "
                     f"is poison in LLVM - the native kernel's value depends on how the loop was compiled")
        else:
            cause = record.unordered_cause
        raise UndefinedResultError(
            f"emulation of stage {s.label}: {self.result_names[k]}{index if index else ''} is undefined on these "
            f"inputs ({sum(counts)} result element{'s' if sum(counts) != 1 else ''} in all): it depends on "
            f"{cause}", results, undefined)

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
        self._refuse_crashing_library_calls()
        if not _emulated:
            self._refuse_trapping_inputs(bound.values, bound.sizes)
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

    def _refuse_crashing_library_calls(self) -> None:
        """Refuse a native run that would call TVM's runtime library on data it corrupts memory with:
        ``tvm.contrib.sort.*`` (relax's sort, argsort and topk on a CPU) on bfloat16 arrays sorts
        garbage and overwrites the heap (the process aborts: ``free(): invalid next size``)."""
        func = self.stages[0].function
        if func is None or "tvm.contrib.sort" not in self.stages[0].script:  # the stage's cached text
            return
        sorted_bf16 = []

        def visit(node):
            if _type_key(node) == "ir.Call" and (_packed_function(node) or "").startswith("tvm.contrib.sort"):
                tvm_ffi.structural_walk(node, lambda n: sorted_bf16.append(n) if _type_key(n) == "ir.FloatImm"
                                        and str(n.ty) == "bfloat16" else None, order="post")

        tvm_ffi.structural_walk(func.body, visit, order="post")
        if sorted_bf16:
            raise ArgumentTypeError(
                "bfloat16 arrays cannot be sorted by the native kernel: TVM's tvm.contrib.sort corrupts memory "
                "on them (the process aborts); emulate it instead, or compare with a numpy reference: "
                "compare(..., reference=FUNC)")

    def _refuse_trapping_inputs(self, values: list, sizes: dict | None = None, results: dict | None = None) -> None:
        """Emulate stage 0 (fast mode, on copies) before a native run when its kernel has
        operations that can trap, and refuse the run when the emulation traps.  With ``results`` (a
        dict), the run is a whole :meth:`emulate` and its :meth:`result_values` are kept there under
        the program's text (:func:`~tvm_hybrid_nb.codegen.program_text`): a caller that emulates
        stage 0 on the same inputs next need not run it again (the corpus's conv3d: 12 s)."""
        s = self.stages[0]
        gen = s._generate()
        if gen is None:
            data_addresses = _addresses_from_data(s.function) if s.function is not None else None
            if data_addresses is not None:
                raise StageNotEmulatableError(
                    f"native run refused: stage 0 cannot be emulated ({s.reason}), so these inputs cannot be "
                    f"checked first, and its {data_addresses} addresses memory by their values: on inputs "
                    f"it was not written for, the process could crash")
            return
        if not set(gen.helpers) & _TRAPPING_HELPERS:
            return
        copies = [np.array(v, copy=True) if isinstance(v, np.ndarray) else v for v in values]
        try:
            if results is None:
                _run_kernel(s.kernel("fast", sizes=sizes), copies, s)
            else:
                from .codegen import program_text

                program = program_text(s.kernel("fast", sizes=bind_arguments(self.params, copies).sizes).source)
                results[program] = self.result_values(copies, self.emulate(*copies, stage=0, mode="fast"))
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
        bound_sizes = bind_arguments(self.params, emu_args).sizes
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
        exact_reason = ""
        if mode == "fast" and not check:  # the plan this call ran: for its sizes, maybe the exact one
            with contextlib.suppress(HybridError):
                exact_reason = s.kernel(mode, check, sizes=bound_sizes).plan.exact_reason
        result = CompareResult(stage=s.label, reference=ref_name,
                               outputs=compare_outputs(names, actual, expected, rtol, atol),
                               emulate_seconds=emulate_seconds, reference_seconds=reference_seconds, mode=mode,
                               error=failure, exact_reason=exact_reason)
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
        except AssertionError as exc:
            # te.extern_primfunc tells inputs from outputs by the buffer accesses it sees.
            raise BuildError(f"could not make an op from {self.name}: TVM's te.extern_primfunc finds no "
                             f"{'input' if 'input' in str(exc) else 'output'} buffer access in it (a kernel that "
                             f"touches its buffers only through a packed call, e.g. tvm.contrib.sort)") from exc
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



def _is_overflow(exc: EmulationError) -> bool:
    """Whether an emulation failed on the overflow sanitizer (``checked_arith``): the overflow, or the
    read of the element an overflowing value was stored to (poison on LLVM targets)."""
    return isinstance(exc.__cause__, (ValueError, RuntimeError)) and " overflow: " in str(exc.__cause__)


def _copies(arrays) -> list:
    """``arrays`` with every numpy array copied (scalars are immutable)."""
    return [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in arrays]


def _bits_differ(a, b) -> np.ndarray:
    """Where two results of one dtype differ bit for bit (NaNs of one payload are equal)."""
    a, b = np.array(a, copy=True, order="C"), np.array(b, copy=True, order="C")
    if a.dtype == np.bool_ or a.dtype.itemsize not in (1, 2, 4, 8):
        return a != b
    kind = f"u{a.dtype.itemsize}"
    return a.view(kind) != b.view(kind)


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
