"""Evidence that a GPU schedule reads another thread's ``local`` memory: a buffer in scope ``local``
is one copy per thread for the whole kernel, so a thread that reads an element it never writes reads
an uninitialised register, whatever another thread wrote there.  Found by evaluating the scheduled
kernel's loop nests, block bindings, predicates and indices over every thread with numpy (integer
index arithmetic only), independently of the emulation.  Also the evidence that a schedule leaves
host code dereferencing device memory (loops outside every thread launch)."""
from __future__ import annotations

import numpy as np

from .codegen.names import _key, _type_key

#: Thread tags whose loops give each iteration its own thread (its own local memory).
_THREAD_TAGS = ("threadIdx", "blockIdx", "vthread")
#: The most loop iterations around one block that are enumerated.
_MAX_ITERATIONS = 1 << 20


class _NoEvidence(Exception):
    """A construct the evaluation does not cover: nothing is claimed."""


def thread_local_evidence(func, rule: str = "dlight's GPU schedule") -> str | None:
    """Where a thread of ``func`` (a scheduled PrimFunc with blocks: stage 0) reads an element of a
    kernel-wide ``local`` buffer that the same thread writes nowhere, while another thread writes it:
    the sentence that says so, else None.  Reads in an arm of a ``Select`` or ``if_then_else`` and in
    a branch are left out (they may not be used or run); every write counts, conditional or not."""
    try:
        root = func.body
        if _type_key(root) != "s_tir.SBlockRealize":
            return None
        local = {_key(b) for b in root.block.alloc_buffers if b.scope() == "local"}
        if not local:
            return None
        accesses: list[tuple] = []
        _walk(root.block.body, [], local, accesses)
        return _cross_thread_read(accesses, rule)
    except Exception:  # noqa: BLE001 - _NoEvidence, or an evaluation that fails: nothing is proved
        return None


def _walk(stmt, loops: list, local: set, out: list) -> None:
    key = _type_key(stmt)
    if key == "tirx.For":
        if stmt.step is not None and _const(stmt.step) != 1:
            raise _NoEvidence
        binding = stmt.thread_binding
        tag = str(binding.thread_tag) if binding is not None else ""
        _walk(stmt.body, loops + [(stmt.loop_var, _const(stmt.min), _const(stmt.extent),
                                   tag if tag.startswith(_THREAD_TAGS) else "")], local, out)
    elif key == "tirx.SeqStmt":
        for s in stmt.seq:
            _walk(s, loops, local, out)
    elif key == "s_tir.SBlockRealize":
        block = stmt.block
        if block.alloc_buffers and any(b.scope() == "local" for b in block.alloc_buffers):
            raise _NoEvidence  # a block's own local buffer: a copy per block instance
        found: list = []
        for part in (block.init, block.body):
            if part is not None:
                _accesses(part, local, True, found)
        if found:
            out.append((block.name_hint, list(loops), list(block.iter_vars), list(stmt.iter_values),
                        stmt.predicate, found))
        if any(_type_key(n) == "s_tir.SBlockRealize" for n in _children(block.body)):
            raise _NoEvidence  # nested blocks: their loops are not enumerated here
    elif key in ("tirx.AttrStmt", "tirx.Bind", "tirx.AllocBuffer", "tirx.DeclBuffer"):
        raise _NoEvidence
    elif key == "tirx.Evaluate":
        return
    else:
        if _mentions(stmt, local):
            raise _NoEvidence


def _children(stmt):
    import tvm_ffi

    found = []
    tvm_ffi.structural_walk(stmt, found.append, order="post")
    return found


def _mentions(node, local: set) -> bool:
    return any(_type_key(n) in ("ir.TensorLoad", "tirx.BufferStore") and _key(_buffer(n)) in local
               for n in _children(node))


def _buffer(node):
    return node.source if _type_key(node) == "ir.TensorLoad" else node.buffer


