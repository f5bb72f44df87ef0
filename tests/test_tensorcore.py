"""Tensor-core (WMMA) kernels: the intrinsics dlight's Matmul rule tensorizes float16 matmuls with,
emulated at every stage and compared with numpy (no GPU needed)."""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.codegen.tensorcore import FLOAT_MMA_NOTE


@T.prim_func
def one_warp_mma(A: T.Buffer((16, 16), "float16"), B: T.Buffer((16, 16), "float16"),
                 C: T.Buffer((16, 16), "float32")):
    # One warp: C = A @ B.T, B loaded column-major (element (k, n) of the fragment is B[n, k]).
    T.func_attr({"global_symbol": "main"})
    Af = T.alloc_buffer((256,), "float16", scope="wmma.matrix_a")
    Bf = T.alloc_buffer((256,), "float16", scope="wmma.matrix_b")
    Cf = T.alloc_buffer((256,), "float32", scope="wmma.accumulator")
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        T.tvm_fill_fragment(Cf.data, 16, 16, 16, 0, T.float32(0))
        T.tvm_load_matrix_sync(Af.data, 16, 16, 16, 0,
                               T.tvm_access_ptr(T.type_annotation("float16"), A.data, 0, 256, 1), 16, "row_major")
        T.tvm_load_matrix_sync(Bf.data, 16, 16, 16, 0,
                               T.tvm_access_ptr(T.type_annotation("float16"), B.data, 0, 256, 1), 16, "col_major")
        T.tvm_mma_sync(Cf.data, 0, Af.data, 0, Bf.data, 0, Cf.data, 0)
        T.tvm_mma_sync(Cf.data, 0, Af.data, 0, Bf.data, 0, Cf.data, 0)  # accumulates: 2 * A @ B.T
        T.tvm_store_matrix_sync(Cf.data, 16, 16, 16, 0,
                                T.tvm_access_ptr(T.type_annotation("float32"), C.data, 0, 256, 2), 16, "row_major")


def _k_order_matmul(a, b_kn, c):
    """``c + a @ b_kn``, each element summed in k order in float32 (the emulator's documented order)."""
    acc = c.astype(np.float32)
    for k in range(a.shape[1]):
        acc = acc + a[:, k, None].astype(np.float32) * b_kn[None, k, :].astype(np.float32)
    return acc


def test_wmma_intrinsics_load_multiply_and_store_tiles_as_cuda_defines_them():
    hm = thn.build(one_warp_mma, target="cuda")
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(-1, 1, (16, 16)).astype(np.float16) for _ in range(2))
    once = _k_order_matmul(a, b.T, np.zeros((16, 16), np.float32))
    want = _k_order_matmul(a, b.T, once)
    np.testing.assert_allclose(want, 2 * (a.astype(np.float64) @ b.T.astype(np.float64)), rtol=1e-5, atol=1e-5)
    for mode in ("exact", "fast"):
        c = np.zeros((16, 16), np.float32)
        hm.emulate(a, b, c, mode=mode, check=True)  # C is written through a pointer, in place
        np.testing.assert_array_equal(c, want)
    assert FLOAT_MMA_NOTE in hm.stages[0].kernel("fast", False).source  # said, not hidden


def test_a_float16_matmul_dlight_tensorizes_is_exact_at_every_stage():
    # dlight's Matmul rule tensorizes a float16 matmul for sm_80 when no fixed extent is 64 or less:
    # here the sequence length is symbolic.  The float16 accumulator rounds after every mma_sync
    # (16 products summed in float32), so the truth is that order, in numpy.
    from tvm.relax.frontend.nn import op, spec

    from tvm_hybrid_nb import zoo
    from tests.test_zoo import _nn_kernels

    kernels = _nn_kernels("tc", lambda self, x, w: op.matmul(x, w),
                          {"x": spec.Tensor((1, "n", 128), "float16"), "w": spec.Tensor((128, 128), "float16")})
    (matmul,) = [k for k in kernels if k.cuda is not None]
    target, mod = zoo.schedule(matmul.cuda, "dlight-gpu")
    assert "tvm_mma_sync" in mod["main"].script()
    hm = thn.build(mod, target=target)
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (1, 4, 128)).astype(np.float16)
    w = rng.uniform(-1, 1, (128, 128)).astype(np.float16)
    acc = _tiled_k_order_matmul(x[0], w, 16, np.float16)
    for stage in (0, hm.stage("s_tir.LowerMatchBuffer").index, hm.stage("tirx.ConvertSSA").index):
        out = np.zeros((1, 4, 128), np.float16)
        hm.emulate(x, w, out, stage=stage, mode="fast")
        np.testing.assert_array_equal(out[0], acc, err_msg=hm.stages[stage].label)
    outcome = zoo.check_kernel(matmul.name, matmul.cuda, "dlight-gpu", reference=matmul.reference)
    assert outcome.outcome == "ok" and outcome.stages_checked > 15, outcome


