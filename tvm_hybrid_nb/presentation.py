"""Presentation: plain strings and numbers in, HTML (or PNG bytes) out.

Everything here is free of IPython, ipywidgets and TVM node types, so the same HTML serves the
widgets (:mod:`tvm_hybrid_nb.ui`), ``HybridModule._repr_html_`` (a notebook without widget state,
an exported notebook) and reports.  Highlighting uses pygments' :class:`~pygments.formatters.HtmlFormatter`
with inline styles (``noclasses=True``): the HTML needs no stylesheet, so it renders the same in
JupyterLab, in nbconvert output and in a saved notebook.  Diffs come from :mod:`difflib`.

A :class:`~tvm_hybrid_nb.module.HybridModule` is taken duck-typed (``stages``, ``name``, ``target``,
``params``); a stage needs ``index``, ``name``, ``short_name``, ``label``, ``seconds``, ``changed``,
``emulatable``, ``reason``, ``source`` and ``script``.
"""
from __future__ import annotations

import difflib
import re
import html
import io
from typing import Any, Iterable, Sequence

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer, PythonLexer

#: pygments style of highlighted blocks with inline styles (light), and the two styles of themed
#: blocks in the explorer (light, and dark when JupyterLab's theme is dark).
PYGMENTS_STYLE = "default"
PYGMENTS_DARK_STYLE = "github-dark"

# Colours come from JupyterLab's theme variables where it has them; the fallbacks are the light
# theme's.  The --thn-* variables are set for dark themes by THEME_CSS (all contrasts >= 4.5:1).
_BLOCK_STYLE = ("background:var(--jp-cell-editor-background,#f8f8f8);color:var(--jp-content-font-color1,#1a1a1a);"
                "border:1px solid var(--jp-border-color2,#ddd);border-radius:3px;"
                "padding:4px 8px;margin:2px 0;overflow:auto;max-height:{max_height};"
                "font-size:12px;line-height:1.35;text-align:left")
_MUTED = "color:var(--jp-content-font-color2,#595959)"
_OK_COLOR = "var(--thn-ok,#1a7f37)"
_BAD_COLOR = "var(--thn-bad,#cf222e)"
_WARN_COLOR = "var(--thn-warning,#8a5c00)"


def _theme_css() -> str:
    def scoped(style: str, scope: str) -> list[str]:
        defs = HtmlFormatter(style=style).get_style_defs(scope)
        return [ln for ln in defs.splitlines() if ln.startswith(scope) and "{ background" not in ln]

    dark_scope = 'body[data-jp-theme-light="false"] .thn-hl'
    rules = scoped(PYGMENTS_STYLE, ".thn-hl") + scoped(PYGMENTS_DARK_STYLE, dark_scope)
    rules += [".thn-hl pre {margin:0;background:transparent;color:inherit}",
              ".thn-hl span.linenos {color:var(--jp-content-font-color2,#6e6e6e);padding-right:10px;"
              "user-select:none}",
              'body[data-jp-theme-light="false"] {--thn-ok:#56d364;--thn-bad:#ff7b72;--thn-warning:#e3b341}',
              # The pass's panel takes the width left of the list; long lines scroll inside it.
              ".thn-detail > *, .thn-detail .widget-html, .thn-detail .widget-html-content "
              "{max-width:100%;min-width:0}",
              ".thn-detail .widget-html-content {white-space:normal;overflow-wrap:anywhere}"]
    return "<style>" + "\n".join(rules) + "</style>"


#: The explorer's stylesheet: pygments token colours for light and dark JupyterLab themes and the
#: dark values of the status colours.
THEME_CSS = _theme_css()


def escape(text: Any) -> str:
    """HTML-escape ``text`` (any object, through ``str``)."""
    return html.escape(str(text), quote=True)


def _formatter() -> HtmlFormatter:
    return HtmlFormatter(noclasses=True, style=PYGMENTS_STYLE, nowrap=False, cssclass="thn-code")


def _wrap_block(inner: str, kind: str, max_height: str) -> str:
    return (f'<div class="thn-{kind}" style="{_BLOCK_STYLE.format(max_height=max_height)}">'
            f"{inner}</div>")


