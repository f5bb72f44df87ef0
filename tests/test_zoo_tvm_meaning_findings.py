"""s_tir.StmtSimplify folds float expressions with integer rules (`x == x` to true, `x - x` to 0,
`!(x < c)` to `x >= c`, `(x + c) - c` to `x`), so that the native build computes something else than the
kernel's TIR says for NaN, infinities and rounding.  The emulation of the stages before the pass follows
the IR (numpy is the truth), the stages from it on follow the native build: the zoo says where the
result changes and reports a documented pass as a TVM finding, not as the emulator's wrong answer."""
from __future__ import annotations

import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import zoo


@T.prim_func(s_tir=True)
def _nan_to_num(x: T.Buffer((4, 9), "float32"), out: T.Buffer((4, 9), "float32")):
    T.func_attr({"tirx.noalias": True})
    s = T.sblock_alloc_buffer((4, 9))
    for i, j in T.grid(4, 9):
        with T.sblock("sqrt"):
            vi, vj = T.axis.remap("SS", [i, j])
            s[vi, vj] = T.sqrt(x[vi, vj])
    for i, j in T.grid(4, 9):
        with T.sblock("where"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = T.Select(s[vi, vj] == s[vi, vj], s[vi, vj], T.float32(-7))


@T.prim_func(s_tir=True)
def _sub_self(x: T.Buffer((8,), "float32"), out: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.sblock("sub"):
            v = T.axis.spatial(8, i)
            out[v] = T.log(x[v]) - T.log(x[v])


@pytest.mark.parametrize("func, truth", [
    (_nan_to_num, lambda x: np.where(np.isnan(np.sqrt(x)), np.float32(-7), np.sqrt(x))),
    (_sub_self, lambda x: np.log(x) - np.log(x)),
])
def test_stmt_simplify_changes_float_results(func, truth):
    x = np.random.default_rng(0).uniform(-1, 1, [int(d) for d in func.params[0].ty.shape]).astype(np.float32)
    x.reshape(-1)[0] = 0.0  # log(0) - log(0): -inf - -inf
    with np.errstate(invalid="ignore", divide="ignore"):
        want = truth(x).astype(np.float32)
    hm = thn.build(func, target="llvm")
    out = np.zeros_like(x)
    hm.emulate(x.copy(), out, stage=0, mode="exact")
    np.testing.assert_array_equal(out, want)  # the IR as written: IEEE
    native = np.zeros_like(x)
    hm.run_native(x.copy(), native)
    assert not np.array_equal(native, want, equal_nan=True)  # if this fails, TVM fixed the simplifier
    simplified = np.zeros_like(x)
    first = next(s for s in hm.stages if s.name == "s_tir.StmtSimplify")
    hm.emulate(x.copy(), simplified, stage=first.index, mode="exact")
    np.testing.assert_array_equal(simplified, native)


def test_zoo_reports_the_simplifier_as_a_tvm_finding():
    outcome = zoo.check_kernel("t.nan_to_num", _nan_to_num.with_attr("global_symbol", "main"), "none")
    assert outcome.outcome == "wrong" and outcome.stage.endswith("input"), outcome.reason
    assert f"{zoo.MEANING_CHANGE} " in outcome.reason and "StmtSimplify" in outcome.reason, outcome.reason
    assert zoo.tvm_finding(outcome) == zoo.TVM_MEANING_FINDINGS["StmtSimplify"]


def test_a_wrong_answer_that_no_stage_explains_stays_the_emulators(monkeypatch):
    # Every stage gives the same (wrong) result: nothing is pinned on a pass.
    outcome = zoo.KernelOutcome("none", "t.sub", "wrong", stage="0 input", reason="differs")
    hm = thn.build(_sub_self, target="llvm")
    zoo.meaning_change(hm, [np.ones(8, np.float32), np.zeros(8, np.float32)], outcome, "fast")
    assert zoo.MEANING_CHANGE not in outcome.reason and zoo.tvm_finding(outcome) is None


def test_a_documented_meaning_change_is_a_tvm_finding_under_the_sanitizers_too():
    # check_kernel looked the pass up only without the sanitizers: under check=True the same TVM finding
    # was the emulator's wrong answer (every stage up to the one that differs ran clean there).
    func = _nan_to_num.with_attr("global_symbol", "main")
    fast = zoo.check_kernel("t.nan_to_num", func, "none")
    checked = zoo.check_kernel("t.nan_to_num", func, "none", check=True)
    assert fast.outcome == checked.outcome == "wrong", (fast.reason, checked.reason)
    assert zoo.tvm_finding(fast) == zoo.tvm_finding(checked) == zoo.TVM_MEANING_FINDINGS["StmtSimplify"], checked.reason


@T.prim_func(s_tir=True)
def _vectorized_column_sum(A: T.Buffer((4, 4), "float32"), B: T.Buffer((4,), "float32")):
    # As TVM's Adreno Pool2D rule schedules a pool: a local accumulator under a vectorized loop
    # around the serial reduction.
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    acc = T.sblock_alloc_buffer((4,), scope="local")
    for j in T.vectorized(4):
        for r in range(4):
            with T.sblock("acc"):
                vj, vr = T.axis.remap("SR", [j, r])
                with T.init():
                    acc[vj] = T.float32(0)
                acc[vj] = acc[vj] + A[vr, vj]
        with T.sblock("B"):
            vj = T.axis.spatial(4, j)
            B[vj] = acc[vj]


def test_vectorize_loop_keeps_one_accumulator_for_every_lane():
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    hm = thn.build(_vectorized_column_sum, target="llvm")
    native = np.zeros(4, np.float32)
    hm.run_native(a, native)
    assert not np.array_equal(native, a.sum(axis=0))  # if this fails, TVM fixed VectorizeLoop
    for mode in ("fast", "exact"):
        out = np.zeros(4, np.float32)
        hm.emulate(a, out, stage=0, mode=mode, check=True)
        np.testing.assert_array_equal(out, a.sum(axis=0))  # the IR as written
        vectorized = next(s for s in hm.stages if s.name == "tirx.VectorizeLoop")
        out = np.zeros(4, np.float32)
        hm.emulate(a, out, stage=vectorized.index, mode=mode)
        np.testing.assert_array_equal(out, native)  # the pass's output, as TVM builds it
    outcome = zoo.check_kernel("t.colsum", _vectorized_column_sum, "none", check=True)
    assert outcome.outcome == "wrong" and "VectorizeLoop" in outcome.reason, outcome.reason
    assert zoo.tvm_finding(outcome) == zoo.TVM_MEANING_FINDINGS["VectorizeLoop"]
