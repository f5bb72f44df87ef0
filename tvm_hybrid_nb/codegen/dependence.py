"""The fast-mode dependence test: whether the iterations of a loop (or the blocks of a GPU grid) may
touch one element where one of them writes, from the loop body's buffer accesses, scalar bindings and
inner loops, with the guards around them.  :mod:`.plan` asks it which loops may run as lanes."""
from __future__ import annotations

import contextlib
import copy
from typing import Callable

import tvm
import tvm_ffi
from tvm import tirx

from .analysis import _contains, _reads_memory, _uses_vars, walk_typed
from .digits import _element_offsets, _flat_index_digits, _flat_indices, _index_tuple_numbers, \
    _constant_offsets, _offset_digits, _one_form, spread_within_extents
from .forwarding import bindings_read, forward_scalars
from .guards import _all_of, guarded_digit, spread_under_guards, within_guards
from .names import _dtype, _is_zero, _key, _scalar_dtype, _type_key
from .radix import fold_radix
from .work import Analyzer


class _LoopAccesses:
    """Buffer accesses, scalar bindings and inner loops of one loop body, for the dependence test."""

    def __init__(self, roots: dict[int, int], outer=(), events: dict | None = None):
        self.roots = dict(roots)
        #: Per expression (by handle): its loads and calls in walk order, with the expression kept
        #: alive; shared by the analyses of the nested loops of one function, which walk the same
        #: expressions once per loop around them.
        self.events = events if events is not None else {}
        #: ``(var, min, extent)`` of the loops around the loop under test (outermost first): their
        #: variables are fixed during it but only take values in their ranges.
        self.outer: tuple = tuple(outer)
        self.binds: list = []
        self.inner: list = []
        self.accesses: list[tuple[int, int, bool, list]] = []
        #: Why no claim of independence is possible (None: none of those constructs).
        self.private: str | None = None
        self.names: dict[int, str] = {}
        #: Allocations made inside the body: each iteration has its own (fast mode gives one per lane).
        self.local: set[int] = set()
        #: Shape of each accessed buffer (for the flattened-index test).
        self.shapes: dict[int, object] = {}
        #: Each accessed buffer (view), by key.
        self.buffers: dict[int, object] = {}
        #: The branch conditions (and block predicates) in force at each access, aligned with ``accesses``.
        self.guards: list[tuple] = []
        self._conditions: list = []
        #: Each ``BufferStore`` of the body, by the position of its write in ``accesses``: (the value
        #: stored, the loops of the body around it, the bindings made before it), for
        #: :func:`~.forwarding.forward_scalars`.
        self.stores: dict[int, tuple] = {}
        self._loops = 0
        #: Per (loop-around variable, value): see :func:`_at_outer_value`.
        self.at_value: dict = {}

    def add(self, root: int, buf_key: int, is_write: bool, indices: list) -> None:
        self.accesses.append((root, buf_key, is_write, indices))
        self.guards.append(tuple(self._conditions))

    @contextlib.contextmanager
    def guarded(self, condition):
        """Accesses made where ``condition`` holds (a branch's then-case, a block's predicate)."""
        self._conditions.append(condition)
        try:
            yield
        finally:
            self._conditions.pop()

    def root(self, buf) -> int:
        self.shapes[_key(buf)] = buf.shape
        self.buffers[_key(buf)] = buf
        self.names.setdefault(self.roots.get(_key(buf), _key(buf)), str(buf.name) or "an unnamed buffer")
        return self.roots.get(_key(buf), _key(buf))

    def expr(self, expr) -> None:
        cached = self.events.get(_key(expr))
        if cached is None:
            found: list = []

            def visit(node):
                key = _type_key(node)
                if key == "ir.TensorLoad":
                    found.append((node.source, list(node.indices)))
                elif key == "ir.Call":
                    found.append((None, node))
                return True

            walk_typed(expr, ("ir.TensorLoad", "ir.Call"), visit)
            cached = self.events[_key(expr)] = (expr, found)
        for source, what in cached[1]:
            if source is None:
                self.call(what)
            else:
                self.add(self.root(source), _key(source), False, list(what))

    def call(self, node) -> None:
        """Calls that write memory: a kernel launch touches what its kernel touches (no claim of
        independence), ``tvm_thread_allreduce`` writes its result elements."""
        op = node.op
        if isinstance(op, tvm.ir.GlobalVar):
            self.private = f"it launches {op.name_hint} (what a launched kernel touches is not analysed)"
        elif isinstance(op, tvm.ir.Op) and op.name == "tirx.cuda.atomic_add":
            self.private = "an atomic add (the lanes' adds are applied one after another)"
        elif isinstance(op, tvm.ir.Op) and op.name.endswith("tvm_thread_allreduce"):
            count = int(node.args[0].value)
            for result in list(node.args)[2 + count:2 + 2 * count]:
                if _type_key(result) == "ir.TensorLoad":
                    self.add(self.root(result.source), _key(result.source), True, list(result.indices))
                else:
                    self.private = "a cross-thread reduction writes a result that is not a buffer element"

    def stmt(self, stmt) -> None:
        key = _type_key(stmt)
        if key == "tirx.SeqStmt":
            for s in stmt.seq:
                self.stmt(s)
        elif key == "tirx.For":
            self.expr(stmt.min)
            self.expr(stmt.extent)
            self.inner.append((stmt.loop_var, stmt.min, stmt.extent))
            self._loops += 1
            self.stmt(stmt.body)
            self._loops -= 1
        elif key == "tirx.Bind":
            self.expr(stmt.value)
            self.binds.append((stmt.var, stmt.value))
        elif key == "tirx.BufferStore":
            for idx in stmt.indices:
                self.expr(idx)
            self.expr(stmt.value)
            self.add(self.root(stmt.buffer), _key(stmt.buffer), True, list(stmt.indices))
            self.stores[len(self.accesses) - 1] = (stmt.value, self._loops, len(self.binds))
        elif key in ("tirx.IfThenElse",):
            self.expr(stmt.condition)
            with self.guarded(stmt.condition):
                self.stmt(stmt.then_case)
            if stmt.else_case is not None:
                with self.guarded(tirx.Not(stmt.condition)):
                    self.stmt(stmt.else_case)
        elif key == "tirx.While":
            self.expr(stmt.condition)
            self._loops += 1
            self.stmt(stmt.body)
            self._loops -= 1
        elif key in ("tirx.Evaluate",):
            self.expr(stmt.value)
        elif key == "tirx.AssertStmt":
            self.expr(stmt.condition)
        elif key == "tirx.AttrStmt":
            if stmt.attr_key in ("thread_extent", "virtual_thread"):
                # The threads (blocks) launched inside run over [0, extent) like an inner loop.
                self.expr(stmt.value)
                self.inner.append((stmt.node.var, tirx.const(0, _dtype(stmt.node.var)), stmt.value))
            self.stmt(stmt.body)
        elif key == "tirx.DeclBuffer":
            if stmt.data is not None and _type_key(stmt.data) == "ir.Var" and any(
                    _key(var) == _key(stmt.data) and _type_key(value) == "ir.Call" for var, value in self.binds):
                self.private = f"view {stmt.buffer.name} starts at a pointer computed in the loop"
            elif stmt.data is not None and _type_key(stmt.data) == "ir.Call" and stmt.data.args:
                if _type_key(stmt.data.args[0]) == "ir.TensorLoad":
                    # A view at an element's address (address_of): where it starts moves with the
                    # indices, so no claim of independence.
                    self.private = f"view {stmt.buffer.name} starts at an element's address, which moves with the indices"
                else:
                    self.roots[_key(stmt.buffer)] = self.root(stmt.data.args[0])
        elif key == "s_tir.SBlockRealize":
            block = stmt.block
            for value in stmt.iter_values:
                self.expr(value)
            for iv, value in zip(block.iter_vars, stmt.iter_values):
                self.binds.append((iv.var, value))
            self.expr(stmt.predicate)
            if len(block.match_buffers):
                self.private = f"block {block.name_hint} matches a buffer region (match_buffer)"
            self.local |= {_key(b) for b in block.alloc_buffers}
            with self.guarded(stmt.predicate):
                if block.init is not None:
                    self.stmt(block.init)
                self.stmt(block.body)
        elif key == "tirx.AllocBuffer":
            self.local.add(_key(stmt.buffer))
        elif key == "tirx.Return":
            self.private = "it returns from the function (tirx.Return): no iteration after that one may run"
        else:  # break/continue and anything unknown: no claim of independence
            self.private = f"it holds a {key.split('.')[-1]} statement"