def _themed_formatter(**options) -> HtmlFormatter:
    return HtmlFormatter(cssclass="thn-hl", **options)


def highlight_python(code: str, max_height: str = "32em", themed: bool = False) -> str:
    """Python source as self-contained highlighted HTML (inline styles, scrolls past ``max_height``).

    Parameters
    ----------
    code : str
        The source text (hybrid Python or TVMScript, which is Python syntax).
    max_height : str
        CSS height after which the block scrolls.

    Returns
    -------
    str
        An HTML ``<div>`` holding pygments' ``<pre>``.
    """
    formatter = _themed_formatter() if themed else _formatter()
    return _wrap_block(highlight(code, PythonLexer(), formatter), "python", max_height)


def unified_diff(before: str, after: str, before_name: str = "before", after_name: str = "after",
                 context: int = 3) -> str:
    """The unified diff of two texts (empty when they are equal).

    Parameters
    ----------
    before, after : str
        The texts to compare, line by line.
    before_name, after_name : str
        Names for the ``---`` and ``+++`` header lines.
    context : int
        Lines of context around each change.

    Returns
    -------
    str
    """
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile=before_name, tofile=after_name, n=context)
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n")
    return "".join(out)


def highlight_diff(diff_text: str, max_height: str = "32em",
                   empty_message: str = "No change: the IR is identical to the previous stage.") -> str:
    """A unified diff as highlighted HTML; ``empty_message`` when there is no difference."""
    if not diff_text.strip():
        return f'<div class="thn-diff-empty" style="{_MUTED};padding:4px">{escape(empty_message)}</div>'
    return _wrap_block(highlight(diff_text, DiffLexer(), _formatter()), "diff", max_height)


def diff_html(before: str, after: str, before_name: str, after_name: str, max_height: str = "32em") -> str:
    """Highlighted unified diff between two texts (see :func:`unified_diff`)."""
    return highlight_diff(unified_diff(before, after, before_name, after_name), max_height=max_height)


def note_html(text: str, kind: str = "info") -> str:
    """A one-paragraph note; ``kind`` is ``"info"``, ``"warning"`` or ``"error"``."""
    colors = {"info": "var(--jp-content-font-color2,#595959)", "warning": _WARN_COLOR, "error": _BAD_COLOR}
    color = colors.get(kind, colors["info"])
    return f'<div class="thn-note thn-{kind}" style="color:{color};padding:2px 0">{escape(text)}</div>'


def plan_html(summary: str, outline: Sequence[str]) -> str:
    """Fast mode's plan beside the hybrid source: the one-line ``summary`` (which loops run as
    arrays, which stay serial and why) opening onto the ``outline``, one loop a line."""
    return (f'<details class="thn-plan"><summary style="cursor:pointer">{escape(summary)}</summary>'
            f'<pre style="margin:2px 0 4px 1em;white-space:pre-wrap;'
            f'font-family:var(--jp-code-font-family,monospace)">{escape(chr(10).join(outline))}</pre></details>')


def format_seconds(seconds: float | None) -> str:
    """A duration for people: ``0.12 ms``, ``3.4 ms``, ``1.25 s``."""
    if seconds is None:
        return "?"
    if seconds < 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    if seconds < 1.0:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def signature_text(hm: Any) -> str:
    """``name(A: float32[16, 16], ...)``, or ``name(?)`` when the input stage cannot be emulated."""
    try:
        params = hm.params
        return f"{hm.name}({', '.join(p.describe() for p in params)})"
    except Exception:  # parameters come from the code generator; without it the signature is unknown
        return f"{hm.name}(?)"


