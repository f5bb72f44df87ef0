"""The race log keeps a read's record as its index arrays until a write to the same memory before
the next barrier needs it (``_DeferredRead``): a shared tile read between two barriers costs a
gather, not a record.  A read that a later write races with is still reported, at every stage."""
import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError
from tvm_hybrid_nb.zoo import cuda_target


@T.prim_func
def rotate_in_place(x: T.Buffer((32,), "float32"), y: T.Buffer((32,), "float32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        sh = T.alloc_buffer((32,), "float32", scope="shared")
        sh[tx] = x[tx]
        T.tvm_storage_sync("shared")
        sh[tx] = sh[(tx + 1) % 32] + T.float32(1)  # thread 31 reads sh[0], which thread 0 writes
        T.tvm_storage_sync("shared")
        y[tx] = sh[tx]


@T.prim_func
def tiled_matmul(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"),
                 C: T.Buffer((64, 64), "float32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for by in T.thread_binding(4, thread="blockIdx.y"):
        for bx in T.thread_binding(4, thread="blockIdx.x"):
            for ty in T.thread_binding(16, thread="threadIdx.y"):
                for tx in T.thread_binding(16, thread="threadIdx.x"):
                    As = T.alloc_buffer((16, 16), "float32", scope="shared")
                    Bs = T.alloc_buffer((16, 16), "float32", scope="shared")
                    acc = T.alloc_buffer((1,), "float32", scope="local")
                    acc[0] = T.float32(0)
                    for kt in range(4):
                        As[ty, tx] = A[by * 16 + ty, kt * 16 + tx]
                        Bs[ty, tx] = B[kt * 16 + ty, bx * 16 + tx]
                        T.tvm_storage_sync("shared")
                        for k in range(16):
                            acc[0] = acc[0] + As[ty, k] * Bs[k, tx]
                        T.tvm_storage_sync("shared")
                    C[by * 16 + ty, bx * 16 + tx] = acc[0]


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_a_read_raced_by_a_later_write_is_reported_at_every_stage(mode):
    hm = thn.build(rotate_in_place, target=cuda_target())
    for stage in (0, hm.packed_api_index - 1):
        with pytest.raises(EmulationError, match=r"data race on sh\[0\].*threadIdx.x=0.*threadIdx.x=31"):
            hm.emulate(np.arange(32, dtype=np.float32), np.zeros(32, np.float32), stage=stage, mode=mode,
                       check=True)


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_tiles_read_between_barriers_are_no_race(mode):
    hm = thn.build(tiled_matmul, target=cuda_target())
    rng = np.random.default_rng(0)
    a = rng.integers(-8, 8, (64, 64)).astype(np.float32)
    b = rng.integers(-8, 8, (64, 64)).astype(np.float32)
    for stage in (0, hm.packed_api_index - 1):
        c = np.zeros((64, 64), np.float32)
        hm.emulate(a, b, c, stage=stage, mode=mode, check=True)
        np.testing.assert_array_equal(c, a @ b)  # small integers: every partial sum is exact



@T.prim_func
def masked_reads(x: T.Buffer((32,), "float32"), y: T.Buffer((32,), "float32"), z: T.Buffer((32,), "float32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        sh = T.alloc_buffer((32,), "float32", scope="shared")
        acc = T.alloc_buffer((1,), "float32", scope="local")
        sh[tx] = x[tx]
        acc[0] = T.float32(0)
        T.tvm_storage_sync("shared")
        # Only thread 0 reads (its own element); the masked-out threads' index reaches elements the
        # others write in this statement: no race, since they do not read.
        sh[tx] = T.if_then_else(tx == 0, sh[tx * 5 % 32] + T.float32(1), x[tx] * T.float32(2))
        if tx % 3 == 0:
            acc[0] = x[tx]  # a masked write of each thread's own copy
        T.tvm_storage_sync("shared")
        y[tx] = sh[31 - tx]
        z[tx] = acc[0]


@T.prim_func
def masked_read_raced(x: T.Buffer((32,), "float32"), y: T.Buffer((32,), "float32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        sh = T.alloc_buffer((32,), "float32", scope="shared")
        sh[tx] = x[tx]
        T.tvm_storage_sync("shared")
        # thread 31 reads sh[0], which thread 0 changes
        sh[tx] = T.if_then_else(tx == 31, sh[0], x[tx] + T.float32(1))
        T.tvm_storage_sync("shared")
        y[tx] = sh[tx]


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_masked_reads_record_the_lanes_that_read(mode):
    """A masked read's deferred record holds its kept lanes only: the elements that masked-out
    threads would have read, written by others, are no race; a kept thread's read is one."""
    x = np.arange(32, dtype=np.float32)
    hm = thn.build(masked_reads, target=cuda_target())
    want = np.concatenate([[x[0] + 1], x[1:] * 2])[::-1]
    for stage in (0, hm.packed_api_index - 1):
        y, z = np.zeros(32, np.float32), np.full(32, -1, np.float32)
        hm.emulate(x, y, z, stage=stage, mode=mode, check=True)
        np.testing.assert_array_equal(y, want)
        np.testing.assert_array_equal(z, np.where(np.arange(32) % 3 == 0, x, 0))
    hm = thn.build(masked_read_raced, target=cuda_target())
    for stage in (0, hm.packed_api_index - 1):
        with pytest.raises(EmulationError, match=r"data race on sh\[0\].*threadIdx.x=0.*threadIdx.x=31"):
            hm.emulate(x, np.zeros(32, np.float32), stage=stage, mode=mode, check=True)
