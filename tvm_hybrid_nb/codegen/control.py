"""Control flow: statement sequences, loops (serial, stepped, with progress hooks), while, branches,
asserts, break/continue, return and blocks."""
from __future__ import annotations

import ast
import builtins
import contextlib

import tvm_ffi

from tvm import tirx
import tvm

from ..errors import UnsupportedConstructError
from .analysis import _calls_allreduce, _contains, _reads_memory, walk_typed
from .plan import CORE_CHUNKS, LANES, PARALLEL_CHUNKS, RACE_LANES, SERIAL, PlanRejected
from .state import LoopExits, ProgressLevel
from .names import (Value, _AllocLike, _CannotVectorize, _FOR_KIND_ITERATORS, _SerialFrame, _dtype, _is_float, _is_int,
    _is_true, _is_zero, _key, _lanes, _name, _np, _store_name, _type_key, _varying)


def _address_of_element(expr) -> bool:
    """Whether ``expr`` is ``address_of(A[...])``, the address of a buffer element."""
    return (_type_key(expr) == "ir.Call" and isinstance(expr.op, tvm.ir.Op) and expr.op.name == "tirx.address_of"
            and _type_key(expr.args[0]) == "ir.TensorLoad")


#: A reporting loop of at most this many iterations lets the first loop inside it report progress
#: even when that loop is innermost (each outer iteration may take long).
_FEW_OUTER_ITERATIONS = 16
#: At most this many nested loops report progress (a call per iteration of each).
_PROGRESS_LEVELS = 8


