"""Reduced reproducers of what the schedule fuzzer (``tvm_hybrid_nb.fuzz``) found, kept as regressions.

Each test rebuilds the reduced case, checks it the way the fuzzer does (``check_case``) and checks
the emulation against an independent truth (numpy, or the native build of the unscheduled compute).
"""
from __future__ import annotations

import numpy as np

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.fuzz import FuzzCase, check_case, make_compute, schedule_for

# Emulator bug: StorageRewrite turns the rfactor buffer into a buffer of float32x3 vectors; the
# hybrid script allocated it as np.zeros(..., "float32x3") (TypeError), and fast mode indexed it per lane.
VECTOR_BUFFER = FuzzCase("reduction", 1103, [("reorder", "C", [0, 2, 1]), ("vectorize", "C", 2),
                                            ("rfactor", "C", 1, 0)])


def test_buffer_of_vectors_after_storage_rewrite_emulates_in_both_modes():
    result = check_case(VECTOR_BUFFER, stages="all")
    assert result.ok and result.category == "", str(result)
    compute = make_compute(VECTOR_BUFFER.kind, VECTOR_BUFFER.seed)
    sch, applied = schedule_for(compute, VECTOR_BUFFER.steps)
    assert applied == VECTOR_BUFFER.steps
    hm = thn.build(sch)
    stage = hm.stage("tirx.StorageRewrite")
    assert "float32x3" in stage.script  # the construct this regression is about is really there
    n = 5
    a, b, c = hm.random_inputs(seed=3, sizes={"n": n})
    truth = np.min(a[:, :, None] * b[None, :, :], axis=1)  # float32 products, exact min
    for mode in ("exact", "fast"):
        out = hm.emulate(a, b, np.zeros_like(c), stage=stage.index, mode=mode)
        np.testing.assert_array_equal(out, truth)
