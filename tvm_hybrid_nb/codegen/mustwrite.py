"""The must-write walk: which elements of a buffer an iteration of a loop surely writes before it
reads them (TIR analyses, no Python ast).  A walk in program order keeps the regions written so
far (index bases with their enumerated offsets); a read outside them, a write under a condition it
cannot prove, or a use other than loads and stores ends it with the reason (:class:`_NotProven`).
Loop nests under guards are enumerated with numpy (:func:`_guarded_nest`).  :mod:`.sharing` asks
it whether lanes may privatise or share a buffer."""
from __future__ import annotations

import functools

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx

from .analysis import _contains, _is_call_of, _reads_memory, _uses_vars, walk_typed
from .names import _dtype, _key, _type_key
from .work import Analyzer

#: Calls that take memory by address (what they write is not visible as stores).
_POINTER_CALLS = ("address_of", "tvm_access_ptr", "call_extern", "call_pure_extern", "call_packed",
                  "call_cpacked", "call_llvm_intrin", "call_llvm_pure_intrin", "tvm_call_packed")


class _NotProven(Exception):
    pass


def _uses(node, buf) -> tuple[int, int]:
    """How many loads and stores of buffer ``buf`` ``node`` holds, and how many other mentions (its
    allocation, a view over it, a call taking its address...): a buffer is a variable of buffer type,
    met once under each load and store."""
    counts = [0, 0]

    def visit(n):
        key = _type_key(n)
        if key == "ir.Var" and n.same_as(buf):
            counts[1] += 1
        elif ((key == "ir.TensorLoad" and n.source.same_as(buf))
              or (key == "tirx.BufferStore" and n.buffer.same_as(buf))):
            counts[0] += 1
            counts[1] -= 1
        elif key == "ir.TensorRegion" and n.source.same_as(buf):
            counts[1] -= 1  # a block's T.reads / T.writes: what it touches, said again
        elif key == "s_tir.MatchBufferRegion" and n.source.source.same_as(buf):
            counts[1] += 1  # a view over its region (the region itself was not counted)
        return True

    walk_typed(node, ("ir.Var", "ir.TensorLoad", "tirx.BufferStore", "ir.TensorRegion", "s_tir.MatchBufferRegion"),
               visit)
    return counts[0], counts[1]


def _mentions(expr, buf) -> bool:
    """Whether ``expr`` refers to buffer ``buf`` (a buffer is a variable of buffer type)."""
    return _contains(expr, lambda m: _type_key(m) == "ir.Var" and m.same_as(buf))


#: The most elements one written region (or one read) may enumerate; larger ones are not claimed.
_MAX_OFFSETS = 1 << 20


def _progression(coef: int, lo: int, count: int) -> np.ndarray:
    """``coef * v`` for ``v`` in ``[lo, lo + count)``, sorted and distinct (one value when ``coef`` is 0)."""
    if coef == 0:
        return np.zeros(1, dtype=np.int64)
    steps = coef * np.arange(lo, lo + count, dtype=np.int64)
    return steps if coef > 0 else steps[::-1].copy()


