"""The panel of one stage: its info line, the view switch (Hybrid Python with the fast-mode plan
folded above it | TVMScript | Diff between any two stages) and its ``Emulate & compare`` panel; and
the panel of a failed pass (TVM's message over the panel of the stage before it).

Stages are duck-typed (``index``, ``number``, ``name``, ``label``, ``script``, ``source``,
``emulatable``, ``reason``, ``changed``, ``seconds``, ``plan(mode)``): strings and numbers only,
never TIR nodes.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import ipywidgets as widgets

from .. import presentation as P
from .basics import error_text, html_view
from .run_panels import compare_panel

VIEW_SCRIPT = "TVMScript"
VIEW_HYBRID = "Hybrid Python"
VIEW_DIFF = "Diff"
#: The view switch of a pass panel, in order.
VIEWS = (VIEW_HYBRID, VIEW_SCRIPT, VIEW_DIFF)


def _stage_number_options(stages: Sequence[Any]) -> list[tuple[str, int]]:
    return [(f"{s.number} {s.name}", s.index) for s in stages]


def diff_view(stages: Sequence[Any], after: Any) -> widgets.VBox:
    """Two stage pickers ("from", "to": default the stage before ``after`` → ``after``), a
    "hide attributes" option and the side-by-side diff of their TVMScript.

    Parameters
    ----------
    stages : sequence of Stage
        The stages the pickers offer.
    after : Stage
        The stage shown on the right at first (the stage before it on the left).

    Returns
    -------
    ipywidgets.VBox
        With ``.source`` and ``.target`` (Dropdowns of stage indices), ``.hide`` (Checkbox) and
        ``.content`` (HTML of the diff).
    """
    options = _stage_number_options(stages)
    start = max(after.index - 1, 0)
    source = widgets.Dropdown(options=options, value=start, description="from",
                              layout=widgets.Layout(width="auto", flex="1 1 0%", min_width="0"),
                              style={"description_width": "3em"})
    target = widgets.Dropdown(options=options, value=after.index, description="to",
                              layout=widgets.Layout(width="auto", flex="1 1 0%", min_width="0"),
                              style={"description_width": "2em"})
    source.add_class("thn-diff-from")
    target.add_class("thn-diff-to")
    hide = widgets.Checkbox(value=False, description="hide attributes", indent=False,
                            layout=widgets.Layout(width="auto"))
    hide.add_class("thn-hide-attributes")
    content = html_view("", "thn-diff-content")
    by_index = {s.index: s for s in stages}

    def render(_change=None) -> None:
        a, b = by_index[source.value], by_index[target.value]
        try:
            content.value = P.side_by_side_diff_html(a.script, b.script, f"{a.label} (TVMScript)",
                                                     f"{b.label} (TVMScript)", attributes=not hide.value)
        except Exception as exc:
            content.value = P.note_html(error_text(exc), "error")

    for w in (source, target, hide):
        w.observe(render, names="value")
    render()
    box = widgets.VBox([widgets.HBox([source, target, hide], layout=widgets.Layout(width="100%")), content])
    box.add_class("thn-diff-view")
    box.source, box.target, box.hide, box.content = source, target, hide, content
    return box


def plan_note(stage: Any) -> str:
    """Fast mode's plan for ``stage`` (what the Emulate button runs), as a folded note.

    Parameters
    ----------
    stage : Stage
        Anything with ``plan("fast")`` returning a plan with ``summary()`` and ``outline()``.

    Returns
    -------
    str
        HTML: the folded plan, or a warning saying why there is none.
    """
    try:
        plan = stage.plan("fast")
    except Exception as exc:  # the hybrid source still shows; say why the plan does not
        return P.note_html(f"fast mode plan unavailable: {error_text(exc)}", "warning")
    return P.plan_html(plan.summary(), plan.outline())


def stage_panel(stage: Any, stages: Sequence[Any], run_compare: Callable[..., Any] | None,
                function_name: str = "main", locate: Callable[[BaseException], str] | None = None,
                heading: str | None = None) -> widgets.VBox:
    """The panel of one stage: info line, a view switch (Hybrid Python — kernel first, helpers
    folded | TVMScript | Diff between any two stages), the selected view and ``Emulate & compare``.

    Parameters
    ----------
    stage : Stage
        The stage shown.
    stages : sequence of Stage
        Every stage (the diff view's pickers).
    run_compare : callable or None
        ``run_compare(progress)`` for :func:`~tvm_hybrid_nb.ui.run_panels.compare_panel`, with an
        optional ``.sanitize`` attribute; None (or a stage that cannot be emulated): no compare panel.
    function_name : str
        The kernel's name in the hybrid source (shown first, helpers folded).
    locate : callable, optional
        ``locate(exc)``: an error's one line naming the shown source line.
    heading : str, optional
        The info line; None: the pass, its time and whether it changed the IR.

    Returns
    -------
    ipywidgets.VBox
        With ``.views`` (ToggleButtons), ``.content`` (HTML of the Hybrid/TVMScript view),
        ``.diff`` (the diff view, built on first use), ``.compare`` and ``.info``.
    """
    def hybrid() -> str:
        if stage.emulatable:
            return plan_note(stage) + P.kernel_first_html(stage.source, function_name)
        return P.note_html(f"No hybrid Python for this stage: {stage.reason}", "warning")

    makers = {VIEW_HYBRID: hybrid, VIEW_SCRIPT: lambda: P.highlight_python(stage.script, themed=True)}
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
    holder = widgets.VBox([content])
    panel = widgets.VBox()

    def on_view(change):
        if change["new"] == VIEW_DIFF:
            if panel.diff is None:
                panel.diff = diff_view(stages, stage)
            holder.children = (panel.diff,)
        else:
            content.value = render(change["new"])
            holder.children = (content,)

    views.observe(on_view, names="value")
    if heading is None:
        if stage.index == 0:
            heading = "Stage 0: the input, before any pass."
        else:
            changed = "changed the printed IR" if stage.changed else "did not change the printed IR"
            heading = f"Pass {stage.name} (stage {stage.number}) took {P.format_seconds(stage.seconds)} and {changed}."
    info = P.note_html(heading)
    if not stage.emulatable:
        info += P.note_html(f"Cannot be emulated: {stage.reason}", "warning")
    info_widget = html_view(info, "thn-stage-info")
    compare = None
    children: list = [info_widget, views, holder]
    if run_compare is not None and stage.emulatable:
        compare = compare_panel(run_compare, locate=locate, sanitize=getattr(run_compare, "sanitize", None))
        children.insert(1, compare)
    panel.children = tuple(children)
    panel.add_class("thn-stage-panel")
    panel.views, panel.content, panel.compare, panel.info, panel.diff = views, content, compare, info_widget, None
    return panel


def failure_panel(failure: Any, before: Any | None, stages: Sequence[Any],
                  run_compare: Callable[..., Any] | None, function_name: str,
                  locate: Callable[[BaseException], str] | None = None) -> widgets.VBox:
    """The panel of a failed pass: TVM's full message, then the stage before the pass.

    Parameters
    ----------
    failure : BuildFailure
        The failed pass (:class:`tvm_hybrid_nb.capture.BuildFailure`: its summary and TVM's
        message), read by :func:`tvm_hybrid_nb.presentation.failure_html`.
    before : Stage or None
        The last stage that lowered (None: the failure came before any).
    stages, run_compare, function_name, locate
        As for :func:`stage_panel` (of ``before``).

    Returns
    -------
    ipywidgets.VBox
        With ``.message`` (HTML) and ``.before`` (the stage panel of ``before``, or None).
    """
    message = html_view(P.failure_html(failure, before.label if before is not None else None), "thn-failure-view")
    children: list = [message]
    inner = None
    if before is not None:
        inner = stage_panel(before, stages, run_compare, function_name, locate,
                            heading=f"The IR before the failing pass: stage {before.label} ({before.name}).")
        children.append(inner)
    panel = widgets.VBox(children)
    panel.add_class("thn-failure-panel")
    panel.message, panel.before = message, inner
    return panel