def _accesses(node, local: set, certain: bool, out: list) -> None:
    """``(write, buffer, indices, certain)`` of every access of a ``local`` buffer in a block body:
    ``certain`` is false under a branch or an arm that may not be taken."""
    key = _type_key(node)
    if key == "tirx.BufferStore":
        if _key(node.buffer) in local:
            out.append((True, node.buffer, list(node.indices)))
        _accesses(node.value, local, certain, out)
        for i in node.indices:
            _accesses(i, local, certain, out)
        return
    if key == "ir.TensorLoad":
        if _key(node.source) in local and certain:
            out.append((False, node.source, list(node.indices)))
        for i in node.indices:
            _accesses(i, local, certain, out)
        return
    if key == "prim.Select":
        _accesses(node.condition, local, certain, out)
        _accesses(node.true_value, local, False, out)
        _accesses(node.false_value, local, False, out)
        return
    if key == "ir.Call" and str(getattr(node.op, "name", "")) == "tirx.if_then_else":
        _accesses(node.args[0], local, certain, out)
        _accesses(node.args[1], local, False, out)
        _accesses(node.args[2], local, False, out)
        return
    if key == "tirx.IfThenElse":
        _accesses(node.condition, local, certain, out)
        _accesses(node.then_case, local, False, out)
        if node.else_case is not None:
            _accesses(node.else_case, local, False, out)
        return
    if key in ("tirx.For", "tirx.SeqStmt", "tirx.Bind", "ir.Let", "s_tir.SBlockRealize", "tirx.While"):
        if _mentions(node, local):
            raise _NoEvidence  # loops inside the block: not enumerated
        return
    if key == "ir.Var" or key.endswith("Imm"):
        return
    for field in ("a", "b", "value", "condition"):
        child = getattr(node, field, None)
        if child is not None and not isinstance(child, (int, float, str)):
            _accesses(child, local, certain, out)
    if key == "ir.Call":
        for arg in node.args:
            _accesses(arg, local, certain, out)


def _const(expr) -> int:
    if _type_key(expr) != "ir.IntImm":
        raise _NoEvidence
    return int(expr.value)


def _cross_thread_read(accesses: list, rule: str) -> str | None:
    extents: dict[str, int] = {}  # thread tag -> extent, the same in every nest
    for _block, loops, *_rest in accesses:
        bound = [tag for *_r, tag in loops if tag]
        if len(set(bound)) != len(bound):
            raise _NoEvidence  # a thread bound twice in one nest
        for _var, lo, extent, tag in loops:
            if tag and (lo != 0 or extents.setdefault(tag, extent) != extent):
                raise _NoEvidence
    tags = sorted(extents)
    written: dict = {}   # (buffer, thread) -> set of index tuples
    writer: dict = {}    # (buffer, index) -> (block, thread)
    reads = []
    for block, loops, iter_vars, iter_values, predicate, found in accesses:
        present = {tag: var for var, _lo, _extent, tag in loops if tag}
        # A nest outside a threadIdx (or vthread) loop runs in every one of those threads of its block.
        missing = [k for k, tag in enumerate(tags) if tag not in present]
        if any(tags[k].startswith("blockIdx") for k in missing):
            raise _NoEvidence  # outside the grid around the others: another kernel, or the host
        env = _iterations(loops)
        keep = np.broadcast_to(np.asarray(_eval(predicate, env), dtype=bool), _shape(env)).reshape(-1)
        for iv, value in zip(iter_vars, iter_values):
            env[_key(iv.var)] = _eval(value, env)

        def flat(value):
            return np.broadcast_to(value, _shape(env)).reshape(-1)[keep]

        rows = int(keep.sum())
        thread = np.stack([flat(env[_key(present[tag])]) if tag in present else np.zeros(rows, np.int64)
                           for tag in tags] or [np.zeros(rows, np.int64)], axis=1)[:, :len(tags)]
        for write, buffer, indices in found:
            index = np.stack([flat(_eval(i, env)) for i in indices] or [np.zeros(rows, np.int64)], axis=1)
            every, index = _in_every_thread(thread, index, missing, [extents[tags[k]] for k in missing])
            data = _key(buffer)
            for t, i in zip(map(tuple, every.tolist()), map(tuple, index.tolist())):
                if write:
                    written.setdefault((data, t), set()).add(i)
                    writer.setdefault((data, i), (block, t))
                else:
                    reads.append((block, buffer, t, i))
    for block, buffer, t, i in reads:
        data = _key(buffer)
        if i not in written.get((data, t), ()) and (data, i) in writer:
            other_block, other = writer[(data, i)]
            name = lambda th: ", ".join(f"{tag}={v}" for tag, v in zip(tags, th))  # noqa: E731
            return (f"{rule} reads another thread's local memory: in block \"{block}\", thread ({name(t)}) "
                    f"reads {buffer.name}[{', '.join(map(str, i))}], which it never writes (thread "
                    f"({name(other)}) writes that element of its own copy, in block \"{other_block}\"): a "
                    f"local buffer is one copy per thread, so on the GPU this reads an uninitialised register. "
                    f"Found by evaluating the scheduled kernel's loops, block bindings and predicates over "
                    f"every thread, not by the emulation.")
    return None


