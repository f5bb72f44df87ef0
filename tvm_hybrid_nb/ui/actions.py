"""What the explorer's buttons do with one HybridModule: the reference and the inputs they use,
the run callables (compare one stage, run its sanitizers, find the first divergent pass) and the
naming of an error's line in the shown source.

The module is duck-typed (``stages``, ``params``, ``target``, ``failure``, ``compare``,
``emulate``, ``random_inputs``); the widgets get plain callables and strings from here, never the
module's TIR.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..errors import EmulationError
from .basics import error_text


#: The value each symbolic size takes in the explorer's random inputs.
SYMBOLIC_SIZE = 16


def symbolic_sizes(hm: Any) -> dict[str, int]:
    """``SYMBOLIC_SIZE`` for every symbolic size of the kernel's parameters (none: empty).

    Parameters
    ----------
    hm : HybridModule
        Its ``params`` (the signature; when it has none, the result is empty).

    Returns
    -------
    dict
        Size name -> value.
    """
    from ..signature import dim_symbols

    sizes: dict[str, int] = {}
    try:
        params = hm.params
    except Exception:  # no signature: the buttons say why when clicked
        return sizes
    for spec in params:
        for dim in spec.shape or ():
            for name in dim_symbols(dim):
                sizes.setdefault(name, SYMBOLIC_SIZE)
    return sizes


def default_reference(hm: Any) -> str:
    """``"native"`` when the native kernel can run here (a CPU target that built), else ``"input"``.

    Parameters
    ----------
    hm : HybridModule
        Its ``failure`` and ``target``.

    Returns
    -------
    str
    """
    if getattr(hm, "failure", None) is not None:
        return "input"
    kind = getattr(getattr(hm.target, "kind", None), "name", str(hm.target))
    return "native" if kind in ("llvm", "c") else "input"


@dataclass
class ExplorerActions:
    """The callables an :class:`~tvm_hybrid_nb.ui.explorer.Explorer` runs, bound to one module.

    Attributes
    ----------
    run_compare : callable
        ``run_compare(index, progress=None)``: the CompareResult of stage ``index`` (fast mode)
        against the reference; an emulation error is in its ``.error``, naming the shown line.
    run_divergence : callable
        ``run_divergence(progress)``: the first divergent pass (a Divergence).
    run_sanitizers : callable
        ``run_sanitizers(index, progress=None)``: a one-line verdict of the sanitizers on stage
        ``index``; raises :class:`~tvm_hybrid_nb.errors.EmulationError` (naming the shown line) on an
        alarm.
    locate : callable
        ``locate(index, exc)``: the one line of ``exc``, naming the line of stage ``index``'s shown
        source where it can.
    note : str
        What the header says about the reference and the inputs ("" when nothing to say).
    """

    run_compare: Callable[..., Any]
    run_divergence: Callable[[Callable[[Any], None]], Any]
    run_sanitizers: Callable[..., str]
    locate: Callable[[int, BaseException], str]
    note: str


def module_actions(hm: Any, reference: str | Callable | None = None,
                   inputs: Callable[[], Sequence[Any]] | Sequence[Any] | None = None,
                   seed: int = 0) -> ExplorerActions:
    """Bind the explorer's runs to ``hm``.

    Parameters
    ----------
    hm : HybridModule
    reference, inputs, seed
        As for :func:`tvm_hybrid_nb.ui.explorer.explorer`.

    Returns
    -------
    ExplorerActions
    """
    from ..bisect import find_first_divergence

    note = ""
    if reference is None:
        reference = default_reference(hm)
        if reference == "input":
            note = ("reference: the emulation of the input stage (the native kernel cannot run here), "
                    "so a comparison asks whether every pass keeps the kernel's meaning")

    sizes = symbolic_sizes(hm)
    if sizes and inputs is None:
        shown_sizes = ", ".join(f"{k}={v}" for k, v in sizes.items())
        note = "; ".join(filter(None, [note, f"random inputs with symbolic sizes {shown_sizes}"]))

    def arguments() -> tuple:
        if inputs is None:
            return tuple(hm.random_inputs(seed=seed, sizes=sizes or None))
        values = inputs() if callable(inputs) else inputs
        return tuple(values)

    # The buttons emulate in fast mode (bit-identical to exact): the verdict first, then the
    # sanitizers on the same inputs (they cost far more than the emulation).
    def run_compare(index: int, progress=None):
        outcome = hm.compare(*arguments(), reference=reference, stage=index, mode="fast",
                             progress=progress, on_error="partial")
        if outcome.error:
            outcome.error = locate_message(index, outcome.error)
        return outcome

    def run_sanitizers(index: int, progress=None) -> str:
        try:
            hm.emulate(*arguments(), stage=index, mode="fast", check=True, progress=progress)
        except EmulationError as exc:
            raise EmulationError(locate_message(index, str(exc))) from None
        return "Sanitizers: no data race, out-of-bounds access or read of unwritten memory"

    def run_divergence(progress):
        # Outputs only (fast mode): the sanitizers run per stage, under Emulate & compare.
        found = find_first_divergence(hm, *arguments(), reference=reference, progress=progress, mode="fast")
        if found.stage is not None and found.error is not None and found.result is None:
            # The stage's emulation failed: still show the verdict on what it wrote before failing.
            found.result = run_compare(found.stage.index)
            found.error = found.result.error
        return found

    def locate_message(index: int, message: str) -> str:
        """Name the line of the shown (exact-mode) source.  A fast-mode failure may be in generated
        array code the user never sees: then exact mode runs again to find the statement."""
        shown = shown_line(hm.stages[index], message)
        if shown is not None:
            return shown
        try:
            hm.emulate(*arguments(), stage=index, mode="exact", check=True)
        except EmulationError as exc:
            return shown_line(hm.stages[index], str(exc)) or str(exc)
        return message

    def locate(index: int, exc: BaseException) -> str:
        return locate_message(index, error_text(exc))

    return ExplorerActions(run_compare=run_compare, run_divergence=run_divergence,
                           run_sanitizers=run_sanitizers, locate=locate, note=note)


_LINE_IN_MESSAGE = re.compile(r"at line (\d+): (.+?): ([A-Z]\w*(?:Error|Exception))\b")


def shown_line(stage: Any, message: str) -> str | None:
    """``message`` with its hybrid line number replaced by that statement's line in the shown source
    (``stage.source``, the exact-mode script without progress hooks), or None when not found there.

    Parameters
    ----------
    stage : Stage
        Its ``source`` and ``emulatable``.
    message : str
        An emulation error's message (``... at line N: <statement>: <Type>Error ...``).

    Returns
    -------
    str or None
    """
    match = _LINE_IN_MESSAGE.search(message)
    if match is None or not stage.emulatable:
        return None
    number, statement = int(match.group(1)), match.group(2).strip()
    lines = [i + 1 for i, ln in enumerate(stage.source.splitlines()) if ln.strip() == statement]
    if not lines:
        return None
    best = min(lines, key=lambda ln: abs(ln - number))
    return (message[:match.start()] + f"at line {best} of the shown source: {statement}: "
            + message[match.start(3):])
