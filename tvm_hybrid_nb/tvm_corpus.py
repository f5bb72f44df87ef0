"""The TIR in TVM's own Python tests, harvested from a local TVM checkout and emulated at every stage.

``python -m tvm_hybrid_nb zoo --tvm-tests PATH/TO/tvm/tests/python`` walks the ``.py`` files under
PATH, finds every ``@T.prim_func`` definition with :mod:`ast` (at module level, in a class body, or
nested in a test function) and, without importing the test module, rebuilds it: the imports and
simple assignments of the scopes around it run in a fresh namespace, then the function's own source
goes through ``tvm.script.parse``.  Each function is built for llvm and run natively on seeded inputs
(the reference), then every changed stage before MakePackedAPI is emulated in fast mode and compared
(:func:`tvm_hybrid_nb.zoo.emulate_stages`).

Functions this TVM cannot construct (TVMScript newer than the installed TVM, or a name only the test
defines at run time) are counted as "not built here"; functions TVM itself cannot build or run for
llvm (GPU kernels, packed-API internals, inputs that trap) as "no native reference"; structural duplicates
once.  Each function runs in a worker process with a time limit and an address-space limit, so a hang
or a crash costs only that function.  TVM's sources are read where the user has them; nothing of them
is shipped with this package.
"""
from __future__ import annotations

import argparse
import ast
import errno
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .zoo import TVM_FINDING, KernelOutcome, cause_first as _cause_first, explain_wrong

#: Outcomes of a harvested function, in table order.  The first three are not tests of the emulator.
NOT_TESTED = ("not built here", "no native reference", "duplicate")
TESTED = ("ok", "refused", "crash", "wrong", "timeout")

#: Size given to every symbolic dimension and integer scalar parameter (``n``, ``m``, ...).
DEFAULT_SIZE = 4

#: Scalar value given to float scalar parameters.
DEFAULT_FLOAT = 0.5

#: Seconds a fresh worker process may take to import TVM before its first function's clock starts.
_STARTUP_SECONDS = 60.0

#: Seconds the imports and assignments around a function may take, outside the function's clock: a
#: test module's imports (``tvm.s_tir.tensor_intrin.cuda`` registers hundreds of intrinsics) take
#: minutes on a loaded machine, once per worker.  A file whose surroundings take longer is given up.
_CONTEXT_SECONDS = 600.0

#: Decorators that make a PrimFunc (as TVM's tests spell them).
_PRIM_FUNC_DECORATORS = ("T.prim_func", "tvm.script.tirx.prim_func", "tirx.prim_func", "prim_func")


# ---------------------------------------------------------------------- harvest (ast only, no TVM)
@dataclass(frozen=True)
class HarvestedFunc:
    """Where one ``@T.prim_func`` definition is: ``path`` (absolute), ``origin`` (``file:qualname``)."""

    path: str
    rel: str
    qualname: str
    lineno: int

    @property
    def origin(self) -> str:
        return f"{self.rel}:{self.qualname}"

    @property
    def group(self) -> str:
        """The directory the test file is in, relative to the harvested root (the table's rows)."""
        parent = str(Path(self.rel).parent)
        return "." if parent in ("", ".") else parent


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    try:
        return ast.unparse(target)
    except Exception:  # pragma: no cover - ast.unparse handles every expression
        return ""


def _is_prim_func(node: ast.AST) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
        _decorator_name(d) in _PRIM_FUNC_DECORATORS for d in node.decorator_list)


