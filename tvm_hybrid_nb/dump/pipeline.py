"""Running TVM's passes on a dumped stage: finishing the default pipeline from a stage (skipping the
passes already applied, capturing the rest as stages) and making a single pass from its name.
"""
from __future__ import annotations

import re
import time
from typing import Any, Sequence

import tvm

from .. import capture as _capture
from ..errors import BuildError, UnknownPassError

__all__ = ["resolve_pass"]


@tvm.ir.instrument.pass_instrument
class _SkipAndCapture(_capture.PassCapture):
    """Skip the first leaf passes (by expected name) and capture the rest like ``PassCapture``.

    ``should_run`` is called in pre-order: a pass whose name is the next expected one is skipped;
    any other pass is taken to be a wrapper (``sequential``, ``_pipeline``...) and runs.  A skipped
    child counts as a child, so a wrapper whose children were all skipped is not mistaken for a leaf.
    """

    def __init__(self, skip: Sequence[str]):
        self.expected = list(skip)
        self.skipped = 0
        self.mismatch: str | None = None
        super().__init__()

    def should_run(self, mod, info) -> bool:
        if self.skipped < len(self.expected) and info.name == self.expected[self.skipped]:
            self.skipped += 1
            if self._stack:
                self._stack[-1].has_children = True
            return False
        return True

    def run_after_pass(self, mod, info) -> None:
        frame_is_leaf = self._stack and not self._stack[-1].has_children
        if frame_is_leaf and self.skipped < len(self.expected) and self.mismatch is None:
            self.mismatch = (f"pass {info.name} ran where the dump's pipeline has "
                             f"{self.expected[self.skipped]}")
        super().run_after_pass(mod, info)


def _finish_pipeline(mod: "tvm.IRModule", target: Any, skip: Sequence[str], what: str):
    """Run ``tvm.build`` on ``mod`` skipping the leaf passes ``skip``; return (lib, stages, seconds)."""
    inst = _SkipAndCapture(skip)
    start = time.perf_counter()
    try:
        with tvm.transform.PassContext(instruments=[inst]):
            lib = tvm.tirx.build(mod, target=target)  # what tvm.build runs, without its warning
    except Exception as exc:
        failed = inst._stack[-1].name if inst._stack else None
        where = f" in pass {failed}" if failed else ""
        raise BuildError(f"resuming the pipeline from {what} failed{where}: "
                         f"{_capture.short_tvm_message(exc)}") from exc
    seconds = time.perf_counter() - start
    if inst.mismatch or inst.skipped != len(skip):
        detail = inst.mismatch or f"only {inst.skipped} of the {len(skip)} earlier passes were found"
        raise BuildError(f"cannot resume from {what}: this TVM's pipeline differs from the dump's ({detail})")
    return lib, inst.stages, seconds


#: Arguments for pass factories that need one (the values the default pipeline uses).
_PASS_ARGS = {"NarrowDataType": (32,), "ThreadSync": ("shared",)}
_PASS_SPEC = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?:\((.*)\))?\s*$")


def resolve_pass(spec: str, target: Any = None) -> "tvm.transform.Pass":
    """Make the pass named ``spec`` (``"tirx.FlattenBuffer"``, ``"FlattenBuffer"``, ``"s_tir.ThreadSync(warp)"``).

    Passes are looked up in ``tvm.tirx.transform`` and ``tvm.s_tir.transform``.  An argument in
    parentheses is given to the factory (an int when it is one); without it, passes that need one
    get the default pipeline's value (``NarrowDataType(32)``, ``ThreadSync(shared)``,
    ``BindTarget(<target>)``).

    Raises
    ------
    UnknownPassError
        For an unknown or ambiguous name.
    """
    match = _PASS_SPEC.match(spec)
    if not match:
        raise UnknownPassError(f"bad pass name {spec!r}: expected e.g. tirx.FlattenBuffer or s_tir.ThreadSync(warp)")
    name, arg = match.group(1), match.group(2)
    namespaces = {"tirx": tvm.tirx.transform, "s_tir": tvm.s_tir.transform}
    if "." in name:
        ns, short = name.split(".", 1)
        if ns not in namespaces:
            raise UnknownPassError(f"unknown pass {spec!r}: the namespace must be tirx or s_tir")
        found = [(ns, getattr(namespaces[ns], short, None))]
    else:
        short = name
        found = [(ns, getattr(m, short, None)) for ns, m in namespaces.items()]
    found = [(ns, f) for ns, f in found if callable(f) and short[:1].isupper() and not isinstance(f, type)]
    if not found:
        raise UnknownPassError(f"unknown pass {spec!r}: no such pass in tvm.tirx.transform or tvm.s_tir.transform")
    if len(found) > 1:
        raise UnknownPassError(f"ambiguous pass {spec!r}: say " + " or ".join(f"{ns}.{short}" for ns, _ in found))
    ns, factory = found[0]
    if arg is not None and arg.strip():
        args: tuple = (int(arg) if arg.strip().lstrip("-").isdigit() else arg.strip().strip("'\""),)
        if short == "BindTarget":
            try:
                args = (tvm.target.Target(args[0]),)
            except Exception as exc:
                raise UnknownPassError(f"bad target for pass {spec!r}: {_capture.short_tvm_message(exc)}") from None
    elif short == "BindTarget":
        args = (target,)
    else:
        args = _PASS_ARGS.get(short, ())
    try:
        made = factory(*args)
    except Exception as exc:
        raise UnknownPassError(f"cannot make pass {spec!r}: {_capture.short_tvm_message(exc)}") from None
    if not isinstance(made, tvm.transform.Pass):
        raise UnknownPassError(f"{ns}.{short} is not a pass")
    return made
