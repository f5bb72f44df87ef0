"""The cost of TVMScript's decorators when TVM parses many functions at once.

TVM's ``@T.prim_func`` (and ``@I.ir_module``, ``@R.function``) calls ``inspect.stack()`` on every
use.  For each frame whose file is not on disk (``<frozen importlib._bootstrap>`` under every
import, ``<ast>``) ``inspect.getmodule`` scans all of ``sys.modules`` and finds nothing, and CPython
remembers only what it finds: with TVM loaded (about 1,200 modules) each such frame costs a few
milliseconds.  Importing ``tvm.s_tir.tensor_intrin`` (248 functions; dlight's GPU ``Matmul`` rule
imports it on first use) took 28-36 s on this project's machine, 6.7 s with the misses remembered;
collecting the test suite, 34 s and 12 s.

Owns :func:`remembered_module_misses` and :func:`import_tensor_intrinsics`.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from typing import Iterator


@contextlib.contextmanager
def remembered_module_misses() -> Iterator[None]:
    """Within the block, ``inspect.getmodule`` remembers the pseudo-file names (``<...>``, never a
    module's file) for which it found no module and answers None for them at once, as its scan would.
    Restores the original on exit; nested uses share the outer one."""
    original = inspect.getmodule
    if getattr(original, "_remembers_misses", False):
        yield
        return
    misses: set[str] = set()

    @functools.wraps(original)
    def getmodule(obj, _filename=None):
        if _filename is not None and _filename in misses:
            return None
        found = original(obj, _filename)
        if found is None and isinstance(_filename, str) and _filename.startswith("<"):
            misses.add(_filename)
        return found

    getmodule._remembers_misses = True  # type: ignore[attr-defined]
    inspect.getmodule = getmodule
    try:
        yield
    finally:
        inspect.getmodule = original


def import_tensor_intrinsics() -> None:
    """Import ``tvm.s_tir.tensor_intrin`` (TVM registers its tensor-core intrinsics, which dlight's GPU
    ``Matmul`` rule imports on first use) with :func:`remembered_module_misses`; nothing if imported."""
    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    with remembered_module_misses():
        import tvm.s_tir.tensor_intrin  # noqa: F401
