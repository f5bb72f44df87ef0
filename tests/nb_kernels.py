"""Small real kernels for the notebook-layer tests (shared by test_magic, test_explorer_widgets...)."""
from __future__ import annotations

import numpy as np
import tvm
import tvm_ffi
from tvm import s_tir, te, tirx

MATMUL_SETUP = """
import numpy as np
import tvm
from tvm import te, s_tir
"""

MATMUL_CELL = """
A = te.placeholder((16, 16), "float32", name="A")
B = te.placeholder((16, 16), "float32", name="B")
k = te.reduce_axis((0, 16), name="k")
C = te.compute((16, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
i, j, kk = sch.get_loops(sch.get_sblock("C"))
io, ii = sch.split(i, [None, 4])
sch
"""


def matmul_schedule(n: int = 16, factor: int = 4):
    """A matmul schedule, C = A @ B (n x n, float32), its row loop split by ``factor``."""
    A = te.placeholder((n, n), "float32", name="A")
    B = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
    i, _j, _k = sch.get_loops(sch.get_sblock("C"))
    sch.split(i, [None, factor])
    return sch


def blur_reference(a):
    return (a[:, :-1] + a[:, 1:]) * np.float32(0.5)


def blur_schedule():
    """B[i, j] = (A[i, j] + A[i, j + 1]) * 0.5 on a 16x17 input."""
    A = te.placeholder((16, 17), "float32", name="A")
    B = te.compute((16, 16), lambda i, j: (A[i, j] + A[i, j + 1]) * tirx.const(0.5, "float32"), name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    _i, j = sch.get_loops(sch.get_sblock("B"))
    sch.split(j, [None, 4])
    return sch


BROKEN_PASS = "BrokenConstant"


def _quarter_the_half(imm):
    return tirx.FloatImm(imm.ty, 0.25) if imm.value == 0.5 else imm


@tirx.transform.prim_func_pass(opt_level=0, name=BROKEN_PASS)
def broken_constant(func, mod, ctx):
    """A deliberately wrong pass: every float constant 0.5 becomes 0.25."""
    return tvm_ffi.structural_map(func, (tirx.FloatImm, _quarter_the_half))


def broken_pipeline():
    S, X = s_tir.transform, tirx.transform
    passes = [
        S.CanonicalizeLoop(), S.LowerInitBlock(), S.PlanAndUpdateBufferAllocationLocation(),
        S.ConvertBlocksToOpaque(), S.CompactBufferAllocation(), S.LowerMatchBuffer(), S.StmtSimplify(),
        S.LowerOpaqueBlock(), X.FlattenBuffer(), broken_constant,
        X.NarrowDataType(32), S.LoopPartition(), X.VectorizeLoop(True), X.StorageRewrite(),
        X.UnrollLoop(), X.StmtSimplify(), X.RemoveNoOp(), X.CommonSubexprElim(),
        X.VerifyMemory(), X.AnnotateEntryFunc(), X.SplitHostDevice(), X.MakePackedAPI(),
    ]
    return (tvm.transform.Sequential(passes, name="broken_pipeline"),
            s_tir.pipeline.finalize_host_passes, s_tir.pipeline.finalize_device_passes)


def build_broken_blur():
    """The blur kernel built with ``broken_pipeline`` standing in for tvm.build's default pipeline."""
    import tvm_hybrid_nb as thn

    tirx.register_tir_pipeline("s_tir", broken_pipeline)
    try:
        return thn.build(blur_schedule())
    finally:
        tirx.register_tir_pipeline("s_tir", s_tir.pipeline.default_s_tir_pipeline)
