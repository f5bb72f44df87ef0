"""Why a zoo kernel's answer is wrong: what the sanitizers say at stage 0 and at the stage that
differs (the kernel as written is undefined, or a pass broke it), the one pass after which every
stage computes another meaning, and whether a schedule rule changed the meaning (TVM's own llvm
build of the scheduled kernel, thread loops made serial, is the evidence)."""
from __future__ import annotations

import re

import numpy as np

from .zoo_outcomes import MEANING_CHANGE, SCHEDULE_CHANGE, TVM_FINDING, KernelOutcome
from .zoo_reference import _arithmetic_eps, _bf16_native, _outputs_equal


def cause_first(message: str) -> str:
    """An emulation error's message with what went wrong first and where after it:
    ``IndexError: out-of-bounds read of A[8] (shape (8,)) at line 12: A[i + 1]`` (the hybrid line can
    be long, and reasons are shown cut)."""
    found = re.search(r"failed(?: at line (\d+): (.*?))?: ([A-Z]\w*(?:Error|Exception)): (.*?)"
                      r"(?:; the native kernel would .*)?$", message, re.S)
    if not found:
        return message
    line, code, kind, what = found.groups()
    return " ".join((f"{kind}: {what}" + (f" at line {line}: {code}" if line else "")).split())


def explain_wrong(hm, inputs, outcome: KernelOutcome, mode: str) -> str | None:
    """What the sanitizers say about a wrong answer at ``outcome.stage``.  When they flag the kernel
    as written (stage 0: it reads memory it never wrote, races, or reads out of bounds), that alarm
    is returned: the native result is no reference.  When they flag only the stage that differs, a
    pass of TVM broke the kernel (the emulator is right, the native build right by luck or not
    at all), and ``outcome.reason`` says so: a :data:`TVM_FINDING`."""
    from .errors import EmulationError

    def sanitized(stage) -> str | None:
        args = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
        try:
            hm.emulate(*args, stage=stage, mode=mode, check=True)
        except EmulationError as exc:
            return cause_first(str(exc))[:400]
        except Exception:  # noqa: BLE001 - the sanitizers could not run; keep the wrong answer as it is
            return None
        return None

    first = sanitized(0)
    if first is not None:
        return first
    at_stage = sanitized(outcome.stage)
    if at_stage is not None:
        outcome.reason += f"; {TVM_FINDING} (stage 0 is clean, check=True here: {at_stage})"
    return None


def meaning_change(hm, inputs, outcome: KernelOutcome, mode: str) -> None:
    """For a wrong answer that no sanitizer explains: emulate every changed stage before MakePackedAPI and,
    when they give one result up to a stage and another from it on, say so in ``outcome.reason``
    (:data:`MEANING_CHANGE`, the stage): that pass changed what the kernel computes, and the native build
    computes the later meaning (:data:`TVM_MEANING_FINDINGS` documents the passes known to).  A stage 0
    that differs from native alone, with every later stage agreeing with it, says nothing."""
    results = []
    for stage in hm.stages:
        if hm.packed_api_index is not None and stage.index >= hm.packed_api_index:
            break
        if not stage.changed:
            continue
        args = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
        try:
            got = hm.result_values(args, hm.emulate(*args, stage=stage.index, mode=mode))
        except Exception:  # noqa: BLE001 - a stage that cannot run: no verdict
            return
        results.append((stage, got))
    # A pass of a scheduled kernel may reorder a sum (LowerThreadAllreduce's tree): compared as the
    # reference is, within the rounding of the reordered sum, not as a change of meaning.
    reordered = outcome.flavour != "none"
    eps = _arithmetic_eps(hm) if reordered else 0.0
    bf16 = _bf16_native(hm)
    changes = [i for i in range(1, len(results))
               if _outputs_equal(results[i][1], results[i - 1][1], bf16, reordered=reordered,
                                 arithmetic_eps=eps) is not None]
    if len(changes) == 1:
        outcome.reason += f"; {MEANING_CHANGE} {results[changes[0]][0].label} and stays changed"


def _serial_threads(func):
    """``func`` with its thread-bound loops made serial: at the schedule's level (blocks), thread
    bindings are annotations and the loops keep their meaning."""
    import tvm_ffi
    from tvm import tirx

    def serial(loop):
        if loop.kind != tirx.ForKind.THREAD_BINDING:
            return loop
        return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.SERIAL, loop.body,
                        annotations=loop.annotations)

    return tvm_ffi.structural_map(func, (tirx.For, serial))


def schedule_meaning_change(hm, scheduled, inputs, expected, outcome: KernelOutcome, mode: str) -> None:
    """For a wrong answer at stage 0 of a scheduled kernel (``scheduled``, the PrimFunc a schedule
    rule produced): when TVM's own llvm build of it, thread-bound loops made serial, computes the
    emulation's values and not ``expected``, say so in ``outcome.reason`` (:data:`SCHEDULE_CHANGE`):
    the rule changed what the kernel computes, and TVM's build is the evidence.  Where TVM cannot build
    it for llvm, or its values are neither, nothing is said."""
    from . import module as hmodule

    if outcome.flavour == "none":
        return
    try:
        native = hmodule.build(_serial_threads(scheduled).with_attr("global_symbol", "main"), target="llvm")
        args = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
        built = native.result_values(args, native.run_native(*args))
        args = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
        emulated = hm.result_values(args, hm.emulate(*args, stage=0, mode=mode))
    except Exception:  # noqa: BLE001 - no build or run of TVM's own: no evidence
        return
    bf16, eps = _bf16_native(hm), _arithmetic_eps(hm)
    if (_outputs_equal(emulated, built, bf16, reordered=True, arithmetic_eps=eps) is None
            and _outputs_equal(built, expected, bf16, reordered=True, arithmetic_eps=eps) is not None):
        outcome.reason += f"; {SCHEDULE_CHANGE}"
