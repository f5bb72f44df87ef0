"""Pipeline capture: run TVM's real build once and keep a snapshot of the module after every pass.

A :class:`PassCapture` instrument snapshots the IRModule in ``run_after_pass``.  The snapshot is a
new IRModule that holds the same function objects: it costs a dictionary copy, and because it keeps
references to the functions, a later pass that edits "its" module in place (``tirx.AnnotateEntryFunc``
does) copies on write instead of changing what we kept.  Text (TVMScript, hybrid source) is rendered
lazily by :class:`Stage`.
"""
from __future__ import annotations

import contextvars
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable

import tvm
from tvm.ir import _ffi_instrument_api

from .errors import BuildError

#: After this pass the entry function is a packed-API wrapper, not the kernel.
PACKED_API_PASS = "tirx.MakePackedAPI"


def snapshot_module(mod: "tvm.IRModule") -> "tvm.IRModule":
    """Return a module that later in-place edits of ``mod`` cannot change."""
    return tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs)


@dataclass
class RawStage:
    """What the instrument records for one pass: its name, module snapshot and time."""

    name: str
    mod: "tvm.IRModule"
    seconds: float
    depth: int = 0


@dataclass
class _Frame:
    name: str
    start: float
    has_children: bool = False


class WeakPassInstrument(tvm.ir.instrument.PassInstrument):
    """A pass instrument whose TVM node calls its methods through a weak reference.

    ``tvm.ir.instrument.pass_instrument`` hands the node bound methods of the instrument itself: a
    reference cycle through C++ that Python's garbage collector cannot see, so every instrument —
    and every module snapshot it recorded — stayed alive for good (about 150 KiB per build).
    Subclass this and define any of ``should_run``, ``run_before_pass``, ``run_after_pass``,
    ``enter_pass_ctx``, ``exit_pass_ctx``; keep the instance referenced while the build runs.
    """

    __slots__ = ("__dict__", "__weakref__")

    def __init__(self) -> None:
        me = weakref.ref(self)
        base = tvm.ir.instrument.PassInstrument

        def forward(name: str, gone=None):
            if getattr(type(self), name) is getattr(base, name):
                return None  # not overridden: no call back into Python at all

            def call(*args):
                instrument = me()
                return gone if instrument is None else getattr(instrument, name)(*args)

            return call

        self.__init_handle_by_constructor__(
            _ffi_instrument_api.PassInstrument, type(self).__name__, forward("enter_pass_ctx"),
            forward("exit_pass_ctx"), forward("should_run", True), forward("run_before_pass"),
            forward("run_after_pass"))


class PassCapture(WeakPassInstrument):
    """Pass instrument that records a :class:`RawStage` after every leaf pass.

    Wrapper passes (``sequential``, ``_pipeline``) only group other passes; the passes inside them
    are recorded in the order they finish, which is the order they ran.
    """

    def __init__(self) -> None:
        self.stages: list[RawStage] = []
        self._stack: list[_Frame] = []
        #: Set (from another thread) to stop the pipeline before its next pass.
        self.cancelled = False
        super().__init__()

    def cancel(self) -> None:
        """Stop the pipeline before its next pass (callable from any thread)."""
        self.cancelled = True

    def run_before_pass(self, mod, info) -> None:
        if self.cancelled:
            raise BuildCancelled(f"build cancelled before pass {info.name}")
        if self._stack:
            self._stack[-1].has_children = True
        self._stack.append(_Frame(info.name, time.perf_counter()))

    def run_after_pass(self, mod, info) -> None:
        frame = self._stack.pop()
        seconds = time.perf_counter() - frame.start
        if not frame.has_children:
            self.stages.append(RawStage(info.name, snapshot_module(mod), seconds, len(self._stack)))


class BuildCancelled(Exception):
    """Raised inside the pipeline to stop a build whose caller was interrupted (never reaches users)."""


