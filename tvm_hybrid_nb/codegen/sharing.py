"""What the lanes of a loop may share or must privatise (TIR analyses, no Python ast): memory that
every block of a grid writes alike (one copy serves them), memory that every iteration writes
before it reads it (a copy per lane makes the iterations independent), and memory that every
iteration of a loop writes alike before reading it (the lanes run in lockstep on one copy)."""
from __future__ import annotations

import tvm
import tvm_ffi

from .analysis import _contains, _is_call_of, walk_typed
from .mustwrite import _POINTER_CALLS, _defined_vars, _mentions, _MustWrite, _NotProven, _uses
from .names import _dtype, _key, _type_key


class _Writes:
    """Every write of one loop body with what decides it: the index, the value, and the conditions,
    loop bounds and block predicates around it; and every scalar binding (for the taint closure)."""

    def __init__(self, roots: dict[int, int]):
        self.roots = dict(roots)
        self.binds: list[tuple[int, list]] = []
        #: (root buffer key, expressions the written element and value depend on, the element's
        #: indices, the expressions its value depends on: the value and the view's placement)
        self.writes: list[tuple[int, list, list, list]] = []
        #: Why no claim is possible (None: none of those constructs).
        self.opaque: str | None = None
        #: Views declared in the body -> what places them (offset, shape, strides).
        self.view_exprs: dict[int, list] = {}
        #: Expression (key) -> the variables it reads and the buffers it loads from (filled by
        #: :func:`_alike_fixpoint`, which asks again for every binding).
        self.summaries: dict[int, tuple[frozenset, list]] = {}

    def root(self, buf) -> int:
        return self.roots.get(_key(buf), _key(buf))

    def placement(self, buf) -> list:
        """What decides where an access through ``buf`` lands besides its indices."""
        return self.view_exprs.get(_key(buf), [])

    def expr(self, expr, control: list) -> None:
        def visit(node):
            if _type_key(node) == "ir.Call":
                if isinstance(node.op, tvm.ir.GlobalVar):
                    self.opaque = f"it launches {node.op.name_hint}"
                elif any(_type_key(a) == "ir.Var" and _dtype(a) == "handle" for a in node.args) or any(
                        _is_call_of(node, name) for name in _POINTER_CALLS):
                    self.opaque = f"{node.op.name} may write memory through a pointer"
                elif _is_call_of(node, "tvm_thread_allreduce"):
                    count = int(node.args[0].value)
                    for result in list(node.args)[2 + count:2 + 2 * count]:
                        if _type_key(result) != "ir.TensorLoad":
                            self.opaque = "a cross-thread reduction writes a result that is not a buffer element"
                            continue
                        # Reduced across the threads: the result is what every operand decides.
                        decided = control + list(node.args) + self.placement(result.source)
                        self.writes.append((self.root(result.source), decided, [], decided))
            return True

        walk_typed(expr, ("ir.Call",), visit)

    def stmt(self, stmt, control: list) -> None:
        key = _type_key(stmt)
        if key == "tirx.SeqStmt":
            for s in stmt.seq:
                self.stmt(s, control)
        elif key == "tirx.For":
            self.binds.append((_key(stmt.loop_var), control + [stmt.min, stmt.extent]))
            self.stmt(stmt.body, control + [stmt.min, stmt.extent])
        elif key == "tirx.Bind":
            self.expr(stmt.value, control)
            self.binds.append((_key(stmt.var), control + [stmt.value]))
        elif key == "tirx.BufferStore":
            self.writes.append((self.root(stmt.buffer),
                                control + list(stmt.indices) + [stmt.value] + self.placement(stmt.buffer),
                                list(stmt.indices), [stmt.value] + self.placement(stmt.buffer)))
            for e in list(stmt.indices) + [stmt.value]:
                self.expr(e, control)
        elif key == "tirx.IfThenElse":
            self.expr(stmt.condition, control)
            self.stmt(stmt.then_case, control + [stmt.condition])
            if stmt.else_case is not None:
                self.stmt(stmt.else_case, control + [stmt.condition])
        elif key == "tirx.While":
            self.expr(stmt.condition, control)
            self.stmt(stmt.body, control + [stmt.condition])
        elif key in ("tirx.Evaluate",):
            self.expr(stmt.value, control)
        elif key == "tirx.AssertStmt":
            self.expr(stmt.condition, control)
        elif key == "tirx.AttrStmt":
            self.stmt(stmt.body, control + ([stmt.value] if hasattr(stmt.value, "dtype") else []))
        elif key == "tirx.DeclBuffer":
            data = stmt.data
            buf = stmt.buffer
            self.view_exprs[_key(buf)] = [e for e in [buf.elem_offset, *buf.shape, *buf.strides] if e is not None]
            if data is not None and _type_key(data) == "ir.Call" and data.args:
                if _type_key(data.args[0]) == "ir.TensorLoad":
                    self.opaque = f"view {stmt.buffer.name} starts at an element's address"
                elif hasattr(data.args[0], "data"):
                    self.roots[_key(stmt.buffer)] = self.root(data.args[0])
            elif data is not None and _type_key(data) == "ir.Var":
                self.opaque = f"view {stmt.buffer.name} of a pointer"
        elif key == "s_tir.SBlockRealize":
            block = stmt.block
            inner = control + [stmt.predicate] + list(stmt.iter_values)
            for iv, value in zip(block.iter_vars, stmt.iter_values):
                self.binds.append((_key(iv.var), control + [stmt.predicate, value]))
            if len(block.match_buffers):
                self.opaque = f"block {block.name_hint} matches a buffer region (match_buffer)"
            if block.init is not None:
                self.stmt(block.init, inner)
            self.stmt(block.body, inner)
        elif key == "tirx.AllocBuffer":
            pass
        else:
            self.opaque = f"it holds a {key.split('.')[-1]} statement"


