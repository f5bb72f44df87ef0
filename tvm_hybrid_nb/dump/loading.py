"""Loading a dump: :func:`load` reads every stage back into a :class:`DumpedModule` without
recompiling, checking the index against stage 0's kernel; :func:`record_compare` stores a
comparison's result in the index.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .. import capture as _capture
from ..compare import CompareResult
from ..dump_write import INDEX_FILE, _compare_to_json
from ..errors import DumpError, HybridError
from ..files import atomic_write_text
from ..signature import check_size_names
from .dumped import DumpedModule
from .index import _compare_from_json, _params_of, _target_of, read_index
from .stage_json import _load_module_json

__all__ = ["load", "record_compare"]


def _check_params_match(hm: DumpedModule, index: dict, path: Path) -> None:
    """The index's ``params`` must describe stage 0's kernel (a hand edit would emulate another one)."""
    listed, own = index.get("params"), hm.stage0_params
    if listed is None or own is None:
        return
    if len(listed) != len(own):
        if index.get("resumed_from") is None:
            raise DumpError(f"{path}: corrupt: field 'params' lists {len(listed)} parameters, the kernel in "
                            f"stage 0 has {len(own)}")
        return  # a resumed stage 0 may have another calling convention (a packed-API wrapper)
    for i, (entry, spec) in enumerate(zip(listed, own)):
        if entry["dtype"] != spec.dtype:
            raise DumpError(f"{path}: corrupt: field 'params[{i}].dtype' is {entry['dtype']!r}, the kernel in "
                            f"stage 0 has {spec.dtype!r} for that parameter")
        if index.get("resumed_from") is not None:
            continue  # a resumed stage 0 may be flattened: other shapes, same dtypes
        listed_shape = tuple(entry["shape"]) if entry["shape"] is not None else None
        if listed_shape != (tuple(spec.shape) if spec.shape is not None else None):
            raise DumpError(f"{path}: corrupt: field 'params[{i}].shape' is {entry['shape']!r}, the kernel in "
                            f"stage 0 has {list(spec.shape) if spec.shape is not None else None!r}")
        if entry["is_output"] != spec.is_output:
            raise DumpError(f"{path}: corrupt: field 'params[{i}].is_output' does not match the kernel in stage 0")


def load(directory: str | os.PathLike) -> DumpedModule:
    """Read a dump written by :func:`save` back into a module, without recompiling.

    Every stage is browsable and emulatable; the native kernel is built on first use
    (``hm.native``, ``hm.compare()``).

    Parameters
    ----------
    directory : str or path
        A directory written by :meth:`HybridModule.save`.

    Returns
    -------
    DumpedModule

    Raises
    ------
    DumpError
        One line naming the missing or corrupt file.
    """
    directory = Path(directory)
    index = read_index(directory)
    target = _target_of(index, directory / INDEX_FILE)
    raw = []
    for number, entry in enumerate(index["stages"]):
        mod = _load_module_json(directory / entry["files"]["json"])
        if number == 0 and not any(gv.name_hint == index["func_name"] for gv in mod.functions.keys()):
            raise DumpError(f"{directory / INDEX_FILE}: corrupt: field 'func_name' is {index['func_name']!r}, "
                            f"which stage 0's module does not define")
        raw.append(_capture.RawStage(entry["name"], mod, float(entry.get("seconds") or 0.0)))
    in_pipeline = [bool(e.get("in_pipeline", True)) for e in index["stages"]]
    hm = DumpedModule(index["func_name"], target, raw, pipeline_done=index.get("pipeline_done") or [],
                      in_pipeline=in_pipeline, resumed_from=index.get("resumed_from"), directory=directory,
                      build_seconds=index.get("build_seconds"), name=index.get("name"),
                      first_index=index["first_index"], params=_params_of(index, directory / INDEX_FILE))
    _check_params_match(hm, index, directory / INDEX_FILE)
    for stage, entry in zip(hm.stages, index["stages"]):
        if isinstance(entry.get("changed"), bool):
            stage._changed = entry["changed"]  # as measured on the original build's modules
    hm.last_compare = _compare_from_json(index.get("last_compare"))
    hm.sizes = dict(index.get("sizes") or {})
    if hm.sizes and hm._params is not None:
        try:
            check_size_names(hm._params, hm.sizes)
        except HybridError as exc:
            raise DumpError(f"{directory / INDEX_FILE}: corrupt: field 'sizes': {exc}") from None
    return hm


def record_compare(directory: str | os.PathLike, result: CompareResult) -> None:
    """Store ``result`` as the dump's latest comparison (``last_compare`` in ``index.json``).

    Parameters
    ----------
    directory : str or path
        A dump directory.
    result : CompareResult
        What :meth:`HybridModule.compare` returned; the report shows it.
    """
    path = Path(directory) / INDEX_FILE
    try:
        before = os.stat(path)
    except OSError:
        before = None
    index = read_index(directory)
    index["last_compare"] = _compare_to_json(result)

    def unchanged() -> None:
        try:
            now = os.stat(path)
        except OSError:
            now = None
        if before is not None and now is not None and (now.st_ino, now.st_mtime_ns, now.st_size) == (
                before.st_ino, before.st_mtime_ns, before.st_size):
            return
        try:  # another comparison recorded meanwhile changes only last_compare: ours replaces it
            current = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            current = None
        if not isinstance(current, dict) or {k: v for k, v in current.items() if k != "last_compare"} != \
                {k: v for k, v in index.items() if k != "last_compare"}:
            raise DumpError(f"{path}: changed while the comparison ran (another dump was written); the "
                            f"result was not recorded")

    atomic_write_text(path, json.dumps(index, indent=1), before_replace=unchanged)
