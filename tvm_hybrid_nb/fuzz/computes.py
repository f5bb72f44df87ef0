"""The fuzzer's computes: deterministic random TE definitions drawn from a kind and a seed.

:func:`make_compute` makes elementwise expression trees, reductions, conv-like windows, cast chains
and two-block pipelines, over float16/32/64 and int8/uint8/int32, some with a symbolic size ``n``.
Integer divisors are ``max(b, 1)`` (a zero divisor would kill the process natively).  TE only: no
schedule, no build.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
from tvm import te, tirx

__all__ = ["KINDS", "Compute", "make_compute"]

#: The compute kinds the fuzzer draws from.
KINDS = ("elementwise", "reduction", "window", "cast", "pipeline")


_FLOATS = ("float32", "float16", "float64")
_INTS = ("int32", "int8", "uint8")


# --------------------------------------------------------------------------- computes
@dataclass
class Compute:
    """A compute definition made by :func:`make_compute`."""

    kind: str
    seed: int
    tensors: list
    sizes: dict[str, int]
    #: Float inputs may hold 0, ±inf and NaN (false when a float→int cast would make them undefined).
    allows_special: bool
    description: str


def _const(value, dtype: str):
    return tirx.const(value, dtype)


def _is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def _safe_divisor(b, dtype: str):
    """A divisor that is never zero: ``max(b, 1)``."""
    return te.max(b, _const(1, dtype))


def _binary_ops(dtype: str) -> list[tuple[str, Callable]]:
    common = [("add", lambda a, b: a + b), ("sub", lambda a, b: a - b), ("mul", lambda a, b: a * b),
              ("max", te.max), ("min", te.min)]
    if _is_float(dtype):
        return common + [("div", lambda a, b: a / b)]
    three = _const(3, dtype)
    return common + [
        ("truncdiv", lambda a, b: tirx.truncdiv(a, _safe_divisor(b, dtype))),
        ("truncmod", lambda a, b: tirx.truncmod(a, _safe_divisor(b, dtype))),
        ("floordiv", lambda a, b: tirx.floordiv(a, _safe_divisor(b, dtype))),
        ("floormod", lambda a, b: tirx.floormod(a, _safe_divisor(b, dtype))),
        ("and", lambda a, b: a & b), ("or", lambda a, b: a | b), ("xor", lambda a, b: a ^ b),
        ("shr", lambda a, b: a >> (b & three)),
    ]


def _unary_ops(dtype: str) -> list[tuple[str, Callable]]:
    if _is_float(dtype):
        ops = [("neg", lambda a: -a), ("abs", te.abs), ("sqrt_abs", lambda a: te.sqrt(te.abs(a)))]
        if dtype != "float16":
            ops.append(("exp", te.exp))
        return ops
    return [("abs", te.abs)] if not dtype.startswith("uint") else [("not", lambda a: ~a)]


def _constant(rng: np.random.Generator, dtype: str):
    if _is_float(dtype):
        return _const(float(rng.choice([0.5, 2.0, -1.5, 3.0])), dtype)
    if dtype.startswith("uint"):
        return _const(int(rng.integers(1, 9)), dtype)
    return _const(int(rng.integers(-7, 8)), dtype)


def _random_expr(rng: np.random.Generator, leaves: Sequence[Callable[[], Any]], dtype: str, depth: int):
    """A random expression tree over ``leaves`` (callables giving TE expressions) in ``dtype``."""
    roll = rng.random()
    if depth == 0 or roll < 0.25:
        if rng.random() < 0.15:
            return _constant(rng, dtype)
        return leaves[int(rng.integers(len(leaves)))]()
    if roll < 0.4:
        _, op = _unary_ops(dtype)[int(rng.integers(len(_unary_ops(dtype))))]
        return op(_random_expr(rng, leaves, dtype, depth - 1))
    ops = _binary_ops(dtype)
    _, op = ops[int(rng.integers(len(ops)))]
    return op(_random_expr(rng, leaves, dtype, depth - 1), _random_expr(rng, leaves, dtype, depth - 1))


def _dim(rng: np.random.Generator, symbolic: bool, sizes: dict[str, int]):
    if symbolic and "n" not in sizes:
        sizes["n"] = int(rng.integers(3, 13))
        return te.var("n")
    return int(rng.integers(3, 13))


def _dtype(rng: np.random.Generator) -> str:
    return str(rng.choice(_FLOATS + _INTS, p=[0.3, 0.1, 0.1, 0.2, 0.15, 0.15]))


def make_compute(kind: str, seed: int) -> Compute:
    """The compute of ``kind`` drawn with ``seed`` (deterministic: same kind and seed, same compute)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    return globals()[f"_make_{kind}"](rng, seed)


def _make_elementwise(rng: np.random.Generator, seed: int) -> Compute:
    dtype = _dtype(rng)
    sizes: dict[str, int] = {}
    symbolic = rng.random() < 0.3
    ndim = int(rng.integers(1, 4))
    shape = tuple(_dim(rng, symbolic and d == 0, sizes) for d in range(ndim))
    a = te.placeholder(shape, dtype, name="A")
    b = te.placeholder(shape, dtype, name="B")
    depth = int(rng.integers(1, 4))

    def fcompute(*idx):
        leaves = [lambda: a(*idx), lambda: b(*idx)]
        return _random_expr(np.random.default_rng([seed, 99]), leaves, dtype, depth)

    c = te.compute(shape, fcompute, name="C")
    return Compute("elementwise", seed, [a, b, c], sizes, True, f"C = f(A, B) over {dtype}{list(shape)}")


