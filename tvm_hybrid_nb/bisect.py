"""Find the first pass whose emulated output differs from a reference.

Stages are emulated in pipeline order on one set of inputs.  A pass that did not change the IR
cannot change the result, so only the input stage and passes that changed the IR are run; nor can
a pass after which the generated program is the same text as at a stage already checked.  An
emulation that fails at run time (an out-of-bounds index after a broken pass, say) counts as a
divergence too.  No IPython, no widgets: the explorer's button and notebooks call this.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .errors import EmulationError, UndefinedResultError


@dataclass
class Divergence:
    """Outcome of :func:`find_first_divergence`.

    Attributes
    ----------
    stage : Stage or None
        The first stage whose output differs from the reference; None when none does.
    result : CompareResult or None
        Its comparison (None when its emulation raised, see ``error``, or when none differs).
    error : str or None
        The emulation error of ``stage``, when it failed instead of producing output.
    previous : Stage or None
        The last stage checked before ``stage`` (it matched).
    checked : list of (Stage, CompareResult)
        Every stage compared, in order, up to and including ``stage``.
    skipped : list of Stage
        Stages passed over because they cannot be emulated.
    reference : str
        ``"native"`` or the reference function's name.
    repeated : list of (Stage, Stage)
        Stages of ``checked`` whose generated program is the text of an earlier checked stage's (the
        second), so the same on the same inputs: that stage's comparison, not run again.
    undefined : bool
        ``error`` says that the results are undefined on these inputs (an
        :class:`~tvm_hybrid_nb.errors.UndefinedResultError`): no reference can be right or wrong there.
    """

    stage: Any
    result: Any
    error: str | None
    previous: Any
    checked: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    reference: str = "native"
    repeated: list = field(default_factory=list)
    undefined: bool = False

    @property
    def repeated_note(self) -> str:
        """`` (N of them ...)`` when some checked stages repeat an earlier stage's program, else ``""``."""
        if not self.repeated:
            return ""
        return f" ({len(self.repeated)} of them the program of an earlier stage, not run again)"

    @property
    def found(self) -> bool:
        return self.stage is not None

    def __str__(self) -> str:
        """Plain text (``print(found)``); :func:`tvm_hybrid_nb.presentation.divergence_html` is the HTML."""
        if self.stage is None:
            return f"No divergent pass: all {len(self.checked)} emulated stages MATCH {self.reference}{self.repeated_note}."
        detail = str(self.result) if self.result is not None else f"its emulation failed: {self.error}"
        if self.stage.index == 0:
            return f"The input stage already differs from {self.reference}:\n{detail}"
        return f"First divergent pass: {self.stage.label} ({self.stage.name})\n{detail}"


def find_first_divergence(hm: Any, *arrays, reference: str | Callable = "native",
                          stages: Sequence[Any] | None = None, only_changed: bool = True,
                          seed: int = 0, sizes: dict[str, int] | None = None,
                          rtol: float | None = None, atol: float | None = None,
                          progress: Callable[[Any], None] | None = None, mode: str = "exact",
                          check: bool = False) -> Divergence:
    """Emulate stages in order and return the first whose output differs from ``reference``.

    Parameters
    ----------
    hm : HybridModule
    *arrays : numpy.ndarray
        Every kernel argument, in order; without them seeded random inputs are made once.
    reference : "native" or callable
        As for :meth:`HybridModule.compare`.
    stages : sequence of Stage, int or str, optional
        The stages to try, as ``hm.stage`` takes them (default: all of ``hm.stages``).
    only_changed : bool
        Skip passes that did not change the IR (they cannot change the result).
    seed, sizes
        For the random inputs.
    rtol, atol : float, optional
        Tolerances (default: by dtype).
    progress : callable, optional
        Called with each stage before it is emulated.
    mode : {"exact", "fast"}
        Emulation mode (bit-identical results; fast runs independent loops as arrays).
    check : bool
        Run the sanitizers; a bounds error, race or uninitialised read counts as the divergence.

    Returns
    -------
    Divergence
    """
    if not arrays:
        arrays = tuple(hm.random_inputs(seed=seed, sizes=sizes))
    candidates = list(hm.stages) if stages is None else [hm.stage(key) for key in stages]
    ref_name = reference if isinstance(reference, str) else getattr(reference, "__name__", "reference")
    from .codegen import program_text

    checked: list = []
    skipped: list = []
    repeated: list = []
    by_program: dict = {}  # program text -> (stage, result) of the checked stage that ran it
    previous = None
    for stage in candidates:
        if only_changed and stage.index > 0 and not stage.changed:
            continue
        if not stage.emulatable:
            skipped.append(stage)
            continue
        if progress is not None:
            progress(stage)
        program = program_text(stage.kernel(mode, check).source)
        if program in by_program:
            earlier, result = by_program[program]
            checked.append((stage, result))
            repeated.append((stage, earlier))
            previous = stage
            continue
        try:
            result = hm.compare(*arrays, reference=reference, stage=stage.index, rtol=rtol, atol=atol,
                                mode=mode, check=check)
        except EmulationError as exc:
            return Divergence(stage, None, str(exc), previous, checked, skipped, ref_name, repeated,
                              undefined=isinstance(exc, UndefinedResultError))
        checked.append((stage, result))
        if not result.ok:
            return Divergence(stage, result, None, previous, checked, skipped, ref_name, repeated)
        by_program[program] = (stage, result)
        previous = stage
    return Divergence(None, None, None, previous, checked, skipped, ref_name, repeated)
