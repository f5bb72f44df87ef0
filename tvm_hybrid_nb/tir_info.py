"""What the module reads off a kernel's TIR: its outputs, its return value, its names.

:func:`_mark_outputs` marks the buffer parameters the kernel writes (TVM's access analysis, plus
:func:`_written_indirectly`: match_buffer regions, ``masked_store``, packed calls' output
arguments, views at an element's address); :func:`_returned_dtype` is the dtype of a ``tirx.Return``;
:func:`_python_function_name` the kernel's name as a Python identifier; :func:`_select_function`
the PrimFunc that :func:`~tvm_hybrid_nb.module.build` takes from an IRModule.
"""
from __future__ import annotations

import dataclasses

import tvm
import tvm_ffi

from .codegen.names import _packed_function, _type_key
from .errors import BuildError
from .signature import ParamSpec


def _returned_dtype(func) -> str | None:
    """The dtype of the value ``func`` returns (its ``tirx.Return`` statements), or None."""
    if func is None:
        return None
    found: list[str] = []

    def visit(node):
        info = getattr(type(node), "__tvm_ffi_type_info__", None)
        if not found and info is not None and info.type_key == "tirx.Return":
            found.append(str(getattr(node.value.ty, "dtype", "handle")))
        return bool(found)  # pre-order: a true result skips the node's children

    tvm_ffi.structural_walk(func.body, visit, order="pre")
    return found[0] if found else None


def _python_function_name(name: str) -> str:
    import builtins
    import keyword

    from . import runtime
    from .codegen import ascii_identifier

    clean = ascii_identifier(name) or "kernel"
    if clean[0].isdigit():
        clean = "k_" + clean
    if (keyword.iskeyword(clean) or hasattr(builtins, clean) or clean in vars(runtime)
            or clean.startswith("__") or clean == "race_log"):
        clean += "_kernel"
    return clean


def _mark_outputs(params: list[ParamSpec], func) -> list[ParamSpec]:
    """Mark the buffers ``func`` writes as outputs (TVM's own access analysis)."""
    buffers = [p for p in func.params if tvm.tirx.is_buffer_var(p)]
    written: set[int] = set()
    try:
        access = tvm.s_tir._ffi_api.DomainTouchedAccessMap(func)
        for i, buf in enumerate(buffers):
            if buf in access and len(access[buf][1]):
                written.add(i)
    except Exception:  # analysis not applicable: fall back to "the last buffer"
        written = {len(buffers) - 1} if buffers else set()
    indirect = _written_indirectly(func)
    written |= {i for i, buf in enumerate(buffers) if any(buf.same_as(w) for w in indirect)}
    out = []
    buf_index = 0
    for spec in params:
        if spec.is_buffer:
            spec = dataclasses.replace(spec, is_output=buf_index in written)
            buf_index += 1
        out.append(spec)
    return out


#: The runtime functions the emulator knows: which of their arguments (a slice) are outputs.
_PACKED_OUTPUTS = {"tvm.contrib.sort.sort": (1, -2), "tvm.contrib.sort.argsort": (1, -2),
                   "tvm.contrib.sort.topk": (1, -4), "tvm.contrib.sort.argsort_nms": (2, -2)}


