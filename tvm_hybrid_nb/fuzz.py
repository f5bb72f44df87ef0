"""Schedule fuzzer: random computes × random schedules, emulated at every stage against the native build.

Each case is a *compute* (made deterministically from a kind and a seed: elementwise expression
trees, reductions, conv-like windows, cast chains and two-block pipelines, over float16/32/64 and
int8/uint8/int32, some with a symbolic size ``n``) and a list of *schedule steps* (split with
dividing and non-dividing factors, reorder, fuse, parallel, vectorize, unroll, cache_read,
cache_write, compute_at, reverse_compute_at, compute_inline, decompose_reduction, rfactor,
transform_layout).  A step that TVM refuses (``ScheduleError``) is skipped, as in TVM's own random
schedule tests.  The case is built with :func:`tvm_hybrid_nb.build`; stage 0 and every stage that
changed the IR (or every stage) before MakePackedAPI is emulated in ``exact`` and ``fast`` mode:
the two must be bit-identical and both must match the native kernel within
:func:`~tvm_hybrid_nb.compare.compare_arrays`' tolerances (integers exactly).

A failing case is reduced (schedule steps dropped one at a time while the same failure remains) and
printed as a reproducer: kind, seed and steps, runnable with :func:`check_case`.

Run ``python -m tvm_hybrid_nb.fuzz --n 500 --seed 7``; exit status 0 when every case passed, 1
otherwise.
"""
from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import tvm
from tvm import s_tir, te, tirx

from .compare import compare_arrays
from .errors import BuildError, EmulationError, InsufficientMemoryError

__all__ = ["KINDS", "FuzzCase", "CaseResult", "make_compute", "random_case", "check_case", "reduce_case",
           "run_fuzz", "main"]

#: The compute kinds the fuzzer draws from.
KINDS = ("elementwise", "reduction", "window", "cast", "pipeline")

#: Categories of :class:`CaseResult` that are TVM's miscompilations exposed by the emulator.
TVM_FINDINGS = ("tvm_schedule_bug", "tvm_pass_bug")

_FLOATS = ("float32", "float16", "float64")
_INTS = ("int32", "int8", "uint8")

#: A schedule step: (primitive, block name, primitive-specific arguments...).  Plain data, so a
#: reproducer can be printed and pasted.
Step = tuple


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


# --------------------------------------------------------------------------- schedule steps
def _block_names(sch: s_tir.Schedule) -> list[str]:
    """Names of the blocks under the root block that steps can refer to (names used only once)."""
    root = sch.get_sblock("root")
    names = [sch.get(b).name_hint for b in sch.get_child_blocks(root)]
    return [n for n in names if names.count(n) == 1]


def _loop(sch, block: str, index: int):
    loops = sch.get_loops(sch.get_sblock(block))
    if not 0 <= index < len(loops):
        raise IndexError(f"block {block} has {len(loops)} loops, no loop {index}")
    return loops[index]


