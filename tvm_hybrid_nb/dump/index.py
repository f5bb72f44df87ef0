"""Reading a dump's ``index.json``: the format check, the schema of every field, and the objects made
from it (target, parameters, the recorded comparison).

Every fault is one :class:`~tvm_hybrid_nb.errors.DumpError` line naming the file and the field.
"""
from __future__ import annotations

import json
import keyword
import os
import warnings
from pathlib import Path
from typing import Any

import tvm

from .. import capture as _capture
from ..compare import CompareResult, OutputComparison
from ..dump_write import FORMAT, FORMAT_VERSION, INDEX_FILE, _is_int, _plain_file_name
from ..errors import DumpError
from ..signature import ParamSpec, dim_symbols, dim_value

__all__ = ["read_index"]


def _compare_from_json(data: dict | None) -> CompareResult | None:
    if not data:
        return None
    outputs = [OutputComparison(name=o["name"], dtype=o["dtype"], shape=tuple(o["shape"]),
                                max_abs_error=o["max_abs_error"], max_rel_error=o["max_rel_error"],
                                mismatches=o["mismatches"],
                                first_mismatch=tuple(o["first_mismatch"]) if o["first_mismatch"] else None,
                                rtol=o["rtol"], atol=o["atol"]) for o in data["outputs"]]
    return CompareResult(stage=data["stage"], reference=data["reference"], outputs=outputs,
                         emulate_seconds=data["emulate_seconds"], reference_seconds=data["reference_seconds"],
                         mode=data.get("mode", "exact"))


def _read_json_file(path: Path, what: str) -> Any:
    if not path.is_file():
        raise DumpError(f"{path}: missing ({what})")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise DumpError(f"{path}: corrupt ({what}): not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise DumpError(f"{path}: corrupt ({what}): invalid JSON at line {exc.lineno} column {exc.colno}: "
                        f"{exc.msg}") from None
    except RecursionError:
        raise DumpError(f"{path}: corrupt ({what}): JSON nested too deeply") from None


def _is_number(value: Any) -> bool:
    return type(value) in (int, float)


def _is_identifier(value: Any) -> bool:
    return isinstance(value, str) and value.isidentifier() and not keyword.iskeyword(value)


def _is_dtype(value: Any) -> bool:
    if not isinstance(value, str) or not value:
        return False
    try:
        tvm.DataType(value)
    except Exception:  # TVM raises its own error types for an unknown dtype
        return False
    return True


def _is_dim(value: Any) -> bool:
    if _is_int(value):
        return value >= 0
    if not isinstance(value, str):
        return False
    try:
        dim_value(value, {n: 1 for n in dim_symbols(value)})
    except (SyntaxError, ValueError, KeyError, TypeError, ZeroDivisionError, RecursionError):
        return False
    return True


def _check_fields(data: Any, where: str, spec: dict, path: Path) -> None:
    """Check that ``data`` is an object whose fields satisfy ``spec`` (field → (test, description))."""
    if not isinstance(data, dict):
        raise DumpError(f"{path}: corrupt: field {where!r} must be an object")
    for key, (test, what) in spec.items():
        if not test(data.get(key)):
            name = f"{where}.{key}" if where else key
            raise DumpError(f"{path}: corrupt: field {name!r} must be {what}, got {data.get(key)!r:.80}")


def _optional(test):
    return lambda value: value is None or test(value)


def _list_of(test):
    return lambda value: isinstance(value, list) and all(test(v) for v in value)


_INDEX_FIELDS = {
    "func_name": (lambda v: isinstance(v, str) and bool(v), "a function name"),
    "name": (_optional(_is_identifier), "a Python identifier or null"),
    "target": (lambda v: isinstance(v, str) and bool(v), "a target string"),
    "first_index": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "stages": (lambda v: isinstance(v, list) and bool(v), "a non-empty list"),
    "build_seconds": (_optional(_is_number), "a number or null"),
    "resumed_from": (_optional(lambda v: isinstance(v, str)), "a file name or null"),
    "pipeline_done": (_optional(_list_of(lambda v: isinstance(v, str))), "a list of pass names"),
    "params": (_optional(lambda v: isinstance(v, list)), "a list of parameters or null"),
    "sizes": (_optional(lambda v: isinstance(v, dict) and all(_is_identifier(k) and _is_int(n) and n >= 0
                                                                for k, n in v.items())),
              "an object of size names to non-negative integers"),
    "last_compare": (_optional(lambda v: isinstance(v, dict)), "an object or null"),
}
_STAGE_FIELDS = {
    "index": (_is_int, "an integer"),
    "name": (lambda v: isinstance(v, str) and bool(v), "a pass name"),
    "seconds": (_optional(_is_number), "a number or null"),
    "changed": (_optional(lambda v: isinstance(v, bool)), "true, false or null"),
    "emulatable": (_optional(lambda v: isinstance(v, bool)), "true, false or null"),
    "reason": (_optional(lambda v: isinstance(v, str)), "a string or null"),
    "in_pipeline": (_optional(lambda v: isinstance(v, bool)), "true, false or null"),
    "files": (lambda v: isinstance(v, dict) and _plain_file_name(v.get("json"))
              and all(_plain_file_name(f) for f in v.values()),
              "an object of file names inside the dump directory"),
}
_PARAM_FIELDS = {
    "name": (_is_identifier, "a Python identifier"),
    "dtype": (_is_dtype, "a TVM dtype"),
    "shape": (_optional(_list_of(_is_dim)), "a list of sizes (integers or size expressions) or null"),
    "is_output": (lambda v: isinstance(v, bool), "true or false"),
    # A strided or offset parameter buffer's layout (absent for the others).
    "strides": (_optional(_list_of(_is_dim)), "a list of strides (integers or size expressions) or null"),
    "elem_offset": (_optional(_is_dim), "an offset (an integer or a size expression) or null"),
}
_COMPARE_FIELDS = {
    "stage": (lambda v: isinstance(v, (str, int)) and not isinstance(v, bool), "a stage label"),
    "reference": (lambda v: isinstance(v, str), "a string"),
    "mode": (_optional(lambda v: v in ("exact", "fast")), "\"exact\" or \"fast\""),
    "emulate_seconds": (_is_number, "a number"),
    "reference_seconds": (_is_number, "a number"),
    "outputs": (lambda v: isinstance(v, list), "a list"),
}
_OUTPUT_FIELDS = {
    "name": (lambda v: isinstance(v, str), "a string"),
    "dtype": (lambda v: isinstance(v, str), "a dtype"),
    "shape": (_list_of(lambda v: _is_int(v) and v >= 0), "a list of non-negative integers"),
    "max_abs_error": (_is_number, "a number"),
    "max_rel_error": (_is_number, "a number"),
    "mismatches": (lambda v: _is_int(v) and v >= 0, "a non-negative integer"),
    "first_mismatch": (_optional(_list_of(_is_int)), "a list of integers or null"),
    "rtol": (_is_number, "a number"),
    "atol": (_is_number, "a number"),
}