def loop_dependence(loop, roots: dict[int, int], private=(), outer=()) -> str | None:
    """Why the iterations of ``loop`` may touch the same memory where one of them writes, or None
    when they provably do not.

    Sufficient test, per written buffer: in some dimension every access index has the form
    ``c * x + g`` with the same constant ``c`` and the values of all the ``g`` (over the inner loops
    and vector lanes) spread over less than ``|c|``, so the elements that iteration ``x`` touches are
    disjoint from those of any other iteration.  Buffers in ``private`` (keys) have a copy per
    iteration wherever they are allocated.  ``outer``: ``(var, min, extent)`` of the loops around
    ``loop``, whose variables are fixed during it and lie in their ranges.
    """
    blocking, shared = loop_dependences(loop, roots, private, outer)
    return blocking or next(iter(shared.values()), None)


def loop_dependences(loop, roots: dict[int, int], private=(), outer=(),
                     cache: dict | None = None, threads=(), bindings=(),
                     fatal: Callable[[int], bool] | None = None) -> tuple[str | None, dict[int, str]]:
    """``(why no claim is possible, or None; {root buffer: why its accesses may overlap between
    iterations}``) — see :func:`loop_dependence`; ``cache``: as for :func:`_accesses`.  ``threads``:
    ``(var, min, extent)`` of the threads launched around ``loop``, which all run each of its
    iterations: ranged within an iteration, as inner loops are.  ``bindings``: ``(var, value)`` of
    the integer bindings made before ``loop`` in the function (each variable is bound once), of
    which those ``loop`` reads are expanded (``CommonSubexprElim``'s lets before a grid).
    ``fatal(root)``: whether an overlap on that buffer keeps the loop serial whatever the others
    do (no copy per lane can lift it); the buffers after the first such overlap are not tested
    (a GPU merge sort's level loop overlaps on all four of its buffers: the last three tests were
    three quarters of its time)."""
    acc, expand = _accesses(loop, roots, outer, cache, threads=threads, bindings=bindings)
    local = acc.local | set(private)
    if acc.private:
        return acc.private, {}
    groups: dict[int, list] = {}
    for (root, buf_key, is_write, indices), guards in zip(acc.accesses, acc.guards):
        groups.setdefault(root, []).append((buf_key, is_write, indices, guards))
    shared: dict[int, str] = {}
    for root, items in groups.items():
        if root in local or not any(item[1] for item in items):
            continue
        name = acc.names.get(root, "a buffer")
        why = _group_overlap(loop, acc, expand, items, name)
        if why is not None and not _parts_separate(loop, acc, expand, items, name):
            shared[root] = why
            if fatal is not None and fatal(root):
                break
    return None, shared


