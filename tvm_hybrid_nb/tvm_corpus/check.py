"""Checking one rebuilt function (in a worker): its llvm build run natively on seeded inputs (other
input sets when those trap), then every changed stage emulated and compared; the categories of
functions without a native reference."""
from __future__ import annotations

import os
from typing import Callable

from ..zoo import KernelOutcome, cause_first as _cause_first, explain_wrong


#: Outcomes of a harvested function, in table order.  The first three are not tests of the emulator.
NOT_TESTED = ("not built here", "no native reference", "duplicate")
TESTED = ("ok", "refused", "crash", "wrong", "timeout")

#: Size given to every symbolic dimension and integer scalar parameter (``n``, ``m``, ...).
DEFAULT_SIZE = 4

#: Scalar value given to float scalar parameters.
DEFAULT_FLOAT = 0.5


# ---------------------------------------------------------------------- check (in the worker)
def _sizes_and_scalars(params) -> tuple[dict, dict]:
    """Every symbolic size and scalar parameter: the zoo's sizes where it has them, else small values."""
    from ..signature import dim_symbols
    from ..zoo import SYMBOLIC_SIZES

    sizes: dict = {}
    scalars: dict = {}
    for p in params:
        for d in p.shape or ():
            for name in dim_symbols(d):
                sizes.setdefault(name, SYMBOLIC_SIZES.get(name, DEFAULT_SIZE))
    for p in params:
        if p.is_buffer:
            continue
        if p.dtype.startswith("float") or p.dtype.startswith("bfloat"):
            scalars[p.name] = DEFAULT_FLOAT
        elif p.dtype == "bool":
            scalars[p.name] = True
        else:
            scalars[p.name] = sizes.get(p.name, SYMBOLIC_SIZES.get(p.name, DEFAULT_SIZE))
            sizes.setdefault(p.name, scalars[p.name])
    return sizes, scalars


def _is_tvm_error(exc: BaseException) -> bool:
    """Whether TVM itself refused (its build, its runtime, the arguments it checks), not this package.

    TVM's errors arrive as built-in exception types, so the traceback decides: the innermost frame in
    TVM's Python code or its FFI is deeper than the innermost frame in this package."""
    import traceback

    from ..errors import ArgumentCountError, ArgumentShapeError, ArgumentTypeError, BuildError, \
        DeviceUnavailableError

    if isinstance(exc, (BuildError, DeviceUnavailableError)):
        return True
    if isinstance(exc, (ArgumentTypeError, ArgumentShapeError, ArgumentCountError)):
        return True  # no numpy value for a parameter (a raw pointer, a vector dtype): no native run either
    ours = tvm = -1
    for depth, frame in enumerate(traceback.extract_tb(exc.__traceback__)):
        name = frame.filename.replace(os.sep, "/")
        if "/tvm_hybrid_nb/" in name:
            ours = depth
        elif "/tvm/" in name or "/tvm_ffi/" in name or name.endswith(".pxi"):
            tvm = depth
    return tvm > ours


#: Other inputs tried, in order, when the kernel traps on the seeded ones (an index read from an input
#: array, a constant shape that a symbolic size of DEFAULT_SIZE overruns, an integer scalar offset):
#: (label, the value of every symbolic size and integer scalar or None to keep them, the range
#: [low, high) of integer input arrays or None to keep theirs, whether integer scalars that are
#: neither a size nor a loop bound are 0: an offset, not a trip count that 0 would make vacuous).
_RETRY_INPUTS = (
    ("integer arrays in [0, 4)", None, (0, 4), False),
    ("sizes 16", 16, None, False),
    ("sizes 16, integer arrays in [0, 4)", 16, (0, 4), False),
    ("sizes 1, integer arrays in [0, 2)", 1, (0, 2), False),
    ("integer scalars 0", None, None, True),
)


def _loop_bounds(func) -> set[str]:
    """The names of the variables in the bounds of ``func``'s loops."""
    import tvm
    import tvm_ffi

    names: set[str] = set()

    def add_var(node):
        if isinstance(node, tvm.tirx.Var):
            names.add(node.name)

    def visit(node):
        info = getattr(type(node), "__tvm_ffi_type_info__", None)
        if info is not None and info.type_key == "tirx.For":
            tvm_ffi.structural_walk(node.min, add_var, order="post")
            tvm_ffi.structural_walk(node.extent, add_var, order="post")

    tvm_ffi.structural_walk(func.body, visit, order="post")
    return names