def test_a_fragment_shape_that_cannot_be_told_is_refused_by_name():
    @T.prim_func
    def orphan(C: T.Buffer((256,), "float32")):
        T.func_attr({"global_symbol": "main"})
        Af = T.alloc_buffer((256,), "float16", scope="wmma.matrix_a")
        Bf = T.alloc_buffer((256,), "float16", scope="wmma.matrix_b")
        Cf = T.alloc_buffer((256,), "float32", scope="wmma.accumulator")
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            T.tvm_mma_sync(Cf.data, 0, Af.data, 0, Bf.data, 0, Cf.data, 0)

    hm = thn.build(orphan, target="cuda", on_failure="keep")  # TVM's InferFragment refuses it too
    from tvm_hybrid_nb.errors import HybridError

    with pytest.raises(HybridError, match="tvm_mma_sync.*of unknown shape"):
        hm.stages[0].kernel("exact", False)


def test_a_batched_float16_matmul_of_two_symbolic_lengths_is_exact_at_every_stage():
    # Attention scores q @ k.T of float16 heads of 128: the fragments have a leading batch (head)
    # dimension and symbolic rows and columns, padded to whole tiles.
    from tvm.relax.frontend.nn import op, spec

    from tvm_hybrid_nb import zoo
    from tests.test_zoo import _nn_kernels

    kernels = _nn_kernels("scores", lambda self, q, k: op.matmul(q, op.permute_dims(k, [0, 1, 3, 2])),
                          {"q": spec.Tensor((1, 2, "n", 128), "float16"), "k": spec.Tensor((1, 2, "m", 128), "float16")})
    (scores,) = [k for k in kernels if k.cuda is not None and "matmul" in k.name]
    assert "tvm_mma_sync" in zoo.schedule(scores.cuda, "dlight-gpu")[1]["main"].script()
    outcome = zoo.check_kernel(scores.name, scores.cuda, "dlight-gpu", reference=scores.reference)
    assert outcome.outcome == "ok" and outcome.stages_checked > 15, outcome