def pass_table_html(stages: Sequence[Any], only_changed: bool = False) -> str:
    """A table of passes: index, pass name, changed, time, emulatable (or why not).

    Parameters
    ----------
    stages : sequence of Stage
        Duck-typed stages (see the module docstring).
    only_changed : bool
        Leave out passes that did not change the IR.
    """
    head = ("<tr>" + "".join(f'<th style="text-align:left;padding:1px 8px">{h}</th>'
                             for h in ("#", "pass", "changed", "time", "emulation")) + "</tr>")
    rows = []
    for s in stages:
        if only_changed and not s.changed:
            continue
        style = "" if s.changed else _MUTED
        if s.emulatable:
            emu = f'<span style="color:{_OK_COLOR}">yes</span>'
        else:
            emu = f'<span title="{escape(s.reason)}">no: {escape(_shorten(s.reason or "", 90))}</span>'
        cells = (str(s.index), escape(s.name), "yes" if s.changed else "", format_seconds(s.seconds), emu)
        rows.append(f'<tr class="thn-pass-row" style="{style}">'
                    + "".join(f'<td style="text-align:left;padding:1px 8px">{c}</td>' for c in cells)
                    + "</tr>")
    return (f'<table class="thn-pass-table" style="border-collapse:collapse;font-size:12px">'
            f"<thead>{head}</thead><tbody>{''.join(rows)}</tbody></table>")


def module_header_html(hm: Any) -> str:
    """One line naming the kernel, its signature, target and how many passes changed the IR."""
    stages = list(hm.stages)
    changed = sum(1 for s in stages[1:] if s.changed)
    target = getattr(hm.target, "kind", None)
    target_text = getattr(target, "name", None) or str(hm.target)
    build = getattr(hm, "build_seconds", None)
    built = f", built in {format_seconds(build)}" if build is not None else ""
    return (f'<div class="thn-header" style="padding:2px 0"><b>HybridModule</b> '
            f"<code>{escape(signature_text(hm))}</code> &mdash; target {escape(target_text)}, "
            f"{len(stages)} stages, {changed} passes changed the IR{built}</div>")


def stage_source_html(stage: Any, max_height: str = "32em") -> str:
    """The hybrid Python of ``stage`` highlighted, or why it has none followed by its TVMScript."""
    if stage.emulatable:
        return highlight_python(stage.source, max_height=max_height)
    return (note_html(f"No hybrid source for stage {stage.label}: {stage.reason}", "warning")
            + highlight_python(stage.script, max_height=max_height))


def module_html(hm: Any) -> str:
    """What a HybridModule shows without widgets: header, highlighted source, pass table.

    Parameters
    ----------
    hm : HybridModule
        Taken duck-typed: ``name``, ``target``, ``stages``, ``params``, ``build_seconds``.

    Returns
    -------
    str
        Self-contained HTML (inline styles only).
    """
    stages = list(hm.stages)
    changed = sum(1 for s in stages[1:] if s.changed)
    return (f'<div class="thn-module">{module_header_html(hm)}'
            f'<div style="padding:2px 0"><b>Source</b> (hybrid Python of the input stage)</div>'
            f"{stage_source_html(stages[0], max_height='24em')}"
            f'<details class="thn-passes"><summary>{len(stages) - 1} passes, {changed} changed the IR'
            f"</summary>{pass_table_html(stages)}</details></div>")


def module_text(hm: Any) -> str:
    """Plain-text summary: ``repr(hm)`` and the passes that changed the IR."""
    lines = [repr(hm)]
    for s in list(hm.stages)[1:]:
        if s.changed:
            emu = "" if s.emulatable else "  (not emulatable)"
            lines.append(f"  {s.label:<32} {format_seconds(s.seconds):>10}{emu}")
    return "\n".join(lines)


