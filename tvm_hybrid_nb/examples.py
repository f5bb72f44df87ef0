"""A zoo of real TVM schedules with numpy references: the demo, the tests, the benchmarks and the
notebooks all build from here.

Each :class:`Example` holds what ``thn.build`` takes, a numpy reference (inputs in, outputs out)
and, where random inputs would be wrong for the kernel (divisors that must not be zero), its own
input maker.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from tvm import s_tir, te, tirx

__all__ = ["Example", "EXAMPLES", "get_example"]


@dataclass
class Example:
    """A schedule to build and what it should compute."""

    name: str
    obj: Any
    reference: Callable[..., Any]
    make_inputs: Callable[[Any, int], list] | None = None
    sizes: dict[str, int] = field(default_factory=dict)
    description: str = ""

    def inputs(self, hm, seed: int = 0) -> list:
        """Arguments for ``hm`` (every parameter, outputs zeroed)."""
        if self.make_inputs is not None:
            return self.make_inputs(hm, seed)
        return hm.random_inputs(seed=seed, sizes=self.sizes)


def _schedule(tensors) -> s_tir.Schedule:
    return s_tir.Schedule(te.create_prim_func(list(tensors)))


def _matmul_te(n: int, m: int, k: int, dtype: str = "float32", out_dtype: str | None = None):
    out_dtype = out_dtype or dtype
    a = te.placeholder((n, k), dtype, name="A")
    b = te.placeholder((k, m), dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, r].astype(out_dtype) * b[r, j].astype(out_dtype), axis=r),
                   name="C")
    return a, b, c


def _matmul_ref(a, b):
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(a.dtype)


def _tiled_matmul(n: int, tile: int):
    """A matmul schedule whose spatial loops are split by ``tile`` and reordered to (io, jo, k, ii, ji)."""
    a, b, c = _matmul_te(n, n, n)
    sch = _schedule([a, b, c])
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    io, ii = sch.split(i, [None, tile])
    jo, ji = sch.split(j, [None, tile])
    sch.reorder(io, jo, k, ii, ji)
    return sch, (io, jo, k, ii, ji)


def matmul_split_reorder(n: int = 64) -> Example:
    """Matmul with its spatial loops split by 8 and reordered (tiles)."""
    sch, _ = _tiled_matmul(n, 8)
    return Example("matmul_split_reorder", sch, _matmul_ref, description="tiled matmul")


def matmul_parallel_vectorize(n: int = 64) -> Example:
    """Matmul tiled, outer loop parallel, inner loop vectorised, middle loop unrolled."""
    sch, (io, jo, k, ii, ji) = _tiled_matmul(n, 8)
    sch.parallel(io)
    sch.unroll(ii)
    sch.vectorize(ji)
    return Example("matmul_parallel_vectorize", sch, _matmul_ref, description="CPU matmul schedule")


def matmul_cache_compute_at(n: int = 64) -> Example:
    """Matmul with cache_read of A, cache_write of C, both placed with compute_at."""
    sch, (io, jo, k, ii, ji) = _tiled_matmul(n, 16)
    block = sch.get_sblock("C")
    cw = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(cw, jo)
    cr = sch.cache_read(block, 0, "global")
    sch.compute_at(cr, k)
    return Example("matmul_cache_compute_at", sch, _matmul_ref, description="caches placed with compute_at")


def matmul_rfactor(n: int = 32) -> Example:
    """Matmul whose reduction is split and rfactor-ed into a partial-sum buffer."""
    a, b, c = _matmul_te(n, n, n)
    sch = _schedule([a, b, c])
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    ko, ki = sch.split(k, [None, 4])
    sch.rfactor(ki, 0)
    return Example("matmul_rfactor", sch, _matmul_ref, description="rfactor of the reduction")


def matmul_decompose_reduction(n: int = 32) -> Example:
    """Matmul with the reduction's init split out of the loop nest (decompose_reduction)."""
    a, b, c = _matmul_te(n, n, n)
    sch = _schedule([a, b, c])
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    sch.decompose_reduction(block, k)
    return Example("matmul_decompose_reduction", sch, _matmul_ref, description="decompose_reduction")


