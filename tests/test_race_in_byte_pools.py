"""Sanitizer: races through views of another element size than their allocation's.

``MergeSharedMemoryAllocations`` (every dlight GPU matmul's tiles) and ``StorageRewrite`` declare
``float16``/``float32`` views over one ``uint8`` pool.  A view of another element size than its
allocation used to keep its own race records, so two views of one pool never raced: a software
pipeline's missing barrier between its tile buffers went unreported.  Views of one element size over
a pool now share its memory as elements of that size (``RaceLog.alias``); a race names a view's element
and the pool's bytes.  Views of two element sizes over one pool (a ``float32`` output tile over the
bytes where the ``float16`` input tiles were) keep apart records and are compared with each other
(``RaceLog._check_across_sizes``).
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm import tirx
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError
from stage_helpers import built_with_thread_sync_followed_by, device_stages


@T.prim_func
def racy_pool(A: T.Buffer((32,), "float16"), B: T.Buffer((32,), "float16")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 32)
    pool = T.alloc_buffer((128,), "uint8", scope="shared")
    a = T.decl_buffer((32,), "float16", data=pool.data, scope="shared")
    b = T.decl_buffer((64,), "float16", data=pool.data, scope="shared")
    a[tx] = A[tx]
    T.tvm_storage_sync("shared")
    a[tx] = b[(tx + 1) % 32] * T.float16(2)  # thread tx + 1 writes what thread tx reads: one statement
    T.tvm_storage_sync("shared")
    B[tx] = a[tx]


@T.prim_func
def pool_in_turn(A: T.Buffer((32,), "float16"), B: T.Buffer((32,), "float16")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 32)
    pool = T.alloc_buffer((128,), "uint8", scope="shared")
    a = T.decl_buffer((32,), "float16", data=pool.data, scope="shared")
    b = T.decl_buffer((64,), "float16", data=pool.data, scope="shared")
    a[tx] = A[tx]
    T.tvm_storage_sync("shared")
    b[tx + 32] = a[(tx + 1) % 32] * T.float16(2)  # the pool's other half: no race
    T.tvm_storage_sync("shared")
    B[tx] = b[tx + 32]


@T.prim_func
def racy_sizes(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float16")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 32)
    pool = T.alloc_buffer((256,), "uint8", scope="shared")
    f = T.decl_buffer((32,), "float32", data=pool.data, scope="shared")
    h = T.decl_buffer((128,), "float16", data=pool.data, scope="shared")
    f[tx] = A[tx]
    T.tvm_storage_sync("shared")
    h[tx * 2] = T.Cast("float16", f[(tx + 1) % 32])  # thread tx + 1 reads the bytes that thread tx writes
    T.tvm_storage_sync("shared")
    B[tx] = h[tx * 2]


@T.prim_func
def sizes_apart(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float16")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 32)
    pool = T.alloc_buffer((256,), "uint8", scope="shared")
    f = T.decl_buffer((32,), "float32", data=pool.data, scope="shared")
    h = T.decl_buffer((128,), "float16", data=pool.data, scope="shared")
    f[tx] = A[tx]
    T.tvm_storage_sync("shared")
    h[64 + tx] = T.Cast("float16", f[(tx + 1) % 32])  # the bytes after f's: no race
    T.tvm_storage_sync("shared")
    B[tx] = h[64 + tx]


def test_two_views_of_a_byte_pool_race_at_every_stage_and_the_message_names_the_bytes():
    hm = thn.build(racy_pool, target="cuda")
    a = np.arange(32, dtype=np.float16)
    for stage in device_stages(hm):
        for mode in ("exact", "fast"):
            # StorageRewrite retypes the pool as float16 (its own elements then).
            with pytest.raises(EmulationError,
                               match=r"data race on ([ab]\[\d+\] \(bytes \d+-\d+ of pool\)|pool(_\d+)?\[\d+\]): lanes"):
                hm.emulate(a, np.zeros(32, np.float16), stage=stage.index, mode=mode, check=True)


def test_views_of_separate_bytes_of_a_pool_do_not_race_and_match_numpy():
    hm = thn.build(pool_in_turn, target="cuda")
    a = np.arange(32, dtype=np.float16)
    for stage in device_stages(hm):
        for mode in ("exact", "fast"):
            out = hm.emulate(a, np.zeros(32, np.float16), stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(out, np.roll(a, -1) * np.float16(2), err_msg=f"{stage.label} {mode}")


def test_views_of_two_element_sizes_over_one_pool_race_at_every_stage():
    hm = thn.build(racy_sizes, target="cuda")
    a = np.arange(32, dtype=np.float32)
    for stage in device_stages(hm):
        for mode in ("exact", "fast"):
            with pytest.raises(EmulationError, match=r"data race on (f|pool_\d+)\[0\] \(bytes 0-3 of pool\): lanes "
                               r"\(threadIdx.x=0\) and \(threadIdx.x=31\) .* through views of 2- and 4-byte elements"):
                hm.emulate(a, np.zeros(32, np.float16), stage=stage.index, mode=mode, check=True)


def test_views_of_two_element_sizes_over_separate_bytes_do_not_race_and_match_numpy():
    hm = thn.build(sizes_apart, target="cuda")
    a = np.arange(32, dtype=np.float32) - 7.25
    for stage in device_stages(hm):
        for mode in ("exact", "fast"):
            out = hm.emulate(a, np.zeros(32, np.float16), stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(out, np.roll(a, -1).astype(np.float16), err_msg=f"{stage.label} {mode}")


def _tensorized_prefill(out_dtype):
    """dlight's tensor-core schedule of a float16 projection of n tokens (sm_80): its A and B tiles,
    double-buffered, and the output tile (``out_dtype``: a float32 tile reuses the float16 tiles'
    bytes in another element size) live in one ``uint8`` pool of dynamic shared memory."""
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import op, spec

    from tvm_hybrid_nb import zoo

    class Prefill(nn.Module):
        def __init__(self):
            self.proj = nn.Linear(128, 128, bias=True, dtype="float16", out_dtype=out_dtype)

        def forward(self, x):
            return op.silu(self.proj(x))

    kernels = zoo.collect_kernels([("prefill", Prefill(), {"x": spec.Tensor((1, "n", 128), "float16")})])
    kernel = next(k for k in kernels if "matmul" in k.name)
    return zoo.schedule(zoo._without_target(kernel.cuda), "dlight-gpu")


def _without_barrier_before_the_tile_store(stmt):
    """``SeqStmt`` mapper: drop the barrier between the last tile reads and the warps' stores of the
    output tiles into the same pool (what a ThreadSync that missed the reuse would emit)."""
    seq = list(stmt.seq)
    for i in range(len(seq) - 1):
        call = getattr(seq[i], "value", None)
        if (isinstance(call, tvm.ir.Call) and call.op.name == "tirx.tvm_storage_sync"
                and "tvm_store_matrix_sync" in str(seq[i + 1])):
            return tirx.SeqStmt(seq[:i] + seq[i + 1:])
    return stmt


@pytest.mark.parametrize("out_dtype", ["float16", "float32"])
def test_a_missing_barrier_before_a_real_kernel_reuses_its_pool_is_reported_and_the_kernel_is_clean(out_dtype):
    target, mod = _tensorized_prefill(out_dtype)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((1, 40, 128)).astype(np.float16), rng.standard_normal((128, 128)).astype(np.float16),
            rng.standard_normal((128,)).astype(out_dtype), np.zeros((1, 40, 128), out_dtype)]
    hm = thn.build(mod["main"], target=target)
    last = hm.packed_api_index - 1
    assert "buf_dyn_shmem" in hm.stages[last].script
    clean = hm.emulate(*args, stage=last, mode="fast", check=True)
    h = args[0].astype(np.float32) @ args[1].astype(np.float32) + args[2].astype(np.float32)
    np.testing.assert_allclose(clean.astype(np.float32), h / (1 + np.exp(-h)), rtol=2e-2, atol=2e-2)

    broken = built_with_thread_sync_followed_by(mod["main"], target, "shared.dyn",
                                                _without_barrier_before_the_tile_store, "DropTileStoreBarrier")
    assert broken.stages[last].script.count("tvm_storage_sync") == hm.stages[last].script.count("tvm_storage_sync") - 1
    with pytest.raises(EmulationError, match=r"data race on \w+\[\d+\] \(bytes \d+-\d+ of buf_dyn_shmem\): lanes"):
        broken.emulate(*args, stage=last, mode="fast", check=True)