# ---------------------------------------------------------------------- comparison results
def compare_html(result: Any) -> str:
    """A CompareResult as HTML: a ``MATCH``/``MISMATCH`` line, then one line per output.

    Each output line gives max abs / rel error, the mismatch count (and first mismatch) and
    the tolerances; the head line gives both run times.
    """
    ok = bool(result.ok)
    verdict = "MATCH" if ok else "MISMATCH"
    color = _OK_COLOR if ok else _BAD_COLOR
    head = (f'<div class="thn-verdict"><b style="color:{color}">{verdict}</b>: stage '
            f"{escape(result.stage)} emulated ({escape(result.mode)}) vs {escape(result.reference)} "
            f"&mdash; emulation {format_seconds(result.emulate_seconds)}, "
            f"reference {format_seconds(result.reference_seconds)}</div>")
    rows = []
    for o in result.outputs:
        total = 1
        for d in o.shape:
            total *= int(d)
        first = f", first at {o.first_mismatch}" if o.first_mismatch is not None else ""
        worst = getattr(o, "worst", None)
        if worst is not None:
            first += f"; worst at {worst[0]}: emulated {worst[1]!r}, reference {worst[2]!r}"
        rows.append(f'<li class="thn-output">{escape(o.name)} ({escape(o.dtype)}{list(o.shape)}): '
                    f"max abs err {o.max_abs_error:.3g}, max rel err {o.max_rel_error:.3g}, "
                    f"{o.mismatches}/{total} mismatches{escape(first)} "
                    f'<span style="{_MUTED}">(rtol {o.rtol:g}, atol {o.atol:g})</span></li>')
    error = getattr(result, "error", None)
    failed = (note_html(f"The emulation failed part-way; compared what it wrote before failing: {error}", "error")
              if error else "")
    exact_reason = getattr(result, "exact_reason", "")
    if exact_reason:  # not the plan shown above the source (that one is for large sizes)
        failed = note_html(f"{result.mode} mode ran the exact plan: {exact_reason}") + failed
    return f'<div class="thn-compare">{head}{failed}<ul style="margin:2px 0">{"".join(rows)}</ul></div>'


def _as_2d(mask):
    import numpy as np

    arr = np.asarray(mask)
    if arr.ndim == 0:
        return arr.reshape(1, 1)
    if arr.ndim == 1:
        return arr.reshape(1, -1)
    if arr.ndim > 2:
        return arr.reshape(-1, arr.shape[-1])
    return arr


def heatmap_png(values: Any, title: str = "", dpi: int = 90, outline: Any = None) -> bytes:
    """A small heat map (PNG bytes, transparent background) of a mismatch mask or of error sizes.

    Parameters
    ----------
    values : array_like
        A boolean mismatch mask, or error magnitudes ``|emulated − reference|`` (with ``outline``:
        drawn on a log colour scale, exact elements left blank).  More than two dimensions are folded
        into rows (all leading axes), one dimension becomes one row.
    title : str
        Figure title.
    dpi : int
        Resolution.
    outline : array_like of bool, optional
        The mismatches, outlined in black over the error sizes.

    Returns
    -------
    bytes
        A PNG image.  Drawn with matplotlib's Agg canvas directly: pyplot's global state is untouched.
    """
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    data = _as_2d(values).astype(np.float64)
    rows, cols = data.shape
    width = min(6.0, max(3.5, cols / 8.0))
    height = min(4.5, max(2.2, rows / 8.0 + 1.0))
    fig = Figure(figsize=(width, height), dpi=dpi)
    fig.patch.set_alpha(0.0)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.patch.set_alpha(0.0)
    if outline is not None:
        finite = data[np.isfinite(data) & (data > 0)]
        low = float(finite.min()) if finite.size else 1e-12
        high = float(finite.max()) if finite.size else 1.0
        shown = np.ma.masked_where(~(data > 0), np.where(np.isfinite(data), data, high))
        image = ax.imshow(shown, cmap="Reds", aspect="auto", interpolation="nearest",
                          norm=LogNorm(vmin=low, vmax=max(high, low * 10)))
        mask = _as_2d(outline).astype(np.float64)
        if min(mask.shape) >= 2 and mask.any():
            ax.contour(mask, levels=[0.5], colors="black", linewidths=0.9)
        else:
            for r, c in np.argwhere(mask > 0)[:2000]:
                ax.add_patch(_cell_outline(r, c))
    else:
        image = ax.imshow(data, cmap="Reds", aspect="auto", interpolation="nearest", vmin=0.0,
                          vmax=max(1.0, float(np.nanmax(data)) if data.size else 1.0))
    grey = "#808080"  # readable on light and dark notebook themes
    ax.set_xlabel("last axis", color=grey)
    ax.set_ylabel("other axes" if np.ndim(values) > 2 else ("axis 0" if np.ndim(values) == 2 else ""), color=grey)
    ax.tick_params(colors=grey)
    if title:
        ax.set_title(title, fontsize=9, color=grey)
    bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    bar.ax.tick_params(colors=grey, which="both")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", transparent=True)
    return buf.getvalue()


