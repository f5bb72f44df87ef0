"""Buffer accesses: loads and stores, bounds (proven or checked at run time), subscripts, lane prefixes
and the masks that guard writes."""
from __future__ import annotations

import ast

from tvm import tirx
import tvm

from ..errors import UnsupportedConstructError
from .names import (Value, _BufferInfo, _CannotVectorize, _INT64_MAX, _dtype, _key, _lanes, _name, _np, _scalar_dtype,
    _store_name, _type_key, _varying, thread_key)


class MemoryAccessMixin:
    """The memory room of :class:`~.generator.HybridCodegen` (see the module docstring)."""
    #: Operators of a lane-view store ``X = X op Y`` that update the view in place.
    IN_PLACE_OPS = (ast.Add, ast.Sub, ast.Mult)

    # ------------------------------------------------------------------ memory
    def _buffer(self, buf) -> _BufferInfo:
        info = self.scope.buffers.get(_key(buf))
        if info is None:
            raise UnsupportedConstructError("undeclared buffer", str(buf.name))
        return info

    def _index_range(self, idx) -> tuple[int, int]:
        key = _type_key(idx)
        if key == "prim.Ramp":
            lo, hi = self._bounds(idx.base)
            stride_lo, stride_hi = self._bounds(idx.stride)
            if stride_lo != stride_hi:
                return -_INT64_MAX, _INT64_MAX
            span = stride_lo * (int(idx.lanes) - 1)
            return lo + min(0, span), hi + max(0, span)
        if key == "prim.Broadcast":
            return self._bounds(idx.value)
        lo, hi = self._bounds(idx)
        if lo < 0:  # interval arithmetic takes ``i - i`` (CompactBufferAllocation's) for [-127, 127]
            slo, shi = self._bounds(self.analyzer.simplify(idx))
            lo, hi = max(lo, slo), min(hi, shi)
        return lo, hi

    def _in_bounds(self, info: _BufferInfo, indices) -> bool:
        if len(indices) != len(info.shape):
            return False
        for idx, dim in zip(indices, info.shape):
            lo, hi = self._index_range(idx)
            if lo < 0:
                return False
            if _type_key(dim) == "ir.IntImm":
                if hi >= int(dim.value):
                    return False
                continue
            last = idx
            if _type_key(idx) == "prim.Ramp":
                last = idx.base + idx.stride * (int(idx.lanes) - 1)
            elif _type_key(idx) == "prim.Broadcast":
                last = idx.value
            try:
                if not self.analyzer.can_prove(last < dim) and not self._within_symbolic_range(last, dim):
                    return False
            except Exception:
                return False
        return True

    def _bind_loop(self, var, min_expr, extent_expr) -> None:
        """Tell the analyzer (and ``_within_symbolic_range``) the values loop variable ``var`` takes."""
        self.scope.loop_domains[_key(var)] = (var, min_expr, extent_expr)
        try:
            self.analyzer.bind(var, tvm.ir.Range.from_min_extent(min_expr, extent_expr), allow_override=True)
        except Exception:
            pass

    def _within_symbolic_range(self, index, dim) -> bool:
        """Whether ``index < dim`` for all the values of the loop variables in it, where the bounds are
        symbolic (``i1 * 11008 + i2 < (n + 31) // 32 * 352256`` for ``i1 < (n + 31) // 32 * 32``):
        the analyzer's interval of ``index`` over the loops' ranges has a maximum it proves below
        ``dim`` (its constant bounds alone know nothing of ``n``)."""
        domains = {}
        for var, lo, extent in self.scope.loop_domains.values():
            domains[var] = tvm.sym.IntervalSet(lo, self.analyzer.simplify(lo + extent - 1))
        if not domains:
            return False
        bound = self.analyzer.int_set(self.analyzer.simplify(index), domains)  # let-bound names substituted
        return bool(self.analyzer.can_prove(bound.max_value < self.analyzer.simplify(dim)))

    def _prefix(self, info: _BufferInfo) -> list[ast.expr]:
        """Lane indices in front of a per-lane buffer's own indices."""
        if not info.per_thread:
            return list(info.prefix)
        active = {thread_key(ax.tag): ax for ax in self.lanes.axes if ax.is_thread}
        lanes = []
        for tag, _axis in sorted(self.THREAD_AXES.items(), key=lambda kv: kv[1]):
            ax = active.get(tag)
            if info.per_warp and tag == "threadIdx.x":
                lanes.append(ast.Constant(0))
            elif ax is not None:
                lanes.append(_name(ax.name))
            else:  # a thread that runs serially (a cross-thread reduction block) still has its own copy,
                # except of the accumulator it reduces into: thread 0's copy, shared afterwards
                serial = self.gpu.serial_thread_lanes.get(tag)
                if tag in self.gpu.accumulator_tags.get(info.name, ()):
                    serial = None
                lanes.append(_name(serial) if serial is not None else ast.Constant(0))
        return lanes + list(info.prefix)

    def _subscript(self, info: _BufferInfo, indices, values: list[Value]) -> ast.expr:
        parts = self._prefix(info)
        for idx, val in zip(indices, values):
            if _type_key(idx) == "prim.Ramp" and len(parts) == 0 and len(indices) == 1 and not val.varying:
                s_lo, s_hi = self._bounds(idx.stride)
                if s_lo == s_hi and s_lo >= 1:
                    base = self.visit_expr(idx.base).node
                    span = s_lo * (int(idx.lanes) - 1) + 1
                    if isinstance(base, ast.Constant):
                        stop = ast.Constant(base.value + span)
                    else:
                        stop = ast.BinOp(base, ast.Add(), ast.Constant(span))
                    parts.append(ast.Slice(base, stop, ast.Constant(s_lo) if s_lo > 1 else None))
                    continue
            parts.append(val.node)
        index = parts[0] if len(parts) == 1 else ast.Tuple(parts, ast.Load())
        return ast.Subscript(_name(info.name), index, ast.Load())

    def _mask_expr(self, masks: list[ast.expr]) -> ast.expr | None:
        if not masks:
            return None
        mask = masks[0]
        for m in masks[1:]:
            mask = ast.BinOp(mask, ast.BitAnd(), m)
        return mask

    def _vector_lanes_as_axis(self, info: _BufferInfo, indices, values: list[Value]):
        """A buffer of vectors (a thread's ``float32x4`` accumulator) indexed differently per lane:
        its vector lanes are one more buffer axis, indexed by the lanes axis of the values."""
        lanes = _lanes(info.dtype)
        if lanes == 1 or not (_varying(*values) or info.prefix or info.per_thread):
            return info, indices, values
        if any(_type_key(i) in ("prim.Ramp", "prim.Broadcast") or v.lanes > 1 for i, v in zip(indices, values)):
            return info, indices, values  # refused by _check_vector_buffer
        scalar = _BufferInfo(info.name, list(info.shape) + [tirx.IntImm("int32", lanes)], _scalar_dtype(info.dtype),
                             list(info.prefix), info.per_thread, info.shadow, list(info.prefix_axes), info.per_warp,
                             info.scope, list(info.own_copy_axes), info.sliced)
        lane = Value(self._call("vector_lane_index", ast.Constant(lanes), ast.Constant(self.FAST_AXES)), "np",
                     f"int32x{lanes}", True)
        return scalar, list(indices) + [tirx.Ramp(tirx.IntImm("int32", 0), tirx.IntImm("int32", 1), lanes)], (
            list(values) + [lane])

    @staticmethod
    def _check_vector_buffer(info: _BufferInfo, values: list[Value]) -> None:
        """Fast mode keeps accesses to a buffer of vectors (an extra lanes axis) serial."""
        if _lanes(info.dtype) > 1 and (_varying(*values) or info.prefix or info.per_thread):
            raise _CannotVectorize(f"buffer of vectors {info.name} indexed per lane")

    def _host_access(self, node, what: str) -> ast.expr | None:
        """Sanitizer: a call that raises where host code of a GPU function would dereference device
        memory (:func:`.analysis.host_device_accesses`); None elsewhere."""
        name = self.host_accesses.get(_key(node))
        if name is None:
            return None
        return self._call("host_device_access", ast.Constant(name), ast.Constant(what))

    def visit_TensorLoad(self, node) -> Value:
        host = self._host_access(node, "reads")
        if host is not None:
            return Value(host, "np", _dtype(node), False)
        info = self._buffer(node.source)
        indices = list(node.indices)
        # An address must be initialised and defined.
        saved = self.defer_poison, self.defer_overflow
        self.defer_poison = self.defer_overflow = False
        try:
            values = [self.visit_expr(i) for i in indices]
        finally:
            self.defer_poison, self.defer_overflow = saved
        info, indices, values = self._vector_lanes_as_axis(info, indices, values)
        self._check_vector_buffer(info, values)
        if self._sanitized(info):
            views = self._checked_views(info, indices, values, masked=True)
            # Under lane masks only the kept lanes' reads must find written elements.
            mask = None if views is None else self._mask_expr(self.lanes.stmt_masks + self.lanes.masks)
            if views is not None and self._defers_poison(info) and self.defer_poison:
                # Into a thread's own memory: never-written lanes are carried, not reported yet.
                return Value(self._call("read_or_taint", *views, _name("race_log"), *([mask] if mask else [])),
                             "np", _dtype(node), True)
            if views is not None:
                keywords = self._name_threads({})
                if self._prefix(info):
                    keywords["lead"] = ast.Constant(len(self._prefix(info)))
                if mask is not None:
                    keywords["mask"] = mask
                return Value(self._call("read_written", *views, ast.Constant(info.name), _name(info.shadow),
                                        kw=keywords), "np", _dtype(node), True)
            logged = self._logged_view_read(info, indices, values)
            if logged is not None:
                return Value(logged, "np", _dtype(node), True)
            # ``access`` returns one value per lane only where lanes, lane indices or masks are involved.
            varying = (_varying(*values) or bool(info.prefix) or info.per_thread or bool(self._logged_lanes())
                       or bool(self.lanes.stmt_masks or self.lanes.masks))
            return Value(self._access_call(info, values, write=False), "np", _dtype(node), varying)
        view = self._lane_view(info, indices, values, gather=True)
        if view is not None:
            return Value(view, "np", _dtype(node), True)
        dtype = _dtype(node)
        varying = _varying(*values) or bool(info.prefix) or info.per_thread
        # Proven in bounds for every lane, masked out or not: a lane-varying condition masks lanes
        # without constraining the analyzer (only scalar branches do, and those all lanes take), and
        # a masked-out lane's value is never used, so it may read any element.
        if self._in_bounds(info, indices):
            return Value(self._subscript(info, indices, values), "np", dtype, varying)
        args = [_name(info.name), ast.Tuple(self._prefix(info) + [v.node for v in values], ast.Load()),
                ast.Constant(info.name)]
        mask = self._mask_expr(self.lanes.stmt_masks + self.lanes.masks)
        if mask is not None:
            args.append(mask)
        return Value(self._call("load", *args, kw=self._bounds_keywords(info)), "np", dtype,
                     varying or bool(self.lanes.stmt_masks))

    def _bounds_keywords(self, info: _BufferInfo) -> dict:
        """The keywords of ``load``/``store`` that name the element and the thread in errors."""
        keywords = self._name_threads({})
        if self._prefix(info):
            keywords["lead"] = ast.Constant(len(self._prefix(info)))
        return keywords

    def visit_BufferStore(self, node) -> list[ast.stmt]:
        host = self._host_access(node, "writes")
        if host is not None:
            return [ast.Expr(host)]
        info = self._buffer(node.buffer)
        indices = list(node.indices)
        values = [self.visit_expr(i) for i in indices]
        info, indices, values = self._vector_lanes_as_axis(info, indices, values)
        self._check_vector_buffer(info, values)
        if (self.scope.overlapping and _varying(*values)
                and self.scope.storage_roots.get(_key(node.buffer), _key(node.buffer)) in self.scope.overlapping):
            # Lanes writing one element through two indices: which write lands last is the loop's order.
            raise _CannotVectorize(f"store into {info.name}, a buffer whose strides reach an element twice")
        saved_defer = self.defer_poison, self.defer_overflow
        self.defer_poison, self.defer_overflow = self._defers_poison(info), self._defers_overflow(info)
        self.overflow_deferred = False
        self._note_truncated(node.value)
        try:
            stored = self.visit_expr(node.value)
        finally:
            self.defer_poison, self.defer_overflow = saved_defer
        value = stored.node
        lanes = _lanes(info.dtype)
        if lanes > 1 < _lanes(_dtype(node.value)) // lanes:
            # All lanes of several vectors (float32x16 into ``A[i:i + 4]`` of float32x4): a row per vector.
            value = ast.Call(_np("reshape"), [value, ast.Tuple([ast.Constant(-1), ast.Constant(lanes)],
                                                                    ast.Load())], [])
        sanitized = self._sanitized(info)
        if (stored.varying and self.lanes.axes and not _varying(*values) and not info.prefix and not info.per_thread
                and not sanitized):
            # Every lane writes this one element (a race between threads): the last lane's value is
            # one valid outcome.  (The sanitizer reports it as a race.)
            mask = self._mask_expr(self.lanes.stmt_masks)
            value = self._call("last_lane", value, ast.Constant(_lanes(_dtype(node.value)) > 1),
                               *([mask] if mask is not None else []))
        elif stored.varying and self.lanes.axes and not info.per_thread and (
                (not info.prefix and not sanitized) or (sanitized and info.own_copy_axes)):
            # Lanes whose index does not move along some lane axis (``S[ty] = v`` by every
            # threadIdx.x) write one element each along it: the last writer's value there.
            # (A lane variable the value names and the index does not, or a thread's own register
            # read into the value: checked against the index at run time.)  Under the sanitizers
            # (which report the race) only along lanes proven to write one copy alike.
            in_index = {n.id for v in values for n in ast.walk(v.node) if isinstance(n, ast.Name)}
            unnamed = self._alike_axes(info, in_index)
            if not sanitized:
                in_value = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
                registers = any(b.per_thread and b.name in in_value for b in self.scope.buffers.values())
                named = [ax.axis for ax in self.lanes.axes if ax.name not in in_index
                         and (ax.name in in_value or (registers and ax.is_thread))]
                unnamed = named + [a for a in unnamed if a not in named]
            if unnamed:
                mask = self._mask_expr(self.lanes.stmt_masks)
                value = self._call("last_lane_along", value, ast.Tuple([v.node for v in values], ast.Load()),
                                   ast.Tuple([ast.Constant(a) for a in unnamed], ast.Load()),
                                   ast.Constant(_lanes(_dtype(node.value)) > 1), *([mask] if mask is not None else []))
        try:
            out = self._store(info, indices, values, value)
        finally:
            self.overflow_deferred = False
        if self._sanitized(info) and self._statement_records(info):
            out.insert(0, ast.Expr(ast.Call(ast.Attribute(_name("race_log"), "new_statement", ast.Load()), [], [])))
        return out

    def _alike_axes(self, info: _BufferInfo, in_index: set) -> list[int]:
        """The lane axes along which one copy of the buffer serves lanes that the plan proved to write
        it alike and that its index does not name (``in_index``: the names in the index).  A value
        stored there may still move along them in form: it reads another buffer's per-lane copies,
        directly or through a ``let`` (i206's group norm: a one-copy accumulator summing a privatised
        reshape), and one lane's value is every lane's."""
        return [ax.axis for ax in self.lanes.axes if ax.var is not None and _key(ax.var) in info.own_copy_axes
                and ax.name not in in_index]

    def _store(self, info: _BufferInfo, indices, values: list[Value], value: ast.expr) -> list[ast.stmt]:
        """``buffer[indices] = value`` by the access rules: sanitizer, lane view, proven subscript or
        bounds-checked (and lane-masked) ``store``."""
        if self._sanitized(info):
            # A value that may carry overflow poison goes through ``access``, which taints the marks.
            views = None if self.overflow_deferred else self._checked_views(info, indices, values, masked=True)
            mask = None if views is None else self._mask_expr(self.lanes.stmt_masks)
            if mask is not None:  # each lane its own element (``_lane_views``): written where kept
                poison = [_name("race_log"), ast.Constant(info.name)] if self._defers_poison(info) else []
                return [ast.Expr(self._call("write_where", *views, value, mask, *poison))]
            if views is not None:
                view, written = views
                store = ast.Assign([ast.Subscript(view, ast.Constant(Ellipsis), ast.Store())], value)
                if self._defers_poison(info):  # the value may carry never-written lanes
                    return [store, ast.Expr(self._call("mark_written", written, _name("race_log"),
                                                       ast.Constant(info.name)))]
                return [store,
                        ast.Assign([ast.Subscript(written, ast.Constant(Ellipsis), ast.Store())], ast.Constant(True))]
            return [ast.Expr(self._access_call(info, values, write=True, value=value))]
        view = self._lane_view(info, indices, values, write=True)
        if view is not None and self.lanes.stmt_masks:  # each lane its own element: written where kept
            where = ast.keyword("where", self._mask_expr(self.lanes.stmt_masks))
            return [ast.Expr(ast.Call(_np("copyto"), [view, value],
                                      [ast.keyword("casting", ast.Constant("unsafe")), where]))]
        if view is not None:
            if (isinstance(value, ast.BinOp) and isinstance(value.op, self.IN_PLACE_OPS)
                    and ast.dump(value.left) == ast.dump(view)):
                # ``X[...] = X + Y`` as ``X += Y``: the same numpy loop, without a temporary and a copy.
                if isinstance(view, ast.Name):
                    return [ast.AugAssign(_store_name(view.id), value.op, value.right)]
                lanes = self.namer.define_name(f"{info.name}_lanes")
                return [ast.Assign([_store_name(lanes)], view),
                        ast.AugAssign(_store_name(lanes), value.op, value.right)]
            return [ast.Assign([ast.Subscript(view, ast.Constant(Ellipsis), ast.Store())], value)]
        if not self.lanes.stmt_masks and self._in_bounds(info, indices):
            target = self._subscript(info, indices, values)
            target.ctx = ast.Store()
            return [ast.Assign([target], value)]
        args = [_name(info.name), ast.Tuple(self._prefix(info) + [v.node for v in values], ast.Load()), value,
                ast.Constant(info.name)]
        if self.lanes.stmt_masks:
            args.append(self._mask_expr(self.lanes.stmt_masks))
        return [ast.Expr(self._call("store", *args, kw=self._bounds_keywords(info)))]

    def _assign_element(self, load, value: ast.expr) -> list[ast.stmt]:
        """``buffer[indices] = value`` for the element ``load`` names."""
        info = self._buffer(load.source)
        indices = list(load.indices)
        return self._store(info, indices, [self.visit_expr(i) for i in indices], value)

    def _masked_store(self, args) -> list[ast.stmt]:
        """``masked_store(buffer, value, *indices, mask)``: the lanes where ``mask`` holds are written."""
        info = self._buffer(args[0])
        indices = list(args[2:-1])
        values = [self.visit_expr(i) for i in indices]
        value = self.visit_expr(args[1]).node
        self.lanes.stmt_masks.append(self.to_np(self.visit_expr(args[-1])).node)
        try:
            return self._store(info, indices, values, value)
        finally:
            self.lanes.stmt_masks.pop()
