"""Sanitizer instrumentation (``check=True``): which accesses are logged for races, shadowed for
uninitialised reads and checked for bounds, and which narrow results a C target reads unwrapped."""
from __future__ import annotations

import ast
import contextlib
import functools

import tvm

from .analysis import _reads_memory, walk_typed
from .names import Value, _Axis, _BufferInfo, _dtype, _float_bits, _is_int, _key, _lanes, _name, _store_name, _type_key
from .targets import C_KINDS, LLVM_KINDS, overflow_is_poison


#: The nodes :meth:`SanitizerMixin._note_truncated` may mark.
_PROMOTABLE = ("prim.Add", "prim.Sub", "prim.Mul", "prim.LShift", "prim.BitwiseNot", "ir.Call")


class SanitizerMixin:
    """The sanitize room of :class:`~.generator.HybridCodegen` (see the module docstring)."""

    def _note_truncated(self, expr) -> None:
        """Sanitizer, C targets: mark the narrow integer operations in ``expr`` (a stored or bound
        value) whose result reaches the store only through operations that agree modulo the width
        (``+ - * <<``, bitwise ``& | ^ ~``, the arms of a Select or an ``if_then_else``, a cast to no
        wider an integer): the store's truncation makes C's promoted value and the TIR's wrap the
        same there (and a ``~`` of an unsigned value, negative in C, the TIR's complement)."""
        if not (self.check and self.target_kind in C_KINDS):
            return
        stack = [expr]
        while stack:
            node = stack.pop()
            key, dtype = _type_key(node), _dtype(node)
            if not _is_int(dtype) or _float_bits(dtype) >= 32:
                continue
            call = node.op.name.rsplit(".", 1)[-1] if key == "ir.Call" and isinstance(node.op, tvm.ir.Op) else None
            if key in self.PROMOTED_OPS or call == "shift_left":
                self.c_truncated.add(_key(node))
                stack += [node.a, node.b] if key in self.POISON_ON_OVERFLOW else [
                    node.a if call is None else node.args[0]]
            elif key in ("prim.BitwiseAnd", "prim.BitwiseOr", "prim.BitwiseXor"):
                stack += [node.a, node.b]
            elif key == "prim.BitwiseNot":  # ``~x``: a node of its own in TVM 0.27
                self.c_truncated.add(_key(node))
                stack.append(node.a)
            elif call in ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"):
                if call == "bitwise_not":
                    self.c_truncated.add(_key(node))
                stack += list(node.args)
            elif key == "prim.Select":
                stack += [node.true_value, node.false_value]
            elif call == "if_then_else":
                stack += [node.args[1], node.args[2]]
            elif (key == "prim.Cast" and _is_int(_dtype(node.value))
                  and _float_bits(_dtype(node.value)) >= _float_bits(dtype)):
                stack.append(node.value)

    def _note_arms_truncated(self, cond_expr, true_expr, false_expr, lazy: bool) -> None:
        """Sanitizer, C targets: C prints an ``if_then_else`` (``lazy``) as stores into a ``condval``
        of its dtype, so its arms are truncated (:meth:`_note_truncated`); TVM's RewriteUnsafeSelect
        makes a Select whose arm loads one.  The condition is not (``abs``: ``d >= 0`` and the arm
        ``d`` may be one node)."""
        if not (self.check and self.target_kind in C_KINDS):
            return
        if not (lazy or (_lanes(_dtype(cond_expr)) == 1 and any(map(_reads_memory, (true_expr, false_expr))))):
            return
        noted = set(self.c_truncated)
        self._note_truncated(true_expr)
        self._note_truncated(false_expr)
        in_condition = []
        walk_typed(cond_expr, _PROMOTABLE, lambda node: in_condition.append(_key(node)) or True)
        self.c_truncated -= set(in_condition) - noted

    def _promotion_observed(self, node, key: str, dtype: str) -> bool:
        """Whether an 8- or 16-bit ``node`` on a C target is read unwrapped by the compiled kernel (not
        marked by :meth:`_note_truncated`), under the sanitizers."""
        return (self.check and key in self.PROMOTED_OPS and self.target_kind in C_KINDS
                and _is_int(dtype) and _float_bits(dtype) < 32 and _lanes(dtype) == 1
                and _key(node) not in self.c_truncated)

    def _defers_poison(self, info: _BufferInfo) -> bool:
        """Whether uninitialised thread-local values may flow into ``info`` without an error yet."""
        return self.check and info.per_thread and info.shadow is not None

    def _defers_overflow(self, info: _BufferInfo) -> bool:
        """Whether an overflow in the value of a store into ``info`` is tainted rather than reported:
        on LLVM targets the overflowing nsw/nuw result is poison, a value that may be stored and never
        used (a Select dropping it later); an allocation's written-marks carry it to a read."""
        return self.check and self.target_kind in LLVM_KINDS and info.shadow is not None and self._sanitized(info)

    def _poison_on_overflow(self, dtype: str) -> bool:
        """Sanitizer: whether an overflowing add, sub or mul of ``dtype`` is poison here (see
        :func:`.targets.overflow_is_poison`)."""
        return overflow_is_poison(self.target_kind, dtype)

    #: The grid axis of each block tag (``RaceLog.at_block``).
    BLOCK_AXES = {"blockIdx.x": 0, "blockIdx.y": 1, "blockIdx.z": 2}

    @contextlib.contextmanager
    def _serial_gpu_loop(self, tag: str, name: str):
        """While generating the body of a loop bound to GPU ``tag`` (blocks, or threads) whose
        iterations run one after another, ``name`` the Python loop variable: errors name it.
        Yields a list that ends up holding the statements the body must start with."""
        counted = self.check and tag in self.BLOCK_AXES
        self.gpu.serial_blocks += counted
        front: list[ast.stmt] = []
        if tag:
            self.gpu.serial_loops.append((tag, name))
        try:
            with self._thread_names_scope(bool(tag), front):
                yield front
        finally:
            self.gpu.serial_blocks -= counted
            if tag:
                self.gpu.serial_loops.pop()

    @contextlib.contextmanager
    def _thread_names_scope(self, changed: bool, front: list):
        """While generating a loop body where the loops that name a thread (``_name_threads``)
        have just ``changed``: their ``(tag, value)`` tuple, if an error may need it, is assigned
        once at the body's start (appended to ``front``), not spelled out in every checked call."""
        if not changed:
            yield
            return
        frame = [self._thread_loops(), None, {}]
        self.gpu.naming_frames.append(frame)
        try:
            yield
        finally:
            self.gpu.naming_frames.pop()
            if frame[1] is not None:
                front.append(ast.Assign([_store_name(frame[1])], self._thread_tuple(frame[0])))
            for name, keywords in frame[2].values():
                front.append(ast.Assign([_store_name(name)], ast.Call(
                    _name("dict"), [], [ast.keyword(k, v) for k, v in keywords.items()])))

    def _block_ledger(self, tag: str, name: str, loop: ast.For) -> list[ast.stmt]:
        """Sanitizer: a loop over GPU blocks run one after another, telling the race log which
        block runs (``at_block``); the outermost starts a grid and ends it (``new_grid``,
        ``end_grid``).  The blocks of one launch run in no fixed order and never synchronise, so
        an element of global memory one block writes and another touches is a race."""
        if not (self.check and tag in self.BLOCK_AXES):
            return [loop]
        log = _name("race_log")
        loop.body.insert(0, ast.Expr(ast.Call(ast.Attribute(log, "at_block", ast.Load()),
                                              [ast.Constant(self.BLOCK_AXES[tag]), _name(name)], [])))
        if self.gpu.serial_blocks:  # inside another block loop: the same grid
            return [loop]
        return [ast.Expr(ast.Call(ast.Attribute(log, "new_grid", ast.Load()), [], [])), loop,
                ast.Expr(ast.Call(ast.Attribute(log, "end_grid", ast.Load()), [], []))]

    def _race_lanes(self) -> list["_Axis"]:
        return [ax for ax in self.lanes.axes if ax.race]

    def _statement_lanes(self) -> list["_Axis"]:
        """Sanitizer: threads of a block before explicit barriers (``s_tir.ThreadSync``).  The IR
        implies a barrier between statements, none inside one: conflicting accesses of one
        statement by different threads are a race at every stage."""
        if not self.check or self._race_lanes():
            return []
        return [ax for ax in self.lanes.axes if ax.is_thread]

    @staticmethod
    def _synced_by_thread_sync(info: _BufferInfo) -> bool:
        """Whether ``s_tir.ThreadSync`` puts barriers between conflicting accesses of ``info``'s
        memory (shared memory and warp memory; global memory gets none: two threads of a block
        writing one global element differently race whatever the statements between them)."""
        return info.scope.startswith(("shared", "warp"))

    def _statement_records(self, info: _BufferInfo) -> bool:
        """Whether the race records of an access of ``info`` are kept for one statement (its writes,
        in global memory, until the next barrier too): every access before ThreadSync, and GPU
        threads' accesses of global memory after it.  No barrier orders global memory there (that
        pass plans none for it), so a thread's write and another's read in a later statement are
        ordered only by the lockstep that TVM's warp-synchronous code relies on (the paged-KV merge
        kernel reads a row's state in every thread, then every thread stores the merged value);
        two threads writing one element differently still race.  A ``parallel`` loop's iterations
        have no lockstep: all their accesses count until the loop ends."""
        if info.per_thread or not self._logged_lanes():
            return False
        race = self._race_lanes()
        return not race or (all(ax.is_thread for ax in race) and not self._synced_by_thread_sync(info))

    @staticmethod
    def _lanes_tuple(axes: list["_Axis"]) -> ast.Tuple:
        """The runtime's description of lane ``axes``: ``((axis, extent, tag), ...)``."""
        return ast.Tuple([ast.Tuple([ast.Constant(ax.axis), ax.extent, ast.Constant(ax.tag)], ast.Load())
                          for ax in axes], ast.Load())

    def _thread_loops(self) -> tuple:
        """``(tag, Python variable)`` of each GPU loop (and parallel loop run as lanes) around the
        point being generated, blocks first."""
        loops = list(self.gpu.serial_loops) + [(ax.tag, ax.name) for ax in self.lanes.axes if ax.tag]
        return tuple(sorted(loops, key=_tag_rank))

    @staticmethod
    def _thread_tuple(loops: tuple) -> ast.Tuple:
        return ast.Tuple([ast.Tuple([ast.Constant(tag), _name(name)], ast.Load()) for tag, name in loops], ast.Load())

    def _name_threads(self, keywords: dict) -> dict:
        """``keywords`` of a runtime call, plus ``at``, by which its errors name the thread
        (``at (blockIdx.x=1, threadIdx.x=7)``): the tag and the loop variable of each GPU loop
        (and parallel loop run as lanes) around the point being generated, whether its iterations
        run one after another (a number) or as lanes (the lane array).  The tuple is assigned once
        per loop body where it can be (``_thread_names_scope``)."""
        loops = self._thread_loops()
        if not loops:
            return keywords
        frame = self.gpu.naming_frames[-1] if self.gpu.naming_frames else None
        if frame is not None and frame[0] == loops:
            if frame[1] is None:
                frame[1] = self.namer.define_name("threads")
            keywords["at"] = _name(frame[1])
        else:
            keywords["at"] = self._thread_tuple(loops)
        return keywords

    def _logged_lanes(self) -> list["_Axis"]:
        return self._race_lanes() or self._statement_lanes()

    def _sanitized(self, info: _BufferInfo) -> bool:
        # Copies made per fast-mode lane are still shared by the threads (race lanes) of that lane.
        return self.check and (info.shadow is not None or (not info.per_thread and bool(self._logged_lanes())))

    def _access_call(self, info: _BufferInfo, values: list[Value], write: bool, value: ast.expr | None = None):
        keywords = {}
        if write:
            keywords["write"] = ast.Constant(True)
            keywords["value"] = value
        masks = self.lanes.stmt_masks + ([] if write else self.lanes.masks)
        if masks:
            keywords["mask"] = self._mask_expr(masks)
        if info.shadow is not None:
            keywords["shadow"] = _name(info.shadow)
        if (self._defers_poison(info) and (write or self.defer_poison)) or (write and self.overflow_deferred):
            keywords["poison"] = _name("race_log")
        prefix = self._prefix(info)
        if prefix:
            keywords["lead"] = ast.Constant(len(prefix))
        lanes = self._record_lanes(info)
        record = {}  # how the access's race record is kept: the same for many accesses
        if lanes and not info.per_thread:
            if self._statement_records(info):
                record["statement"] = True
                if not self._synced_by_thread_sync(info):  # global: writes race until a barrier
                    record["region"] = True
                    if write:
                        self.gpu.region_written.add(info.name)
            if self.gpu.serial_blocks and info.scope == "global":
                record["grid"] = True
            if write and self.gpu.warp_store:
                record["warp_store"] = True
            record["lanes"] = lanes
        keywords.update(self._record_keywords(record))
        index = ast.Tuple(prefix + [v.node for v in values], ast.Load())
        return self._call("access", _name(info.name), index, ast.Constant(info.name), kw=keywords)

    def _record_keywords(self, record: dict) -> dict:
        """The keywords of ``access`` for its race ``record`` (``statement``, ``region``, ``grid``:
        flags; ``lanes``: the lane axes) and the thread naming (``at``).  In a loop body that names
        the threads (``_thread_names_scope``) they are one ``**record`` dict, assigned at its start:
        a stage that inlines large expressions reads thousands of elements per statement, and
        spelled out in each call these keywords were half of its script and of its code generation
        time.  Lanes whose extent is not a constant (a value of the loop body) keep them spelled out."""
        if not record:
            return self._name_threads({})
        loops = self._thread_loops()
        frame = self.gpu.naming_frames[-1] if self.gpu.naming_frames else None
        extents = [ax.extent.value if isinstance(ax.extent, ast.Constant) else None for ax in record["lanes"]]
        if loops and frame is not None and frame[0] == loops and None not in extents:
            key = (tuple(sorted((k, v) for k, v in record.items() if k != "lanes")),
                   tuple((ax.axis, extent, ax.tag) for ax, extent in zip(record["lanes"], extents)))
            if key not in frame[2]:
                frame[2][key] = (self.namer.define_name("record"), self._spelled_record(record))
            return {None: _name(frame[2][key][0])}
        return self._spelled_record(record)

    def _spelled_record(self, record: dict) -> dict:
        keywords = {k: ast.Constant(v) for k, v in record.items() if k != "lanes"}
        keywords["log"] = _name("race_log")
        keywords["lanes"] = self._lanes_tuple(record["lanes"])
        return self._name_threads(keywords)

    def _record_lanes(self, info: _BufferInfo) -> list["_Axis"]:
        """The lanes whose accesses of ``info`` are recorded for the race check.  Racing lanes that
        each have their own copy of the buffer (a parallel loop's privatised scratch) never meet in
        it: their records would only cost a sort per write; nor do lanes sharing one copy of memory
        each iteration owns in the compiled loop (``own_copy_axes``)."""
        own_copy = set(info.prefix_axes) | set(info.own_copy_axes)
        return [ax for ax in self._logged_lanes() if ax.var is None or _key(ax.var) not in own_copy]

    def _logged_view_read(self, info: _BufferInfo, indices, values: list[Value]) -> ast.expr | None:
        """Sanitizer (lane views): a read of shared memory by threads as lane views of the buffer and
        of its written-marks, its race record deferred (``read_logged``); None where the access
        needs ``access`` (no view, a mask, per-thread memory, global memory's ledgers)."""
        if (info.shadow is None or info.per_thread or not info.scope.startswith("shared")
                or not self._logged_lanes() or info.per_warp):
            return None
        views = self._checked_views(info, indices, values, logged=True)
        if views is None:
            return None
        lanes = self._record_lanes(info)
        if not lanes:
            return None
        prefix = self._prefix(info)
        index = ast.Tuple(prefix + [v.node for v in values], ast.Load())
        keywords = {"statement": ast.Constant(True)} if self._statement_records(info) else {}
        if prefix:
            keywords["lead"] = ast.Constant(len(prefix))
        self._name_threads(keywords)
        return self._call("read_logged", *views, ast.Constant(info.name), _name(info.shadow), _name("race_log"),
                          index, self._lanes_tuple(lanes), kw=keywords)

    def _checked_views(self, info: _BufferInfo, indices, values: list[Value], logged: bool = False,
                       masked: bool = False) -> tuple | None:
        """Sanitizer (lane views): an allocation's access as lane views of the buffer and of its
        written-marks, where no race record is needed (no racing lanes) and the access is a view.
        ``masked``: the caller passes the lane masks on (``read_written``'s and ``write_where``'s
        ``mask``), so a view serves under them too."""
        # A thread's own memory needs no race record: its views serve with racing lanes too.
        if info.shadow is None or (self._logged_lanes() and not (logged or info.per_thread)):
            return None
        # A view of two lanes beats ``access`` already (4 us against 15 us); one element is no lanes.
        views = self._lane_views(info, indices, values, (info.name, info.shadow), min_elements=2, masked_ok=masked)
        return None if views is None else tuple(views)


#: The order in which a thread is named: blocks, virtual threads, threads, then parallel loops.
_TAG_RANKS = (("blockIdx", 0), ("vthread", 1), ("threadIdx", 2))


@functools.lru_cache(maxsize=None)
def _rank_of_tag(tag: str) -> int:
    return next((rank for prefix, rank in _TAG_RANKS if tag.startswith(prefix)), 3)


def _tag_rank(loop: tuple) -> int:
    return _rank_of_tag(loop[0])
