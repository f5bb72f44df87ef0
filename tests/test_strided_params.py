"""Parameter buffers declared with constant strides that are not row-major or a constant
``elem_offset``: strided views of their storage, emulated at every stage like TVM's native build
(which receives DLTensors with those strides and a ``byte_offset``).  Buffers declared with
explicit strides over another buffer's data (``decl_buffer(..., data=B.data, strides=...)``) too."""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.codegen import generate_kernel
from tvm_hybrid_nb.errors import UnsupportedConstructError
from test_constructs import check_every_stage


@T.prim_func
def strided_offset(A: T.Buffer((4, 4), "float32", strides=(8, 1)),
                   B: T.Buffer((16,), "float32", elem_offset=4, offset_factor=1)):
    for i, j in T.grid(4, 4):
        B[i * 4 + j] = A[i, j] * T.float32(2) + T.float32(1)


@T.prim_func
def strided_both(A: T.Buffer((3, 5), "int32", strides=(1, 4), elem_offset=2, offset_factor=1),
                 B: T.Buffer((5, 3), "int32", strides=(7, 2), elem_offset=3, offset_factor=1)):
    for i, j in T.grid(5, 3):
        B[i, j] = A[j, i] * 3 - j


@T.prim_func
def overlapping_rows(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4, 4), "float32", strides=(2, 1))):
    for i, j in T.grid(4, 4):
        B[i, j] = A[i, j] + T.float32(i)


