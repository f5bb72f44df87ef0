"""Random index inputs lie within the extent they index when it is symbolic: an expression of sizes
(``n * 12``) or the smallest of several (``min(n, m)``)."""
from __future__ import annotations

import numpy as np
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.signature import random_arguments


# Random index inputs lie within an extent that is an expression of sizes (``n * 12``).
#
# relax's ``take`` of a flattened ``(3, n, 4)`` tensor reads ``lv[ia[i]]`` from a buffer of length
# ``n * 12``: the extent is neither a constant nor a plain size var.  Without an ``index_extent`` the
# indices stayed plain random integers in [-100, 100], so the zoo's native run was refused (the
# emulation reads ``lv[-19]``) and the kernel counted as a crash (takeaxes.take3 of probe 14a).


@T.prim_func
def take_flat(a: T.handle, ia: T.Buffer((T.int64(6),), "int64"), n: T.int64, b: T.handle):
    # relax passes n, which only the expression n * 12 uses, as a scalar parameter
    lv = T.match_buffer(a, (n * T.int64(12),), "float32")
    out = T.match_buffer(b, (T.int64(6),), "float32")
    for i in range(T.int64(6)):
        out[i] = lv[ia[i]]


@T.prim_func
def take_rows(a: T.handle, ids: T.Buffer((T.int64(5),), "int32"), n: T.int64, m: T.int64, b: T.handle):
    tab = T.match_buffer(a, (n + m, T.int64(3)), "float32")
    out = T.match_buffer(b, (T.int64(5), T.int64(3)), "float32")
    for i, j in T.grid(T.int64(5), T.int64(3)):
        out[i, j] = tab[T.Cast("int64", ids[i]), j]


def test_indices_into_a_flattened_symbolic_buffer_lie_in_range():
    hm = thn.build(take_flat)
    assert {p.name: p for p in hm.params}["ia"].index_extent.replace(" ", "") == "n*12"
    for seed in range(4):
        lv, ia, n, out = random_arguments(hm.params, seed=seed, sizes={"n": 2}, scalars={"n": 2})
        assert n == 2 and lv.shape == (24,) and 0 <= ia.min() and ia.max() < 24 and len(set(ia)) > 1
        assert hm.compare(lv, ia, n, out, mode="fast").ok
        hm.run_native(lv, ia, n, out)
        np.testing.assert_array_equal(out, lv[ia])


def test_indices_into_a_sum_of_sizes_lie_in_range():
    hm = thn.build(take_rows)
    assert {p.name: p for p in hm.params}["ids"].index_extent.replace(" ", "") == "n+m"
    for seed in range(4):
        tab, ids, n, m, out = random_arguments(hm.params, seed=seed, sizes={"n": 2, "m": 1}, scalars={"n": 2, "m": 1})
        assert tab.shape == (3, 3) and 0 <= ids.min() and ids.max() < 3
        assert hm.compare(tab, ids, n, m, out, mode="fast").ok
        hm.run_native(tab, ids, n, m, out)
        np.testing.assert_array_equal(out, tab[ids])


def test_zoo_inputs_of_a_flattened_take_are_in_range():
    # the zoo binds n = 5 (SYMBOLIC_SIZES): lv has 60 elements, every index lies in [0, 60)
    from tvm_hybrid_nb import zoo

    hm = thn.build(take_flat)
    lv, ia, n, out = zoo._inputs(hm.params, 0, "m.take")
    assert lv.shape == (60,) and 0 <= ia.min() and ia.max() < 60
    outcome = zoo.check_kernel("m.take", take_flat.with_attr("global_symbol", "main"), "none")
    assert outcome.outcome == "ok", outcome.reason


# Index arrays that index several dimensions, one symbolic at least, lie within the smallest.
#
# relax's gather_nd on x: (n, m, 4) with index tuples ind: (k, 2) reads x[ind[i, 0], ind[i, 1], j]:
# column 0 indexes n, column 1 indexes m.  The index extent was the *first symbolic* extent (n = 5),
# so column 1 went up to 4 >= m = 3 and the zoo's native run was refused (gatherndsym.te_gather_nd of
# probe 14a); with a constant and a symbolic extent, the constant won even when larger.  Now it is
# min(n, m) / min(8, n).


@T.prim_func(s_tir=True)
def gather_nd_sym(a: T.handle, ind: T.Buffer((T.int64(6), T.int64(2)), "int64"), b: T.handle):
    n, m = T.int64(), T.int64()
    x = T.match_buffer(a, (n, m, T.int64(4)), "float32")
    out = T.match_buffer(b, (T.int64(6), T.int64(4)), "float32")
    for i, j in T.grid(T.int64(6), T.int64(4)):
        with T.sblock("T_gather_nd"):
            vi, vj = T.axis.remap("SS", [i, j])
            out[vi, vj] = x[ind[vi, 0], ind[vi, 1], vj]


@T.prim_func(s_tir=True)
def gather_nd_mixed(a: T.handle, ind: T.Buffer((T.int64(6), T.int64(2)), "int64"), b: T.handle):
    n = T.int64()
    x = T.match_buffer(a, (T.int64(8), n), "float32")
    out = T.match_buffer(b, (T.int64(6),), "float32")
    for i in range(T.int64(6)):
        with T.sblock("T_gather_nd"):
            vi = T.axis.spatial(T.int64(6), i)
            out[vi] = x[ind[vi, 0], ind[vi, 1]]


def _numpy_gather(x, ind):
    return x[tuple(ind.T)]


def test_gather_nd_indices_lie_within_both_symbolic_dimensions():
    hm = thn.build(gather_nd_sym)
    assert {p.name: p for p in hm.params}["ind"].index_extent.replace(" ", "") in ("min(n,m)", "min(m,n)")
    for seed in range(4):
        x, ind, out = random_arguments(hm.params, seed=seed, sizes={"n": 5, "m": 3})
        assert x.shape == (5, 3, 4) and 0 <= ind.min() and ind.max() < 3
        assert hm.compare(x, ind, out, mode="fast").ok
        hm.run_native(x, ind, out)
        np.testing.assert_array_equal(out, _numpy_gather(x, ind))


def test_gather_nd_indices_lie_within_a_smaller_symbolic_than_constant_dimension():
    hm = thn.build(gather_nd_mixed)
    assert {p.name: p for p in hm.params}["ind"].index_extent.replace(" ", "") in ("min(n,8)", "min(8,n)")
    for seed in range(4):
        x, ind, out = random_arguments(hm.params, seed=seed, sizes={"n": 3})
        assert 0 <= ind.min() and ind.max() < 3
        assert hm.compare(x, ind, out, mode="fast").ok
        hm.run_native(x, ind, out)
        np.testing.assert_array_equal(out, _numpy_gather(x, ind))


def test_zoo_checks_a_symbolic_gather_nd():
    from tvm_hybrid_nb import zoo

    for func in (gather_nd_sym, gather_nd_mixed):
        for flavour in ("none", "dlight-gpu"):
            outcome = zoo.check_kernel("m.te_gather_nd", func.with_attr("global_symbol", "main"), flavour)
            assert outcome.outcome == "ok", (flavour, outcome.reason)
