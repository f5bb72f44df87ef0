"""TVM's rope kernel after ``DefaultGPUSchedule`` splits a fused ``qkv`` into heads: every block
stores ``q[x // 128, x % 128 // 16, x % 16]`` under ``x % 128 // 16 < 4`` (and ``k``, ``v`` under the
other heads), over a loop of symbolic trip count inside the threads.  Distinct index tuples are
distinct elements, so the blocks are independent and fast mode runs them as lanes; each branch's
condition is computed once per statement, not again in every access's mask."""
from __future__ import annotations

import numpy as np
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})


@T.prim_func(s_tir=True)
def split_heads(var_qkv: T.handle, var_q: T.handle, var_k: T.handle, var_v: T.handle):
    T.func_attr({"tirx.is_scheduled": True})
    n = T.int32()
    qkv = T.match_buffer(var_qkv, (n, 8, 16), "float32")
    q = T.match_buffer(var_q, (n, 4, 16), "float32")
    k = T.match_buffer(var_k, (n, 2, 16), "float32")
    v = T.match_buffer(var_v, (n, 2, 16), "float32")
    for b in T.thread_binding(8, thread="blockIdx.x"):
        for t in T.thread_binding(256, thread="threadIdx.x"):
            for o in range((n * 128 + 2047) // 2048):
                with T.sblock("split"):
                    T.where((o * 8 + b) * 256 + t < n * 128)
                    if (o * 2048 + b * 256 + t) % 128 // 16 < 4:
                        q[(o * 2048 + b * 256 + t) // 128, (o * 2048 + b * 256 + t) % 128 // 16,
                          (o * 2048 + b * 256 + t) % 16] = qkv[(o * 2048 + b * 256 + t) // 128,
                                                              (o * 2048 + b * 256 + t) % 128 // 16,
                                                              (o * 2048 + b * 256 + t) % 16] * T.float32(2)
                    elif (o * 2048 + b * 256 + t) % 128 // 16 < 6:
                        k[(o * 2048 + b * 256 + t) // 128, (o * 2048 + b * 256 + t) % 128 // 16 - 4,
                          (o * 2048 + b * 256 + t) % 16] = qkv[(o * 2048 + b * 256 + t) // 128,
                                                              (o * 2048 + b * 256 + t) % 128 // 16,
                                                              (o * 2048 + b * 256 + t) % 16] + T.float32(1)
                    else:
                        v[(o * 2048 + b * 256 + t) // 128, (o * 2048 + b * 256 + t) % 128 // 16 - 6,
                          (o * 2048 + b * 256 + t) % 16] = qkv[(o * 2048 + b * 256 + t) // 128,
                                                              (o * 2048 + b * 256 + t) % 128 // 16,
                                                              (o * 2048 + b * 256 + t) % 16]


def _args(rows: int):
    qkv = np.random.default_rng(0).standard_normal((rows, 8, 16)).astype(np.float32)
    return qkv, np.zeros((rows, 4, 16), np.float32), np.zeros((rows, 2, 16), np.float32), np.zeros((rows, 2, 16),
                                                                                                 np.float32)


def test_blocks_storing_disjoint_head_slices_run_as_lanes_and_match_numpy():
    hm = thn.build(split_heads, target=CUDA)
    plan = hm.stages[0].plan("fast")
    blocks = next(d for d in plan.decisions if d.loop == "b")
    assert blocks.strategy != "serial" and "dependence" not in blocks.reason, blocks.reason
    qkv = _args(20)[0]
    for stage in [s for s in hm.stages[:hm.packed_api_index] if s.changed or s.index == 0]:
        for mode in ("exact", "fast"):
            for check in (False, True):
                q, k, v = hm.emulate(*_args(20), stage=stage.index, mode=mode, check=check)
                np.testing.assert_array_equal(q, qkv[:, :4] * 2, err_msg=f"{stage.label} {mode} {check}")
                np.testing.assert_array_equal(k, qkv[:, 4:6] + 1)
                np.testing.assert_array_equal(v, qkv[:, 6:])


def test_a_branch_condition_is_computed_once_for_all_the_accesses_under_it():
    hm = thn.build(split_heads, target=CUDA)
    for mode in ("exact", "fast"):
        source = hm.stages[0]._generate_kernel(mode=mode, check=True, synced=False, sizes=None,
                                               progress=False).source
        body = source[source.index("def split_heads("):]
        assert body.count("% 128 // 16 < 4") == 1 and body.count("% 128 // 16 < 6") == 1, body


@T.prim_func(s_tir=True)
def overlapping_rows(var_a: T.handle):
    T.func_attr({"tirx.is_scheduled": True})
    n = T.int32()
    A = T.match_buffer(var_a, (n,), "float32")
    for b in T.thread_binding(16, thread="blockIdx.x"):
        for o in range(n - 15):  # symbolic extent, same step as the blocks: blocks b and b + 1 share elements
            with T.sblock("bump"):
                A[o + b] = A[o + b] + T.float32(1)


def test_a_loop_of_symbolic_extent_proves_nothing_where_its_step_equals_the_blocks():
    hm = thn.build(overlapping_rows, target=CUDA)
    blocks = next(d for d in hm.stages[0].plan("fast").decisions if d.loop == "b")
    assert blocks.strategy == "serial" and "dependence on A" in blocks.reason
    out = hm.emulate(np.zeros(21, np.float32), mode="fast")
    np.testing.assert_array_equal(out, np.convolve(np.ones(6), np.ones(16)).astype(np.float32))


def test_after_flatten_buffer_the_flat_head_split_still_runs_its_blocks_as_lanes():
    """``q[x // 128 * 64 + x % 128 // 16 * 16 + x % 16]`` under ``x % 128 // 16 < 4`` (and the other
    heads under the else branches): a mixed-radix number of its terms where its guard holds."""
    hm = thn.build(split_heads, target=CUDA)
    flat = next(s for s in hm.stages if s.name == "tirx.FlattenBuffer")
    blocks = next(d for d in flat.plan("fast").decisions if d.loop == "blockIdx.x")
    assert "dependence" not in blocks.reason and blocks.strategy != "block loop", blocks


@T.prim_func(s_tir=True)
def folded_rows(A: T.Buffer((512,), "float32"), O: T.Buffer((320,), "float32")):
    T.func_attr({"tirx.is_scheduled": True})
    for b in T.thread_binding(4, thread="blockIdx.x"):
        for t in T.thread_binding(128, thread="threadIdx.x"):
            with T.sblock("fold"):
                # rows of 128 folded onto rows of 64: x and x + 64 share an element across blocks
                O[(b * 128 + t) // 128 * 64 + (b * 128 + t) % 128] = O[(b * 128 + t) // 128 * 64 + (b * 128 + t) % 128] + A[b * 128 + t]


def test_a_flat_index_whose_terms_overlap_keeps_its_blocks_in_order():
    hm = thn.build(folded_rows, target=CUDA)
    blocks = next(d for d in hm.stages[0].plan("fast").decisions if d.loop == "b")
    assert blocks.strategy == "serial" and "dependence on O" in blocks.reason
    a = np.arange(512, dtype=np.float32)
    want = np.zeros(320, np.float32)
    for x in range(512):
        want[x // 128 * 64 + x % 128] += a[x]
    for mode in ("exact", "fast"):
        np.testing.assert_array_equal(hm.emulate(a, np.zeros(320, np.float32), mode=mode), want)