def _cell_outline(row: int, col: int):
    from matplotlib.patches import Rectangle

    return Rectangle((col - 0.5, row - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=0.9)


def divergence_html(found: Any) -> str:
    """The result of a divergence search (:class:`tvm_hybrid_nb.bisect.Divergence`) as HTML."""
    if found.stage is None:
        skipped = f" ({len(found.skipped)} stages could not be emulated and were skipped)" if found.skipped else ""
        return (f'<div class="thn-divergence"><b style="color:{_OK_COLOR}">No divergent pass</b>: '
                f"all {len(found.checked)} emulated stages MATCH {escape(found.reference)}"
                f"{escape(found.repeated_note)}{skipped}.</div>")
    where = ("the input stage already differs" if found.stage.index == 0
             else f"first divergent pass: <b>{escape(found.stage.label)}</b> ({escape(found.stage.name)})")
    prev = (f"; the stage before it ({escape(found.previous.label)}) matches" if found.previous is not None else "")
    detail = (compare_html(found.result) if found.result is not None
              else note_html(f"its emulation failed: {found.error}", "error"))
    return (f'<div class="thn-divergence"><b style="color:{_BAD_COLOR}">Divergence</b>: {where}{prev}.'
            f"</div>{detail}")


def _shorten(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def lines_html(lines: Iterable[str]) -> str:
    """Escaped lines joined with ``<br>``."""
    return "<br>".join(escape(x) for x in lines)


# ---------------------------------------------------------------------- explorer views
#: What ``changed`` means everywhere in the explorer (said in its header).
CHANGED_MEANING = ("changed = the printed TVMScript differs from the stage before "
                   "(what the Diff shows); unchanged passes are greyed")


def kernel_span(source: str, function_name: str) -> tuple[int, int] | None:
    """The 1-based first and last line of ``def function_name(`` and its body in ``source``."""
    lines = source.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(f"def {function_name}(")), None)
    if start is None:
        return None
    end = start
    for i in range(start + 1, len(lines)):
        if lines[i].strip() and not lines[i][0].isspace():
            break
        if lines[i].strip():
            end = i
    return start + 1, end + 1


def _numbered(code: str, first_line: int, max_height: str) -> str:
    formatter = _themed_formatter(linenos="inline", linenostart=first_line)
    return _wrap_block(highlight(code, PythonLexer(), formatter), "python", max_height)


def kernel_first_html(source: str, function_name: str, max_height: str = "32em") -> str:
    """The hybrid script with the kernel first and the runtime helpers folded.

    Lines keep their numbers in the file (``get_source()``), so an error's line number is the one
    shown.  The helpers (everything outside ``def function_name``) follow in a collapsed
    ``helpers (N lines)`` disclosure.
    """
    span = kernel_span(source, function_name)
    lines = source.splitlines()
    if span is None:
        return _numbered(source, 1, max_height)
    start, end = span
    kernel = "\n".join(lines[start - 1:end]) + "\n"
    before = "\n".join(lines[:start - 1]).rstrip("\n")
    after = "\n".join(lines[end:]).strip("\n")
    helper_lines = sum(1 for ln in lines[:start - 1] + lines[end:] if ln.strip())
    folded = ""
    if before.strip():
        folded += _numbered(before + "\n", 1, "24em")
    if after.strip():
        blank = next(i for i, ln in enumerate(lines[end:]) if ln.strip())
        folded += _numbered(after + "\n", end + 1 + blank, "24em")
    return (f'<div class="thn-kernel-first">{_numbered(kernel, start, max_height)}'
            f'<details class="thn-helpers"><summary style="cursor:pointer">helpers ({helper_lines} lines)'
            f"</summary>{folded}</details></div>")


_ATTRIBUTE_LINE = re.compile(r"^\s*(T\.func_attr\(|I\.module_attrs\(|# from tvm\.script import)")