def _check_index_schema(index: dict, path: Path) -> None:
    """Every field :func:`load` uses has the type it needs; errors name the field (one line)."""
    _check_fields(index, "", _INDEX_FIELDS, path)
    for i, entry in enumerate(index["stages"]):
        _check_fields(entry, f"stages[{i}]", _STAGE_FIELDS, path)
        if entry["index"] != index["first_index"] + i:
            raise DumpError(f"{path}: corrupt: stage entry {i} has number {entry['index']}, "
                            f"expected {index['first_index'] + i}")
    names = set()
    for i, param in enumerate(index.get("params") or []):
        _check_fields(param, f"params[{i}]", _PARAM_FIELDS, path)
        if param["name"] in names:
            raise DumpError(f"{path}: corrupt: field 'params[{i}].name' repeats {param['name']!r}")
        names.add(param["name"])
    compare = index.get("last_compare")
    if compare is not None:
        _check_fields(compare, "last_compare", _COMPARE_FIELDS, path)
        for i, output in enumerate(compare["outputs"]):
            _check_fields(output, f"last_compare.outputs[{i}]", _OUTPUT_FIELDS, path)


def read_index(directory: str | os.PathLike) -> dict:
    """The checked contents of ``directory/index.json``.

    Raises
    ------
    DumpError
        One line naming the file when the directory or index is missing, corrupt or of another format.
    """
    directory = Path(directory)
    if not directory.is_dir():
        if directory.is_file():
            raise DumpError(f"{directory}: is a file; give the dump directory (the one holding {INDEX_FILE})")
        raise DumpError(f"{directory}: no such dump directory")
    path = directory / INDEX_FILE
    if not path.is_file():
        raise DumpError(f"{path}: missing — {directory} is not a dump written by HybridModule.save")
    index = _read_json_file(path, "the dump index")
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise DumpError(f"{path}: not a tvm_hybrid_nb dump index (no \"format\": \"{FORMAT}\")")
    if index.get("format_version") != FORMAT_VERSION:
        raise DumpError(f"{path}: dump format version {index.get('format_version')!r}, this tvm_hybrid_nb "
                        f"reads version {FORMAT_VERSION}")
    _check_index_schema(index, path)
    if index.get("tvm_version") != tvm.__version__:
        warnings.warn(f"{path}: dump written with TVM {index.get('tvm_version')}, this is TVM {tvm.__version__}",
                      stacklevel=3)
    return index


def _target_of(index: dict, path: Path) -> "tvm.target.Target":
    try:
        return tvm.target.Target(index["target"])
    except Exception as exc:
        raise DumpError(f"{path}: bad target {index['target']!r}: {_capture.short_tvm_message(exc)}") from None


def _params_of(index: dict, path: Path) -> list[ParamSpec] | None:
    data = index.get("params")
    if data is None:
        return None
    try:
        return [ParamSpec(str(p["name"]), str(p["dtype"]),
                          tuple(d if isinstance(d, (int, str)) else int(d) for d in p["shape"])
                          if p["shape"] is not None else None, bool(p["is_output"]),
                          strides=tuple(p["strides"]) if p.get("strides") is not None else None,
                          elem_offset=p.get("elem_offset") or 0,
                          index_extent=(p["index_extent"] if isinstance(p["index_extent"], str) else int(p["index_extent"]))
                          if p.get("index_extent") is not None else None)
                for p in data]
    except (KeyError, TypeError, ValueError):
        raise DumpError(f"{path}: corrupt: field 'params' is malformed") from None
