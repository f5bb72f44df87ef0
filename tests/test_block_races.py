"""Sanitizer: GPU blocks of one launch that share a global element race.

The blocks of a launch run in no fixed order and never synchronise, so an element of global memory
that one block writes and another reads or writes holds whichever value came last: the classic bug
of binding the wrong loop to ``blockIdx``.  The emulator runs the blocks one after another (a valid
order), so the numbers alone hide it; with ``check=True`` each launch keeps a ledger of the block
that wrote each element.
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError

MODES = ("exact", "fast")


@T.prim_func
def every_block_adds_into_one_row(A: T.Buffer((256,), "float32"), B: T.Buffer((64,), "float32")):
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            B[tx] = B[tx] + A[bx * 64 + tx]


@T.prim_func
def blocks_read_their_neighbours_output(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"),
                                        C: T.Buffer((64,), "float32")):
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            B[bx * 32 + tx] = A[bx * 32 + tx] * T.float32(2)
            C[bx * 32 + tx] = B[63 - (bx * 32 + tx)]  # the other block's element: not ordered


@T.prim_func
def two_launches_and_a_shared_flag(A: T.Buffer((64,), "float32"), B: T.Buffer((64,), "float32"),
                                   C: T.Buffer((64,), "float32"), flag: T.Buffer((1,), "int32")):
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            B[bx * 32 + tx] = A[bx * 32 + tx] * T.float32(2)
            flag[0] = 1  # every thread of every block stores one value: whichever lands, it is 1
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            C[bx * 32 + tx] = B[63 - (bx * 32 + tx)]  # a second launch: the first one has finished


def _stages(hm):
    return [s for s in hm.stages[:hm.packed_api_index] if s.emulatable and (s.changed or s.index == 0)]


@pytest.mark.parametrize("func, buffer", [(every_block_adds_into_one_row, "B"),
                                          (blocks_read_their_neighbours_output, "B")])
def test_blocks_sharing_a_global_element_in_one_launch_race_at_every_stage(func, buffer):
    hm = thn.build(func, target="cuda")
    stages = _stages(hm)
    assert any(s.name == "tirx.ConvertSSA" for s in stages)  # the host launching the kernel too
    arrays = [np.arange(p.shape[0], dtype=np.float32) for p in hm.params]
    for stage in stages:
        hm.emulate(*[a.copy() for a in arrays], stage=stage.index)  # one order of the blocks: no error
        for mode in MODES:
            with pytest.raises(EmulationError, match=rf"data race on {buffer}(_\d+)?\[\d+\]: (written|read) by block "
                                                     r"\(blockIdx.x=\d\) and accessed by block \(blockIdx.x=\d\)"):
                hm.emulate(*[a.copy() for a in arrays], stage=stage.index, mode=mode, check=True)


def test_blocks_of_separate_launches_and_blocks_storing_one_value_do_not_race():
    hm = thn.build(two_launches_and_a_shared_flag, target="cuda")
    a = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    for stage in _stages(hm):
        for mode in MODES:
            b, c, flag = hm.emulate(a, np.zeros(64, np.float32), np.zeros(64, np.float32), np.zeros(1, np.int32),
                                    stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(c, (a * np.float32(2))[::-1], err_msg=f"{stage.label} {mode}")
            assert flag[0] == 1


@T.prim_func
def every_block_stores_one_value_and_reads_it_back(A: T.Buffer((64,), "float32"), S: T.Buffer((2,), "float32"),
                                                  C: T.Buffer((64,), "float32")):
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            S[0] = A[5]  # a loaded float32 ...
            S[1] = T.float32(3)  # ... and a constant (a Python float in the script): one value each
            C[bx * 32 + tx] = A[bx * 32 + tx] * S[0] + S[1]  # each block reads what it stored itself


@T.prim_func
def one_block_stores_what_the_other_reads(A: T.Buffer((64,), "float32"), S: T.Buffer((2,), "float32"),
                                          C: T.Buffer((64,), "float32")):
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            if bx == 0:
                S[0] = A[5]
            C[bx * 32 + tx] = A[bx * 32 + tx] * S[0]


def test_blocks_storing_one_value_read_it_back_without_a_race():
    hm = thn.build(every_block_stores_one_value_and_reads_it_back, target="cuda")
    a = np.arange(64, dtype=np.float32)
    for stage in _stages(hm):
        for mode in MODES:
            s, c = hm.emulate(a, np.zeros(2, np.float32), np.zeros(64, np.float32), stage=stage.index, mode=mode,
                              check=True)
            np.testing.assert_array_equal(c, a * np.float32(5) + np.float32(3), err_msg=f"{stage.label} {mode}")
    # A block that only reads what another stored may run before it: a race.
    hm = thn.build(one_block_stores_what_the_other_reads, target="cuda")
    for stage in _stages(hm):
        for mode in MODES:
            with pytest.raises(EmulationError, match=r"data race on S(_\d+)?\[0\]: written by block \(blockIdx.x=0\) "
                                                     r"and accessed by block \(blockIdx.x=1\)"):
                hm.emulate(a, np.zeros(2, np.float32), np.zeros(64, np.float32), stage=stage.index, mode=mode,
                           check=True)
