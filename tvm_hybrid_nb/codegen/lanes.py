"""Fast mode's lanes: loops run as numpy array axes, parallel chunks, per-lane control flow and the
strided views that replace gathers (hoisted out of serial loops)."""
from __future__ import annotations

import ast

from tvm import tirx
import tvm

from .analysis import (_buffer_access_counts, _contains, _plan_lane_axes, _reads_memory, _step, _uses_vars,
                       allocations_in, allocations_moved_into)
from .radix import fold_radix
from .sharing import varying_with
from .names import (Value, ascii_identifier, _AllocLike, _Axis, _BufferInfo, _CannotVectorize, _dtype, _is_zero, _key, _lanes, _name,
    _np, _store_name, _type_key, _varying, thread_key)


def _is_constant_one(expr) -> bool:
    return _type_key(expr) == "ir.IntImm" and int(expr.value) == 1


def _pure_index_arithmetic(expr) -> bool:
    """Whether ``expr`` is arithmetic on variables and constants that cannot fail: no load, no call,
    no division or modulo but by a nonzero constant."""
    def bad(n) -> bool:
        key = _type_key(n)
        if key in ("prim.Div", "prim.Mod", "prim.FloorDiv", "prim.FloorMod"):
            return _type_key(n.b) != "ir.IntImm" or int(n.b.value) == 0
        return key in ("ir.Call", "ir.TensorLoad", "tirx.BufferLoad", "prim.Let", "tirx.Let")

    return not _contains(expr, bad) and not _reads_memory(expr)


def _one_element_per_lane(coefs: dict, used: list, lane_axes: set) -> bool:
    """Whether a view whose lane axes step through its dimensions by ``coefs`` (axis -> per-dimension
    step) gives every lane its own element: each lane axis moves the address, and along some
    dimension it alone does (two lanes that differ on an axis then differ in that coordinate)."""
    if set(used) != lane_axes:
        return False
    return all(any(step and not any(coefs[other][d] for other in used if other != axis)
                   for d, step in enumerate(coefs[axis])) for axis in used)


#: A held copy costs two passes over the view (in and back): worth it for a view used more often.
_HELD_MIN_USES = 4


def _uses(name: str, body: list[ast.stmt], extent: ast.expr) -> int:
    """How many times the statements of a loop of ``extent`` iterations (``body``) name ``name``:
    each mention times the trips of the loops around it (4 for a count not known here)."""
    def trips(node) -> int:
        args = node.args if isinstance(node, ast.Call) else [node]
        if not all(isinstance(a, ast.Constant) and isinstance(a.value, int) for a in args) or not 1 <= len(args) <= 2:
            return 4
        return max(args[-1].value - (args[0].value if len(args) == 2 else 0), 0)

    def count(stmts, times: int) -> int:
        total = 0
        for stmt in stmts:
            if isinstance(stmt, ast.For):
                total += count(stmt.body, times * trips(stmt.iter))
            elif isinstance(stmt, (ast.If, ast.While)):
                total += times * sum(isinstance(n, ast.Name) and n.id == name for n in ast.walk(stmt.test))
                total += count(stmt.body, times) + count(stmt.orelse, times)
            else:
                total += times * sum(isinstance(n, ast.Name) and n.id == name for n in ast.walk(stmt))
        return total

    return count(body, trips(extent))