def _seeded_inputs(params, seed: int, size: int | None = None, int_range: tuple | None = None,
                   zero_scalars: bool = False, loop_bounds: set = frozenset()) -> list:
    """Seeded inputs for ``params``: sizes and scalars from :func:`_sizes_and_scalars`, or ``size`` for
    every symbolic size and integer scalar; integer input arrays in ``int_range`` when given; integer
    scalars that no shape uses and no loop bound (``loop_bounds``, names) 0 with ``zero_scalars``."""
    import numpy as np

    from ..signature import dim_symbols, in_range_indices, seeded_values

    sizes, scalars = _sizes_and_scalars(params)
    integer = {k for k, v in scalars.items() if isinstance(v, int) and not isinstance(v, bool)}
    if size is not None:
        sizes = dict.fromkeys(sizes, size)
        scalars.update(dict.fromkeys(integer, size))
    if zero_scalars:
        dims = {name for p in params for d in (p.shape or ()) for name in dim_symbols(d)}
        scalars.update(dict.fromkeys(integer - dims - set(loop_bounds), 0))
    specs = [(p.name, p.dtype, list(p.shape) if p.is_buffer else None, p.is_output) for p in params]
    values = in_range_indices(params, seeded_values(specs, seed, sizes, scalars=scalars), seed, {**scalars, **sizes})
    if int_range is not None:
        rng = np.random.default_rng(seed)
        for k, (p, v) in enumerate(zip(params, values)):
            if p.is_buffer and not p.is_output and isinstance(v, np.ndarray) and v.dtype.kind in "iu":
                values[k] = rng.integers(int_range[0], int_range[1], v.shape).astype(v.dtype)
    return values


def check_function(func, name: str, mode: str = "fast", seed: int = 0,
                   report: Callable[[str], None] = lambda phase: None) -> KernelOutcome:
    """Build ``func`` for llvm, run it natively on seeded inputs (twice: a run that does not repeat
    itself is no reference) and emulate every changed stage before MakePackedAPI in ``mode``.

    ``report(phase)`` is called as the check advances ("build", "native", then each stage's label)."""
    import numpy as np

    from .. import module as hmodule
    from ..errors import (ArgumentCountError, ArgumentShapeError, ArgumentTypeError, EmulationError,
                          StageNotEmulatableError, UnsupportedConstructError)
    from ..zoo import crash_reason, emulate_stages

    outcome = KernelOutcome("tvm-tests", name, "ok")
    report("build")
    try:
        hm = hmodule.build(func, target="llvm")
    except Exception as exc:  # noqa: BLE001
        if _is_tvm_error(exc):
            outcome.outcome, outcome.reason = "no native reference", f"llvm build: {str(exc).splitlines()[0][:200]}"
        else:
            outcome.outcome, outcome.stage, outcome.reason = "crash", "build", crash_reason(exc)
        return outcome
    try:
        params = hm.params
    except StageNotEmulatableError as exc:
        outcome.outcome, outcome.stage, outcome.reason = "refused", "signature", str(exc)
        return outcome
    # Inputs on which the kernel traps (division by zero, out of bounds) are refused before the
    # native run, by an emulation of stage 0: its own phase, so that its time counts as ours.  When the
    # seeded inputs trap, the other input sets of _RETRY_INPUTS are tried before giving up.
    inputs = trap = None
    stage0_results: dict = {}  # the trap check's run of stage 0, by program (see emulate_stages)
    loop_bounds = _loop_bounds(func)
    for attempt, (label, size, int_range, zero_scalars) in enumerate(((None, None, None, False),) + _RETRY_INPUTS):
        try:
            candidate = _seeded_inputs(params, seed, size, int_range, zero_scalars, loop_bounds)
        except Exception as exc:  # noqa: BLE001 - a dtype numpy has no values for
            if attempt == 0:
                outcome.outcome, outcome.reason = "no native reference", f"no seeded inputs: {exc}"
                return outcome
            continue
        report("0 input (trap check)")
        try:
            stage0_results.clear()
            hm._refuse_trapping_inputs([a.copy() if isinstance(a, np.ndarray) else a for a in candidate],
                                       results=stage0_results if mode == "fast" else None)
        except EmulationError as exc:
            trap = trap or _trap_reason(str(exc))
            continue
        except (ArgumentTypeError, ArgumentShapeError, ArgumentCountError) as exc:
            # No numpy value for a parameter (a raw pointer): the native run cannot take one either.
            outcome.outcome, outcome.reason = "no native reference", f"native run: {str(exc)[:200]}"
            return outcome
        except Exception as exc:  # noqa: BLE001
            outcome.outcome, outcome.stage, outcome.reason = "crash", "0 input (trap check)", crash_reason(exc)
            return outcome
        inputs = candidate
        if label is not None:
            outcome.reason = f"on other inputs ({label}): the seeded ones trap"
        break
    if inputs is None:
        outcome.outcome = "no native reference"
        outcome.reason = f"{trap} (and on {len(_RETRY_INPUTS)} other input sets)"
        return outcome
    report("native")
    runs = []
    for _ in range(2):
        args = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
        try:
            result = hm.run_native(*args, _emulated=True)
        except (EmulationError, UnsupportedConstructError, StageNotEmulatableError) as exc:
            outcome.outcome, outcome.reason = "no native reference", f"native run refused: {str(exc)[:200]}"
            return outcome
        except Exception as exc:  # noqa: BLE001
            if isinstance(exc, MemoryError):  # the worker's address-space limit (--memory-gib)
                outcome.outcome, outcome.reason = "no native reference", f"memory limit: {str(exc)[:200]}"
            elif _is_tvm_error(exc):
                outcome.outcome, outcome.reason = "no native reference", f"native run: {str(exc).splitlines()[0][:200]}"
            else:
                outcome.outcome, outcome.stage, outcome.reason = "crash", "native", crash_reason(exc)
            return outcome
        runs.append(hm.result_values(args, result))  # the outputs, and the value the kernel returns
    from ..zoo_reference import _outputs_equal
    if _outputs_equal(runs[1], runs[0]):
        outcome.outcome = "no native reference"
        outcome.reason = "two native runs on the same inputs differ" + (f" ({outcome.reason})" if outcome.reason else "")
        return outcome
    try:
        emulate_stages(hm, inputs, runs[0], outcome, mode=mode, on_stage=report, known_results=stage0_results)
    except Exception as exc:  # noqa: BLE001
        cause = exc.__cause__
        if (isinstance(exc, EmulationError) and isinstance(cause, ValueError) and "undefined" in str(cause)
                and outcome.stages_checked == 0):
            # The inputs reach undefined behaviour (clz(0), an over-wide shift) at the first stage
            # already: the native result is no reference.
            outcome.outcome, outcome.stage = "no native reference", ""
            outcome.reason = f"undefined on the seeded inputs: {cause}"
        else:
            outcome.outcome, outcome.reason = "crash", crash_reason(exc)
    if outcome.outcome == "wrong":
        _explain_wrong(hm, inputs, outcome, mode)
    return outcome