def _scoped_children(node: ast.AST):
    """Statements directly in ``node``'s scope, descending into if/for/with/try but not into defs."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield child
        elif isinstance(child, ast.stmt):
            yield child
            yield from _scoped_children(child)


def _find_prim_funcs(tree: ast.Module):
    """(qualname, FunctionDef node, enclosing scopes) of every ``@T.prim_func`` in ``tree``."""
    found = []

    def walk(scope: ast.AST, chain: list, prefix: str) -> None:
        for node in _scoped_children(scope):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + node.name
                if _is_prim_func(node):
                    found.append((name, node, chain))
                    continue  # a PrimFunc's body is TIR, nothing to harvest inside it
                walk(node, chain + [node], name + ".")
            elif isinstance(node, ast.ClassDef):
                walk(node, chain + [node], prefix + node.name + ".")

    walk(tree, [tree], "")
    return found


def harvest(root: str | os.PathLike) -> list[HarvestedFunc]:
    """Every ``@T.prim_func`` definition in the ``.py`` files under ``root`` (a directory or one file),
    found with :mod:`ast`; files that do not parse as Python are skipped.  Sorted by file and line."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(root))
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*.py") if p.is_file())
    base = root.parent if root.is_file() else root
    out = []
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        rel = str(path.relative_to(base))
        for qualname, node, _chain in _find_prim_funcs(tree):
            out.append(HarvestedFunc(str(path.resolve()), rel, qualname, node.lineno))
    return out


# ---------------------------------------------------------------------- construct (in the worker)
_PRELUDE = """\
import numpy
import numpy as np
import tvm
from tvm.script import tirx as T
from tvm.script import ir as I
"""


def _simple_statement(node: ast.stmt, module_level: bool) -> bool:
    """Statements run to rebuild a function's surroundings: imports and assignments to names; at module
    level also helper function definitions (``@T.macro`` and plain ones) that are not PrimFuncs."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(node, ast.Assign):
        return all(isinstance(t, (ast.Name, ast.Tuple)) for t in node.targets)
    if isinstance(node, ast.AnnAssign):
        return node.value is not None and isinstance(node.target, ast.Name)
    if module_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return not _is_prim_func(node) and not node.name.startswith("test")
    return False


def _check_well_formed(node: ast.FunctionDef) -> bool:
    for d in node.decorator_list:
        if isinstance(d, ast.Call) and _decorator_name(d) in _PRIM_FUNC_DECORATORS:
            for kw in d.keywords:
                if kw.arg == "check_well_formed" and isinstance(kw.value, ast.Constant):
                    return bool(kw.value.value)
    return True


def construct(item: HarvestedFunc, _cache: dict = {},  # noqa: B006 - a per-process parse cache
              report: Callable[[str], None] = lambda phase: None):
    """The PrimFunc ``item`` defines, rebuilt without importing its test module.

    The imports and simple assignments of every enclosing scope that precede the function run (each on
    its own; one that fails is skipped), then its source, decorators but the PrimFunc one dropped,
    goes through ``tvm.script.parse`` with that namespace (``report("parse")`` first).
    """
    import tvm

    if item.path not in _cache:
        text = Path(item.path).read_text(encoding="utf-8")
        _cache.clear()
        _cache[item.path] = (text.splitlines(keepends=True), ast.parse(text, filename=item.path))
    lines, tree = _cache[item.path]
    match = [(q, n, c) for q, n, c in _find_prim_funcs(tree) if n.lineno == item.lineno]
    if not match:
        raise LookupError(f"no @T.prim_func at {item.rel}:{item.lineno}")
    _, node, chain = match[0]
    namespace: dict = {"__name__": "tvm_corpus_snippet", "__file__": item.path}
    exec(compile(_PRELUDE, "<prelude>", "exec"), namespace)
    for depth, scope in enumerate(chain):
        child = chain[depth + 1] if depth + 1 < len(chain) else node
        for stmt in _scoped_children(scope):
            if stmt.lineno >= child.lineno or not _simple_statement(stmt, depth == 0):
                continue
            if any(stmt is c for c in chain):
                continue
            try:
                exec(compile(ast.Module([stmt], []), item.path, "exec"), namespace)
            except BaseException as exc:  # noqa: BLE001 - the test's own code; skip what fails
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
    report("parse")
    body = textwrap.dedent("".join(lines[node.lineno - 1:node.end_lineno]))
    pf_decorator = next(d for d in node.decorator_list if _decorator_name(d) in _PRIM_FUNC_DECORATORS)
    source = "@" + ast.unparse(pf_decorator) + "\n" + body
    func = tvm.script.parse(source, extra_vars=namespace, check_well_formed=_check_well_formed(node))
    if not isinstance(func, tvm.tirx.PrimFunc):
        raise TypeError(f"parsed a {type(func).__name__}, not a PrimFunc")
    return func


# ---------------------------------------------------------------------- check (in the worker)
def _sizes_and_scalars(params) -> tuple[dict, dict]:
    """Every symbolic size and scalar parameter: the zoo's sizes where it has them, else small values."""
    from .signature import dim_symbols
    from .zoo import SYMBOLIC_SIZES

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

    from .errors import ArgumentCountError, ArgumentShapeError, ArgumentTypeError, BuildError, \
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

    from .signature import dim_symbols, in_range_indices, seeded_values

    sizes, scalars = _sizes_and_scalars(params)
    integer = {k for k, v in scalars.items() if isinstance(v, int) and not isinstance(v, bool)}
    if size is not None:
        sizes = dict.fromkeys(sizes, size)
        scalars.update(dict.fromkeys(integer, size))
    if zero_scalars:
        dims = {name for p in params for d in (p.shape or ()) for name in dim_symbols(d)}
        scalars.update(dict.fromkeys(integer - dims - set(loop_bounds), 0))
    specs = [(p.name, p.dtype, list(p.shape) if p.is_buffer else None, p.is_output) for p in params]
    values = in_range_indices(params, seeded_values(specs, seed, sizes, scalars=scalars), seed)
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

    from . import module as hmodule
    from .errors import EmulationError, StageNotEmulatableError, UnsupportedConstructError
    from .zoo import crash_reason, emulate_stages

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
            hm._refuse_trapping_inputs([a.copy() if isinstance(a, np.ndarray) else a for a in candidate])
        except EmulationError as exc:
            trap = trap or _trap_reason(str(exc))
            continue
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
    from .zoo import _outputs_equal
    if _outputs_equal(runs[1], runs[0]):
        outcome.outcome = "no native reference"
        outcome.reason = "two native runs on the same inputs differ" + (f" ({outcome.reason})" if outcome.reason else "")
        return outcome
    try:
        emulate_stages(hm, inputs, runs[0], outcome, mode=mode, on_stage=report)
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


