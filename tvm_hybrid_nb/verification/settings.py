"""The vocabulary of :func:`~tvm_hybrid_nb.verification.verify`'s settings: the references, the stage
selections, the default time limit, and :class:`VerifyError` for bad arguments.
"""
from __future__ import annotations

from ..errors import HybridError

__all__ = ["REFERENCES", "STAGE_SELECTIONS", "DEFAULT_TIMEOUT", "VerifyError"]

REFERENCES = ("native", "input")
STAGE_SELECTIONS = ("changed", "all")
#: Default per-kernel time limit, seconds.
DEFAULT_TIMEOUT = 600.0


class VerifyError(HybridError):
    """Bad arguments to :func:`verify` (an unknown pass name, schedule, reference, ...)."""