def _index_map(kind: str, ndim: int):
    if kind == "reverse":
        return lambda *idx: tuple(reversed(idx))
    factor = int(kind.split(":")[1])
    return lambda *idx: (*idx[:-1], idx[-1] // factor, idx[-1] % factor)


def apply_step(sch: s_tir.Schedule, step: Step) -> None:
    """Apply one step to ``sch`` (raises whatever TVM raises when the step is not valid)."""
    prim, block = step[0], step[1]
    if prim == "split":
        sch.split(_loop(sch, block, step[2]), list(step[3]))
    elif prim == "reorder":
        loops = sch.get_loops(sch.get_sblock(block))
        sch.reorder(*[loops[i] for i in step[2]])
    elif prim == "fuse":
        loops = sch.get_loops(sch.get_sblock(block))
        sch.fuse(*loops[step[2]:step[3] + 1])
    elif prim in ("parallel", "vectorize", "unroll"):
        getattr(sch, prim)(_loop(sch, block, step[2]))
    elif prim == "cache_read":
        sch.cache_read(sch.get_sblock(block), step[2], step[3])
    elif prim == "cache_write":
        sch.cache_write(sch.get_sblock(block), step[2], step[3])
    elif prim in ("compute_at", "reverse_compute_at"):
        getattr(sch, prim)(sch.get_sblock(block), _loop(sch, step[2], step[3]))
    elif prim in ("compute_inline", "reverse_compute_inline"):
        getattr(sch, prim)(sch.get_sblock(block))
    elif prim == "decompose_reduction":
        sch.decompose_reduction(sch.get_sblock(block), _loop(sch, block, step[2]))
    elif prim == "rfactor":
        sch.rfactor(_loop(sch, block, step[2]), step[3])
    elif prim == "transform_layout":
        buf = sch.get(sch.get_sblock(block))
        accesses = buf.reads if step[2] == "read" else buf.writes
        ndim = len(accesses[step[3]].region)
        sch.transform_layout(sch.get_sblock(block), (step[2], step[3]), _index_map(step[4], ndim))
    else:
        raise ValueError(f"unknown schedule primitive {prim!r}")


_PRIMITIVES = ("split", "split", "split", "reorder", "fuse", "parallel", "vectorize", "vectorize", "unroll",
               "cache_read", "cache_write", "compute_at", "reverse_compute_at", "compute_inline",
               "reverse_compute_inline", "decompose_reduction", "rfactor", "transform_layout")


def _draw_step(rng: np.random.Generator, sch: s_tir.Schedule) -> Step | None:
    """A random step for the current state of ``sch`` (valid or not: TVM decides)."""
    blocks = _block_names(sch)
    if not blocks:
        return None
    block = blocks[int(rng.integers(len(blocks)))]
    nloops = len(sch.get_loops(sch.get_sblock(block)))
    prim = _PRIMITIVES[int(rng.integers(len(_PRIMITIVES)))]
    pick = (lambda: int(rng.integers(nloops))) if nloops else None
    if prim in ("split", "parallel", "vectorize", "unroll", "decompose_reduction", "rfactor") and not nloops:
        return None
    if prim == "split":
        index = pick()
        extent = sch.get(_loop(sch, block, index)).extent
        const = int(extent) if isinstance(extent, tvm.tirx.IntImm) else None
        divisors = [f for f in range(2, 9) if const and const % f == 0 and f < const]
        factor = int(rng.choice(divisors)) if divisors and rng.random() < 0.5 else int(rng.integers(2, 7))
        factors = [None, factor] if rng.random() < 0.6 else [factor, None]
        if rng.random() < 0.15:
            factors = [None, factor, int(rng.integers(2, 4))]
        return ("split", block, index, factors)
    if prim == "reorder":
        if nloops < 2:
            return None
        chosen = sorted(rng.choice(nloops, size=int(rng.integers(2, nloops + 1)), replace=False).tolist())
        order = list(rng.permutation(chosen).tolist())
        return ("reorder", block, order) if order != chosen else ("reorder", block, order[::-1])
    if prim == "fuse":
        if nloops < 2:
            return None
        start = int(rng.integers(nloops - 1))
        return ("fuse", block, start, int(rng.integers(start + 1, nloops)))
    if prim == "vectorize":
        index = nloops - 1 if rng.random() < 0.7 else pick()
        return ("vectorize", block, index)
    if prim in ("parallel", "unroll", "decompose_reduction"):
        return (prim, block, pick())
    if prim == "rfactor":
        return ("rfactor", block, pick(), 0)
    if prim in ("cache_read", "cache_write"):
        stmt = sch.get(sch.get_sblock(block))
        count = len(stmt.reads if prim == "cache_read" else stmt.writes)
        if not count:
            return None
        return (prim, block, int(rng.integers(count)), str(rng.choice(["global", "local"])))
    if prim in ("compute_at", "reverse_compute_at"):
        others = [b for b in blocks if b != block]
        if not others:
            return None
        target = others[int(rng.integers(len(others)))]
        tloops = len(sch.get_loops(sch.get_sblock(target)))
        if not tloops:
            return None
        return (prim, block, target, int(rng.integers(tloops)))
    if prim in ("compute_inline", "reverse_compute_inline"):
        return (prim, block)
    if prim == "transform_layout":
        stmt = sch.get(sch.get_sblock(block))
        side = "write" if rng.random() < 0.5 or not len(stmt.reads) else "read"
        accesses = stmt.writes if side == "write" else stmt.reads
        index = int(rng.integers(len(accesses)))
        ndim = len(accesses[index].region)
        kind = "reverse" if ndim >= 2 and rng.random() < 0.5 else f"split:{int(rng.choice([2, 3, 4]))}"
        return ("transform_layout", block, side, index, kind)
    return None


def _try_step(sch: s_tir.Schedule, step: Step) -> s_tir.Schedule | None:
    """``sch`` with ``step`` applied (a copy), or None when TVM refuses the step."""
    trial = sch.copy()
    try:
        apply_step(trial, step)
    except (s_tir.ScheduleError, RuntimeError, IndexError, ValueError, TypeError):
        return None
    return trial


def schedule_for(compute: Compute, steps: Sequence[Step]) -> tuple[s_tir.Schedule, list[Step]]:
    """Replay ``steps`` on a fresh schedule of ``compute``; returns it and the steps that applied."""
    sch = s_tir.Schedule(te.create_prim_func(list(compute.tensors)))
    applied = []
    for step in steps:
        trial = _try_step(sch, step)
        if trial is not None:
            sch, applied = trial, applied + [step]
    return sch, applied


# --------------------------------------------------------------------------- cases
@dataclass
class FuzzCase:
    """A compute (``kind`` and ``seed``) and the schedule steps applied to it."""

    kind: str
    seed: int
    steps: list = field(default_factory=list)

    def reproducer(self) -> str:
        """Python that re-runs this case."""
        return (f"from tvm_hybrid_nb.fuzz import FuzzCase, check_case\n"
                f"print(check_case(FuzzCase({self.kind!r}, {self.seed}, {self.steps!r})))")


@dataclass
class CaseResult:
    """What checking one case found."""

    case: FuzzCase
    ok: bool
    #: Failures: "crash", "emulation_error", "fast_exact_differ", "native_mismatch", "timeout".  With ``ok``:
    #: "" (all stages agree), "tvm_rejected" (TVM refused to build the schedule), "unsupported" (the
    #: emulator refused a stage with UnsupportedConstructError, as it must when it cannot be exact)
    #: and the :data:`TVM_FINDINGS`.
    category: str = ""
    detail: str = ""
    stages_emulated: int = 0
    seconds: float = 0.0

    def __str__(self) -> str:
        if self.category in TVM_FINDINGS:
            return f"TVM bug [{self.category}] {self.case.kind} seed {self.case.seed}: {self.detail}"
        if self.ok:
            extra = {"tvm_rejected": " (TVM refused the build)",
                     "unsupported": f" (not emulatable: {self.detail})"}.get(self.category, "")
            return f"ok: {self.case.kind} seed {self.case.seed}, {len(self.case.steps)} steps, " \
                   f"{self.stages_emulated} stage runs{extra}"
        return f"FAIL [{self.category}] {self.case.kind} seed {self.case.seed}: {self.detail}"


def random_case(seed: int, max_steps: int = 8) -> FuzzCase:
    """Draw a compute kind and a random schedule for ``seed``; only steps TVM accepted are kept."""
    rng = np.random.default_rng([seed, 12345])
    kind = KINDS[int(rng.integers(len(KINDS)))]
    compute = make_compute(kind, seed)
    try:
        sch = s_tir.Schedule(te.create_prim_func(list(compute.tensors)))
    except Exception:  # TVM refuses the compute itself (e.g. x / (x - x) folds to a division by 0)
        return FuzzCase(kind, seed, [])
    steps: list[Step] = []
    for _ in range(int(rng.integers(1, max_steps + 1))):
        step = _draw_step(rng, sch)
        if step is None:
            continue
        trial = _try_step(sch, step)
        if trial is not None:
            sch = trial
            steps.append(step)
    return FuzzCase(kind, seed, steps)


def _inputs(hm, compute: Compute, seed: int) -> list:
    args = hm.random_inputs(seed=seed, sizes=compute.sizes)
    if not compute.allows_special:
        return args
    rng = np.random.default_rng([seed, 5])
    for arg, spec in zip(args, hm.params):
        if spec.is_output or not np.issubdtype(arg.dtype, np.floating) or arg.size < 4:
            continue
        flat = arg.reshape(-1)
        spots = rng.choice(flat.size, size=min(3, flat.size), replace=False)
        flat[spots] = rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan], size=len(spots))
    return args


