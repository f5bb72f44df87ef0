"""Resuming the pipeline from one dumped stage (its ``.json``, or its possibly edited
``.tvmscript.py``): the rest of the default pipeline, or just the passes named.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any, Sequence

import tvm

from .. import capture as _capture
from ..dump_write import INDEX_FILE
from ..errors import BuildError, DumpError, UnknownPassError
from .dumped import DumpedModule
from .index import _params_of, _target_of, read_index
from .pipeline import _finish_pipeline, resolve_pass
from .stage_json import _load_module_json

__all__ = ["resume", "SPLIT_PASS"]

#: ``tvm.build`` splits host and device code with this pass after the lowering pipeline; stages from
#: it on are per-target finalization and cannot be resumed.
SPLIT_PASS = "tirx.Filter"


def _stage_file_number(path: Path) -> int:
    m = re.match(r"^(\d{3,})_", path.name)
    if not m:
        raise DumpError(f"{path}: not a stage file (names start with the stage number, e.g. 019_tirx.FlattenBuffer.json)")
    return int(m.group(1))


def _load_stage_module(path: Path, func_name: str) -> "tvm.IRModule":
    if path.name.endswith(".tvmscript.py"):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise DumpError(f"{path}: corrupt: not UTF-8 text") from None
        try:
            mod = tvm.script.from_source(text)
        except Exception as exc:
            msg = " ".join(_capture.short_tvm_message(exc).split())
            raise DumpError(f"{path}: cannot parse the TVMScript: {msg}") from None
        if isinstance(mod, tvm.tirx.PrimFunc):
            mod = tvm.IRModule({func_name: mod})
        if not isinstance(mod, tvm.IRModule):
            raise DumpError(f"{path}: the TVMScript defines a {type(mod).__name__}, not an IRModule")
    elif path.name.endswith(".json"):
        mod = _load_module_json(path)
    elif path.name.endswith(".py"):
        raise DumpError(f"{path}: this is hybrid Python; resume from the stage's .json or .tvmscript.py file")
    else:
        raise DumpError(f"{path}: not a stage file (.json or .tvmscript.py)")
    if not any(gv.name_hint == func_name for gv in mod.functions.keys()):
        raise DumpError(f"{path}: the module has no function {func_name!r}")
    return mod


def resume(path: str | os.PathLike, passes: Sequence[str] | str | None = None, target: Any = None) -> DumpedModule:
    """Load one dumped stage and continue compiling from it.

    Parameters
    ----------
    path : str or path
        A stage's ``NNN_<pass>.json``, or its ``NNN_<pass>.tvmscript.py`` (possibly edited).  The
        dump's ``index.json`` must be next to it.
    passes : list of str or comma-separated str, optional
        Run just these passes (see :func:`resolve_pass`), inserted after the stage; the native
        build (on demand) then finishes the default pipeline.  Default: run the rest of the
        default pipeline, which also makes the native build.
    target : str or tvm.target.Target, optional
        Defaults to the dump's target.

    Returns
    -------
    DumpedModule
        Stage 0 is the loaded module (named ``"input"``, ``hm.resumed_from`` says which file);
        the stage numbers continue from the loaded stage's (``hm.first_index``).

    Raises
    ------
    DumpError
        Missing or corrupt files, or a stage after the host/device split.
    UnknownPassError
        A name in ``passes`` that is not a pass.
    BuildError
        A pass failed.
    """
    path = Path(path)
    if not path.is_file():
        raise DumpError(f"{path}: no such file")
    if path.name == INDEX_FILE:
        raise DumpError(f"{path}: give a stage file (NNN_<pass>.json or .tvmscript.py), not the index")
    number = _stage_file_number(path)
    index = read_index(path.parent)
    first = index["first_index"]
    entries = index["stages"]
    if not first <= number < first + len(entries):
        raise DumpError(f"{path}: stage {number} is not in {path.parent / INDEX_FILE} "
                        f"(stages {first}..{first + len(entries) - 1})")
    before = entries[1:number - first + 1]
    pipeline_done = list(index.get("pipeline_done") or [])
    split_at = next((e["index"] for e in entries if e["name"] == SPLIT_PASS), None)
    if SPLIT_PASS in pipeline_done or (split_at is not None and number >= split_at):
        raise DumpError(f"{path}: stage {number} comes after the host/device split ({SPLIT_PASS}); resume from "
                        f"an earlier stage")
    func_name = index["func_name"]
    target = _target_of(index, path.parent / INDEX_FILE) if target is None else tvm.target.Target(target)
    mod = _load_stage_module(path, func_name)
    skip = pipeline_done + [e["name"] for e in before if e.get("in_pipeline", True)]
    common = dict(resumed_from=path.name, name=index.get("name"), first_index=number,
                  params=_params_of(index, path.parent / INDEX_FILE),
                  packed_api_index=0 if _capture.PACKED_API_PASS in skip else None)
    sizes = dict(index.get("sizes") or {})
    if isinstance(passes, str):
        passes = [p for p in passes.split(",") if p.strip()]
    if passes is None:
        lib, stages, seconds = _finish_pipeline(mod, target, skip, path.name)
        raw = [_capture.RawStage("input", _capture.snapshot_module(mod), 0.0)] + stages
        hm = DumpedModule(func_name, target, raw, native=lib, build_seconds=seconds, pipeline_done=skip,
                          in_pipeline=[True] * len(raw), **common)
        hm.sizes = sizes
        return hm
    made = [(spec, resolve_pass(spec, target)) for spec in passes]
    if not made:
        raise UnknownPassError("passes is empty: name at least one pass, or give passes=None for the rest of "
                               "the pipeline")
    cap = _capture.PassCapture()
    start = time.perf_counter()
    current = mod
    try:
        with target, tvm.transform.PassContext(instruments=[cap]):
            for spec, p in made:
                current = p(current)
    except Exception as exc:
        failed = cap._stack[-1].name if cap._stack else spec
        raise BuildError(f"pass {failed} failed on {path.name}: {_capture.short_tvm_message(exc)}") from exc
    seconds = time.perf_counter() - start
    raw = [_capture.RawStage("input", _capture.snapshot_module(mod), 0.0)] + cap.stages
    hm = DumpedModule(func_name, target, raw, native=None, build_seconds=seconds, pipeline_done=skip,
                      in_pipeline=[True] + [False] * len(cap.stages), **common)
    hm.sizes = sizes
    return hm