def _make_reduction(rng: np.random.Generator, seed: int) -> Compute:
    dtype = _dtype(rng)
    acc = dtype
    if dtype == "int8" and rng.random() < 0.6:
        acc = "int32"
    elif dtype == "float16" and rng.random() < 0.5:
        acc = "float32"
    sizes: dict[str, int] = {}
    symbolic = rng.random() < 0.3
    n = _dim(rng, symbolic, sizes)
    m = int(rng.integers(3, 10))
    kk = int(rng.integers(3, 12))
    red = str(rng.choice(["sum", "max", "min"], p=[0.6, 0.2, 0.2]))
    reducer = {"sum": te.sum, "max": te.max, "min": te.min}[red]
    if rng.random() < 0.5:  # matmul-like
        a = te.placeholder((n, kk), dtype, name="A")
        b = te.placeholder((kk, m), dtype, name="B")
        k = te.reduce_axis((0, kk), name="k")
        c = te.compute((n, m), lambda i, j: reducer(a[i, k].astype(acc) * b[k, j].astype(acc), axis=k), name="C")
        return Compute("reduction", seed, [a, b, c], sizes, True, f"C = {red}_k A*B, {dtype}->{acc}")
    a = te.placeholder((n, m, kk), dtype, name="A")
    k = te.reduce_axis((0, kk), name="k")
    c = te.compute((n, m), lambda i, j: reducer(a[i, j, k].astype(acc), axis=k), name="C")
    return Compute("reduction", seed, [a, c], sizes, True, f"C = {red}_k A, {dtype}->{acc}")


def _make_window(rng: np.random.Generator, seed: int) -> Compute:
    dtype = str(rng.choice(["float32", "float16", "int32", "int8"], p=[0.5, 0.15, 0.2, 0.15]))
    acc = "int32" if dtype == "int8" else dtype
    sizes: dict[str, int] = {}
    symbolic = rng.random() < 0.3
    zero = _const(0, dtype)
    if rng.random() < 0.5:  # 1-D, boundary by if_then_else
        n = _dim(rng, symbolic, sizes)
        kw = int(rng.integers(2, 5))
        a = te.placeholder((n,), dtype, name="A")
        w = te.placeholder((kw,), dtype, name="W")
        r = te.reduce_axis((0, kw), name="r")
        if rng.random() < 0.5:
            pad = te.compute((n + kw - 1,), lambda i: te.if_then_else(i < n, a[te.min(i, n - 1)], zero), name="P")
            c = te.compute((n,), lambda i: te.sum(pad[i + r].astype(acc) * w[r].astype(acc), axis=r), name="C")
            desc = "1-D window over a padded copy (two blocks)"
        else:
            c = te.compute((n,), lambda i: te.sum(
                te.if_then_else(i + r < n, a[te.min(i + r, n - 1)], zero).astype(acc) * w[r].astype(acc), axis=r),
                name="C")
            desc = "1-D window, boundary in the reduction"
        return Compute("window", seed, [a, w, c], sizes, True, desc)
    h, wd = _dim(rng, symbolic, sizes), int(rng.integers(3, 9))
    kh, kw = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    a = te.placeholder((h + kh - 1, wd + kw - 1), dtype, name="A")
    w = te.placeholder((kh, kw), dtype, name="W")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    c = te.compute((h, wd), lambda y, x: te.sum(a[y + ry, x + rx].astype(acc) * w[ry, rx].astype(acc),
                                                axis=[ry, rx]), name="C")
    return Compute("window", seed, [a, w, c], sizes, True, "2-D valid convolution")


def _make_cast(rng: np.random.Generator, seed: int) -> Compute:
    src = _dtype(rng)
    dst = _dtype(rng)
    sizes: dict[str, int] = {}
    symbolic = rng.random() < 0.3
    shape = (_dim(rng, symbolic, sizes), int(rng.integers(3, 9)))
    a = te.placeholder(shape, src, name="A")
    allows_special = True

    def value(x):
        nonlocal allows_special
        if _is_float(src) and not _is_float(dst):
            allows_special = False  # float→int of inf/NaN or out of range is undefined
            scaled = te.abs(x) if dst.startswith("uint") else x
            return (scaled * _const(50.0, src)).astype(dst)
        return x.astype(dst)

    b = te.compute(shape, lambda i, j: value(a[i, j]), name="B")
    if rng.random() < 0.5:
        c = te.compute(shape, lambda i, j: b[i, j] + _constant(rng, dst), name="C")
        return Compute("cast", seed, [a, c], sizes, allows_special, f"{src} -> {dst}, then + const (two blocks)")
    return Compute("cast", seed, [a, b], sizes, allows_special, f"{src} -> {dst}")


def _make_pipeline(rng: np.random.Generator, seed: int) -> Compute:
    dtype = str(rng.choice(["float32", "float64", "int32", "int8"], p=[0.5, 0.1, 0.25, 0.15]))
    sizes: dict[str, int] = {}
    symbolic = rng.random() < 0.3
    n, m = _dim(rng, symbolic, sizes), int(rng.integers(3, 10))
    a = te.placeholder((n, m), dtype, name="A")
    sub = np.random.default_rng([seed, 7])
    t = te.compute((n, m), lambda i, j: _random_expr(np.random.default_rng([seed, 1]),
                                                     [lambda: a[i, j]], dtype, 2), name="T")
    if rng.random() < 0.5:
        k = te.reduce_axis((0, m), name="k")
        c = te.compute((n,), lambda i: te.sum(t[i, k], axis=k), name="C")
        desc = "T = f(A); C = sum_k T"
    else:
        c = te.compute((n, m), lambda i, j: t[i, j] * _constant(sub, dtype) + t[i, m - 1 - j], name="C")
        desc = "T = f(A); C = T * c + T reversed"
    return Compute("pipeline", seed, [a, c], sizes, True, desc)
