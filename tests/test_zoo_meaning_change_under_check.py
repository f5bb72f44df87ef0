"""A wrong answer that a documented pass explains (TVM_MEANING_FINDINGS) was a TVM finding in fast runs
and the emulator's wrong answer under --check: check_kernel looked for the pass only without the
sanitizers.  Under check=True every stage up to the one that differs ran clean, so the search applies."""
from __future__ import annotations

from tvm.script import tirx as T

from tvm_hybrid_nb import zoo


@T.prim_func(s_tir=True)
def _nan_to_num(x: T.Buffer((4, 9), "float32"), out: T.Buffer((4, 9), "float32")):
    T.func_attr({"tirx.noalias": True, "global_symbol": "main"})
    s = T.sblock_alloc_buffer((4, 9))
    for i, j in T.grid(4, 9):
        with T.sblock("sqrt"):
            vi, vj = T.axis.remap("SS", [i, j])
            s[vi, vj] = T.sqrt(x[vi, vj])
    for i, j in T.grid(4, 9):
        with T.sblock("where"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = T.Select(s[vi, vj] == s[vi, vj], s[vi, vj], T.float32(-7))


def test_a_documented_meaning_change_is_a_tvm_finding_under_the_sanitizers_too():
    fast = zoo.check_kernel("t.nan_to_num", _nan_to_num, "none")
    checked = zoo.check_kernel("t.nan_to_num", _nan_to_num, "none", check=True)
    assert fast.outcome == checked.outcome == "wrong", (fast.reason, checked.reason)
    assert zoo.tvm_finding(fast) == zoo.tvm_finding(checked) == zoo.TVM_MEANING_FINDINGS["StmtSimplify"], checked.reason
