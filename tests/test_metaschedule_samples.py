"""Schedules that TVM's MetaSchedule samples for CUDA, as its evolutionary search draws its first
population (a design space's trace replayed with fresh decisions on a seeded schedule, then the
target's postprocessors, ``VerifyGPUCode`` among them), emulate exactly at every stage.  They differ
from dlight's: multi-level tiling over ``vthread.x`` with per-vthread local accumulators, shared-memory
cooperative fetch, and cross-thread reductions over 4 to 64 threads in one function with wider
launches.  The first probe of 548 such samples found two emulator bugs (a vthread's local copy, a
warp shuffle numbering another launch's threads); these samples hit both."""
from __future__ import annotations

import functools

import numpy as np
import pytest
import tvm
from tvm.s_tir import Schedule
from tvm.s_tir import meta_schedule as ms
from tvm.s_tir.schedule import Trace
from tvm.script import tirx as T

import tvm_hybrid_nb as thn

TARGET = tvm.target.Target("nvidia/nvidia-a100")


@T.prim_func(s_tir=True)
def softmax(x: T.Buffer((4, 24), "float32"), out: T.Buffer((4, 24), "float32")):
    T.func_attr({"tirx.noalias": True, "global_symbol": "main"})
    mx = T.sblock_alloc_buffer((4,))
    sm = T.sblock_alloc_buffer((4,))
    for i, k in T.grid(4, 24):
        with T.sblock("maxelem"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                mx[vi] = T.float32(-3.4028234663852886e38)
            mx[vi] = T.max(mx[vi], x[vi, vk])
    for i, k in T.grid(4, 24):
        with T.sblock("expsum"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                sm[vi] = T.float32(0)
            sm[vi] = sm[vi] + T.exp(x[vi, vk] - mx[vi])
    for i, k in T.grid(4, 24):
        with T.sblock("norm"):
            vi, vk = T.axis.remap("SS", [i, k])
            out[vi, vk] = T.exp(x[vi, vk] - mx[vi]) / sm[vi]


@T.prim_func(s_tir=True)
def matmul(a: T.Buffer((1, 32), "float32"), w: T.Buffer((32, 48), "float32"), c: T.Buffer((1, 48), "float32")):
    T.func_attr({"tirx.noalias": True, "global_symbol": "main"})
    for i, j, k in T.grid(1, 48, 32):
        with T.sblock("mm"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                c[vi, vj] = T.float32(0)
            c[vi, vj] = c[vi, vj] + a[vi, vk] * w[vk, vj]


@functools.lru_cache(maxsize=None)
def _samples(func, seeds: tuple) -> list[tvm.IRModule]:
    """One schedule per seed that the postprocessors accept (seed, seed + 1000, ... as MetaSchedule
    retries a rejected draw)."""
    mod = tvm.IRModule({"main": func})
    ctx = ms.TuneContext(mod=mod, target=TARGET, space_generator="post-order-apply", task_name="t", num_threads=1)
    spaces = ctx.generate_design_space()
    found = []
    for seed in seeds:
        for draw in range(seed, seed + 30_000, 1000):
            sch = Schedule(mod, seed=draw, debug_mask="none")
            Trace(spaces[draw % len(spaces)].trace.insts, {}).apply_to_schedule(sch, remove_postproc=True)
            sch.enter_postproc()
            if all(p.apply(sch) for p in ctx.space_generator.postprocs):
                found.append(sch.mod)
                break
    return found


def _thread_extents(mod, tag: str) -> list[int]:
    return [int(loop.extent) for loop in _loops(mod["main"].body) if loop.thread_binding is not None
            and str(loop.thread_binding.thread_tag) == tag]


def _loops(stmt):
    import tvm_ffi

    found = []
    tvm_ffi.structural_walk(stmt, lambda n: found.append(n) if isinstance(n, tvm.tirx.For) else None, order="pre")
    return found


def _check_every_stage(mod, args, want, mode: str):
    hm = thn.build(mod, target=TARGET)
    stages = [s for s in hm.stages[:hm.packed_api_index] if s.changed or s.index == 0]
    for stage in stages:
        got = hm.emulate(*[a.copy() for a in args], stage=stage.index, mode=mode, check=True)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{stage.label} {mode}")


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_sampled_softmax_schedules_emulate_at_every_stage(mode):
    samples = _samples(softmax, seeds=(1, 4))
    # a cross-thread reduction over fewer threads than a warp, in a function with a wider launch
    assert any(min(_thread_extents(m, "threadIdx.x")) < 32 <= max(_thread_extents(m, "threadIdx.x")) for m in samples)
    x = np.random.default_rng(0).standard_normal((4, 24)).astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    for mod in samples:
        _check_every_stage(mod, [x, np.zeros((4, 24), np.float32)], e / e.sum(axis=1, keepdims=True), mode)


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_sampled_matmul_schedules_emulate_at_every_stage(mode):
    samples = _samples(matmul, seeds=(2, 5))
    assert any(max(_thread_extents(m, "vthread.x"), default=1) > 1 for m in samples)  # vthreads' own accumulators
    rng = np.random.default_rng(0)
    a = rng.integers(-4, 5, (1, 32)).astype(np.float32)  # small integers: every order of the sums is exact
    w = rng.integers(-4, 5, (32, 48)).astype(np.float32)
    for mod in samples:
        _check_every_stage(mod, [a, w, np.zeros((1, 48), np.float32)], a @ w, mode)
