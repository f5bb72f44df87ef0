"""Fast mode: a perfect loop nest's reduction loops moved inside its spatial loops (an interchange).

MetaSchedule's CPU tiling (``SSRSRS``) leaves small serial spatial loops (an output tile's rows and
columns) inside the reduction loops: every reduction step then walks the whole tile, one output
element at a time, and the tile's accumulator is a different strided view at each step.  Moved
outside the reduction loops, the spatial loops leave each accumulator element summed by one
uninterrupted run of reduction steps, which fast mode holds in one contiguous array (see
:mod:`.memory`'s held views) instead of rereading and rewriting memory at every step.

The move is exact, not a reordering of sums: in a nest whose body writes one buffer at one index
that names every spatial loop and no reduction loop, and reads that buffer only there, different
iterations of the spatial loops touch different elements, and each element's reduction steps keep
their order.  The proof is made here on the TIR, before planning; the planner and the emitter see
the interchanged nest as any other.
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from .analysis import _step, walk_typed
from .names import _dtype, _key, _type_key

#: Loop kinds that run one iteration after another in the IR (serial, unrolled).
_ORDERED_KINDS = (int(tirx.ForKind.SERIAL), int(tirx.ForKind.UNROLLED))
#: Statements a nest's body may hold for the proof (anything else: no interchange).
_BODY_STATEMENTS = ("tirx.SeqStmt", "tirx.BufferStore", "tirx.IfThenElse", "s_tir.SBlockRealize", "tirx.Bind")


def reductions_inside(func) -> tuple[object, list[str]]:
    """``func`` with the spatial loops of each perfect nest of ordered loops moved outside its
    reduction loops where that is proven exact (see the module docstring), and one note per moved
    nest.  ``func`` itself when nothing moves."""
    roots = _storage_roots(func.body)
    if roots is None:
        return func, []
    notes: list[str] = []
    made: set[int] = set()

    def visit(loop):
        if loop.__chandle__() in made:
            return loop
        chain = _chain(loop)
        if sum(_extent(member) != 1 for member in chain) < 2:
            return loop
        order = _interchanged(chain, roots)
        if order is None:  # the loops inside share its body: their nests are not asked again
            made.update(member.__chandle__() for member in chain)
            return loop
        order, note = order
        body = chain[-1].body
        for member in reversed(order):
            body = tirx.For(member.loop_var, member.min, member.extent, member.kind, body, member.thread_binding,
                            member.annotations, member.step)
            made.add(body.__chandle__())
        notes.append(note)
        return body

    changed = tvm_ffi.structural_map(func.body, (tirx.For, visit), order="pre")
    if not notes:
        return func, []
    return tirx.PrimFunc(func.params, changed, func.ret_type, func.attrs), notes


def _storage_roots(body) -> dict[int, int] | None:
    """The buffer (by key) whose storage each buffer declared over another's data views (0.27's
    ``DeclBuffer`` over ``buffer_data(B)``), or None where memory may be reached otherwise: an
    element's address taken, a pointer bound, a buffer declared over a pointer, a matched region."""
    roots: dict[int, int] = {}
    unclear = [False]

    def visit(node):
        key = _type_key(node)
        if key == "ir.Call":
            name = str(getattr(node.op, "name", ""))
            unclear[0] = unclear[0] or name in ("tirx.address_of", "tirx.tvm_access_ptr")
        elif key == "tirx.Bind":
            unclear[0] = unclear[0] or _dtype(node.value) == "handle"
        elif key == "s_tir.SBlock":
            unclear[0] = unclear[0] or len(node.match_buffers) > 0
        elif key == "tirx.DeclBuffer":
            data = node.data
            source = data.args[0] if data is not None and _type_key(data) == "ir.Call" and data.args else None
            if source is not None and _type_key(source) == "ir.TensorLoad":
                source = source.source
            if data is not None and not hasattr(source, "shape"):
                unclear[0] = True
            elif source is not None:
                roots[_key(node.buffer)] = roots.get(_key(source), _key(source))
        return unclear[0]

    walk_typed(body, ("ir.Call", "tirx.Bind", "s_tir.SBlock", "tirx.DeclBuffer"), visit, order="pre")
    return None if unclear[0] else roots


def _chain(loop) -> list:
    """The perfect nest of ordered loops that starts at ``loop`` (each one's body the next loop)."""
    chain = []
    node = loop
    while (_type_key(node) == "tirx.For" and int(node.kind) in _ORDERED_KINDS and node.thread_binding is None
           and (node.step is None or (_type_key(node.step) == "ir.IntImm" and int(node.step.value) == 1))):
        chain.append(node)
        node = node.body
    return chain


def _extent(loop) -> int | None:
    return int(loop.extent.value) if _type_key(loop.extent) == "ir.IntImm" else None