def _trap_reason(message: str) -> str:
    """The reason of inputs refused because the emulation of stage 0 traps on them."""
    return f"native run refused, the inputs trap: {_cause_first(message)}"[:400]


def _explain_wrong(hm, inputs, outcome: KernelOutcome, mode: str) -> None:
    """What the sanitizers say about a wrong answer (:func:`tvm_hybrid_nb.zoo.explain_wrong`); when
    they flag the function as written, the native result is no reference."""
    first = explain_wrong(hm, inputs, outcome, mode)
    if first is not None:
        outcome.outcome, outcome.stage = "no native reference", ""
        outcome.reason = f"the function as written is flagged by the sanitizers: {first}"


#: Why a function has no native reference, by category: (category, pattern on the reason), first match wins.
#: The categories that could hide a false positive of this package (inputs that trap, sanitizer flags,
#: undefined behaviour) name the emulator's verdict, so that they can be audited one by one.
_NO_REFERENCE_CATEGORIES = (
    ("TVM cannot build it for llvm", r"^llvm build: "),
    ("no numpy value for a parameter", r"^native run: parameter \S+: |^no seeded inputs"),
    ("TVM's runtime refuses it", r"^native run: "),
    ("inputs trap: division by zero", r"^native run refused, the inputs trap: ZeroDivisionError"),
    ("inputs trap: division overflow", r"^native run refused, the inputs trap: OverflowError"),
    ("inputs trap: out of bounds", r"^native run refused, the inputs trap: IndexError"),
    ("native run refused", r"^native run refused: "),
    ("undefined on the seeded inputs", r"^undefined on the seeded inputs"),
    ("sanitizers: read of never-written memory", r"^the function as written is flagged .*never written"),
    ("sanitizers: data race", r"^the function as written is flagged .*data race"),
    ("sanitizers: out of bounds", r"^the function as written is flagged .*out-of-bounds"),
    ("sanitizers: other", r"^the function as written is flagged"),
    ("native runs differ", r"^two native runs"),
    ("TVM's build or run is over the time limit", r"^over \S+ s in TVM's"),
    ("memory limit", r"^memory limit"),
    ("TVM's build crashed the process", r"^the process died .* in TVM's build"),
    ("the native run crashed the process", r"^the process died .* in TVM's native"),
    ("the process died", r"^the process died"),
)


def no_reference_category(reason: str) -> str:
    """The category of a "no native reference" outcome's reason (see ``_NO_REFERENCE_CATEGORIES``)."""
    import re

    for category, pattern in _NO_REFERENCE_CATEGORIES:
        if re.search(pattern, reason):
            return category
    return "other"


def _error_line(exc: BaseException) -> str:
    """The line of an exception's message that says what is wrong (TVMScript's diagnostics put the
    source and a caret line around it)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    said = [line for line in lines if "error" in line.lower() and not line.startswith("-->")]
    return (said or lines or [""])[0]
