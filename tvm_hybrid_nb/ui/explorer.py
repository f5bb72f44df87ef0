"""The pass explorer: the assembly of the pass list, the stage panels and the divergence search
for one HybridModule, and :func:`explorer`, which builds it with the module's runs bound.

Layout of :func:`explorer`::

    header line (kernel, signature, target, passes that changed the IR, what "changed" means)
    [Find first divergent pass] [Cancel] progress ETA   divergence result
    ┌ filter passes ┐ [changed only]   │ panel of the selected pass:
    │ 0 input                          │   info line, Hybrid Python | TVMScript | Diff (from/to),
    │ 1 tirx.BindTarget  changed …     │   [Emulate & compare] [Cancel] progress ETA, result, heat map
    │ …                                │
    │ ✗ 23 tirx.VectorizeLoop — failed │   (a failed lowering: TVM's message and the IR before it)

Stage panels are built on first selection and kept; the list's labels gain each comparison's
verdict.  The module and its stages are duck-typed: the explorer reads names, numbers, strings and
callables, never TIR nodes.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import ipywidgets as widgets

from .. import presentation as P
from .actions import module_actions
from .basics import close_tree, html_view
from .pass_list import cheap_emulatable, pass_list_css, pass_option, stages_to_show
from .run_panels import divergence_panel
from .stage_panels import failure_panel, stage_panel

FILTER_PLACEHOLDER = "filter passes"


class Explorer(widgets.VBox):
    """The pass explorer of one HybridModule (build it with :func:`explorer`).

    Parameters
    ----------
    hm : HybridModule
        The module (duck-typed: ``stages``, ``failure``, ``name``, ``first_index``, what the header
        shows).
    run_compare : callable
        ``run_compare(index, progress)``: the CompareResult of stage ``index``.
    run_divergence : callable
        ``run_divergence(progress)``: the first divergent pass.
    locate : callable, optional
        ``locate(index, exc)``: an error's one line, naming stage ``index``'s shown source line.
    reference_note : str
        Added to the header (what the runs compare with, the inputs' sizes).
    run_sanitizers : callable, optional
        ``run_sanitizers(index, progress)``: run after a comparison, a one-line verdict.
    **kwargs
        Passed to ``ipywidgets.VBox``.

    Attributes
    ----------
    pass_list : ipywidgets.Select
        One entry per shown stage (number, full pass name, time, badges); its value is the stage
        index (``failed_index`` for a failed pass).  Up/Down step through it.
    filter : ipywidgets.Text
        Narrows the list to passes whose number or name contains the text.
    changed_only : ipywidgets.Checkbox
        Show only the passes that changed the printed IR (the selection stays).
    divergence : ipywidgets.VBox
        The ``Find first divergent pass`` panel.
    shown_stages : list of Stage
        The stages listed now, in order (the failed entry is not a stage).
    """

    def __init__(self, hm: Any, run_compare: Callable[..., Any],
                 run_divergence: Callable[[Callable[[Any], None]], Any],
                 locate: Callable[[int, BaseException], str] | None = None, reference_note: str = "",
                 run_sanitizers: Callable[..., str] | None = None, **kwargs):
        self.hm = hm
        self._run_compare = run_compare
        self._run_sanitizers = run_sanitizers
        self._locate = locate
        self._panels: dict[int, widgets.Widget] = {}
        self._results: dict[int, str] = {}
        self.failure = getattr(hm, "failure", None)
        self.failed_index = len(hm.stages) if self.failure is not None else None
        header = html_view(P.THEME_CSS + P.module_header_html(hm)
                           + P.note_html(P.CHANGED_MEANING + (f"; {reference_note}" if reference_note else "")),
                           "thn-explorer-header")
        self.divergence = divergence_panel(run_divergence, on_found=self._select_divergent,
                                           total=lambda: sum(1 for s in hm.stages
                                                             if (s.index == 0 or s.changed) and cheap_emulatable(s)))
        self.filter = widgets.Text(value="", placeholder=FILTER_PLACEHOLDER, continuous_update=True,
                                   layout=widgets.Layout(width="200px"))
        self.filter.add_class("thn-filter")
        self.changed_only = widgets.Checkbox(value=False, description="changed only", indent=False,
                                             layout=widgets.Layout(width="auto"))
        self.changed_only.add_class("thn-changed-only")
        self.pass_list = widgets.Select(options=[], rows=22, layout=widgets.Layout(width="100%"))
        self.pass_list.add_class("thn-pass-list")
        self._style = html_view("", "thn-pass-list-style")
        self._uid = f"thn-x{id(self):x}"
        self.detail = widgets.Box([], layout=widgets.Layout(flex="1 1 0%", min_width="0", overflow="hidden"))
        self.detail.add_class("thn-detail")
        left = widgets.VBox([widgets.HBox([self.filter, self.changed_only]), self.pass_list, self._style],
                            layout=widgets.Layout(width="360px", flex="0 0 360px"))
        left.add_class("thn-pass-column")
        body = widgets.HBox([left, self.detail], layout=widgets.Layout(width="100%", align_items="flex-start"))
        super().__init__([header, self.divergence, body], **kwargs)
        self.add_class("thn-explorer")
        self.add_class(self._uid)
        self.shown_stages: list = []
        self._refill(keep=self.failed_index if self.failed_index is not None else 0)
        self.pass_list.observe(self._on_select, names="value")
        self.filter.observe(lambda _c: self._refill(), names="value")
        self.changed_only.observe(lambda _c: self._refill(), names="value")

    # -- list
    def _stages_to_show(self, keep: int | None) -> list:
        return stages_to_show(self.hm.stages, self.filter.value, self.changed_only.value, keep)


    def _failed_label(self) -> str:
        number = self.failure.stage_number + getattr(self.hm, "first_index", 0)
        return f"✗ {number} {self.failure.step} — failed"

    def _refill(self, keep: int | None = None) -> None:
        if keep is None:
            keep = self.pass_list.value
        self.shown_stages = self._stages_to_show(keep)
        options = [(pass_option(s, self._results), s.index) for s in self.shown_stages]
        text = self.filter.value.strip().lower()
        if self.failure is not None and (not text or text in self._failed_label().lower()):
            options.append((self._failed_label(), self.failed_index))
        values = [v for _, v in options]
        value = keep if keep in values else (values[0] if values else None)
        self._updating = True
        try:
            self.pass_list.options = options
            self.pass_list.value = value
        finally:
            self._updating = False
        self._style.value = self._list_css(options)
        self._show(value)

    def _list_css(self, options) -> str:
        return pass_list_css(self._uid, self.hm.stages, options)


    def _on_select(self, change) -> None:
        if not getattr(self, "_updating", False):
            self._show(change["new"])

    def _show(self, index: int | None) -> None:
        if index is None:
            self.detail.children = ()
            return
        self.detail.children = (self._panel_for(index),)

    def _panel_for(self, index: int) -> widgets.Widget:
        if index not in self._panels:
            stages = list(self.hm.stages)
            if index == self.failed_index:
                before = stages[-1] if stages else None
                panel = failure_panel(self.failure, before, stages,
                                      self._compare_for(before.index) if before is not None else None,
                                      self.hm.name, self._locator(before.index) if before is not None else None)
            else:
                stage = stages[index]
                panel = stage_panel(stage, stages, self._compare_for(index), self.hm.name, self._locator(index))
            self._panels[index] = panel
        return self._panels[index]

    def _locator(self, index: int):
        if self._locate is None:
            return None
        return lambda exc: self._locate(index, exc)

    def _compare_for(self, index: int) -> Callable[..., Any]:
        def run(progress=None):
            outcome = self._run_compare(index, progress)
            self._results[index] = "MATCH" if outcome.ok else "MISMATCH"
            self._relabel()
            return outcome
        if self._run_sanitizers is not None:
            run.sanitize = lambda progress=None: self._run_sanitizers(index, progress)
        return run

    def _relabel(self) -> None:
        options = [(pass_option(self.hm.stages[v], self._results) if v != self.failed_index else label, v)
                   for label, v in self.pass_list.options]
        self._updating = True
        try:
            value = self.pass_list.value
            self.pass_list.options = options
            self.pass_list.value = value
        finally:
            self._updating = False

    # -- API
    def select_stage(self, index: int) -> bool:
        """Select stage ``index`` in the list (clearing the filter and "changed only" if needed).

        Parameters
        ----------
        index : int
            A stage index, or ``failed_index``.

        Returns
        -------
        bool
            False when the list has no such entry.
        """
        values = [v for _, v in self.pass_list.options]
        if index not in values:
            self._updating = True
            try:
                self.filter.value = ""
                self.changed_only.value = False
            finally:
                self._updating = False
            self._refill(keep=index)
            values = [v for _, v in self.pass_list.options]
            if index not in values:
                return False
        self.pass_list.value = index
        self._show(index)
        return True

    def panel(self, index: int) -> widgets.Widget:
        """The (built) panel of stage ``index`` (``failed_index`` for the failed pass), selecting it.

        Parameters
        ----------
        index : int

        Returns
        -------
        ipywidgets.VBox
            The stage panel (see :func:`~tvm_hybrid_nb.ui.stage_panels.stage_panel`) or the failure
            panel.

        Raises
        ------
        KeyError
            When the list has no entry for ``index``.
        """
        if not self.select_stage(index):
            raise KeyError(f"no entry for stage {index}")
        return self._panels[index]

    def _select_divergent(self, found) -> None:
        if found.stage is not None:
            self.select_stage(found.stage.index)

    def close(self) -> None:
        """Close this explorer and every widget it made (a re-run cell replaces it)."""
        for controls in (self.divergence.controls, *[getattr(p, "compare", None) for p in self._panels.values()]):
            if controls is not None:
                getattr(controls, "controls", controls).cancel()
        for panel in list(self._panels.values()):
            close_tree(panel)
        self._panels.clear()
        for child in list(self.children):
            close_tree(child)
        layout = self.layout
        super().close()
        layout.close()

    # -- display without a widget frontend
    def _repr_mimebundle_(self, **kwargs):
        data = super()._repr_mimebundle_(**kwargs) or {}
        data = dict(data)
        try:
            data["text/html"] = P.module_html(self.hm)
            data["text/plain"] = P.module_text(self.hm)
        except Exception:  # a fallback must never break the display of the widget itself
            pass
        return data


def explorer(hm: Any, reference: str | Callable | None = None,
             inputs: Callable[[], Sequence[Any]] | Sequence[Any] | None = None,
             seed: int = 0) -> Explorer:
    """Build the pass explorer of ``hm``.

    Parameters
    ----------
    hm : HybridModule
    reference : "native", "input", callable or None
        What ``Emulate & compare`` and ``Find first divergent pass`` compare with: the native
        build, the emulation of the input stage, or a function of the input arrays returning the
        expected output(s).  None: native on CPU targets; the input stage's emulation for targets
        that cannot run here (CUDA) and for a failed lowering.
    inputs : sequence of arrays, callable returning one, or None
        Every kernel argument, in order.  None: seeded random values by dtype and shape.
    seed : int
        Seed of the random inputs.

    Returns
    -------
    Explorer
    """
    actions = module_actions(hm, reference, inputs, seed)
    return Explorer(hm, actions.run_compare, actions.run_divergence, locate=actions.locate,
                    reference_note=actions.note, run_sanitizers=actions.run_sanitizers)