def _written_indirectly(func) -> list:
    """Buffers written where the access analysis does not look: through a block's match_buffer (its
    ``T.writes`` regions), ``masked_store``, ``cuda.atomic_add``, the output arguments of packed calls, and buffers
    declared at the address of an element (``address_of(B[i, 0])``, or a pointer bound to one)."""
    found: list = []
    pointers: dict = {}  # pointer variable -> address_of(B[...])
    views: dict = {}  # buffer declared at an element's address -> the buffer of the element
    stored: list = []

    def address(data):
        if isinstance(data, tvm.tirx.Var) and data.__chandle__() in pointers:
            data = pointers[data.__chandle__()]
        if isinstance(data, tvm.ir.Call) and isinstance(data.op, tvm.ir.Op) and data.op.name == "tirx.address_of":
            load = data.args[0]
            return load.buffer if hasattr(load, "buffer") else getattr(load, "source", None)
        return None

    def visit(node):
        info = getattr(type(node), "__tvm_ffi_type_info__", None)
        key = info.type_key if info is not None else ""
        if key == "tirx.Bind" and address(node.value) is not None:
            pointers[node.var.__chandle__()] = node.value
        elif key == "tirx.DeclBuffer" and address(node.data) is not None:
            views[node.buffer.__chandle__()] = address(node.data)
        elif key == "tirx.BufferStore":
            stored.append(node.buffer)
        if isinstance(node, tvm.s_tir.SBlock):
            for region in node.writes:
                found.append(region.source)
        elif isinstance(node, tvm.ir.Call) and isinstance(node.op, tvm.ir.Op):
            if node.op.name == "tirx.masked_store":
                found.append(node.args[0])
            elif node.op.name == "tirx.cuda.atomic_add" and address(node.args[0]) is not None:
                found.append(address(node.args[0]))
            elif (function := _packed_function(node)) in _PACKED_OUTPUTS:
                first, last = _PACKED_OUTPUTS[function]
                for arg in list(node.args)[1 + first:len(node.args) + last]:
                    if isinstance(arg, tvm.ir.Call) and arg.op.name == "tirx.tvm_stack_make_array":
                        found.append(arg.args[0])
        return True

    tvm_ffi.structural_walk(func.body, visit, order="post")  # a Bind before the statements after it
    for buf in stored:
        while buf.__chandle__() in views:  # a view of a view: the buffer it finally points into
            buf = views.pop(buf.__chandle__())
            found.append(buf)
    out = []
    for node in found:
        if isinstance(node, tvm.ir.Call):  # buffer_data(B)
            node = node.args[0]
        out.append(node)
    return out


def _indexing_buffers(func) -> list:
    """The buffers whose loaded values become part of an index of another access of ``func`` (the
    begin and strides of a dynamic slice, a gather's indices), in the order they are met."""
    found: list = []

    def visit(node):
        if _type_key(node) in ("ir.TensorLoad", "tirx.BufferStore"):
            for index in node.indices:
                tvm_ffi.structural_walk(index, lambda n: found.append(n.source)
                                        if _type_key(n) == "ir.TensorLoad" else None, order="pre")

    tvm_ffi.structural_walk(func.body, visit, order="post")
    return found


def _addresses_from_data(func) -> str | None:
    """What of ``func`` reaches memory where its inputs' values say (an index read from a buffer,
    a call given a pointer into TVM's runtime or C), named for an error; None when every address
    it computes depends on sizes and loop variables alone."""
    indexing = _indexing_buffers(func)
    if indexing:
        return f"index read from {indexing[0].name}"

    def hands_a_pointer(node) -> bool:
        return (_type_key(node) == "ir.Call" and isinstance(node.op, tvm.ir.Op) and node.op.name in _RUNTIME_CALLS
                and any(str(getattr(arg, "dtype", "")) == "handle" for arg in list(node.args)[1:]))

    call = tvm_ffi.structural_walk(func.body, lambda n: tvm_ffi.VisitInterrupt(n) if hands_a_pointer(n) else None,
                                   order="pre")
    if call is None:
        return None
    return f"call of {getattr(call.value.args[0], 'value', None) or call.value.op.name}"


#: Calls out of the kernel into code that reads the memory it is given pointers to as it pleases
#: (a C math function given scalars reads none).
_RUNTIME_CALLS = ("tirx.tvm_call_packed", "tirx.call_packed", "tirx.call_extern", "tirx.tvm_call_cpacked")


def _select_function(mod, name: str | None):
    funcs = {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    if not funcs:
        raise BuildError("the IRModule has no PrimFunc to build")
    if name is not None:
        if name not in funcs:
            raise BuildError(f"the IRModule has no PrimFunc named {name!r} (it has: {', '.join(funcs)})")
        return name, funcs[name]
    if len(funcs) > 1:
        raise BuildError(f"the IRModule has {len(funcs)} PrimFuncs ({', '.join(funcs)}): choose one with name=")
    return next(iter(funcs.items()))
