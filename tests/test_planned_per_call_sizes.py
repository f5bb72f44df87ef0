"""A stage whose symbolic sizes sit in too many nested mins and maxes is planned per call, for its sizes.

dlight.cpu's causal attention over a symbolic batch and length writes ``T.min(T.int64(1) - n,
n - T.int64(1))`` nested hundreds deep into every loop extent (22,490 ``Min``/``Max`` nodes): TVM's
simplifier took 18-38 s to plan each stage for every size, 10 minutes for the kernel.  With the
call's sizes bound (``PrimFunc.specialize``) they fold to constants and a stage plans in about a
second.  The threshold is lowered here so that a small kernel of the same form shows the rule.
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.codegen import cost
from tvm_hybrid_nb.specialize import with_sizes


@T.prim_func(s_tir=True)
def clamped_rows(a: T.handle, b: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n, 4))
    B = T.match_buffer(b, (n, 4))
    for i, j in T.grid(T.max(T.int64(2) - n, n), 4):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.where(i < n)
            B[vi, vj] = A[T.max(T.min(vi + 1, n - 1), T.min(T.int64(1) - n, n - T.int64(1)) + vi), vj] * T.float32(2)


@T.prim_func(s_tir=True)
def scaled(a: T.handle, n: T.int32, b: T.handle):
    A = T.match_buffer(a, (n,), "int32")
    B = T.match_buffer(b, (n,), "int32")
    for i in range(n):
        B[i] = A[i] * n


def _want(a):
    n = a.shape[0]
    rows = [max(min(i + 1, n - 1), min(1 - n, n - 1) + i) for i in range(n)]
    return a[rows] * np.float32(2)


@pytest.fixture
def few_min_max(monkeypatch):
    monkeypatch.setattr(cost, "MIN_MAX_NODES_PER_CALL_SIZES", 2)


def test_each_call_is_planned_for_its_sizes_and_matches_numpy(few_min_max):
    hm = thn.build(clamped_rows)
    stage = hm.stage(0)
    for n in (5, 3, 1):
        a = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        for check in (False, True):
            got = hm.emulate(a, np.zeros((n, 4), np.float32), mode="fast", check=check)
            np.testing.assert_array_equal(got, _want(a))
        plan = stage.kernel("fast", sizes={"n": n}).plan
        assert plan.per_call.startswith(f"planned for this call's sizes n = {n}: its symbolic sizes sit in ")
        assert plan.per_call.endswith("nested mins and maxes (more than 2)") and not plan.exact_reason
        assert plan.lane_loops() or n == 1  # its rows run as lanes (one row: serial)
    generic = stage.kernel("fast").plan  # no sizes to bind: the script for every size is the exact one
    assert "nested mins and maxes (more than 2)" in generic.exact_reason


def test_below_the_threshold_one_plan_serves_every_size():
    hm = thn.build(clamped_rows)
    a = np.arange(20, dtype=np.float32).reshape(5, 4)
    np.testing.assert_array_equal(hm.emulate(a, np.zeros((5, 4), np.float32), mode="fast"), _want(a))
    plan = hm.stage(0).kernel("fast", sizes={"n": 5}).plan
    assert "planned for this call's sizes" not in plan.per_call and "nested mins" not in plan.exact_reason


def test_with_sizes_binds_buffer_dimensions_and_keeps_the_signature():
    bound = with_sizes(clamped_rows, {"n": 6})
    assert [int(d) for d in bound.params[0].shape] == [6, 4] and len(bound.params) == 2
    assert "T.int64(6)" in str(bound) and " n " not in str(bound) and " n " in str(clamped_rows)
    # n is also a scalar parameter: bound in the body, and kept in the signature (unread), which
    # TVM's specialize would drop it from.
    bound = with_sizes(scaled, {"n": 6})
    assert len(bound.params) == 3 and bound.params[1].same_as(scaled.params[1])
    assert "A[i] * 6" in str(bound) and [int(d) for d in bound.params[0].shape] == [6]
    assert with_sizes(clamped_rows, {"m": 6}) is clamped_rows  # nothing of that name: unchanged
    hm = thn.build(scaled)
    a = np.arange(6, dtype=np.int32) - 3
    np.testing.assert_array_equal(hm.emulate(a, 6, np.zeros(6, np.int32), mode="fast"), a * 6)


@T.prim_func(s_tir=True)
def halved(a: T.handle, h: T.int64, b: T.handle):
    # Relax passes a symbolic image's size as a scalar parameter and sizes its buffers by it.
    A = T.match_buffer(a, ((h - T.int64(1)) // T.int64(2) + T.int64(1), 4))
    B = T.match_buffer(b, ((h - T.int64(1)) // T.int64(2) + T.int64(1), 4))
    for i, j in T.grid(T.max(T.min((h - T.int64(1)) // T.int64(2) + T.int64(1), h), T.int64(0)), 4):
        with T.sblock("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[T.min(vi, (h - T.int64(1)) // T.int64(2)), vj] * T.float32(2)


def test_sizes_that_are_scalar_parameters_are_bound_too(few_min_max):
    # dlight.cpu's group norm over a symbolic image (a random conv net, i206): its sizes h and w come
    # only as scalar parameters, so planning per call bound nothing and each stage planned for every
    # size: 2-7 s a stage on 20,000-character index expressions, 82 s in fast mode against 19 s exact.
    hm = thn.build(halved)
    stage = hm.stage(0)
    for h in (5, 8, 1):
        rows = (h - 1) // 2 + 1
        a = np.random.default_rng(h).standard_normal((rows, 4)).astype(np.float32)
        for check in (False, True):
            got = hm.emulate(a, h, np.zeros((rows, 4), np.float32), mode="fast", check=check)
            np.testing.assert_array_equal(got, a * np.float32(2))
        kernel = stage.kernel("fast", sizes={"h": h})
        assert kernel.plan.per_call.startswith(f"planned for this call's sizes h = {h}: ")
        body = kernel.source[kernel.source.index("def halved("):]
        assert f"A: float32[{rows}, 4]" in body and "h -" not in body  # bound: nothing of h left to compute
