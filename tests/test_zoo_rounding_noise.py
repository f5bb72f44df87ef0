"""A reordered float sum with heavy cancellation is compared within the reference's own sensitivity.

dlight's GPU schedule sums a row over a tree of threads; TVM's llvm reference sums it serially. Both
round, by up to about N units in the last place of the sum of the terms' magnitudes, and after heavy
cancellation that is far more than the result's units: the zoo called such a row "wrong" (a
dlight-gpu mean over (2, 314, 314): 2.1e-5 relative).  The zoo now measures how far the reference
moves when its inputs move by rounding-sized amounts and excuses differences within that, and only
those: a lost term is still a wrong answer.
"""
from __future__ import annotations

import numpy as np
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.zoo_outcomes import ROUNDING_NOISE_COMPARED

ROWS, COLS = 16, 314


@T.prim_func(s_tir=True)
def row_sum(x: T.Buffer((16, 314), "float32"), out: T.Buffer((16,), "float32")):
    T.func_attr({"op_pattern": 3, "tirx.noalias": True, "global_symbol": "main"})
    for i, k in T.grid(16, 314):
        with T.sblock("sum"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                out[vi] = T.float32(0)
            out[vi] = out[vi] + x[vi, vk]


def _cancelling_rows() -> np.ndarray:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((ROWS, COLS))
    return (x - x.mean(axis=1, keepdims=True) + 1e-5).astype(np.float32)  # each row sums to ~3e-3


def _setup():
    x = _cancelling_rows()
    native = thn.build(row_sum)
    args = [x.copy(), np.zeros(ROWS, np.float32)]
    native.run_native(*args)
    expected = native.result_values(args, None)
    target, mod = zoo.schedule(row_sum, "dlight-gpu")
    return x, native, expected, thn.build(mod, target=target)


def test_the_tree_and_the_serial_sum_are_both_within_the_rounding_bound_of_the_exact_sum():
    x, native, expected, gpu = _setup()
    out = np.zeros(ROWS, np.float32)
    gpu.emulate(x, out, stage=gpu.packed_api_index - 1, mode="fast")
    exact = x.astype(np.float64).sum(axis=1)
    bound = COLS * np.finfo(np.float32).eps * np.abs(x).astype(np.float64).sum(axis=1)
    assert (np.abs(out - exact) <= bound).all() and (np.abs(expected[0] - exact) <= bound).all()
    rel = np.abs(out.astype(np.float64) - expected[0]) / np.abs(expected[0])
    assert rel.max() > 1e-5  # beyond the plain tolerance: the case this is about


def test_a_reordered_sum_with_cancellation_is_ok_within_the_references_sensitivity():
    x, native, expected, gpu = _setup()
    inputs = [x, np.zeros(ROWS, np.float32)]
    plain = zoo.KernelOutcome("dlight-gpu", "m.sum", "ok")
    zoo.emulate_stages(gpu, inputs, expected, plain)
    assert plain.outcome == "wrong", plain.reason
    noise = zoo._rounding_noise(native, inputs, expected)
    allowed = zoo.KernelOutcome("dlight-gpu", "m.sum", "ok")
    zoo.emulate_stages(gpu, inputs, expected, allowed, find_noise=lambda: noise)
    assert allowed.outcome == "ok" and ROUNDING_NOISE_COMPARED in allowed.reason, allowed.reason
    # the allowance is rounding-sized: under a thousandth of a typical term of the row
    assert (noise[0] < 1e-3 * np.median(np.abs(x), axis=1)).all(), noise[0]


def test_a_lost_term_is_still_wrong_within_the_references_sensitivity():
    x, native, expected, gpu = _setup()
    inputs = [x, np.zeros(ROWS, np.float32)]
    lost = [expected[0].copy()]
    small = np.sort(np.abs(x[5]))[COLS // 10]  # a tenth of row 5's terms are smaller
    lost[0][5] -= small  # a small term of row 5 left out
    outcome = zoo.KernelOutcome("dlight-gpu", "m.sum", "ok")
    zoo.emulate_stages(gpu, inputs, lost, outcome,
                       find_noise=lambda: zoo._rounding_noise(native, inputs, expected))
    assert outcome.outcome == "wrong" and "(5,)" in outcome.reason, outcome.reason
