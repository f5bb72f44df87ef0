"""GPU semantics: threads of a block in lockstep, thread_extent attributes, barriers, cross-thread
allreduce, kernel launches and cross-thread reduction blocks."""
from __future__ import annotations

import ast
import copy

from tvm import tirx
import tvm

from ..errors import UnsupportedConstructError
from .analysis import block_scoped_allocations, grid_loop, walk_typed
from .plan import LANES, PARALLEL_CHUNKS, emit_with_plan
from .control import _FEW_OUTER_ITERATIONS
from .state import ProgressLevel
from .tensorcore import WARP_STORE_ATTR
from .names import Value, _python_name, _Axis, _BufferInfo, _CannotVectorize, _dtype, _is_true, _key, _name, _store_name, _type_key, thread_key


class GpuMixin:
    """The gpu room of :class:`~.generator.HybridCodegen` (see the module docstring)."""

    def _launch(self, gv, args) -> Value:
        """A host function calling a device kernel (after SplitHostDevice): generate the kernel too."""
        name = gv.name_hint
        callee = self.gpu.module_functions.get(name)
        if callee is None:
            raise UnsupportedConstructError("call to a function", f"{name} is not in the module")
        if name not in self.gpu.launched:
            # Unique in the script: a host function ``sum`` becomes ``sum_kernel``, as TVM names its
            # device kernel, which must not become a call of the host function itself.
            python_name = _python_name(name)
            if python_name == self.function_name or (python_name in self.namer._used
                                                     and python_name not in self.gpu.module_functions):
                python_name = self.namer.define_name(python_name)
            self.namer._used.add(python_name)
            self.gpu.launched[name] = python_name

            def emit(plan):
                sub = type(self)(callee, self.gpu.launched[name], self.stage, self.mode,
                                 progress=self.hooks.enabled, module_functions=self.gpu.module_functions,
                                 check=self.check, synced=self.gpu.thread_races, plan=plan)
                # The kernel's block loops report progress too, numbered after the host's loops so far.
                sub.hooks.loops = self.hooks.loops
                return sub, sub.function_def()[0]

            exact_reason = self.plan.exact_reason  # fast mode running the exact plan: its kernels too
            (sub, fdef), plan = emit_with_plan(callee, self.plan.mode if exact_reason else self.mode, self.check,
                                               emit, exact_reason)
            self.gpu.launched_plans[name] = plan
            self.gpu.launched_plans.update(sub.gpu.launched_plans)
            self.hooks.loops = sub.hooks.loops
            self.scope.helpers |= sub.scope.helpers
            self.gpu.extra_defs.extend(sub.gpu.extra_defs + [fdef])
            self.lanes.vectorized_loops.extend(sub.lanes.vectorized_loops)
        values = [self.visit_expr(a) for a in args]
        return Value(ast.Call(_name(self.gpu.launched[name]), [v.node for v in values], []), "py", "int32")

    def _thread_lanes(self, var, min_expr, lo: Value, extent_expr, tag: str, body) -> list[ast.stmt]:
        """Threads of a block run in lockstep, one array lane each: every statement completes for all
        threads before the next starts, which is what the IR's barriers (explicit after ThreadSync,
        implied before it) guarantee for race-free kernels."""
        self._bind_loop(var, min_expr, extent_expr)
        try:
            out = self._lanes_for(var, min_expr, lo, extent_expr, body, is_thread=True, tag=tag)
        except _CannotVectorize as exc:
            if any(not ax.is_thread for ax in self.lanes.axes):
                raise  # fast mode's lanes around the launch (blocks as lanes): the plan runs them serially
            raise UnsupportedConstructError("thread-bound loop", f"{tag}: {exc}") from None
        note = ast.Expr(ast.Call(self._use("thread_lanes"), [_name(self.namer.lookup(var)), ast.Constant(tag)], []))
        return out[:1] + [note] + out[1:]

    def visit_AttrStmt(self, node) -> list[ast.stmt]:
        if node.attr_key in ("thread_extent", "virtual_thread") and not str(node.node.thread_tag).startswith(
                "blockIdx"):
            iv = node.node
            zero = tirx.const(0, _dtype(iv.var))
            return self._thread_lanes(iv.var, zero, Value(ast.Constant(0), "py", _dtype(iv.var)), node.value,
                                      str(iv.thread_tag), node.body)
        if node.attr_key == WARP_STORE_ATTR:
            self.gpu.warp_store += 1
            try:
                return self.visit_stmt(node.body)
            finally:
                self.gpu.warp_store -= 1
        if node.attr_key == "reduce_scope":
            self.gpu.reducers.append(node.node)
            try:
                return self.visit_stmt(node.body)
            finally:
                self.gpu.reducers.pop()
        if node.attr_key in ("thread_extent", "virtual_thread"):
            iv = node.node
            decision = self.plan.decision(node)
            if (decision is not None and decision.strategy in (LANES, PARALLEL_CHUNKS)
                    and self._free_loop_axis() is not None):
                return self._grid_lanes(node, decision.strategy)
            name = self.namer.define(iv.var, iv.var.name)
            self.scope.var_kinds[_key(iv.var)] = ("py", _dtype(iv.var), False)
            extent = self.visit_expr(node.value)
            try:
                self.analyzer.bind(iv.var, tvm.ir.Range.from_min_extent(0, node.value), allow_override=True)
            except Exception:
                pass
            hook, chain = [], []
            if self.hooks.enabled and self.serial.depth == 0:
                # A device kernel's outermost block loop reports progress (one call per block row).
                hook = [ast.Expr(ast.Call(_name("__progress__"),
                                          [ast.Constant(self.hooks.loops), _name(name), extent.node], []))]
                self.hooks.loops += 1
                few = isinstance(extent.node, ast.Constant) and extent.node.value <= _FEW_OUTER_ITERATIONS
                chain = [ProgressLevel(hook[0].value, few)]  # a loop inside may refine it
            self.serial.depth += 1
            outer_chain, self.hooks.chain = self.hooks.chain, chain
            try:
                with self._serial_gpu_loop(str(iv.thread_tag), name) as front:
                    body = self.visit_stmt(node.body)
                body = front + body
            finally:
                self.serial.depth -= 1
                self.hooks.chain = outer_chain
            call = ast.Call(self._use("thread_binding"), [extent.node],
                            [ast.keyword("thread", ast.Constant(str(iv.thread_tag)))])
            return self._block_ledger(str(iv.thread_tag), name,
                                      ast.For(_store_name(name), call, hook + body or [ast.Pass()], []))
        return self.visit_stmt(node.body)

    def _grid_lanes(self, node, strategy: str) -> list[ast.stmt]:
        """The blocks of a grid proven independent (they cannot synchronise with each other), run at
        once as lanes beside the thread lanes; at the top of a kernel, in chunks on all cores."""
        iv = node.node
        dtype = _dtype(iv.var)
        try:
            self.analyzer.bind(iv.var, tvm.ir.Range.from_min_extent(0, node.value), allow_override=True)
        except Exception:
            pass
        loop = grid_loop(node)
        lo = Value(ast.Constant(0), "py", dtype)
        private = self._per_block_allocs(node)
        if strategy == PARALLEL_CHUNKS and self._can_split_parallel():
            extent = self.visit_expr(node.value)
            return self._as_planned(node, lambda: self._split_parallel(loop, lo, extent, private, str(iv.thread_tag)))
        return self._as_planned(node, lambda: self._lanes_for(iv.var, loop.min, lo, node.value, node.body,
                                                              is_thread=False, tag=str(iv.thread_tag),
                                                              private_allocs=private))

    def _per_block_allocs(self, node) -> list:
        """The block-scoped memory the plan gives a copy per block lane (``decision.private``) that
        is allocated outside the loop: allocated again inside the lanes, once per block."""
        decision = self.plan.decision(node)
        if decision is not None and decision.strategy in (LANES, PARALLEL_CHUNKS):
            var = node.loop_var if hasattr(node, "loop_var") else node.node.var
            # The plan's proof covers the memory allocated outside the loop, which is in scope now.
            self.gpu.block_copies[_key(var)] = (frozenset(self.scope.buffers),
                                                frozenset(decision.private) - frozenset(decision.alike))
        if decision is None or not decision.private:
            return []
        if self.gpu.shared is None:
            self.gpu.shared = block_scoped_allocations(self.func)
        return [self.gpu.shared[key] for key in decision.private
                if key in self.gpu.shared and key in self.scope.buffers]

    def _thread_allreduce(self, args) -> list[ast.stmt]:
        count = int(args[0].value)
        if count > 1 and self.gpu.reducers:
            return self._thread_allreduce_values(args, count)
        if count != 1 or not self.gpu.reducers:
            raise UnsupportedConstructError("tirx.tvm_thread_allreduce", f"{count} values or no reduce_scope")
        value, cond, result, threads = args[1], args[2], args[3], args[4:]
        if not _is_true(cond):
            raise UnsupportedConstructError("tirx.tvm_thread_allreduce", "with a lane condition")
        if _type_key(result) != "ir.TensorLoad":
            raise UnsupportedConstructError("tirx.tvm_thread_allreduce", "result is not a buffer element")
        reducer = self.gpu.reducers[-1]
        lhs, rhs = reducer.lhs[0], reducer.rhs[0]
        names = [self.namer.define(lhs, lhs.name), self.namer.define(rhs, rhs.name)]
        for var in (lhs, rhs):
            self.scope.var_kinds[_key(var)] = ("np", _dtype(var), True)
        # LowerThreadAllreduce stores every partial result into a variable of the reducer's type (an
        # int8 sum: ``signed char w_16_0 = ...``): on C targets it is truncated as the TIR wraps it.
        self._note_truncated(reducer.result[0])
        combine = ast.Lambda(ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names], kwonlyargs=[],
                                           kw_defaults=[], defaults=[]), self.visit_expr(reducer.result[0]).node)
        axes, extents = self._allreduce_axes(threads)
        reduced = self._call("thread_allreduce", combine, self.to_np(self.visit_expr(value)).node, axes, extents)
        return self._assign_element(result, reduced)

    def _allreduce_axes(self, threads) -> tuple[ast.Tuple, ast.Tuple]:
        """The lane axes and extents of the threads an allreduce folds over (each a running thread)."""
        axes, extents = [], []
        for var in threads:
            name = self.namer.lookup(var)
            axis = next((ax for ax in self.lanes.axes if ax.is_thread and ax.name == name), None)
            if axis is None:
                raise UnsupportedConstructError("tirx.tvm_thread_allreduce", f"over {var}, not a running thread")
            axes.append(ast.Constant(axis.axis))
            extents.append(axis.extent)
        return ast.Tuple(axes, ast.Load()), ast.Tuple(extents, ast.Load())

    def _thread_allreduce_values(self, args, count: int) -> list[ast.stmt]:
        """``tvm_thread_allreduce`` of several values at once (argmax's value and index, group
        norm's sum and sum of squares): the reducer's combiner maps two tuples to one."""
        args = list(args)
        values, cond = args[1:1 + count], args[1 + count]
        results, threads = args[2 + count:2 + 2 * count], args[2 + 2 * count:]
        if not _is_true(cond):
            raise UnsupportedConstructError("tirx.tvm_thread_allreduce", "with a lane condition")
        if any(_type_key(r) != "ir.TensorLoad" for r in results):
            raise UnsupportedConstructError("tirx.tvm_thread_allreduce", "result is not a buffer element")
        reducer = self.gpu.reducers[-1]
        if len(reducer.lhs) != count:
            raise UnsupportedConstructError("tirx.tvm_thread_allreduce", f"{count} values, reducer of {len(reducer.lhs)}")
        names = []
        for var in list(reducer.lhs) + list(reducer.rhs):
            names.append(self.namer.define(var, var.name))
            self.scope.var_kinds[_key(var)] = ("np", _dtype(var), True)
        for combined_value in reducer.result:  # each partial stored in its type, as above
            self._note_truncated(combined_value)
        combined = ast.Tuple([self.to_np(self.visit_expr(r)).node for r in reducer.result], ast.Load())
        combine = ast.Lambda(ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names], kwonlyargs=[],
                                           kw_defaults=[], defaults=[]), combined)
        axes, extents = self._allreduce_axes(threads)
        operands = ast.Tuple([self.to_np(self.visit_expr(v)).node for v in values], ast.Load())
        reduced = self.namer.define_name("reduced")
        out: list[ast.stmt] = [ast.Assign([_store_name(reduced)], self._call(
            "thread_allreduce_values", combine, operands, axes, extents))]
        for k, result in enumerate(results):
            out.extend(self._assign_element(result, ast.Subscript(_name(reduced), ast.Constant(k), ast.Load())))
        return out

    @staticmethod
    def _reduces_across(node, threads: list["_Axis"]) -> bool:
        """Whether a reduction axis of the block is bound to one of the running threads."""
        return bool(GpuMixin._cross_thread_tags(node, threads))

    @staticmethod
    def _cross_thread_tags(node, threads: list["_Axis"]) -> set[str]:
        """Tags of the running threads that the block reduces across: their variable appears in a
        reduction iterator's binding and in no spatial one (as LowerCrossThreadReduction reads it;
        a thread that also picks the block's spatial element, as in an rfactor, keeps its own)."""
        in_reduce, in_spatial = set(), set()
        keys = {_key(ax.var) for ax in threads}
        for iv, value in zip(node.block.iter_vars, node.iter_values):
            found = set()
            walk_typed(value, ("ir.Var",), lambda n: found.add(_key(n)) if _type_key(n) == "ir.Var"
                       and _key(n) in keys else None)
            (in_reduce if int(iv.iter_type) == 2 else in_spatial).update(found)
        return {thread_key(ax.tag) for ax in threads if _key(ax.var) in in_reduce - in_spatial}

    def _serialized_block(self, node, threads: list["_Axis"]) -> list[ast.stmt]:
        """A block that reduces across threads (before LowerCrossThreadReduction lowers it): its
        threads contribute one after another, in thread order, which is one valid order of the
        reduction; everything around it still runs in lockstep."""
        saved = (dict(self.namer._names), dict(self.scope.var_kinds), list(self.lanes.axes))
        saved_serial = self.gpu.serial_thread_lanes
        self.gpu.serial_thread_lanes = dict(saved_serial)
        # Per-thread memory the block reduces into is one accumulator for the threads it reduces
        # across: they update one copy in turn, and all of them hold the result afterwards.
        across = self._cross_thread_tags(node, threads)
        accumulators = self._per_thread_writes(node.block)
        saved_accumulators = self.gpu.accumulator_tags
        self.gpu.accumulator_tags = {**saved_accumulators, **{info.name: across for info in accumulators}}
        loops = []
        for ax in sorted(threads, key=lambda a: a.axis):
            lane = self.namer.define_name(f"{ax.name}_serial")
            self.namer._names[_key(ax.var)] = lane
            self.scope.var_kinds[_key(ax.var)] = ("py", _dtype(ax.var), False)
            self.gpu.serial_thread_lanes[thread_key(ax.tag)] = lane  # per-thread memory is indexed by the serial thread
            loops.append((lane, ax))
        self.lanes.axes = [ax for ax in self.lanes.axes if not ax.is_thread]
        try:
            body = self.visit_SBlockRealize(node)
        finally:
            self.namer._names, self.scope.var_kinds, self.lanes.axes = saved
            self.gpu.serial_thread_lanes, self.gpu.accumulator_tags = saved_serial, saved_accumulators
        # Each store to an accumulator is copied to the other threads' copies right after it (its
        # index arrays, where blocks run as lanes, pick the blocks' elements), rather than the whole
        # buffer after the block: that copy would rewrite the elements of every block.
        shared = None
        if loops:
            shared = self._share_stored_elements(body, accumulators, across)
        if shared is not None:
            body = shared
        elif accumulators and self.lanes.chunked_var is not None:
            # Chunks of blocks on other cores update their own elements meanwhile: run them in turn.
            self.lanes.chunks_in_turn = True
        for lane, ax in reversed(loops):
            bounds = ([ax.extent] if isinstance(ax.lo, ast.Constant) and ax.lo.value == 0
                      else [ax.lo, ast.BinOp(ax.lo, ast.Add(), ax.extent)])
            body = [ast.For(_store_name(lane), ast.Call(_name("range"), bounds, []), body, [])]
        return body if shared is not None else body + self._share_accumulators(accumulators, across)

    def _per_thread_writes(self, block) -> list[_BufferInfo]:
        """The per-thread buffers (allocated outside ``block``) that ``block`` stores to."""
        stores = []
        for part in (block.init, block.body):
            if part is not None:
                walk_typed(part, ("tirx.BufferStore",), stores.append)
        infos = {}
        for st in stores:
            info = self.scope.buffers.get(_key(st.buffer))
            if info is not None and info.per_thread:
                infos[info.name] = info
        return list(infos.values())

    def _share_stored_elements(self, body: list[ast.stmt], accumulators: list[_BufferInfo],
                               across: set[str]) -> list[ast.stmt] | None:
        """``body`` with ``acc[every thread reduced across, i] = acc[thread 0, i]`` after each store
        ``acc[thread 0, i] = ...`` to an accumulator; None when a store takes another form (a helper
        call, a view, a sanitizer's written-marks), and the whole buffer is shared instead."""
        names = {info.name for info in accumulators}
        if not names or any(info.shadow is not None for info in accumulators):
            return None
        reduced = {self.THREAD_AXES[thread_key(t)] for t in across}
        handled: set[int] = set()

        def share(target: ast.Subscript) -> ast.stmt | None:
            parts = target.slice.elts if isinstance(target.slice, ast.Tuple) else []
            if len(parts) < len(self.THREAD_AXES) or any(
                    not (isinstance(parts[k], ast.Constant) and parts[k].value == 0) for k in reduced):
                return None
            return _copy_from_thread_0(target.value, parts, reduced)

        def process(stmts: list[ast.stmt]) -> list[ast.stmt]:
            out = []
            for stmt in stmts:
                for field in ("body", "orelse"):
                    if isinstance(getattr(stmt, field, None), list):
                        setattr(stmt, field, process(getattr(stmt, field)))
                out.append(stmt)
                if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                        and isinstance(stmt.targets[0], ast.Subscript)
                        and isinstance(stmt.targets[0].value, ast.Name) and stmt.targets[0].value.id in names):
                    shared = share(stmt.targets[0])
                    if shared is not None:
                        handled.update({id(stmt.targets[0]), id(shared.targets[0])})
                        out.append(shared)
            return out

        body = process([copy.deepcopy(stmt) for stmt in body])
        for node in (n for stmt in body for n in ast.walk(stmt)):
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in names and id(node) not in handled:
                    return None
            elif isinstance(node, ast.Call) and any(isinstance(a, ast.Name) and a.id in names for a in node.args):
                if not (isinstance(node.func, ast.Name) and node.func.id == "load"):
                    return None  # a store, view or sanitizer helper writing the accumulator
            elif isinstance(node, ast.AugAssign) or (
                    isinstance(node, ast.Name) and node.id in names and isinstance(node.ctx, ast.Store)):
                return None
        return body

    def _share_accumulators(self, accumulators: list[_BufferInfo], across: set[str]) -> list[ast.stmt]:
        """``acc[all threads] = acc[thread 0]`` along the thread axes reduced across."""
        reduced = {self.THREAD_AXES[thread_key(t)] for t in across}
        every = [ast.Slice(None, None, None)] * len(self.THREAD_AXES)
        return [_copy_from_thread_0(_name(name), every, reduced)
                for info in accumulators for name in [info.name] + ([info.shadow] if info.shadow else [])]

    def _writes_only_per_thread(self, block) -> bool:
        """Whether every store in ``block`` goes to memory private to each thread."""
        private = {_key(b) for b in block.alloc_buffers}
        private |= {k for k, info in self.scope.buffers.items() if info.per_thread}
        stores = []
        walk_typed(block.body, ("tirx.BufferStore",), stores.append)
        return all(_key(st.buffer) in private for st in stores)


def _copy_from_thread_0(buffer: ast.expr, parts: list, reduced: set[int]) -> ast.stmt:
    """``buffer[parts, every thread on the reduced axes] = buffer[parts, thread 0 there]``."""
    every = [ast.Slice(None, None, None) if k in reduced else p for k, p in enumerate(parts)]
    first = [ast.Slice(ast.Constant(0), ast.Constant(1), None) if k in reduced else p for k, p in enumerate(parts)]
    return ast.Assign([ast.Subscript(buffer, ast.Tuple(every, ast.Load()), ast.Store())],
                      ast.Subscript(copy.deepcopy(buffer), ast.Tuple(first, ast.Load()), ast.Load()))