def _worker(result_fd: int, mode: str, memory_gib: float) -> None:
    """Check the functions named on stdin (one JSON line each), reporting on ``result_fd``."""
    import resource

    if memory_gib > 0:
        limit = int(memory_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    out = os.fdopen(result_fd, "w", buffering=1)
    parent = os.getppid()

    def orphaned() -> None:  # the parent was killed: do not run on in the background
        while os.getppid() == parent:
            time.sleep(2)
        os._exit(1)

    import threading
    threading.Thread(target=orphaned, daemon=True).start()
    import tvm  # noqa: F401 - warm up before the first function's clock starts

    from . import module  # noqa: F401

    def send(**msg) -> None:
        out.write(json.dumps(msg) + "\n")
        out.flush()

    for line in sys.stdin:
        item = HarvestedFunc(**json.loads(line))
        start = time.perf_counter()
        send(phase="construct")
        try:
            func = construct(item, report=lambda phase: send(phase=phase))
        except BaseException as exc:  # noqa: BLE001 - TVMScript errors come as many types
            if isinstance(exc, KeyboardInterrupt):
                raise
            send(done=asdict(KernelOutcome("tvm-tests", item.origin, "not built here",
                                           reason=f"{type(exc).__name__}: {_error_line(exc)[:200]}",
                                           seconds=time.perf_counter() - start)))
            continue
        import tvm_ffi
        # TVM's build needs an entry symbol; a private function (no symbol) gets "main", as the zoo's do,
        # and duplicates that differ only in their name are found.
        func = func.with_attr("global_symbol", "main")
        send(phase="built", hash=str(tvm_ffi.structural_hash(func)))
        if sys.stdin.readline().strip() != "go":
            continue
        outcome = check_function(func, item.origin, mode=mode, report=lambda phase: send(phase=phase))
        outcome.seconds = time.perf_counter() - start
        send(done=asdict(outcome))


# ---------------------------------------------------------------------- run (the parent)
#: The worker's phases in which a death or a timeout is TVM's or the test module's, not the emulator's.
_NOT_OURS = {"startup": "not built here", "construct": "not built here", "parse": "not built here",
             "built": "not built here", "build": "no native reference", "native": "no native reference"}


class _Worker:
    def __init__(self, mode: str, memory_gib: float):
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = package_root + os.pathsep + env.get("PYTHONPATH", "")
        self.stderr = tempfile.TemporaryFile()  # the last line tells why a worker died
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tvm_hybrid_nb.tvm_corpus", "--worker", str(write_fd), mode, str(memory_gib)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self.stderr, pass_fds=(write_fd,),
            text=True, env=env, start_new_session=True)
        os.close(write_fd)
        self.fd = read_fd
        self.buffer = b""
        self.item: HarvestedFunc | None = None
        self.phase = ""
        self.deadline = 0.0
        self.started = 0.0

    def read_lines(self) -> list[str] | None:
        """The complete lines the worker has written since the last call; None once it has exited."""
        data = os.read(self.fd, 1 << 16)
        if not data:
            return None
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        return [line.decode() for line in lines]

    def last_error(self) -> str:
        self.stderr.seek(0)
        lines = [line for line in self.stderr.read().decode(errors="replace").splitlines() if line.strip()]
        return lines[-1].strip()[:200] if lines else ""

    def send(self, text: str) -> None:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        os.close(self.fd)
        self.stderr.close()