def _sums(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Every ``x + y`` for ``x`` of ``a`` and ``y`` of ``b`` (both sorted and distinct), sorted and
    distinct.  A run of consecutive integers plus values no further apart than its length is one
    run (a tile's offsets spread over its loop): built directly, without sorting the products."""
    if not a.size or not b.size:
        return np.zeros(0, dtype=np.int64)
    if a.size == 1 or b.size == 1:
        return a + b[0] if b.size == 1 else b + a[0]
    for run, other in ((a, b), (b, a)):
        if run[-1] - run[0] + 1 == run.size and int(np.diff(other).max()) <= run.size:
            return np.arange(run[0] + other[0], run[-1] + other[-1] + 1, dtype=np.int64)
    return np.unique((a[:, None] + b[None, :]).ravel())


class _MustWrite:
    """The walk of :func:`~.sharing.written_before_read` (raises :class:`_NotProven` with the reason).

    What is written is a tuple of regions; a region is one ``(base, offsets)`` a dimension: the
    elements ``base + o`` for every ``o`` of ``offsets`` (a sorted array of integers) in that
    dimension, all combinations across dimensions.  A store writes one element (a vector store:
    ``offsets`` its lanes); an inner loop that stores at every iteration spreads it over the loop's
    range (``B[i * 4 + j]`` over ``j`` in [0, 4), then ``i`` in [0, 8): ``(0, 0..31)``), so a read
    the loop nest wrote whole is seen written."""

    def __init__(self, buf, views=()):
        self.buf = buf
        #: ``buf`` and the views that address its elements alike.
        self.names = (buf, *views)
        self.name = str(buf.name)
        self.analyzer = Analyzer()
        #: What each variable is bound to, in the order first bound (key -> (var, value or range)).
        self.bound: dict[int, tuple] = {}
        #: Facts of the IR's nodes that the walk asks again at each iteration it walks a loop for
        #: (its first and its others, nested: 2 ** depth times), by (question, node keys).
        self._facts: dict[tuple, object] = {}

    def _fact(self, question, *nodes):
        key = (question.__name__, *(_key(n) for n in nodes))
        if key not in self._facts:
            self._facts[key] = question(*nodes)
        return self._facts[key]

    def bind(self, var, value) -> None:
        """Bind ``var`` for the analyzer.  A variable bound to one value (a range of one: a loop's
        first iteration) is substituted by it for good, ``allow_override`` or not: binding it again
        starts a fresh analyzer with every binding replayed, this one in its place."""
        key = _key(var)
        before = self.bound.get(key)
        self.bound[key] = (var, value)
        if before is None or (isinstance(before[1], tvm.ir.Range) and _more_than_one(before[1].extent)):
            self.analyzer.bind(var, value, allow_override=True)
            return
        self.analyzer = Analyzer()
        for v, val in self.bound.values():
            self.analyzer.bind(v, val, allow_override=True)

    def fail(self, why: str):
        raise _NotProven(why)

    def mine(self, buf) -> bool:
        return any(buf.same_as(b) for b in self.names)

    def mentioned(self, node) -> bool:
        return any(self._fact(_mentions, node, b) for b in self.names)

    # ------------------------------------------------------------------ regions
    def dim(self, index):
        """``(base, offsets)`` of one index (a Ramp: its lanes), or None."""
        key = _type_key(index)
        if key == "prim.Ramp":
            base = self.dim(index.base)
            stride = self.analyzer.simplify(index.stride)
            if base is None or _type_key(stride) != "ir.IntImm" or _type_key(index.lanes) != "ir.IntImm":
                return None
            steps = int(stride.value) * np.arange(int(index.lanes.value), dtype=np.int64)
            return base[0], np.unique((base[1][:, None] + steps[None, :]).ravel())
        if key == "prim.Broadcast":
            return self.dim(index.value)
        if _reads_memory(index):
            return None
        base, const = _split_const(self.analyzer.simplify(index))
        return base, np.array([const], dtype=np.int64)

    def index(self, indices):
        out = []
        for i in indices:
            d = self.dim(i)
            if d is None:
                return None
            out.append(d)
        return tuple(out)

    def values(self, expr):
        """Every value ``expr`` (linear in variables of constant bounds) may take, or None."""
        if _type_key(expr) == "ir.IntImm":
            return np.array([int(expr.value)], dtype=np.int64)
        free = _free_vars(expr)
        coefs = tvm.sym.detect_linear_equation(expr, free)
        if len(coefs) != len(free) + 1 or any(_type_key(c) != "ir.IntImm" for c in coefs):
            # Not linear (``fused % 300``): every integer of its bounds, a superset of its values.
            bound = self.analyzer.const_int_bound(expr)
            lo, hi = int(bound.min_value), int(bound.max_value)
            if hi < lo or hi - lo + 1 > _MAX_OFFSETS:
                return None
            return np.arange(lo, hi + 1, dtype=np.int64)
        out = np.array([int(coefs[-1].value)], dtype=np.int64)
        for var, coef in zip(free, coefs):
            bound = self.analyzer.const_int_bound(var)
            lo, hi = int(bound.min_value), int(bound.max_value)
            if hi < lo or (hi - lo + 1) * out.size > _MAX_OFFSETS:
                return None
            out = _sums(out, _progression(int(coef.value), lo, hi - lo + 1))
        return out

    def within(self, read, region) -> bool:
        """Whether every element of dimension ``read`` (base, offsets) is one of ``region``'s."""
        (rbase, roffs), (wbase, woffs) = read, region
        if not roffs.size:
            return True
        if not woffs.size:
            return False
        lo, hi = int(woffs[0]), int(woffs[-1])  # region offsets are sorted and distinct
        run = woffs.size == hi - lo + 1  # consecutive offsets: only the read's ends matter
        if tvm_ffi.structural_equal(rbase, wbase):
            shift = np.zeros(1, dtype=np.int64)
        else:
            difference = self.analyzer.simplify(rbase - wbase)
            if run:  # the difference's bounds decide without enumerating it when they fit
                bound = self.analyzer.const_int_bound(difference)
                if lo <= int(bound.min_value) + int(roffs[0]) and int(bound.max_value) + int(roffs[-1]) <= hi:
                    return True
            shift = self.values(difference)
            if shift is None or shift.size * roffs.size > _MAX_OFFSETS:
                return False
        if not shift.size:
            return True
        if run:
            return lo <= int(shift.min()) + int(roffs[0]) and int(shift.max()) + int(roffs[-1]) <= hi
        wanted = (shift[:, None] + roffs[None, :]).ravel()
        at = np.minimum(np.searchsorted(woffs, wanted), woffs.size - 1)
        return bool((woffs[at] == wanted).all())

    def covered(self, indices, written) -> bool:
        return any(len(w) == len(indices) and all(self.within(r, d) for r, d in zip(indices, w))
                   for w in written)

    def add(self, written: tuple, region) -> tuple:
        """``written`` with ``region``, merged into a region that differs from it in one
        dimension's offsets only (the unrolled stores of a vector tile)."""
        if self.covered(region, written):
            return written
        for k, other in enumerate(written):
            if len(other) != len(region):
                continue
            differ = [d for d, (a, b) in enumerate(zip(region, other))
                      if not (tvm_ffi.structural_equal(a[0], b[0]) and np.array_equal(a[1], b[1]))]
            if len(differ) == 1 and tvm_ffi.structural_equal(region[differ[0]][0], other[differ[0]][0]):
                d = differ[0]
                merged = list(other)
                merged[d] = (other[d][0], np.union1d(other[d][1], region[d][1]))
                return written[:k] + (tuple(merged),) + written[k + 1:]
        return written + (region,)

    def spread(self, region, var, lo: int, extent: int):
        """``region`` (written at every value of loop variable ``var`` in [lo, lo + extent)) over
        those values, or None when it is not linear in ``var`` in one dimension."""
        dims = [d for d, (base, _) in enumerate(region) if _uses_vars(base, {_key(var)})]
        if len(dims) != 1:
            return None
        (d,) = dims
        base, offs = region[d]
        coefs = tvm.sym.detect_linear_equation(base, [var])
        if len(coefs) != 2 or _type_key(coefs[0]) != "ir.IntImm":
            return None
        rest, const = _split_const(self.analyzer.simplify(coefs[1]))
        if _uses_vars(rest, {_key(var)}) or offs.size * extent > _MAX_OFFSETS:
            return None
        spread = list(region)
        spread[d] = (rest, _sums(offs, _progression(int(coefs[0].value), lo, extent) + const))
        return tuple(spread)

    def expr(self, expr, written) -> None:
        problems = []  # (an exception raised inside the walk's callback would come back as another)

        def visit(node):
            if problems:
                return True
            key = _type_key(node)
            if key == "ir.TensorLoad" and self.mine(node.source):
                indices = self.index(node.indices)
                if indices is None or not self.covered(indices, written):
                    problems.append(f"an iteration may read {self.name} before writing it")
            elif key == "ir.Call" and (any(_is_call_of(node, c) for c in _POINTER_CALLS)
                                       or isinstance(node.op, tvm.ir.GlobalVar)):
                if self.mentioned(node):
                    problems.append(f"a call takes {self.name} by address")
            return True

        walk_typed(expr, ("ir.TensorLoad", "ir.Call"), visit)
        if problems:
            self.fail(problems[0])

    def proves(self, cond) -> int:
        """1: ``cond`` holds, -1: it does not, 0: unknown."""
        if _reads_memory(cond):
            return 0
        if self.analyzer.can_prove(cond):
            return 1
        if self.analyzer.can_prove(tirx.Not(cond)):
            return -1
        return 0

    def stmt(self, stmt, written: tuple) -> tuple:
        """What is written after ``stmt``, given ``written`` before it."""
        key = _type_key(stmt)
        if key == "tirx.SeqStmt":
            for s in stmt.seq:
                written = self.stmt(s, written)
            return written
        if key == "tirx.BufferStore":
            for e in list(stmt.indices) + [stmt.value]:
                self.expr(e, written)
            if self.mine(stmt.buffer):
                indices = self.index(stmt.indices)
                if indices is not None:
                    written = self.add(written, indices)
            return written
        if key == "tirx.IfThenElse":
            self.expr(stmt.condition, written)
            holds = self.proves(stmt.condition)
            if holds == 1:
                return self.stmt(stmt.then_case, written)
            if holds == -1:
                return self.stmt(stmt.else_case, written) if stmt.else_case is not None else written
            then = self.stmt(stmt.then_case, written)
            other = self.stmt(stmt.else_case, written) if stmt.else_case is not None else written
            return tuple(w for w in then if self.covered(w, other))
        if key == "tirx.For":
            return self.loop(stmt, written)
        if key == "tirx.Bind":
            self.expr(stmt.value, written)
            if _dtype(stmt.var) == "handle" and self.mentioned(stmt.value):
                self.fail(f"a pointer into {self.name} is bound")
            if _dtype(stmt.var) != "handle":
                self.bind(stmt.var, stmt.value)
            return written
        if key in ("tirx.Evaluate",):
            self.expr(stmt.value, written)
            return written
        if key == "tirx.AssertStmt":
            self.expr(stmt.condition, written)
            return written
        if key == "tirx.AttrStmt":
            if hasattr(stmt.value, "dtype"):
                self.expr(stmt.value, written)
            return self.stmt(stmt.body, written)
        if key == "tirx.DeclBuffer":
            if stmt.data is not None:
                self.expr(stmt.data, written)
            return self.stmt(stmt.body, written) if getattr(stmt, "body", None) is not None else written
        if key == "tirx.AllocBuffer":
            return self.stmt(stmt.body, written) if getattr(stmt, "body", None) is not None else written
        if key == "tirx.While":
            self.expr(stmt.condition, written)
            self.stmt(stmt.body, written)
            return written
        if key == "s_tir.SBlockRealize":
            block = stmt.block
            if len(block.match_buffers):
                self.fail(f"block {block.name_hint} matches a buffer region")
            for value in stmt.iter_values:
                self.expr(value, written)
            self.expr(stmt.predicate, written)
            for iv, value in zip(block.iter_vars, stmt.iter_values):
                self.bind(iv.var, value)
            if block.init is not None:
                # It runs at the first reduction step: its writes count where that is provable.
                first = [tirx.EQ(iv.var, iv.dom.min) for iv in block.iter_vars if int(iv.iter_type) == 2]
                initialised = self.stmt(block.init, written)
                if first and self.proves(functools.reduce(tirx.And, first)) == 1:
                    written = initialised
            if self.proves(stmt.predicate) == 1:
                return self.stmt(block.body, written)
            self.stmt(block.body, written)
            return written
        self.fail(f"it holds a {key.split('.')[-1]} statement")

    def loop(self, node, written: tuple) -> tuple:
        for e in (node.min, node.extent):
            self.expr(e, written)
        if not self.mentioned(node.body):
            return written
        guarded = self.guarded_nest(node, written)
        return guarded if guarded is not None else self.loop_walk(node, written)

    def guarded_nest(self, node, written: tuple) -> tuple | None:
        """What is written after loop nest ``node`` when its stores sit under guards that hold for
        some iterations only (see :func:`_guarded_nest`): its reads of the buffer and the elements
        it writes are enumerated where the guards hold.  None when the nest is not of that form or
        the enumeration cannot tell (the walk then decides)."""
        nest = self._fact(_guarded_nest, node)
        if nest is None:
            return None
        env, stores = nest
        env = _NestValues(env, node, self.bound)
        for st, where, _ in stores:
            loads = []  # its reads of the buffer; None for a call that takes it by address

            def visit(n, loads=loads):
                key = _type_key(n)
                if key == "ir.TensorLoad" and self.mine(n.source):
                    loads.append(n)
                elif key == "ir.Call" and self.mentioned(n):
                    loads.append(None)
                return True

            for e in list(st.indices) + [st.value]:
                walk_typed(e, ("ir.TensorLoad", "ir.Call"), visit)
            for load in loads:
                read = None if load is None else _rows_box(load.indices, env, where)
                if read is None or not self.covered(read[0], written):
                    return None
        for st, where, surely in stores:
            if self.mine(st.buffer):
                box = _rows_box(st.indices, env, where) if surely else None
                if box is None or not box[1]:
                    return None
                written = self.add(written, box[0])
        return written

    def loop_walk(self, node, written: tuple) -> tuple:
        var = node.loop_var
        inner = self._fact(_defined_vars, node.body) | {_key(var)}
        kind = int(node.kind)
        runs = kind in (0, 1, 2, 3) and self.analyzer.can_prove(node.extent >= 1)
        if runs and not self._fact(_conditions_use, node.body, var):
            # No condition tells the first iteration from the others: one walk over them all, which
            # holds in any order of the iterations (serial, parallel, vector lanes in lockstep).
            self.bind(var, tvm.ir.Range.from_min_extent(node.min, node.extent))
            return self.spread_loop(node, var, inner, written, self.stmt(node.body, written), node.min, node.extent)
        if not runs or kind not in (0, 3):  # no first iteration to count on: only check the reads
            self.bind(var, tvm.ir.Range.from_min_extent(node.min, node.extent))
            self.stmt(node.body, written)
            return written
        self.bind(var, tvm.ir.Range.from_min_extent(node.min, 1))
        first = self.stmt(node.body, written)
        kept = tuple(w for w in first if not any(_uses_vars(base, inner) for base, _ in w))
        if self.analyzer.can_prove(node.extent == 1):
            return kept
        self.bind(var, tvm.ir.Range.from_min_extent(node.min + 1, node.extent - 1))
        rest = self.stmt(node.body, kept)
        return self.spread_loop(node, var, inner, kept, rest, node.min + 1, node.extent - 1)

    def spread_loop(self, node, var, inner: set, kept: tuple, rest: tuple, lo, extent) -> tuple:
        """``kept`` with what iterations ``[lo, lo + extent)`` of loop ``node`` wrote (``rest``, with
        the variable's value in each) spread over them."""
        lo, extent = self.analyzer.simplify(lo), self.analyzer.simplify(extent)
        kept = tuple(w for w in kept if not any(_uses_vars(base, inner) for base, _ in w))
        if _type_key(lo) != "ir.IntImm" or _type_key(extent) != "ir.IntImm" or int(extent.value) < 1:
            if self.analyzer.can_prove(extent >= 1):  # what every iteration wrote, at the same place
                for region in rest:
                    if not any(_uses_vars(base, inner) for base, _ in region):
                        kept = self.add(kept, region)
            return kept
        for region in rest:
            if any(_uses_vars(base, inner - {_key(var)}) for base, _ in region):
                continue
            if any(_uses_vars(base, {_key(var)}) for base, _ in region):
                region = self.spread(region, var, int(lo.value), int(extent.value))
                if region is None:
                    continue
            kept = self.add(kept, region)
        return kept


#: Integer TIR operators as numpy functions, for :func:`_guarded_nest`.
_INT_OPS = {
    "prim.Add": np.add, "prim.Sub": np.subtract, "prim.Mul": np.multiply,
    "prim.FloorDiv": np.floor_divide, "prim.FloorMod": np.mod,
    "prim.Min": np.minimum, "prim.Max": np.maximum,
    "prim.LT": np.less, "prim.LE": np.less_equal, "prim.GT": np.greater, "prim.GE": np.greater_equal,
    "prim.EQ": np.equal, "prim.NE": np.not_equal, "prim.And": np.logical_and, "prim.Or": np.logical_or,
}


def _int_values(expr, env: dict):
    """``expr`` (integer or boolean, without memory reads) over the arrays of ``env`` (variable
    key -> values, broadcastable), or None for anything else."""
    key = _type_key(expr)
    if key == "ir.IntImm":
        return np.int64(expr.value)
    if key == "ir.Var":
        values = env.get(_key(expr))
        return values if isinstance(values, (np.ndarray, np.integer)) else None
    if key == "prim.Not":
        a = _int_values(expr.a, env)
        return None if a is None else np.logical_not(a)
    if key == "prim.Cast" and ("int" in str(expr.dtype) or str(expr.dtype) == "bool"):
        return _int_values(expr.value, env)
    op = _INT_OPS.get(key)
    if op is None:
        return None
    a, b = _int_values(expr.a, env), _int_values(expr.b, env)
    if a is None or b is None:
        return None
    if key in ("prim.FloorDiv", "prim.FloorMod") and np.any(b == 0):
        return None
    return op(a, b)


def _guarded_nest(node):
    """``(env, stores)`` of loop nest ``node`` when it is loops of constant ranges down to plain
    stores under guards (a block predicate, ``if`` without ``else``) that can be enumerated:
    ``env`` the values of the loop variables and block iterators (variable key -> broadcastable
    arrays over the nest's iterations), ``stores`` each store with the iterations its guards let
    through and whether it surely runs there (a reduction's init runs at the first step only).
    None otherwise, or when the nest has more than ``_MAX_OFFSETS`` iterations."""
    loops, leaf = [], node
    while _type_key(leaf) == "tirx.For":
        lo, extent = leaf.min, leaf.extent
        if int(leaf.kind) not in (0, 1, 2, 3) or _type_key(lo) != "ir.IntImm" or _type_key(extent) != "ir.IntImm":
            return None
        loops.append((leaf.loop_var, int(lo.value), int(extent.value)))
        leaf = leaf.body
    full = tuple(extent for _, _, extent in loops)
    if not loops or int(np.prod(full, dtype=np.int64)) > _MAX_OFFSETS:
        return None
    guarded = _contains(leaf, lambda n: _type_key(n) == "tirx.IfThenElse")
    if _type_key(leaf) == "s_tir.SBlockRealize":
        guarded = guarded or not (_type_key(leaf.predicate) == "ir.IntImm" and int(leaf.predicate.value) == 1)
    if not guarded:  # every iteration stores: the walk spreads the stores over the loops exactly
        return None
    env = {}
    for axis, (var, lo, extent) in enumerate(loops):
        shape = [1] * len(loops)
        shape[axis] = extent
        env[_key(var)] = np.arange(lo, lo + extent, dtype=np.int64).reshape(shape)
    parts = [(leaf, np.ones(full, dtype=bool), True)]
    if _type_key(leaf) == "s_tir.SBlockRealize":
        block = leaf.block
        if len(block.match_buffers) or len(block.alloc_buffers):
            return None
        for iv, value in zip(block.iter_vars, leaf.iter_values):
            values = _int_values(value, env)
            # An iterator that also depends on the loops around the nest: its value is substituted.
            env[_key(iv.var)] = (iv.var, value) if values is None else values
        where = _int_values(leaf.predicate, env)
        if where is None:
            return None
        where = np.broadcast_to(np.asarray(where, dtype=bool), full)
        parts = [(block.body, where, True)] + ([(block.init, where, False)] if block.init is not None else [])
    stores = []
    while parts:
        stmt, where, surely = parts.pop(0)
        key = _type_key(stmt)
        if key == "tirx.SeqStmt":
            parts[:0] = [(s, where, surely) for s in stmt.seq]
        elif key == "tirx.BufferStore":
            stores.append((stmt, where, surely))
        elif key == "tirx.IfThenElse" and stmt.else_case is None:
            cond = _int_values(stmt.condition, env)
            if cond is None:
                return None
            parts.insert(0, (stmt.then_case, where & np.broadcast_to(np.asarray(cond, dtype=bool), full), surely))
        else:
            return None
    return env, stores


class _NestValues(dict):
    """The values of :func:`_guarded_nest`'s variables, and the index of an access as
    ``(base, values)``: ``base`` an expression of the variables defined outside the nest (fixed
    while it runs: ``fused // 300`` of ``v0 = fused // 300 + ax0``), ``values`` what the rest
    takes at each iteration.  Block iterators that depend on outer variables are substituted."""

    def __init__(self, env: dict, node, bound: dict):
        super().__init__(env)
        self.loop_vars = []
        loop = node
        while _type_key(loop) == "tirx.For":
            self.loop_vars.append(loop.loop_var)
            loop = loop.body
        self.analyzer = Analyzer()
        for var, value in bound.values():  # the outer variables' bindings, as the walk has them
            self.analyzer.bind(var, value, allow_override=True)
        for item in env.values():
            if isinstance(item, tuple):
                self.analyzer.bind(item[0], item[1], allow_override=True)

    def index(self, expr):
        values = _int_values(expr, self)
        if values is not None:
            return tirx.const(0, _dtype(expr)), values
        expr = self.analyzer.simplify(expr)
        coefs = tvm.sym.detect_linear_equation(expr, self.loop_vars)
        if len(coefs) != len(self.loop_vars) + 1 or any(_type_key(c) != "ir.IntImm" for c in coefs[:-1]):
            return None
        base, const = _split_const(self.analyzer.simplify(coefs[-1]))
        if _uses_vars(base, {_key(v) for v in self.loop_vars}):
            return None
        values = np.int64(const)
        for var, coef in zip(self.loop_vars, coefs):
            values = values + int(coef.value) * self[_key(var)]
        return base, values


def _rows_box(indices, env: dict, where):
    """``(region, exact)``: the box (each dimension's values, every combination) holding the
    elements ``indices`` address at the iterations ``where`` lets through, and whether it holds
    nothing else; None when an index cannot be enumerated or no iteration passes.  With ``env`` a
    :class:`_NestValues`, an index may also depend on variables outside the nest (the base)."""
    if isinstance(env, _NestValues):
        split = [env.index(i) for i in indices]
        if any(s is None for s in split):
            return None
        bases, values = [b for b, _ in split], [v for _, v in split]
    else:
        values = [_int_values(i, env) for i in indices]
        bases = [tirx.const(0, _dtype(i)) for i in indices]
    if any(v is None for v in values) or not where.any():
        return None
    columns = [np.broadcast_to(v, where.shape)[where] for v in values]
    dims = [np.unique(c) for c in columns]
    return tuple(zip(bases, dims)), _fills_box(columns, dims)


def _fills_box(columns: list, dims: list) -> bool:
    """Whether the rows ``zip(*columns)`` take every combination of the values ``dims`` (each
    column's distinct values, sorted).  Each row is numbered in the box's mixed radix and the
    numbers counted: ``np.unique(axis=0)`` over a million rows sorts them as records (a second)."""
    combinations = 1
    for d in dims:
        combinations *= d.size
    if columns[0].size < combinations:
        return False
    if combinations >= 1 << 62:  # the numbers would overflow int64: rows as records
        return np.unique(np.stack(columns, axis=-1), axis=0).shape[0] == combinations
    number = np.zeros(columns[0].shape, np.int64)
    for column, d in zip(columns, dims):
        number = number * d.size + np.searchsorted(d, column)
    return np.unique(number).size == combinations


def _defined_vars(stmt) -> set[int]:
    """Keys of the variables ``stmt`` defines (loop variables, bindings, block iterators)."""
    found: set[int] = set()

    def visit(n):
        key = _type_key(n)
        if key == "tirx.For":
            found.add(_key(n.loop_var))
        elif key == "tirx.Bind":
            found.add(_key(n.var))
        elif key == "s_tir.SBlock":
            found.update(_key(iv.var) for iv in n.iter_vars)
        return True

    walk_typed(stmt, ("tirx.For", "tirx.Bind", "s_tir.SBlock"), visit)
    return found


def _split_const(expr):
    """``(rest, c)`` with ``expr == rest + c`` and ``c`` an integer (a simplified expression's constant term)."""
    key = _type_key(expr)
    if key == "ir.IntImm":
        return tvm.tirx.const(0, _dtype(expr)), int(expr.value)
    if key in ("prim.Add", "prim.Sub") and _type_key(expr.b) == "ir.IntImm":
        return expr.a, int(expr.b.value) * (1 if key == "prim.Add" else -1)
    return expr, 0


def _free_vars(expr) -> list:
    """The distinct variables of ``expr``, in order of appearance."""
    found: dict[int, object] = {}

    def visit(node):
        if _type_key(node) == "ir.Var":
            found.setdefault(_key(node), node)
        return True

    walk_typed(expr, ("ir.Var",), visit)
    return list(found.values())


def _more_than_one(extent) -> bool:
    """Whether a range of ``extent`` surely holds more than one value (else it may be substituted)."""
    return _type_key(extent) == "ir.IntImm" and int(extent.value) > 1


def _conditions_use(body, var) -> bool:
    """Whether a condition of ``body`` (a branch, a loop's, a block's predicate, a reduction block's
    init) reads ``var``, or
    a variable bound to a value that does (``cse_v2 = rc_0 * 8``, then ``if cse_v2 + rc_1 == 0``)."""
    keys = {_key(var)}
    found = []

    def visit(n):
        if not found:
            key = _type_key(n)
            if key == "tirx.Bind" and _uses_vars(n.value, keys):
                keys.add(_key(n.var))
            elif key == "s_tir.SBlockRealize":
                for iv, value in zip(n.block.iter_vars, n.iter_values):
                    if _uses_vars(value, keys):
                        keys.add(_key(iv.var))
                        # A reduction's init runs where its reduction iterators are at their start.
                        if n.block.init is not None and int(iv.iter_type) == 2:
                            found.append(n)
            cond = (n.condition if key in ("tirx.IfThenElse", "tirx.While") else
                    n.predicate if key == "s_tir.SBlockRealize" else None)
            if cond is not None and _uses_vars(cond, keys):
                found.append(n)
        return tvm_ffi.WalkResult.ADVANCE  # (True would skip the children in pre-order)

    walk_typed(body, ("tirx.Bind", "s_tir.SBlockRealize", "tirx.IfThenElse", "tirx.While"), visit, order="pre")
    return bool(found)
