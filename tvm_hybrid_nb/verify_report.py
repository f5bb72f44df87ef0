"""HTML of a :class:`~tvm_hybrid_nb.verification.VerifyReport`: a table for notebooks, a self-contained file.

Strings in, HTML out (the style and the Content-Security-Policy of :mod:`tvm_hybrid_nb.html_report`);
every user-derived string is escaped.
"""
from __future__ import annotations

import time
from typing import Any

from ._version import __version__
from .html_report import _CSP, _CSS
from .presentation import escape, format_seconds

_OUTCOME_COLORS = {"ok": "#1a7f37", "refused": "#9a6700", "wrong": "#cf222e", "crashed": "#cf222e",
                   "timeout": "#cf222e"}

_VERIFY_CSS = """
table.verify { border-collapse: collapse; font-size: 12px; }
table.verify th, table.verify td { text-align: left; padding: 2px 8px; border-bottom: 1px solid #eee;
                                   vertical-align: top; }
table.verify td.reason { max-width: 60em; color: #444; }
span.outcome { font-weight: bold; }
"""


def outcome_html(outcome: str) -> str:
    color = _OUTCOME_COLORS.get(outcome, "#1a1a1a")
    return f'<span class="outcome" style="color:{color}">{escape(outcome)}</span>'


def summary_text(report: Any) -> str:
    """One line: verdict and the count of every outcome that occurred."""
    counts = ", ".join(f"{n} {o}" for o, n in report.counts.items() if n)
    return (f"{'OK' if report.ok else 'FAILED'}: {len(report.kernels)} kernels ({counts}), "
            f"{format_seconds(report.seconds)}")


def verify_table_html(report: Any) -> str:
    """The kernel table (kernel, outcome, first divergent pass, time, reason) as an HTML fragment."""
    rows = []
    for k in report.kernels:
        rows.append(f"<tr><td><code>{escape(k.name)}</code></td><td>{outcome_html(k.outcome)}</td>"
                    f"<td>{escape(k.pass_name or '')}</td><td>{escape(format_seconds(k.seconds))}</td>"
                    f"<td>{k.stages_checked}</td><td class=\"reason\">{escape(k.reason or '')}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("kernel", "outcome", "first divergent pass", "time",
                                               "stages checked", "reason"))
    return (f"<style>{_VERIFY_CSS}</style><div><b>{escape(summary_text(report))}</b></div>"
            f'<table class="verify"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>')


def verify_report_html(report: Any) -> str:
    """The whole report as one ``<!DOCTYPE html>`` document that loads nothing from elsewhere."""
    import tvm

    meta = [f"target {escape(report.target)}", f"schedule {escape(report.schedule)}",
            f"reference {escape(report.reference)}", f"stages {escape(report.stages)}",
            f"mode {escape(report.mode)}", f"{escape(report.runner)} runner, {report.workers} worker(s)",
            f"TVM {escape(tvm.__version__)}",
            f"report by tvm_hybrid_nb {escape(__version__)}, {escape(time.strftime('%Y-%m-%d %H:%M'))}"]
    passes = ("<h2>Custom passes</h2><ul>" + "".join(f"<li><code>{escape(p)}</code></li>" for p in report.passes)
              + "</ul>") if report.passes else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
            f"<title>Model verification — tvm_hybrid_nb report</title><style>{_CSS}</style></head><body>"
            f"<h1>Model verification</h1>"
            f'<div class="meta">{" &middot; ".join(meta)}</div>{passes}'
            f"<h2>Kernels</h2>{verify_table_html(report)}"
            "</body></html>\n")
