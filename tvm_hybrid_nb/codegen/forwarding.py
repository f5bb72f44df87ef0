"""What the dependence test reads through: loads of a one-element buffer that the iteration stored
once before them, as the value stored (:func:`forward_scalars`), and the integer bindings made
before the loop that it reads (:func:`bindings_read`).  The emitted script is unchanged: only the
proof that iterations touch their own elements reads through."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from .analysis import walk_typed
from .names import _dtype, _key, _type_key


def forward_scalars(acc) -> None:
    """Read the loads of one-element buffers that an iteration stores once, before them, as the
    values stored: TVM's GPU scan (``topi.gpu.scan``, cumsum and cumprod) keeps each thread's
    start and end in local scalars and indexes the output with them
    (``out[bx * 128 + end[0] - 1]``), which no index test can bound otherwise.  A buffer qualifies
    where its one store, outside the body's inner loops, comes before every load of it under the
    same guards or more (so each load reads that store's value, whatever the buffer's scope), and
    stores an expression of the iteration's variables, pure calls and such scalars.  The loads in
    the accesses and guards become variables bound to those values.  ``acc``: the
    :class:`~.dependence._LoopAccesses` of a loop body, after its walk; changed in place."""
    writes: dict[int, list[int]] = {}  # by the storage written (any view of it)
    for position, (root, _, is_write, _) in enumerate(acc.accesses):
        if is_write:
            writes.setdefault(root, []).append(position)
    scalars: dict[int, object] = {}  # buffer key -> the variable its loads become
    forwarded: list[tuple] = []  # (bindings before its store, variable, value)

    def replaced(expr):
        return tvm_ffi.structural_map(expr, (tvm.ir.expr.TensorLoad, lambda load: scalars.get(_key(load.source), load)))

    def forwardable(value) -> bool:
        ok = [True]

        def visit(node):
            if isinstance(node, tvm.ir.expr.TensorLoad) and _key(node.source) not in scalars:
                ok[0] = False
            elif isinstance(node, tvm.ir.expr.Call):
                effect = node.op.get_attr("TCallEffectKind") if isinstance(node.op, tvm.ir.Op) else None
                ok[0] = ok[0] and effect is not None and int(effect) <= 1  # pure, or an annotation
            return not ok[0]

        walk_typed(value, ("ir.TensorLoad", "ir.Call"), visit, order="pre")
        return ok[0]

    for position in sorted(acc.stores):
        root, buf_key, _, _ = acc.accesses[position]
        value, loops, binds_before = acc.stores[position]
        buf = acc.buffers.get(buf_key)
        if buf is None or writes.get(root) != [position] or loops or not forwardable(value):
            continue
        if not all(_type_key(dim) == "ir.IntImm" and int(dim.value) == 1 for dim in buf.shape):
            continue
        store_guards = acc.guards[position]
        reads = [p for p, (other, _, is_write, _) in enumerate(acc.accesses) if other == root and not is_write]
        if not all(p > position and len(acc.guards[p]) >= len(store_guards)
                   and all(a.same_as(b) for a, b in zip(acc.guards[p], store_guards)) for p in reads):
            continue
        var = tirx.Var(f"{buf.name}_stored", _dtype(value))
        forwarded.append((binds_before, var, replaced(value)))
        scalars[buf_key] = var
    if scalars:
        # Each variable bound where its store is, so bindings after it (CommonSubexprElim's) read it.
        binds = []
        for position in range(len(acc.binds) + 1):
            binds.extend((var, value) for before, var, value in forwarded if before == position)
            if position < len(acc.binds):
                binds.append((acc.binds[position][0], replaced(acc.binds[position][1])))
        acc.binds = binds
        acc.accesses = [(root, key, is_write, [replaced(i) for i in indices])
                        for root, key, is_write, indices in acc.accesses]
        acc.guards = [tuple(replaced(g) for g in guards) for guards in acc.guards]


def bindings_read(loop, bindings) -> list:
    """Of ``bindings`` made before ``loop``, those its extent and body read, with those they read, in
    the order they were made."""
    if not bindings:
        return []
    free = {_key(v) for v in tvm.tirx.analysis.undefined_vars(loop.body)} | {
        _key(v) for v in tvm.tirx.analysis.undefined_vars(loop.extent)}
    needed = []
    for var, value in reversed(bindings):
        if _key(var) in free:
            needed.append((var, value))
            free |= {_key(v) for v in tvm.tirx.analysis.undefined_vars(value)}
    return needed[::-1]