def check_case(case: FuzzCase, stages: str = "changed") -> CaseResult:
    """Build ``case`` and emulate its stages (both modes) against the native kernel."""
    from .module import build

    start = time.perf_counter()

    def result(ok, category="", detail="", runs=0):
        return CaseResult(case, ok, category, detail, runs, time.perf_counter() - start)

    compute = make_compute(case.kind, case.seed)
    try:
        sch, applied = schedule_for(compute, case.steps)
    except Exception as exc:
        return result(True, "tvm_rejected", f"TVM refused the compute: {str(exc).strip().splitlines()[-1]}")
    if len(applied) != len(case.steps):  # a reduced case: steps that no longer apply are dropped
        case = FuzzCase(case.kind, case.seed, applied)
    try:
        hm = build(sch)
    except BuildError as exc:
        return result(True, "tvm_rejected", str(exc))
    except Exception as exc:  # anything else from our capture or code generation is a bug
        return result(False, "crash", f"build raised {type(exc).__name__}: {exc}")
    packed = hm.packed_api_index if hm.packed_api_index is not None else len(hm.stages)
    if not hm.stages[0].emulatable:  # an honest refusal, not a wrong answer
        return result(True, "unsupported", f"stage {hm.stages[0].label}: {hm.stages[0].reason}")
    try:
        args = _inputs(hm, compute, case.seed)
    except Exception as exc:
        return result(False, "crash", f"random inputs raised {type(exc).__name__}: {exc}")
    outputs = [i for i, p in enumerate(hm.params) if p.is_output]
    seen: set[str] = set()
    runs = 0
    verdicts: list[tuple[Any, Any]] = []  # (stage, exact outputs) or (stage, out-of-bounds message)
    first_bad: tuple[str, str] | None = None
    for stage in hm.stages[:packed]:
        if stages == "changed" and not stage.changed:
            continue
        if not stage.emulatable:
            return result(True, "unsupported", f"stage {stage.label}: {stage.reason}", runs)
        if stage.source in seen:
            continue
        seen.add(stage.source)
        got: dict[str, Any] = {}
        for mode in ("exact", "fast"):
            work = [a.copy() for a in args]
            try:
                hm.emulate(*work, stage=stage.index, mode=mode)
            except InsufficientMemoryError as exc:  # refused before allocating: honest, not wrong
                return result(True, "unsupported", f"stage {stage.label}: {exc}", runs)
            except EmulationError as exc:
                if "out-of-bounds" not in str(exc):
                    return result(False, "emulation_error", f"stage {stage.label} {mode}: {exc}", runs)
                got[mode] = str(exc)
            except Exception as exc:
                return result(False, "emulation_error",
                              f"stage {stage.label} {mode}: {type(exc).__name__}: {exc}", runs)
            else:
                got[mode] = work
            runs += 1
        if isinstance(got["exact"], str) or isinstance(got["fast"], str):
            if not (isinstance(got["exact"], str) and isinstance(got["fast"], str)):
                return result(False, "fast_exact_differ",
                              f"stage {stage.label}: only one mode read or wrote out of bounds", runs)
            verdicts.append((stage, got["exact"]))
            first_bad = first_bad or ("emulation_error", f"stage {stage.label}: {got['exact']}")
            continue
        for i in outputs:
            exact, fast = got["exact"][i], got["fast"][i]
            if not np.array_equal(exact, fast, equal_nan=np.issubdtype(exact.dtype, np.floating)):
                where = np.argwhere(~_same(exact, fast))[0].tolist()
                return result(False, "fast_exact_differ", f"stage {stage.label} output {hm.params[i].name}: "
                                                          f"fast differs from exact at {where}", runs)
        verdicts.append((stage, [got["exact"][i] for i in outputs]))
    if first_bad is not None:
        # A program that accesses memory out of bounds may crash the process when run natively
        # (TVM 0.27 has such schedules): the native kernel is not run, the unscheduled build decides.
        finding = _out_of_bounds_finding(compute, hm, args, outputs, verdicts)
        if finding is not None:
            return result(True, finding[0], finding[1], runs)
        return result(False, first_bad[0], first_bad[1], runs)
    try:
        native = [a.copy() for a in args]
        hm.run_native(*native)
    except Exception as exc:
        return result(False, "crash", f"the native run raised {type(exc).__name__}: {exc}")
    for stage, outs in verdicts:
        for o, i in zip(outs, outputs):
            cmp = compare_arrays(hm.params[i].name, o, native[i])
            if not cmp.ok and first_bad is None:
                first_bad = ("native_mismatch", f"stage {stage.label}: {cmp.summary()}")
    if first_bad is None:
        sanitized = _check_sanitizers(hm, args, outputs, verdicts)
        if sanitized is not None:
            return result(False, sanitized[0], sanitized[1], runs + len(verdicts))
        return result(True, runs=runs + len(verdicts))
    finding = _tvm_finding(compute, hm, args, outputs, native, verdicts)
    if finding is not None:
        return result(True, finding[0], finding[1], runs)
    return result(False, first_bad[0], first_bad[1], runs)


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    same = a == b
    if np.issubdtype(a.dtype, np.floating):
        same |= np.isnan(a) & np.isnan(b)
    return same