@dataclass
class CorpusReport:
    """Every harvested function's outcome; the table has one row per test directory."""

    outcomes: list[tuple[HarvestedFunc, KernelOutcome]] = field(default_factory=list)

    def table(self) -> str:
        cols = NOT_TESTED + TESTED
        head = "| tests dir | harvested | " + " | ".join(cols[:3]) + " | tested | " + " | ".join(cols[3:]) + " |"
        lines = [head, "|" + "---|" * (len(cols) + 3)]
        groups = sorted({item.group for item, _ in self.outcomes}) + ["total"]
        for group in groups:
            counts = Counter(o.outcome for item, o in self.outcomes if group in ("total", item.group))
            tested = sum(counts[c] for c in TESTED)
            row = [group, str(sum(counts.values()))] + [str(counts[c]) for c in NOT_TESTED] + [str(tested)]
            row += [str(counts[c]) for c in TESTED]
            lines.append("| " + " | ".join(f"**{c}**" if group == "total" else c for c in row) + " |")
        return "\n".join(lines)

    def counts(self) -> Counter:
        return Counter(o.outcome for _, o in self.outcomes)


def run_corpus(items: list[HarvestedFunc], mode: str = "fast", timeout: float = 60.0, jobs: int = 1,
               memory_gib: float = 8.0,
               progress: Callable[[HarvestedFunc, KernelOutcome], None] | None = None) -> CorpusReport:
    """Check every harvested function in worker processes (``jobs`` at once), each within ``timeout``
    seconds and ``memory_gib`` of address space; structural duplicates are checked once."""
    report = CorpusReport()
    pending = list(items)
    seen_hashes: set[str] = set()
    slow_context: set[str] = set()  # files whose imports and assignments were over _CONTEXT_SECONDS
    workers: list[_Worker] = []
    sel = selectors.DefaultSelector()

    def finish(worker: _Worker, outcome: KernelOutcome) -> None:
        report.outcomes.append((worker.item, outcome))
        if progress is not None:
            progress(worker.item, outcome)
        worker.item = None

    def start_next(worker: _Worker) -> bool:
        while pending and pending[0].path in slow_context:
            worker.item = pending.pop(0)
            finish(worker, KernelOutcome("tvm-tests", worker.item.origin, "not built here",
                                         reason=f"over {_CONTEXT_SECONDS:g} s in the test module's imports"))
        if not pending:
            return False
        worker.item = pending.pop(0)
        worker.phase = "startup"
        worker.started = time.perf_counter()
        # The clock starts when the worker reads the function ("construct"); a fresh worker first
        # imports TVM, which gets a minute of its own.
        worker.deadline = worker.started + timeout + _STARTUP_SECONDS
        worker.send(json.dumps(asdict(worker.item)))
        return True

    def replace(worker: _Worker) -> _Worker:
        sel.unregister(worker.fd)
        worker.kill()
        workers.remove(worker)
        fresh = _Worker(mode, memory_gib)
        workers.append(fresh)
        sel.register(fresh.fd, selectors.EVENT_READ, fresh)
        return fresh

    def handle(w: _Worker, msg: dict) -> None:
        if "done" in msg:
            finish(w, KernelOutcome(**msg["done"]))
            start_next(w)
        elif msg.get("phase") == "built":
            w.phase = "built"
            if msg["hash"] in seen_hashes:
                w.send("skip")
                finish(w, KernelOutcome("tvm-tests", w.item.origin, "duplicate",
                                        seconds=time.perf_counter() - w.started))
                start_next(w)
            else:
                seen_hashes.add(msg["hash"])
                w.send("go")
        else:
            w.phase = msg.get("phase", w.phase)
            if w.phase == "construct":  # the imports and assignments around the function
                w.started = time.perf_counter()
                w.deadline = w.started + _CONTEXT_SECONDS
            elif w.phase == "parse":  # the function's own clock
                w.deadline = time.perf_counter() + timeout

    try:
        for _ in range(max(1, min(jobs, len(pending)))):
            w = _Worker(mode, memory_gib)
            workers.append(w)
            sel.register(w.fd, selectors.EVENT_READ, w)
            start_next(w)
        while any(w.item is not None for w in workers):
            now = time.perf_counter()
            wait = min(w.deadline for w in workers if w.item is not None) - now
            for key, _ in sel.select(timeout=max(wait, 0.0)):
                w: _Worker = key.data
                if w.item is None:
                    continue
                lines = w.read_lines()
                if lines is None:  # the worker died: a signal, or memory beyond its limit
                    code = w.proc.wait()
                    died = f"the process died ({'signal ' + str(-code) if code < 0 else 'exit ' + str(code)})"
                    died += f" in TVM's {w.phase}" if w.phase in ("build", "native") else ""
                    died += f": {w.last_error()}" if w.last_error() else ""
                    kind = _NOT_OURS.get(w.phase, "crash")
                    outcome = KernelOutcome("tvm-tests", w.item.origin, kind,
                                            stage=w.phase if kind == "crash" else "", reason=died,
                                            seconds=time.perf_counter() - w.started)
                    finish(w, outcome)
                    start_next(replace(w))
                    continue
                for line in lines:
                    if w.item is None:
                        break
                    handle(w, json.loads(line))
            now = time.perf_counter()
            for w in list(workers):
                if w.item is not None and now >= w.deadline:
                    # Over the limit while TVM parses, builds or runs natively: no reference in time.
                    kind = _NOT_OURS.get(w.phase, "timeout")
                    stage = "" if kind != "timeout" else w.phase
                    reason = f"over {timeout:g} s" + (f" in TVM's {w.phase}" if kind != "timeout" else "")
                    if w.phase == "construct":
                        slow_context.add(w.item.path)
                        reason = f"over {_CONTEXT_SECONDS:g} s in the test module's imports"
                    finish(w, KernelOutcome("tvm-tests", w.item.origin, kind, stage=stage, reason=reason,
                                            seconds=now - w.started))
                    start_next(replace(w))
    finally:
        for w in workers:
            w.kill()
        sel.close()
    return report