def written_alike(loop, candidates, roots: dict[int, int], by_index: bool = False,
                  cache: dict | None = None) -> set[int]:
    """Of ``candidates`` (root buffer keys), those that every iteration of ``loop`` writes alike.

    An iteration writes a buffer alike when no write to it depends on the loop variable: not its
    index, not its value, not the loop bounds, conditions or block predicates around it, and its
    value reads no memory that the iterations write differently.  Iterations that run in lockstep as
    lanes (the blocks of a grid) then hold identical copies of such a buffer at every step, so one
    copy serves them all (the tiles every block of a row loads into shared memory).

    ``by_index``: weaker, the buffer's one store writes a value that the element's index decides:
    outside the store's own index expressions, its value uses no variable defined in the loop and
    reads no memory the iterations write differently (``pad[c, r + i] = if_then_else(1 <= r + i,
    x[c, r + i - 1], 0)`` with ``r`` moving with the loop: the padded input window each output of a
    convolution recomputes).  Iterations write different elements, but any two writing one element
    write the same value (one store: lanes in lockstep may write an element at another program point
    than the iteration that reads it, and two stores could store different functions of the index).

    ``cache`` (one planning's dict): the walk of ``loop``'s body is kept for the next question about
    the same loop with the same ``roots`` (the planner asks per allocation: a stage of TVM's GPU topk
    of 7 over 3 x 300 planned in 1.3 s instead of 1.6 s).
    """
    return _alike_fixpoint(loop, candidates, by_index, _writes_of(loop, roots, cache))[0]


def _writes_of(loop, roots: dict[int, int], cache: dict | None = None) -> _Writes:
    """The writes of ``loop``'s body (:class:`_Writes`), from ``cache`` where it has them (keyed by the
    loop and the views' roots known so far; the walk only reads the IR)."""
    key = (_key(loop), frozenset(roots.items()))
    if cache is not None and key in cache:
        return cache[key][1]
    acc = _Writes(roots)
    acc.stmt(loop.body, [])
    if cache is not None:
        cache[key] = (loop, acc)  # the loop held: no other node takes its handle while the cache lives
    return acc


