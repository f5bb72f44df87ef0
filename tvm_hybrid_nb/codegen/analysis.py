"""Analyses of TIR (no Python ast): lane-axis planning, buffer access counts, GPU block memory,
thread extents, layouts and tree searches.  Whether a loop's iterations are independent is in
:mod:`.dependence`; what lanes may share or privatise is in :mod:`.sharing`, the
ranges a guard lets a loop run over in :mod:`.guards`."""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from .names import _dtype, _is_zero, _key, _type_key, thread_key
from .work import Analyzer

_NODE_CLASSES: dict[str, type] = {}


def registered_node_classes() -> list[type]:
    """The TVM node classes loaded so far that register a type of their own."""
    found, pending = [], [tvm_ffi.Object]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if "__tvm_ffi_type_info__" in cls.__dict__:
            found.append(cls)
    return found


def node_classes(*type_keys: str) -> tuple[type, ...]:
    """The Python classes of TVM node type keys (``"tirx.For"``, ``"ir.Call"``), for typed walks."""
    missing = [k for k in type_keys if k not in _NODE_CLASSES]
    if missing:
        for cls in registered_node_classes():
            _NODE_CLASSES.setdefault(cls.__dict__["__tvm_ffi_type_info__"].type_key, cls)
        unknown = [k for k in missing if k not in _NODE_CLASSES]
        if unknown:
            raise KeyError(f"no TVM node class has the type key {unknown[0]!r}")
    return tuple(_NODE_CLASSES[k] for k in type_keys)


_TYPE_INDICES: dict[tuple, tuple[int, ...]] = {}
_WALK_ORDERS = {"pre": int(tvm_ffi.WalkOrder.PREORDER), "post": int(tvm_ffi.WalkOrder.POSTORDER)}


def walk_typed(root, types: tuple, visit, order: str = "post"):
    """``tvm_ffi.structural_walk`` of ``root`` calling ``visit`` only on the nodes of ``types`` (type
    keys or node classes; subclasses included).  The walk through the other nodes stays in C++: a
    Python callback on every node costs about 0.6 us a node, most of a walk's time.  The classes'
    type indices are looked up once (``structural_walk`` looks them up at every call, ~10 us each)."""
    indices = _TYPE_INDICES.get(types)
    if indices is None:
        from tvm_ffi.core import TypeSchema

        classes = [node_classes(t)[0] if isinstance(t, str) else t for t in types]
        indices = _TYPE_INDICES[types] = tuple(TypeSchema.from_annotation(c).origin_type_index for c in classes)
    return tvm_ffi.structural._ffi_api.StructuralWalk(root, [(i, visit) for i in indices], [], _WALK_ORDERS[order])


# ---------------------------------------------------------------------- fast-mode axis plan
def _step(expr, var) -> int | None:
    """How much ``expr`` changes when ``var`` grows by one, when that is a constant; else None."""
    linear = _linear_step(expr, _key(var))
    if linear is not None:
        return linear
    fresh = tirx.Var("next", _dtype(var))
    bumped, same = Analyzer(), Analyzer()
    bumped.bind(var, fresh + 1)
    same.bind(var, fresh)
    delta = Analyzer().simplify(bumped.simplify(expr) - same.simplify(expr))
    return int(delta.value) if _type_key(delta) == "ir.IntImm" else None


def _linear_step(expr, key: int) -> int | None:
    """:func:`_step` of a sum of integer multiples of variables (most indices), read off the tree;
    None for anything else, which the analyzer decides."""
    kind = _type_key(expr)
    if kind == "ir.Var":
        return 1 if _key(expr) == key else 0
    if kind == "ir.IntImm":
        return 0
    if kind in ("prim.Add", "prim.Sub"):
        a, b = _linear_step(expr.a, key), _linear_step(expr.b, key)
        if a is None or b is None:
            return None
        return a + b if kind == "prim.Add" else a - b
    if kind == "prim.Mul":
        for factor, other in ((expr.a, expr.b), (expr.b, expr.a)):
            if _type_key(factor) == "ir.IntImm":
                step = _linear_step(other, key)
                return None if step is None else int(factor.value) * step
    if not _contains(expr, lambda n: _type_key(n) == "ir.Var" and _key(n) == key, types=("ir.Var",)):
        return 0  # ``k * i`` or ``i // 4`` does not change with ``j``
    return None