def _in_every_thread(thread: np.ndarray, index: np.ndarray, missing: list, extents: list) -> tuple:
    """The rows of ``(thread, index)`` repeated for every value of the thread columns ``missing``."""
    for k, extent in zip(missing, extents):
        thread = np.repeat(thread, extent, axis=0)
        thread[:, k] = np.tile(np.arange(extent), len(thread) // max(extent, 1))
        index = np.repeat(index, extent, axis=0)
    return thread, index


def _iterations(loops: list) -> dict:
    total = 1
    env = {}
    for axis, (var, lo, extent, _tag) in enumerate(loops):
        total *= max(extent, 0)
        shape = [1] * len(loops)
        shape[axis] = max(extent, 0)
        env[_key(var)] = np.arange(lo, lo + extent, dtype=np.int64).reshape(shape)
    if total > _MAX_ITERATIONS:
        raise _NoEvidence
    env["__shape__"] = tuple(max(e, 0) for _v, _l, e, _t in loops)
    return env


def _shape(env: dict) -> tuple:
    return env["__shape__"]


_BINARY = {
    "prim.Add": np.add, "prim.Sub": np.subtract, "prim.Mul": np.multiply,
    "prim.FloorDiv": np.floor_divide, "prim.FloorMod": np.mod, "prim.Min": np.minimum, "prim.Max": np.maximum,
    "prim.LT": np.less, "prim.LE": np.less_equal, "prim.GT": np.greater, "prim.GE": np.greater_equal,
    "prim.EQ": np.equal, "prim.NE": np.not_equal, "prim.And": np.logical_and, "prim.Or": np.logical_or,
}


def _eval(expr, env: dict):
    """Integer value of a TIR index expression over the loop arrays of ``env``."""
    key = _type_key(expr)
    if key == "ir.IntImm":
        return np.int64(expr.value)
    if key == "ir.Var":
        if _key(expr) not in env:
            raise _NoEvidence
        return env[_key(expr)]
    if key in _BINARY:
        a, b = _eval(expr.a, env), _eval(expr.b, env)
        if key in ("prim.FloorDiv", "prim.FloorMod") and np.any(np.asarray(b) == 0):
            raise _NoEvidence
        return _BINARY[key](a, b)
    if key in ("prim.Div", "prim.Mod"):
        a, b = _eval(expr.a, env), _eval(expr.b, env)
        if np.any(np.asarray(b) == 0):
            raise _NoEvidence
        q = np.trunc(np.asarray(a, np.float64) / b).astype(np.int64)  # small index values: exact
        return q if key == "prim.Div" else a - q * b
    if key == "prim.Not":
        return np.logical_not(_eval(expr.a, env))
    if key == "prim.Select":
        return np.where(_eval(expr.condition, env), _eval(expr.true_value, env), _eval(expr.false_value, env))
    if key == "prim.Cast" and str(expr.ty.dtype).startswith(("int", "uint", "bool")):
        return _eval(expr.value, env)
    raise _NoEvidence


#: The sanitizers' words for host code dereferencing device memory (``runtime.host_device_access``).
HOST_ACCESS = "device memory, outside any kernel launch"


def host_access_evidence(scheduled, target) -> str | None:
    """TVM's own evidence for a host access of device memory: the scheduled PrimFunc's loads and stores
    of global memory outside every thread launch (read from the TIR, not the emulation), in a kernel
    ``tvm.compile`` builds for the GPU target all the same.  None where TVM refuses to build it."""
    import tvm

    from .codegen.analysis import host_device_accesses

    names = sorted(set(host_device_accesses(scheduled.body).values()))
    if not names:
        return None
    try:
        tvm.tirx.build(tvm.IRModule({"main": scheduled}), target=target)
    except Exception:  # noqa: BLE001 - TVM refuses it: the emulation's alarm is the only word
        return None
    return (f"the schedule leaves code that accesses {', '.join(names)} (device memory) outside every thread "
            f"launch, and TVM builds it for {target.kind.name} with those loops on the host, which cannot "
            f"dereference device memory")
