"""The explorer's pass list as data: which stages are listed, each entry's label (number, full
pass name, badges, time) and the list's per-entry CSS (time bars, greyed unchanged passes, the
selected entry).

Pure functions of duck-typed stages (``index``, ``number``, ``name``, ``changed``, ``seconds``,
``emulatable``): strings in, strings out; :class:`~tvm_hybrid_nb.ui.explorer.Explorer` puts them in
its ``Select``.
"""
from __future__ import annotations

from typing import Any, Sequence

from .. import presentation as P


def stages_to_show(stages: Sequence[Any], text: str, changed_only: bool, keep: int | None) -> list:
    """The stages the list shows.

    Parameters
    ----------
    stages : sequence of Stage
        Every stage, in order.
    text : str
        The filter: a stage is listed when ``"<number> <name>"`` contains it (any case; empty: all).
    changed_only : bool
        List only the input, the stage ``keep`` and the passes that changed the printed IR.
    keep : int or None
        The selected stage's index: "changed only" keeps it listed (the filter narrows strictly).

    Returns
    -------
    list of Stage
    """
    text = text.strip().lower()
    shown = []
    for s in stages:
        matches = not text or text in f"{s.number} {s.name}".lower()
        # "changed only" keeps the selected pass listed; the filter narrows strictly.
        if matches and (not changed_only or s.index in (0, keep) or s.changed):
            shown.append(s)
    return shown


def pass_option(stage: Any, compare_results: dict[int, str]) -> str:
    """The list entry of ``stage``: number, full pass name, badges, time.

    Parameters
    ----------
    stage : Stage
        The stage listed.
    compare_results : dict
        Stage index -> ``"MATCH"`` / ``"MISMATCH"`` of its latest comparison (a badge).

    Returns
    -------
    str
        E.g. ``"  3 tirx.FlattenBuffer  changed · MATCH  1.2 ms"``.
    """
    badges = []
    if stage.index > 0 and stage.changed:
        badges.append("changed")
    if not cheap_emulatable(stage):
        badges.append("not emulatable")
    outcome = compare_results.get(stage.index)
    if outcome is not None:
        badges.append(outcome)
    # Badges before the time: a narrow list cuts the end of the line, and the bar shows the time too.
    head = f"{stage.number:>3} {stage.name}"
    return "  ".join([head] + ([" · ".join(badges)] if badges else []) + [P.format_seconds(stage.seconds)])


def cheap_emulatable(stage: Any) -> bool:
    """Whether a stage can be emulated, known without generating code for unchanged stages.

    Parameters
    ----------
    stage : Stage
        A stage of a module (its ``_owner`` tells where the packed API starts and the stages before).

    Returns
    -------
    bool
    """
    owner = getattr(stage, "_owner", None)
    packed = getattr(owner, "packed_api_index", None)
    if packed is not None and stage.index >= packed:
        return False
    if stage.index > 0 and not stage.changed and owner is not None:
        return cheap_emulatable(owner.stages[stage.index - 1])
    return bool(stage.emulatable)


# JupyterLab binds Up/Down to "select the cell above/below" while any non-editable element of a
# notebook has the focus, a <select> included, so the pass list would never see them.  Lumino skips
# key bindings for elements marked data-lm-suppress-shortcuts: mark the explorer's lists when they
# get the focus.  (A widget has no other way to run this line in the page; an image that fails to
# load runs it once per page.)
_KEYS_TO_LISTS = (
    '<img src="data:," alt="" style="display:none" onerror="if(!window.__thnKeys){window.__thnKeys=1;'
    "document.addEventListener('focusin',function(e){var t=e.target;"
    "if(t&amp;&amp;t.tagName==='SELECT'&amp;&amp;t.closest('.thn-explorer')){"
    "t.setAttribute('data-lm-suppress-shortcuts','true')}},true)}\">")


def pass_list_css(uid: str, stages: Sequence[Any], options: Sequence[tuple[str, int]]) -> str:
    """Per-entry styles: unchanged passes greyed, the pass time as a bar behind the entry.

    Parameters
    ----------
    uid : str
        The CSS class of this explorer (the rules apply to its list only).
    stages : sequence of Stage
        Every stage (the longest time is the full bar).
    options : sequence of (label, index)
        The list's entries, in order; an index that is no stage's is the failed pass (red).

    Returns
    -------
    str
        A ``<style>`` element, then the element that hands Up/Down to the explorer's lists in
        JupyterLab.
    """
    longest = max([s.seconds for s in stages] + [1e-9])
    rules = [f".{uid} .thn-pass-list select {{font-family:var(--jp-code-font-family,monospace);"
             f"font-size:12px}}"]
    by_index = {s.index: s for s in stages}
    for position, (_label, index) in enumerate(options, start=1):
        selector = f".{uid} .thn-pass-list option:nth-child({position})"
        stage = by_index.get(index)
        if stage is None:  # the failed pass
            rules.append(f"{selector} {{color:#cf222e;font-weight:bold}}")
            continue
        width = 100.0 * stage.seconds / longest
        rules.append(f"{selector} {{background:linear-gradient(to right, rgba(80,140,220,.22) {width:.1f}%, "
                     f"transparent {width:.1f}%)}}")
        if index > 0 and not stage.changed:
            rules.append(f"{selector} {{color:var(--jp-content-font-color2,#6e6e6e)}}")
    # The selected entry stands out whatever its bar or greying (and with or without focus).
    rules.append(f".{uid} .thn-pass-list option:checked {{background:var(--jp-brand-color1,#1976d2) "
                 f"!important;color:#fff !important}}")
    return f"<style>{''.join(rules)}</style>{_KEYS_TO_LISTS}"
