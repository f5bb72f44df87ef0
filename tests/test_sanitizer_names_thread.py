"""Errors name the thread: a barrier some threads miss names one that reaches it and one that does
not, with its block, an integer overflow names the first thread that overflows, an out-of-bounds
access names a thread that makes it (with or without the sanitizers, blocks run as lanes or one
after another), and a value a warp shuffle took from a thread outside its branch is named when it
is read, not reported as memory never written."""
import re

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
    # The divergent block is named, whether the blocks run as lanes or one after another.
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


@T.prim_func
def strided_gather(a: T.Buffer((512,), "float32"), b: T.Buffer((512,), "float32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(256, thread="threadIdx.x"):
            b[bx * 256 + tx] = a[T.min(bx * 256 + tx * 3, 600)]


@T.prim_func
def shared_tile_overrun(a: T.Buffer((512,), "float32"), b: T.Buffer((512,), "float32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(256, thread="threadIdx.x"):
            tile = T.alloc_buffer((256,), "float32", scope="shared")
            tile[tx] = a[bx * 256 + tx]
            T.tvm_storage_sync("shared")
            b[bx * 256 + tx] = tile[(tx + bx * 7) % 300]


@T.prim_func
def guarded_scatter(a: T.Buffer((64,), "float32"), idx: T.Buffer((64,), "int32"), b: T.Buffer((64,), "float32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            if a[bx * 32 + tx] > T.float32(0):
                b[idx[bx * 32 + tx]] = a[bx * 32 + tx]


def _thread_of(message: str) -> tuple[int, int]:
    found = re.search(r"at \(blockIdx\.x=(\d+), threadIdx\.x=(\d+)\)", message)
    assert found, message
    return int(found.group(1)), int(found.group(2))


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("check", [False, True])
def test_out_of_bounds_read_names_a_thread_that_makes_it(mode, check):
    hm = thn.build(strided_gather, target=cuda_target())
    with pytest.raises(EmulationError, match=r"out-of-bounds read of a\[(\d+)\]") as err:
        hm.emulate(np.ones(512, np.float32), np.zeros(512, np.float32), mode=mode, check=check)
    message = str(err.value)
    bx, tx = _thread_of(message)
    element = int(message.split("out-of-bounds read of a[")[1].split("]")[0])
    assert element == min(bx * 256 + tx * 3, 600) >= 512  # the named thread reads the named element


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("check", [False, True])
def test_out_of_bounds_shared_read_names_the_element_and_thread_without_emulator_copies(mode, check):
    hm = thn.build(shared_tile_overrun, target=cuda_target())
    with pytest.raises(EmulationError, match=r"out-of-bounds read of tile(_\d+)?\[(\d+)\]") as err:
        hm.emulate(np.ones(512, np.float32), np.zeros(512, np.float32), mode=mode, check=check)
    message = str(err.value)
    assert "(shape (256,))" in message  # the tile as the kernel declares it, not one copy per block
    bx, tx = _thread_of(message)
    element = int(re.search(r"out-of-bounds read of tile(_\d+)?\[(\d+)\]", message).group(2))
    assert element == (tx + bx * 7) % 300 >= 256


@pytest.mark.parametrize("mode", ["fast", "exact"])
@pytest.mark.parametrize("check", [False, True])
def test_out_of_bounds_guarded_write_names_the_thread_that_takes_the_branch(mode, check):
    hm = thn.build(guarded_scatter, target=cuda_target())
    a = -np.ones(64, np.float32)
    a[32 + 9] = 1.0  # only block 1, thread 9 writes, and out of bounds
    idx = np.arange(64, dtype=np.int32)
    idx[32 + 9] = 70
    idx[3] = 99  # out of bounds too, but its thread does not take the branch
    with pytest.raises(EmulationError, match=r"out-of-bounds write of b\[70\]") as err:
        hm.emulate(a, idx, np.zeros(64, np.float32), mode=mode, check=check)
    assert _thread_of(str(err.value)) == (1, 9)
    b = np.zeros(64, np.float32)  # in bounds: written where the branch is taken, as numpy says
    idx[32 + 9] = 5
    hm.emulate(a, idx, b, mode=mode, check=check)
    expected = np.zeros(64, np.float32)
    expected[5] = 1.0
    np.testing.assert_array_equal(b, expected)
