"""Dumps of a :class:`~tvm_hybrid_nb.module.HybridModule` on disk: save, load and resume the pipeline.

A dump directory holds, for every stage ``NNN`` (the stage number, zero-padded) and pass name ``P``:

``NNN_P.py``
    The stage's hybrid source, standalone: ``python NNN_P.py`` runs the kernel on seeded random
    inputs with numpy alone and prints a checksum of the outputs; importing it gives the kernel
    function.  Stages that cannot be emulated get a file that says why and exits with status 1.
``NNN_P.tvmscript.py``
    The module's TVMScript (edit it and :func:`resume` from it).
``NNN_P.json``
    The module as ``tvm.ir.save_json`` wrote it (exact; :func:`load` and :func:`resume` read it).
``index.json``
    The stages (number, pass name, seconds, changed, emulatable, reason, file names), the target,
    the TVM version and what is needed to rebuild the native kernel.

:func:`save` writes a dump, :func:`load` reads one back into a module that can be browsed and
emulated without recompiling (the native build is made on demand), and :func:`resume` continues
the pipeline from one dumped stage.

Layering: writing (:func:`save`, the runnable files, :func:`check_output_directory`) lives in
:mod:`tvm_hybrid_nb.dump_write`, below :mod:`tvm_hybrid_nb.module`, because ``HybridModule.save``
calls it; this module reads dumps back into :class:`DumpedModule` (a ``HybridModule``), so it sits
above ``module`` and re-exports the writing functions under their usual names.
"""
from __future__ import annotations

import json
import keyword
import os
import re
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import tvm

from . import capture as _capture
from .compare import CompareResult, OutputComparison
from .dump_write import (DEFAULT_SYMBOLIC_SIZE, FORMAT, FORMAT_VERSION, INDEX_FILE, _compare_to_json, _is_int,
                         _plain_file_name, check_output_directory, checksum, runnable_source, save, stage_stem,
                         symbolic_sizes)
from .errors import BuildError, DumpError, HybridError, UnknownPassError
from .files import atomic_write_text
from .module import HybridModule
from .signature import ParamSpec, check_size_names, dim_symbols, dim_value

#: ``tvm.build`` splits host and device code with this pass after the lowering pipeline; stages from
#: it on are per-target finalization and cannot be resumed.
SPLIT_PASS = "tirx.Filter"

__all__ = ["save", "load", "resume", "record_compare", "read_index", "check_output_directory",
           "checksum", "runnable_source", "stage_stem", "symbolic_sizes", "resolve_pass", "DumpedModule",
           "FORMAT", "FORMAT_VERSION", "INDEX_FILE", "DEFAULT_SYMBOLIC_SIZE", "SPLIT_PASS"]


# ---------------------------------------------------------------------------------------------
# Modules read back from disk
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


# ---------------------------------------------------------------------------------------------
# load
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


# ---------------------------------------------------------------------------------------------
# Checking a stage JSON before TVM reads it
#: The deepest node graph handed to ``tvm.ir.load_json``: it decodes recursively in C++, and a chain
#: of about 3000 nested nodes overflows the stack (a segfault, not an exception).  Real stages stay
#: far below (a 64x64 matmul's deepest chain is about 40 nodes).
MAX_JSON_DEPTH = 1000
# FFI type indices whose fields hold plain values, not node references (tvm/ffi/c_api.h).
_POD_FIELD_TYPES = frozenset({0, 1, 2, 3, 5})  # None, int, bool, float, DataType
_LEAF_TYPES = frozenset({0, 1, 2, 3, 5, 6, 65, 66, 69})  # ... Device, String, Bytes, Shape
_SEQUENCE_TYPES = frozenset({71, 75})  # Array, List
_MAP_TYPES = frozenset({72, 76})  # Map, Dict