def _group_overlap(loop, acc: "_LoopAccesses", expand, items: list, name: str, split: bool = True) -> str | None:
    """Why two iterations of ``loop`` may touch one element through ``items`` (one buffer's accesses),
    or None when they provably do not, at once or for each value of a loop around (``split``: see
    :func:`_overlap`).  The trial at each value comes first: where it applies (extents that change
    with a loop around), the readings over all values fail first in most loops it proves (a GPU
    merge sort's rows: 1,100 of their 1,400 simplifications per buffer), and either proof will do."""
    if _separate_at_each_outer_value(loop, acc, expand, items, name):
        return None
    return _overlap(loop, acc, expand, items, name, split)


def _parts_separate(loop, acc: "_LoopAccesses", expand, items: list, name: str) -> bool:
    """Whether ``items`` (one buffer's accesses, which overlap as a whole), split by the branch
    conditions that hold or fail for the whole run of ``loop``, keep its iterations apart in each
    part (or only read there): accesses under a condition and accesses under its negation never
    happen in one run of the loop.  TVM's GPU merge sort reads the values and writes the swap buffer
    where its level ``v % 2 == 0``, and the other way round where not, inside one grid (itself inside
    a branch on the level's width).  Each part (one side of every such condition) is tested once."""
    conditions = _exclusive_conditions(loop, acc, items)
    if not conditions:
        return False
    parts: dict[tuple, list] = {}
    for item in items:
        parts.setdefault(tuple(_side(item, c) for c in conditions), []).append(item)
    return all(not any(item[1] for item in part) or _group_overlap(loop, acc, expand, part, name, split=False) is None
               for part in parts.values())


def _side(item, condition) -> int | None:
    """1 when the access ``item`` is under ``condition``, 0 under its negation, None under neither."""
    if any(tvm_ffi.structural_equal(g, condition) for g in item[3]):
        return 1
    if any(_type_key(g) == "prim.Not" and tvm_ffi.structural_equal(g.a, condition) for g in item[3]):
        return 0
    return None


def _exclusive_conditions(loop, acc: "_LoopAccesses", items: list) -> list:
    """The conditions that every access of ``items`` is under, or under the negation of, both ways
    taken, that read no memory, call nothing and read no variable that ``loop`` sets."""
    moving = {_key(loop.loop_var)} | {_key(v) for v, _, _ in acc.inner} | {_key(v) for v, _ in acc.binds}
    found = []
    for guard in items[0][3]:
        condition = guard.a if _type_key(guard) == "prim.Not" else guard
        if not _fixed_while_running(condition, moving):
            continue
        sides = {_side(item, condition) for item in items}
        if sides == {0, 1}:
            found.append(condition)
    return found


#: The key of :func:`_accesses`'s cache under which the expressions' loads and calls are kept.
_EXPRESSION_EVENTS = "expression events"


def _accesses(loop, roots: dict[int, int], outer=(), cache: dict | None = None, events: dict | None = None,
              threads=(), bindings=()):
    """The accesses of ``loop``'s body and the analyzer that expands its bindings.  ``cache`` (a
    dict the caller keeps while the IR lives) keeps them for the next question about the same loop
    (the planner asks once per allocation of a GPU kernel's blocks); they are not modified.  The
    cache keeps ``loop`` itself: a loop made for the question (a grid's ``For``,
    :func:`~.analysis.grid_loop`) would otherwise be freed and its address, which is its key, given
    to the next grid's loop, which would get the freed loop's accesses."""
    if cache is not None:
        key = (_key(loop), tuple((_key(v), str(lo), str(n)) for v, lo, n in outer), frozenset(roots.items()),
               tuple((_key(v), str(n)) for v, _, n in threads), len(bindings))
        if key not in cache:
            cache[key] = (loop, *_accesses(loop, roots, outer, events=cache.setdefault(_EXPRESSION_EVENTS, {}),
                                           threads=threads, bindings=bindings))
        return cache[key][1:]
    acc = _LoopAccesses(roots, outer, events)
    acc.inner.extend(threads)
    acc.binds.extend(bindings_read(loop, bindings))
    acc.stmt(loop.body)
    forward_scalars(acc)
    return acc, _Expansion(acc.binds)


