"""s_tir.LowerCrossThreadReduction drops a one-clause block predicate from the write-back block (it
collects the clauses under `And` nodes only): threads outside the guard store past the end of the
reduction buffer from that stage on.  dlight's GPU reduction of a squeeze-excite 1x1 convolution
(MobileNetV3, EfficientNet) hits it; the zoo reports it as a TVM finding, not as an emulator crash."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.errors import EmulationError


@T.prim_func(s_tir=True)
def _one_clause(A: T.Buffer((8, 32), "float32"), B: T.Buffer((8,), "float32")):
    for ty in T.thread_binding(16, thread="threadIdx.y"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            with T.sblock("B"):
                vi = T.axis.spatial(8, ty)
                vk = T.axis.reduce(32, tx)
                T.where(ty < 8)
                with T.init():
                    B[vi] = T.float32(0)
                B[vi] = B[vi] + A[vi, vk]


def _write_back(func) -> str:
    mod = tvm.IRModule({"main": func.with_attr("target", tvm.target.Target("cuda"))})
    src = tvm.s_tir.transform.LowerCrossThreadReduction()(mod)["main"].script()
    start = src.index('T.sblock("B_write_back")')
    return src[start:src.index("T.writes", start)]


def test_tvm_drops_a_one_clause_predicate_from_the_write_back():
    # If this fails, TVM fixed the pass: drop the LowerCrossThreadReduction entry of zoo.TVM_PASS_FINDINGS.
    assert "ty < 8" not in _write_back(_one_clause)
    assert "T.where(tx == 0)" in _write_back(_one_clause)


def test_the_emulation_traps_on_the_out_of_bounds_write_back_and_not_before():
    hm = thn.build(_one_clause, target="cuda")
    a = np.random.default_rng(0).uniform(-1, 1, (8, 32)).astype("float32")
    b = np.zeros(8, "float32")
    hm.emulate(a.copy(), b, stage=0, mode="exact", check=True)
    np.testing.assert_allclose(b, a.astype(np.float64).sum(axis=1), rtol=1e-5)
    stage = hm.stage("s_tir.LowerCrossThreadReduction")
    for mode in ("exact", "fast"):
        with pytest.raises(EmulationError, match="out-of-bounds write of B"):
            hm.emulate(a.copy(), np.zeros(8, "float32"), stage=stage.index, mode=mode)


@pytest.mark.parametrize("relu", [True, False])
def test_zoo_reports_the_squeeze_excite_conv_as_a_tvm_finding(relu):
    from tvm import relax
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import spec
    from tvm.relax.frontend.nn.core import wrap_nested

    from tvm_hybrid_nb import module as hmodule

    class SqueezeConv(nn.Module):  # (1, 24, 1, 1) -> (1, 8, 1, 1): 8 rows of 16 threadIdx.y
        def forward(self, x, w):
            y = relax.op.nn.conv2d(x._expr, w._expr)
            return wrap_nested(relax.op.nn.relu(y) if relu else y, "se_conv")

    kernels = zoo.collect_kernels([("se", SqueezeConv(), {"x": spec.Tensor((1, 24, 1, 1), "float32"),
                                                          "w": spec.Tensor((8, 24, 1, 1), "float32")})])
    conv = [k for k in kernels if "conv2d" in k.name][0]
    outcome = zoo.check_kernel(conv.name, conv.cuda, "dlight-gpu")
    assert outcome.outcome == "crash" and outcome.stage.endswith("LowerCrossThreadReduction"), outcome.reason
    assert "out-of-bounds write of" in outcome.reason
    assert zoo.tvm_finding(outcome) is not None
    for flavour in ("none", "dlight-cpu"):
        assert zoo.check_kernel(conv.name, conv.llvm, flavour).outcome == "ok"
    if not relu:  # the write-back goes to the output itself: out of bounds down to the CUDA kernel
        target, mod = zoo.schedule(conv.cuda, "dlight-gpu")
        hm = hmodule.build(mod, target=target)
        x = np.random.default_rng(1).uniform(-1, 1, (1, 24, 1, 1)).astype("float32")
        w = np.random.default_rng(2).uniform(-1, 1, (8, 24, 1, 1)).astype("float32")
        with pytest.raises(EmulationError, match="out-of-bounds write of conv2d_nchw"):
            hm.emulate(x, w, np.zeros((1, 8, 1, 1), "float32"), stage=hm.stage("tirx.ConvertSSA").index)


@T.prim_func
def _vthreads_share_a_tile(x: T.Buffer((2, 64), "float32"), y: T.Buffer((2, 64), "float32")):
    T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        sh = T.alloc_buffer((64,), "float32", scope="shared")
        for vt in T.thread_binding(2, thread="vthread.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                sh[vt * 32 + tx] = x[bx, vt * 32 + tx] * T.float32(3)
                T.tvm_storage_sync("shared")
                y[bx, vt * 32 + tx] = sh[63 - (vt * 32 + tx)]


def test_tvm_gives_each_vthread_its_own_copy_of_a_shared_tile():
    # If this fails, TVM changed InjectVirtualThread: revisit its entry of zoo.TVM_PASS_FINDINGS.
    lib = tvm.compile(tvm.IRModule({"main": _vthreads_share_a_tile}), target=zoo.cuda_target())
    source = "".join(m.inspect_source() for m in lib.mod.imports)
    assert "sh_ptr[(((int)threadIdx.x) + 96)] =" in source  # vthread 1 writes its own copy
    assert "= sh_ptr[(63 - ((int)threadIdx.x))];" in source  # vthread 0 reads its copy's unwritten half


def test_zoo_reports_vthreads_sharing_shared_memory_as_a_tvm_finding():
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    hm = thn.build(_vthreads_share_a_tile, target=zoo.cuda_target())
    y = np.zeros((2, 64), np.float32)
    hm.emulate(x, y, stage=0, mode="fast", check=True)  # the TIR as written: one tile, no alarm
    np.testing.assert_array_equal(y, (x * np.float32(3))[:, ::-1])
    for check in (False, True):
        outcome = zoo.check_kernel("vthreads.share_a_tile", _vthreads_share_a_tile, "dlight-gpu",
                                   reference=_vthreads_share_a_tile, check=check)
        assert outcome.stage.endswith("InjectVirtualThread"), outcome
        assert "InjectVirtualThread" in zoo.tvm_finding(outcome), outcome
