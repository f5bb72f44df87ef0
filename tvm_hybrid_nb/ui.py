"""The pass explorer: ipywidgets 8 built from plain data and callables.

Small builder functions take strings, stages (duck-typed) and callables and return widgets; the
HTML inside comes from :mod:`tvm_hybrid_nb.presentation`.  This module imports neither TVM nor
IPython: the magic (:mod:`tvm_hybrid_nb.magic`) is the only IPython glue.

Layout of :func:`explorer`::

    header line (kernel, signature, target, number of passes that changed the IR)
    [show every pass]  [Find first divergent pass]  divergence result
    Tab: Source | 1 BindTarget | 4 LowerInitBlock | ... (tabs are built on first selection)

Every button catches its own errors and shows them as one line, so a click never leaves a
traceback in the kernel log and the kernel stays alive.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import ipywidgets as widgets

from . import presentation as P
from .errors import HybridError

VIEW_SCRIPT = "TVMScript"
VIEW_HYBRID = "Hybrid Python"
VIEW_DIFF = "Diff"
#: The view switch of a pass tab, in order.
VIEWS = (VIEW_SCRIPT, VIEW_HYBRID, VIEW_DIFF)

COMPARE_BUTTON = "Emulate & compare"
DIVERGENCE_BUTTON = "Find first divergent pass"
SOURCE_TITLE = "Source"


def error_text(exc: BaseException) -> str:
    """One line for an exception: the message of our own errors, ``Type: message`` otherwise."""
    if isinstance(exc, HybridError):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first


def html_view(html: str, css_class: str | None = None) -> widgets.HTML:
    """An HTML widget holding ``html``."""
    w = widgets.HTML(value=html)
    if css_class:
        w.add_class(css_class)
    return w


def heatmap_image(png: bytes) -> widgets.Image:
    """An Image widget showing PNG bytes (a mismatch heat map)."""
    return widgets.Image(value=png, format="png", layout=widgets.Layout(max_width="480px"))


def compare_panel(run: Callable[[], Any], description: str = COMPARE_BUTTON) -> widgets.VBox:
    """A button that runs ``run()`` (returning a CompareResult) and shows the result.

    The result line contains ``MATCH`` or ``MISMATCH`` with per-output max abs / rel error,
    mismatch count and both run times; on a mismatch, one heat map per differing output
    shows where.  Errors are shown as one line.

    Parameters
    ----------
    run : callable
        Called without arguments on each click; returns a :class:`~tvm_hybrid_nb.compare.CompareResult`.
    description : str
        Button label.

    Returns
    -------
    ipywidgets.VBox
        Children: the button, the result (HTML) and a box of heat maps.  The panel keeps
        ``.button``, ``.result``, ``.heatmaps`` and ``.last_result`` as attributes.
    """
    button = widgets.Button(description=description, button_style="primary", icon="play",
                            layout=widgets.Layout(width="auto"))
    button.add_class("thn-compare-button")
    result = html_view("", "thn-compare-result")
    heatmaps = widgets.HBox([], layout=widgets.Layout(flex_flow="row wrap"))
    heatmaps.add_class("thn-heatmaps")
    panel = widgets.VBox([button, result, heatmaps])
    panel.button, panel.result, panel.heatmaps, panel.last_result = button, result, heatmaps, None

    def on_click(_button=None):
        result.value = P.note_html("Running the emulation and the reference…")
        heatmaps.children = ()
        try:
            outcome = run()
        except Exception as exc:  # shown, never raised into the widget callback machinery
            panel.last_result = None
            result.value = P.note_html(error_text(exc), "error")
            return
        panel.last_result = outcome
        result.value = P.compare_html(outcome)
        images = []
        for out in outcome.outputs:
            if out.mismatch_mask is not None:
                images.append(heatmap_image(P.heatmap_png(out.mismatch_mask, title=f"{out.name}: mismatches")))
        heatmaps.children = tuple(images)

    button.on_click(on_click)
    return panel


def stage_views(stage: Any, previous: Any | None) -> dict[str, Callable[[], str]]:
    """HTML makers for the three views of a pass tab (each rendered on first use)."""
    def script() -> str:
        return P.highlight_python(stage.script)

    def hybrid() -> str:
        if stage.emulatable:
            return P.highlight_python(stage.source)
        return P.note_html(f"No hybrid Python for this stage: {stage.reason}", "warning")

    def diff() -> str:
        if previous is None:
            return P.note_html("The input stage has no previous stage.")
        return P.diff_html(previous.script, stage.script, f"{previous.label} (TVMScript)",
                           f"{stage.label} (TVMScript)")

    return {VIEW_SCRIPT: script, VIEW_HYBRID: hybrid, VIEW_DIFF: diff}


def stage_panel(stage: Any, previous: Any | None,
                run_compare: Callable[[], Any] | None) -> widgets.VBox:
    """The content of one pass tab.

    A view switch (TVMScript | Hybrid Python | Diff against the previous stage), the pass time,
    why the stage cannot be emulated (when it cannot), the selected view, and an
    ``Emulate & compare`` panel for emulatable stages.

    Parameters
    ----------
    stage, previous : Stage
        Duck-typed stages; ``previous`` is the stage just before (None for stage 0).
    run_compare : callable or None
        Runs the comparison for this stage; no compare panel when None or not emulatable.

    Returns
    -------
    ipywidgets.VBox
        With attributes ``.views`` (the ToggleButtons), ``.content`` (HTML) and
        ``.compare`` (the compare panel or None).
    """
    makers = stage_views(stage, previous)
    cache: dict[str, str] = {}

    def render(view: str) -> str:
        if view not in cache:
            try:
                cache[view] = makers[view]()
            except Exception as exc:
                return P.note_html(error_text(exc), "error")
        return cache[view]

    default = VIEW_HYBRID if stage.emulatable else VIEW_SCRIPT
    views = widgets.ToggleButtons(options=list(VIEWS), value=default,
                                  style=widgets.ToggleButtonsStyle(button_width="auto"))
    views.add_class("thn-view-switch")
    content = html_view(render(default), "thn-stage-content")

    def on_view(change):
        content.value = render(change["new"])

    views.observe(on_view, names="value")
    changed = "changed the IR" if stage.changed else "did not change the IR"
    info_lines = [f"Pass {stage.name} took {P.format_seconds(stage.seconds)} and {changed}."]
    info = P.note_html(info_lines[0])
    if not stage.emulatable:
        info += P.note_html(f"Cannot be emulated: {stage.reason}", "warning")
    info_widget = html_view(info, "thn-stage-info")
    children: list = [info_widget, views, content]
    compare = None
    if run_compare is not None and stage.emulatable:
        compare = compare_panel(run_compare)
        children.append(compare)
    panel = widgets.VBox(children)
    panel.views, panel.content, panel.compare, panel.info = views, content, compare, info_widget
    return panel


def source_panel(stage: Any, run_compare: Callable[[], Any] | None) -> widgets.VBox:
    """The ``Source`` tab: the hybrid script of stage 0 and an ``Emulate & compare`` panel."""
    content = html_view(P.stage_source_html(stage), "thn-source")
    children: list = [content]
    compare = None
    if run_compare is not None and stage.emulatable:
        compare = compare_panel(run_compare)
        children.insert(0, compare)
    panel = widgets.VBox(children)
    panel.content, panel.compare = content, compare
    return panel


def divergence_panel(run: Callable[[Callable[[Any], None]], Any],
                     on_found: Callable[[Any], None] | None = None) -> widgets.VBox:
    """A ``Find first divergent pass`` button and its result.

    Parameters
    ----------
    run : callable
        ``run(progress)`` returns a :class:`~tvm_hybrid_nb.bisect.Divergence`; it calls
        ``progress(stage)`` before emulating each stage.
    on_found : callable, optional
        Called with the Divergence after a successful search.
    """
    button = widgets.Button(description=DIVERGENCE_BUTTON, icon="search", layout=widgets.Layout(width="auto"))
    button.add_class("thn-divergence-button")
    result = html_view("", "thn-divergence-result")
    panel = widgets.VBox([button, result])
    panel.button, panel.result, panel.last_result = button, result, None

    def progress(stage) -> None:
        result.value = P.note_html(f"Emulating stage {stage.label}…")

    def on_click(_button=None):
        result.value = P.note_html("Searching…")
        try:
            found = run(progress)
        except Exception as exc:
            panel.last_result = None
            result.value = P.note_html(error_text(exc), "error")
            return
        panel.last_result = found
        result.value = P.divergence_html(found)
        if on_found is not None:
            on_found(found)

    button.on_click(on_click)
    return panel


def _placeholder(title: str) -> widgets.HTML:
    w = widgets.HTML(P.note_html(f"{title}: select the tab to build it."))
    w.add_class("thn-placeholder")
    return w


class Explorer(widgets.VBox):
    """The pass explorer of one HybridModule (build it with :func:`explorer`).

    Attributes
    ----------
    tab : ipywidgets.Tab
        ``Source`` then one tab per shown pass, titled with the stage label (``19 FlattenBuffer``).
    show_all : ipywidgets.Checkbox
        Show every pass, not only those that changed the IR.
    divergence : ipywidgets.VBox
        The ``Find first divergent pass`` panel.
    shown_stages : list of Stage
        The stage of each tab (``shown_stages[0]`` is stage 0, for the Source tab).
    """

    def __init__(self, hm: Any, run_compare: Callable[[int], Any],
                 run_divergence: Callable[[Callable[[Any], None]], Any], **kwargs):
        self.hm = hm
        self._run_compare = run_compare
        self._panels: dict[int, widgets.Widget] = {}
        self._placeholders: dict[int, widgets.Widget] = {}
        header = html_view(P.module_header_html(hm), "thn-explorer-header")
        self.show_all = widgets.Checkbox(value=False, description="show every pass", indent=False,
                                         layout=widgets.Layout(width="auto"))
        self.show_all.add_class("thn-show-all")
        self.divergence = divergence_panel(run_divergence, on_found=self._select_divergent)
        self.tab = widgets.Tab()
        self.tab.add_class("thn-tabs")
        self.shown_stages: list = []
        controls = widgets.HBox([self.show_all, self.divergence.button])
        super().__init__([header, controls, self.divergence.result, self.tab], **kwargs)
        self.add_class("thn-explorer")
        self._fill_tabs(select=0)
        self.tab.observe(self._on_select, names="selected_index")
        self.show_all.observe(self._on_show_all, names="value")

    # -- tabs
    def _stages_to_show(self) -> list:
        stages = list(self.hm.stages)
        return [stages[0]] + [s for s in stages[1:] if self.show_all.value or s.changed]

    def _child(self, stage) -> widgets.Widget:
        if stage.index in self._panels:
            return self._panels[stage.index]
        if stage.index not in self._placeholders:
            self._placeholders[stage.index] = _placeholder(stage.label)
        return self._placeholders[stage.index]

    def _fill_tabs(self, select: int | None) -> None:
        self.shown_stages = self._stages_to_show()
        titles = [SOURCE_TITLE] + [s.label for s in self.shown_stages[1:]]
        self.tab.children = tuple(self._child(s) for s in self.shown_stages)
        self.tab.titles = tuple(titles)
        position = 0 if select is None else select
        self._ensure_built(position)
        self.tab.selected_index = position

    def _ensure_built(self, position: int | None) -> None:
        if position is None or not 0 <= position < len(self.shown_stages):
            return
        stage = self.shown_stages[position]
        if stage.index in self._panels:
            return
        run = self._compare_for(stage.index)
        if stage.index == 0:
            panel = source_panel(stage, run)
        else:
            previous = self.hm.stages[stage.index - 1]
            panel = stage_panel(stage, previous, run)
        self._panels[stage.index] = panel
        children = list(self.tab.children)
        children[position] = panel
        titles = self.tab.titles
        self.tab.children = tuple(children)
        if self.tab.titles != titles:
            self.tab.titles = titles

    def _compare_for(self, index: int) -> Callable[[], Any]:
        return lambda: self._run_compare(index)

    def _on_select(self, change) -> None:
        self._ensure_built(change["new"])

    def _on_show_all(self, change) -> None:
        current = self.tab.selected_index
        keep = self.shown_stages[current].index if current is not None and current < len(self.shown_stages) else 0
        self.shown_stages = self._stages_to_show()
        positions = {s.index: i for i, s in enumerate(self.shown_stages)}
        self._fill_tabs(select=positions.get(keep, 0))

    def select_stage(self, index: int) -> bool:
        """Show the tab of stage ``index`` (turning on ``show every pass`` if needed)."""
        positions = {s.index: i for i, s in enumerate(self.shown_stages)}
        if index not in positions:
            if self.show_all.value:
                return False
            self.show_all.value = True
            positions = {s.index: i for i, s in enumerate(self.shown_stages)}
            if index not in positions:
                return False
        self._ensure_built(positions[index])
        self.tab.selected_index = positions[index]
        return True

    def panel(self, index: int) -> widgets.Widget:
        """The (built) panel of stage ``index``; building it if needed."""
        if not self.select_stage(index):
            raise KeyError(f"no tab for stage {index}")
        return self._panels[index]

    def _select_divergent(self, found) -> None:
        if found.stage is not None:
            self.select_stage(found.stage.index)

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


def explorer(hm: Any, reference: str | Callable = "native",
             inputs: Callable[[], Sequence[Any]] | Sequence[Any] | None = None,
             seed: int = 0) -> Explorer:
    """Build the pass explorer of ``hm``.

    Parameters
    ----------
    hm : HybridModule
    reference : "native" or callable
        What ``Emulate & compare`` and ``Find first divergent pass`` compare with: the native
        build, or a function of the input arrays returning the expected output(s).
    inputs : sequence of arrays, callable returning one, or None
        Every kernel argument, in order.  None: seeded random values by dtype and shape.
    seed : int
        Seed of the random inputs.

    Returns
    -------
    Explorer
    """
    from .bisect import find_first_divergence

    def arguments() -> tuple:
        if inputs is None:
            return tuple(hm.random_inputs(seed=seed))
        values = inputs() if callable(inputs) else inputs
        return tuple(values)

    # The buttons emulate in fast mode (bit-identical to exact) with the sanitizers on.
    def run_compare(index: int):
        return hm.compare(*arguments(), reference=reference, stage=index, mode="fast", check=True)

    def run_divergence(progress):
        return find_first_divergence(hm, *arguments(), reference=reference, progress=progress, mode="fast",
                                     check=True)

    return Explorer(hm, run_compare, run_divergence)


# ---------------------------------------------------------------------- model verification
VERIFY_EXPLORE_BUTTON = "Explore"


class VerifyView(widgets.VBox):
    """The table of a model verification: a progress bar while it runs, then one row per kernel
    (kernel, outcome, first divergent pass, time, reason) with a button opening its explorer.

    ``open_kernel(name)`` returns the explorer widget of kernel ``name``; it is shown under the table.
    """

    def __init__(self, open_kernel: Callable[[str], Any]):
        self._open_kernel = open_kernel
        self.progress = widgets.IntProgress(value=0, min=0, max=1, description="verify",
                                            layout=widgets.Layout(width="420px"))
        self.status = widgets.HTML(value="")
        self.table = widgets.VBox()
        self.detail = widgets.VBox()
        self.buttons: dict[str, widgets.Button] = {}
        self.report = None
        super().__init__([widgets.HBox([self.progress, self.status]), self.table, self.detail])

    def on_progress(self, done: int, total: int, kernel: Any) -> None:
        """The ``progress`` callback of :func:`tvm_hybrid_nb.verification.verify`."""
        import time

        if kernel is None:
            self._start = time.monotonic()
        self.progress.max = max(total, 1)
        self.progress.value = done
        text = f"{done}/{total} kernels"
        if done and done < total:
            left = (time.monotonic() - self._start) / done * (total - done)
            text += f", about {P.format_seconds(left)} left"
        if kernel is not None:
            text += f" &middot; {P.escape(kernel.name)}: {P.escape(kernel.outcome)}"
        self.status.value = text

    def show(self, report: Any) -> None:
        """Fill the table from a finished VerifyReport."""
        from .verify_report import outcome_html, summary_text

        self.report = report
        self.progress.layout.display = "none"
        self.status.value = f"<b>{P.escape(summary_text(report))}</b>"
        cell = widgets.Layout(padding="0 8px")
        rows = [widgets.HBox([widgets.HTML(f"<b>{h}</b>", layout=widgets.Layout(width=w))
                              for h, w in (("kernel", "260px"), ("outcome", "80px"),
                                           ("first divergent pass", "220px"), ("time", "80px"), ("", "90px"),
                                           ("reason", "auto"))])]
        for k in report.kernels:
            button = widgets.Button(description=VERIFY_EXPLORE_BUTTON, layout=widgets.Layout(width="90px"),
                                    tooltip=f"open the pass explorer of {k.name}")
            button.on_click(lambda _b, name=k.name: self.explore(name))
            self.buttons[k.name] = button
            rows.append(widgets.HBox([
                widgets.HTML(f"<code>{P.escape(k.name)}</code>", layout=widgets.Layout(width="260px")),
                widgets.HTML(outcome_html(k.outcome), layout=widgets.Layout(width="80px")),
                widgets.HTML(P.escape(k.pass_name or ""), layout=widgets.Layout(width="220px")),
                widgets.HTML(P.escape(P.format_seconds(k.seconds)), layout=widgets.Layout(width="80px")),
                button,
                widgets.HTML(f'<span style="color:#444">{P.escape(k.reason or "")}</span>', layout=cell)]))
        self.table.children = rows

    def explore(self, name: str) -> None:
        """Show kernel ``name``'s explorer under the table (errors as one line)."""
        title = widgets.HTML(f"<b>Kernel <code>{P.escape(name)}</code></b> (building…)")
        self.detail.children = [title]
        try:
            view = self._open_kernel(name)
        except Exception as exc:  # a click must never leave a traceback in the kernel log
            self.detail.children = [html_view(P.note_html(f"{name}: {error_text(exc)}", "error"))]
            return
        title.value = f"<b>Kernel <code>{P.escape(name)}</code></b>"
        self.detail.children = [title, view]