def _expander(binds: list, analyzer=None):
    """``analyzer`` (a fresh one when None) with the integer ``binds`` bound in order: its simplify
    expands them."""
    analyzer = analyzer if analyzer is not None else Analyzer()
    for var, value in binds:
        if _dtype(var) != "handle":  # a pointer (address_of) is not an index
            analyzer.bind(var, value, allow_override=True)
    return analyzer


class _Expansion:
    """The bindings of a loop's body expanded into expressions (:func:`_expander`, into
    ``analyzer`` when given), each expression's once: the dependence tests of one loop try several
    readings of the same indices (per dimension, flattened, as digits, split) and expanded the same
    index up to nine times (a GPU merge sort: 55 % of its planning's simplifications); fixed at a
    value of a loop around (:func:`_at_outer_value`), one buffer's accesses share their guards and
    many of their indices.  Expressions are looked up by address, then by structure (accesses of
    one element hold equal, distinct index expressions); the memo keeps each alive, so that its
    address is not reused."""

    def __init__(self, binds: list, analyzer=None):
        self._analyzer = _expander(binds, analyzer)
        self._by_address: dict[int, tuple] = {}  # address -> (expression, simplified)
        self._by_structure: dict[int, list] = {}  # structural hash -> [(expression, simplified)]

    def simplify(self, expr):
        handle = getattr(expr, "__chandle__", None)
        if handle is None:  # a Python number
            return self._analyzer.simplify(expr)
        found = self._by_address.get(handle())
        if found is not None:
            return found[1]
        same_hash = self._by_structure.setdefault(tvm_ffi.structural_hash(expr), [])
        found = next((pair for pair in same_hash if tvm_ffi.structural_equal(pair[0], expr)), None)
        if found is None:
            found = (expr, self._analyzer.simplify(expr))
            same_hash.append(found)
        self._by_address[handle()] = (expr, found[1])
        return found[1]


#: The most iterations of a loop around that :func:`_separate_at_each_outer_value` tries one by one.
OUTER_VALUES_TRIED = 16


def _separate_at_each_outer_value(loop, acc: "_LoopAccesses", expand, items: list, name: str) -> bool:
    """Whether, for each value of one loop around (a constant range of at most
    :data:`OUTER_VALUES_TRIED`) that ``loop``'s extent or the extent of a loop inside changes with,
    the iterations of ``loop`` touch their own elements: its variable is fixed while ``loop`` runs,
    and where it enters a shift or a divisor no bound of its range simplifies the index.  TVM's GPU
    scan runs each level ``v`` of its up- and down-sweeps as a grid of ``ceil(n / (1024 * (2 <<
    v)))`` blocks per row: 1 for every ``v`` of a row of 128, which the analyzer proves only with
    ``v`` fixed; its GPU sort merges runs of ``2 << v + 7`` values, as many blocks per row as fit,
    and only with ``v`` fixed are a row's blocks proven to stay in the row.  A value that does not
    separate ends the trial (a carried dependence fails at the first); each value costs one test,
    without the split of :func:`_overlap`."""
    if not _is_zero(loop.min):
        return False
    extents = [expand.simplify(e) for e in (loop.extent, *(n for _v, _lo, n in acc.inner))
               if _type_key(e) != "ir.IntImm"]
    mentioned = [(var, lo, n) for var, lo, n in acc.outer
                 if _type_key(lo) == "ir.IntImm" and _type_key(n) == "ir.IntImm"
                 and 1 < int(n.value) <= OUTER_VALUES_TRIED and any(_uses_vars(e, {_key(var)}) for e in extents)]
    for var, lo, n in mentioned:
        for value in range(int(lo.value), int(lo.value) + int(n.value)):
            try:
                fixed, at_value, at = _at_outer_value(acc, var, value)
                extent = fixed.simplify(loop.extent)
                if _type_key(extent) != "ir.IntImm":
                    break
                fixed_items = [(key, is_write, [at(i) for i in indices], tuple(at(g) for g in guards))
                               for key, is_write, indices, guards in items]
                # Accesses under a guard that this value makes false do not happen (TVM's GPU sort
                # has a branch for levels wider than 4,096 elements).
                fixed_items = [item for item in fixed_items
                               if not any(_type_key(g) == "ir.IntImm" and not int(g.value) for g in item[3])]
                if not any(item[1] for item in fixed_items):
                    continue
                fixed_loop = _SplitLoop(loop.loop_var, int(extent.value))
                if _overlap_of(fixed_loop, at_value, fixed, fixed_items, name) is not None:
                    break
            except Exception:  # anything the analyzer cannot reason about: no claim
                break
        else:
            return True
    return False