def _view_key(call) -> str | None:
    """``buffer:start:lanes`` of a plain ``lanes_view(buffer, start, lanes)`` call, else None."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "lanes_view"
            and len(call.args) == 3 and not call.keywords and isinstance(call.args[0], ast.Name)):
        return None
    return f"{call.args[0].id}:{ast.dump(call.args[1])}:{ast.dump(call.args[2])}"


def _same_views_by_name(frame, body: list[ast.stmt]) -> None:
    """In ``body``, the views built again that a view hoisted in front of loop ``frame`` already is
    (a statement under a branch, whose view is not hoisted: an accumulator's init) become that view's
    name: the same elements of the same buffer, whose start reads nothing the loop changes."""
    hoisted = {}
    for stmt in frame.hoisted:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name) and stmt.targets[0].id in frame.fixed:
            key = _view_key(stmt.value)
            if key is not None:
                hoisted[key] = stmt.targets[0].id
    if not hoisted:
        return

    class Rename(ast.NodeTransformer):
        def visit_Call(self, node):
            name = hoisted.get(_view_key(node))
            return _name(name) if name is not None else self.generic_visit(node)

    for i, stmt in enumerate(body):
        body[i] = Rename().visit(stmt)


class LanesMixin:
    """The lanes room of :class:`~.generator.HybridCodegen` (see the module docstring)."""

    #: Lanes layout: axes 0-3 are the threads of a block (fixed per thread tag, so per-thread memory
    #: can be indexed anywhere), axes 4-10 the loops that fast mode runs as arrays, the last axis
    #: holds vector lanes.
    FAST_AXES = 12
    THREAD_AXES = {"threadIdx.z": 0, "threadIdx.y": 1, "threadIdx.x": 2, "vthread": 3}
    #: Fewer lanes than this are gathered with index arrays rather than viewed with strides.
    VIEW_MIN_ELEMENTS = 16
    FIRST_LOOP_AXIS = 4
    #: Iterations run as lanes take per-lane trip counts only when the counts are known to stay below
    #: this (the longest sets the pace of all).
    LANE_TRIPS_MAX = 1 << 16

    def _lane_view(self, info: _BufferInfo, indices, values: list[Value], write: bool = False,
                   gather: bool = False) -> ast.expr | None:
        """Fast mode: an access whose index is affine in the lanes is a strided view of the buffer
        (``lanes_view``), not a gather or scatter through index arrays.  A buffer with a copy per
        lane or per thread is viewed through its lane dimensions too (a thread's accumulator).
        ``gather``: a read that other lanes reuse is copied once, contiguous (see below).
        Exact mode's threads use views under the sanitizers only: their checked accesses of a
        view cost a fraction of ``access`` (a plain exact script keeps its subscripts).  Under a lane
        mask a read may be a view: it is in bounds for every lane, and a masked-out lane's value is
        never used (a lane mask does not constrain the analyzer, see ``visit_TensorLoad``); so may
        a write whose lanes each have an element of their own (``np.copyto`` where the mask holds)."""
        views = self._lane_views(info, indices, values, (info.name,), write, gather, masked_ok=True)
        return None if views is None else views[0]

    def _lane_views(self, info: _BufferInfo, indices, values: list[Value], names: tuple, write: bool = False,
                    gather: bool = False, min_elements: int = VIEW_MIN_ELEMENTS,
                    masked_ok: bool = False) -> list[ast.expr] | None:
        """:meth:`_lane_view` of the same access in each buffer of ``names``, which share ``info``'s
        shape and lane layout (a buffer and its sanitizer marks): the view's geometry is worked out
        once, the analyzer's part of a checked access's cost.  ``min_elements``: fewer lanes than
        this are no view (see ``VIEW_MIN_ELEMENTS``).  ``masked_ok``: a view under lane masks too
        (a plain access; a write only where no two lanes share an element)."""
        masked = bool(self.lanes.stmt_masks or self.lanes.masks)
        if (not (self.fast or self.check) or (masked and not masked_ok)
                or any(name in self.scope.strided_storage for name in names)
                or _lanes(info.dtype) > 1 or not self._in_bounds(info, indices)):
            return None
        prefix = self._view_prefix(info)
        if prefix is None or not (prefix or _varying(*values)):
            return None
        axes = [ax for ax in self.lanes.axes if ax.var is not None]
        lane_axis = self.FAST_AXES - 1
        dims = len(prefix) + len(indices)
        bases, coefs = [], {ax.axis: [0] * dims for ax in axes}
        extents = {ax.axis: ax.extent for ax in axes}
        for p, (_base, axis) in enumerate(prefix):
            if axis is not None:
                coefs[axis][p] = 1
        try:
            for d, idx in enumerate(indices, start=len(prefix)):
                key = _type_key(idx)
                if key == "prim.Ramp":
                    if _type_key(idx.stride) != "ir.IntImm":
                        return None
                    coefs.setdefault(lane_axis, [0] * dims)[d] = int(idx.stride.value)
                    extents[lane_axis] = ast.Constant(int(idx.lanes))
                    idx = idx.base
                elif key == "prim.Broadcast":
                    return None
                affine = self._affine_in_lanes(self.analyzer.simplify(idx), axes)
                if affine is None:
                    # Not per dimension, maybe as a whole: the element's row-major offset
                    # (``out[0, f // 4096, f % 4096 // 64, f % 64]`` is ``out.flat[f]``).
                    flat = None if prefix else self._flat_affine_in_lanes(info, indices, axes)
                    if flat is None:
                        return None
                    base, steps = flat
                    bases = [tirx.const(0, _dtype(base))] * (dims - 1) + [base]
                    coefs = {ax.axis: [0] * (dims - 1) + [steps[ax.axis]] for ax in axes}
                    break
                base, steps = affine
                for axis, step in steps.items():
                    coefs[axis][d] = step
                bases.append(base)
        except Exception:
            return None
        base_nodes = self._same_for_all_lanes(bases)
        if base_nodes is None:
            return None
        used = [axis for axis, cs in sorted(coefs.items()) if any(cs)]
        if prefix and write and set(used) < {ax.axis for ax in axes}:
            return None  # lanes that share an element of a per-lane copy: not one view
        if write and masked and not _one_element_per_lane(coefs, used, {ax.axis for ax in axes}):
            return None  # lanes that may share an element: the last one the mask keeps writes it
        count = 1
        for axis in used:
            count *= extents[axis].value if isinstance(extents[axis], ast.Constant) else min_elements
        if count < min_elements:  # building a view costs more than gathering a few elements
            return None
        lanes = [(axis, extents[axis], coefs[axis]) for axis in used]
        prefix_starts = [base for base, _axis in prefix]
        hoisting = self._hoisting(bases, lanes, prefix_starts)
        views = []
        for name in names:
            view = None if hoisting is None else self._hoisted_view(name, hoisting)
            if view is None:
                start = ast.Tuple(prefix_starts + base_nodes, ast.Load())
                view = self._call("lanes_view", _name(name), start, self._lanes_arg(lanes))
            if not write and gather and any(ax.axis not in used for ax in axes):
                # A read the other lanes reuse (``B[i2, k]`` against lanes ``i1, i2``): numpy walks a
                # broadcast operand once per element of the missing axes, so a strided view (a column,
                # 16 KiB between elements) would be gathered again for every row.  One contiguous copy
                # of the elements read, made where the read is, holds the same values (a no-op when the
                # view is contiguous already).
                view = ast.Call(_np("ascontiguousarray"), [view], [])
            views.append(view)
        return views

    @staticmethod
    def _affine_in_lanes(f, axes) -> tuple | None:
        """``(base, {array axis: step})`` when ``f`` is ``base`` plus a constant step per lane of each
        of ``axes`` (``base``: ``f`` at the lanes' first values), else None."""
        at_min = tvm.sym.Analyzer()
        linear = tirx.const(0, _dtype(f))
        steps = {}
        for ax in axes:
            step = _step(f, ax.var)
            if step is None:
                return None
            steps[ax.axis] = step
            at_min.bind(ax.var, ax.min_expr, allow_override=True)
            linear = linear + step * (ax.var - ax.min_expr)
        base = at_min.simplify(f)
        if not _is_zero(tvm.sym.Analyzer().simplify(f - base - linear)):
            return None
        return base, steps

    #: The flat offsets of a lane view stay in int32 arithmetic: buffers of fewer elements only.
    FLAT_VIEW_MAX_ELEMENTS = 1 << 31

    def _flat_affine_in_lanes(self, info: _BufferInfo, indices, axes) -> tuple | None:
        """:meth:`_affine_in_lanes` of the row-major offset of ``indices`` (proven in bounds) into a
        buffer of constant shape: dlight.cpu fuses the spatial loops of its parallel loop and indexes
        each dimension by a quotient or remainder of the fused variable, one gather and one scatter of
        every lane per statement, where the elements, in order, are one strided view of the buffer."""
        if info.sliced or any(_type_key(dim) != "ir.IntImm" for dim in info.shape) or any(
                _type_key(i) in ("prim.Ramp", "prim.Broadcast") for i in indices):
            return None
        sizes = [int(dim.value) for dim in info.shape]
        total = 1
        for size in sizes:
            total *= size
        if total >= self.FLAT_VIEW_MAX_ELEMENTS or len({_dtype(i) for i in indices}) != 1:
            return None
        offset, step = tirx.const(0, _dtype(indices[0])), 1
        for idx, size in zip(reversed(list(indices)), reversed(sizes)):
            offset = offset + idx * step
            step *= size
        return self._affine_in_lanes(fold_radix(self.analyzer.simplify(offset), self.analyzer), axes)

    def _view_prefix(self, info: _BufferInfo) -> list | None:
        """The lane dimensions in front of a per-lane or per-thread buffer's own, as ``(start, array
        axis or None)`` for a view, or None when one of them has no view (see ``_prefix``)."""
        parts = []
        if info.per_thread:
            active = {thread_key(ax.tag): ax for ax in self.lanes.axes if ax.is_thread}
            for tag, _axis in sorted(self.THREAD_AXES.items(), key=lambda kv: kv[1]):
                ax = active.get(tag)
                if info.per_warp and tag == "threadIdx.x":
                    parts.append((ast.Constant(0), None))  # the warp's one copy
                elif ax is not None:
                    parts.append((ax.lo, ax.axis))
                elif tag in self.gpu.serial_thread_lanes:
                    return None  # a thread run serially: an index that changes per iteration
                else:
                    parts.append((ast.Constant(0), None))
        for key in info.prefix_axes:
            ax = next((a for a in self.lanes.axes if a.var is not None and _key(a.var) == key), None)
            if ax is None:
                return None
            parts.append((ast.Constant(0), ax.axis))
        if len(parts) != len(info.prefix) + (len(self.THREAD_AXES) if info.per_thread else 0):
            return None
        return parts

    def _same_for_all_lanes(self, exprs) -> list[ast.expr] | None:
        """``exprs`` in Python when none of them differs between lanes, else None."""
        nodes = []
        for expr in exprs:
            value = self.visit_expr(expr)
            if value.varying:
                return None
            nodes.append(value.node)
        return nodes

    @staticmethod
    def _lanes_arg(lanes) -> ast.expr:
        return ast.Tuple([ast.Tuple([ast.Constant(axis), extent, ast.Tuple([ast.Constant(c) for c in coefs],
                                                                            ast.Load())], ast.Load())
                          for axis, extent, coefs in lanes], ast.Load())

    def _hoisting(self, bases, lanes, prefix=()) -> tuple | None:
        """How a lane view can be built once in front of the innermost serial loop instead of every
        iteration (:meth:`_hoisted_view`), whatever buffer it views: ``(frames, start, lanes
        argument, moving, key)``, or None.  As it is when its start does not move with the loop (and
        then in front of the serial loops around as well while it moves with none of them: ``frames``,
        innermost first), else with the loop's iterations as a leading axis, of which each iteration
        takes its own (``view[k]``).  Only where no branch condition was needed to prove it in bounds.
        ``prefix``: the starts of a per-lane or per-thread copy's lane dimensions (fixed)."""
        if not self.serial.frames:
            return None
        frame = self.serial.frames[-1]
        if frame.guard_depth != self.serial.guard_depth:
            return None
        steps, starts = [], []
        try:
            for base in bases:
                step = _step(base, frame.var)
                if step is None:
                    return None
                at_min = tvm.sym.Analyzer()
                at_min.bind(frame.var, frame.min_expr)
                start = at_min.simplify(base)
                if not _is_zero(tvm.sym.Analyzer().simplify(base - start - step * (frame.var - frame.min_expr))):
                    return None
                steps.append(step)
                starts.append(start)
        except Exception:
            return None
        start_nodes = self._same_for_all_lanes(starts)
        if start_nodes is None:
            return None
        start_nodes, steps = list(prefix) + start_nodes, [0] * len(prefix) + steps
        moving = any(steps)
        if moving:
            lanes = [(0, frame.extent, steps)] + [(axis + 1, extent, coefs) for axis, extent, coefs in lanes]
        start, lanes_arg = ast.Tuple(start_nodes, ast.Load()), self._lanes_arg(lanes)
        read = {n.id for part in (start, lanes_arg) for n in ast.walk(part) if isinstance(n, ast.Name)}
        if not read <= frame.outside:  # helpers are reserved names, so they are in it too
            return None
        frames = [frame]
        if not moving:  # the same view in every iteration of the loops around too: in front of them
            for outer in reversed(self.serial.frames[:-1]):
                # a loop of no iteration would have built no view, whose start may then be outside
                runs = isinstance(outer.extent, ast.Constant) and outer.extent.value >= 1
                if not runs or outer.guard_depth != self.serial.guard_depth or not read <= outer.outside:
                    break
                frames.append(outer)
        return tuple(frames), start, lanes_arg, moving, ast.dump(start) + ast.dump(lanes_arg)

    def _lane_assignment(self, name: str, value: Value, expr) -> list[ast.stmt]:
        """``name = value`` (the Python of TIR ``expr``), made in front of the serial loops around it
        whose iterations all compute the same lane array (fast mode; index arithmetic only: no memory,
        no call, no division by anything but a nonzero constant, so computing it where the loop may run
        no iteration cannot fail).  dlight.cpu's block bindings ``v0 = f // 4096`` over the lanes of its
        fused parallel loop were recomputed at each of a conv's 144 reduction steps."""
        assign = ast.Assign([_store_name(name)], value.node)
        if not (self.fast and value.varying and self.serial.frames) or not _pure_index_arithmetic(expr):
            return [assign]
        read = {n.id for n in ast.walk(value.node) if isinstance(n, ast.Name)}
        target = None
        for frame in reversed(self.serial.frames):
            if not read <= frame.outside:
                break
            target = frame
        if target is None:
            return [assign]
        target.hoisted.append(assign)
        return []

    def _hoisted_view(self, name: str, hoisting: tuple) -> ast.expr | None:
        """The view of buffer ``name`` that :meth:`_hoisting` hoists, defined once per loop (None
        when the buffer does not exist before the loop)."""
        frames, start, lanes_arg, moving, key = hoisting
        frame = None
        for candidate in frames:  # innermost first: the outermost loop that the buffer exists before
            if name not in candidate.outside:
                break
            frame = candidate
        if frame is None:
            return None
        key = f"{name}:{key}"
        view_name = frame.views.get(key)
        if view_name is None:
            view_name = self.namer.define_name(f"{name}_by_{frame.name}" if moving else f"{name}_lanes")
            frame.views[key] = view_name
            call = self._call("lanes_view", _name(name), start, lanes_arg,
                              kw={"ndim": ast.Constant(self.FAST_AXES + 1)} if moving else None)
            frame.hoisted.append(ast.Assign([_store_name(view_name)], call))
            self.serial.hoisted_views.add(view_name)
            if not moving:
                frame.fixed[view_name] = name
        if not moving:
            return _name(view_name)
        index = _name(frame.name)
        if not (isinstance(frame.lo, ast.Constant) and frame.lo.value == 0):
            index = ast.BinOp(index, ast.Sub(), frame.lo)
        return ast.Subscript(_name(view_name), index, ast.Load())

    def _held_views(self, frame, body: list[ast.stmt]) -> list[ast.stmt]:
        """Fast mode: the views hoisted in front of serial loop ``frame`` that the loop writes and
        through which alone it reaches their buffers, held in contiguous copies for the loop (the
        hoisted ``V = lanes_view(...)`` becomes ``V = held_copy(V_memory)``); returns the statements
        that store them back after the loop.  A tile's accumulator summed over a reduction's steps
        (:mod:`.interchange`) is then one contiguous array, not a strided view rewritten at every step.
        A return inside the loop would leave without storing them: none are held then."""
        if not (self.fast and not self.check and frame.fixed and frame.hoisted):
            return []
        _same_views_by_name(frame, body)
        used, written = set(), set()
        for node in ast.walk(ast.Module(body=body, type_ignores=[])):
            if isinstance(node, ast.Return):
                return []
            if isinstance(node, ast.Name):
                used.add(node.id)
            elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
                written.add(node.target.id)
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name):
                written.add(node.value.id)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "copyto"
                  and node.args and isinstance(node.args[0], ast.Name)):  # a masked store: np.copyto(V, x, where=m)
                written.add(node.args[0].id)
        views = {view: buf for f in self.serial.frames + [frame] for view, buf in f.fixed.items()}
        views.update({view: key.split(":", 1)[0] for f in self.serial.frames + [frame]
                      for key, view in f.views.items()})
        after, hoisted = [], []
        for stmt in frame.hoisted:
            hoisted.append(stmt)
            if not (isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name)):
                continue
            view = stmt.targets[0].id
            if view not in frame.fixed or view not in written or _uses(view, body, frame.extent) < _HELD_MIN_USES:
                continue
            storage = self._storage_names(frame.fixed[view])
            others = {v for v, buf in views.items() if buf in storage and v != view}
            if used & (storage | others):  # the loop reaches the memory another way too
                continue
            memory = self.namer.define_name(f"{view}_memory")
            hoisted[-1] = ast.Assign([_store_name(memory)], stmt.value)
            hoisted.append(ast.Assign([_store_name(view)], self._call("held_copy", _name(memory))))
            after.append(ast.Expr(self._call("hold_back", _name(memory), _name(view))))
        frame.hoisted[:] = hoisted
        return after

    def _storage_names(self, name: str) -> set[str]:
        """The Python names of the buffers that share storage with buffer ``name`` (itself included)."""
        roots = self.scope.storage_roots
        keys = {key for key, info in self.scope.buffers.items() if info.name == name}
        shared = {roots.get(key, key) for key in keys}
        return {name} | {info.name for key, info in self.scope.buffers.items() if roots.get(key, key) in shared}

    def _vectorized_for(self, node, lo: Value, private_allocs=(), tag: str = "") -> list[ast.stmt]:
        """All iterations at once: the loop variable becomes an array along its own axis."""
        return self._lanes_for(node.loop_var, node.min, lo, node.extent, node.body, is_thread=False,
                               tag=tag, private_allocs=private_allocs)

    def _can_split_parallel(self) -> bool:
        """Whether a ``T.parallel`` loop here may run in chunks on several cores: outside every
        serial loop, lane loop and lane mask (so it starts once per call), with no sanitizer (which
        compares the accesses of all iterations)."""
        return (self.serial.depth == 0 and not self.lanes.axes and not self.lanes.stmt_masks and not self.lanes.masks
                and not self.check)

    def _split_parallel(self, node, lo: Value, extent: Value, private_allocs=(), tag: str = "") -> list[ast.stmt]:
        """A ``T.parallel`` loop proven independent: a function of one chunk of its iterations (run
        as lanes, ``tag`` naming them in errors) and a ``parallel_chunks`` call that runs the
        chunks on the machine's cores."""
        var = node.loop_var
        dtype = _dtype(var)
        chunk_lo = tirx.Var(f"{var.name}_lo", dtype)
        chunk_extent = tirx.Var(f"{var.name}_extent", dtype)
        for chunk_var, dom in ((chunk_lo, tvm.ir.Range.from_min_extent(node.min, node.extent)),
                               (chunk_extent, tvm.ir.Range.from_min_extent(1, node.extent))):
            self.namer.define(chunk_var, chunk_var.name)
            self.scope.var_kinds[_key(chunk_var)] = ("py", dtype, False)
            try:
                self.analyzer.bind(chunk_var, dom, allow_override=True)
            except Exception:
                pass
        function = self.namer.define_name(ascii_identifier(f"{var.name}_chunk"))
        self.lanes.chunked_var, self.lanes.chunked_extent, self.lanes.peak_lanes = _key(var), extent.node, 0
        self.lanes.chunk_varying = self._chunk_varying(node, private_allocs)
        self.lanes.chunks_in_turn = False
        try:
            body = self._lanes_for(var, chunk_lo, Value(_name(self.namer.lookup(chunk_lo)), "py", dtype),
                                   chunk_extent, node.body, is_thread=False, tag=tag, private_allocs=private_allocs)
            in_turn = self.lanes.chunks_in_turn
        finally:
            self.lanes.chunked_var = self.lanes.chunked_extent = self.lanes.chunk_varying = None
            self.lanes.chunks_in_turn = False
        self.lanes.parallel_loops.append(self.namer.lookup(var))
        args = [ast.arg(self.namer.lookup(chunk_lo)), ast.arg(self.namer.lookup(chunk_extent))]
        fdef = ast.FunctionDef(
            name=function, args=ast.arguments(posonlyargs=[], args=args, kwonlyargs=[], kw_defaults=[],
                                              defaults=[]),
            body=body or [ast.Pass()], decorator_list=[], returns=None, type_params=[])
        keywords = {"threads": ast.Constant(1)} if in_turn else {}
        if self.hooks.enabled and self.serial.depth == 0:
            # Progress as chunks complete, reported by the calling thread: report(iterations done).
            done = ast.arg("done")
            keywords["report"] = ast.Lambda(
                ast.arguments(posonlyargs=[], args=[done], kwonlyargs=[], kw_defaults=[], defaults=[]),
                ast.Call(_name("__progress__"), [ast.Constant(self.hooks.loops),
                                                 ast.BinOp(_name("done"), ast.Sub(), ast.Constant(1)),
                                                 extent.node], []))
            self.hooks.loops += 1
        return [fdef, ast.Expr(self._call("parallel_chunks", _name(function), lo.node, extent.node,
                                          ast.Constant(self.lanes.peak_lanes), kw=keywords))]

    def _chunk_varying(self, node, private_allocs) -> tuple[set[int], set[int]] | None:
        """What may differ between the iterations of parallel loop ``node`` (see
        :func:`~.sharing.varying_with`), with the memory each lane has a copy of: its private copies
        and the allocations inside it that no one-copy decision shares along it."""
        variables, buffers = varying_with(node, self.scope.storage_roots)
        if variables is None:
            return None
        per_lane = {_key(buf) for buf in private_allocs}
        for key in allocations_in(node.body):
            decision = self.plan.by_buffer.get(key)
            if decision is None or _key(node.loop_var) not in decision.loop_keys:
                per_lane.add(key)
        return variables, buffers | per_lane

    def _touches_chunk_lanes(self, *parts) -> bool:
        """Whether TIR ``parts`` (a loop's bounds and body) may differ between the iterations of the
        chunked parallel loop around (True when unknown, or under a lane mask)."""
        varying = self.lanes.chunk_varying
        if varying is None or self.lanes.stmt_masks or self.lanes.masks:
            return True
        variables, buffers = varying
        roots = self.scope.storage_roots

        def touches(n) -> bool:
            key = _type_key(n)
            if key == "ir.Var":
                return _key(n) in variables
            buf = n.source if key == "ir.TensorLoad" else n.buffer if key == "tirx.BufferStore" else None
            return buf is not None and (_key(buf) in buffers or roots.get(_key(buf), _key(buf)) in buffers)

        return any(_contains(part, touches) for part in parts)

    def _free_loop_axis(self) -> int | None:
        used = {ax.axis for ax in self.lanes.axes}
        for axis in range(self.FIRST_LOOP_AXIS, self.FAST_AXES - 1):
            if axis not in used:
                return axis
        return None

    def _loop_axis(self, var, body_stmt) -> int:
        """The array axis of a loop that runs as lanes: the one planned for the nest when it is free
        (the outermost loop of a nest plans its loops), else the first free one."""
        if not any(not ax.is_thread for ax in self.lanes.axes):
            self.lanes.axis_plan = _plan_lane_axes(var, body_stmt, range(self.FIRST_LOOP_AXIS, self.FAST_AXES - 1),
                                                   self.plan.runs_as_lanes)
        used = {ax.axis for ax in self.lanes.axes}
        axis = self.lanes.axis_plan.get(_key(var))
        if axis is None or axis in used:
            axis = self._free_loop_axis()
        if axis is None:
            raise _CannotVectorize("too many nested array axes")
        return axis

    def _planned_into(self, loop) -> list:
        """The block-allocated buffers in scope that only ``loop`` touches (see
        :func:`~.analysis.allocations_moved_into`)."""
        if not self.scope.block_allocs:
            return []
        if self.scope.access_counts is None:
            self.scope.access_counts = _buffer_access_counts(self.func.body)
        return [buf for buf in allocations_moved_into(loop, self.scope.block_allocs, self.scope.access_counts)
                if _key(buf) in self.scope.buffers]

    def _lanes_for(self, var, min_expr, lo: Value, extent_expr, body_stmt, is_thread: bool,
                   tag: str = "", race: bool = False, private_allocs=()) -> list[ast.stmt]:
        if is_thread:
            axis = self.THREAD_AXES.get(thread_key(tag))
            if axis is None:
                raise _CannotVectorize(f"unknown thread tag {tag}")
            if thread_key(tag) == "vthread" and _is_zero(min_expr) and _is_constant_one(extent_expr):
                return self._single_vthread(var, body_stmt)
            outer = next((ax for ax in self.lanes.axes if ax.axis == axis), None)
            if outer is not None and outer.tag != tag:
                # Another tag's virtual threads (``vthread.x`` in ``vthread.y``), not the same ones.
                raise _CannotVectorize(f"{tag} nested in {outer.tag}, both with more than one virtual thread: "
                                       f"virtual threads of two tags share one lane axis here")
            if outer is not None:
                return self._same_thread(var, min_expr, extent_expr, body_stmt, outer, tag)
        else:
            axis = self._loop_axis(var, body_stmt)
        name = self.namer.define(var, var.name)
        dtype = _dtype(var)
        shape = [1] * self.FAST_AXES
        shape[axis] = -1
        end = self.visit_expr(tvm.sym.Analyzer().simplify(min_expr + extent_expr))
        extent = self.visit_expr(extent_expr)
        arange = ast.Call(_np("arange"), [lo.node, end.node], [ast.keyword("dtype", ast.Constant(dtype))])
        reshape = ast.Call(ast.Attribute(arange, "reshape", ast.Load()), [ast.Constant(c) for c in shape], [])
        self.scope.var_kinds[_key(var)] = ("np", dtype, True)
        self.lanes.vector_depth += 1
        race = race or (is_thread and self.gpu.thread_races)
        outermost_race = race and not self._race_lanes()
        # Before ThreadSync: global memory's records are kept while the block's threads run.
        outermost_thread = is_thread and not race and not any(ax.is_thread for ax in self.lanes.axes)
        self.lanes.axes.append(_Axis(name, lo.node, extent.node, is_thread, axis, tag, race, var, min_expr))
        lanes = 1
        # A loop inside a chunk whose statements are the same for every chunk lane runs without them.
        chunk_lanes = _key(var) == self.lanes.chunked_var or self._touches_chunk_lanes(min_expr, body_stmt)
        for ax in self.lanes.axes:
            chunked = ax.var is not None and _key(ax.var) == self.lanes.chunked_var
            if chunked and not chunk_lanes:
                continue
            size = self.lanes.chunked_extent if chunked else ax.extent
            lanes *= size.value if isinstance(size, ast.Constant) else 1
        self.lanes.peak_lanes = max(self.lanes.peak_lanes, lanes)
        front: list[ast.stmt] = []
        try:
            with self._thread_names_scope(bool(tag), front):
                body = [s for buf in private_allocs for s in self.visit_AllocBuffer(_AllocLike(buf, per_block=not race))]
                body += self.visit_stmt(body_stmt)
        finally:
            self.lanes.vector_depth -= 1
            self.lanes.axes.pop()
        body = front + body
        self.lanes.vectorized_loops.append(name)
        if self.check and (outermost_race or outermost_thread):
            # The lanes end together: check what they did since the last barrier.
            body.append(ast.Expr(ast.Call(ast.Attribute(_name("race_log"), "flush", ast.Load()),
                                          [ast.Constant(f"the end of {tag}")], [])))
        stmts = [ast.Assign([_store_name(name)], reshape)] + body
        if self._bounds(extent_expr)[0] < 1:
            # A zero-trip loop runs nothing: its lanes would be empty, but an access that does not
            # depend on them (a row's maximum read for every column of an empty row) would still run.
            stmts = [ast.If(ast.Compare(extent.node, [ast.Gt()], [ast.Constant(0)]), stmts, [])]
        return stmts

    def _single_vthread(self, var, body_stmt) -> list[ast.stmt]:
        """A virtual-thread loop of one iteration: its variable is 0, and it takes no lane axis, which
        the threads' lanes keep for one vthread tag.  dlight's Matmul binds ``vthread.x`` inside
        ``vthread.y``, Adreno's Conv2d ``vthread.x`` in ``vthread.y`` in ``vthread.z``, most of
        them of one thread."""
        name = self.namer.define(var, var.name)
        self.scope.var_kinds[_key(var)] = ("py", _dtype(var), False)
        return [ast.Assign([_store_name(name)], ast.Constant(0))] + self.visit_stmt(body_stmt)

    def _same_thread(self, var, min_expr, extent_expr, body_stmt, outer: "_Axis", tag: str) -> list[ast.stmt]:
        """A loop bound to a thread tag that is already running: the same threads, not new ones
        (before UnifyThreadBinding the IR may bind ``threadIdx.x`` again inside itself)."""
        extent = self.visit_expr(extent_expr)
        same_extent = (isinstance(extent.node, ast.Constant) and isinstance(outer.extent, ast.Constant)
                       and extent.node.value == outer.extent.value)
        if not (_is_zero(min_expr) and same_extent):
            raise _CannotVectorize(f"{tag} bound again with a different extent")
        name = self.namer.define(var, var.name)
        self.scope.var_kinds[_key(var)] = ("np", _dtype(var), True)
        if outer.var is not None:
            # The analyser sees the same thread under both names, so an index written with the inner
            # one is affine in the running lanes (a strided view rather than a gather).
            try:
                self.analyzer.bind(var, outer.var, allow_override=True)
            except Exception:
                pass
        return [ast.Assign([_store_name(name)], _name(outer.name))] + self.visit_stmt(body_stmt)

    def _threads_and_blocks_only(self) -> bool:
        """Whether every running lane axis is a block's threads or a grid's blocks, which a GPU runs
        at once: loops whose trips differ between lanes may run masked across them."""
        return all(ax.is_thread or ax.tag.startswith("blockIdx") for ax in self.lanes.axes)

    def _lanes_while(self, node, cond: Value) -> list[ast.stmt]:
        """A while loop whose condition differs between the threads of a block (in lockstep): it runs
        while any thread still loops, each trip writing only for the threads whose condition held on
        every trip so far — a thread leaves for good the first time its condition fails, as on the GPU.
        Barriers inside see the mask, so one that only the still-looping threads reach stays an error.
        The blocks of a grid run as lanes loop alike (a GPU runs them at once too)."""
        if not self.lanes.axes or not self._threads_and_blocks_only():
            # Its trips are data-dependent: for loop iterations run as lanes, the longest would set
            # the pace of all (a serial run does only the trips each needs).
            raise _CannotVectorize("while loop whose condition differs between iterations")
        active = self.namer.define_name("looping")
        outer = self._mask_expr(self.lanes.stmt_masks)
        first = self.to_np(cond).node
        start = first if outer is None else ast.BinOp(outer, ast.BitAnd(), first)
        body, again = self._lanes_loop_body(active, node.body, lambda: self.visit_expr(node.condition))
        narrow = ast.Assign([_store_name(active)], ast.BinOp(_name(active), ast.BitAnd(), again))
        return [ast.Assign([_store_name(active)], start),
                ast.While(ast.Call(_np("any"), [_name(active)], []), body + [narrow], [])]

    def _lanes_serial_for(self, node) -> list[ast.stmt]:
        """A serial loop whose bounds differ between lanes (the threads of a block, or blocks and
        iterations run as lanes): each lane counts its own loop variable from its own start, the loop
        running, like a per-thread while loop, until every lane is done."""
        if not self.lanes.axes:
            raise _CannotVectorize("loop bounds that differ between iterations")
        if not self._threads_and_blocks_only():
            # Iterations as lanes loop as often as the longest of them: fine for bounds that an
            # iteration's index decides within a known range (a triangle, a block's last chunk),
            # not for bounds read from memory (a sparse row's length: one long row would set the
            # pace of all, slower than running the iterations one by one).  A grid's blocks loop
            # alike, as the threads of a block do (a GPU runs them at once too).
            trips = self.analyzer.const_int_bound(node.extent)
            if _reads_memory(node.min) or _reads_memory(node.extent) or trips.max_value > self.LANE_TRIPS_MAX:
                raise _CannotVectorize("loop bounds read from memory that differ between iterations",
                                       loop=self._lanes_loop_in(node.min, node.extent))
        dtype = _dtype(node.loop_var)
        end = self.to_np(self.visit_expr(tvm.sym.Analyzer().simplify(node.min + node.extent))).node
        start = self.visit_expr(node.min)
        # A start the lanes share (a triangle's 0): every looping lane is at the same trip, so the
        # variable is one number (its index arithmetic and branches stay scalar); lanes whose own
        # end has passed drop out of the mask as before.
        uniform = start.kind == "py" and not start.varying
        lo = start.node
        name = self.namer.define(node.loop_var, node.loop_var.name)
        self.scope.var_kinds[_key(node.loop_var)] = ("py", dtype, False) if uniform else ("np", dtype, True)
        end_name = self.namer.define_name(f"{name}_end")
        active = self.namer.define_name("looping")
        outer = self._mask_expr(self.lanes.stmt_masks)
        first = ast.Compare(_name(name), [ast.Lt()], [_name(end_name)])
        start = first if outer is None else ast.BinOp(outer, ast.BitAnd(), first)
        hoisted, body_stmt = self._invariant_binds(node)
        body, again = self._lanes_loop_body(active, body_stmt, lambda: None)
        step = ast.Assign([_store_name(name)], ast.BinOp(_name(name), ast.Add(), ast.Constant(1)))
        narrow = ast.Assign([_store_name(active)], ast.BinOp(_name(active), ast.BitAnd(), first))
        zeros = ast.Call(_np("zeros_like"), [_name(end_name)], [])
        return hoisted + [ast.Assign([_store_name(end_name)], end),
                          ast.Assign([_store_name(name)], lo if uniform else ast.BinOp(lo, ast.Add(), zeros)),
                          ast.Assign([_store_name(active)], start),
                          ast.While(ast.Call(_np("any"), [_name(active)], []), body + [step, narrow], [])]

    def _invariant_binds(self, node) -> tuple[list[ast.stmt], object]:
        """The leading bindings of loop ``node``'s body that every trip computes alike (index
        arithmetic that cannot fail, without the loop variable: CommonSubexprElim's ``i * 1024``),
        emitted once before the lanes' trips, and the rest of the body."""
        body = node.body
        if _type_key(body) != "tirx.SeqStmt":
            return [], body
        seq, hoisted = list(body.seq), []
        while (len(seq) > 1 and _type_key(seq[0]) == "tirx.Bind" and getattr(seq[0], "body", None) is None
               and _lanes(_dtype(seq[0].var)) == 1 and _pure_index_arithmetic(seq[0].value)
               and not _uses_vars(seq[0].value, {_key(node.loop_var)})):
            hoisted.extend(self.visit_Bind(seq.pop(0)))
        if not hoisted:
            return [], body
        return hoisted, seq[0] if len(seq) == 1 else tirx.SeqStmt(seq)

    def _lanes_loop_body(self, active: str, body_stmt, condition):
        """``body_stmt`` (and ``condition()``, re-evaluated at the end of each trip) for the lanes in
        ``active`` only; no view is hoisted out of such a loop (what it depends on may change per trip)."""
        exits = self._masked_exits(body_stmt, alive=active)  # a break ends the lanes' looping
        frames, self.serial.frames = self.serial.frames, []
        self.lanes.stmt_masks.append(_name(active))
        try:
            try:
                body = self.visit_stmt(body_stmt)
            finally:
                if exits is not None:  # the condition is evaluated by every looping lane, continued or not
                    self._forget_exits(exits)
            if exits is not None:
                body = [ast.Assign([_store_name(exits.going)], _name(active))] + body
            again = condition()  # loads masked to the looping lanes
            return body, None if again is None else self.to_np(again).node
        finally:
            self.lanes.stmt_masks.pop()
            self.serial.frames = frames
