"""A self-contained HTML report of a :class:`~tvm_hybrid_nb.module.HybridModule`.

One file, no network, no scripts and no external styles (a Content-Security-Policy forbids them,
so even a bug in escaping could not run code): the pass list with changed/unchanged markers and
timings, then one collapsed ``<details>`` section per stage with the TVMScript diff against the
previous stage, the hybrid source, its diff, and the TVMScript; then the latest comparison.

Only stages that changed the IR carry text: an unchanged stage says which stage it equals, so a
50-pass kernel with large IR stays small and quick to open.  Highlighting and diffs come from
:mod:`tvm_hybrid_nb.presentation` (pygments, difflib); every user-derived string is escaped.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer, PythonLexer

from ._version import __version__
from .files import atomic_write_text
from .presentation import compare_html, escape, format_seconds, note_html, signature_text, unified_diff

#: Blocks longer than this many lines are shown as plain escaped text (highlighting would make the
#: file several times larger and slower to open).
HIGHLIGHT_MAX_LINES = 4000

_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em; color: #1a1a1a; }
h1 { font-size: 1.3em; margin-bottom: 0.2em; }
h2 { font-size: 1.1em; margin-top: 1.5em; }
.meta { color: #555; font-size: 0.9em; }
table.passes { border-collapse: collapse; font-size: 12px; }
table.passes th, table.passes td { text-align: left; padding: 1px 8px; }
table.passes tr.unchanged { color: #777; }
.mark-changed { color: #cf222e; font-weight: bold; }
.mark-same { color: #999; }
details.stage { border: 1px solid #ddd; border-radius: 3px; margin: 3px 0; padding: 2px 6px; }
details.stage > summary { cursor: pointer; font-family: monospace; font-size: 12px; }
details.stage.unchanged > summary { color: #777; }
details.inner { margin: 3px 0 3px 1em; }
details.inner > summary { cursor: pointer; font-size: 12px; }
div.code { background: #f8f8f8; border: 1px solid #ddd; border-radius: 3px; padding: 2px 8px; margin: 2px 0;
           overflow: auto; max-height: 36em; font-size: 12px; line-height: 1.35; }
div.code pre { margin: 0; }
"""

_FORMATTER = HtmlFormatter(cssclass="hl", style="default")
_STYLE_DEFS = _FORMATTER.get_style_defs(".hl")
# Token classes the style leaves unstyled (names, punctuation): their spans are dropped, which
# makes the file about a third smaller.
_STYLED = set(re.findall(r"^\.hl \.(\S+) \{", _STYLE_DEFS, re.M))
_SPAN = re.compile(r'<span class="([a-z0-9]+)">([^<]*)</span>')


def _strip_unstyled(html_text: str) -> str:
    return _SPAN.sub(lambda m: m.group(2) if m.group(1) not in _STYLED else m.group(0), html_text)


def _code(text: str, lexer: str = "python") -> str:
    """``text`` highlighted with pygments (CSS classes, one stylesheet in the page), or plain if huge."""
    if text.count("\n") > HIGHLIGHT_MAX_LINES:
        inner = f"<pre>{escape(text)}</pre>"
    else:
        inner = _strip_unstyled(highlight(text, PythonLexer() if lexer == "python" else DiffLexer(), _FORMATTER))
    return f'<div class="code">{inner}</div>'


def _diff(before: str, after: str, before_name: str, after_name: str) -> str:
    text = unified_diff(before, after, before_name, after_name)
    if not text.strip():
        return note_html("No textual difference.")
    return _code(text, "diff")


def _stage_text(stage: Any) -> tuple[str | None, str | None]:
    """(hybrid source, reason it has none); never raises."""
    try:
        if stage.emulatable:
            return stage.source, None
        return None, stage.reason
    except Exception as exc:  # a code generator bug must not lose the rest of the report
        return None, f"hybrid source generation failed: {type(exc).__name__}: {exc}"


def _script(stage: Any) -> str:
    try:
        return stage.script
    except Exception as exc:
        return f"# TVMScript printing failed: {type(exc).__name__}: {exc}\n"