class _TypeTable:
    """What a node of each type key refers to, from TVM's own type registry (cached per key)."""

    def __init__(self):
        from tvm_ffi import core

        self._core = core
        self._cache: dict[str, tuple | None] = {}
        self._enum_indices = {i for i in (core._object_type_key_to_index("ffi.Enum"),
                                          core._object_type_key_to_index("ffi.IntEnum")) if i is not None}
        # IR nodes that are never null unless a field says Optional: TVM dereferences them unchecked
        self._ir_roots = {i for i in (core._object_type_key_to_index("ir.Expr"),
                                      core._object_type_key_to_index("tirx.Stmt")) if i is not None}

    def _is_ir_node_type(self, type_index: int) -> bool:
        if type_index in self._ir_roots:
            return True
        info = self._core._type_index_to_type_info(type_index) if type_index >= 64 else None
        return info is not None and bool(self._ir_roots & set(info.type_ancestors or ()))

    def _requirement(self, field) -> str | None:
        """"node" for a field that must hold an IR node, "nodes" for an array of them, else None."""
        schema = getattr(field, "ty", None)
        if schema is None:
            return None
        if schema.origin_type_index >= 0 and self._is_ir_node_type(schema.origin_type_index):
            return "node"
        if schema.origin == "ffi.Array" and len(schema.args) == 1 and schema.args[0].origin_type_index >= 0 \
                and self._is_ir_node_type(schema.args[0].origin_type_index):
            return "nodes"
        return None

    def kind(self, type_key: str):
        """None for an unknown key, else ("leaf"|"seq"|"map"|"opaque"|"object", reference fields)."""
        if type_key in self._cache:
            return self._cache[type_key]
        core = self._core
        index = core._object_type_key_to_index(type_key)
        result = None
        if index is not None:
            if index in _LEAF_TYPES or index < 64:
                result = ("leaf", ())
            elif index in _SEQUENCE_TYPES:
                result = ("seq", ())
            elif index in _MAP_TYPES:
                result = ("map", ())
            else:
                info = core._type_index_to_type_info(index)
                if (info is None or self._enum_indices & set(info.type_ancestors or ())
                        or core._lookup_type_attr(index, "__data_from_json__") is not None):
                    result = ("opaque", ())  # decoded from its own data, no references
                else:
                    fields = []
                    while info is not None:
                        fields += [(f.name, self._requirement(f)) for f in info.fields
                                   if f.field_static_type_index not in _POD_FIELD_TYPES]
                        info = info.parent_type_info
                    result = ("object", tuple(fields))
        self._cache[type_key] = result
        return result


_TYPE_TABLE: _TypeTable | None = None


