"""Zero-size buffers: masked loads from them and views of them (zero-size slices, empty index arrays)."""
from __future__ import annotations

import numpy as np
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.runtime._memory import flat_view, load, rows_view, view


# A masked load from a buffer with no elements (a zero-size slice) reads nothing.
#
# relax's concat of x: (4, 6) with an empty slice e: (4, 0), scheduled by dlight's GPU Fallback,
# is one vectorised `select(6 <= v1, e[v0, v1 - 6], x[v0, v1])`: every lane of the load of `e` is
# masked out, but the fast-mode load indexed the empty buffer at 0 for them and raised IndexError
# (emptyslice.concatenate of probe 14a, dlight-gpu, a crash at stage 0).


@T.prim_func(s_tir=True)
def concat_empty(x: T.Buffer((T.int64(4), T.int64(6)), "float32"), empty: T.Buffer((T.int64(4), T.int64(0)), "float32"),
                 T_concat: T.Buffer((T.int64(4), T.int64(6)), "float32")):
    # relax's concatenate of (4, 6) and (4, 0), as LegalizeOps writes it
    T.func_attr({"op_pattern": 2, "tirx.noalias": True})
    for ax0, ax1 in T.grid(T.int64(4), T.int64(6)):
        with T.sblock("T_concat"):
            v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
            T.reads(empty[v_ax0, v_ax1 - T.int64(6)], x[v_ax0, v_ax1])
            T.writes(T_concat[v_ax0, v_ax1])
            T_concat[v_ax0, v_ax1] = T.if_then_else(T.int64(6) <= v_ax1, empty[v_ax0, v_ax1 - T.int64(6)],
                                                    x[v_ax0, v_ax1])


def test_masked_load_of_an_empty_buffer_reads_zeros():
    e = np.zeros((4, 0), np.float32)
    got = load(e, (np.arange(4)[:, None], np.arange(6)[None, :] - 6), "e", mask=np.zeros((4, 6), bool))
    assert got.shape == (4, 6) and got.dtype == np.float32 and not got.any()
    try:
        load(e, (np.arange(4)[:, None], np.arange(6)[None, :] - 6), "e", mask=np.ones((4, 6), bool))
    except IndexError as exc:
        assert "out-of-bounds read of e" in str(exc)
    else:
        raise AssertionError("an unmasked read of an empty buffer must be refused")


def test_concat_with_an_empty_piece_every_mode_and_flavour():
    x = np.random.default_rng(0).uniform(-1, 1, (4, 6)).astype(np.float32)
    e = np.zeros((4, 0), np.float32)
    from tvm_hybrid_nb import zoo

    target, mod = zoo.schedule(concat_empty.with_attr("global_symbol", "main"), "dlight-gpu")
    gpu = thn.build(mod, target=target)  # one vectorised select over 1024 threads: the masked load
    for mode in ("exact", "fast"):
        for check in (False, True):
            out = np.zeros((4, 6), np.float32)
            for stage in (0, gpu.packed_api_index - 1):  # as written, and the last stage before the API
                assert gpu.compare(x, e, out, mode=mode, check=check, stage=stage,
                                   reference=lambda x, e: np.concatenate([x, e], axis=1)).ok
    hm = thn.build(concat_empty)
    for mode in ("exact", "fast"):
        for check in (False, True):
            out = np.zeros((4, 6), np.float32)
            assert hm.compare(x, e, out, mode=mode, check=check).ok
    for flavour in zoo.FLAVOURS:
        outcome = zoo.check_kernel("m.concatenate", concat_empty.with_attr("global_symbol", "main"), flavour)
        assert outcome.outcome == "ok", (flavour, outcome.reason)
    out = np.zeros((4, 6), np.float32)
    hm.run_native(x, e, out)
    np.testing.assert_array_equal(out, np.concatenate([x, e], axis=1))


# Zero-size buffers at the stages after SplitHostDevice.
#
# relax's take with an empty index array (ids (0,) -> (0, 4)), scheduled by dlight's GPU Fallback: from
# ConvertSSA on, the kernel is a device function called with `T_take.reshape(-1)`, whose buffers are
# declared over that storage.  numpy says an empty view shares no memory with its (empty) storage, so the
# runtime refused the view ("buffer view would copy its storage") and the zoo counted a crash
# (emptyidx.take, emptyidx.one_hot, emptyidx.strided_slice of probe 14a, dlight-gpu).


@T.prim_func(s_tir=True)
def take_empty(tab: T.Buffer((T.int64(5), T.int64(4)), "float32"), eids: T.Buffer((T.int64(0),), "int32"),
               T_take: T.Buffer((T.int64(0), T.int64(4)), "float32")):
    T.func_attr({"op_pattern": 8, "tirx.noalias": True})
    for ax0, ax1 in T.grid(T.int64(0), T.int64(4)):
        with T.sblock("T_take"):
            v_ax0, v_ax1 = T.axis.remap("SS", [ax0, ax1])
            T.reads(tab[eids[v_ax0], v_ax1], eids[v_ax0])
            T.writes(T_take[v_ax0, v_ax1])
            T_take[v_ax0, v_ax1] = tab[eids[v_ax0], v_ax1]


def test_empty_views_are_views():
    empty = np.zeros((0,), np.float32)
    assert view(empty, "float32", (0, 4)).shape == (0, 4)
    assert flat_view(empty, "float32", 0).size == 0
    assert rows_view(np.zeros((2, 0), np.float32), 1, "float32", (0,)).shape == (2, 0)


def test_take_with_no_indices_every_stage_on_the_gpu_schedule():
    from tvm_hybrid_nb import zoo

    func = take_empty.with_attr("global_symbol", "main")
    target, mod = zoo.schedule(func, "dlight-gpu")
    hm = thn.build(mod, target=target)
    tab = np.arange(20, dtype=np.float32).reshape(5, 4)
    ids = np.zeros((0,), np.int32)
    for stage in hm.stages[:hm.packed_api_index]:
        for check in (False, True):
            out = np.zeros((0, 4), np.float32)
            assert hm.compare(tab, ids, out, stage=stage.index, mode="fast", check=check,
                              reference=lambda tab, ids: tab[ids]).ok, stage
    for flavour in zoo.FLAVOURS:
        assert zoo.check_kernel("m.take", func, flavour).outcome == "ok", flavour