class ControlFlowMixin:
    """The control room of :class:`~.generator.HybridCodegen` (see the module docstring)."""

    # ------------------------------------------------------------------ statements
    def visit_SeqStmt(self, node) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in node.seq:
            out.extend(self.visit_stmt(stmt))
        return out

    def visit_Evaluate(self, node) -> list[ast.stmt]:
        value = node.value
        if _type_key(value) in ("ir.IntImm", "ir.FloatImm"):
            return []
        if _type_key(value) == "ir.Call" and isinstance(value.op, tvm.ir.Op) and value.op.name.endswith(
                "tvm_thread_allreduce"):
            return self._thread_allreduce(list(value.args))
        statement = self._intrinsic_statement(value)
        if statement is not None:
            return statement
        return [ast.Expr(self.visit_expr(value).node)]

    def visit_Bind(self, node) -> list[ast.stmt]:
        if _address_of_element(node.value):
            # A pointer to an element (InlinePrivateFunctions binds one per call): buffers declared
            # over it are views at that element; any other use of it is refused (visit_Var).
            self.scope.address_binds[_key(node.var)] = node.value
            return []
        self._note_truncated(node.value)
        value = self.visit_expr(node.value)
        name = self.namer.define(node.var, node.var.name)
        if value.kind == "weak" or (_is_float(value.dtype) and value.kind != "np"):
            value = self.to_np(value)
        node_value = value.node
        is_view = ((isinstance(node_value, ast.Call) and getattr(node_value.func, "id", "") == "lanes_view")
                   or (isinstance(node_value, ast.Name) and node_value.id in self.serial.hoisted_views))
        if (value.lanes > 1 or value.varying) and (isinstance(node_value, (ast.Subscript, ast.IfExp)) or is_view):
            node_value = ast.Call(_np("copy"), [node_value], [])  # a slice would alias the buffer
        self._set_var(node.var, value)
        self._bind_analyzer(node.var, node.value)
        return [ast.Assign([_store_name(name)], node_value)]

    def _bind_analyzer(self, var, value) -> None:
        if _is_int(_dtype(var)) and _lanes(_dtype(var)) == 1:
            try:
                self.analyzer.bind(var, value, allow_override=True)
            except Exception:
                pass

    def visit_For(self, node) -> list[ast.stmt]:
        kind = int(node.kind)
        if kind not in _FOR_KIND_ITERATORS:
            raise UnsupportedConstructError("tirx.For", f"loop kind {kind}")
        step = node.step
        if step is not None and not (_type_key(step) == "ir.IntImm" and int(step.value) == 1):
            return self._stepped_for(node)
        lo = self.visit_expr(node.min)
        extent = self.visit_expr(node.extent)
        if _varying(lo, extent):
            if kind not in (0, 3):
                culprit = self._lanes_loop_in(node.min, node.extent)
                raise _CannotVectorize("loop bounds that differ between iterations", loop=culprit)
            return self._lanes_serial_for(node)
        self._bind_loop(node.loop_var, node.min, node.extent)
        if kind == 4:
            tag = str(node.thread_binding.thread_tag) if node.thread_binding is not None else ""
            if not tag.startswith("blockIdx"):
                return self._thread_lanes(node.loop_var, node.min, lo, node.extent, tag, node.body)
        decision = self.plan.decision(node)
        strategy = decision.strategy if decision is not None else SERIAL
        if strategy == RACE_LANES and self._free_loop_axis() is not None:
            # Race check: the iterations of a parallel loop run as lanes whose accesses are compared.
            # (Iterations proven to touch disjoint memory cannot race: they need no record.)
            return self._as_planned(node, lambda: self._lanes_for(
                node.loop_var, node.min, lo, node.extent, node.body, is_thread=False,
                tag=f"parallel {node.loop_var.name}", race=True, private_allocs=self._planned_into(node)))
        if strategy in (LANES, PARALLEL_CHUNKS) and self._free_loop_axis() is not None:
            # A loop over the blocks: their per-block memory; else the allocations the plan privatised.
            blocks = self._per_block_allocs(node) if kind == 4 else None
            copies = (lambda: blocks) if kind == 4 else (lambda: self._privatised(decision))
            loop = node
            if decision.cut is not None:  # only the values the guard inside can pass
                loop, lo, extent = self._cut_loop(node, decision.cut)
            # Lanes of blocks and parallel iterations carry a tag: errors name the block or iteration.
            lane_tag = tag if kind == 4 else f"parallel {node.loop_var.name}" if kind == 1 else ""
            if strategy == PARALLEL_CHUNKS and self._can_split_parallel():
                return self._as_planned(node, lambda: self._split_parallel(loop, lo, extent, copies(), lane_tag))
            return self._as_planned(node, lambda: self._vectorized_for(loop, lo, copies(), tag=lane_tag))
        if _is_zero(node.min):
            bounds = [extent.node]
        else:
            end_value = self.visit_expr(tvm.sym.Analyzer().simplify(node.min + node.extent))
            bounds = [lo.node, end_value.node]
        iterator = _FOR_KIND_ITERATORS[kind]
        keywords = []
        if kind == 4:
            tag = node.thread_binding.thread_tag if node.thread_binding is not None else ""
            keywords = [ast.keyword("thread", ast.Constant(str(tag)))]
        call = (ast.Call(_name("range"), bounds, []) if iterator == "range"
                else ast.Call(self._use(iterator), bounds, keywords))
        outside = set(self.namer._used)
        name = self.namer.define(node.loop_var, node.loop_var.name)
        self.scope.var_kinds[_key(node.loop_var)] = ("py", _dtype(node.loop_var), False)
        frame = _SerialFrame(node.loop_var, node.min, lo.node, extent.node, name, outside, self.serial.guard_depth)
        hook, chain = self._progress_hook(name, lo, node, extent)
        exits = self._masked_exits(node.body) if self.lanes.vector_depth else None
        self.serial.depth += 1
        self.serial.frames.append(frame)
        outer_chain, self.hooks.chain = self.hooks.chain, chain
        tag = str(node.thread_binding.thread_tag) if kind == 4 and node.thread_binding is not None else ""
        try:
            with self._serial_gpu_loop(tag, name) as front:
                body = self.visit_stmt(node.body)
            body = front + body
        finally:
            self.serial.depth -= 1
            self.serial.frames.pop()
            self.hooks.chain = outer_chain
            if exits is not None:
                self._forget_exits(exits)
        front, body = self._with_exit_masks(exits, body)
        held = self._held_views(frame, body)
        loop = ast.For(_store_name(name), call, hook + body or [ast.Pass()], [])
        if strategy == CORE_CHUNKS:
            return front + frame.hoisted + self._on_cores(node, loop, lo, extent, frame, bool(front or held))
        return front + frame.hoisted + self._block_ledger(tag, name, loop) + held

    def _on_cores(self, node, loop: ast.For, lo: Value, extent: Value, frame, shares: bool) -> list[ast.stmt]:
        """Serial loop ``loop`` whose iterations the plan proved independent (:data:`CORE_CHUNKS`):
        a function of a chunk of its iterations and a ``parallel_chunks`` call that runs the chunks
        on the machine's cores (numpy releases the GIL in its loops on the lanes around).  Each chunk
        runs in its own Python frame, so every name the loop assigns must be its own: a loop that
        assigns a name defined before it, or ``shares`` state with the code around (views held
        across it, exit masks), is planned serial again."""
        stored = {n.id for n in ast.walk(loop) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        if shares or stored & frame.outside or self.lanes.chunked_var is not None:
            raise PlanRejected(node, "its iterations share names or views with the code around")
        name = loop.target.id
        chunk_lo, count = self.namer.define_name(f"{name}_lo"), self.namer.define_name(f"{name}_count")
        loop.iter = ast.Call(_name("range"), [_name(chunk_lo), ast.BinOp(_name(chunk_lo), ast.Add(), _name(count))],
                             [])
        function = self.namer.define_name(f"{name}_iterations")
        args = ast.arguments(posonlyargs=[], args=[ast.arg(chunk_lo), ast.arg(count)], kwonlyargs=[],
                             kw_defaults=[], defaults=[])
        fdef = ast.FunctionDef(name=function, args=args, body=[loop], decorator_list=[], returns=None,
                               type_params=[])
        lanes = 1  # the elements of one numpy operation of an iteration, times the iterations
        for axis in self.lanes.axes:
            lanes *= axis.extent.value if isinstance(axis.extent, ast.Constant) else 1
        self.lanes.parallel_loops.append(name)
        total = ast.BinOp(ast.Constant(lanes), ast.Mult(), extent.node)
        return [fdef, ast.Expr(self._call("parallel_chunks", _name(function), lo.node, extent.node, total))]

    def _masked_exits(self, body, alive: str | None = None) -> LoopExits | None:
        """The masks of a loop run inside GPU threads whose body (outside its inner loops) holds
        ``break_loop``/``continue_loop``: the threads may take them apart.  Registers the calls and
        pushes ``going`` onto the statement masks (:meth:`_forget_exits` undoes both); None without
        any.  ``alive``: the mask of the threads still looping, when the loop keeps one (a loop
        whose condition differs between threads), which a ``break`` narrows."""
        calls = []

        def visit(n):
            key = _type_key(n)
            if key in ("tirx.For", "tirx.While"):
                return tvm_ffi.WalkResult.SKIP
            if key == "ir.Call" and isinstance(n.op, tvm.ir.Op) and n.op.name in ("tirx.break_loop",
                                                                                  "tirx.continue_loop"):
                calls.append(n)
            return tvm_ffi.WalkResult.ADVANCE

        walk_typed(body, ("tirx.For", "tirx.While", "ir.Call"), visit, order="pre")
        if not calls:
            return None
        if not all(ax.is_thread for ax in self.lanes.axes):
            # Iterations run as lanes would all loop as long as the last to leave: run them serially.
            raise _CannotVectorize("break or continue in a loop inside lanes")
        breaks = any(c.op.name == "tirx.break_loop" for c in calls)
        if alive is None and breaks:
            alive = self.namer.define_name("alive")
        exits = LoopExits(self.namer.define_name("going"), alive, len(self.lanes.stmt_masks))
        for c in calls:
            self.serial.exits[_key(c)] = exits
        self.lanes.stmt_masks.append(_name(exits.going))
        return exits

    def _forget_exits(self, exits: LoopExits) -> None:
        """The loop of ``exits`` is generated: its ``going`` mask and its calls go."""
        self.lanes.stmt_masks.pop(exits.mask_depth)
        self.serial.exits = {k: v for k, v in self.serial.exits.items() if v is not exits}

    @staticmethod
    def _with_exit_masks(exits: LoopExits | None, body: list[ast.stmt]) -> tuple[list[ast.stmt], list[ast.stmt]]:
        """The statements in front of a loop with masked exits (none without), and its body with
        their head: every thread starts the loop; each iteration runs for those that have not
        broken out, and the loop ends when none is left."""
        if exits is None:
            return [], body
        true = ast.Attribute(_name("np"), "True_", ast.Load())
        if exits.alive is None:
            return [], [ast.Assign([_store_name(exits.going)], true)] + body
        none_left = ast.UnaryOp(ast.Not(), ast.Call(_np("any"), [_name(exits.alive)], []))
        return ([ast.Assign([_store_name(exits.alive)], true)],
                [ast.If(none_left, [ast.Break()], []),
                 ast.Assign([_store_name(exits.going)], _name(exits.alive))] + body)

    def _take_exit(self, call, leave_loop: bool) -> list[ast.stmt] | None:
        """``break``/``continue`` of a loop with masked exits: the threads reaching it (the loop
        body's masks where it stands) stop this iteration, and with ``break`` the loop; None for a
        call of a loop without them."""
        exits = self.serial.exits.get(_key(call))
        if exits is None:
            return None
        leaving = self.namer.define_name("leaving")
        out = [ast.Assign([_store_name(leaving)], self._mask_expr(self.lanes.stmt_masks[exits.mask_depth:])),
               ast.Assign([_store_name(exits.going)], ast.BinOp(_name(exits.going), ast.BitAnd(),
                                                                ast.UnaryOp(ast.Invert(), _name(leaving))))]
        if leave_loop:
            out.append(ast.Assign([_store_name(exits.alive)], ast.BinOp(
                _name(exits.alive), ast.BitAnd(), ast.UnaryOp(ast.Invert(), _name(leaving)))))
        return out

    def _cut_loop(self, node, cut: tuple):
        """Loop ``node`` over ``[lo, hi)`` only (the plan proved the other iterations do nothing):
        the loop, its start and its extent."""
        dtype = _dtype(node.loop_var)
        lo, hi = cut
        loop = tirx.For(node.loop_var, tirx.const(lo, dtype), tirx.const(hi - lo, dtype), node.kind, node.body)
        self._bind_loop(node.loop_var, loop.min, loop.extent)
        return loop, Value(ast.Constant(lo), "py", dtype), Value(ast.Constant(hi - lo), "py", dtype)

    def _privatised(self, decision) -> list:
        """The allocations outside this lanes loop that get a copy per lane (``decision.private``, the
        plan proved every iteration writes them before reading): allocated again inside the lanes."""
        bufs = [self.plan.privatised[key] for key in decision.private if key in self.plan.privatised]
        missing = [str(buf.name) for buf in bufs if _key(buf) not in self.scope.buffers]
        if missing:  # without its copies the lanes would share it: no lane form
            raise _CannotVectorize(f"{', '.join(missing)} is not allocated where a copy per lane can be made")
        return bufs

    def _lanes_loop_in(self, *exprs):
        """The innermost loop running as (non-thread) lanes whose variable ``exprs`` use, or None."""
        axes = [ax for ax in self.lanes.axes if not ax.is_thread and ax.var is not None]
        for ax in reversed(axes):
            if any(_contains(e, lambda n, k=_key(ax.var): _type_key(n) == "ir.Var" and _key(n) == k)
                   for e in exprs):
                return ax.var
        return None

    @staticmethod
    def _as_planned(node, emit):
        """``emit()`` for a loop the plan runs as lanes; a construct without a lane form inside it
        rejects the plan for this loop (the driver plans it serial and emits again), or for the
        enclosing lanes loop it names (``_CannotVectorize.loop``)."""
        try:
            return emit()
        except _CannotVectorize as exc:
            var = getattr(node, "loop_var", None)
            if var is None and hasattr(getattr(node, "node", None), "var"):  # a grid's thread_extent
                var = node.node.var
            if exc.loop is not None and (var is None or _key(var) != _key(exc.loop)):
                raise  # an enclosing loop's lanes are the cause: its own _as_planned rejects it
            raise PlanRejected(node, str(exc), copies=exc.copies) from None

    def _progress_hook(self, name: str, lo: Value, node, extent: Value) -> tuple[list[ast.stmt], list]:
        """The progress call of a serial loop (only in the executed variant), and the reporting
        loops its body sees.

        An outermost loop calls ``__progress__(loop, done, extent)`` per iteration.  Inside a
        reporting loop, the first loop that itself holds a loop (or any first loop, in a loop of few
        iterations, the outermost) reports too, with the iterations of every reporting loop around it:
        ``__progress__(loop, done0, extent0, done1, extent1, ...)``, so a long nest that has not
        finished one outer iteration still moves and slow can be told from hung; the loop inside
        keeps the cost of a call per iteration negligible.  A loop whose inner loops report marks
        its own call with a trailing ``0, 0``: it then reports the iterations it completed.
        A loop of one iteration passes the reporting on to the loops inside; any other loop that
        does not report ends it."""
        if not self.hooks.enabled:
            return [], []
        done = ast.BinOp(_name(name), ast.Sub(), lo.node) if not _is_zero(node.min) else _name(name)
        few = isinstance(extent.node, ast.Constant) and extent.node.value <= _FEW_OUTER_ITERATIONS
        if self.serial.depth == 0:
            call = ast.Call(_name("__progress__"), [ast.Constant(self.hooks.loops), done, extent.node], [])
            self.hooks.loops += 1
            return [ast.Expr(call)], [ProgressLevel(call, few)]
        chain = self.hooks.chain
        if isinstance(extent.node, ast.Constant) and extent.node.value == 1:
            return [], chain  # one iteration: the loops inside report in its place
        parent = chain[-1] if chain else None
        if (parent is None or parent.child or len(chain) >= _PROGRESS_LEVELS
                or not (parent.few or _contains(node.body, lambda n: _type_key(n) in ("tirx.For", "tirx.While")))):
            return [], []
        pairs = parent.call.args[:1 + 2 * len(chain)]
        call = ast.Call(_name("__progress__"), pairs + [done, extent.node], [])
        parent.call.args.extend([ast.Constant(0), ast.Constant(0)])
        parent.child = True
        return [ast.Expr(call)], chain + [ProgressLevel(call)]

    @contextlib.contextmanager
    def _guarded(self, condition):
        """Analyse under ``condition`` (a branch, the right side of ``&&``): what is proven there need
        not hold outside, so nothing is hoisted out of it."""
        self.serial.guard_depth += 1
        try:
            with self.analyzer.constraint_scope(condition):
                yield
        finally:
            self.serial.guard_depth -= 1

    def visit_While(self, node) -> list[ast.stmt]:
        cond = self.visit_expr(node.condition)
        if cond.varying:
            return self._lanes_while(node, cond)
        exits = self._masked_exits(node.body) if self.lanes.vector_depth else None
        try:
            body = self.visit_stmt(node.body)
        finally:
            if exits is not None:
                self._forget_exits(exits)
        front, body = self._with_exit_masks(exits, body)
        return front + [ast.While(cond.node, body or [ast.Pass()], [])]

    def _masked(self, cond: ast.expr, stmt) -> list[ast.stmt]:
        """Run ``stmt`` for all lanes, writing only where ``cond`` holds."""
        self.lanes.stmt_masks.append(cond)
        try:
            return self.visit_stmt(stmt)
        finally:
            self.lanes.stmt_masks.pop()

    def visit_IfThenElse(self, node) -> list[ast.stmt]:
        cond = self.visit_expr(node.condition)
        if cond.varying:
            out, taken = [], cond.node
            if _reads_memory(node.condition) or not isinstance(cond.node, ast.Name):
                # Each lane's branch is decided once, before either runs: the branches may write what
                # the condition reads (a thread's counter), and every access in them names the mask.
                taken = _name(self.namer.define_name("taken"))
                out.append(ast.Assign([_store_name(taken.id)], cond.node))
            out += self._masked(taken, node.then_case)
            if node.else_case is not None:
                out += self._masked(ast.UnaryOp(ast.Invert(), taken), node.else_case)
            return out
        with self._guarded(node.condition):
            then = self.visit_stmt(node.then_case)
        orelse = []
        if node.else_case is not None:
            with self._guarded(tirx.Not(node.condition)):
                orelse = self.visit_stmt(node.else_case)
        return [ast.If(cond.node, then or [ast.Pass()], orelse)]

    def visit_AssertStmt(self, node) -> list[ast.stmt]:
        """``assert cond, (kind, [parts])``: the error TVM raises natively (its ``error_kind``, when
        that names a Python exception, else ``AssertionError``) with the message parts joined."""
        cond = self.visit_expr(node.condition)
        parts = list(node.message_parts) if hasattr(node, "message_parts") else [node.message]
        text = "".join(str(p.value) if _type_key(p) == "ir.StringImm" else str(p) for p in parts)
        kind = getattr(node, "error_kind", None)
        kind = "AssertionError" if kind is None else str(kind.value if _type_key(kind) == "ir.StringImm" else kind)
        if not (isinstance(getattr(builtins, kind, None), type) and issubclass(getattr(builtins, kind), Exception)):
            kind, text = "AssertionError", f"{kind}: {text}"
        call = ast.Call(_name(kind), [ast.Constant(text)], [])
        test = ast.Call(_np("all"), [cond.node], []) if cond.varying or cond.lanes > 1 else cond.node
        return [ast.If(ast.UnaryOp(ast.Not(), test), [ast.Raise(call, None)], [])]

    def visit_Break(self, node) -> list[ast.stmt]:
        masked = self._take_exit(node, leave_loop=True)
        if masked is not None:
            return masked
        if self.lanes.vector_depth:
            raise _CannotVectorize("break")
        return [ast.Break()]

    def visit_Continue(self, node) -> list[ast.stmt]:
        masked = self._take_exit(node, leave_loop=False)
        if masked is not None:
            return masked
        if self.lanes.vector_depth:
            raise _CannotVectorize("continue")
        return [ast.Continue()]

    def visit_Return(self, node) -> list[ast.stmt]:
        """``return value``: the function ends here, wherever it is (in loops, in branches), and the
        caller gets the value as TVM's packed API hands it over (``packed_return``: an integer as
        int64, a float as float64, a bool), which is what the native build returns.  The plan runs
        every loop around it serially (``dependence._LoopAccesses``): the iterations after the one that
        returns must not run."""
        if self.lanes.vector_depth or self.lanes.stmt_masks or self.lanes.axes:
            raise _CannotVectorize("a return from the function inside lanes")
        dtype = _dtype(node.value)
        if _lanes(dtype) != 1 or not (_is_int(dtype) or _is_float(dtype) or dtype == "bool"):
            raise UnsupportedConstructError("tirx.Return", f"of a {dtype} value (the packed API returns scalars)")
        value = self.visit_expr(node.value)
        return [ast.Return(self._call("packed_return", value.node, ast.Constant(dtype)))]

    # ------------------------------------------------------------------ constructs with an exact meaning
    def _intrinsic_statement(self, call) -> list[ast.stmt] | None:
        """Intrinsics evaluated as statements: ``assume`` and ``tvm_access_ptr`` (no run-time effect),
        ``break_loop``, ``continue_loop`` and ``masked_store``; None for any other expression."""
        if _type_key(call) != "ir.Call" or not isinstance(call.op, tvm.ir.Op):
            return None
        name = call.op.name
        if name == "tirx.assume":
            return []
        if name == "tirx.break_loop":
            return self.visit_Break(call)
        if name == "tirx.continue_loop":
            return self.visit_Continue(call)
        if name == "tirx.masked_store":
            return self._masked_store(list(call.args))
        if name == "tirx.tvm_access_ptr":
            # A pointer into a buffer computed and dropped (an opaque access annotated for the
            # schedule, ``T.evaluate(B.access_ptr("r"))``): no effect at run time.
            return []
        return None

    def _stepped_for(self, node) -> list[ast.stmt]:
        """A loop with a step: ``range(min, min + extent, step)``, always run serially."""
        if int(node.kind) == 4:
            raise UnsupportedConstructError("tirx.For", "thread-bound loop with a step")
        lo = self.visit_expr(node.min)
        end = self.visit_expr(tvm.sym.Analyzer().simplify(node.min + node.extent))
        step = self.visit_expr(node.step)
        if _varying(lo, end, step):
            raise _CannotVectorize("loop bounds that differ between iterations")
        self._bind_loop(node.loop_var, node.min, node.extent)
        name = self.namer.define(node.loop_var, node.loop_var.name)
        self.scope.var_kinds[_key(node.loop_var)] = ("py", _dtype(node.loop_var), False)
        # No serial frame: hoisted views assume a loop that advances by one.
        outer_chain, self.hooks.chain = self.hooks.chain, []  # no progress call for loops inside to refine
        self.serial.depth += 1
        try:
            body = self.visit_stmt(node.body)
        finally:
            self.serial.depth -= 1
            self.hooks.chain = outer_chain
        call = ast.Call(_name("range"), [lo.node, end.node, step.node], [])
        return [ast.For(_store_name(name), call, body or [ast.Pass()], [])]

    def visit_SBlockRealize(self, node) -> list[ast.stmt]:
        block = node.block
        threads = [ax for ax in self.lanes.axes if ax.is_thread]
        # A reduction into per-thread memory is across the threads too when the block has its init
        # (as scheduled); LowerCrossThreadReduction's in-thread blocks (no init) keep each thread's own.
        if (threads and self._reduces_across(node, threads) and not _calls_allreduce(block)
                and (block.init is not None or not self._writes_only_per_thread(block))):
            return self._serialized_block(node, threads)
        out: list[ast.stmt] = []
        reduce_checks: list[Value] = []
        for iv, value in zip(block.iter_vars, node.iter_values):
            v = self.visit_expr(value)
            name = self.namer.define(iv.var, iv.var.name)
            self._set_var(iv.var, v)
            out.extend(self._lane_assignment(name, v, value))
            self._bind_analyzer(iv.var, value)
            if int(iv.iter_type) == 2:  # reduction axis: init runs at its first value
                lo = self.visit_expr(iv.dom.min)
                reduce_checks.append(Value(ast.Compare(_name(name), [ast.Eq()], [lo.node]), "py", "bool", v.varying))
            elif int(iv.iter_type) not in (0, 3, 4):  # data-parallel, ordered, opaque: plain bindings
                raise UnsupportedConstructError("s_tir.SBlock", f"iterator kind {int(iv.iter_type)}")
        pred = None if _is_true(node.predicate) else self.visit_expr(node.predicate)
        if pred is not None and pred.varying:
            # Lanes outside the predicate neither init nor update; the mask is computed once (every
            # access under it names it).
            inside = self.namer.define_name("inside")
            out.append(ast.Assign([_store_name(inside)], pred.node))
            self.lanes.stmt_masks.append(_name(inside))
        try:
            inner: list[ast.stmt] = []
            for buf in block.alloc_buffers:
                inner.extend(self.visit_AllocBuffer(_AllocLike(buf)))
                self.scope.block_allocs[_key(buf)] = buf
            for match in block.match_buffers:
                inner.extend(self._match_buffer(match))
            if block.init is not None:
                if not reduce_checks:
                    inner.extend(self.visit_stmt(block.init))
                elif _varying(*reduce_checks):
                    test = reduce_checks[0].node
                    for c in reduce_checks[1:]:
                        test = ast.BinOp(test, ast.BitAnd(), c.node)
                    inner.extend(self._masked(test, block.init))
                else:
                    nodes = [c.node for c in reduce_checks]
                    test = nodes[0] if len(nodes) == 1 else ast.BoolOp(ast.And(), nodes)
                    inner.append(ast.If(test, self.visit_stmt(block.init) or [ast.Pass()], []))
            inner.extend(self.visit_stmt(block.body))
        finally:
            if pred is not None and pred.varying:
                self.lanes.stmt_masks.pop()
        if pred is not None and not pred.varying:
            inner = [ast.If(pred.node, inner or [ast.Pass()], [])]
        out.extend(inner)
        if (block.name_hint == "root" and not block.iter_vars) or self.fast:
            return out  # fast mode runs the statements without the (empty) block marker
        with_item = ast.withitem(ast.Call(self._use("sblock"), [ast.Constant(str(block.name_hint))], []), None)
        return [ast.With([with_item], out or [ast.Pass()])]
