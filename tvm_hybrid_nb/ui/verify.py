"""The table of a model verification (``%thn_verify``, ``thn.verify`` in a notebook): progress while
it runs, then one row per kernel with a button that opens that kernel's explorer under the table.

The report is duck-typed (``kernels`` with ``name``, ``outcome``, ``pass_name``, ``seconds``,
``reason``); opening a kernel is a callable handed in.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import ipywidgets as widgets

from .. import presentation as P
from .basics import error_text, html_view

VERIFY_EXPLORE_BUTTON = "Explore"


class VerifyView(widgets.VBox):
    """The table of a model verification: a progress bar while it runs, then one row per kernel
    (kernel, outcome, first divergent pass, time, reason) with a button opening its explorer.

    ``open_kernel(name)`` returns the explorer widget of kernel ``name``; it is shown under the table.

    Parameters
    ----------
    open_kernel : callable
        ``open_kernel(name)``: the explorer of kernel ``name`` (what it raises is shown as one line).

    Attributes
    ----------
    progress : ipywidgets.IntProgress
    status : ipywidgets.HTML
        Kernels done and time left while running; the summary after.
    table : ipywidgets.VBox
        The header row, then one row per kernel.
    buttons : dict
        Kernel name -> its ``Explore`` button.
    detail : ipywidgets.VBox
        The opened kernel's explorer.
    report : VerifyReport or None
        The report shown.
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
        """The ``progress`` callback of :func:`tvm_hybrid_nb.verification.verify`.

        Parameters
        ----------
        done, total : int
            Kernels finished, and in all.
        kernel : KernelResult or None
            The kernel just finished (its ``name`` and ``outcome``); None at the start.
        """
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
        """Fill the table from a finished VerifyReport.

        Parameters
        ----------
        report : VerifyReport
            Its ``kernels`` (name, outcome, pass_name, seconds, reason), read by
            :func:`tvm_hybrid_nb.verify_report.summary_text` too.
        """
        from ..verify_report import outcome_html, summary_text

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
        """Show kernel ``name``'s explorer under the table (errors as one line).

        Parameters
        ----------
        name : str
            A kernel of the report.
        """
        title = widgets.HTML(f"<b>Kernel <code>{P.escape(name)}</code></b> (building…)")
        self.detail.children = [title]
        try:
            view = self._open_kernel(name)
        except Exception as exc:  # a click must never leave a traceback in the kernel log
            self.detail.children = [html_view(P.note_html(f"{name}: {error_text(exc)}", "error"))]
            return
        title.value = f"<b>Kernel <code>{P.escape(name)}</code></b>"
        self.detail.children = [title, view]
