"""Turn hybrid source into a callable: a fresh namespace, and ``linecache`` so tracebacks show its lines."""
from __future__ import annotations

import itertools
import linecache
from typing import Callable

_counter = itertools.count()


def load_kernel(source: str, function_name: str, label: str = "kernel") -> Callable:
    """Execute ``source`` in a fresh namespace and return the function ``function_name`` it defines.

    The source is registered with :mod:`linecache` under a pseudo file name
    (``<hybrid:LABEL#N>``), so tracebacks and :func:`inspect.getsource` show the hybrid lines.
    """
    filename = f"<hybrid:{label}#{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    code = compile(source, filename, "exec")
    namespace: dict = {"__name__": f"hybrid_{function_name}"}
    exec(code, namespace)
    return namespace[function_name]


def hybrid_line(exc: BaseException) -> tuple[int, str] | None:
    """The innermost (line number, text) of hybrid source in ``exc``'s traceback, if any."""
    tb = exc.__traceback__
    found = None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith("<hybrid:"):
            lineno = tb.tb_lineno
            found = (lineno, linecache.getline(filename, lineno).strip())
        tb = tb.tb_next
    return found