def varying_with(loop, roots: dict[int, int]) -> tuple[set[int], set[int]]:
    """What in ``loop``'s body may differ between its iterations: the variables (keys) whose value
    depends on the loop variable or on memory the iterations write differently, and the buffers
    (keys: roots and the views of them) the iterations write differently (:func:`written_alike` over
    all they write).  Statements that touch neither compute the same in every iteration.
    ``(None, None)`` when the body holds what the analysis cannot follow."""
    acc = _writes_of(loop, roots)
    if acc.opaque:
        return None, None
    written = {root for root, *_ in acc.writes}
    alike, tainted_vars = _alike_fixpoint(loop, written, False, acc)
    differ = written - alike
    return tainted_vars, differ | {view for view, root in acc.roots.items() if root in differ}


def _alike_fixpoint(loop, candidates, by_index: bool, acc: _Writes):
    """:func:`written_alike`'s answer and the variables its taint closure found varying, from ``acc``,
    the walk of ``loop``'s body (:func:`_writes_of`)."""
    if acc.opaque:
        return set(), {_key(loop.loop_var)}
    written = {root for root, *_ in acc.writes}
    alike = set(candidates) & written
    inside = _defined_vars(loop.body) | {_key(loop.loop_var)} if by_index else set()
    # What each expression depends on, walked once: the variables it reads and the buffers it loads
    # from (the taint closure below asks again for every binding, with the same control expressions).
    summaries = acc.summaries

    def summary(expr) -> tuple[frozenset, list]:
        key = _key(expr)
        if key not in summaries:
            names, loads = set(), []

            def visit(node):
                kind = _type_key(node)
                if kind == "ir.Var":
                    names.add(_key(node))
                elif kind == "ir.TensorLoad":
                    loads.append(node.source)
                return True

            walk_typed(expr, ("ir.Var", "ir.TensorLoad"), visit)
            summaries[key] = (frozenset(names), loads)
        return summaries[key]

    while True:
        # Memory written differently by the iterations (or not yet proven alike) taints what reads it.
        tainted_vars = {_key(loop.loop_var)}

        def tainted(exprs) -> bool:
            for e in exprs:
                names, loads = summary(e)
                if not tainted_vars.isdisjoint(names):
                    return True
                for source in loads:
                    root = acc.root(source)
                    if (root in written and root not in alike) or tainted(acc.placement(source)):
                        return True
            return False

        def decided_by(exprs, indices) -> bool:
            """Whether ``exprs`` are a function of ``indices`` and of what the loop does not change."""
            parts = [i for i in indices if _type_key(i) != "ir.IntImm"]
            hit = []

            def visit(node):
                if hit or any(tvm_ffi.structural_equal(node, part) for part in parts):
                    return True  # (in pre-order: its children are not visited)
                key = _type_key(node)
                if key == "ir.Var" and _key(node) in inside:
                    hit.append(node)
                elif key == "ir.TensorLoad":
                    root = acc.root(node.source)
                    if (root in written and root not in alike) or tainted(acc.placement(node.source)):
                        hit.append(node)
                return tvm_ffi.WalkResult.ADVANCE

            for e in exprs:
                tvm_ffi.structural_walk(e, visit, order="pre")
            return not hit

        changed = True
        while changed:
            changed = False
            for var, exprs in acc.binds:
                if var not in tainted_vars and tainted(exprs):
                    tainted_vars.add(var)
                    changed = True
        differ = {root for root, exprs, indices, value in acc.writes if root in alike
                  and (not decided_by(value, indices) if by_index else tainted(exprs))}
        if by_index:  # one store each: two could store different functions of the index
            differ |= {root for root in alike if sum(w[0] == root for w in acc.writes) > 1}
        if not differ:
            return alike, tainted_vars
        alike -= differ


