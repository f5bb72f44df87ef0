"""Runs on a worker thread, and the controls that start and stop them.

:class:`BackgroundRun` calls ``work(progress)`` on a daemon thread so the widgets stay live;
``Cancel`` (or Kernel > Interrupt, through a SIGINT handler installed once from the kernel's event
loop) stops it within a second: at its next progress report, else by :class:`RunCancelled` raised
asynchronously in the worker thread.  :class:`RunControls` is the row that drives one: a run
button, ``Cancel``, a progress bar and its ETA.  Every run catches its own errors and hands them to
its ``show`` callback, so a click never leaves a traceback and the kernel stays alive.
"""
from __future__ import annotations

import ctypes
import signal
import threading
import time
from typing import Any, Callable

import ipywidgets as widgets

from .. import presentation as P
from .basics import error_text

CANCEL_BUTTON = "Cancel"
CANCELLED_TEXT = "cancelled"


class RunCancelled(KeyboardInterrupt):
    """Raised inside a run's worker thread by ``Cancel`` or Kernel > Interrupt.

    A KeyboardInterrupt, so no ``except Exception`` on the way swallows it.
    """


#: The runs started and not finished yet (Kernel > Interrupt cancels them all).
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

    Parameters
    ----------
    work : callable
        ``work(progress)``, run on the worker thread; its return value is the outcome.
    on_progress : callable
        Called with each fraction (0 to 1) that ``work`` reports, on the worker thread.
    on_done : callable
        ``on_done(outcome, error)`` when the run ends, on the worker thread: ``error`` is None, the
        exception ``work`` raised, or a :class:`RunCancelled` (then ``outcome`` is None).
    """

    def __init__(self, work: Callable[[Callable[[float], None]], Any], on_progress: Callable[[float], None],
                 on_done: Callable[[Any, BaseException | None], None]):
        self._work, self._on_progress, self._on_done = work, on_progress, on_done
        self.cancelled = threading.Event()
        self.thread = threading.Thread(target=self._main, name="thn-run", daemon=True)
        self._finished = threading.Event()
        self._shown = threading.Event()

    def start(self) -> "BackgroundRun":
        """Start the worker thread (and take Kernel > Interrupt, once); returns ``self``."""
        _ACTIVE_RUNS.add(self)
        _install_sigint_handler()
        self.thread.start()
        return self

    def progress(self, fraction: float) -> None:
        """Report ``fraction`` done; raises :class:`RunCancelled` once the run is cancelled."""
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

    Parameters
    ----------
    description : str
        The run button's text.
    icon : str
        The run button's Font Awesome icon.
    css_class : str
        A CSS class of the run button.
    button_style : str
        The run button's style ("primary", "" ...).

    Attributes
    ----------
    button, cancel_button : ipywidgets.Button
    bar : ipywidgets.FloatProgress
        Shown while a run goes on (and, orange, after a cancelled one).
    eta : ipywidgets.Label
        Progress and time left while running; the time taken, or "cancelled", after.
    run : BackgroundRun or None
        The latest run.
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
        """Whether the latest run has not finished yet."""
        return self.run is not None and not self.run._finished.is_set()

    def cancel(self) -> None:
        """Cancel the latest run (a no-op when none goes on)."""
        if self.run is not None:
            self.run.cancel()

    def start(self, work: Callable[[Callable[[float], None]], Any],
              show: Callable[[Any, BaseException | None], None]) -> BackgroundRun | None:
        """Run ``work(progress)`` on a worker thread, then ``show(outcome, error)``.

        Parameters
        ----------
        work : callable
            ``work(progress)``; ``progress(fraction)`` moves the bar and raises once cancelled.
        show : callable
            ``show(outcome, error)`` on the worker thread when the run ends; what it raises is shown
            as one line in :attr:`eta`.

        Returns
        -------
        BackgroundRun or None
            The run; None when one is still going on (nothing is started).
        """
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
