"""The results of a verification, as plain data: :class:`KernelResult` (one kernel's verdict),
:class:`VerifyReport` (all of them, with JSON and HTML) and :func:`load_report`.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable

from .kernels import build_kernel
from .settings import VerifyError

__all__ = ["OUTCOMES", "FAILING_OUTCOMES", "KernelResult", "VerifyReport", "load_report"]

OUTCOMES = ("ok", "refused", "wrong", "crashed", "timeout")
#: Outcomes that make a report fail (``refused`` means "could not be checked", not "wrong").
FAILING_OUTCOMES = ("wrong", "crashed", "timeout")


@dataclass
class KernelResult:
    """The verdict on one kernel.

    Attributes
    ----------
    name : str
        The PrimFunc's name in the model.
    outcome : str
        ``"ok"`` (every compared stage matches the reference), ``"refused"`` (cannot be emulated or
        checked; ``reason`` says why), ``"wrong"`` (a stage differs), ``"crashed"`` (the job failed:
        a TVM error, or its process died) or ``"timeout"``.
    pass_name : str or None
        For ``"wrong"``: the first divergent pass (``"input"`` when the kernel before any pass,
        i.e. after the schedule, already differs); for ``"crashed"``: the pass that failed, if known.
    reason : str or None
        One line: the mismatch, the error, or why the kernel was refused.
    seconds : float
        Wall time of the job.
    stages_checked : int
        Stages emulated and compared.
    stages_skipped : int
        Stages passed over because they cannot be emulated.
    """

    name: str
    outcome: str
    pass_name: str | None = None
    reason: str | None = None
    seconds: float = 0.0
    stages_checked: int = 0
    stages_skipped: int = 0

    @property
    def failed(self) -> bool:
        return self.outcome in FAILING_OUTCOMES

    def describe(self) -> str:
        where = f" at {self.pass_name}" if self.pass_name else ""
        why = f": {self.reason}" if self.reason else ""
        return f"{self.name}: {self.outcome}{where}{why}"


@dataclass
class VerifyReport:
    """Result of :func:`verify`: one :class:`KernelResult` per kernel, in the model's order."""

    kernels: list[KernelResult]
    target: str
    schedule: str
    reference: str
    stages: str
    mode: str
    passes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    runner: str = "local"
    workers: int = 1
    #: Settings to rebuild one kernel in this process (for the explorer); not part of the JSON.
    _rebuild: Any = field(default=None, repr=False, compare=False)

    @property
    def counts(self) -> dict[str, int]:
        """Outcome → number of kernels (every outcome listed, zeros included)."""
        counted = Counter(k.outcome for k in self.kernels)
        return {outcome: counted.get(outcome, 0) for outcome in OUTCOMES}

    @property
    def ok(self) -> bool:
        """No kernel is wrong, crashed or timed out."""
        return not any(k.failed for k in self.kernels)

    @property
    def failures(self) -> list[KernelResult]:
        return [k for k in self.kernels if k.failed]

    def kernel(self, name: str) -> KernelResult:
        for k in self.kernels:
            if k.name == name:
                return k
        raise VerifyError(f"no kernel named {name!r} in this report")

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}
        data["kernels"] = [asdict(k) for k in self.kernels]
        data["passes"] = list(self.passes)
        data["counts"] = self.counts
        data["ok"] = self.ok
        return data

    def to_json(self, indent: int | None = 1) -> str:
        """The report as JSON: settings, counts, and every kernel's result."""
        return json.dumps(self.to_dict(), indent=indent)

    def to_html(self, path: str | os.PathLike | None = None) -> str:
        """A self-contained HTML report (the style of :func:`tvm_hybrid_nb.report`); written to
        ``path`` when given.  Returns the HTML."""
        from ..verify_report import verify_report_html

        text = verify_report_html(self)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    def _repr_html_(self) -> str:
        from ..verify_report import verify_table_html

        return verify_table_html(self)

    def __str__(self) -> str:
        counts = ", ".join(f"{n} {o}" for o, n in self.counts.items() if n)
        head = f"{'OK' if self.ok else 'FAILED'}: {len(self.kernels)} kernels ({counts}) in {self.seconds:.1f} s"
        return "\n".join([head] + ["  " + k.describe() for k in self.kernels if k.outcome != "ok"])

    def hybrid_module(self, name: str):
        """Build kernel ``name`` in this process exactly as its job did (schedule and custom passes
        applied) and return its :class:`~tvm_hybrid_nb.module.HybridModule`, for the explorer."""
        self.kernel(name)
        if self._rebuild is None:
            raise VerifyError("this report was loaded without its model; cannot rebuild a kernel")
        funcs, target, spec = self._rebuild
        return build_kernel(name, funcs[name], target, spec.get("schedule"), spec.get("passes", []))


def load_report(text: str | Iterable[str]) -> VerifyReport:
    """A :class:`VerifyReport` from :meth:`VerifyReport.to_json` (without the model: no explorer)."""
    data = json.loads(text)
    data.pop("counts", None)
    data.pop("ok", None)
    data["kernels"] = [KernelResult(**k) for k in data["kernels"]]
    return VerifyReport(**data)
