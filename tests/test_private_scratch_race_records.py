"""Sanitizer records of a parallel loop's privatised scratch.

dlight.cpu's reduction rule recomputes a row's sum in every iteration of a parallel loop, in scratch
allocated at the root, which fast mode gives one copy per iteration.  Each write to a copy was still
recorded for the race check and sorted: a float16 RMS norm over 4,096 took 110 s a stage under
``check=True`` (0.3 s without).  Iterations never meet in their own copies, so those accesses are not
recorded; the buffers the iterations share still are, and a race there is still found.
"""
from __future__ import annotations

import ast

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError


def _row_norms(stride: int):
    """Each parallel iteration sums its row's squares in root scratch and stores the norm in
    ``B[i * stride]``: its own element, or with ``stride`` 0 one element for all."""

    @T.prim_func(s_tir=True)
    def row_norms(A: T.Buffer((64, 16), "float32"), B: T.Buffer((64,), "float32")):
        acc = T.sblock_alloc_buffer((1,), "float32")
        for i in T.parallel(64):
            for k in range(16):
                with T.sblock("sum"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    with T.init():
                        acc[0] = T.float32(0)
                    acc[0] = acc[0] + A[vi, vk] * A[vi, vk]
            with T.sblock("out"):
                vi = T.axis.spatial(64, i)
                B[vi * stride] = T.sqrt(acc[0])
    return row_norms


def _rows():
    return np.random.default_rng(0).standard_normal((64, 16)).astype(np.float32)


def test_private_copies_are_not_recorded_and_the_result_is_right():
    hm = thn.build(_row_norms(1))
    calls = [node for node in ast.walk(ast.parse(hm.stage(0).kernel("fast", True).source))
             if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "access"]
    # A race record is either spelled out (``log=race_log, lanes=...``) or the loop body's ``**record``.
    logged = {node.args[0].id: any(k.arg in ("log", None) for k in node.keywords) for node in calls}
    assert logged == {"acc_1": False, "A": True, "B": True}  # the copy per iteration, the shared arrays
    a = _rows()
    want = np.sqrt((a.astype(np.float64) ** 2).sum(axis=1))
    for stage in (0, hm.packed_api_index - 1):
        for mode in ("fast", "exact"):
            b = np.zeros(64, np.float32)
            hm.emulate(a, b, stage=stage, mode=mode, check=True)
            np.testing.assert_allclose(b, want, rtol=1e-5)


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_a_race_on_memory_the_iterations_share_is_still_found(mode):
    hm = thn.build(_row_norms(0))
    with pytest.raises(EmulationError, match=r"data race on B\[0\]"):
        hm.emulate(_rows(), np.zeros(64, np.float32), stage=0, mode=mode, check=True)