def hide_attributes(text: str) -> str:
    """``text`` without ``T.func_attr(...)`` / module attribute lines (target noise)."""
    return "\n".join(ln for ln in text.splitlines() if not _ATTRIBUTE_LINE.match(ln))


_SIDE_BY_SIDE_CSS = """<style>
.thn-sbs table.diff {border-collapse:collapse;font-family:var(--jp-code-font-family,monospace);font-size:12px;
  width:100%;table-layout:fixed;color:var(--jp-content-font-color1,#1a1a1a)}
.thn-sbs table.diff td {padding:0 4px;white-space:pre-wrap;overflow-wrap:anywhere;vertical-align:top;
  text-align:left;line-height:1.35}
.thn-sbs table.diff td.diff_header {color:var(--jp-content-font-color2,#555);text-align:right}
.thn-sbs table.diff th {text-align:left;font-weight:bold;padding:2px 4px}
.thn-sbs td.diff_next {display:none}
.thn-sbs .diff_add {background:rgba(46,160,67,.30)}
.thn-sbs .diff_chg {background:rgba(210,153,34,.40)}
.thn-sbs .diff_sub {background:rgba(248,81,73,.30)}
</style>"""


def side_by_side_diff_html(before: str, after: str, before_name: str, after_name: str,
                           attributes: bool = True, context: int = 3, max_height: str = "32em",
                           empty_message: str = "No change: the printed IR of both stages is identical.") -> str:
    """Two texts side by side with intra-line highlighting (:class:`difflib.HtmlDiff`).

    ``attributes=False`` drops ``T.func_attr`` and module attribute lines first.
    """
    if not attributes:
        before, after = hide_attributes(before), hide_attributes(after)
    if before == after:
        return f'<div class="thn-diff-empty" style="padding:4px">{escape(empty_message)}</div>'
    table = difflib.HtmlDiff(tabsize=4).make_table(before.splitlines(), after.splitlines(), escape(before_name),
                                                   escape(after_name), context=True, numlines=context)
    # Two columns of text, each half the width, with their line numbers (no navigation links).
    table = re.sub(r'<t[dh] class="diff_next"[^>]*>.*?</t[dh]>', "", table)
    table = re.sub(r"<colgroup></colgroup>\s*", "", table).replace(' nowrap="nowrap"', "")
    table = table.replace("<thead>", '<colgroup><col style="width:3em"><col><col style="width:3em"><col>'
                                     "</colgroup><thead>", 1)
    return (f'{_SIDE_BY_SIDE_CSS}<div class="thn-sbs thn-diff" style="overflow:auto;max-height:{max_height};'
            f'border:1px solid var(--jp-border-color1,#ddd)">{table}</div>')


def failure_html(failure: Any, before_label: str | None) -> str:
    """A failed lowering: the one-line summary, then TVM's full message (monospace, scrollable)."""
    before = (f" The IR before the pass is stage {escape(before_label)}: its TVMScript and hybrid Python are "
              f"below." if before_label else "")
    return (f'<div class="thn-failure"><div style="color:{_BAD_COLOR};font-weight:bold">'
            f"✗ {escape(failure.summary)}</div>"
            f'<div style="padding:2px 0">TVM\'s message in full:{before}</div>'
            f'<pre class="thn-failure-message" style="white-space:pre;overflow:auto;max-height:24em;'
            f'font-family:var(--jp-code-font-family,monospace);font-size:12px;padding:4px 8px;margin:2px 0;'
            f'border:1px solid {_BAD_COLOR};border-radius:3px">{escape(failure.message)}</pre></div>')


def tvm_error_html(summary: str, message: str) -> str:
    """A TVM error: its one-line summary, and TVM's rendered message (the IR with ``^^^`` marks) folded."""
    return (f'<div class="thn-tvm-error"><div style="color:{_BAD_COLOR}">{escape(summary)}</div>'
            f'<details class="thn-tvm-message"><summary style="cursor:pointer">TVM\'s message with the IR '
            f"(^^^ marks the problem)</summary>"
            f'<pre style="white-space:pre;overflow:auto;max-height:32em;font-size:12px;'
            f'font-family:var(--jp-code-font-family,monospace)">{escape(message)}</pre></details></div>')