def _plan_lane_axes(var, body, axes: range, as_lanes=None) -> dict[int, int]:
    """Array axes for the loops from ``var`` down to the store of its body that runs most often
    (:func:`_hottest_store`), in the order of
    their strides in that store's flattened index (largest first).  ``as_lanes`` (a ``For`` in, a
    bool out) tells the loops that run as lanes: only those take an axis (a loop of one iteration
    or a serial reduction loop would take one from a lanes loop, which then gets the first free
    axis, out of memory order).

    numpy walks an expression's arrays in axis order and merges neighbouring axes whose strides
    chain, so lanes laid out in the store's memory order run as a few long contiguous loops instead
    of many short ones.  Only performance depends on the plan: any axis assignment gives the same
    values.  Loops the store does not move along get no planned axis.
    """
    path = _hottest_store(body, [var], [], as_lanes)
    if path is None:
        return {}
    store, loops, binds = path
    analyzer = Analyzer()
    try:
        for v, value in binds:
            analyzer.bind(v, value, allow_override=True)
        flat = None
        for idx, dim in zip(store.indices, store.buffer.shape):
            if _type_key(idx) == "prim.Ramp":
                idx = idx.base
            elif _type_key(idx) == "prim.Broadcast":
                idx = idx.value
            flat = idx if flat is None else flat * dim + idx
        if flat is None:
            return {}
        flat = analyzer.simplify(flat)
        strides = []
        for position, x in enumerate(loops):
            step = _step(flat, x)
            if step:
                strides.append((-abs(step), position, x))
    except Exception:  # a plan is an optimisation: no plan rather than a failed generation
        return {}
    return {_key(x): axis for axis, (_, _, x) in zip(axes, sorted(strides, key=lambda t: t[:2]))}


def _hottest_store(stmt, loops: list, binds: list, as_lanes=None):
    """The ``BufferStore`` under ``stmt`` that runs most often (the most iterations of the loops
    around it that do not run as lanes; the first in program order of those), with the (non-thread)
    loop variables (those ``as_lanes`` accepts, when given) and the scalar bindings (block
    iterators, ``Bind``) on the way to it.  MetaSchedule's conv tiles first pad a tile of the input
    (one store per tile) and then accumulate into the output 57,624 times in serial loops: laid out
    in the padding's order, the accumulator's lanes ran as runs of 32 contiguous floats instead of
    64."""
    best: list = [None, 0]  # (store, loops, binds), iterations

    def walk(node, loops: list, binds: list, runs: int) -> None:
        key = _type_key(node)
        if key == "tirx.BufferStore":
            if runs > best[1]:
                best[0], best[1] = (node, loops, binds), runs
        elif key == "tirx.SeqStmt":
            for child in node.seq:
                walk(child, loops, binds, runs)
                if _type_key(child) == "tirx.Bind":
                    binds = binds + [(child.var, child.value)]
        elif key == "tirx.For":
            lanes = int(node.kind) != 4 and (as_lanes is None or as_lanes(node))
            extent = int(node.extent.value) if _type_key(node.extent) == "ir.IntImm" else 2
            walk(node.body, loops + [node.loop_var] if lanes else loops, binds, runs if lanes else runs * extent)
        elif key == "s_tir.SBlockRealize":
            block = node.block
            inner = binds + list(zip([iv.var for iv in block.iter_vars], node.iter_values))
            if block.init is not None:
                walk(block.init, loops, inner, runs)
            walk(block.body, loops, inner, runs)
        elif key in ("tirx.AttrStmt", "tirx.While"):
            walk(node.body, loops, binds, runs)
        elif key == "tirx.IfThenElse":
            walk(node.then_case, loops, binds, runs)
            if node.else_case is not None:
                walk(node.else_case, loops, binds, runs)

    walk(stmt, loops, binds, 1)
    return best[0]