def check_node_graph(data: Any, path: Path) -> None:
    """Refuse a stage JSON that ``tvm.ir.load_json`` would crash on, with one line naming the fault.

    Checks the layout (``root_index``, ``nodes``), that every type key is one TVM registers, that
    every reference is a node index in range, and that the graph reachable from the root is acyclic
    and at most :data:`MAX_JSON_DEPTH` deep (TVM decodes it recursively).
    """
    global _TYPE_TABLE
    if _TYPE_TABLE is None:
        _TYPE_TABLE = _TypeTable()
    table = _TYPE_TABLE

    def bad(text: str) -> DumpError:
        return DumpError(f"{path}: corrupt: {text}")

    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or type(data.get("root_index")) is not int:
        raise bad("not a TVM node graph (needs \"root_index\" and \"nodes\")")
    nodes = data["nodes"]
    count = len(nodes)

    def index_ok(value: Any) -> bool:
        return type(value) is int and 0 <= value < count

    children: list[list[int]] = []
    for i, node in enumerate(nodes):
        if not isinstance(node, dict) or not isinstance(node.get("type"), str):
            raise bad(f"node {i} has no type key")
        kind = table.kind(node["type"])
        if kind is None:
            raise bad(f"node {i} has type {node['type']!r}, which this TVM does not know")
        what, fields = kind
        payload = node.get("data")
        if what in ("seq", "map"):
            if not isinstance(payload, list):
                raise bad(f"node {i} ({node['type']}) has no list of node indices")
            refs = payload
        elif what == "object":
            if not isinstance(payload, dict):
                raise bad(f"node {i} ({node['type']}) has no field object")
            refs = [payload[f] for f, _ in fields if f in payload]
        else:
            refs = []
        for ref in refs:
            if not index_ok(ref):
                raise bad(f"node {i} ({node['type']}) refers to node {ref!r}, not an index below {count}")
        children.append(refs)
    for i, node in enumerate(nodes):  # null where TVM requires a node: its passes would crash on it
        kind = table.kind(node["type"])
        if kind[0] != "object":
            continue
        for field, need in kind[1]:
            ref = node["data"].get(field)
            if need is None or ref is None:
                continue
            targets = [ref] if need == "node" else (nodes[ref].get("data") or [] if table.kind(nodes[ref]["type"])[0]
                                                    == "seq" else [])
            if any(nodes[t]["type"] == "None" for t in targets if index_ok(t)):
                raise bad(f"node {i} ({node['type']}) has a null {field!r}, where TVM requires a node")
    if not index_ok(data["root_index"]):
        raise bad(f"root_index {data['root_index']!r} is not a node index below {count}")
    # Iterative depth-first search: colour 1 = on the current path, 2 = done (depth known).
    state = [0] * count
    depth = [0] * count
    stack = [(data["root_index"], 0)]
    state[data["root_index"]] = 1
    while stack:
        node, next_child = stack[-1]
        kids = children[node]
        if next_child < len(kids):
            stack[-1] = (node, next_child + 1)
            kid = kids[next_child]
            if state[kid] == 1:
                raise bad(f"node {kid} ({nodes[kid]['type']}) refers back to itself through its fields "
                          f"(a cycle)")
            if state[kid] == 0:
                state[kid] = 1
                stack.append((kid, 0))
            continue
        stack.pop()
        state[node] = 2
        depth[node] = 1 + max((depth[k] for k in kids), default=0)
        if depth[node] > MAX_JSON_DEPTH:
            raise bad(f"node graph deeper than {MAX_JSON_DEPTH} levels (TVM would overflow its stack reading it)")


def _load_module_json(path: Path) -> "tvm.IRModule":
    if not path.is_file():
        raise DumpError(f"{path}: missing (stage module JSON listed in index.json)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DumpError(f"{path}: corrupt: not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DumpError(f"{path}: corrupt: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise DumpError(f"{path}: corrupt: JSON nested too deeply") from None
    check_node_graph(data, path)  # what TVM would crash on (a cycle, a bad index) is refused first
    try:
        mod = tvm.ir.load_json(text)
    except Exception as exc:
        raise DumpError(f"{path}: corrupt: tvm.ir.load_json failed: {_capture.short_tvm_message(exc)}") from None
    if not isinstance(mod, tvm.IRModule):
        raise DumpError(f"{path}: corrupt: holds a {type(mod).__name__}, not an IRModule")
    return mod


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
                          if p["shape"] is not None else None, bool(p["is_output"])) for p in data]
    except (KeyError, TypeError, ValueError):
        raise DumpError(f"{path}: corrupt: field 'params' is malformed") from None


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


# ---------------------------------------------------------------------------------------------
# resume
@tvm.ir.instrument.pass_instrument
class _SkipAndCapture(_capture.PassCapture):
    """Skip the first leaf passes (by expected name) and capture the rest like ``PassCapture``.

    ``should_run`` is called in pre-order: a pass whose name is the next expected one is skipped;
    any other pass is taken to be a wrapper (``sequential``, ``_pipeline``...) and runs.  A skipped
    child counts as a child, so a wrapper whose children were all skipped is not mistaken for a leaf.
    """

    def __init__(self, skip: Sequence[str]):
        self.expected = list(skip)
        self.skipped = 0
        self.mismatch: str | None = None
        super().__init__()

    def should_run(self, mod, info) -> bool:
        if self.skipped < len(self.expected) and info.name == self.expected[self.skipped]:
            self.skipped += 1
            if self._stack:
                self._stack[-1].has_children = True
            return False
        return True

    def run_after_pass(self, mod, info) -> None:
        frame_is_leaf = self._stack and not self._stack[-1].has_children
        if frame_is_leaf and self.skipped < len(self.expected) and self.mismatch is None:
            self.mismatch = (f"pass {info.name} ran where the dump's pipeline has "
                             f"{self.expected[self.skipped]}")
        super().run_after_pass(mod, info)