def _pass_table(hm: Any) -> str:
    rows = []
    for s in hm.stages:
        changed = bool(s.changed)
        mark = ('<span class="mark-changed" title="changed the IR">&#9679; changed</span>' if changed
                else '<span class="mark-same" title="IR unchanged">&#9675; unchanged</span>')
        source, reason = _stage_text(s)
        emu = "yes" if source is not None else f"no: {escape(_shorten(reason or '', 80))}"
        rows.append(f'<tr class="{"changed" if changed else "unchanged"}">'
                    f'<td><a href="#stage-{s.number}">{s.number}</a></td><td>{escape(s.name)}</td>'
                    f"<td>{mark}</td><td>{escape(format_seconds(s.seconds))}</td><td>{emu}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("#", "pass", "IR", "time", "emulatable"))
    return f'<table class="passes"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _inner(title: str, body: str, open_: bool = False) -> str:
    return (f'<details class="inner"{" open" if open_ else ""}><summary>{escape(title)}</summary>'
            f"{body}</details>")


def _stage_section(hm: Any, i: int, last_changed: int) -> str:
    s = hm.stages[i]
    changed = bool(s.changed)
    summary = (f"{s.number} {escape(s.name)} &mdash; "
               f"{'changed' if changed else 'unchanged'}, {escape(format_seconds(s.seconds))}")
    if not changed:
        ref = hm.stages[last_changed]
        body = note_html(f"The IR is identical to stage {ref.label}; see it there.")
        return (f'<details class="stage unchanged" id="stage-{s.number}"><summary>{summary}</summary>'
                f"{body}</details>")
    parts = []
    source, reason = _stage_text(s)
    script = _script(s)
    if i > 0:
        prev = hm.stages[last_changed]
        parts.append(_inner(f"TVMScript diff against stage {prev.label}",
                            _diff(_script(prev), script, f"{prev.number}_{prev.name}", f"{s.number}_{s.name}"),
                            open_=True))
        prev_source, _ = _stage_text(prev)
        if source is not None and prev_source is not None:
            parts.append(_inner(f"Hybrid source diff against stage {prev.label}",
                                _diff(prev_source, source, f"{prev.number}_{prev.name}.py",
                                          f"{s.number}_{s.name}.py")))
    if source is not None:
        parts.append(_inner("Hybrid source (numpy)", _code(source), open_=(i == 0)))
    else:
        parts.append(note_html(f"No hybrid source: {reason}", "warning"))
    parts.append(_inner("TVMScript", _code(script)))
    return (f'<details class="stage changed" id="stage-{s.number}"><summary>{summary}</summary>'
            f'{"".join(parts)}</details>')


def report_html(hm: Any) -> str:
    """The report of ``hm`` as one HTML document (see the module docstring).

    Parameters
    ----------
    hm : HybridModule
        Built, loaded or resumed.

    Returns
    -------
    str
        A complete ``<!DOCTYPE html>`` document that loads nothing from elsewhere.
    """
    import tvm

    stages = list(hm.stages)
    n_changed = sum(1 for s in stages[1:] if s.changed)
    resumed = getattr(hm, "resumed_from", None)
    meta = [f"target {escape(hm.target)}", f"TVM {escape(tvm.__version__)}",
            f"{len(stages)} stages, {n_changed} passes changed the IR"]
    if hm.build_seconds is not None:
        meta.append(f"built in {escape(format_seconds(hm.build_seconds))}")
    if resumed:
        meta.append(f"resumed from {escape(resumed)}")
    meta.append(f"report by tvm_hybrid_nb {escape(__version__)}, {escape(time.strftime('%Y-%m-%d %H:%M'))}")
    if hm.last_compare is not None:
        compare = compare_html(hm.last_compare)
    else:
        compare = note_html("No comparison has been run (hm.compare() or python -m tvm_hybrid_nb emulate).")
    sections = []
    last_changed = 0
    for i, s in enumerate(stages):
        sections.append(_stage_section(hm, i, last_changed))
        if s.changed:
            last_changed = i
    title = f"{hm.func_name} — tvm_hybrid_nb report"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
            f"<title>{escape(title)}</title><style>{_CSS}{_STYLE_DEFS}</style></head><body>"
            f"<h1>Kernel <code>{escape(signature_text(hm))}</code></h1>"
            f'<div class="meta">{" &middot; ".join(meta)}</div>'
            f"<h2>Latest comparison</h2>{compare}"
            f"<h2>Passes</h2>{_pass_table(hm)}"
            f"<h2>Stages</h2>{''.join(sections)}"
            "</body></html>\n")


def write_report(hm: Any, path: str | os.PathLike) -> Path:
    """Write :func:`report_html` of ``hm`` to ``path`` (UTF-8) and return the path.

    Parameters
    ----------
    hm : HybridModule
    path : str or path
        The HTML file to write; its directory must exist.

    Returns
    -------
    pathlib.Path
    """
    path = Path(path)
    atomic_write_text(path, report_html(hm))  # a failed write leaves an earlier report intact
    return path


def _shorten(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
