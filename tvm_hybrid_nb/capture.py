"""Pipeline capture: run TVM's real build once and keep a snapshot of the module after every pass.

A :class:`PassCapture` instrument snapshots the IRModule in ``run_after_pass``.  The snapshot is a
new IRModule that holds the same function objects: it costs a dictionary copy, and because it keeps
references to the functions, a later pass that edits "its" module in place (``tirx.AnnotateEntryFunc``
does) copies on write instead of changing what we kept.  Text (TVMScript, hybrid source) is rendered
lazily by :class:`Stage`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

import tvm

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


@tvm.ir.instrument.pass_instrument
class PassCapture:
    """Pass instrument that records a :class:`RawStage` after every leaf pass.

    Wrapper passes (``sequential``, ``_pipeline``) only group other passes; the passes inside them
    are recorded in the order they finish, which is the order they ran.
    """

    def __init__(self) -> None:
        self.stages: list[RawStage] = []
        self._stack: list[_Frame] = []

    def run_before_pass(self, mod, info) -> None:
        if self._stack:
            self._stack[-1].has_children = True
        self._stack.append(_Frame(info.name, time.perf_counter()))

    def run_after_pass(self, mod, info) -> None:
        frame = self._stack.pop()
        seconds = time.perf_counter() - frame.start
        if not frame.has_children:
            self.stages.append(RawStage(info.name, snapshot_module(mod), seconds, len(self._stack)))


def short_tvm_message(exc: BaseException | str) -> str:
    """The one line of a TVM error that says what went wrong, without the C++ backtrace."""
    text = str(exc).strip()
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
    try:
        with tvm.transform.PassContext(instruments=[capture]):
            lib = build(mod, target=target)
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
