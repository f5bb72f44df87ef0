"""A float16 sum in another order than the serial reference's can differ from it several-fold.

A float16 softmax over an LM head's 32,000 words (dlight's GPU rules): the unscheduled kernel sums
the exponentials one after another in float16, and the sum stalls where half a unit in its last place
outgrows the terms (near 256 for terms around 0.03); dlight's schedule sums 125 terms a thread and
the 256 partial sums in a tree, which reaches 1,019 as a float32 sum does.  The emulator computes the
tree's values; the zoo compared them with the serial llvm build and called the GPU kernel wrong.
Where the serial float16 reference is itself off the kernel computed in float32, a reordered
schedule's element near the float32 value is no wrong answer (said so in the outcome).  A GPU with
bfloat16 arithmetic (sm_80) rounds a bfloat16 sum at every step, where TVM's llvm code sums in float32:
there the unscheduled kernel's meaning on the GPU is the reference, as for NaN's.
"""
from __future__ import annotations

import numpy as np
from tvm import te

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.zoo_reference import CUDA_REFERENCE, _expected_on_gpu, _outputs_equal, _wide_reference

N = 8192


def _exp_sum():
    x = te.placeholder((4, N), "float16", name="x")
    k = te.reduce_axis((0, N), name="k")
    y = te.compute((4,), lambda i: te.sum(te.exp(x[i, k]), axis=k), name="y")
    return te.create_prim_func([x, y])


def _inputs():
    return np.random.default_rng(0).uniform(-1, 1, (4, N)).astype(np.float16)


def test_the_gpu_tree_sum_is_near_the_exact_sum_and_the_serial_one_stalls():
    func, x = _exp_sum(), _inputs()
    exact = np.exp(x).astype(np.float64).sum(axis=1)  # float16 terms, as the kernel rounds them
    native = thn.build(func, target="llvm")
    serial = np.zeros(4, np.float16)
    native.run_native(x, serial)
    assert (serial < 0.8 * exact).all()  # stalled: 4,096 <= sum < 8,192 has units of 4, terms near 1.2
    target, mod = zoo.schedule(func, "dlight-gpu")
    gpu = thn.build(mod, target=target)
    last = max(s.index for s in gpu.stages if s.changed and s.index < gpu.packed_api_index)
    tree = np.zeros(4, np.float16)
    gpu.emulate(x, tree, stage=last, mode="fast")
    np.testing.assert_allclose(tree.astype(np.float64), exact, rtol=4e-3)
    wide = _wide_reference(func, [x, np.zeros(4, np.float16)])
    np.testing.assert_allclose(wide[0], exact, rtol=1e-3)
    # Against the serial reference alone the tree is far beyond any rounding tolerance.
    assert _outputs_equal([tree], [serial], reordered=True, arithmetic_eps=2.0 ** -10) is not None
    assert _outputs_equal([tree], [serial], reordered=True, arithmetic_eps=2.0 ** -10, wide=wide) is None


def test_the_zoo_compares_a_reordered_float16_sum_with_the_float32_computation_too():
    func = _exp_sum()
    gpu = zoo.check_kernel("half.exp_sum", func, "dlight-gpu")
    assert gpu.outcome == "ok" and zoo.WIDE_REFERENCE_COMPARED in gpu.reason, gpu
    assert gpu.stages_checked > 5
    for flavour in ("none", "dlight-cpu"):  # serial sums: the float16 reference alone
        outcome = zoo.check_kernel("half.exp_sum", func, flavour)
        assert outcome.outcome == "ok" and zoo.WIDE_REFERENCE_COMPARED not in outcome.reason, outcome


