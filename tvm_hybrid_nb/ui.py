"""The pass explorer: ipywidgets 8 built from plain data and callables.

Small builder functions take strings, stages (duck-typed) and callables and return widgets; the
HTML inside comes from :mod:`tvm_hybrid_nb.presentation`.  This module imports neither TVM nor
IPython: the magic (:mod:`tvm_hybrid_nb.magic`) is the only IPython glue.

Layout of :func:`explorer`::

    header line (kernel, signature, target, passes that changed the IR, what "changed" means)
    [Find first divergent pass] [Cancel] progress ETA   divergence result
    ┌ filter passes ┐ [changed only]   │ panel of the selected pass:
    │ 0 input                          │   info line, Hybrid Python | TVMScript | Diff (from/to),
    │ 1 tirx.BindTarget  changed …     │   [Emulate & compare] [Cancel] progress ETA, result, heat map
    │ …                                │
    │ ✗ 23 tirx.VectorizeLoop — failed │   (a failed lowering: TVM's message and the IR before it)

Runs (compare, divergence search) happen on a worker thread, so the widgets stay live: the
progress bar moves, ``Cancel`` stops the run within a second (an exception raised in the worker
thread, :class:`RunCancelled`), and so does Kernel > Interrupt.  Every run catches its own errors
and shows them as one line, so a click never leaves a traceback and the kernel stays alive.
"""
from __future__ import annotations

import ctypes
import re
import signal
import threading
import time
from typing import Any, Callable, Sequence

import ipywidgets as widgets

from . import presentation as P
from .errors import EmulationError, HybridError

VIEW_SCRIPT = "TVMScript"
VIEW_HYBRID = "Hybrid Python"
VIEW_DIFF = "Diff"
#: The view switch of a pass panel, in order.
VIEWS = (VIEW_HYBRID, VIEW_SCRIPT, VIEW_DIFF)

COMPARE_BUTTON = "Emulate & compare"
DIVERGENCE_BUTTON = "Find first divergent pass"
CANCEL_BUTTON = "Cancel"
FILTER_PLACEHOLDER = "filter passes"
CANCELLED_TEXT = "cancelled"
SANITIZERS_RUNNING = "Running the sanitizers (data races, out-of-bounds accesses, reads of unwritten memory)…"


class RunCancelled(KeyboardInterrupt):
    """Raised inside a run's worker thread by ``Cancel`` or Kernel > Interrupt.

    A KeyboardInterrupt, so no ``except Exception`` on the way swallows it.
    """


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
    return widgets.Image(value=png, format="png", layout=widgets.Layout(max_width="520px"))


# ---------------------------------------------------------------------- runs on a worker thread
_ACTIVE_RUNS: set = set()
_SIGINT_INSTALLED = False


def _on_sigint(signum, frame) -> None:
    """Kernel > Interrupt while the kernel is idle: cancel every explorer run.

    ipykernel ignores SIGINT between messages and puts Python's default handler in place while it
    handles one (a cell), restoring ours afterwards; so this only sees interrupts meant for runs.
    """
    for run in list(_ACTIVE_RUNS):
        run.cancel()
    # Nothing else: an idle kernel ignores SIGINT, and raising here would hit its event loop.


def _install_sigint_handler() -> None:
    """Take SIGINT once the current message handler has returned (ipykernel restores its own
    handler when a message is done), from the kernel's event loop; nothing to do without one."""
    global _SIGINT_INSTALLED
    if _SIGINT_INSTALLED or threading.current_thread() is not threading.main_thread():
        return
    try:
        import asyncio

        loop = asyncio.get_running_loop()
    except RuntimeError:
        return

    def install() -> None:
        global _SIGINT_INSTALLED
        previous = signal.getsignal(signal.SIGINT)
        if previous is signal.SIG_IGN or previous is _on_sigint:
            signal.signal(signal.SIGINT, _on_sigint)
            _SIGINT_INSTALLED = True
        else:  # still inside a handler: try again shortly
            loop.call_later(0.1, install)

    loop.call_later(0.05, install)