def _refusal_construct(reason: str) -> str:
    """The construct a refusal names, without the stage (``tirx.call_extern: no exact numpy translation``)."""
    import re

    found = re.search(r"unsupported construct (.+?)(?: at stage [^:]*)?(?::\s*(.*))?$", reason)
    if not found:
        return reason[:100]
    detail = (found.group(2) or "").split(";")[0]
    return (found.group(1) + (f": {detail}" if detail else ""))[:100]


def cli_main(args) -> int:
    """``zoo --tvm-tests PATH``: the table, then every crash, wrong answer and timeout by origin."""
    if args.timeout <= 0 or args.jobs < 1 or args.memory_gib < 0:
        print("error: --timeout must be > 0, --jobs >= 1 and --memory-gib >= 0", file=sys.stderr)
        return 2
    items = harvest(args.tvm_tests)
    if args.match:
        items = [i for i in items if any(m in i.origin for m in args.match)]
    if not items:
        print(f"error: no @T.prim_func definitions under {args.tvm_tests}"
              + (f" matching {args.match}" if args.match else ""), file=sys.stderr)
        return 2
    start = time.perf_counter()

    def show(item: HarvestedFunc, o: KernelOutcome) -> None:
        if args.verbose:
            print(f"{o.outcome:15s} {o.seconds:6.1f} s  {item.origin}"
                  + (f"  [{o.stage}] {o.reason[:160]}" if o.outcome in ("crash", "wrong", "timeout") else "")
                + (f"  ({no_reference_category(o.reason)}) {o.reason[:300]}" if o.outcome == "no native reference"
                   else "")
                + (f"  {o.reason}" if o.outcome == "ok" and o.reason else ""),
                  flush=True)

    report = run_corpus(items, mode=args.mode, timeout=args.timeout, jobs=args.jobs, memory_gib=args.memory_gib,
                        progress=show)
    print(report.table())
    tested = [o for _, o in report.outcomes if o.outcome in TESTED]
    print(f"\n{len(report.outcomes)} @T.prim_func definitions harvested from {args.tvm_tests}; {len(tested)} "
          f"distinct functions built and run by TVM were emulated at {sum(o.stages_checked for o in tested)} "
          f"changed stages{_repeated_note(tested)} in {time.perf_counter() - start:.0f} s ({args.mode} mode, limit {args.timeout:g} s each)")
    by_origin = {o.kernel: item for item, o in report.outcomes}
    for kind in ("crash", "wrong", "timeout"):
        bad = [o for _, o in report.outcomes if o.outcome == kind]
        if bad:
            print(f"\n{kind} ({len(bad)}):")
        for o in bad:
            item = by_origin[o.kernel]
            print(f"  {item.rel}:{item.lineno} {item.qualname} at stage {o.stage or '-'} "
                  f"({o.seconds:.0f} s): {o.reason}")
    refused = Counter(_refusal_construct(o.reason) for _, o in report.outcomes if o.outcome == "refused")
    if refused:
        print(f"\nrefused ({sum(refused.values())}), by construct:")
        for construct, n in refused.most_common():
            print(f"  {n:4d}  {construct}")
    if args.verbose:
        categories = Counter(no_reference_category(o.reason) for _, o in report.outcomes
                             if o.outcome == "no native reference")
        if categories:
            print(f"\nno native reference ({sum(categories.values())}), by category:")
            for category, n in categories.most_common():
                print(f"  {n:4d}  {category}")
        for kind in NOT_TESTED[:2]:
            why = Counter(o.reason[:100] for _, o in report.outcomes if o.outcome == kind)
            if why:
                print(f"\n{kind} ({sum(why.values())}), most common reasons:")
                for reason, n in why.most_common(15):
                    print(f"  {n:4d}  {reason}")
    failed = [o for _, o in report.outcomes if o.outcome in ("crash", "timeout")
              or (o.outcome == "wrong" and TVM_FINDING not in o.reason)]
    return 1 if failed else 0


def _repeated_note(outcomes) -> str:
    repeated = sum(o.stages_repeated for o in outcomes)
    return f" ({repeated} of them the program of an earlier stage, not run again)" if repeated else ""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``--tvm-tests`` options of the ``zoo`` subcommand."""
    p.add_argument("--tvm-tests", metavar="PATH",
                   help="instead of the models: harvest every @T.prim_func in the .py files under PATH (a TVM "
                        "checkout's tests/python, a subdirectory or one file) and emulate each against its native "
                        "llvm build")
    p.add_argument("--match", action="append", metavar="TEXT",
                   help="with --tvm-tests: only functions whose origin (file:qualname) contains TEXT (repeatable)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="with --tvm-tests: seconds each function may take (default 60)")
    p.add_argument("--jobs", type=int, default=1, help="with --tvm-tests: worker processes (default 1)")
    p.add_argument("--memory-gib", type=float, default=8.0,
                   help="with --tvm-tests: address-space limit of each worker in GiB (default 8; 0: none)")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        _worker(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]))
    else:
        sys.exit("usage: python -m tvm_hybrid_nb zoo --tvm-tests PATH (this module's own entry is its worker)")