def test_the_float32_values_excuse_only_elements_where_the_serial_reference_is_off_them():
    eps = 2.0 ** -10
    want = np.array([1000.0, 100.0], np.float16)
    wide = [np.array([1000.0, 400.0])]
    tolerance = 2 * 8 * eps * 1000.0  # reordered: 8 units of the largest value, and 8 of the element's
    # Element 0: the serial reference agrees with float32; an element 1.8 tolerances off it is wrong
    # although it is within one tolerance of the float32 value (1.8 would pass as float32's too).
    near_wide = np.array([1000.0 + 1.8 * tolerance, 400.0], np.float16)
    wide_near = [np.array([1000.0 + 0.9 * tolerance, 400.0])]
    assert _outputs_equal([near_wide], [want], reordered=True, arithmetic_eps=eps, wide=wide_near) is not None
    # Element 1: the serial reference is off float32 (stalled); the float32 value is accepted there.
    got = np.array([1000.0, 400.0], np.float16)
    assert _outputs_equal([got], [want], reordered=True, arithmetic_eps=eps) is not None
    assert _outputs_equal([got], [want], reordered=True, arithmetic_eps=eps, wide=wide) is None
    # Anywhere from the serial value to float32's (a partly stalled order), but not beyond either.
    partly = np.array([1000.0, 250.0], np.float16)
    assert _outputs_equal([partly], [want], reordered=True, arithmetic_eps=eps, wide=wide) is None
    for beyond in (500.0, 60.0):
        got = np.array([1000.0, beyond], np.float16)
        assert _outputs_equal([got], [want], reordered=True, arithmetic_eps=eps, wide=wide) is not None
    # Not for a kernel whose order is the reference's (the unscheduled flavour).
    assert _outputs_equal([got], [want], reordered=False, wide=wide) is not None


def _bf16_softmax(n=4096):
    x = te.placeholder((2, n), "bfloat16", name="x")
    k = te.reduce_axis((0, n), name="k")
    total = te.compute((2,), lambda i: te.sum(te.exp(x[i, k]), axis=k), name="total")
    y = te.compute((2, n), lambda i, j: te.exp(x[i, j]) / total[i], name="y")
    return te.create_prim_func([x, y])


def test_a_gpu_with_bfloat16_arithmetic_rounds_the_serial_sum_where_llvm_code_does_not():
    # sm_80 rounds every bfloat16 operation: the serial sum of 4,096 exponentials (terms near 1.2)
    # stalls where half a unit in its last place passes them; TVM's llvm code sums in float32
    # (BF16ComputeLegalize holds the allocation so) and gets near the exact sum.
    import ml_dtypes

    func = _bf16_softmax()
    x = np.random.default_rng(0).uniform(-1, 1, (2, 4096)).astype(ml_dtypes.bfloat16)
    native = np.zeros_like(x)
    thn.build(func, target="llvm").run_native(x, native)
    on_gpu = _expected_on_gpu(func, zoo.cuda_target(), [x, np.zeros_like(x)], [native])
    assert on_gpu is not None  # the meanings differ
    terms = np.exp(x.astype(np.float32)).astype(ml_dtypes.bfloat16)
    for row in range(2):
        total = ml_dtypes.bfloat16(0)
        for term in terms[row]:
            total = ml_dtypes.bfloat16(np.float32(total) + np.float32(term))
        exact = terms[row].astype(np.float64).sum()
        assert float(total) < 0.5 * exact  # stalled
        want = (terms[row].astype(np.float32) / np.float32(total)).astype(ml_dtypes.bfloat16)
        np.testing.assert_allclose(on_gpu[0][row].astype(np.float64), want.astype(np.float64), rtol=2 ** -7)
        # llvm's reference is near the exact sum instead
        np.testing.assert_allclose(native[row].astype(np.float64), terms[row] / exact, rtol=0.05, atol=1e-6)


def test_the_zoo_compares_a_bfloat16_gpu_softmax_with_its_meaning_on_the_gpu_and_in_float32():
    gpu = zoo.check_kernel("bf16.softmax", _bf16_softmax(), "dlight-gpu")
    assert gpu.outcome == "ok" and gpu.reason.startswith(CUDA_REFERENCE), gpu
    assert zoo.WIDE_REFERENCE_COMPARED in gpu.reason  # the thread tree's stages land near float32's sum