def _finish_pipeline(mod: "tvm.IRModule", target: Any, skip: Sequence[str], what: str):
    """Run ``tvm.build`` on ``mod`` skipping the leaf passes ``skip``; return (lib, stages, seconds)."""
    inst = _SkipAndCapture(skip)
    start = time.perf_counter()
    try:
        with tvm.transform.PassContext(instruments=[inst]):
            lib = tvm.tirx.build(mod, target=target)  # what tvm.build runs, without its warning
    except Exception as exc:
        failed = inst._stack[-1].name if inst._stack else None
        where = f" in pass {failed}" if failed else ""
        raise BuildError(f"resuming the pipeline from {what} failed{where}: "
                         f"{_capture.short_tvm_message(exc)}") from exc
    seconds = time.perf_counter() - start
    if inst.mismatch or inst.skipped != len(skip):
        detail = inst.mismatch or f"only {inst.skipped} of the {len(skip)} earlier passes were found"
        raise BuildError(f"cannot resume from {what}: this TVM's pipeline differs from the dump's ({detail})")
    return lib, inst.stages, seconds


#: Arguments for pass factories that need one (the values the default pipeline uses).
_PASS_ARGS = {"NarrowDataType": (32,), "ThreadSync": ("shared",)}
_PASS_SPEC = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?:\((.*)\))?\s*$")


def resolve_pass(spec: str, target: Any = None) -> "tvm.transform.Pass":
    """Make the pass named ``spec`` (``"tirx.FlattenBuffer"``, ``"FlattenBuffer"``, ``"s_tir.ThreadSync(warp)"``).

    Passes are looked up in ``tvm.tirx.transform`` and ``tvm.s_tir.transform``.  An argument in
    parentheses is given to the factory (an int when it is one); without it, passes that need one
    get the default pipeline's value (``NarrowDataType(32)``, ``ThreadSync(shared)``,
    ``BindTarget(<target>)``).

    Raises
    ------
    UnknownPassError
        For an unknown or ambiguous name.
    """
    match = _PASS_SPEC.match(spec)
    if not match:
        raise UnknownPassError(f"bad pass name {spec!r}: expected e.g. tirx.FlattenBuffer or s_tir.ThreadSync(warp)")
    name, arg = match.group(1), match.group(2)
    namespaces = {"tirx": tvm.tirx.transform, "s_tir": tvm.s_tir.transform}
    if "." in name:
        ns, short = name.split(".", 1)
        if ns not in namespaces:
            raise UnknownPassError(f"unknown pass {spec!r}: the namespace must be tirx or s_tir")
        found = [(ns, getattr(namespaces[ns], short, None))]
    else:
        short = name
        found = [(ns, getattr(m, short, None)) for ns, m in namespaces.items()]
    found = [(ns, f) for ns, f in found if callable(f) and short[:1].isupper() and not isinstance(f, type)]
    if not found:
        raise UnknownPassError(f"unknown pass {spec!r}: no such pass in tvm.tirx.transform or tvm.s_tir.transform")
    if len(found) > 1:
        raise UnknownPassError(f"ambiguous pass {spec!r}: say " + " or ".join(f"{ns}.{short}" for ns, _ in found))
    ns, factory = found[0]
    if arg is not None and arg.strip():
        args: tuple = (int(arg) if arg.strip().lstrip("-").isdigit() else arg.strip().strip("'\""),)
        if short == "BindTarget":
            try:
                args = (tvm.target.Target(args[0]),)
            except Exception as exc:
                raise UnknownPassError(f"bad target for pass {spec!r}: {_capture.short_tvm_message(exc)}") from None
    elif short == "BindTarget":
        args = (target,)
    else:
        args = _PASS_ARGS.get(short, ())
    try:
        made = factory(*args)
    except Exception as exc:
        raise UnknownPassError(f"cannot make pass {spec!r}: {_capture.short_tvm_message(exc)}") from None
    if not isinstance(made, tvm.transform.Pass):
        raise UnknownPassError(f"{ns}.{short} is not a pass")
    return made


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
