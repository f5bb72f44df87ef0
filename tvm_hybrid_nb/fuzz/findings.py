"""Telling TVM's miscompilations from emulator failures: the evidence behind ``tvm_schedule_bug`` and
``tvm_pass_bug``.

The independent truth is the native build of the *unscheduled* compute on the same inputs; the
emulation of each stage then says whether the schedule or a later pass broke the kernel.  Each
function returns ``(category, detail)`` or None (no such evidence: the disagreement stays the
emulator's failure).
"""
from __future__ import annotations

from ..compare import compare_arrays
from ..errors import EmulationError
from .computes import Compute


def _truth(compute: Compute, hm, args) -> list | None:
    """The native build of the unscheduled compute run on ``args`` (None when the signatures differ)."""
    from ..module import build

    try:
        plain = build(list(compute.tensors))
        if [(p.dtype, p.shape) for p in plain.params] != [(p.dtype, p.shape) for p in hm.params]:
            return None  # transform_layout changed the signature: no common inputs
        truth = [a.copy() for a in args]
        plain.run_native(*truth)
    except Exception:
        return None
    return truth


def _out_of_bounds_finding(compute: Compute, hm, args, outputs, verdicts) -> tuple[str, str] | None:
    """Explain an out-of-bounds access the emulation refused as TVM's, without running it natively.

    ``tvm_schedule_bug`` when the scheduled input stage already accesses out of bounds;
    ``tvm_pass_bug`` when the input stage computes the unscheduled build's result and a later stage
    stops doing so (the first such stage names the pass).  None otherwise (an emulator failure).
    """
    stage0, first = verdicts[0]
    if isinstance(first, str):
        return ("tvm_schedule_bug", f"the scheduled program ({stage0.label}) accesses memory out of bounds "
                                    f"(not run natively): {first}")
    truth = _truth(compute, hm, args)
    if truth is None:
        return None

    def matches(outs) -> bool:
        return not isinstance(outs, str) and all(compare_arrays("out", o, truth[i]).ok for o, i in zip(outs, outputs))

    if not matches(first):
        return None
    culprit, message = next((s, v) for s, v in verdicts if not matches(v))
    detail = message if isinstance(message, str) else "its result differs from the unscheduled build"
    return ("tvm_pass_bug", f"pass {culprit.name} (stage {culprit.label}) made the kernel access memory out of "
                            f"bounds (not run natively); the input stage matches the unscheduled build: {detail}")


def _tvm_finding(compute: Compute, hm, args, outputs, native, verdicts) -> tuple[str, str] | None:
    """Explain a disagreement as TVM's own miscompilation, when the evidence says so.

    The independent truth is the native build of the *unscheduled* compute on the same inputs; TVM
    miscompiled when the native scheduled kernel differs from it.  The emulation then says where:

    * ``tvm_schedule_bug``: the scheduled input stage already reads or writes out of bounds (the
      emulator refuses it), reads an allocation before writing it (the sanitizer says so; the
      emulator's zeros and the native kernel's garbage then differ), or already computes what the
      wrong native kernel computes;
    * ``tvm_pass_bug``: the input stage computes the truth and the last emulated stage computes
      what the native kernel computes (or refuses an out-of-bounds access); the first stage that
      stops matching the truth names the pass.

    An input stage that reads memory it never wrote is TVM's schedule bug even where there is no
    truth to compare with (transform_layout changed the signature).  Anything else (for instance an
    input stage that matches neither) stays an emulator failure.
    """
    def matches(outs, ref) -> bool:
        return not isinstance(outs, str) and all(
            compare_arrays("out", o, ref[i]).ok for o, i in zip(outs, outputs))

    truth = _truth(compute, hm, args)
    stage0, first = verdicts[0]
    if truth is None:
        unwritten = None if isinstance(first, str) else _reads_unwritten_memory(hm, stage0, args)
        if unwritten is None:
            return None
        return ("tvm_schedule_bug", f"the scheduled program ({stage0.label}) reads memory it never wrote "
                                    f"(the native kernel reads garbage there): {unwritten}")
    if matches([native[i] for i in outputs], truth):
        return None  # the native kernel is right: any disagreement is the emulator's
    if isinstance(first, str):
        return ("tvm_schedule_bug", f"the scheduled program ({stage0.label}) accesses memory out of bounds: "
                                    f"{first}")
    if matches(first, native):
        return ("tvm_schedule_bug", "the scheduled program computes what the wrong native kernel computes")
    unwritten = _reads_unwritten_memory(hm, stage0, args)
    if unwritten is not None:  # TVM accepted a schedule that uses a value before computing it
        return ("tvm_schedule_bug", f"the scheduled program ({stage0.label}) reads memory it never wrote "
                                    f"(the native kernel reads garbage there): {unwritten}")
    last_stage, last = verdicts[-1]
    if not matches(first, truth) or not (isinstance(last, str) or matches(last, native)):
        return None
    culprit = next(s for s, v in verdicts if not matches(v, truth))
    return ("tvm_pass_bug", f"pass {culprit.name} (stage {culprit.label}) changed what the kernel computes: "
                            f"the input stage matches the unscheduled build, stage {last_stage.label} the "
                            f"native kernel")


def _reads_unwritten_memory(hm, stage, args) -> str | None:
    """The sanitizer's message when ``stage`` reads an allocation before writing it, else None."""
    try:
        hm.emulate(*[a.copy() for a in args], stage=stage.index, check=True)
    except EmulationError as exc:
        return str(exc) if "never written" in str(exc) else None
    return None