class BackgroundRun:
    """``work(progress)`` on a daemon thread; ``progress(fraction)`` raises once cancelled.

    :meth:`cancel` makes the next progress report raise :class:`RunCancelled`; a run that reports
    nothing for ``GRACE_SECONDS`` gets it raised asynchronously in the worker thread, so it stops at
    its next Python bytecode.
    """

    def __init__(self, work: Callable[[Callable[[float], None]], Any], on_progress: Callable[[float], None],
                 on_done: Callable[[Any, BaseException | None], None]):
        self._work, self._on_progress, self._on_done = work, on_progress, on_done
        self.cancelled = threading.Event()
        self.thread = threading.Thread(target=self._main, name="thn-run", daemon=True)
        self._finished = threading.Event()
        self._shown = threading.Event()

    def start(self) -> "BackgroundRun":
        _ACTIVE_RUNS.add(self)
        _install_sigint_handler()
        self.thread.start()
        return self

    def progress(self, fraction: float) -> None:
        if self.cancelled.is_set():
            raise RunCancelled(CANCELLED_TEXT)
        self._on_progress(fraction)

    #: Seconds a run gets to stop at its next progress report before it is interrupted.
    GRACE_SECONDS = 0.3

    def cancel(self) -> None:
        """Stop the run (a no-op once it has finished): at its next progress report, or, when none
        comes within ``GRACE_SECONDS``, by an exception raised asynchronously in the worker thread."""
        if self._finished.is_set() or self.cancelled.is_set():
            return
        self.cancelled.set()
        timer = threading.Timer(self.GRACE_SECONDS, self._interrupt)
        timer.daemon = True
        timer.start()

    def _interrupt(self) -> None:
        ident = self.thread.ident
        if ident is not None and not self._finished.is_set():
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(RunCancelled))

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the run and its result display; True when both are done."""
        return self._shown.wait(timeout)

    def _main(self) -> None:
        outcome, error = None, None
        try:
            try:
                outcome = self._work(self.progress)
            except BaseException as exc:  # shown by on_done, never raised into the kernel
                error = exc
            if self.cancelled.is_set():
                outcome, error = None, RunCancelled(CANCELLED_TEXT)
            _ACTIVE_RUNS.discard(self)
            self._finished.set()  # from here on a cancel is a no-op: no async exception lands below
            self._on_done(outcome, error)
        except RunCancelled:  # an asynchronous cancel that landed just before _finished was set
            self._finished.set()
            self._on_done(None, RunCancelled(CANCELLED_TEXT))
        finally:
            _ACTIVE_RUNS.discard(self)
            self._finished.set()
            self._shown.set()


class RunControls(widgets.HBox):
    """A run button, a Cancel button, a progress bar and its ETA.

    ``start(work, show)`` runs ``work(progress)`` on a worker thread and calls ``show(outcome,
    error)`` when it ends; the button is disabled meanwhile and Cancel stops the run.
    """

    def __init__(self, description: str, icon: str, css_class: str, button_style: str = ""):
        self.button = widgets.Button(description=description, icon=icon, button_style=button_style,
                                     layout=widgets.Layout(width="auto", flex="0 0 auto"))
        self.button.add_class(css_class)
        self.cancel_button = widgets.Button(description=CANCEL_BUTTON, icon="stop", button_style="warning",
                                            layout=widgets.Layout(width="auto", flex="0 0 auto", display="none"))
        self.cancel_button.add_class("thn-cancel-button")
        self.bar = widgets.FloatProgress(value=0.0, min=0.0, max=1.0, bar_style="info",
                                         layout=widgets.Layout(width="200px", flex="0 1 200px", display="none"))
        self.bar.add_class("thn-progress")
        self.eta = widgets.Label(value="")
        self.eta.add_class("thn-eta")
        super().__init__([self.button, self.cancel_button, self.bar, self.eta],
                         layout=widgets.Layout(align_items="center"))
        self.run: BackgroundRun | None = None
        self.cancel_button.on_click(lambda _b: self.cancel())

    @property
    def running(self) -> bool:
        return self.run is not None and not self.run._finished.is_set()

    def cancel(self) -> None:
        if self.run is not None:
            self.run.cancel()

    def start(self, work: Callable[[Callable[[float], None]], Any],
              show: Callable[[Any, BaseException | None], None]) -> BackgroundRun | None:
        if self.running:
            return None
        started = time.monotonic()
        last = [0.0]
        self.button.disabled = True
        self.cancel_button.layout.display = None
        self.bar.layout.display = None
        self.bar.value, self.bar.bar_style, self.eta.value = 0.0, "info", "starting…"

        def on_progress(fraction: float) -> None:
            now = time.monotonic()
            if now - last[0] < 0.1 and fraction < 1.0:  # at most ten updates a second
                return
            last[0] = now
            fraction = min(max(float(fraction), 0.0), 1.0)
            self.bar.value = fraction
            elapsed = now - started
            if fraction > 0.02:
                self.eta.value = f"{fraction:.0%}, about {P.format_seconds(elapsed / fraction * (1 - fraction))} left"
            else:
                self.eta.value = f"{P.format_seconds(elapsed)} so far"

        def on_done(outcome: Any, error: BaseException | None) -> None:
            self.button.disabled = False
            self.cancel_button.layout.display = "none"
            if isinstance(error, KeyboardInterrupt):
                self.bar.bar_style, self.eta.value = "warning", CANCELLED_TEXT
            else:
                self.bar.layout.display = "none"
                self.eta.value = f"took {P.format_seconds(time.monotonic() - started)}"
            try:
                show(outcome, error)
            except Exception as exc:  # on the worker thread: say it here rather than in the kernel log
                self.eta.value = f"could not show the result: {error_text(exc)}"

        self.run = BackgroundRun(work, on_progress, on_done).start()
        return self.run


def _shown_error(exc: BaseException, locate: Callable[[BaseException], str] | None = None) -> str:
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


def _stage_number_options(stages: Sequence[Any]) -> list[tuple[str, int]]:
    return [(f"{s.number} {s.name}", s.index) for s in stages]


def diff_view(stages: Sequence[Any], after: Any) -> widgets.VBox:
    """Two stage pickers ("from", "to": default the stage before ``after`` → ``after``), a
    "hide attributes" option and the side-by-side diff of their TVMScript."""
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
    """Fast mode's plan for ``stage`` (what the Emulate button runs), as a folded note."""
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