def stored_in_an_inner_loop(loop, keys: set[int], roots: dict[int, int]) -> bool:
    """Whether a store to a buffer of ``keys`` (root keys) sits in a loop inside ``loop``: what every
    iteration recomputes there, a copy per lane would recompute per lane."""
    def stores_there(n) -> bool:
        return _type_key(n) == "tirx.BufferStore" and roots.get(_key(n.buffer), _key(n.buffer)) in keys

    return _contains(loop.body, lambda n: _type_key(n) == "tirx.For" and _contains(n.body, stores_there))


# ---------------------------------------------------------------------- privatisation
def _read_before_written(walk: _MustWrite, loop, context: tuple) -> str | None:
    """Walk one iteration of ``loop`` (its variable over its range, ``context`` bound first) with
    ``walk``: why a read may come before the iteration's write, or None."""
    try:
        for var, value in context:
            walk.bind(var, value)
        walk.bind(loop.loop_var, tvm.ir.Range.from_min_extent(loop.min, loop.extent))
        walk.stmt(loop.body, ())
    except _NotProven as exc:
        return str(exc)
    return None


def written_before_read(loop, buf, func_body, context: tuple = ()) -> str | None:
    """Why ``buf`` (an allocation outside ``loop``) cannot get a copy per iteration of ``loop``,
    or None when it can: every read of it in an iteration reads an element that iteration wrote
    before (no value flows between iterations), it is touched only in ``loop`` (what it holds after
    the loop is never read), and only through its own name (no view, no pointer).

    A must-write walk in program order: the elements (index tuples, after the bindings are expanded)
    written so far in the iteration; a write under a condition counts only where the condition is
    provable.  An inner serial loop is walked for its first iteration (its variable at its minimum)
    and then for the others, which start with what the first wrote at indices free of the body's
    variables: ``if l == 0: B[0] = 0`` then ``B[0] = B[0] + A[..., l]`` writes B[0] before any read.
    ``context``: what is known of the variables defined around ``loop`` (``(var, Range or value)``:
    the enclosing loops' ranges, the bindings in scope), so that an index such as ``co // 64`` with
    ``co = co_0 * 32 + co_2`` is seen to be 0."""
    name = str(buf.name)
    whole, inside = _uses(func_body, buf), _uses(loop.body, buf)
    if whole[1] != 1:  # its allocation is its only mention besides loads and stores
        return f"{name} is used other than by loads and stores (a view, a pointer)"
    if not inside[0] or inside != (whole[0], 0):
        return f"{name} is also used outside {loop.loop_var.name}"
    return _read_before_written(_MustWrite(buf), loop, context)


def read_after_written_alike(loop, buf, func_body, context: tuple = ()) -> str | None:
    """Why the iterations of ``loop`` may see different values in ``buf`` (an allocation), or None
    when every read of it in an iteration reads an element that iteration wrote before: then, if
    every iteration writes it alike (:func:`written_alike`), every iteration holds the same values
    in it, and the iterations run as lanes in lockstep on one copy compute what they compute one
    after another, leaving what the last one leaves.  Unlike :func:`written_before_read`, ``buf``
    may be used after the loop and through flat views of the same elements (a view of the same
    storage with no offset, as StorageRewrite declares to reuse it).  ``context``: as for
    :func:`written_before_read`."""
    name = str(buf.name)
    views = []

    def visit(n):
        if _type_key(n) == "tirx.DeclBuffer" and n.data is not None and _mentions(n.data, buf):
            views.append(n.buffer)
        return True

    walk_typed(func_body, ("tirx.DeclBuffer",), visit)
    for view in views:
        same = (len(view.shape) == len(buf.shape) == 1 and str(view.dtype) == str(buf.dtype)
                and (view.elem_offset is None or (_type_key(view.elem_offset) == "ir.IntImm"
                                                   and int(view.elem_offset.value) == 0)))
        if not same or _uses(func_body, view)[1] != 1:
            return f"{name} is used through a view that places its elements elsewhere"
    if _uses(func_body, buf)[1] != 1 + len(views):
        return f"{name} is used other than by loads, stores and flat views (a pointer)"
    return _read_before_written(_MustWrite(buf, views), loop, context)
