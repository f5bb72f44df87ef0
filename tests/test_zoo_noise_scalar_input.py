"""The zoo's rounding-noise allowance (``_rounding_noise``) moves every float input by a rounding-sized
amount and runs the native reference again.  On a 0-d input (a per-tensor quantization scale, the
``max(abs(x))`` a fused kernel divides by) numpy's arithmetic returned a scalar, and the native run
refused it: ``ArgumentTypeError: parameter lv5: expected a numpy array of float32, got float32`` -
the kernel crashed instead of being compared."""
from __future__ import annotations

import numpy as np
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import zoo


@T.prim_func(s_tir=True)
def _scaled(s: T.Buffer((), "float32"), x: T.Buffer((8,), "float32"), out: T.Buffer((8,), "float32")):
    T.func_attr({"tirx.noalias": True})
    for i in range(8):
        with T.sblock("o"):
            v = T.axis.spatial(8, i)
            out[v] = x[v] / s[()]


def test_rounding_noise_moves_a_zero_dimensional_input():
    hm = thn.build(_scaled.with_attr("global_symbol", "main"), target="llvm")
    s, x = np.array(0.5, np.float32), np.linspace(-1, 1, 8).astype(np.float32)
    inputs = [s, x, np.zeros(8, np.float32)]
    args = [a.copy() for a in inputs]
    expected = hm.result_values(args, hm.run_native(*args))
    noise = zoo._rounding_noise(hm, inputs, expected)
    assert len(noise) == 1 and noise[0].shape == (8,)
    assert np.all(np.isfinite(noise[0])) and 0 < noise[0].max() < 1e-4