def failure_panel(failure: Any, before: Any | None, stages: Sequence[Any], run_compare, function_name: str,
                  locate=None) -> widgets.VBox:
    """The panel of a failed pass: TVM's full message, then the stage before the pass."""
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


def divergence_panel(run: Callable[[Callable[[Any], None]], Any],
                     on_found: Callable[[Any], None] | None = None,
                     total: Callable[[], int] | None = None) -> widgets.VBox:
    """A ``Find first divergent pass`` button with progress, Cancel and its result.

    ``run(progress)`` returns a :class:`~tvm_hybrid_nb.bisect.Divergence` and calls
    ``progress(stage)`` before emulating each stage; ``total()`` is how many stages it may emulate.
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


# ---------------------------------------------------------------------- the pass list
def _pass_option(stage: Any, compare_results: dict) -> str:
    badges = []
    if stage.index > 0 and stage.changed:
        badges.append("changed")
    if not _cheap_emulatable(stage):
        badges.append("not emulatable")
    outcome = compare_results.get(stage.index)
    if outcome is not None:
        badges.append(outcome)
    # Badges before the time: a narrow list cuts the end of the line, and the bar shows the time too.
    head = f"{stage.number:>3} {stage.name}"
    return "  ".join([head] + ([" · ".join(badges)] if badges else []) + [P.format_seconds(stage.seconds)])


def _cheap_emulatable(stage: Any) -> bool:
    """Whether a stage can be emulated, known without generating code for unchanged stages."""
    owner = getattr(stage, "_owner", None)
    packed = getattr(owner, "packed_api_index", None)
    if packed is not None and stage.index >= packed:
        return False
    if stage.index > 0 and not stage.changed and owner is not None:
        return _cheap_emulatable(owner.stages[stage.index - 1])
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


class Explorer(widgets.VBox):
    """The pass explorer of one HybridModule (build it with :func:`explorer`).

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
                                                             if (s.index == 0 or s.changed) and _cheap_emulatable(s)))
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
        text = self.filter.value.strip().lower()
        shown = []
        for s in self.hm.stages:
            matches = not text or text in f"{s.number} {s.name}".lower()
            # "changed only" keeps the selected pass listed; the filter narrows strictly.
            if matches and (not self.changed_only.value or s.index in (0, keep) or s.changed):
                shown.append(s)
        return shown

    def _failed_label(self) -> str:
        number = self.failure.stage_number + getattr(self.hm, "first_index", 0)
        return f"✗ {number} {self.failure.step} — failed"

    def _refill(self, keep: int | None = None) -> None:
        if keep is None:
            keep = self.pass_list.value
        self.shown_stages = self._stages_to_show(keep)
        options = [(_pass_option(s, self._results), s.index) for s in self.shown_stages]
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
        """Per-entry styles: unchanged passes greyed, the pass time as a bar behind the entry."""
        longest = max([s.seconds for s in self.hm.stages] + [1e-9])
        rules = [f".{self._uid} .thn-pass-list select {{font-family:var(--jp-code-font-family,monospace);"
                 f"font-size:12px}}"]
        by_index = {s.index: s for s in self.hm.stages}
        for position, (_label, index) in enumerate(options, start=1):
            selector = f".{self._uid} .thn-pass-list option:nth-child({position})"
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
        rules.append(f".{self._uid} .thn-pass-list option:checked {{background:var(--jp-brand-color1,#1976d2) "
                     f"!important;color:#fff !important}}")
        return f"<style>{''.join(rules)}</style>{_KEYS_TO_LISTS}"

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
        options = [(_pass_option(self.hm.stages[v], self._results) if v != self.failed_index else label, v)
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
        """Select stage ``index`` in the list (clearing the filter and "changed only" if needed)."""
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
        """The (built) panel of stage ``index`` (``failed_index`` for the failed pass), selecting it."""
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
            _close_tree(panel)
        self._panels.clear()
        for child in list(self.children):
            _close_tree(child)
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


def _close_tree(widget: Any) -> None:
    """Close ``widget`` and everything below it (children, layouts, styles)."""
    seen: set[int] = set()
    stack = [widget]
    while stack:
        w = stack.pop()
        if id(w) in seen or not isinstance(w, widgets.Widget):
            continue
        seen.add(id(w))
        for name in w.keys:
            value = getattr(w, name, None)
            if isinstance(value, widgets.Widget):
                stack.append(value)
            elif isinstance(value, (list, tuple)):
                stack.extend(v for v in value if isinstance(v, widgets.Widget))
        # Widgets kept as plain attributes (a view not shown right now, panels built on demand).
        for extra in list(vars(w).values()):
            if isinstance(extra, widgets.Widget):
                stack.append(extra)
            elif isinstance(extra, dict):
                stack.extend(v for v in extra.values() if isinstance(v, widgets.Widget))
        w.close()


#: The value each symbolic size takes in the explorer's random inputs.
SYMBOLIC_SIZE = 16


def symbolic_sizes(hm: Any) -> dict[str, int]:
    """``SYMBOLIC_SIZE`` for every symbolic size of the kernel's parameters (none: empty)."""
    from .signature import dim_symbols

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
    """``"native"`` when the native kernel can run here (a CPU target that built), else ``"input"``."""
    if getattr(hm, "failure", None) is not None:
        return "input"
    kind = getattr(getattr(hm.target, "kind", None), "name", str(hm.target))
    return "native" if kind in ("llvm", "c") else "input"


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
    from .bisect import find_first_divergence

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

    return Explorer(hm, run_compare, run_divergence, locate=locate, reference_note=note,
                    run_sanitizers=run_sanitizers)


_LINE_IN_MESSAGE = re.compile(r"at line (\d+): (.+?): ([A-Z]\w*(?:Error|Exception))\b")


def shown_line(stage: Any, message: str) -> str | None:
    """``message`` with its hybrid line number replaced by that statement's line in the shown source
    (``stage.source``, the exact-mode script without progress hooks), or None when not found there."""
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