def _rand(shape, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    if dtype.startswith("int"):
        return rng.integers(-50, 50, size=shape).astype(dtype)
    return rng.uniform(-1, 1, size=shape).astype(dtype)


def test_strided_and_offset_parameters_match_native_and_numpy_at_every_stage():
    a = _rand((4, 4))
    hm = check_every_stage(strided_offset, [a, np.zeros(16, "float32")], min_stages=3)
    assert [p.strides for p in hm.params] == [(8, 1), None]
    assert [p.elem_offset for p in hm.params] == [0, 4]
    assert "strides=(8, 1)" in hm.params[0].describe() and "elem_offset=4" in hm.params[1].describe()
    out = np.zeros(16, "float32")
    hm.emulate(a, out, stage=-1 if hm.packed_api_index is None else hm.packed_api_index - 1, mode="fast")
    np.testing.assert_array_equal(out, (a * np.float32(2) + np.float32(1)).reshape(-1))


def test_strided_axes_and_offsets_on_both_parameters():
    a = _rand((3, 5), "int32")
    hm = check_every_stage(strided_both, [a, np.zeros((5, 3), "int32")], min_stages=2)
    out = np.zeros((5, 3), "int32")
    hm.emulate(a, out, mode="fast")
    np.testing.assert_array_equal(out, a.T * 3 - np.arange(3, dtype="int32"))


def test_a_view_with_the_buffer_strides_is_used_in_place():
    hm = thn.build(strided_offset)
    a_base = np.arange(40, dtype="float32")
    a = np.lib.stride_tricks.as_strided(a_base, (4, 4), (32, 4))
    b_base = np.full(24, -7, "float32")
    b = b_base[4:20]  # element 0 four elements into its allocation
    for stage in (0, hm.packed_api_index - 1):
        b_base[:] = -7
        hm.emulate(a, b, stage=stage, mode="exact")
        np.testing.assert_array_equal(b_base[4:20], (a * 2 + 1).reshape(-1))
        assert (b_base[:4] == -7).all() and (b_base[20:] == -7).all()
    native_base = np.full(24, -7, "float32")
    hm.run_native(a, native_base[4:20])
    np.testing.assert_array_equal(native_base, b_base)


def test_a_parameter_whose_strides_overlap_runs_in_loop_order():
    a = _rand((4, 4))
    hm = check_every_stage(overlapping_rows, [a, np.zeros((4, 4), "float32")], min_stages=2)
    # Rows two elements apart: B[i, j] and B[i + 1, j - 2] are one element, the later write wins.
    store = np.zeros(10, "float32")
    for i in range(4):
        for j in range(4):
            store[2 * i + j] = a[i, j] + i
    out = np.zeros((4, 4), "float32")
    hm.emulate(a, out, mode="fast")
    np.testing.assert_array_equal(out, np.lib.stride_tricks.as_strided(store, (4, 4), (8, 4)))


@T.prim_func(s_tir=True)
def given_layout(a: T.handle, b: T.handle, m: T.int32, n: T.int32, p: T.int32, q: T.int32):
    A = T.match_buffer(a, (m, n), "float32", strides=[p, 1], elem_offset=q)
    B = T.match_buffer(b, (m, n), "float32", strides=[p, 1], elem_offset=n)
    for i, j in T.grid(m, n):
        with T.sblock():
            vi, vj = T.axis.remap("SS", [i, j])
            B[vi, vj] = A[vi, vj] * T.float32(3)


def test_strides_and_offsets_given_by_scalar_parameters():
    a = _rand((3, 4))
    hm = check_every_stage(given_layout, [a, np.zeros((3, 4), "float32"), 3, 4, 6, 5], min_stages=2)
    assert hm.params[0].strides == ("p", 1) and hm.params[0].elem_offset == "q"
    assert hm.params[1].elem_offset == "n"
    out = np.zeros((3, 4), "float32")
    hm.emulate(a, out, 3, 4, 6, 5, mode="fast")
    np.testing.assert_array_equal(out, a * np.float32(3))
    # Rows closer than a row's length: the stores overlap, the later one wins (as natively).
    hm2 = check_every_stage(given_layout, [a, np.zeros((3, 4), "float32"), 3, 4, 2, 0], min_stages=2)
    assert hm2.params[0].describe().endswith("strides=(p, 1), elem_offset=q]")


def test_a_saved_dump_keeps_the_layout(tmp_path):
    hm = thn.build(given_layout)
    hm.save(tmp_path / "d")
    loaded = thn.load(tmp_path / "d")
    assert [(p.strides, p.elem_offset) for p in loaded.params[:2]] == [(("p", 1), "q"), (("p", 1), "n")]
    a = _rand((3, 4))
    out = np.zeros((3, 4), "float32")
    loaded.emulate(a, out, 3, 4, 6, 5, mode="exact")
    want = hm.run_native(a, np.zeros((3, 4), "float32"), 3, 4, 6, 5)
    np.testing.assert_array_equal(out, want)


# ------------------------------------------------------- strided views over another buffer's data
@T.prim_func(s_tir=True)
def padded_rows(A: T.Buffer((8, 16), "float32"), C: T.Buffer((8, 16), "float32")):
    # Rows of 16 in an allocation of rows of 17 (the shape of TVM's own test_strided in FlattenBuffer).
    for r in T.serial(2):
        B = T.decl_buffer([4, 17], "float32")
        V = T.decl_buffer([4, 16], "float32", data=B.data, strides=[17, 1])
        for i, j in T.grid(4, 16):
            V[i, j] = A[r * 4 + i, j] - T.float32(0.5)
        for i, j in T.grid(4, 16):
            C[r * 4 + i, j] = V[i, j] * T.float32(3)


@T.prim_func(s_tir=True)
def offset_view(A: T.Buffer((68,), "int32"), C: T.Buffer((3, 8), "int32"), D: T.Buffer((68,), "int32")):
    B = T.decl_buffer([68], "int32")
    for k in range(68):
        B[k] = A[k]
    V = T.decl_buffer([3, 8], "int32", data=B.data, strides=[17, 2], elem_offset=5)
    for i, j in T.grid(3, 8):
        C[i, j] = V[i, j] * 3 - i
    for i, j in T.grid(3, 8):
        V[i, j] = j * 100 + i
    for k in range(68):
        D[k] = B[k]


@T.prim_func(s_tir=True)
def overlapping_view(A: T.Buffer((4, 4), "float32"), D: T.Buffer((8,), "float32")):
    B = T.decl_buffer([8], "float32")
    for k in range(8):
        B[k] = T.float32(0)
    V = T.decl_buffer([4, 4], "float32", data=B.data, strides=[1, 1])
    for i, j in T.grid(4, 4):
        V[i, j] = A[i, j] + T.float32(i)
    for k in range(8):
        D[k] = B[k]


def test_a_strided_view_of_an_allocation_matches_native_at_every_stage():
    a = _rand((8, 16))
    hm = check_every_stage(padded_rows, [a, np.zeros((8, 16), "float32")], min_stages=3)
    for mode in ("exact", "fast"):  # the sanitizers see the view's writes land in the allocation
        out = np.zeros((8, 16), "float32")
        hm.emulate(a, out, mode=mode, check=True)
        np.testing.assert_array_equal(out, (a - np.float32(0.5)) * np.float32(3))


def test_a_strided_view_with_an_offset_reads_and_writes_its_elements():
    a = _rand((68,), "int32")
    hm = check_every_stage(offset_view, [a, np.zeros((3, 8), "int32"), np.zeros(68, "int32")], min_stages=2)
    # Element (i, j) is element 5 + 17 i + 2 j of B.
    picked = a[5 + 17 * np.arange(3)[:, None] + 2 * np.arange(8)[None, :]]
    written = a.copy()
    written[5 + 17 * np.arange(3)[:, None] + 2 * np.arange(8)[None, :]] = np.arange(8) * 100 + np.arange(3)[:, None]
    for mode in ("exact", "fast"):
        c, d = np.zeros((3, 8), "int32"), np.zeros(68, "int32")
        hm.emulate(a, c, d, mode=mode, check=True)
        np.testing.assert_array_equal(c, picked * 3 - np.arange(3, dtype="int32")[:, None])
        np.testing.assert_array_equal(d, written)


def test_a_view_whose_strides_overlap_stores_in_loop_order():
    a = _rand((4, 4))
    hm = check_every_stage(overlapping_view, [a, np.zeros(8, "float32")], min_stages=2)
    # V[i, j] is B[i + j]: the last write of each element wins.
    want = np.zeros(8, "float32")
    for i in range(4):
        for j in range(4):
            want[i + j] = a[i, j] + np.float32(i)
    out = np.zeros(8, "float32")
    hm.emulate(a, out, stage=0, mode="fast")
    np.testing.assert_array_equal(out, want)
    assert "reach an element twice" in hm.explain(0)


@T.prim_func(s_tir=True)
def vector_view(A: T.Buffer((32,), "float32"), C: T.Buffer((2, 4), "float32")):
    B = T.decl_buffer([32], "float32")
    for k in range(32):
        B[k] = A[k]
    V = T.decl_buffer([2], "float32x4", data=B.data, strides=[4])
    for i in range(2):
        C[i, 0:4] = V[i]


def test_a_strided_view_of_vectors_is_refused_by_name():
    # TVM's StorageRewrite rejects it too, so the generator is asked directly.
    for mode in ("exact", "fast"):
        with pytest.raises(UnsupportedConstructError, match="strided buffer: V of vectors"):
            generate_kernel(vector_view, "vector_view", mode=mode)
