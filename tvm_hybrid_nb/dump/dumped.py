"""The module read back from a dump: :class:`DumpedModule`, a ``HybridModule`` that knows which
default-pipeline passes its stage 0 has been through, so its native build (on demand) finishes the
same pipeline.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from .. import capture as _capture
from ..module import HybridModule
from ..signature import ParamSpec
from .pipeline import _finish_pipeline

__all__ = ["DumpedModule"]


class DumpedModule(HybridModule):
    """A :class:`HybridModule` read from a dump or resumed from one.

    Besides the usual attributes it knows which default-pipeline passes its stage 0 has been
    through, so that its native build (made on demand) finishes the same pipeline.

    Attributes
    ----------
    pipeline_done : list of str
        Names of the default-pipeline leaf passes already applied to stage 0's module.
    in_pipeline : list of bool
        Per stage, whether it came from the default pipeline (False for passes named in
        :func:`resume` ``passes=``).
    resumed_from : str or None
        The file this module was resumed from.
    directory : pathlib.Path or None
        The dump it was loaded from.
    sizes : dict
        Values of symbolic dimensions the dump's runnable files use (``emulate`` uses them too).
    """

    def __init__(self, func_name: str, target: Any, raw_stages: Sequence[_capture.RawStage], *,
                 pipeline_done: Sequence[str] = (), in_pipeline: Sequence[bool] | None = None,
                 resumed_from: str | None = None, directory: Path | None = None,
                 params: Sequence[ParamSpec] | None = None, **kwargs: Any):
        self.pipeline_done = list(pipeline_done)
        self.resumed_from = resumed_from
        self.directory = directory
        self.sizes: dict[str, int] = {}
        self.in_pipeline = list(in_pipeline) if in_pipeline is not None else [True] * len(raw_stages)
        if _capture.PACKED_API_PASS in self.pipeline_done:
            kwargs.setdefault("packed_api_index", 0)
        super().__init__(func_name, target, raw_stages, **kwargs)
        #: The signature read from stage 0's own module (None where it has none), before ``params``.
        self.stage0_params = self._params
        if params is not None:
            # The signature of the original input stage: a resumed stage 0 may be flattened (its writes
            # go through views) or a packed-API wrapper, where outputs cannot be found again.
            self._params = list(params)

    @property
    def native(self):
        """The natively compiled module: the rest of the default pipeline, built on first use."""
        if self._native is None:
            last_extra = max((i for i, p in enumerate(self.in_pipeline) if not p), default=0)
            skip = self.pipeline_done + [s.name for s, p in zip(self.stages[1:last_extra + 1],
                                                                 self.in_pipeline[1:last_extra + 1]) if p]
            self._native, _, _ = _finish_pipeline(self.stages[last_extra].mod, self.target, skip,
                                                  f"stage {self.stages[last_extra].label}")
        return self._native