def _at_outer_value(acc: "_LoopAccesses", var, value: int):
    """``(analyzer, accesses, simplify)`` with the loop-around variable ``var`` fixed at ``value``:
    its bindings expanded, the inner loops' ranges simplified, and a simplification that each
    expression gets once (one buffer's accesses share their guards and many of their indices, and
    the parts of :func:`_parts_separate` ask again for the same loop)."""
    state = acc.at_value.get((_key(var), value))
    if state is None:
        fixed = Analyzer()
        fixed.bind(var, tirx.const(value, _dtype(var)))  # first: the bindings read it fixed
        at = _Expansion(acc.binds, fixed).simplify
        at_value = copy.copy(acc)
        at_value.outer = tuple(o for o in acc.outer if _key(o[0]) != _key(var))
        at_value.inner = [(v, fixed.simplify(v_lo), fixed.simplify(v_n)) for v, v_lo, v_n in acc.inner]
        state = acc.at_value[(_key(var), value)] = (fixed, at_value, at)
    return state


def _overlap(loop, acc: "_LoopAccesses", expand, items: list, name: str, split: bool = True) -> str | None:
    """Why two iterations of ``loop`` may touch the same element through ``items`` (one buffer's
    ``(view key, is_write, indices, guards)``), or None when each iteration touches its own elements.
    ``split``: also try the loop as two nested loops over its quotient and remainder
    (:func:`_split_separates`)."""
    why = _overlap_of(loop, acc, expand, items, name)
    if why is not None and split and _split_separates(loop, acc, expand, items, name):
        return None
    return why


def _overlap_of(loop, acc: "_LoopAccesses", expand, items: list, name: str) -> str | None:
    x = loop.loop_var.name
    if len({item[0] for item in items}) > 1 or len({len(item[2]) for item in items}) > 1:
        flat = _element_offsets(items, acc)
        x_extent = int(loop.extent.value) if _type_key(loop.extent) == "ir.IntImm" else None
        if flat is None or not _separates_iterations(flat, loop.loop_var, acc, expand, x_extent,
                                                     [item[3] for item in items], _is_zero(loop.min)):
            return f"{name} is written and accessed through several views"
        return None
    ndim = len(items[0][2])
    x_extent = int(loop.extent.value) if _type_key(loop.extent) == "ir.IntImm" else None
    guards = [item[3] for item in items]
    from_zero = _is_zero(loop.min)
    if not any(_separates_iterations([item[2][d] for item in items], loop.loop_var, acc, expand, x_extent, guards,
                                     from_zero)
               for d in range(ndim)):
        flat = _flat_indices(items, acc.shapes.get(items[0][0]))
        if flat is None or not _separates_iterations(flat, loop.loop_var, acc, expand, x_extent, guards, from_zero):
            digits = _index_tuple_numbers(items, loop, acc, expand)
            if digits is None:
                as_digits = _flat_index_digits(items, loop, acc, expand)
                if as_digits is not None and any(
                        _separates_iterations([item[2][d] for item in as_digits], loop.loop_var, acc, expand,
                                              x_extent, guards, from_zero) for d in range(len(as_digits[0][2]))):
                    return None  # one digit tells the iterations apart (a block's row of a flattened buffer)
                digits = None if as_digits is None else _index_tuple_numbers(as_digits, loop, acc, expand)
            if (digits is None or not _separates_iterations(digits, loop.loop_var, acc, expand, x_extent, guards,
                                                            from_zero)) \
                    and not _moving_indices_separate(loop, acc, expand, items, x_extent, guards, from_zero):
                return f"carried dependence on {name}: two iterations of {x} may touch the same element"
    return None


def _moving_indices_separate(loop, acc: "_LoopAccesses", expand, items: list, x_extent, guards, from_zero) -> bool:
    """Whether the indices that move with ``loop``'s variable, taken together, keep its iterations
    apart (tuples that differ there are different elements, whatever the other indices hold).  Before
    ``CompactBufferAllocation`` dlight's rfactor buffer ``rf[tx, v0, v1, v2]`` has the whole output's
    shape: ``(v0, v1, v2)`` is the block ``bx``, but ``tx``, the thread of another ``threadIdx.x`` loop
    in each access, leads every number made of the whole tuple."""
    moving_var = {_key(loop.loop_var)}
    ndim = len(items[0][2])
    moving = [d for d in range(ndim) if any(_uses_vars(expand.simplify(item[2][d]), moving_var) for item in items)]
    shape = acc.shapes.get(items[0][0])
    if not 1 < len(moving) < ndim or shape is None:
        return False
    sub = [(key, is_write, [indices[d] for d in moving], item_guards) for key, is_write, indices, item_guards in items]
    for numbers in (_flat_indices(sub, [shape[d] for d in moving]), _index_tuple_numbers(sub, loop, acc, expand)):
        if numbers is not None and _separates_iterations(numbers, loop.loop_var, acc, expand, x_extent, guards,
                                                         from_zero):
            return True
    return False


class _SplitLoop:
    """One of the two loops :func:`_split_separates` reads a loop as (a loop's variable and range)."""

    def __init__(self, var, extent: int):
        self.loop_var, self.min, self.extent = var, tirx.const(0, _dtype(var)), tirx.const(extent, _dtype(var))