def _buffer_access_counts(stmt) -> dict[int, int]:
    """How many loads and stores of each buffer (by key) ``stmt`` holds."""
    counts: dict[int, int] = {}

    def visit(node):
        key = _type_key(node)
        buf = node.source if key == "ir.TensorLoad" else node.buffer if key == "tirx.BufferStore" else None
        if buf is not None:
            counts[_key(buf)] = counts.get(_key(buf), 0) + 1
        return True

    walk_typed(stmt, ("ir.TensorLoad", "tirx.BufferStore"), visit)
    return counts


def allocations_moved_into(loop, block_allocs: dict, counts: dict) -> list:
    """Of ``block_allocs`` (block-allocated buffers by key), those in global or local memory whose
    every access (``counts``: the function's, see :func:`_buffer_access_counts`) is inside ``loop``:
    ``PlanAndUpdateBufferAllocationLocation`` moves their allocation to the lowest common ancestor of
    their accesses, inside the loop, so each iteration of the compiled loop has its own (dlight.cpu's
    reduction temporaries, its padded input)."""
    if not block_allocs:
        return []
    inside = _buffer_access_counts(loop.body)
    return [buf for key, buf in block_allocs.items() if str(buf.scope()) in ("global", "local")
            and inside.get(key, 0) and inside[key] == counts.get(key)]


def grid_loop(attr):
    """The loop over the blocks of a ``thread_extent`` attribute of ``blockIdx`` (after the loops
    bound to blocks were lowered): the same variable, extent and body, as a ``For``."""
    iv = attr.node
    return tirx.For(iv.var, tirx.const(0, _dtype(iv.var)), attr.value, tirx.ForKind.SERIAL, attr.body)


def allocations_in(body) -> dict[int, object]:
    """The allocations of ``body`` (``AllocBuffer`` statements and blocks' ``alloc_buffers``), by buffer key."""
    found: dict[int, object] = {}

    def visit(node):
        key = _type_key(node)
        bufs = [node.buffer] if key == "tirx.AllocBuffer" else list(node.alloc_buffers) if key == "s_tir.SBlock" else []
        for buf in bufs:
            found[_key(buf)] = buf
        return True

    walk_typed(body, ("tirx.AllocBuffer", "s_tir.SBlock"), visit)
    return found


#: The memory scopes of a warp's matrix fragments: CUDA's tensor-core ``wmma.*`` and Metal's
#: ``metal.simdgroup`` (only the intrinsics :mod:`.tensorcore` rewrites touch them).
FRAGMENT_SCOPES = ("wmma.", "metal.simdgroup")


def block_scoped_allocations(func) -> dict[int, object]:
    """The function's allocations that belong to one GPU block: shared memory (``shared*``) and
    per-thread memory (``local*``, a warp's fragments, :data:`FRAGMENT_SCOPES`), by buffer key."""
    return {key: buf for key, buf in allocations_in(func.body).items()
            if str(buf.scope()).startswith(("shared", "local", *FRAGMENT_SCOPES))}


def per_block_memory(shared: dict[int, object], loop_body, counts: dict[int, int]) -> dict[int, object]:
    """The block-scoped allocations that only ``loop_body`` (the body of a loop over a GPU grid)
    touches: shared and per-thread memory belong to one block, so each block (each iteration) has
    its own copy, wherever the IR allocates it."""
    if not shared:
        return {}
    inside = _buffer_access_counts(loop_body)
    return {key: buf for key, buf in shared.items() if inside.get(key, 0) and inside[key] == counts.get(key)}


