"""The pass explorer and the verification table: ipywidgets 8 built from plain data and callables.

Small builder functions take strings, stages (duck-typed) and callables and return widgets; the
HTML inside comes from :mod:`tvm_hybrid_nb.presentation`.  This package imports neither TVM nor
IPython: the magic (:mod:`tvm_hybrid_nb.magic`) is the only IPython glue.  One module per concern,
each importing only those above it in this list:

``basics``
    one-line errors, the leaf widgets (HTML, heat map image), closing a widget tree
``runs``
    runs on a worker thread (:class:`BackgroundRun`), Cancel and Kernel > Interrupt, the
    :class:`RunControls` row (button, Cancel, progress, ETA)
``run_panels``
    ``Emulate & compare`` (then the sanitizers) and ``Find first divergent pass`` with their results
``stage_panels``
    the panel of one stage (info, Hybrid Python with its plan | TVMScript | Diff, compare) and of a
    failed pass
``pass_list``
    the pass list as data: which stages are listed, their labels and per-entry CSS
``actions``
    what the buttons do with one HybridModule (reference, inputs, runs, error lines)
``explorer``
    :class:`Explorer`, the assembly, and :func:`explorer`, which builds it for a module
``verify``
    :class:`VerifyView`, the table of a model verification

Runs (compare, divergence search) happen on a worker thread, so the widgets stay live: the
progress bar moves, ``Cancel`` stops the run within a second (an exception raised in the worker
thread, :class:`RunCancelled`), and so does Kernel > Interrupt.  Every run catches its own errors
and shows them as one line, so a click never leaves a traceback and the kernel stays alive.
"""
from __future__ import annotations

from .actions import SYMBOLIC_SIZE, ExplorerActions, default_reference, module_actions, shown_line, symbolic_sizes
from .basics import error_text, heatmap_image, html_view
from .explorer import FILTER_PLACEHOLDER, Explorer, explorer
from .run_panels import COMPARE_BUTTON, DIVERGENCE_BUTTON, SANITIZERS_RUNNING, compare_panel, divergence_panel
from .runs import CANCEL_BUTTON, CANCELLED_TEXT, BackgroundRun, RunCancelled, RunControls
from .stage_panels import VIEW_DIFF, VIEW_HYBRID, VIEW_SCRIPT, VIEWS, diff_view, failure_panel, plan_note, stage_panel
from .verify import VERIFY_EXPLORE_BUTTON, VerifyView

__all__ = [
    "BackgroundRun", "CANCELLED_TEXT", "CANCEL_BUTTON", "COMPARE_BUTTON", "DIVERGENCE_BUTTON", "Explorer",
    "ExplorerActions", "FILTER_PLACEHOLDER", "RunCancelled", "RunControls", "SANITIZERS_RUNNING",
    "SYMBOLIC_SIZE", "VERIFY_EXPLORE_BUTTON", "VIEWS", "VIEW_DIFF", "VIEW_HYBRID", "VIEW_SCRIPT", "VerifyView",
    "compare_panel", "default_reference", "diff_view", "divergence_panel", "error_text", "explorer",
    "failure_panel", "heatmap_image", "html_view", "module_actions", "plan_note", "shown_line", "stage_panel",
    "symbolic_sizes",
]