def _truth(compute: Compute, hm, args) -> list | None:
    """The native build of the unscheduled compute run on ``args`` (None when the signatures differ)."""
    from .module import build

    try:
        plain = build(list(compute.tensors))
        if [(p.dtype, p.shape) for p in plain.params] != [(p.dtype, p.shape) for p in hm.params]:
            return None  # transform_layout changed the signature: no common inputs
        truth = [a.copy() for a in args]
        plain.run_native(*truth)
    except Exception:
        return None
    return truth


def _out_of_bounds_finding(compute: Compute, hm, args, outputs, verdicts) -> tuple[str, str] | None:
    """Explain an out-of-bounds access the emulation refused as TVM's, without running it natively.

    ``tvm_schedule_bug`` when the scheduled input stage already accesses out of bounds;
    ``tvm_pass_bug`` when the input stage computes the unscheduled build's result and a later stage
    stops doing so (the first such stage names the pass).  None otherwise (an emulator failure).
    """
    stage0, first = verdicts[0]
    if isinstance(first, str):
        return ("tvm_schedule_bug", f"the scheduled program ({stage0.label}) accesses memory out of bounds "
                                    f"(not run natively): {first}")
    truth = _truth(compute, hm, args)
    if truth is None:
        return None

    def matches(outs) -> bool:
        return not isinstance(outs, str) and all(compare_arrays("out", o, truth[i]).ok for o, i in zip(outs, outputs))

    if not matches(first):
        return None
    culprit, message = next((s, v) for s, v in verdicts if not matches(v))
    detail = message if isinstance(message, str) else "its result differs from the unscheduled build"
    return ("tvm_pass_bug", f"pass {culprit.name} (stage {culprit.label}) made the kernel access memory out of "
                            f"bounds (not run natively); the input stage matches the unscheduled build: {detail}")