def _conjuncts(cond) -> list:
    if _type_key(cond) == "prim.And":
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _thread_extents(body) -> dict[str, int]:
    """Constant extent of each thread tag launched in ``body`` (for per-thread memory)."""
    extents: dict[str, int] = {}

    def visit(node):
        key = _type_key(node)
        if key == "tirx.For" and int(node.kind) == 4 and node.thread_binding is not None:
            tag, extent = str(node.thread_binding.thread_tag), node.extent
        elif key == "tirx.AttrStmt" and node.attr_key in ("thread_extent", "virtual_thread"):
            tag, extent = str(node.node.thread_tag), node.value
        else:
            return True
        tag = thread_key(tag)
        if _type_key(extent) == "ir.IntImm":
            extents[tag] = max(extents.get(tag, 0), int(extent.value))
        return True

    walk_typed(body, ("tirx.For", "tirx.AttrStmt"), visit)
    return extents


def launch_extents_touching(body, buf, tag: str = "threadIdx.x") -> set[int | None]:
    """The extents of the ``tag`` launches in ``body`` whose threads touch buffer ``buf`` (a
    variable of buffer type; None for an extent known at run time). A function of several launches,
    before SplitHostDevice, binds a tag differently in each: a tensor-core fragment is one warp of
    its own launch, whatever the others bind."""
    extents: set[int | None] = set()

    def visit(node):
        key = _type_key(node)
        if key == "tirx.For" and int(node.kind) == 4 and node.thread_binding is not None:
            launch_tag, extent = str(node.thread_binding.thread_tag), node.extent
        elif key == "tirx.AttrStmt" and node.attr_key == "thread_extent":
            launch_tag, extent = str(node.node.thread_tag), node.value
        else:
            return None
        if launch_tag == tag and _contains(node.body, lambda n: _type_key(n) == "ir.Var" and n.same_as(buf),
                                           types=("ir.Var",)):
            extents.add(int(extent.value) if _type_key(extent) == "ir.IntImm" else None)
        return None

    walk_typed(body, ("tirx.For", "tirx.AttrStmt"), visit, order="pre")
    return extents


def _injective(shape, strides) -> bool:
    """Whether distinct indices of a buffer with these constant strides reach distinct elements
    (each axis's stride, smallest first, steps past the span of the axes below it)."""
    span = 0
    for dim, stride in sorted(((d, s) for d, s in zip(shape, strides) if d > 1), key=lambda ds: ds[1]):
        if stride <= span:
            return False
        span += (dim - 1) * stride
    return True


def buffer_strides(buf) -> list:
    """The strides of ``buf``'s dimensions in elements: its explicit ones, else row-major."""
    if len(buf.strides):
        return list(buf.strides)
    strides = []
    for axis in range(len(buf.shape)):
        stride = tirx.const(1, "int32")
        for dim in list(buf.shape)[axis + 1:]:
            stride = stride * dim
        strides.append(stride)
    return strides


def match_layout(buf, region) -> list[tuple]:
    """``(variable, value)`` pairs of a ``match_buffer`` view ``buf`` of ``region``: its
    ``elem_offset`` and strides (variables for ``offset_factor``, tensor intrinsics' ``strides=[s0,
    s1]``, or constants) with the values they take from the region's place in its source's layout
    (row-major, or the source's explicit strides)."""
    src = region.source
    strides = buffer_strides(src)
    offset = src.elem_offset if not _is_zero(src.elem_offset) else tirx.const(0, "int32")
    for r, stride in zip(region.region, strides):
        offset = offset + r.min * stride
    return [(buf.elem_offset, offset)] + list(zip(buf.strides, strides[len(strides) - len(buf.strides):]))


def _contiguous_strides(buf) -> bool:
    """Whether explicit strides are just the row-major ones (``strides=(1,)`` on a 1-D buffer)."""
    expected = 1
    for dim, stride in reversed(list(zip(buf.shape, buf.strides))):
        if _type_key(stride) != "ir.IntImm" or int(stride.value) != expected:
            return False
        if _type_key(dim) != "ir.IntImm":
            return False
        expected *= int(dim.value)
    return True


