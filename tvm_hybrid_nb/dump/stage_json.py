"""A stage's module JSON: the node-graph check that refuses what ``tvm.ir.load_json`` would crash on,
and reading the file into an ``IRModule``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tvm

from .. import capture as _capture
from ..errors import DumpError

__all__ = ["MAX_JSON_DEPTH", "check_node_graph"]


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