def _tvm_finding(compute: Compute, hm, args, outputs, native, verdicts) -> tuple[str, str] | None:
    """Explain a disagreement as TVM's own miscompilation, when the evidence says so.

    The independent truth is the native build of the *unscheduled* compute on the same inputs; TVM
    miscompiled when the native scheduled kernel differs from it.  The emulation then says where:

    * ``tvm_schedule_bug``: the scheduled input stage already reads or writes out of bounds (the
      emulator refuses it), reads an allocation before writing it (the sanitizer says so; the
      emulator's zeros and the native kernel's garbage then differ), or already computes what the
      wrong native kernel computes;
    * ``tvm_pass_bug``: the input stage computes the truth and the last emulated stage computes
      what the native kernel computes (or refuses an out-of-bounds access); the first stage that
      stops matching the truth names the pass.

    An input stage that reads memory it never wrote is TVM's schedule bug even where there is no
    truth to compare with (transform_layout changed the signature).  Anything else (for instance an
    input stage that matches neither) stays an emulator failure.
    """
    def matches(outs, ref) -> bool:
        return not isinstance(outs, str) and all(
            compare_arrays("out", o, ref[i]).ok for o, i in zip(outs, outputs))

    truth = _truth(compute, hm, args)
    stage0, first = verdicts[0]
    if truth is None:
        unwritten = None if isinstance(first, str) else _reads_unwritten_memory(hm, stage0, args)
        if unwritten is None:
            return None
        return ("tvm_schedule_bug", f"the scheduled program ({stage0.label}) reads memory it never wrote "
                                    f"(the native kernel reads garbage there): {unwritten}")
    if matches([native[i] for i in outputs], truth):
        return None  # the native kernel is right: any disagreement is the emulator's
    if isinstance(first, str):
        return ("tvm_schedule_bug", f"the scheduled program ({stage0.label}) accesses memory out of bounds: "
                                    f"{first}")
    if matches(first, native):
        return ("tvm_schedule_bug", "the scheduled program computes what the wrong native kernel computes")
    unwritten = _reads_unwritten_memory(hm, stage0, args)
    if unwritten is not None:  # TVM accepted a schedule that uses a value before computing it
        return ("tvm_schedule_bug", f"the scheduled program ({stage0.label}) reads memory it never wrote "
                                    f"(the native kernel reads garbage there): {unwritten}")
    last_stage, last = verdicts[-1]
    if not matches(first, truth) or not (isinstance(last, str) or matches(last, native)):
        return None
    culprit = next(s for s, v in verdicts if not matches(v, truth))
    return ("tvm_pass_bug", f"pass {culprit.name} (stage {culprit.label}) changed what the kernel computes: "
                            f"the input stage matches the unscheduled build, stage {last_stage.label} the "
                            f"native kernel")


