"""tvm_hybrid_nb: a hybrid-script backend for Apache TVM, made for notebooks.

``thn.build(schedule)`` compiles with TVM's real pipeline and returns a
:class:`~tvm_hybrid_nb.module.HybridModule`: readable, numpy-runnable Python source
for every pass, exact software emulation, comparison with the native build, and an
op usable in further TE computations.  ``%load_ext tvm_hybrid_nb`` adds the
``%%hybrid_build`` magic and the pass explorer.

Importing this package is cheap: TVM, IPython and ipywidgets load only when used.
"""
from __future__ import annotations

from typing import Any

from ._compat import check_tvm_ffi_version
from . import _version

check_tvm_ffi_version()

__version__ = _version.__version__

__all__ = ["build", "load", "resume", "report", "verify", "HybridModule", "load_ipython_extension"]


def build(obj: Any, target: Any = "llvm", name: str | None = None, pipeline: str = "default",
          on_failure: str = "raise"):
    """Compile ``obj`` with TVM's pipeline and capture every pass (see :func:`tvm_hybrid_nb.module.build`)."""
    from .module import build as _build

    return _build(obj, target=target, name=name, pipeline=pipeline, on_failure=on_failure)


def load(directory):
    """Load a dump written by :meth:`HybridModule.save` (see :func:`tvm_hybrid_nb.dump.load`)."""
    from .dump import load as _load

    return _load(directory)


def resume(path, passes=None, target=None):
    """Resume the pass pipeline from a dumped stage (see :func:`tvm_hybrid_nb.dump.resume`)."""
    from .dump import resume as _resume

    return _resume(path, passes=passes, target=target)


def report(hm, path):
    """Write a self-contained HTML report (see :func:`tvm_hybrid_nb.html_report.write_report`)."""
    from .html_report import write_report

    return write_report(hm, path)


def verify(model, target="llvm", **options):
    """Verify every kernel of a model at every changed pass (see :func:`tvm_hybrid_nb.verification.verify`)."""
    from .verification import verify as _verify

    return _verify(model, target=target, **options)


def __getattr__(name: str):
    if name == "HybridModule":
        from .module import HybridModule

        return HybridModule
    raise AttributeError(f"module 'tvm_hybrid_nb' has no attribute {name!r}")


def load_ipython_extension(ipython) -> None:
    """Register ``%%hybrid_build`` (called by ``%load_ext tvm_hybrid_nb``)."""
    from .magic import load_ipython_extension as _load_extension

    _load_extension(ipython)