def short_tvm_message(exc: BaseException | str) -> str:
    """The one line of a TVM error that says what went wrong, without the C++ backtrace."""
    text = str(exc).strip()
    # TVM 0.27 follows the message with where it failed: the pass, then the module's TVMScript with
    # the failing node underlined (``^^^^``), whose last lines are code, not the cause.
    for marker in ("\nError in pass:", "\nLocation (TVMScript):"):
        if marker in text and text.index(marker) > 0:
            text = text[:text.index(marker)].strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    interesting = [
        ln for ln in lines
        if not ln.startswith(("File ", "at ", "Stack trace", "Traceback", "#"))
        and "Check failed" not in ln[:12]
    ]
    for ln in reversed(interesting):
        if ln and not ln.startswith(("^", "~")):
            msg = ln
            break
    else:
        msg = lines[-1] if lines else type(exc).__name__
    for prefix in ("InternalError: ", "TVMError: ", "ValueError: ", "TypeError: "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    return msg[:500]


@dataclass
class BuildFailure:
    """Where and how TVM's lowering failed: the pass, its stage number and TVM's full message.

    The stages captured before it (input first, up to the last pass that succeeded) are kept;
    ``stage_number`` is the number the failing pass's stage would have had.
    """

    pass_name: str | None
    stage_number: int
    message: str

    @property
    def step(self) -> str:
        """The failing pass, or ``"code generation"`` when every pass ran and the target's code
        generator failed."""
        return self.pass_name or "code generation"

    @property
    def summary(self) -> str:
        """One line: the pass and the line of TVM's message that says what went wrong."""
        where = f" in pass {self.pass_name}" if self.pass_name else " in code generation"
        return f"TVM lowering failed{where}: {short_tvm_message(self.message)}"


def run_pipeline(mod: "tvm.IRModule", target: Any,
                 build: Callable[..., Any] | None = None) -> tuple[Any, list[RawStage], float]:
    """Build ``mod`` for ``target`` with TVM's default pipeline while capturing every pass.

    Returns the runtime module, the stages (input first) and the wall time of the build.  When a
    pass fails, the :class:`BuildError` raised carries ``stages`` (every stage up to the failing
    pass) and ``failure`` (a :class:`BuildFailure`).
    """
    capture = PassCapture()
    build = build or tvm.tirx.build  # what tvm.build runs, without its deprecation warning
    start = time.perf_counter()
    context = _context_with(capture)  # read here: TVM's current PassContext is per thread
    try:
        lib = run_interruptibly(lambda: _build_in(context, build, mod, target), capture.cancel)
    except Exception as exc:  # TVM raises its own error types from C++
        failed = capture._stack[-1].name if capture._stack else None
        stages = [RawStage("input", snapshot_module(mod), 0.0)] + capture.stages
        failure = BuildFailure(failed, len(stages), str(exc).strip() or type(exc).__name__)
        error = BuildError(failure.summary)
        error.stages, error.failure = stages, failure
        raise error from exc
    elapsed = time.perf_counter() - start
    stages = [RawStage("input", snapshot_module(mod), 0.0)] + capture.stages
    return lib, stages, elapsed


def _context_with(capture: PassCapture) -> "tvm.transform.PassContext":
    """The caller's current PassContext (opt_level, config such as ``tirx.disable_vectorize`` or
    ``tirx.add_lower_pass``, required/disabled passes, instruments) plus the capture, so a build
    under ``with PassContext(...)`` lowers as ``tvm.build`` would there."""
    outer = tvm.transform.PassContext.current()
    return tvm.transform.PassContext(
        opt_level=outer.opt_level, required_pass=list(outer.required_pass),
        disabled_pass=list(outer.disabled_pass), instruments=list(outer.instruments) + [capture],
        config=dict(outer.config) or None)


def _build_in(context: "tvm.transform.PassContext", build: Callable[..., Any], mod, target):
    with context:
        return build(mod, target=target)


def run_interruptibly(work: Callable[[], Any], on_interrupt: Callable[[], None] | None = None) -> Any:
    """Run ``work`` (a TVM build) in a worker thread; Ctrl-C stops the wait at once.

    Python handles signals in the main thread between bytecodes, so during TVM's C++ code (LLVM
    code generation alone can take seconds) an interrupt waited for the build to end, and one that
    landed in the instrument's callback was turned by the FFI into a RuntimeError, reported as a
    failed pass.  Here the calling thread only waits: a KeyboardInterrupt propagates unchanged and
    promptly, ``on_interrupt`` is called (a capture's ``cancel`` stops the abandoned build at its
    next pass), and the abandoned result is discarded.
    """
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001  (handed to the waiting thread)
            outcome["error"] = exc
        finally:
            done.set()

    # Not a daemon: Python waits for an abandoned build at exit, where a thread still inside TVM's
    # C++ code would abort the process ("terminate called without an active exception").
    worker = threading.Thread(target=contextvars.copy_context().run, args=(run,), daemon=False,
                              name="tvm-hybrid-build")
    try:
        worker.start()
        # Wait on an Event, not on Thread.join: CPython 3.11's join, interrupted, releases the running
        # thread's state lock and marks it stopped, so exit would not wait for it.
        while not done.wait(0.05):
            pass
    except BaseException:
        if on_interrupt is not None:
            on_interrupt()
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]
