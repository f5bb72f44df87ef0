"""The fuzzer's schedule steps: plain-data steps, drawing a random one, applying and replaying them.

A step is a tuple (primitive, block name, primitive-specific arguments...): split with dividing and
non-dividing factors, reorder, fuse, parallel, vectorize, unroll, cache_read, cache_write,
compute_at, reverse_compute_at, compute_inline, decompose_reduction, rfactor, transform_layout.
A step that TVM refuses (``ScheduleError``) is skipped, as in TVM's own random schedule tests.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import tvm
from tvm import s_tir, te

from .computes import Compute

__all__ = ["Step", "apply_step", "schedule_for"]


#: A schedule step: (primitive, block name, primitive-specific arguments...).  Plain data, so a
#: reproducer can be printed and pasted.
Step = tuple


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