def matmul_int8(n: int = 32) -> Example:
    """int8 × int8 → int32 matmul (exact integer comparison)."""
    a, b, c = _matmul_te(n, n, n, "int8", "int32")
    sch = _schedule([a, b, c])
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    jo, ji = sch.split(j, [None, 8])
    sch.vectorize(ji)

    def ref(x, y):
        return x.astype(np.int32) @ y.astype(np.int32)

    return Example("matmul_int8", sch, ref, description="int8 → int32")


def two_tensors_named_a(n: int = 16) -> Example:
    """Two distinct placeholders that share the name ``A`` (printed ``A`` and ``A_1``)."""
    a0 = te.placeholder((n,), "float32", name="A")
    a1 = te.placeholder((n,), "float32", name="A")
    c = te.compute((n,), lambda i: a0[i] - a1[i] * 2.0, name="C")
    return Example("two_tensors_named_a", _schedule([a0, a1, c]), lambda x, y: x - y * np.float32(2.0),
                   description="name clash")


def conv2d_padded(n: int = 1, c: int = 4, h: int = 10, w: int = 10, k: int = 8) -> Example:
    """3×3 conv2d, padding 1, with the padding inlined (lazy if_then_else on the border)."""
    data = te.placeholder((n, c, h, w), "float32", name="data")
    weight = te.placeholder((k, c, 3, 3), "float32", name="weight")
    pad = te.compute((n, c, h + 2, w + 2), lambda b, ch, y, x: tirx.if_then_else(
        tirx.all(y >= 1, y < h + 1, x >= 1, x < w + 1), data[b, ch, y - 1, x - 1], tirx.const(0.0, "float32")),
        name="pad")
    rc = te.reduce_axis((0, c), name="rc")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    out = te.compute((n, k, h, w), lambda b, f, y, x: te.sum(
        pad[b, rc, y + ry, x + rx] * weight[f, rc, ry, rx], axis=[rc, ry, rx]), name="conv")
    sch = _schedule([data, weight, out])
    sch.compute_inline(sch.get_sblock("pad"))
    b_, f, y, x, rc_, ry_, rx_ = sch.get_loops(sch.get_sblock("conv"))
    xo, xi = sch.split(x, [None, 5])
    sch.vectorize(xi)

    def ref(d, wt):
        padded = np.pad(d.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        res = np.zeros((n, k, h, w))
        for dy in range(3):
            for dx in range(3):
                res += np.einsum("bchw,fc->bfhw", padded[:, :, dy:dy + h, dx:dx + w], wt[:, :, dy, dx])
        return res.astype(np.float32)

    return Example("conv2d_padded", sch, ref, description="conv2d, padding inlined")


def _softmax_schedule(rows: int, cols: int) -> s_tir.Schedule:
    """Row softmax as four TE stages: row_max, exp, row_sum, softmax (unscheduled)."""
    x = te.placeholder((rows, cols), "float32", name="X")
    k1 = te.reduce_axis((0, cols), name="k1")
    mx = te.compute((rows,), lambda i: te.max(x[i, k1], axis=k1), name="row_max")
    ex = te.compute((rows, cols), lambda i, j: te.exp(x[i, j] - mx[i]), name="exp")
    k2 = te.reduce_axis((0, cols), name="k2")
    sm = te.compute((rows,), lambda i: te.sum(ex[i, k2], axis=k2), name="row_sum")
    out = te.compute((rows, cols), lambda i, j: ex[i, j] / sm[i], name="softmax")
    return _schedule([x, out])


def _softmax_ref(a):
    e = np.exp(a - a.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def softmax(rows: int = 8, cols: int = 32) -> Example:
    """Row softmax: max, exp-sum, divide."""
    sch = _softmax_schedule(rows, cols)
    i, j = sch.get_loops(sch.get_sblock("softmax"))
    sch.vectorize(sch.split(j, [None, 8])[1])

    return Example("softmax", sch, _softmax_ref, description="softmax with exp")


def layernorm(rows: int = 8, cols: int = 32, eps: float = 1e-5) -> Example:
    """Layer normalisation over the last axis with gamma and beta (uses rsqrt)."""
    x = te.placeholder((rows, cols), "float32", name="X")
    gamma = te.placeholder((cols,), "float32", name="gamma")
    beta = te.placeholder((cols,), "float32", name="beta")
    k1 = te.reduce_axis((0, cols), name="k1")
    mean = te.compute((rows,), lambda i: te.sum(x[i, k1] / float(cols), axis=k1), name="mean")
    k2 = te.reduce_axis((0, cols), name="k2")
    var = te.compute((rows,), lambda i: te.sum((x[i, k2] - mean[i]) * (x[i, k2] - mean[i]) / float(cols), axis=k2),
                     name="var")
    out = te.compute((rows, cols), lambda i, j: (x[i, j] - mean[i]) * tirx.rsqrt(var[i] + eps) * gamma[j] + beta[j],
                     name="norm")
    sch = _schedule([x, gamma, beta, out])

    def ref(a, g, b):
        a64 = a.astype(np.float64)
        mu = a64.mean(axis=1, keepdims=True)
        v = ((a64 - mu) ** 2).mean(axis=1, keepdims=True)
        return ((a64 - mu) / np.sqrt(v + eps) * g + b).astype(np.float32)

    return Example("layernorm", sch, ref, description="layernorm with rsqrt")


def integer_division(n: int = 64) -> Example:
    """truncdiv, truncmod, floordiv and floormod on negative operands."""
    a = te.placeholder((n,), "int32", name="A")
    b = te.placeholder((n,), "int32", name="B")
    c = te.compute((n, 4), lambda i, j: tirx.Select(
        j == 0, tirx.truncdiv(a[i], b[i]), tirx.Select(
            j == 1, tirx.truncmod(a[i], b[i]), tirx.Select(
                j == 2, tirx.floordiv(a[i], b[i]), tirx.floormod(a[i], b[i])))), name="C")
    sch = _schedule([a, b, c])

    def make(hm, seed):
        rng = np.random.default_rng(seed)
        x = rng.integers(-1000, 1000, n, dtype=np.int32)
        y = rng.integers(1, 17, n, dtype=np.int32) * rng.choice(np.array([-1, 1], np.int32), n)
        return [x, y, np.zeros((n, 4), np.int32)]

    def ref(x, y):
        x64, y64 = x.astype(np.int64), y.astype(np.int64)
        tq = np.trunc(x64 / y64).astype(np.int64)
        return np.stack([tq, x64 - tq * y64, x64 // y64, x64 % y64], axis=1).astype(np.int32)

    return Example("integer_division", sch, ref, make_inputs=make, description="trunc/floor div and mod")


def uint8_wraparound(n: int = 64) -> Example:
    """uint8 add, multiply and subtract that overflow and wrap."""
    a = te.placeholder((n,), "uint8", name="A")
    b = te.placeholder((n,), "uint8", name="B")
    c = te.compute((n,), lambda i: a[i] * b[i] + a[i] - b[i] * tirx.const(3, "uint8"), name="C")
    sch = _schedule([a, b, c])
    sch.vectorize(sch.split(sch.get_loops(sch.get_sblock("C"))[0], [None, 16])[1])

    def ref(x, y):
        return (x.astype(np.int64) * y + x - y.astype(np.int64) * 3).astype(np.uint8)

    return Example("uint8_wraparound", sch, ref, description="uint8 wrap-around")


def float16_arith(n: int = 64) -> Example:
    """float16 arithmetic and exp that must stay float16."""
    a = te.placeholder((n,), "float16", name="A")
    b = te.placeholder((n,), "float16", name="B")
    c = te.compute((n,), lambda i: a[i] * b[i] + te.exp(a[i]) - tirx.const(0.5, "float16"), name="C")
    sch = _schedule([a, b, c])

    def ref(x, y):
        return (x * y + np.exp(x) - np.float16(0.5)).astype(np.float16)

    return Example("float16_arith", sch, ref, description="float16")


def symbolic_length() -> Example:
    """A vector kernel over a symbolic length ``n``, split by 4 (non-dividing tail)."""
    n = te.var("n")
    a = te.placeholder((n,), "float32", name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0 + 1.0, name="B")
    sch = _schedule([a, b])
    io, ii = sch.split(sch.get_loops(sch.get_sblock("B"))[0], [None, 4])
    return Example("symbolic_length", sch, lambda x: x * np.float32(2.0) + np.float32(1.0), sizes={"n": 37},
                   description="symbolic shape")


def symbolic_window() -> Example:
    """A 3×3 box sum over an input of symbolic size ``(n + 2, m + 2)`` (shapes given by expressions),
    its columns split by 4 (non-dividing tail)."""
    n, m = te.var("n"), te.var("m")
    a = te.placeholder((n + 2, m + 2), "float32", name="A")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    c = te.compute((n, m), lambda i, j: te.sum(a[i + ry, j + rx], axis=[ry, rx]), name="C")
    sch = _schedule([a, c])
    i, j, _, _ = sch.get_loops(sch.get_sblock("C"))
    sch.split(j, [None, 4])

    def reference(x):
        rows, cols = x.shape[0] - 2, x.shape[1] - 2
        out = np.zeros((rows, cols), np.float32)
        for dy in range(3):  # the IR's order: ry outer, rx inner, float32 throughout
            for dx in range(3):
                out = out + x[dy:dy + rows, dx:dx + cols]
        return out

    return Example("symbolic_window", sch, reference, sizes={"n": 13, "m": 11},
                   description="shapes n + 2 by m + 2")


def transform_layout_cache(n: int = 32) -> Example:
    """Matmul whose write cache is re-laid out with transform_layout (i, j) → (j // 4, i, j % 4)."""
    a, b, c = _matmul_te(n, n, n)
    sch = _schedule([a, b, c])
    block = sch.get_sblock("C")
    cw = sch.cache_write(block, 0, "global")
    sch.transform_layout(block, ("write", 0), lambda i, j: (j // 4, i, j % 4))
    del cw
    return Example("transform_layout_cache", sch, _matmul_ref, description="transform_layout")


def elementwise_math(n: int = 64) -> Example:
    """Math intrinsics in float32: sqrt, log, tanh, sigmoid, floor, round, fabs, pow, min/max."""
    a = te.placeholder((n,), "float32", name="A")
    c = te.compute((n,), lambda i: (
        te.sqrt(te.abs(a[i])) + te.log(te.abs(a[i]) + 1.0) + te.tanh(a[i]) + te.sigmoid(a[i])
        + te.floor(a[i] * 3.0) + te.round(a[i] * 4.0) + te.power(te.abs(a[i]), 1.5)
        + te.max(a[i], 0.25) - te.min(a[i], -0.25)), name="C")
    sch = _schedule([a, c])

    def ref(x):
        x = x.astype(np.float32)
        ax = np.abs(x)
        return (np.sqrt(ax) + np.log(ax + np.float32(1)) + np.tanh(x) + 1 / (1 + np.exp(-x))
                + np.floor(x * np.float32(3)) + np.rint(x * np.float32(4)) + ax ** np.float32(1.5)
                + np.maximum(x, np.float32(0.25)) - np.minimum(x, np.float32(-0.25))).astype(np.float32)

    return Example("elementwise_math", sch, ref, description="math intrinsics")


def int32_wraparound(n: int = 64) -> Example:
    """int32 products that overflow (values near 2**20 squared) and casts to int8."""
    a = te.placeholder((n,), "int32", name="A")
    c = te.compute((n,), lambda i: a[i] * a[i] + (a[i] * 3).astype("int8").astype("int32"), name="C")
    sch = _schedule([a, c])

    def make(hm, seed):
        rng = np.random.default_rng(seed)
        return [rng.integers(-(1 << 20), 1 << 20, n, dtype=np.int32), np.zeros(n, np.int32)]

    def ref(x):
        x64 = x.astype(np.int64)
        sq = ((x64 * x64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32).astype(np.int64)
        small = ((x64 * 3) & 0xFF).astype(np.uint8).view(np.int8).astype(np.int64)
        return ((sq + small) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)

    return Example("int32_wraparound", sch, ref, make_inputs=make, description="int32 overflow and casts")


def gpu_tiled_matmul(n: int = 32, tile: int = 8) -> Example:
    """CUDA matmul: 8×8 thread tiles, A and B tiles staged through shared memory (cooperative fetch)."""
    a, b, c = _matmul_te(n, n, n)
    sch = _schedule([a, b, c])
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    bi, ti = sch.split(i, [None, tile])
    bj, tj = sch.split(j, [None, tile])
    ko, ki = sch.split(k, [None, tile])
    sch.reorder(bi, bj, ti, tj, ko, ki)
    sch.bind(bi, "blockIdx.y")
    sch.bind(bj, "blockIdx.x")
    sch.bind(ti, "threadIdx.y")
    sch.bind(tj, "threadIdx.x")
    for index in (0, 1):
        cache = sch.cache_read(block, index, "shared")
        sch.compute_at(cache, ko)
        fused = sch.fuse(*sch.get_loops(cache)[-2:])
        _, ty, tx = sch.split(fused, [None, tile, tile])
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
    return Example("gpu_tiled_matmul", sch, _matmul_ref, description="CUDA shared-memory tiled matmul")


def gpu_row_sum(rows: int = 8, cols: int = 64, threads: int = 32) -> Example:
    """CUDA row sum: one block per row, the reduction split across 32 threads (cross-thread allreduce)."""
    x = te.placeholder((rows, cols), "float32", name="A")
    k = te.reduce_axis((0, cols), name="k")
    out = te.compute((rows,), lambda i: te.sum(x[i, k], axis=k), name="B")
    sch = _schedule([x, out])
    i, kk = sch.get_loops(sch.get_sblock("B"))
    sch.bind(i, "blockIdx.x")
    _, ki = sch.split(kk, [None, threads])
    sch.bind(ki, "threadIdx.x")
    return Example("gpu_row_sum", sch, lambda a: a.astype(np.float64).sum(axis=1).astype(np.float32),
                   description="CUDA cross-thread reduction")


def gpu_softmax(rows: int = 4, cols: int = 64, threads: int = 32) -> Example:
    """CUDA row softmax: max and sum as cross-thread reductions, exp and divide over the threads."""
    sch = _softmax_schedule(rows, cols)
    for name in ("row_max", "row_sum"):
        i, kk = sch.get_loops(sch.get_sblock(name))
        sch.bind(i, "blockIdx.x")
        _, ki = sch.split(kk, [None, threads])
        sch.bind(ki, "threadIdx.x")
    for name in ("exp", "softmax"):
        i, j = sch.get_loops(sch.get_sblock(name))
        sch.bind(i, "blockIdx.x")
        _, ji = sch.split(j, [None, threads])
        sch.bind(ji, "threadIdx.x")

    return Example("gpu_softmax", sch, _softmax_ref, description="CUDA softmax")


#: Kernels for the ``cuda`` target: emulated on the CPU, compared with numpy (no GPU needed).
GPU_EXAMPLES: dict[str, Callable[[], Example]] = {
    f.__name__: f for f in (gpu_tiled_matmul, gpu_row_sum, gpu_softmax)
}


EXAMPLES: dict[str, Callable[[], Example]] = {
    f.__name__: f for f in (
        two_tensors_named_a, matmul_split_reorder, matmul_parallel_vectorize, matmul_cache_compute_at,
        matmul_rfactor, matmul_decompose_reduction, conv2d_padded, softmax, layernorm, matmul_int8,
        integer_division, uint8_wraparound, float16_arith, symbolic_length, symbolic_window, transform_layout_cache,
        elementwise_math, int32_wraparound)
}


def get_example(name: str) -> Example:
    """Build the example called ``name`` (see :data:`EXAMPLES`)."""
    try:
        return EXAMPLES[name]()
    except KeyError:
        raise KeyError(f"no example {name!r}; examples are: {', '.join(EXAMPLES)}") from None
