"""Domain exceptions of tvm_hybrid_nb.  The magic translates them once into a UsageError."""
from __future__ import annotations


class HybridError(Exception):
    """Base class of every error this package raises on purpose."""


class BuildError(HybridError):
    """The object could not be built (wrong kind, schedule error, TVM lowering error).

    When a TVM pass failed, ``stages`` holds every stage captured before it, ``failure`` the pass
    and TVM's full message, and ``module`` a HybridModule of those stages (``hm.failure`` set).
    """

    stages = None
    failure = None
    module = None


class UnsupportedConstructError(HybridError):
    """A TIR node or op that the hybrid code generator cannot translate exactly.

    Raising is the rule: the emulator never guesses, so an unknown construct is refused by name.
    """

    def __init__(self, construct: str, detail: str = "", stage: str | None = None):
        self.construct = construct
        self.detail = detail
        self.stage = stage
        super().__init__(self._message())

    def _message(self) -> str:
        where = f" at stage {self.stage}" if self.stage else ""
        extra = f": {self.detail}" if self.detail else ""
        return f"unsupported construct {self.construct}{where}{extra}"

    def at_stage(self, stage: str) -> "UnsupportedConstructError":
        """Return a copy of this error that names ``stage``."""
        return UnsupportedConstructError(self.construct, self.detail, stage)


class EmulationError(HybridError):
    """The emulated kernel failed at run time (out-of-bounds access, division by zero, assert)."""


class UndefinedResultError(EmulationError):
    """Results that depend on a value the native kernel leaves undefined: an out-of-range float →
    integer conversion (LLVM poison).  ``results`` holds the emulated result values (the native x86-64
    model's, in ``result_names`` order) and ``undefined`` a boolean mask of the undefined elements of each."""

    def __init__(self, message: str, results: list, undefined: list):
        super().__init__(message)
        self.results = results
        self.undefined = undefined


class StageNotEmulatableError(HybridError):
    """The requested stage cannot be emulated; the message says why."""


class StageLookupError(HybridError, LookupError):
    """A stage index out of range or an unknown pass name."""


class ArgumentCountError(HybridError, ValueError):
    """Wrong number of arguments for the kernel."""


class ArgumentShapeError(HybridError, ValueError):
    """An argument's shape does not match the parameter it is given for."""


class ArgumentTypeError(HybridError, TypeError):
    """An argument's dtype or kind does not match the parameter it is given for."""


class DumpError(HybridError):
    """A dump directory or file is missing, corrupt or would be overwritten."""


class UnknownPassError(HybridError, LookupError):
    """A pass name given to :func:`tvm_hybrid_nb.resume` that is not a TVM pass (or is ambiguous)."""


class InsufficientMemoryError(HybridError, MemoryError):
    """Arrays or buffers that would need more memory than the machine has; refused before allocating."""


class CompareError(HybridError, ValueError):
    """A comparison that cannot be made as asked: a bad tolerance, or a reference output of the wrong
    count, shape or kind.  Refused, never broadcast or truncated into a verdict."""


class DeviceUnavailableError(HybridError, RuntimeError):
    """The native kernel needs a device (a GPU) that this machine does not have."""