def _split_divisor(loop, items: list, expand) -> int | None:
    """The constant ``c`` that the accesses divide ``loop``'s variable by (``x // c``, ``x % c``), when
    there is exactly one; None otherwise."""
    x = loop.loop_var
    found: set[int] = set()

    def visit(node):
        if _type_key(node) in ("prim.FloorDiv", "prim.FloorMod", "prim.Div", "prim.Mod") \
                and _type_key(node.a) == "ir.Var" and node.a.same_as(x) and _type_key(node.b) == "ir.IntImm":
            found.add(int(node.b.value))
        return True

    for item in items:
        for expr in (*item[2], *item[3]):
            walk_typed(expand.simplify(expr), ("prim.FloorDiv", "prim.FloorMod", "prim.Div", "prim.Mod"), visit)
    return found.pop() if len(found) == 1 and min(found) > 1 else None


def _split_separates(loop, acc: "_LoopAccesses", expand, items: list, name: str) -> bool:
    """Whether the iterations of ``loop`` (from 0, of constant extent) touch their own elements, read
    as the loops ``q`` (outer) and ``r`` (inner) of ``x = q * c + r``, where the accesses divide ``x``
    by ``c``: two iterations differ in ``q``, or share it and differ in ``r``, so the loop is
    independent when the iterations of ``q`` are (``r`` one more inner loop) and, ``q`` held fixed,
    those of ``r`` are.  dlight's GPU softmax over ``(2, 7, 20)`` stores
    ``out[bx // 20, tx, bx % 20]``: no single index, nor their row-major number, moves by a constant
    step with ``bx``, but ``bx // 20`` separates the ``q`` and ``bx % 20`` the ``r``."""
    x = loop.loop_var
    if not _is_zero(loop.min) or _type_key(loop.extent) != "ir.IntImm":
        return False
    c = _split_divisor(loop, items, expand)
    if c is None:
        return False
    try:
        dtype = _dtype(x)
        q, r = tirx.Var(f"{x.name}_q", dtype), tirx.Var(f"{x.name}_r", dtype)
        q_extent = -(-int(loop.extent.value) // c)  # x = q * c + r past the extent: more pairs, no fewer
        split = Analyzer()
        split.bind(q, tvm.ir.Range.from_min_extent(0, q_extent))
        split.bind(r, tvm.ir.Range.from_min_extent(0, c))
        split.bind(x, q * c + r)

        def rewrite(expr):
            return split.simplify(expand.simplify(expr))

        split_items = [(item[0], item[1], [rewrite(i) for i in item[2]], tuple(rewrite(g) for g in item[3]))
                       for item in items]
        inner = [(var, rewrite(lo), rewrite(extent)) for var, lo, extent in acc.inner]
        over_q = copy.copy(acc)
        over_q.inner = inner + [(r, tirx.const(0, dtype), tirx.const(c, dtype))]
        if _overlap(_SplitLoop(q, q_extent), over_q, split, split_items, name, split=False) is not None:
            return False
        over_r = copy.copy(acc)
        over_r.inner = inner
        over_r.outer = tuple(acc.outer) + ((q, tirx.const(0, dtype), tirx.const(q_extent, dtype)),)
        return _overlap(_SplitLoop(r, c), over_r, split, split_items, name, split=False) is None
    except Exception:  # anything the analyzer cannot reason about: no claim of independence
        return False


def allocation_overlap(loop, buf, roots: dict[int, int], outer=(), cache: dict | None = None) -> str | None:
    """Why two iterations of ``loop`` may touch the same element of ``buf``, an allocation inside
    its body (each iteration of the compiled loop has its own), or None when they provably touch
    disjoint elements (reads and writes, through any view of it): then one copy shared by all the
    lanes holds what the copies of the iterations would, element for element (an element one
    iteration touches, no other does; a fresh copy's elements and the shared one's start alike).
    ``outer``: as for :func:`loop_dependence`; ``cache``: as for :func:`_accesses`."""
    acc, expand = _accesses(loop, roots, outer, cache)
    if acc.private:
        return acc.private
    key = _key(buf)
    items = [(buf_key, is_write, indices, guards)
             for (root, buf_key, is_write, indices), guards in zip(acc.accesses, acc.guards) if root == key]
    if not items:
        return None
    return _overlap(loop, acc, expand, items, str(buf.name))


def _separates_iterations(indices, x, acc: _LoopAccesses, expand, x_extent: int | None = None,
                          guards: list | None = None, x_from_zero: bool = False) -> bool:
    """Whether these index expressions of one dimension keep different iterations of ``x`` apart
    (``guards``: the conditions in force at each, aligned with ``indices``; ``x_from_zero``: ``x``
    counts from 0): as indexed, or with the expression of ``x`` that a guard bounds as the digit
    that tells the iterations apart (:func:`~.guards.guarded_digit`)."""
    if _separates_as_indexed(indices, x, acc, expand, x_extent, guards, x_from_zero):
        return True
    # The guards only narrow what is touched: indices that keep the iterations apart without them do
    # so under them too.  Read under its guard, an unrolled copy's row ``tx * 4 + k < 7`` becomes one
    # bounded term, and the copies' offsets ``k * 2048`` then overlap it (dlight's GPU matmul tile
    # after ``UnrollLoop``).
    if guards and any(guards) and _separates_as_indexed(indices, x, acc, expand, x_extent, None, x_from_zero):
        return True
    try:
        digit = guarded_digit(indices, guards, x, acc, expand) if x_from_zero else None
    except Exception:  # anything the analyzer cannot reason about: no claim of independence
        return False
    return digit is not None and _separates_as_indexed(digit[0], digit[1], acc, expand, digit[2], guards, True)


def _separates_as_indexed(indices, x, acc: _LoopAccesses, expand, x_extent: int | None = None,
                          guards: list | None = None, x_from_zero: bool = False) -> bool:
    lanes: list = []
    try:
        x_next = tirx.Var("x_next", _dtype(x))
        shifted, same = Analyzer(), Analyzer()
        shifted.bind(x, x_next + 1)
        same.bind(x, x_next)
        at_zero = Analyzer()
        at_zero.bind(x_next, tirx.const(0, _dtype(x)))
        at_min, over_range = Analyzer(), Analyzer()
        # The loops around ``x`` hold their variables fixed while it runs, so every bound below is
        # taken for fixed values of them; bounding them by their ranges (the values they can hold)
        # only widens those bounds: ``w_0 * 112 + w_3`` and ``w_3`` (w_0 in [0, 1)) differ by 0.
        for var, lo, extent in acc.outer:
            over_range.bind(var, tvm.ir.Range.from_min_extent(lo, extent), allow_override=True)
        for var, lo, extent in acc.inner:
            at_min.bind(var, lo, allow_override=True)
            over_range.bind(var, tvm.ir.Range.from_min_extent(lo, extent), allow_override=True)
        step = None
        symbolic = None  # the step, when it is an expression (the same for every access)
        conditions: list = []  # with a symbolic step: the guards of each access, over x_next
        rests = []
        fresh: dict = {}
        steps: dict[int, list] = {}  # structural hash of f -> [(f, (f, f at x_next, step))]

        def stepped(f):
            """``f`` (read over x's range where its step is not constant), ``f`` at ``x_next`` and the
            step from ``x_next`` to ``x_next + 1``: once per form (a read and a write of one element)."""
            same_hash = steps.setdefault(tvm_ffi.structural_hash(f), [])
            for seen, found in same_hash:
                if tvm_ffi.structural_equal(seen, f):
                    return found
            read, f_same = f, same.simplify(f)
            delta = Analyzer().simplify(shifted.simplify(f) - f_same)
            if _type_key(delta) != "ir.IntImm" and x_from_zero and x_extent is not None:
                # Over the values x takes, ``x % 2 * 2000 + x // 2`` (x < 2) is ``x * 2000``.
                within = over_range.clone()
                within.bind(x, tvm.ir.Range.from_min_extent(0, x_extent), allow_override=True)
                read = within.simplify(f)
                f_same = same.simplify(read)
                delta = Analyzer().simplify(shifted.simplify(read) - f_same)
            same_hash.append((f, (read, f_same, delta)))
            return read, f_same, delta

        for position, index in enumerate(indices):
            key = _type_key(index)
            if key == "prim.Ramp":
                # One lane variable per vector width, shared by all accesses, so their forms compare.
                lane_dtype = _scalar_dtype(_dtype(index.base))
                known = [v for v, _, e in lanes if int(e.value) == int(index.lanes) and _dtype(v) == lane_dtype]
                if known:
                    lane = known[0]
                else:
                    lane = tirx.Var("lane", lane_dtype)
                    at_min.bind(lane, tirx.const(0, lane_dtype))
                    over_range.bind(lane, tvm.ir.Range.from_min_extent(0, int(index.lanes)))
                    lanes.append((lane, tirx.const(0, lane_dtype), tirx.const(int(index.lanes), lane_dtype)))
                index = index.base + index.stride * lane
            elif key == "prim.Broadcast":
                return False
            f = fold_radix(expand.simplify(index))
            if guards is not None and guards[position]:
                f = within_guards(f, guards[position], x, acc, expand, over_range, at_min, lanes, fresh)
            f, f_same, delta = stepped(f)
            if _type_key(delta) != "ir.IntImm":
                # A step known only at run time (a row of ``m`` elements per block: ``bx * m + t``).
                if step is not None or not _invariant_step(delta, x_next, acc, lanes):
                    return False
                if symbolic is not None and not tvm_ffi.structural_equal(delta, symbolic):
                    return False
                symbolic = delta
                conditions.append([same.simplify(expand.simplify(c)) for c in (guards or [[]] * len(indices))[position]])
            elif int(delta.value) == 0 or symbolic is not None or (step is not None and int(delta.value) != step):
                return False
            else:
                step = int(delta.value)
            if symbolic is None:
                rest = Analyzer().simplify(f_same - delta * x_next)
            else:  # f(x) = f(0) + delta * x, delta free of x (the simplifier does not cancel m * x - x * m)
                rest = at_zero.simplify(f_same)
            if _uses_vars(rest, {_key(x_next)}):
                return False
            rests.append(rest)
        if symbolic is not None:
            return _within_symbolic_step(rests, symbolic, conditions, over_range)
        base = at_min.simplify(rests[0])
        shifted = [over_range.simplify(rest - base) for rest in rests]
        bounds = [over_range.const_int_bound(rest) for rest in shifted]
        if max(b.max_value for b in bounds) - min(b.min_value for b in bounds) < abs(step):
            return True
        if guards and any(guards) and spread_under_guards(rests, base, guards, over_range, same, expand) < abs(step):
            return True
        if spread_within_extents(shifted, bounds, acc.inner, over_range) < abs(step):
            return True
        # Unrolled copies touch the same form at constant offsets: an arithmetic progression of offsets
        # is one more digit of the mixed-radix number.
        renamed: list = []
        offsets = _constant_offsets(rests)
        if offsets is None:
            rests, renamed = _one_form(rests, acc)
            offsets = _constant_offsets(rests)
        extra = None if offsets is None else _offset_digits(offsets)
        return extra is not None and _mixed_radix_injective(rests[0], step, x_extent, acc, lanes + renamed, extra)
    except Exception:  # anything the analyzer cannot reason about: no claim of independence
        return False


def _invariant_step(delta, x_next, acc: "_LoopAccesses", lanes: list) -> bool:
    """Whether the symbolic step ``delta`` is fixed while the loop runs: free of the loop's own
    variable, of the loops inside it and of vector lanes (sizes and outer loop variables only)."""
    moving = {_key(x_next)} | {_key(v) for v, _, _ in acc.inner} | {_key(v) for v, _, _ in lanes}
    return _fixed_while_running(delta, moving)


def _fixed_while_running(expr, moving: set[int]) -> bool:
    """Whether ``expr`` keeps its value while a loop runs: it reads no memory, calls nothing and
    reads none of the variables ``moving`` (those the loop sets)."""
    return not _reads_memory(expr) and not _contains(
        expr, lambda n: _type_key(n) in ("ir.Var", "ir.Call") and (_type_key(n) == "ir.Call" or _key(n) in moving))


def _within_symbolic_step(rests: list, step, conditions: list, over_range) -> bool:
    """Iteration ``x`` touching ``step * x + rest`` (``step`` an expression fixed while the loop
    runs) touches its own elements when every ``rest`` lies in ``[low, low + step)`` for one
    constant ``low``: proven under each access's guards (``t < m`` for ``bx * m + t``), which also
    make ``step`` positive wherever an access runs (``0 <= rest - low < step``)."""
    low = min(over_range.const_int_bound(over_range.simplify(rest)).min_value for rest in rests)
    if low < -(1 << 40):
        return False
    for rest, guards in zip(rests, conditions):
        prover = over_range.clone()
        with prover.constraint_scope(_all_of(guards)):
            if not prover.can_prove(rest - tirx.const(low, _dtype(rest)) < step):
                return False
    return True


def _mixed_radix_injective(rest, step: int, x_extent, acc: "_LoopAccesses", lanes: list,
                           extra: list | None = None) -> bool:
    """Whether ``step * x + rest`` is one-to-one in ``x`` and the inner loop variables.

    ``rest`` must be affine in the inner variables (``i_1 * 256 + j_1``) with constant extents, but
    for the most significant digit; sorted by coefficient, each coefficient must exceed the largest
    value all smaller terms can add up to — a mixed-radix number, like the flat index of a row-major
    array.
    """
    ranged = Analyzer()  # the digits' values: ``w // 2`` is 0 and ``w % 2`` is w for w < 2
    for var, lo, extent in list(acc.inner) + lanes:
        ranged.bind(var, tvm.ir.Range.from_min_extent(lo, extent), allow_override=True)
    rest = ranged.simplify(rest)
    terms = [(abs(step), x_extent)] + list(extra or [])
    remainder = rest
    for var, lo, extent in list(acc.inner) + lanes:
        fresh = tirx.Var("v_next", _dtype(var))
        bumped, same = Analyzer(), Analyzer()
        bumped.bind(var, fresh + 1)
        same.bind(var, fresh)
        delta = Analyzer().simplify(bumped.simplify(rest) - same.simplify(rest))
        if _type_key(delta) != "ir.IntImm":
            return False
        coef = int(delta.value)
        if coef == 0:
            continue
        if not _is_zero(lo):
            return False
        # A loop of symbolic extent can only be the most significant digit (checked below).
        terms.append((abs(coef), int(extent.value) if _type_key(extent) == "ir.IntImm" else None))
        remainder = remainder - delta * var
    remainder = Analyzer().simplify(remainder)
    inner_keys = {_key(v) for v, _, _ in list(acc.inner) + lanes}
    used = []
    walk_typed(remainder, ("ir.Var",), lambda n: used.append(_type_key(n) == "ir.Var" and _key(n) in inner_keys))
    if any(used):
        return False
    terms.sort(key=lambda t: (t[0], t[1] is None))
    reach = 0
    for position, (coef, extent) in enumerate(terms):
        if coef <= reach:
            return False
        if extent is None:  # any number of values: only as the last digit, the only one this large
            return position == len(terms) - 1
        reach += coef * (extent - 1)
    return True