def _interchanged(chain: list, roots: dict[int, int]) -> tuple[list, str] | None:
    """The new order of ``chain`` (spatial loops first, each group in its order) and its note, or None
    when nothing moves or the move is not proven exact."""
    keys = {_key(loop.loop_var) for loop in chain}
    for loop in chain:  # a rectangular nest: no bound names another loop of the nest
        if any(_key(v) in keys for v in tvm.tirx.analysis.undefined_vars(tirx.Evaluate(loop.min + loop.extent))):
            return None
    access = _one_accumulator(chain[-1].body, roots)
    if access is None:
        return None
    buf, indices = access
    strides = _flat_strides(buf, indices, chain)
    if strides is None:
        return None
    spatial = [loop for loop in chain if strides[_key(loop.loop_var)]]
    reduction = [loop for loop in chain if not strides[_key(loop.loop_var)] and _extent(loop) != 1]
    if not spatial or not reduction or not _one_element_each(spatial, strides):
        return None
    first_reduction = chain.index(reduction[0])
    moved = [loop for loop in chain[first_reduction:] if strides[_key(loop.loop_var)] and _extent(loop) != 1]
    if not moved:
        return None
    order = [loop for loop in chain if strides[_key(loop.loop_var)]]
    order += [loop for loop in chain if not strides[_key(loop.loop_var)]]
    passed = [loop for loop in reduction if chain.index(loop) < chain.index(moved[-1])]
    note = (f"loop{'s' if len(moved) > 1 else ''} {', '.join(str(m.loop_var.name) for m in moved)} moved outside "
            f"reduction loop{'s' if len(passed) > 1 else ''} "
            f"{', '.join(str(r.loop_var.name) for r in passed)}: each element of {buf.name} gets its sum "
            f"in one run, in the IR's order")
    return order, note


def _one_accumulator(body, roots: dict[int, int]) -> tuple | None:
    """``(buffer, indices)`` when ``body`` writes one buffer, at one index (block iterators and
    bindings replaced by their values), reads it only there, and calls nothing impure; else None."""
    values: dict[int, object] = {}
    stores: list = []
    loads: list = []
    ok = [True]

    def visit(node):
        key = _type_key(node)
        if key == "s_tir.SBlockRealize":
            block = node.block
            if len(block.alloc_buffers) or len(block.match_buffers):
                ok[0] = False
            for iv, value in zip(block.iter_vars, node.iter_values):
                values[_key(iv.var)] = value
        elif key == "tirx.Bind":
            values[_key(node.var)] = node.value
        elif key == "tirx.BufferStore":
            stores.append(node)
        elif key == "ir.TensorLoad":
            loads.append(node)
        elif key == "ir.Call":
            effect = node.op.get_attr("TCallEffectKind") if isinstance(node.op, tvm.ir.Op) else None
            ok[0] = ok[0] and effect is not None and int(effect) <= 1  # pure, or an annotation
        elif key.startswith(("tirx.", "s_tir.")) and key not in _BODY_STATEMENTS and key != "s_tir.SBlock":
            ok[0] = False  # a loop, an allocation, an attribute...: outside what the proof covers
        return not ok[0]

    walk_typed(body, ("s_tir.SBlockRealize", "s_tir.SBlock", "tirx.Stmt", "ir.TensorLoad", "ir.Call"), visit,
               order="pre")
    if not ok[0] or not stores:
        return None

    def resolved(expr):
        for _ in range(4):  # a binding's value may name another binding or a block iterator
            expr = tvm_ffi.structural_map(expr, (tvm.ir.Var, lambda v: values.get(_key(v), v)))
        return tvm.sym.Analyzer().simplify(expr)

    buf = stores[0].buffer
    data = roots.get(_key(buf), _key(buf))
    written = list(stores[0].indices)
    indices = [resolved(i) for i in written]

    def same(other) -> bool:  # the same index as the first store's (the same names mean the same values)
        return len(other) == len(written) and all(
            tvm_ffi.structural_equal(a, b) or tvm_ffi.structural_equal(resolved(a), c)
            for a, b, c in zip(other, written, indices))

    for store in stores:
        if roots.get(_key(store.buffer), _key(store.buffer)) != data or not same(store.indices):
            return None
    for load in loads:
        if roots.get(_key(load.source), _key(load.source)) == data and not same(load.indices):
            return None
    if any(_type_key(i) in ("prim.Ramp", "prim.Broadcast") for i in indices):
        return None
    return buf, indices


def _flat_strides(buf, indices, chain) -> dict[int, int] | None:
    """Per loop of ``chain`` (by key), how far the element ``buf[indices]`` moves in row-major order
    when the loop's variable grows by one; None unless the index is affine in the loops with constant
    steps over a buffer of constant shape."""
    shape = [int(d.value) if _type_key(d) == "ir.IntImm" else None for d in buf.shape]
    if None in shape or len(shape) != len(indices):
        return None
    steps = []  # per dimension, the step of each loop of the nest
    for index in indices:
        per_loop = [_step(index, loop.loop_var) for loop in chain]
        if None in per_loop:
            return None
        steps.append(per_loop)
    strides, scale = dict.fromkeys((_key(loop.loop_var) for loop in chain), 0), 1
    for per_loop, size in zip(reversed(steps), reversed(shape)):
        for loop, step in zip(chain, per_loop):
            strides[_key(loop.loop_var)] += step * scale
        scale *= size
    analyzer = tvm.sym.Analyzer()
    for index, per_loop in zip(indices, steps):  # affine: what the steps leave is free of the nest's variables
        rest = index
        for loop, step in zip(chain, per_loop):
            if step:
                rest = rest - step * loop.loop_var
        if any(_key(v) in strides for v in tvm.tirx.analysis.undefined_vars(tirx.Evaluate(analyzer.simplify(rest)))):
            return None
    return strides


def _one_element_each(spatial: list, strides: dict[int, int]) -> bool:
    """Whether distinct iterations of the ``spatial`` loops reach distinct elements: sorted by their
    steps, each step passes every element the smaller ones reach (constant extents only)."""
    reach = 0
    for loop in sorted(spatial, key=lambda lp: abs(strides[_key(lp.loop_var)])):
        extent = _extent(loop)
        if extent is None:
            return False
        step = abs(strides[_key(loop.loop_var)])
        if extent > 1 and step <= reach:
            return False
        reach += step * (extent - 1)
    return True
