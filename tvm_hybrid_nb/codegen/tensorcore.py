"""Warp matrix intrinsics (CUDA's tensor-core WMMA, Metal's simdgroup matrices) as the loads,
multiply-adds and stores they perform (TIR to TIR).

dlight's ``Matmul`` rule tensorizes a float16 or int8 matmul for cuda from sm_70 on when no fixed
extent is 64 or less (a symbolic sequence length, a 128-wide layer): its kernels move 16x16 tiles
with ``tvm_load_matrix_sync``, multiply them with ``tvm_mma_sync`` and write them back with
``tvm_store_matrix_sync``, warp by warp.  For metal the same rule tries ``MetalMatmul`` first, which
tensorizes every float16 matmul into Metal's 8x8 simdgroup matrices (``make_filled_simdgroup_matrix``,
``simdgroup_load``, ``simdgroup_multiply_accumulate``, ``simdgroup_store``; a transposed load or
store is WMMA's ``col_major``).  :func:`wmma_as_computed` rewrites each call into the loop nest of
loads and stores it means, so that the emulator (lanes, per-thread memory, sanitizers) handles it
as any other code:

- A fragment buffer (scope ``wmma.matrix_a``, ``wmma.matrix_b``, ``wmma.accumulator``,
  ``metal.simdgroup``) is an array of fragments; the call's index picks fragment ``index``,
  elements ``[index * size, (index + 1) * size)`` of the buffer in row-major order, holding its
  matrix (``m x k``, ``k x n``, ``m x n``) row by row.  Only these intrinsics touch fragments, so that layout is the emulator's own choice.
  Fragments belong to a warp; the emulator gives every thread its copy (as ``local`` memory), and
  each thread of the warp performs the warp's operation on its own copy, with the same result.
- ``load``/``store``: element ``(r, c)`` of the matrix is at ``pointer[r * ldm + c]`` (``row_major``)
  or ``pointer[c * ldm + r]`` (``col_major``), the pointer a ``tvm_access_ptr`` into a buffer.  A
  store's nest is marked (:data:`WARP_STORE_ATTR`) for the race sanitizer.
- ``mma``: ``D = A @ B + C``, each element summed in ``k`` order: for int8 in int32 (exact, wrapping);
  for float16 (and bfloat16) in float32 (products of float16 are exact there) and rounded once to
  the accumulator's dtype.  The hardware does not specify its float accumulation order or internal
  precision, so a float ``mma_sync`` or ``simdgroup_multiply_accumulate`` is exact to this order,
  not bit-exact to every GPU (:data:`FLOAT_MMA_NOTE`).

Before ``LowerMatchBuffer`` the calls address their fragments and tiles through ``match_buffer``
views of a block (``C.data``, ``C.elem_offset // C.strides[0] // 16 * ...``): the views' layout
variables are replaced by the region's offset and strides in its source, and the views dropped.
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import tirx

from ..errors import UnsupportedConstructError
from .analysis import buffer_strides, match_layout, walk_typed
from .names import _buffer_of, _key, _type_key

#: The WMMA intrinsics (``tirx.`` op names) and what :func:`wmma_as_computed` makes of them.
WMMA_CALLS = ("tirx.tvm_fill_fragment", "tirx.tvm_load_matrix_sync", "tirx.tvm_store_matrix_sync",
              "tirx.tvm_mma_sync")
#: Metal's simdgroup matrix intrinsics, rewritten alike.
SIMDGROUP_CALLS = ("tirx.make_filled_simdgroup_matrix", "tirx.simdgroup_load", "tirx.simdgroup_store",
                   "tirx.simdgroup_multiply_accumulate")
MATRIX_CALLS = WMMA_CALLS + SIMDGROUP_CALLS
#: The multiply-adds: ``(d, d_index, a, a_index, b, b_index, c, c_index)`` in both.
MMA_CALLS = ("tirx.tvm_mma_sync", "tirx.simdgroup_multiply_accumulate")
SIMDGROUP_SCOPE = "metal.simdgroup"

#: The ``AttrStmt`` key around the loop nest of a warp's store of a fragment into memory: the warp
#: stores the tile together, each element by one of its lanes (which one is unspecified), so the race
#: sanitizer records the tile as written by the warp, no thread of it (``access(warp_store=True)``),
#: not by every lane that runs the nest: a lane reading the tile back needs a barrier first.
WARP_STORE_ATTR = "tvm_hybrid_nb.warp_store"

#: The attribute :func:`wmma_as_computed` puts on a function whose float fragments it multiplies.
FLOAT_MMA_ATTR = "tvm_hybrid_nb.float_mma"

#: Said wherever a float ``tvm_mma_sync`` or ``simdgroup_multiply_accumulate`` is emulated (the
#: generated script's header).
FLOAT_MMA_NOTE = ("tensor-core mma_sync (Metal: simdgroup_multiply_accumulate) on floats is summed in k order "
                  "in float32 and rounded once to the accumulator's dtype: the GPU does not specify its own "
                  "order, so results may differ from a GPU in the last bits")

_INDEX = "int64"


def has_wmma(func) -> bool:
    """Whether ``func`` calls a warp matrix intrinsic (:data:`MATRIX_CALLS`)."""
    found = []

    def visit(node):
        if not found and _type_key(node) == "ir.Call" and getattr(node.op, "name", "") in MATRIX_CALLS:
            found.append(node)
        return True

    walk_typed(func.body, ("ir.Call",), visit)
    return bool(found)


def _i(expr):
    """``expr`` as an index of :data:`_INDEX` dtype."""
    if isinstance(expr, int):
        return tirx.const(expr, _INDEX)
    return expr if str(expr.ty) == _INDEX else tirx.Cast(_INDEX, expr)


def _int(expr, what: str, call: str = "tirx.tvm_mma_sync") -> int:
    if _type_key(expr) != "ir.IntImm":
        raise UnsupportedConstructError(call, f"{what} {expr} that is not a constant")
    return int(expr.value)


def _strides(buf) -> list:
    return [_i(stride) for stride in buffer_strides(buf)]


def _element(buf, flat):
    """The indices of the element at ``flat`` elements from ``buf``'s data (its ``elem_offset``
    included): ``flat`` taken apart by the buffer's strides, outermost first."""
    offset = buf.elem_offset
    if offset is not None and not (_type_key(offset) == "ir.IntImm" and int(offset.value) == 0):
        flat = flat - _i(offset)
    strides = _strides(buf)
    indices = []
    for axis, stride in enumerate(strides):
        if axis == 0:
            indices.append(tirx.floordiv(flat, stride))
        else:
            indices.append(tirx.floordiv(tirx.floormod(flat, strides[axis - 1]), stride))
    return indices


