"""The two run panels: ``Emulate & compare`` (one stage against the reference, then the
sanitizers) and ``Find first divergent pass``.

Each is a :class:`~tvm_hybrid_nb.ui.runs.RunControls` row over its result: the verdict as HTML from
:mod:`tvm_hybrid_nb.presentation`, heat maps of the outputs that differ, or the run's error as one
line.  The runs themselves are callables handed in; this module never sees a module or a stage.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import ipywidgets as widgets

from .. import presentation as P
from .basics import error_text, heatmap_image, html_view
from .runs import CANCELLED_TEXT, RunControls

COMPARE_BUTTON = "Emulate & compare"
DIVERGENCE_BUTTON = "Find first divergent pass"
SANITIZERS_RUNNING = "Running the sanitizers (data races, out-of-bounds accesses, reads of unwritten memory)…"


def _shown_error(exc: BaseException, locate: Callable[[BaseException], str] | None = None) -> str:
    """A run's error as one note: "cancelled" for an interrupt, else one line (``locate`` may name
    the shown source line; if it fails, the original line stays)."""
    if isinstance(exc, KeyboardInterrupt):
        return P.note_html(f"{CANCELLED_TEXT}: the run was stopped before it finished.", "warning")
    text = error_text(exc)
    if locate is not None:
        try:
            text = locate(exc) or text
        except Exception:  # locating is a courtesy; the original message stays
            pass
    return P.note_html(text, "error")


def compare_panel(run: Callable[..., Any], description: str = COMPARE_BUTTON,
                  locate: Callable[[BaseException], str] | None = None,
                  sanitize: Callable[[Callable[[float], None]], str] | None = None) -> widgets.VBox:
    """A button that runs ``run(progress)`` (returning a CompareResult) and shows the result.

    The result line contains ``MATCH`` or ``MISMATCH`` with per-output errors and both run times;
    each output that differs gets a heat map of the error size.  Errors are one line (``locate``
    may rewrite one to name the shown source line); ``Cancel`` stops the run.  ``sanitize(progress)``,
    when given, runs next in the same run (the verdict is shown first): it returns a one-line verdict
    of the sanitizers or raises the alarm, which is added under the result.

    Parameters
    ----------
    run : callable
        ``run(progress)`` returning a :class:`~tvm_hybrid_nb.compare.CompareResult`.
    description : str
        The button's text.
    locate : callable, optional
        ``locate(exc)``: the one-line message of an error, naming the line of the shown source.
    sanitize : callable, optional
        ``sanitize(progress)``: runs the sanitizers after a verdict without error.

    Returns
    -------
    ipywidgets.VBox
        With ``.button``, ``.controls`` (:class:`RunControls`), ``.result``, ``.heatmaps`` and
        ``.last_result``.
    """
    controls = RunControls(description, "play", "thn-compare-button", "primary")
    result = html_view("", "thn-compare-result")
    heatmaps = widgets.HBox([], layout=widgets.Layout(flex_flow="row wrap"))
    heatmaps.add_class("thn-heatmaps")
    panel = widgets.VBox([controls, result, heatmaps])
    panel.controls, panel.button, panel.result, panel.heatmaps, panel.last_result = (
        controls, controls.button, result, heatmaps, None)

    checked: dict = {}  # this run's verdict, shown before the sanitizers run

    def work(progress):
        checked.clear()
        outcome = run(progress)
        if sanitize is None or getattr(outcome, "error", None):
            return outcome
        show(outcome, None)
        checked["outcome"] = outcome
        result.value += P.note_html(SANITIZERS_RUNNING)
        started = time.monotonic()
        try:
            verdict = sanitize(progress)
        except Exception as exc:  # an alarm (or a failure) of the sanitizers: shown under the verdict
            checked["alarm"] = _shown_error(exc, locate)
        else:
            checked["verdict"] = f"{verdict} ({P.format_seconds(time.monotonic() - started)})"
        return outcome

    def show(outcome: Any, error: BaseException | None) -> None:
        if error is not None and "outcome" in checked:  # cancelled while the sanitizers ran
            outcome, error = checked["outcome"], None
            checked["verdict"] = "sanitizers: " + CANCELLED_TEXT
        if error is not None:
            panel.last_result = None
            result.value = _shown_error(error, locate)
            return
        panel.last_result = outcome
        result.value = P.compare_html(outcome)
        if "alarm" in checked:
            result.value += P.note_html("Sanitizers: ", "error") + checked["alarm"]
        elif "verdict" in checked:
            result.value += P.note_html(checked["verdict"])
        images = []
        for out in outcome.outputs:
            if out.mismatch_mask is not None:
                errors = getattr(out, "abs_error", None)
                images.append(heatmap_image(P.heatmap_png(
                    errors if errors is not None else out.mismatch_mask, title=f"{out.name}: |emulated − reference|",
                    outline=out.mismatch_mask)))
        heatmaps.children = tuple(images)

    def on_click(_button=None):
        result.value = P.note_html("Running the emulation and the reference…")
        heatmaps.children = ()
        controls.start(work, show)

    controls.button.on_click(on_click)
    return panel


def divergence_panel(run: Callable[[Callable[[Any], None]], Any],
                     on_found: Callable[[Any], None] | None = None,
                     total: Callable[[], int] | None = None) -> widgets.VBox:
    """A ``Find first divergent pass`` button with progress, Cancel and its result.

    ``run(progress)`` returns a :class:`~tvm_hybrid_nb.bisect.Divergence` and calls
    ``progress(stage)`` before emulating each stage; ``total()`` is how many stages it may emulate.

    Parameters
    ----------
    run : callable
        ``run(progress)`` returning a Divergence; ``progress(stage)`` is called with each stage
        before it is emulated (anything with a ``.label``).
    on_found : callable, optional
        Called with the Divergence once it is shown (the explorer selects the pass).
    total : callable, optional
        How many stages the search may emulate (the progress bar's scale); None: 1.

    Returns
    -------
    ipywidgets.VBox
        With ``.button``, ``.controls`` (:class:`RunControls`), ``.result`` and ``.last_result``.
    """
    controls = RunControls(DIVERGENCE_BUTTON, "search", "thn-divergence-button")
    result = html_view("", "thn-divergence-result")
    panel = widgets.VBox([controls, result])
    panel.controls, panel.button, panel.result, panel.last_result = controls, controls.button, result, None

    def show(found: Any, error: BaseException | None) -> None:
        if error is not None:
            panel.last_result = None
            result.value = _shown_error(error)
            return
        panel.last_result = found
        result.value = P.divergence_html(found)
        if on_found is not None:
            on_found(found)

    def on_click(_button=None):
        result.value = P.note_html("Searching…")
        count = max(total() if total is not None else 1, 1)

        def work(progress):
            done = [0]

            def each(stage) -> None:
                progress(done[0] / count)
                done[0] += 1
                result.value = P.note_html(f"Emulating stage {stage.label}…")

            return run(each)

        controls.start(work, show)

    controls.button.on_click(on_click)
    return panel
