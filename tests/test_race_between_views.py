"""Sanitizer: a race between two names of one memory (``decl_buffer`` views of one allocation, as
``StorageRewrite`` declares them) is a race.

The race records used to be kept per buffer name, so thread ``tx`` writing ``a[tx]`` while thread
``tx - 1`` reads the same element through ``b[tx]`` went unreported at every stage.  Now a view's
records are kept in its root allocation's elements (``RaceLog.alias``).
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError
from stage_helpers import device_stages


@T.prim_func
def racy_views(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 32)
    buf = T.alloc_buffer((64,), scope="shared")
    a = T.decl_buffer((32,), data=buf.data, scope="shared")
    b = T.decl_buffer((32,), data=buf.data, scope="shared")
    a[tx] = A[tx]
    a[tx] = b[(tx + 1) % 32] * T.float32(2)  # thread tx + 1 writes what thread tx reads: one statement
    B[tx] = a[tx]


@T.prim_func
def views_in_turn(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 32)
    buf = T.alloc_buffer((64,), scope="shared")
    a = T.decl_buffer((32,), data=buf.data, scope="shared")
    b = T.decl_buffer((32,), data=buf.data, scope="shared", elem_offset=32)
    a[tx] = A[tx]
    b[tx] = a[(tx + 1) % 32] * T.float32(2)  # other elements of buf: no race
    B[tx] = b[tx]


@T.prim_func
def racy_offset_views(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 32)
    buf = T.alloc_buffer((64,), scope="shared")
    a = T.decl_buffer((32,), data=buf.data, scope="shared", elem_offset=16)
    b = T.decl_buffer((32,), data=buf.data, scope="shared")
    buf[tx] = A[tx]
    buf[tx + 32] = A[tx]
    a[tx] = b[tx] + T.float32(1)  # writes buf[16 + tx], reads buf[tx]: thread tx + 16 writes buf[tx + 16]


@T.prim_func
def racy_parameter_view(A: T.Buffer((32,), "float32"), B: T.Buffer((32,), "float32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 32)
    v = T.decl_buffer((32,), data=B.data)
    B[tx] = A[tx]
    B[tx] = v[(tx + 1) % 32] + T.float32(1)  # after SplitHostDevice: B passed to the kernel twice


def test_a_race_through_two_views_of_one_allocation_is_reported_at_every_stage():
    hm = thn.build(racy_views, target="cuda")
    a = np.arange(32, dtype=np.float32)
    stages = device_stages(hm)
    assert any(s.name == "tirx.StorageRewrite" for s in stages)
    for stage in stages:
        for mode in ("exact", "fast"):
            with pytest.raises(EmulationError, match=r"data race on buf(_\d+)?\[\d+\]: lanes \(threadIdx.x="):
                hm.emulate(a, np.zeros(32, np.float32), stage=stage.index, mode=mode, check=True)


def test_views_of_different_elements_of_one_allocation_do_not_race_and_match_numpy():
    hm = thn.build(views_in_turn, target="cuda")
    a = np.arange(32, dtype=np.float32)
    for stage in device_stages(hm):
        for mode in ("exact", "fast"):
            out = hm.emulate(a, np.zeros(32, np.float32), stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(out, np.roll(a, -1) * np.float32(2), err_msg=f"{stage.label} {mode}")


def test_a_race_between_the_allocation_and_an_offset_view_names_the_element():
    hm = thn.build(racy_offset_views, target="cuda")
    a = np.arange(32, dtype=np.float32)
    for mode in ("exact", "fast"):
        # Element 16 of buf: read by thread 16 (b[16]) and written by thread 0 (a[0]).
        with pytest.raises(EmulationError, match=r"data race on buf\[(1[6-9]|2\d|3[01])\]"):
            hm.emulate(a, np.zeros(32, np.float32), mode=mode, check=True)


def test_a_race_through_a_view_of_a_parameter_is_reported_after_the_host_passes_it_twice():
    hm = thn.build(racy_parameter_view, target="cuda")
    a = np.arange(32, dtype=np.float32)
    stages = device_stages(hm)
    assert "def main_kernel(" in stages[-1].source  # the device kernel takes B as two pointers
    for stage in stages:
        with pytest.raises(EmulationError, match=r"data race on B(_\d+)?\[\d+\]: lanes \(threadIdx.x="):
            hm.emulate(a, np.zeros(32, np.float32), stage=stage.index, mode="fast", check=True)
