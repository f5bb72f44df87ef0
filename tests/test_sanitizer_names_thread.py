"""Sanitizer errors name the thread: a barrier some threads miss names one that reaches it and one
that does not (and the block, when blocks run as lanes), an integer overflow names the first thread
that overflows, and a value a warp shuffle took from a thread outside its branch is named when it
is read, not reported as memory never written."""
import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError
from tvm_hybrid_nb.zoo import cuda_target


@T.prim_func
def divergent_barrier(x: T.Buffer((64,), "int32"), y: T.Buffer((64,), "int32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            sh = T.alloc_buffer((32,), "int32", scope="shared")
            sh[tx] = x[bx * 32 + tx]
            if x[bx * 32 + tx] >= 0:
                T.tvm_storage_sync("shared")
            y[bx * 32 + tx] = sh[31 - tx]


@T.prim_func
def squares(x: T.Buffer((64,), "int32"), y: T.Buffer((64,), "int32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for tx in T.thread_binding(64, thread="threadIdx.x"):
        y[tx] = x[tx] * x[tx] + 7


@T.prim_func
def shuffle_outside_branch(x: T.Buffer((32,), "float32"), y: T.Buffer((32,), "float32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        v = T.alloc_buffer((1,), "float32", scope="local")
        v[0] = x[tx]
        if tx < 16:
            v[0] = T.tvm_warp_shuffle(T.uint32(0xFFFF), v[0], tx + 16, 32, 32)
        y[tx] = v[0]


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("check", [False, True])
def test_divergent_barrier_names_a_thread_on_each_side(mode, check):
    hm = thn.build(divergent_barrier, target=cuda_target())
    x = np.arange(64, dtype=np.int32)
    x[32 + 5] = -1  # block 1, thread 5 skips the barrier
    with pytest.raises(EmulationError, match="not reached by all threads") as err:
        hm.emulate(x, np.zeros(64, np.int32), stage=0, mode=mode, check=check)
    message = str(err.value)
    assert "31 of 32 lanes reach it" in message
    assert "threadIdx.x=0) reaches it" in message
    assert "threadIdx.x=5) does not" in message
    if mode == "fast" and check:  # the blocks run as lanes: the divergent block is named
        assert "(blockIdx.x=1, threadIdx.x=0) reaches it, (blockIdx.x=1, threadIdx.x=5) does not" in message


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_overflow_names_the_first_thread_that_overflows(mode):
    hm = thn.build(squares, target=cuda_target())
    x = np.arange(64, dtype=np.int32)
    x[50] = 70000
    x[60] = -80000
    with pytest.raises(EmulationError, match=r"int32 overflow: 70000 \* 70000") as err:
        hm.emulate(x, np.zeros(64, np.int32), stage=0, mode=mode, check=True)
    assert "at (threadIdx.x=50)" in str(err.value)
    y = np.zeros(64, np.int32)  # below the limit: no error, and the squares are right
    x[50] = x[60] = 3
    hm.emulate(x, y, stage=0, mode=mode, check=True)
    np.testing.assert_array_equal(y, x * x + 7)


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_value_from_a_thread_outside_the_branch_is_named_when_read(mode):
    hm = thn.build(shuffle_outside_branch, target=cuda_target())
    x = np.random.default_rng(0).standard_normal(32).astype(np.float32)
    with pytest.raises(EmulationError) as err:
        hm.emulate(x, np.zeros(32, np.float32), stage=0, mode=mode, check=True)
    message = str(err.value)
    assert "warp shuffle: thread 0 of the block reads thread 16, which does not take the branch" in message


@T.prim_func
def half_written_register(x: T.Buffer((32,), "float32"), y: T.Buffer((32,), "float32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        v = T.alloc_buffer((2,), "float32", scope="local")
        if tx < 20:
            v[1] = x[tx]
        y[tx] = v[1]


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_a_never_written_register_is_named_as_the_kernel_declares_it_with_its_thread(mode):
    hm = thn.build(half_written_register, target=cuda_target())
    x = np.arange(32, dtype=np.float32)
    with pytest.raises(EmulationError, match=r"read of v\[1\], an element of a buffer allocation that was never "
                                             r"written at \(threadIdx.x=20\)"):
        hm.emulate(x, np.zeros(32, np.float32), stage=0, mode=mode, check=True)