def _check_sanitizers(hm, args, outputs, verdicts) -> tuple[str, str] | None:
    """Run every verified stage of a kernel that matches its native build once more with the
    sanitizers on (fast mode, what the notebook button runs): they must stay silent and must not
    change a single output bit."""
    for stage, outs in verdicts:
        work = [a.copy() for a in args]
        try:
            hm.emulate(*work, stage=stage.index, mode="fast", check=True)
        except EmulationError as exc:
            return ("sanitizer_false_alarm", f"stage {stage.label}: the sanitizers flag a kernel that matches "
                                             f"its native build: {exc}")
        for o, i in zip(outs, outputs):
            if not np.array_equal(o, work[i], equal_nan=np.issubdtype(o.dtype, np.floating)):
                return ("sanitizer_changed_result", f"stage {stage.label} output {hm.params[i].name}: "
                                                    f"check=True changed the result")
    return None


def _reads_unwritten_memory(hm, stage, args) -> str | None:
    """The sanitizer's message when ``stage`` reads an allocation before writing it, else None."""
    try:
        hm.emulate(*[a.copy() for a in args], stage=stage.index, check=True)
    except EmulationError as exc:
        return str(exc) if "never written" in str(exc) else None
    return None


class CaseTimeout(BaseException):
    """A case ran past its time limit (BaseException: the emulator's error translation lets it through)."""


def check_case_within(case: FuzzCase, stages: str = "changed", seconds: float = 0) -> CaseResult:
    """:func:`check_case` with a wall-clock limit (Unix main thread; ``0`` means none).

    A case past the limit fails as ``timeout``: on these tiny sizes every stage emulates in well
    under a second, so a slow one means a loop the emulation cannot finish.
    """
    if not seconds or not hasattr(signal, "setitimer"):
        return check_case(case, stages)

    def expire(signum, frame):
        raise CaseTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.perf_counter()
    try:
        return check_case(case, stages)
    except CaseTimeout:
        return CaseResult(case, False, "timeout", f"no result within {seconds:g} s", 0, time.perf_counter() - start)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def reduce_case(case: FuzzCase, failure: CaseResult, stages: str = "changed",
                timeout: float = 0) -> tuple[FuzzCase, CaseResult]:
    """Drop schedule steps one at a time while the case still fails the same way (same category)."""
    current, current_result = case, failure
    progress = True
    while progress and current.steps:
        progress = False
        for i in range(len(current.steps)):
            candidate = FuzzCase(current.kind, current.seed, current.steps[:i] + current.steps[i + 1:])
            res = check_case_within(candidate, stages, timeout)
            if res.category == failure.category:
                current, current_result = res.case, res
                progress = True
                break
    return current, current_result