def _contains(node, matches, types: tuple[str, ...] | None = None) -> bool:
    """Whether any node of the tree ``node`` satisfies ``matches`` (the walk stops at the first);
    ``types``: the type keys of the only nodes that may (see :func:`walk_typed`)."""
    def found(n):
        return tvm_ffi.VisitInterrupt(n) if matches(n) else None

    if types is not None:
        return walk_typed(node, types, found, order="pre") is not None
    return tvm_ffi.structural_walk(node, found, order="pre") is not None


def _has_threads(body) -> bool:
    """Whether ``body`` binds a loop or an attribute to a thread (of any extent)."""
    return _contains(body, lambda n: (_type_key(n) == "tirx.For" and int(n.kind) == 4) or (
        _type_key(n) == "tirx.AttrStmt" and n.attr_key in ("thread_extent", "virtual_thread")),
        types=("tirx.For", "tirx.AttrStmt"))


def _adds_lanes(node) -> bool:
    """Whether ``node`` is a loop or a thread binding (each may run as more lanes)."""
    key = _type_key(node)
    return key == "tirx.For" or (key == "tirx.AttrStmt" and node.attr_key in ("thread_extent", "virtual_thread"))


def _is_call_of(node, op_suffix: str) -> bool:
    return _type_key(node) == "ir.Call" and isinstance(node.op, tvm.ir.Op) and node.op.name.endswith(op_suffix)


def _calls_allreduce(block) -> bool:
    """Whether ``block`` reduces with ``tvm_thread_allreduce`` (LowerCrossThreadReduction's output:
    the threads run it together, in lockstep)."""
    return _contains(block.body, lambda n: _is_call_of(n, "tvm_thread_allreduce"), types=("ir.Call",))


def _reads_memory(expr) -> bool:
    """Whether ``expr`` loads from a buffer (so a store may change its value)."""
    return _contains(expr, lambda n: _type_key(n) == "ir.TensorLoad", types=("ir.TensorLoad",))


def _uses_vars(expr, keys: set[int]) -> bool:
    """Whether ``expr`` reads any of the variables ``keys``."""
    return _contains(expr, lambda n: _type_key(n) == "ir.Var" and _key(n) in keys, types=("ir.Var",))


def host_device_accesses(body) -> dict[int, str]:
    """The loads and stores of global memory in ``body`` (a GPU function) that no thread launch
    encloses, by node key -> buffer name: host code, which cannot dereference device memory (a
    dlight ``LowBatchGEMV`` schedule leaves its rf-combine blocks unbound, and TVM builds the kernel
    with those loops on the host)."""
    found: dict[int, str] = {}

    def visit(node):
        key = _type_key(node)
        if key == "tirx.For" and int(node.kind) == 4 and node.thread_binding is not None:
            return True  # device code: not walked
        if key == "tirx.AttrStmt" and node.attr_key in ("thread_extent", "virtual_thread"):
            return True
        if key in ("ir.TensorLoad", "tirx.BufferStore"):
            buf = node.source if key == "ir.TensorLoad" else node.buffer
            if str(buf.scope()) == "global":
                found[_key(node)] = str(buf.name)
        return None

    walk_typed(body, ("tirx.For", "tirx.AttrStmt", "ir.TensorLoad", "tirx.BufferStore"), visit, order="pre")
    return found


def child_statements(node) -> list:
    """The statements directly inside ``node`` (the planner's default walk)."""
    key = _type_key(node)
    if key == "tirx.SeqStmt":
        return list(node.seq)
    if key == "tirx.IfThenElse":
        return [node.then_case, node.else_case]
    if key == "s_tir.SBlockRealize":
        return [node.block.init, node.block.body]
    if key in ("tirx.While", "tirx.AllocBuffer", "tirx.Bind", "tirx.LetStmt", "tirx.AssertStmt",
               "tirx.Allocate", "tirx.AllocateConst"):
        return [getattr(node, "body", None)]
    body = getattr(node, "body", None)
    return [body] if body is not None and not isinstance(body, (list, tuple)) else []