def _tile_element(buf, base, ldm, r, c):
    """The indices of element ``(r, c)`` of the matrix at ``base`` elements from ``buf``'s data,
    ``ldm`` elements a row.  Where ``ldm`` is the buffer's row stride, the element is ``r`` rows and
    ``c`` columns from the one at ``base`` (a tile does not wrap a row): indices affine in ``r`` and
    ``c``, so that the emulator sees the elements of a tile apart; else ``base + r * ldm + c`` taken
    apart by the buffer's strides."""
    strides = _strides(buf)
    analyzer = tvm.sym.Analyzer()
    if len(strides) == 1 and analyzer.can_prove_equal(strides[0], 1):
        return [_element(buf, base)[0] + r * ldm + c]
    if (len(strides) >= 2 and analyzer.can_prove_equal(strides[-1], 1)
            and analyzer.can_prove_equal(strides[-2], ldm)):
        at = _element(buf, base)
        return at[:-2] + [at[-2] + r, at[-1] + c]
    return _element(buf, base + r * ldm + c)


class _Rewriter:
    """One function's rewrite (see the module docstring)."""

    def __init__(self, func):
        self.func = func
        #: match_buffer views by key: their source buffer.
        self.matches: dict[int, object] = {}
        #: layout variable (elem_offset, strides) of a view -> its value in the source.
        self.layout: dict[int, object] = {}
        #: Views the rewritten calls used (dropped from their blocks).
        self.used: set[int] = set()
        #: The fragment buffers' matrix shapes (by key), from every call that fills, loads or stores one.
        self.shapes: dict[int, set] = {}
        #: Whether the function multiplies float fragments (see :data:`FLOAT_MMA_NOTE`).
        self.float_mma = False
        self.counter = 0
        self.family = "wmma"
        self.calls: list = []
        tvm_ffi.structural_walk(func.body, self._collect, order="post")
        for call in self.calls:  # after the walk: the views of every block are known
            if call.op.name in MMA_CALLS:
                a = _buffer_of(call.args[2])
                self.float_mma |= a is not None and "float" in str(a.dtype)
                continue
            frag = _buffer_of(call.args[0])
            if frag is not None:
                frag = self.matches.get(_key(frag), frag)
                if call.op.name in SIMDGROUP_CALLS:
                    shape = self.simdgroup_shape(frag, call)
                else:
                    shape = self.fragment_shape(frag, *(_int(x, "fragment size") for x in call.args[1:4]))
                self.shapes.setdefault(_key(frag), set()).add(shape)

    def _collect(self, node):
        if _type_key(node) == "ir.Call" and getattr(node.op, "name", "") in MATRIX_CALLS:
            self.calls.append(node)
        if _type_key(node) != "s_tir.SBlock":
            return True
        for match in node.match_buffers:
            self.matches[_key(match.buffer)] = match.source.source
            for var, value in match_layout(match.buffer, match.source):
                if var is not None and _type_key(var) == "ir.Var":  # in the variable's own dtype
                    self.layout[_key(var)] = value if str(value.ty) == str(var.ty) else tirx.Cast(str(var.ty), value)
        return True

    # ------------------------------------------------------------------ operands
    def buffer(self, data, call: str):
        """The buffer whose memory ``data`` (``B.data``) is; a view's is its source's (the offsets
        and fragment indices the calls take are computed from the view's ``elem_offset``, its place
        in the source)."""
        buf = _buffer_of(data)
        if buf is None:
            raise UnsupportedConstructError(call, f"on a pointer {data} that is not a buffer's data")
        source = self.matches.get(_key(buf))
        if source is not None:
            self.used.add(_key(buf))
            return source
        return buf

    def value(self, expr):
        """``expr`` with the layout variables of match_buffer views replaced by their values."""
        if not self.layout:
            return expr
        return tvm_ffi.structural_map(expr, (tvm.ir.Var, lambda v: self.layout.get(_key(v), v)))

    def pointer(self, ptr, call: str):
        """``(buffer, flat offset)`` of ``tvm_access_ptr(type, B.data, offset, extent, rw)``."""
        if not (_type_key(ptr) == "ir.Call" and getattr(ptr.op, "name", "") == "tirx.tvm_access_ptr"):
            raise UnsupportedConstructError(call, f"with a pointer {ptr} that is not a tvm_access_ptr")
        buf = self.buffer(ptr.args[1], call)
        dtype = str(ptr.args[0].ty)
        if dtype != str(buf.dtype):
            raise UnsupportedConstructError(call, f"on {dtype} elements of a {buf.dtype} buffer {buf.name}")
        return buf, _i(self.value(ptr.args[2]))

    def loop(self, name: str, extent: int, body_of):
        self.counter += 1
        var = tirx.Var(f"{self.family}_{name}{self.counter}", _INDEX)
        return tirx.For(var, tirx.const(0, _INDEX), tirx.const(extent, _INDEX), tirx.ForKind.SERIAL, body_of(var))

    # ------------------------------------------------------------------ the calls
    @staticmethod
    def fragment_shape(buf, m: int, n: int, k: int) -> tuple[int, int]:
        scope = str(buf.scope())
        shapes = {"wmma.matrix_a": (m, k), "wmma.matrix_b": (k, n), "wmma.accumulator": (m, n)}
        if scope not in shapes:
            raise UnsupportedConstructError("tirx.tvm_mma_sync", f"fragment {buf.name} in scope {scope!r}")
        return shapes[scope]

    @staticmethod
    def simdgroup_shape(buf, call) -> tuple[int, int]:
        """A Metal fill, load or store's matrix: ``col`` rows of ``row`` elements (as TVM's
        ``get_simdgroup_index`` counts them), 8x8 the only one Metal has."""
        name = call.op.name
        sizes = call.args[3:5] if name == "tirx.make_filled_simdgroup_matrix" else call.args[4:6]
        col, row = (_int(x, "matrix size", name) for x in sizes)
        if str(buf.scope()) != SIMDGROUP_SCOPE:
            raise UnsupportedConstructError(name, f"on {buf.name} in scope {buf.scope()!r}")
        if (col, row) != (8, 8):
            raise UnsupportedConstructError(name, f"of a {col}x{row} matrix (Metal has 8x8 ones only)")
        return col, row

    def slot(self, frag, index, rows: int, cols: int, r, c):
        """The element ``(r, c)`` of fragment ``index`` of ``frag``.  A buffer whose last two
        dimensions hold whole tiles (provably multiples of the tile) is a grid of tiles, its leading
        dimensions' rows one after another, numbered row-major: tile ``index`` is the tile of the
        region that TVM computes the index from (``elem_offset // stride // 16 * ...``).  A flat
        buffer holds fragment ``index`` in elements ``[index * size, (index + 1) * size)``, row by row."""
        index = _i(index)
        shape = list(frag.shape)
        analyzer = tvm.sym.Analyzer()
        if (len(shape) >= 2 and not len(frag.strides)
                and analyzer.can_prove(tirx.floormod(_i(shape[-2]), rows) == 0)
                and analyzer.can_prove(tirx.floormod(_i(shape[-1]), cols) == 0)):
            height = _i(shape[-2])
            per_row = analyzer.simplify(tirx.floordiv(_i(shape[-1]), cols))
            first_row = tirx.floordiv(index, per_row) * rows  # of the rows of all leading dimensions
            lead = []
            outer = tirx.floordiv(first_row, height)
            for axis in range(len(shape) - 3, -1, -1):  # the outermost keeps what is left: no wrap
                lead.insert(0, tirx.floormod(outer, _i(shape[axis])) if axis else outer)
                outer = tirx.floordiv(outer, _i(shape[axis]))
            return lead + [tirx.floormod(first_row, height) + r, tirx.floormod(index, per_row) * cols + c]
        return _tile_element(frag, index * (rows * cols), tirx.const(cols, _INDEX), r, c)

    def rewrite(self, call):
        name = call.op.name
        args = list(call.args)
        self.family = "simdgroup" if name in SIMDGROUP_CALLS else "wmma"  # the loops' names say whose call
        if name in MMA_CALLS:
            return self.mma(args, name)
        frag = self.buffer(args[0], name)
        if name in SIMDGROUP_CALLS:
            return self.rewrite_simdgroup(call, frag)
        m, n, k = (_int(a, "fragment size") for a in args[1:4])
        rows, cols = self.fragment_shape(frag, m, n, k)
        index = self.value(args[4])
        if name == "tirx.tvm_fill_fragment":
            return self.fill(frag, index, rows, cols, args[5])
        memory, base = self.pointer(args[5], name)
        ldm = _i(self.value(args[6]))
        layout = str(args[7].value) if _type_key(args[7]) == "ir.StringImm" else str(args[7])
        if layout not in ("row_major", "col_major"):
            raise UnsupportedConstructError(name, f"layout {layout!r}")
        return self.move(name == "tirx.tvm_load_matrix_sync", frag, index, rows, cols, memory, base, ldm, layout)

    def rewrite_simdgroup(self, call, frag):
        """Metal's ``make_filled_simdgroup_matrix(d, index, value, col, row)`` and
        ``simdgroup_load``/``simdgroup_store(d, index, ptr, stride, col, row, transpose)``."""
        name = call.op.name
        args = list(call.args)
        rows, cols = self.simdgroup_shape(frag, call)
        index = self.value(args[1])
        if name == "tirx.make_filled_simdgroup_matrix":
            return self.fill(frag, index, rows, cols, args[2])
        memory, base = self.pointer(args[2], name)
        ldm = _i(self.value(args[3]))
        layout = "col_major" if _int(args[6], "transpose flag", name) else "row_major"
        return self.move(name == "tirx.simdgroup_load", frag, index, rows, cols, memory, base, ldm, layout)

    def fill(self, frag, index, rows: int, cols: int, value):
        value = tirx.Cast(str(frag.dtype), value) if str(value.ty) != str(frag.dtype) else value
        return self.loop("r", rows, lambda r: self.loop("c", cols, lambda c: tirx.BufferStore(
            frag, value, self.slot(frag, index, rows, cols, r, c))))

    def move(self, load: bool, frag, index, rows: int, cols: int, memory, base, ldm, layout: str):
        """A tile between memory and fragment ``index`` of ``frag`` (``load``: into the fragment);
        element ``(r, c)`` of the fragment is ``memory[base + r * ldm + c]`` (``row_major``) or
        ``memory[base + c * ldm + r]`` (``col_major``)."""
        def at(r, c):
            return _tile_element(memory, base, ldm, r, c) if layout == "row_major" else (
                _tile_element(memory, base, ldm, c, r))

        def body(r, c):
            if load:
                value = tirx.BufferLoad(memory, at(r, c))
                if str(memory.dtype) != str(frag.dtype):
                    value = tirx.Cast(str(frag.dtype), value)
                return tirx.BufferStore(frag, value, self.slot(frag, index, rows, cols, r, c))
            value = tirx.BufferLoad(frag, self.slot(frag, index, rows, cols, r, c))
            if str(memory.dtype) != str(frag.dtype):
                value = tirx.Cast(str(memory.dtype), value)
            return tirx.BufferStore(memory, value, at(r, c))

        nest = self.loop("r", rows, lambda r: self.loop("c", cols, lambda c: body(r, c)))
        return nest if load else tirx.AttrStmt(memory.data, WARP_STORE_ATTR, tirx.const(1, "int32"), nest)

    def mma(self, args, name: str):
        d, a, b, c = (self.buffer(args[i], name) for i in (0, 2, 4, 6))
        d_i, a_i, b_i, c_i = (self.value(args[i]) for i in (1, 3, 5, 7))
        metal = name in SIMDGROUP_CALLS
        m, kk = self._attr_shape(a, SIMDGROUP_SCOPE if metal else "wmma.matrix_a", name)
        k2, n = self._attr_shape(b, SIMDGROUP_SCOPE if metal else "wmma.matrix_b", name)
        if kk != k2:
            raise UnsupportedConstructError(name, f"fragments {a.name} and {b.name} of other k")
        in_dtype, acc_dtype = str(a.dtype), str(c.dtype)
        wide = "float32" if "float" in in_dtype else "int32"

        def element(i, j):
            total = tirx.BufferLoad(c, self.slot(c, c_i, m, n, i, j))
            total = tirx.Cast(wide, total) if acc_dtype != wide else total
            for step in range(kk):
                x = tirx.BufferLoad(a, self.slot(a, a_i, m, kk, i, tirx.const(step, _INDEX)))
                y = tirx.BufferLoad(b, self.slot(b, b_i, kk, n, tirx.const(step, _INDEX), j))
                total = total + tirx.Cast(wide, x) * tirx.Cast(wide, y)
            out = str(d.dtype)
            return tirx.BufferStore(d, tirx.Cast(out, total) if out != wide else total,
                                    self.slot(d, d_i, m, n, i, j))

        return self.loop("i", m, lambda i: self.loop("j", n, lambda j: element(i, j)))

    def _attr_shape(self, buf, scope: str, name: str) -> tuple[int, int]:
        """The matrix shape of the fragments of ``buf`` from the calls that fill, load or store them."""
        if str(buf.scope()) != scope:
            raise UnsupportedConstructError(name, f"fragment {buf.name} in scope {buf.scope()}")
        shapes = self.shapes.get(_key(buf), set())
        if len(shapes) != 1:
            raise UnsupportedConstructError(name, f"fragment {buf.name} of unknown shape")
        return next(iter(shapes))