@dataclass
class FuzzReport:
    """Summary of a fuzzing run."""

    cases: int = 0
    steps: int = 0
    stage_runs: int = 0
    tvm_rejected: int = 0
    by_kind: dict = field(default_factory=dict)
    by_primitive: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)  # (reduced CaseResult, original CaseResult)
    #: TVM miscompilations the emulator exposed (they do not fail the run), reduced like failures.
    tvm_findings: list = field(default_factory=list)
    #: Cases with a stage the emulator refused (UnsupportedConstructError): reason → first CaseResult.
    unsupported: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.by_kind.items()))
        prims = ", ".join(f"{k} {v}" for k, v in sorted(self.by_primitive.items()))
        lines = [f"{self.cases} schedules fuzzed in {self.seconds:.1f} s: {self.steps} schedule steps applied, "
                 f"{self.stage_runs} stage emulations compared, {self.tvm_rejected} refused by TVM's build, "
                 f"{len(self.tvm_findings)} TVM miscompilations caught, {len(self.failures)} failures",
                 f"  kinds: {kinds}", f"  primitives: {prims}"]
        for reason, res in self.unsupported.items():
            lines.append(f"refused by the emulator: {reason}, e.g. "
                         f"{res.case.kind} seed {res.case.seed} {res.case.steps!r}")
        for title, found in (("TVM miscompilation", self.tvm_findings), ("FAILURE", self.failures)):
            for reduced, original in found:
                lines.append(f"{title}: {reduced}  (found with {len(original.case.steps)} steps, reduced to "
                             f"{len(reduced.case.steps)})")
                lines.append("  reproducer:\n    " + reduced.case.reproducer().replace("\n", "\n    "))
        return "\n".join(lines)


def _reason_kind(detail: str) -> str:
    """The construct an UnsupportedConstructError names (``unsupported construct X ...``)."""
    marker = "unsupported construct "
    if "nothing was allocated" in detail:
        return "buffer larger than the machine's memory (InsufficientMemoryError)"
    if marker in detail:
        rest = detail.split(marker, 1)[1]
        return rest.split(" at stage")[0].split(":")[0]
    return detail.split(":")[-1].strip()[:80]


def run_fuzz(n: int, seed: int = 0, stages: str = "changed", keep: str | Path | None = None,
             reduce: bool = True, log: Callable[[str], None] | None = None, timeout: float = 60) -> FuzzReport:
    """Fuzz ``n`` random cases with seeds ``seed .. seed + n - 1``; failing cases are reduced.

    ``timeout`` limits each check of a case (seconds, 0 for none).
    """
    report = FuzzReport()
    start = time.perf_counter()
    for case_seed in range(seed, seed + n):
        case = random_case(case_seed)
        res = check_case_within(case, stages, timeout)
        report.cases += 1
        report.steps += len(res.case.steps)
        report.stage_runs += res.stages_emulated
        report.tvm_rejected += res.category == "tvm_rejected"
        if res.category == "unsupported":
            report.unsupported.setdefault(_reason_kind(res.detail), res)
        report.by_kind[case.kind] = report.by_kind.get(case.kind, 0) + 1
        for step in res.case.steps:
            report.by_primitive[step[0]] = report.by_primitive.get(step[0], 0) + 1
        if not res.ok or res.category in TVM_FINDINGS:
            reduced = reduce_case(res.case, res, stages, timeout)[1] if reduce else res
            (report.failures if not res.ok else report.tvm_findings).append((reduced, res))
            if keep is not None:
                directory = Path(keep)
                directory.mkdir(parents=True, exist_ok=True)
                (directory / f"case_{case_seed}.py").write_text(
                    f"# {reduced}\n" + reduced.case.reproducer() + "\n")
        if log is not None:
            found = report.failures if not res.ok else report.tvm_findings
            reduced_line = f"\n  reduced: {found[-1][0]}" if res.category in TVM_FINDINGS or not res.ok else ""
            log(f"{res}{reduced_line}")
    report.seconds = time.perf_counter() - start
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m tvm_hybrid_nb.fuzz --n N --seed S [--stages all|changed] [--keep DIR]``."""
    parser = argparse.ArgumentParser(prog="python -m tvm_hybrid_nb.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100, help="number of schedules (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--stages", choices=("changed", "all"), default="changed",
                        help="emulate stage 0 and the stages that changed the IR (default), or every stage")
    parser.add_argument("--keep", default=None, metavar="DIR", help="write each reduced failure to DIR as a .py")
    parser.add_argument("--no-reduce", action="store_true", help="report failures as found")
    parser.add_argument("--timeout", type=float, default=60, help="seconds per case check (default 60, 0: none)")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    args = parser.parse_args(argv)
    log = (lambda line: print(line, flush=True)) if args.verbose else None
    report = run_fuzz(args.n, args.seed, args.stages, args.keep, not args.no_reduce, log, args.timeout)
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
