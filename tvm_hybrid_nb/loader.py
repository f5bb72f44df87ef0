"""Turn hybrid source into a callable: a fresh namespace, and ``linecache`` so tracebacks show its lines;
and the cyclic garbage collector held off while a script is generated and compiled."""
from __future__ import annotations

import contextlib
import gc
import itertools
import linecache
import threading
from typing import Callable

_counter = itertools.count()
_gc_lock = threading.Lock()
_gc_pauses = 0  # how many generations or compilations are under way
_gc_was_enabled = True


@contextlib.contextmanager
def cyclic_gc_paused():
    """Hold off Python's cyclic garbage collector.  Generating and compiling a large stage's script
    makes millions of ``ast`` nodes, none of them cyclic garbage, and every collection the
    allocations trigger walks them all again: 40 % of the time of a stage that inlines large
    expressions.  Nested and concurrent pauses are counted; the last one ends it."""
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


def load_kernel(source: str, function_name: str, label: str = "kernel", namespace: dict | None = None) -> Callable:
    """Execute ``source`` in a fresh namespace and return the function ``function_name`` it defines.

    The source is registered with :mod:`linecache` under a pseudo file name
    (``<hybrid:LABEL#N>``), so tracebacks and :func:`inspect.getsource` show the hybrid lines.
    """
    filename = f"<hybrid:{label}#{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    with cyclic_gc_paused():
        code = compile(source, filename, "exec")
    namespace = dict(namespace or {})
    namespace["__name__"] = f"hybrid_{function_name}"
    exec(code, namespace)
    return namespace[function_name]


def hybrid_line(exc: BaseException, function_name: str | None = None) -> tuple[int, str] | None:
    """The innermost (line number, text) of hybrid source in ``exc``'s traceback, if any.

    With ``function_name``, the line inside that function is preferred over lines of the helpers
    it called, so the message points at the kernel statement that failed.
    """
    tb = exc.__traceback__
    found = in_function = None
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_filename.startswith("<hybrid:"):
            found = (tb.tb_lineno, linecache.getline(code.co_filename, tb.tb_lineno).strip())
            if code.co_name == function_name:
                in_function = found
        tb = tb.tb_next
    return in_function or found
