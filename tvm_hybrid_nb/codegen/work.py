"""The lanes analysis's work, counted: every simplification that the dependence tests make through
:class:`Analyzer` adds one inside a :func:`counting` block, and the one past the block's limit
raises :class:`AnalysisOutgrown`.  The count is deterministic (the same IR, the same count), so a
fast plan that stops on it is the same on every machine and in every run; :mod:`.cost` sets the
limit (:func:`~.cost.exact_plan_decision`)."""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass
from typing import Iterator

import tvm


@dataclass
class WorkCount:
    """The simplifications made so far in a :func:`counting` block, its limit (None: none), and
    what the analysis was deciding (:func:`working_on`)."""

    limit: int | None = None
    simplifications: int = 0
    where: str = ""

    def outgrown(self) -> bool:
        return self.limit is not None and self.simplifications > self.limit


class AnalysisOutgrown(BaseException):
    """The lanes analysis passed its limit of simplifications.  A ``BaseException``, as
    ``KeyboardInterrupt`` is: the dependence tests read any ``Exception`` from the analyzer as
    "no proof" and go on, and this one must end the analysis."""

    def __init__(self, count: WorkCount):
        super().__init__(f"{count.simplifications} simplifications" + (f" by {count.where}" if count.where else ""))
        self.simplifications = count.simplifications
        self.where = count.where


_COUNT: contextvars.ContextVar[WorkCount | None] = contextvars.ContextVar("analysis_work", default=None)


class Analyzer(tvm.sym.Analyzer):
    """TVM's arithmetic analyzer, its simplifications counted toward the open :func:`counting`."""

    __slots__ = ()

    def simplify(self, expr, steps: int = 2):
        count = _COUNT.get()
        if count is not None:
            count.simplifications += 1
            if count.outgrown():
                raise AnalysisOutgrown(count)
        return super().simplify(expr, steps)


@contextlib.contextmanager
def counting(count: WorkCount) -> Iterator[WorkCount]:
    """Count the simplifications made inside the block (in this thread or task) into ``count``.
    A block left past the limit raises :class:`AnalysisOutgrown` even where a callback from TVM's
    C++ (a structural walk's) turned the raise into an error that a test read as "no proof"."""
    token = _COUNT.set(count)
    try:
        yield count
    finally:
        _COUNT.reset(token)
    if count.outgrown():
        raise AnalysisOutgrown(count)


def working_on(where: str) -> None:
    """Name what the analysis decides next (a loop), for :class:`AnalysisOutgrown`'s message."""
    count = _COUNT.get()
    if count is not None:
        count.where = where