@T.prim_func
def mma_then_wider_epilogue(A: T.Buffer((16, 16), "float16"), B: T.Buffer((16, 16), "float16"),
                            C: T.Buffer((16, 16), "float32"), D: T.Buffer((16, 16), "float32")):
    # MetaSchedule's tensor-core samples have this shape: a one-warp wmma launch and, in the same
    # function (before SplitHostDevice), an epilogue launch binding threadIdx.x to 64.
    T.func_attr({"global_symbol": "main"})
    Af = T.alloc_buffer((256,), "float16", scope="wmma.matrix_a")
    Bf = T.alloc_buffer((256,), "float16", scope="wmma.matrix_b")
    Cf = T.alloc_buffer((256,), "float32", scope="wmma.accumulator")
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        T.tvm_fill_fragment(Cf.data, 16, 16, 16, 0, T.float32(0))
        T.tvm_load_matrix_sync(Af.data, 16, 16, 16, 0,
                               T.tvm_access_ptr(T.type_annotation("float16"), A.data, 0, 256, 1), 16, "row_major")
        T.tvm_load_matrix_sync(Bf.data, 16, 16, 16, 0,
                               T.tvm_access_ptr(T.type_annotation("float16"), B.data, 0, 256, 1), 16, "col_major")
        T.tvm_mma_sync(Cf.data, 0, Af.data, 0, Bf.data, 0, Cf.data, 0)
        T.tvm_store_matrix_sync(Cf.data, 16, 16, 16, 0,
                                T.tvm_access_ptr(T.type_annotation("float32"), C.data, 0, 256, 2), 16, "row_major")
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(64, thread="threadIdx.x"):
            D[(bx * 64 + tx) // 16, (bx * 64 + tx) % 16] = C[(bx * 64 + tx) // 16, (bx * 64 + tx) % 16] + T.float32(1)


def test_a_fragment_is_one_warp_of_its_own_launch_not_the_functions_widest():
    hm = thn.build(mma_then_wider_epilogue, target="cuda")
    rng = np.random.default_rng(2)
    a, b = (rng.uniform(-1, 1, (16, 16)).astype(np.float16) for _ in range(2))
    want = _k_order_matmul(a, b.T, np.zeros((16, 16), np.float32))
    for mode in ("exact", "fast"):
        c, d = np.zeros((16, 16), np.float32), np.zeros((16, 16), np.float32)
        hm.emulate(a, b, c, d, mode=mode, check=True)
        np.testing.assert_array_equal(c, want)
        np.testing.assert_array_equal(d, want + np.float32(1))


def test_a_fragment_in_a_launch_wider_than_a_warp_is_refused_by_name():
    wide = mma_then_wider_epilogue.script().replace(
        'for tx in T.thread_binding(32, thread="threadIdx.x")', 'for tx in T.thread_binding(64, thread="threadIdx.x")')
    import tvm
    from tvm_hybrid_nb.errors import HybridError

    hm = thn.build(tvm.script.from_source(wide), target="cuda", on_failure="keep")
    with pytest.raises(HybridError, match="Af in a block whose threadIdx.x extent is not one warp"):
        hm.stages[0].kernel("exact", False)


# Metal's simdgroup matrices: dlight's Matmul rule tries MetalMatmul first for metal, which
# tensorizes every float16 matmul into 8x8 simdgroup tiles (filled, loaded, multiplied, stored by
# a simdgroup of 32 threads).  TVM's own Metal code generator gives their meaning: an array of 8x8
# matrices, ``simdgroup_load(d[index], ptr, stride, 0, transpose)``.

@T.prim_func
def one_simdgroup(A: T.Buffer((8, 16), "float16"), B: T.Buffer((8, 16), "float16"), C: T.Buffer((8, 8), "float16"),
                  D: T.Buffer((8, 8), "float16")):
    # C = A @ B.T over two tiles of k, B loaded transposed; D = C.T, stored transposed.
    T.func_attr({"global_symbol": "main"})
    for tx in T.thread_binding(32, thread="threadIdx.x"):
        Af = T.alloc_buffer((128,), "float16", scope="metal.simdgroup")
        Bf = T.alloc_buffer((128,), "float16", scope="metal.simdgroup")
        Cf = T.alloc_buffer((64,), "float16", scope="metal.simdgroup")
        T.metal.make_filled_simdgroup_matrix(Cf.data, 0, T.float32(0), 8, 8)
        for k in range(2):
            T.metal.simdgroup_load(Af.data, k, T.tvm_access_ptr(T.type_annotation("float16"), A.data, k * 8, 120, 1),
                                   16, 8, 8, T.bool(False))
            T.metal.simdgroup_load(Bf.data, k, T.tvm_access_ptr(T.type_annotation("float16"), B.data, k * 8, 120, 1),
                                   16, 8, 8, T.bool(True))
            T.metal.simdgroup_multiply_accumulate(Cf.data, 0, Af.data, k, Bf.data, k, Cf.data, 0)
        T.metal.simdgroup_store(Cf.data, 0, T.tvm_access_ptr(T.type_annotation("float16"), C.data, 0, 64, 2),
                                8, 8, 8, T.bool(False))
        T.metal.simdgroup_store(Cf.data, 0, T.tvm_access_ptr(T.type_annotation("float16"), D.data, 0, 64, 2),
                                8, 8, 8, T.bool(True))


def _tiled_k_order_matmul(a, b_kn, tile: int, dtype) -> np.ndarray:
    """``a @ b_kn`` as a chain of multiply-accumulates of ``tile`` steps of k, each summed in k order
    in float32 and rounded once to the accumulator's ``dtype`` (the emulator's documented order)."""
    acc = np.zeros((a.shape[0], b_kn.shape[1]), dtype)
    for k0 in range(0, a.shape[1], tile):
        acc = _k_order_matmul(a[:, k0:k0 + tile], b_kn[k0:k0 + tile], acc).astype(dtype)
    return acc


def test_simdgroup_intrinsics_fill_load_multiply_and_store_tiles_as_metal_defines_them():
    hm = thn.build(one_simdgroup, target="metal")
    rng = np.random.default_rng(3)
    a, b = (rng.uniform(-1, 1, (8, 16)).astype(np.float16) for _ in range(2))
    want = _tiled_k_order_matmul(a, b.T, 8, np.float16)
    np.testing.assert_allclose(want, a.astype(np.float64) @ b.T.astype(np.float64), rtol=0, atol=2e-2)
    checked = [st for st in hm.stages if st.changed and st.index < hm.packed_api_index]
    assert len(checked) >= 6 and all(st.emulatable for st in checked), [(st.label, st.reason) for st in checked]
    for st in checked:
        for mode in ("exact", "fast"):
            c, d = np.zeros((8, 8), np.float16), np.zeros((8, 8), np.float16)
            hm.emulate(a, b, c, d, stage=st.index, mode=mode, check=True)
            np.testing.assert_array_equal(c, want, err_msg=f"{st.label} {mode}")
            np.testing.assert_array_equal(d, want.T, err_msg=f"{st.label} {mode}")
    source = hm.stages[0].kernel("fast", False).source
    assert FLOAT_MMA_NOTE in source and "simdgroup_r" in source and "wmma_" not in source


@T.prim_func(s_tir=True)
def prefill_matmul(var_x: T.handle, w: T.Buffer((128, 128), "float16"), var_y: T.handle):
    T.func_attr({"tirx.noalias": True})
    n = T.int64()
    x = T.match_buffer(var_x, (T.int64(1), n, T.int64(128)), "float16")
    y = T.match_buffer(var_y, (T.int64(1), n, T.int64(128)), "float16")
    for b, i, j, k in T.grid(T.int64(1), n, T.int64(128), T.int64(128)):
        with T.sblock("matmul"):
            vb, vi, vj, vk = T.axis.remap("SSSR", [b, i, j, k])
            with T.init():
                y[vb, vi, vj] = T.float16(0)
            y[vb, vi, vj] = y[vb, vi, vj] + x[vb, vi, vk] * w[vk, vj]


def test_a_float16_matmul_dlight_tensorizes_for_metal_is_exact_at_every_stage():
    # A symbolic sequence length, padded to whole 16 x 64 tiles (pad_einsum): rows 20.. of the last
    # tile are computed and dropped.  Every stage, before and after LowerMatchBuffer, under the
    # sanitizers too (the shared tiles, the simdgroups' barriers).
    import tvm
    from tvm.s_tir import dlight as dl

    target = tvm.target.Target("metal")
    with target:
        mod = dl.ApplyDefaultSchedule(dl.gpu.Matmul())(tvm.IRModule({"main": prefill_matmul}))
    assert "simdgroup_multiply_accumulate" in mod["main"].script()
    hm = thn.build(mod, target=target)
    rng = np.random.default_rng(4)
    x = rng.uniform(-1, 1, (1, 20, 128)).astype(np.float16)
    w = rng.uniform(-1, 1, (128, 128)).astype(np.float16)
    want = _tiled_k_order_matmul(x[0], w, 8, np.float16)
    checked = [st for st in hm.stages if st.changed and st.index < hm.packed_api_index]
    assert len(checked) > 12 and all(st.emulatable for st in checked), [(st.label, st.reason) for st in checked]
    for st in checked:
        y = np.zeros((1, 20, 128), np.float16)
        hm.emulate(x, w, y, stage=st.index, mode="fast", check=st.index in (0, checked[-1].index))
        np.testing.assert_array_equal(y[0], want, err_msg=st.label)


def test_a_simdgroup_matrix_other_than_8x8_is_refused_by_name():
    wide = one_simdgroup.script().replace("Cf.data, 0, T.float32(0.0), 8, 8)", "Cf.data, 0, T.float32(0.0), 16, 16)")
    import tvm
    from tvm_hybrid_nb.errors import HybridError

    hm = thn.build(tvm.script.from_source(wide), target="metal", on_failure="keep")  # Metal's codegen refuses it too
    with pytest.raises(HybridError, match="make_filled_simdgroup_matrix.*16x16 matrix"):
        hm.stages[0].kernel("exact", False)
