"""Buffers as storage: allocations, declarations and views (decl_buffer, match_buffer, address_of),
strided storage and per-thread copies."""
from __future__ import annotations

import ast

from tvm import tirx
import tvm

from ..errors import UnsupportedConstructError
from .analysis import (FRAGMENT_SCOPES, _contiguous_strides, _injective, launch_extents_touching, match_layout,
                       walk_typed)
from .names import (Value, _BufferInfo, _CannotVectorize, _dtype, _is_zero, _key, _lanes, _name, _scalar_dtype,
    _store_name, _type_key, _varying)


class BuffersMixin:
    """The buffers room of :class:`~.generator.HybridCodegen` (see the module docstring)."""

    def visit_AllocBuffer(self, node) -> list[ast.stmt]:
        buf = node.buffer
        name = self._name_buffer(buf)
        self._declare_buffer(buf, name, strided_ok=True)
        dims = [self.visit_expr(d) for d in buf.shape]
        if _varying(*dims):
            raise _CannotVectorize("allocation whose size differs between iterations")
        scope = str(buf.scope())
        info = self.scope.buffers[_key(buf)]
        # Per-thread memory gets one copy per thread of the block (wherever it is allocated), an
        # allocation inside a loop that runs as lanes one copy per lane; shared memory is one copy.
        info.per_thread = (scope.startswith(("local", *FRAGMENT_SCOPES)) or
                           (scope == "global" and any(ax.is_thread for ax in self.lanes.axes)))
        # A warp's matrix fragments (``wmma.*``, ``metal.simdgroup``, only touched by the loops
        # :mod:`.tensorcore` rewrites their intrinsics into): one copy per warp, its threads
        # computing alike.
        info.per_warp = scope.startswith(FRAGMENT_SCOPES)
        if info.per_warp and launch_extents_touching(self.func.body, buf) - {None, 32}:
            raise UnsupportedConstructError("tensor-core fragment", f"{buf.name} in a block whose threadIdx.x "
                                            f"extent is not one warp (32)")
        # Lanes whose iterations each touch their own elements share one copy (the plan proved it);
        # so do the blocks of a grid that touch a per-block copy apart or write it alike.
        shared = self.plan.shared_lanes(buf)
        private = [ax for ax in self.lanes.axes if not ax.is_thread and not (ax.var is not None and _key(ax.var) in shared)]
        if getattr(node, "per_block", False):
            private = [ax for ax in private if not self._one_copy_serves(buf, ax)]
        info.prefix_axes = [_key(ax.var) if ax.var is not None else None for ax in private]
        info.own_copy_axes = [_key(ax.var) for ax in self.lanes.axes if ax.var is not None and _key(ax.var) in shared]
        info.prefix = [ast.BinOp(_name(ax.name), ast.Sub(), ax.lo)
                       if not (isinstance(ax.lo, ast.Constant) and ax.lo.value == 0) else _name(ax.name)
                       for ax in private]
        lanes_shape = []
        if info.per_thread:
            running = {ax.axis: ax.extent for ax in self.lanes.axes if ax.is_thread}
            if not self.gpu.thread_extents and not running:
                info.per_thread = False
            else:
                for tag, axis in sorted(self.THREAD_AXES.items(), key=lambda kv: kv[1]):
                    # A thread extent known only at run time (a device kernel launched with a
                    # computed block size) is the running threads' own.
                    extent = self.gpu.thread_extents.get(tag)
                    if info.per_warp and tag == "threadIdx.x":
                        extent = 1
                    lanes_shape.append(ast.Constant(extent) if extent is not None
                                       else running.get(axis, ast.Constant(1)))
        self._check_lane_copies(buf, private, lanes_shape + dims)
        # A buffer of vectors (float32x3 after StorageRewrite): each element is a row of lanes.
        vector_lanes = [ast.Constant(_lanes(str(buf.dtype)))] if _lanes(str(buf.dtype)) > 1 else []
        shape = ast.Tuple(lanes_shape + [ax.extent for ax in private] + [d.node for d in dims] + vector_lanes,
                          ast.Load())
        if len(buf.strides) and not _contiguous_strides(buf):
            out = self._strided_alloc(buf, name, lanes_shape + [ax.extent for ax in private], dims)
        else:
            out = [ast.Assign([_store_name(name)],
                              self._call("alloc", shape, ast.Constant(_scalar_dtype(str(buf.dtype)))))]
        if self.check:  # which elements were written: reading any other is reading uninitialised memory
            info.shadow = self.namer.define_name(f"{name}_written")
            out.append(ast.Assign([_store_name(info.shadow)], self._call("alloc", shape, ast.Constant("bool"))))
        elif self.fast and self.serial.frames and self._hoistable_size(shape, buf):
            # A large allocation inside serial loops (dlight's per-thread accumulators before
            # CompactBufferAllocation, moved into the block loop) is made once, in front of them: a
            # fresh copy per iteration differs only where the kernel reads memory it never wrote,
            # which TVM leaves undefined and check=True reports.
            self.serial.frames[0].hoisted.extend(out)
            return []
        return out

    #: Fast mode: allocations of at least this many bytes inside serial loops are made once, in front
    #: of the outermost (1,000 blocks each touching pages of a fresh 512 MiB buffer took 6 minutes).
    HOIST_ALLOCATION_MIN_BYTES = 16 << 20

    def _hoistable_size(self, shape: ast.Tuple, buf) -> bool:
        nbytes = max(tvm.DataType(str(buf.dtype)).bits // 8, 1)
        for dim in shape.elts:
            if not isinstance(dim, ast.Constant):
                return False
            nbytes *= dim.value
        return nbytes >= self.HOIST_ALLOCATION_MIN_BYTES

    def _one_copy_serves(self, buf, axis) -> bool:
        """Whether one copy of ``buf`` serves all the blocks of grid lane ``axis``: they touch it apart
        (no element two of them share) or write it alike (see ``sharing.written_alike``)."""
        proof = self.gpu.block_copies.get(_key(axis.var)) if axis.var is not None else None
        if proof is None:
            return False
        outside, copies = proof
        return _key(buf) in outside and _key(buf) not in copies

    #: Fast mode: the most memory the copies of one allocation made per lane may take; a loop whose
    #: lanes would need more runs serially (one copy at a time), as the compiled kernel does.
    LANE_COPIES_MAX_BYTES = 256 << 20
    #: Sizes only known at run time are not guessed here (a guess refused every symbolic-size dlight
    #: GPU matmul): such copies are allocated, and a MemoryError is the InsufficientMemoryError refusal.
    UNKNOWN_LANES = 1

    def _check_lane_copies(self, buf, private: list, dims: list) -> None:
        if not private:
            return
        nbytes = max(tvm.DataType(str(buf.dtype)).bits // 8, 1) * _lanes(str(buf.dtype))
        for node in [ax.extent if ax.var is None or _key(ax.var) != self.lanes.chunked_var else self.lanes.chunked_extent
                     for ax in private] + [d if isinstance(d, ast.expr) else d.node for d in dims]:
            nbytes *= node.value if isinstance(node, ast.Constant) else self.UNKNOWN_LANES
        if nbytes > self.LANE_COPIES_MAX_BYTES:
            size = f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"
            raise _CannotVectorize(f"one copy of {buf.name} per lane would need {size}", copies=True)

    def _strided_alloc(self, buf, name: str, lead: list, dims: list) -> list[ast.stmt]:
        """An allocation with explicit strides (``storage_align`` pads rows): flat storage of the
        strides' span per copy and a strided view of it with the buffer's shape."""
        if _lanes(str(buf.dtype)) > 1:
            raise UnsupportedConstructError("strided buffer", f"{buf.name} of vectors")
        strides = [self.visit_expr(st) for st in buf.strides]
        if _varying(*strides):
            raise _CannotVectorize("allocation whose strides differ between iterations")
        storage = self.namer.define_name(f"{name}_storage")
        self.scope.strided_storage[_key(buf)] = storage
        self.scope.strided_storage[name] = storage
        span = self._call("strided_span", ast.Tuple([d.node for d in dims], ast.Load()),
                          ast.Tuple([st.node for st in strides], ast.Load()))
        return [ast.Assign([_store_name(storage)], self._call("alloc", ast.Tuple(lead + [span], ast.Load()),
                                                              ast.Constant(str(buf.dtype)))),
                ast.Assign([_store_name(name)], self._call(
                    "strided", _name(storage), ast.Tuple([d.node for d in dims], ast.Load()),
                    ast.Tuple([st.node for st in strides], ast.Load())))]

    def _name_buffer(self, buf) -> str:
        """A fresh name for ``buf``; an unnamed one (``SplitHostDevice``'s local pointers) is ``buffer``,
        ``buffer_1``..., as TVMScript prints it."""
        return self.namer.define(buf, buf.name or "buffer")

    def _declare_buffer(self, buf, name: str, strided_ok: bool = False) -> None:
        if len(buf.strides) and not _contiguous_strides(buf) and not strided_ok:
            raise UnsupportedConstructError("strided buffer", str(buf.name))
        self.scope.buffers[_key(buf)] = _BufferInfo(name, list(buf.shape), str(buf.dtype), scope=str(buf.scope()))

    def visit_DeclBuffer(self, node) -> list[ast.stmt]:
        buf = node.buffer
        data = node.data
        if data is not None and _type_key(data) == "ir.Var" and _key(data) in self.scope.address_binds:
            data = self.scope.address_binds[_key(data)]  # a pointer bound to address_of(A[...])
        if data is not None and _type_key(data) == "ir.Var" and _dtype(data) == "handle":
            storage = self.visit_expr(data)
            name = self._name_buffer(buf)
            self._declare_buffer(buf, name)
            offset = self.visit_expr(buf.elem_offset) if buf.elem_offset is not None else Value(
                ast.Constant(0), "py", "int32")
            value = self._view_call(storage.node, str(buf.dtype), self._view_shape(buf, storage.node, offset.node),
                                    offset.node)
            # The host may pass one array as two pointers: the race log matches them by memory.
            return [ast.Assign([_store_name(name)], value)] + self._race_alias(buf, name, str(buf.dtype))
        if (data is not None and _type_key(data) == "ir.Call" and data.op.name == "tirx.address_of"
                and _type_key(data.args[0]) == "ir.TensorLoad"):
            return self._address_view(buf, data.args[0])
        if data is None or _type_key(data) != "ir.Call" or data.op.name != "tirx.buffer_data":
            raise UnsupportedConstructError("tirx.DeclBuffer", f"{buf.name} over data {data}")
        source = self._buffer(data.args[0])
        strided = len(buf.strides) and not _contiguous_strides(buf)
        if source.prefix and not source.per_thread and strided:  # per fast-mode lane: run the loop serially
            raise _CannotVectorize(f"strided view {buf.name} of per-lane buffer {source.name}")
        if source.per_thread or source.prefix:
            return self._per_thread_view(buf, data.args[0], source)
        if strided:
            return self._strided_view(buf, data.args[0], source)
        name = self._name_buffer(buf)
        self._declare_buffer(buf, name)
        self.scope.storage_roots[_key(buf)] = self.scope.storage_roots.get(_key(data.args[0]), _key(data.args[0]))
        shape_values = [self.visit_expr(d) for d in buf.shape]
        offset = buf.elem_offset
        offset_value = self.visit_expr(offset) if offset is not None else Value(ast.Constant(0), "py", "int32")
        if _varying(offset_value, *shape_values):
            raise _CannotVectorize("buffer view that differs between iterations")
        shape_nodes = [v.node for v in shape_values]
        vector_lanes = [ast.Constant(_lanes(source.dtype))] if _lanes(source.dtype) > 1 else []
        # A strided source (a strided allocation or parameter) is addressed through its storage.
        storage = self.scope.strided_storage.get(_key(data.args[0]))
        if (storage is None and str(buf.dtype) == source.dtype and _is_zero(offset)
                and self._same_size(buf.shape, source.shape)):
            value = ast.Call(ast.Attribute(_name(source.name), "reshape", ast.Load()), shape_nodes + vector_lanes, [])
        else:
            value = self._view_call(_name(storage or source.name), str(buf.dtype), shape_nodes, offset_value.node,
                                    to_end=len(shape_nodes) == 1)
        out = [ast.Assign([_store_name(name)], value)]
        out += self._race_alias(buf, name, source.dtype, source.name)
        if source.shadow is not None and str(buf.dtype) == source.dtype:
            info = self.scope.buffers[_key(buf)]
            info.shadow = self.namer.define_name(f"{name}_written")
            marks = "bool" if _lanes(source.dtype) == 1 else f"boolx{_lanes(source.dtype)}"
            out.append(ast.Assign([_store_name(info.shadow)], self._view_call(
                _name(source.shadow), marks, shape_nodes, offset_value.node, to_end=len(shape_nodes) == 1)))
        return out

    def _strided_view(self, buf, source_buf, source: _BufferInfo) -> list[ast.stmt]:
        """A buffer declared with explicit strides over another buffer's data (``decl_buffer([4, 16],
        data=B.data, strides=[17, 1])``): element ``(i, j)`` is element ``elem_offset + i * s0 + j * s1``
        of that data, a strided view of the source's storage.  Its own storage (what ``buffer_data``
        of it and views of it address) is the source's, from the data pointer on."""
        if _lanes(str(buf.dtype)) > 1 or _lanes(source.dtype) > 1:
            raise UnsupportedConstructError("strided buffer", f"{buf.name} of vectors")
        source_storage = self.scope.strided_storage.get(_key(source_buf))
        if source.shadow is not None and (source_storage is not None or str(buf.dtype) != source.dtype):
            # A strided allocation's written-marks have its shape, not its storage's layout.
            raise UnsupportedConstructError("strided buffer", f"{buf.name} over {source.name} under the sanitizers")
        shape_values = [self.visit_expr(d) for d in buf.shape]
        stride_values = [self.visit_expr(st) for st in buf.strides]
        offset_value = (self.visit_expr(buf.elem_offset) if buf.elem_offset is not None
                        else Value(ast.Constant(0), "py", "int32"))
        if _varying(offset_value, *shape_values, *stride_values):
            raise _CannotVectorize("buffer view that differs between iterations")
        name = self._name_buffer(buf)
        self._declare_buffer(buf, name, strided_ok=True)
        root = self.scope.storage_roots.get(_key(source_buf), _key(source_buf))
        self.scope.storage_roots[_key(buf)] = root
        constant = [_type_key(e) == "ir.IntImm" for e in list(buf.shape) + list(buf.strides)]
        if not all(constant) or not _injective([int(d.value) for d in buf.shape], [int(st.value) for st in buf.strides]):
            self.scope.overlapping.add(root)  # indices that reach one element twice: stores keep the loop's order
        storage = self.namer.define_name(f"{name}_storage")
        self.scope.strided_storage[_key(buf)] = storage
        self.scope.strided_storage[name] = storage
        dtype = str(buf.dtype)
        shape = ast.Tuple([v.node for v in shape_values], ast.Load())
        strides = ast.Tuple([v.node for v in stride_values], ast.Load())
        out = [ast.Assign([_store_name(storage)], self._call(
                   "flat_view", _name(source_storage or source.name), ast.Constant(dtype), ast.Constant(0),
                   ast.Constant(0))),
               ast.Assign([_store_name(name)], self._call("strided_view", _name(storage), ast.Constant(dtype), shape,
                                                          strides, offset_value.node))]
        out += self._race_alias(buf, name, source.dtype, source.name)
        if source.shadow is not None:
            info = self.scope.buffers[_key(buf)]
            info.shadow = self.namer.define_name(f"{name}_written")
            out.append(ast.Assign([_store_name(info.shadow)], self._call(
                "strided_view", _name(source.shadow), ast.Constant("bool"), shape, strides, offset_value.node)))
        return out

    def _address_view(self, buf, load) -> list[ast.stmt]:
        """A buffer declared at the address of an element (``data=T.address_of(A[i, 0])``): a view of
        the element's storage from that element on."""
        source = self._buffer(load.source)
        if source.prefix or source.per_thread or source.name in self.scope.strided_storage:
            raise UnsupportedConstructError("tirx.DeclBuffer", f"{buf.name} at an address in {source.name}")
        if str(buf.dtype) != source.dtype or _lanes(source.dtype) > 1 or _lanes(_dtype(load)) > 1:
            raise UnsupportedConstructError("tirx.DeclBuffer", f"{buf.name} of another dtype at an address in "
                                                                f"{source.name}")
        flat = tirx.const(0, _dtype(load.indices[0]))
        for idx, dim in zip(load.indices, load.source.shape):
            flat = flat * dim + idx
        if not _is_zero(buf.elem_offset):
            flat = flat + buf.elem_offset
        offset = self.visit_expr(tvm.sym.Analyzer().simplify(flat))
        shape_values = [self.visit_expr(d) for d in buf.shape]
        if _varying(offset, *shape_values):
            raise _CannotVectorize("buffer view that differs between iterations")
        name = self._name_buffer(buf)
        self._declare_buffer(buf, name)
        root = _key(load.source)
        self.scope.storage_roots[_key(buf)] = self.scope.storage_roots.get(root, root)
        storage = ast.Call(ast.Attribute(_name(source.name), "reshape", ast.Load()), [ast.Constant(-1)], [])
        shape_nodes = [v.node for v in shape_values]
        out = [ast.Assign([_store_name(name)], self._view_call(storage, str(buf.dtype), shape_nodes, offset.node,
                                                               to_end=len(shape_nodes) == 1))]
        out += self._race_alias(buf, name, source.dtype, source.name)
        if source.shadow is not None:
            info = self.scope.buffers[_key(buf)]
            info.shadow = self.namer.define_name(f"{name}_written")
            marks = ast.Call(ast.Attribute(_name(source.shadow), "reshape", ast.Load()), [ast.Constant(-1)], [])
            out.append(ast.Assign([_store_name(info.shadow)], self._view_call(
                marks, "bool", shape_nodes, offset.node, to_end=len(shape_nodes) == 1)))
        return out

    def _per_thread_view(self, buf, source_buf, source: _BufferInfo) -> list[ast.stmt]:
        """A view of per-thread memory or of an allocation with a copy per fast-mode lane
        (``StorageRewrite`` declares them): the same view of every copy, so it is per-thread or
        per-lane memory too."""
        shape_values = [self.visit_expr(d) for d in buf.shape]
        offset_value = (self.visit_expr(buf.elem_offset) if buf.elem_offset is not None
                        else Value(ast.Constant(0), "py", "int32"))
        if _varying(offset_value, *shape_values):
            if not source.per_thread:  # the lanes' views differ: run the loop serially
                raise _CannotVectorize(f"view {buf.name} of per-lane buffer {source.name} that differs between lanes")
            raise UnsupportedConstructError("tirx.DeclBuffer", f"view {buf.name} that differs between threads")
        name = self._name_buffer(buf)
        self._declare_buffer(buf, name)
        self.scope.storage_roots[_key(buf)] = self.scope.storage_roots.get(_key(source_buf), _key(source_buf))
        info = self.scope.buffers[_key(buf)]
        info.per_thread, info.prefix, info.prefix_axes = source.per_thread, list(source.prefix), list(source.prefix_axes)
        info.per_warp = source.per_warp
        lead = ast.Constant((len(self.THREAD_AXES) if source.per_thread else 0) + len(source.prefix))
        dtype, shape_nodes, offset = str(buf.dtype), [v.node for v in shape_values], offset_value.node
        if _lanes(dtype) > 1:
            shape_nodes = shape_nodes + [ast.Constant(_lanes(dtype))]
            offset = ast.BinOp(offset, ast.Mult(), ast.Constant(_lanes(dtype)))
        # A flat view reaches to the end of each copy, as ``_view_call``'s flat views do.
        to_end = {"to_end": ast.Constant(True)} if len(shape_nodes) == 1 else None
        out = [ast.Assign([_store_name(name)], self._call(
            "rows_view", _name(source.name), lead, ast.Constant(_scalar_dtype(dtype)),
            ast.Tuple(shape_nodes, ast.Load()), offset, kw=to_end))]
        if source.shadow is not None and dtype == source.dtype:
            info.shadow = self.namer.define_name(f"{name}_written")
            out.append(ast.Assign([_store_name(info.shadow)], self._call(
                "rows_view", _name(source.shadow), lead, ast.Constant("bool"), ast.Tuple(shape_nodes, ast.Load()),
                offset, kw=to_end)))
        return out

    def _race_alias(self, buf, name: str, source_dtype: str, source: str | None = None) -> list[ast.stmt]:
        """Sanitizer: ``race_log.alias(...)`` for a view ``name`` of ``source``'s memory (without
        ``source``, a buffer over a pointer parameter: ``alias_pointer``), so that races between two
        names of one memory are seen: the race records are kept per name.  Buffers of vectors keep
        their own records."""
        if not self.check or _lanes(str(buf.dtype)) > 1 or _lanes(source_dtype) > 1:
            return []
        if source is None:
            method, args = "alias_pointer", [ast.Constant(name), _name(name)]
        else:
            method, args = "alias", [ast.Constant(name), ast.Constant(source), _name(name), _name(source)]
        return [ast.Expr(ast.Call(ast.Attribute(_name("race_log"), method, ast.Load()), args, []))]

    def _view_call(self, storage: ast.expr, dtype: str, shape_nodes: list, offset: ast.expr,
                   to_end: bool = False) -> ast.expr:
        """``view(storage, ...)`` of a buffer declared over existing storage; a buffer of vectors
        (``float32x16``) is a view of scalars with the lanes as its last axis.  A flat view
        (``to_end``) reaches to the end of its storage: the bounds of an access belong to the
        allocation (``StorageRewrite`` merges allocations and indexes past a view's declared size)."""
        lanes = _lanes(dtype)
        if to_end and lanes == 1:
            return self._call("flat_view", storage, ast.Constant(dtype), shape_nodes[0], offset)
        if lanes > 1:
            shape_nodes = list(shape_nodes) + [ast.Constant(lanes)]
            offset = ast.BinOp(offset, ast.Mult(), ast.Constant(lanes))
        return self._call("view", storage, ast.Constant(_scalar_dtype(dtype)), ast.Tuple(shape_nodes, ast.Load()),
                          offset)

    def _view_shape(self, buf, storage: ast.expr, offset: ast.expr) -> list[ast.expr]:
        """The dimensions of a view over a kernel's pointer parameter.  After SplitHostDevice a
        device kernel may declare a size it is not passed (``reshape1 = T.decl_buffer((cse_v2,),
        data=reshape1_ptr)`` with ``cse_v2`` free): a size used only in the declaration needs no
        value, the storage the host passes has exactly that size, so the dimension is derived from it."""
        free = [self._has_free_var(d) for d in buf.shape]
        if sum(free) != 1:
            return [self.visit_expr(d).node for d in buf.shape]  # none free, or too many to derive
        dims = [None if f else self.visit_expr(d).node for d, f in zip(buf.shape, free)]
        known = [d for d in dims if d is not None]
        derived = self._call("storage_extent", storage, ast.Constant(str(buf.dtype)), offset,
                             ast.Tuple(known, ast.Load()))
        return [derived if d is None else d for d in dims]

    def _has_free_var(self, expr) -> bool:
        found = []
        walk_typed(expr, ("ir.Var",), lambda n: found.append(_type_key(n) == "ir.Var" and self.namer.lookup(n) is None))
        return any(found)

    def _same_size(self, shape_a, shape_b) -> bool:
        prod_a = 1
        for d in shape_a:
            prod_a = prod_a * d
        prod_b = 1
        for d in shape_b:
            prod_b = prod_b * d
        try:
            return bool(self.analyzer.can_prove_equal(prod_a, prod_b))
        except Exception:
            return False

    def _match_buffer(self, match) -> list[ast.stmt]:
        """``match_buffer(region, shape)``: a numpy view of the region.  As TVM's LowerMatchBuffer does, a
        buffer of fewer dimensions than its region takes the region's last ones (``A[i, 0:16, 0:16]``
        as a (16, 16) buffer, ``A[i, j]`` as a rank-0 one); the leading ones must have extent 1."""
        buf = match.buffer
        region = match.source
        source = self._buffer(region.source)
        ranges = list(region.region)
        lead = len(ranges) - len(buf.shape)
        if lead < 0:
            raise UnsupportedConstructError("s_tir.MatchBufferRegion", f"{buf.name} has more dimensions than its "
                                            f"region (TVM's LowerMatchBuffer lowers only fewer or as many)")
        for r in ranges[:lead]:
            if not self.analyzer.can_prove_equal(r.extent, 1):
                raise UnsupportedConstructError("s_tir.MatchBufferRegion", f"{buf.name} drops a dimension of its "
                                                f"region whose extent is not 1")
        name = self._name_buffer(buf)
        self._declare_buffer(buf, name, strided_ok=True)  # a slice keeps its source's layout
        self.scope.buffers[_key(buf)].sliced = True
        layout = self._match_layout(buf, region, source)
        subscripts = []
        for axis, r in enumerate(ranges):
            lo = self.visit_expr(r.min)
            if axis < lead:  # a dropped dimension: its one index
                if lo.varying:
                    raise _CannotVectorize("match_buffer region that differs between iterations")
                subscripts.append(lo.node)
                continue
            hi = self.visit_expr(tvm.sym.Analyzer().simplify(r.min + r.extent))
            if _varying(lo, hi):
                raise _CannotVectorize("match_buffer region that differs between iterations")
            subscripts.append(ast.Slice(lo.node, hi.node, None))
        if lead == len(ranges):
            subscripts.append(ast.Constant(Ellipsis))  # a 0-d view, not a copy of the element
        value = ast.Subscript(_name(source.name), ast.Tuple(subscripts, ast.Load()), ast.Load())
        return layout + [ast.Assign([_store_name(name)], value)]

    def _match_layout(self, buf, region, source: _BufferInfo) -> list[ast.stmt]:
        """A match_buffer's ``elem_offset`` and strides that are variables (``offset_factor``,
        tensor intrinsics' ``strides=[s0, s1]``) take the region's place in its source's layout
        (row-major, or the allocation's explicit strides); constant ones are refused unless they
        are that layout."""
        out = []
        simplify = tvm.sym.Analyzer().simplify
        for var, value in match_layout(buf, region):
            if var is None or (_is_zero(var) and _is_zero(simplify(value))):
                continue
            if _type_key(var) == "ir.Var" and self.namer.lookup(var) is None:
                node = self.visit_expr(simplify(value))
                if node.varying:
                    raise _CannotVectorize("match_buffer region that differs between iterations")
                out.append(ast.Assign([_store_name(self.namer.define(var, var.name))], node.node))
                self.scope.var_kinds[_key(var)] = ("py", _dtype(var), False)
            elif not self.analyzer.can_prove_equal(var, value):
                raise UnsupportedConstructError("s_tir.MatchBufferRegion", f"{buf.name}: layout of its region")
        return out