def wmma_as_computed(func):
    """``func`` with its WMMA intrinsic calls as the loop nests they mean (see the module docstring);
    a function without them is returned as it is.  Raises UnsupportedConstructError naming what it
    cannot rewrite (a fragment shape it cannot tell, a layout other than row or column major)."""
    if not has_wmma(func):
        return func
    rewriter = _Rewriter(func)

    def evaluate(stmt):
        call = stmt.value
        if _type_key(call) == "ir.Call" and getattr(call.op, "name", "") in MATRIX_CALLS:
            return rewriter.rewrite(call)
        return stmt

    body = tvm_ffi.structural_map(func.body, (tirx.Evaluate, evaluate))

    def mentions(node, buf) -> bool:
        found = []
        walk_typed(node.body, ("ir.Var",), lambda n: found.append(n) if n.same_as(buf) else None)
        return bool(found)

    def block(node):
        # A view the calls used goes, unless the block still reads or writes it itself.
        kept = [mb for mb in node.match_buffers
                if _key(mb.buffer) not in rewriter.used or mentions(node, mb.buffer)]
        if len(kept) == len(node.match_buffers):
            return node
        from tvm.s_tir import SBlock

        return SBlock(list(node.iter_vars), list(node.reads), list(node.writes), node.name_hint, node.body,
                      node.init, list(node.alloc_buffers), kept, dict(node.annotations))

    from tvm.s_tir import SBlock as _SBlock

    body = tvm_ffi.structural_map(body, (_SBlock, block))
    func = func.with_body(body)
    return func.with_attr(FLOAT_MMA_ATTR, True) if rewriter.float_mma else func
