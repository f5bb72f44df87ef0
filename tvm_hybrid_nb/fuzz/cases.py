"""The fuzzer's cases and verdicts: :class:`FuzzCase` (kind, seed, steps), :class:`CaseResult`, and
:func:`random_case`, which draws a compute and a random schedule for a seed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tvm import s_tir, te

from .computes import KINDS, make_compute
from .schedules import Step, _draw_step, _try_step

__all__ = ["TVM_FINDINGS", "FuzzCase", "CaseResult", "random_case"]

#: Categories of :class:`CaseResult` that are TVM's miscompilations exposed by the emulator.
TVM_FINDINGS = ("tvm_schedule_bug", "tvm_pass_bug")


@dataclass
class FuzzCase:
    """A compute (``kind`` and ``seed``) and the schedule steps applied to it."""

    kind: str
    seed: int
    steps: list = field(default_factory=list)

    def reproducer(self) -> str:
        """Python that re-runs this case."""
        return (f"from tvm_hybrid_nb.fuzz import FuzzCase, check_case\n"
                f"print(check_case(FuzzCase({self.kind!r}, {self.seed}, {self.steps!r})))")


@dataclass
class CaseResult:
    """What checking one case found."""

    case: FuzzCase
    ok: bool
    #: Failures: "crash", "emulation_error", "fast_exact_differ", "native_mismatch", "timeout".  With ``ok``:
    #: "" (all stages agree), "tvm_rejected" (TVM refused to build the schedule), "unsupported" (the
    #: emulator refused a stage with UnsupportedConstructError, as it must when it cannot be exact)
    #: and the :data:`TVM_FINDINGS`.
    category: str = ""
    detail: str = ""
    stages_emulated: int = 0
    seconds: float = 0.0

    def __str__(self) -> str:
        if self.category in TVM_FINDINGS:
            return f"TVM bug [{self.category}] {self.case.kind} seed {self.case.seed}: {self.detail}"
        if self.ok:
            extra = {"tvm_rejected": " (TVM refused the build)",
                     "unsupported": f" (not emulatable: {self.detail})"}.get(self.category, "")
            return f"ok: {self.case.kind} seed {self.case.seed}, {len(self.case.steps)} steps, " \
                   f"{self.stages_emulated} stage runs{extra}"
        return f"FAIL [{self.category}] {self.case.kind} seed {self.case.seed}: {self.detail}"


def random_case(seed: int, max_steps: int = 8) -> FuzzCase:
    """Draw a compute kind and a random schedule for ``seed``; only steps TVM accepted are kept."""
    rng = np.random.default_rng([seed, 12345])
    kind = KINDS[int(rng.integers(len(KINDS)))]
    compute = make_compute(kind, seed)
    try:
        sch = s_tir.Schedule(te.create_prim_func(list(compute.tensors)))
    except Exception:  # TVM refuses the compute itself (e.g. x / (x - x) folds to a division by 0)
        return FuzzCase(kind, seed, [])
    steps: list[Step] = []
    for _ in range(int(rng.integers(1, max_steps + 1))):
        step = _draw_step(rng, sch)
        if step is None:
            continue
        trial = _try_step(sch, step)
        if trial is not None:
            sch = trial
            steps.append(step)
    return FuzzCase(kind, seed, steps)
