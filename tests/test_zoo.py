"""The real-model zoo (tvm_hybrid_nb.zoo): every kernel of small Relax models, scheduled three ways,
emulated in fast mode at every changed stage before MakePackedAPI and compared with the native llvm
build of the unscheduled kernel.  No wrong answer, no crash, refusals only from the allow-list."""
from __future__ import annotations

import pytest

from tvm_hybrid_nb import cli, zoo, zoo_diagnosis


@pytest.fixture(scope="module")
def kernels():
    return zoo.collect_kernels()


def test_zoo_covers_the_operators_it_promises(kernels):
    names = " ".join(k.name for k in kernels)
    for op in ("matmul", "softmax", "log_softmax", "layer_norm", "group_norm", "rms_norm", "conv2d",
               "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "argmax", "topk", "sort", "cumsum",
               "gelu", "silu", "triu", "concatenate", "cast", "take", "repeat", "argmin", "variance", "prod",
               "erf", "floor_divide", "conv1d", "right_shift", "cumprod", "argsort", "strided_slice", "tile", "flip",
               "sdpa.attention", "prelu", "softplus", "gelu_tanh", "scale_rows", "neighbour_max", "pool1d"):
        assert op in names, op
    assert len(kernels) >= 100
    assert any(k.cuda is not None and k.llvm is None for k in kernels)  # GPU-only sort/scan kernels
    # A float16 matmul that dlight tensorizes for sm_80 (tensor-core fragments).
    assert any("tvm_mma_sync" in zoo.schedule(k.cuda, "dlight-gpu")[1]["main"].script()
               for k in kernels if k.name.startswith("half_prefill.") and k.cuda is not None)


@pytest.mark.parametrize("flavour", zoo.FLAVOURS)
def test_every_zoo_kernel_is_exact_at_every_stage(kernels, flavour):
    report = zoo.run_zoo([flavour], mode="fast", kernels=kernels)
    problems = [o for o in report.problems()
                if not (o.outcome == "refused" and zoo.refusal_allowed(o)) and not zoo.tvm_finding(o)]
    assert not problems, "\n".join(f"{o.kernel}: {o.outcome} at {o.stage}: {o.reason}" for o in problems)
    for flavour_, prefix, message in zoo.TVM_FINDINGS:  # TVM's races that change the result are found
        if flavour_ == flavour and "scan.py" in zoo.TVM_FINDINGS[(flavour_, prefix, message)]:
            assert any(zoo.finding_matches(o, flavour_, prefix, message) and o.outcome == "wrong"
                       and zoo.TVM_FINDING in o.reason for o in report.outcomes), prefix
    counts = report.counts(flavour)
    assert counts["ok"] >= len(report.outcomes) // 2 and counts["wrong"] == counts["crash"] == 0
    assert sum(o.stages_checked for o in report.outcomes) > 5 * counts["ok"]


#: Kernels whose TVM output once raised false sanitizer alarms (LowerThreadAllreduce's select over
#: uninitialised lanes and silent stores; dlight.cpu's per-iteration reduction temporaries), the one
#: with a real race, and clean ones.
SANITIZED_KERNELS = ("lm_head.fused_matmul1_add1", "lm_head.fused_matmul_silu_multiply", "lm_head.fused_rms_norm_add",
                     "norms.group_norm", "sortscan.argmax", "sortscan.gpu_2d_continuous_cumsum", "norms.layer_norm",
                     "softmax.softmax", "shapes.cumsum", "shapes.cumprod", "sampler.parallel_sampling_from_prob",
                     "edge.fused_conv2d_add1")


#: Kernels checked for metal (``dlight-metal``, opt-in): the float16 matmuls dlight's Matmul rule
#: tensorizes into simdgroup matrices there, reductions, a GPU top-k, and a documented dlight finding.
METAL_KERNELS = ("half_prefill.fused_matmul_add_silu", "lowprec.matmul", "norms.layer_norm", "sortscan.topk",
                 "edge.fused_conv2d_add1")


def test_dlight_metal_flavour_checks_the_simdgroup_matmuls_under_sanitizers(kernels):
    chosen = [k for k in kernels if k.name in METAL_KERNELS and k.cuda is not None]
    assert {k.name for k in chosen} == set(METAL_KERNELS)
    assert "dlight-metal" not in zoo.FLAVOURS  # checked when asked for: the default zoo stays three flavours
    tensorized = [k.name for k in chosen if "simdgroup_multiply_accumulate" in
                  zoo.schedule(zoo._without_target(k.cuda), "dlight-metal")[1]["main"].script()]
    assert tensorized == ["lowprec.matmul", "half_prefill.fused_matmul_add_silu"], tensorized
    report = zoo.run_zoo(["dlight-metal"], mode="fast", kernels=chosen, check=True)
    bad = [o for o in report.outcomes if o.outcome != "ok" and not zoo.tvm_finding(o)]
    assert not bad, "\n".join(f"{o.kernel}: {o.outcome} at {o.stage}: {o.reason}" for o in bad)
    ok = {o.kernel for o in report.outcomes if o.outcome == "ok"}
    assert set(tensorized) | {"norms.layer_norm", "sortscan.topk"} <= ok, report.table()
    assert all(o.stages_checked > 10 for o in report.outcomes if o.kernel in tensorized)


def test_lift_thread_binding_running_an_80_thread_loop_on_128_threads_is_a_tvm_finding_on_metal():
    # dlight's GEMV for metal binds threadIdx.x to 128 and to 80 in one kernel; LiftThreadBinding
    # makes both one launch of 128 without a guard, so threads 80..127 write past the 80 outputs.
    from tvm.relax.frontend.nn import op, spec

    kernels = _nn_kernels("gemv80", lambda self, x, w: op.matmul(x, op.permute_dims(w, [1, 0])),
                          {"x": spec.Tensor((1, 1, 128), "float16"), "w": spec.Tensor((80, 128), "float16")})
    (gemv,) = [k for k in kernels if k.cuda is not None and "matmul" in k.name]
    outcome = zoo.check_kernel(gemv.name, gemv.cuda, "dlight-metal", reference=gemv.reference)
    assert outcome.outcome == "crash" and outcome.stage.endswith("LiftThreadBinding"), outcome
    assert "out-of-bounds write of" in outcome.reason and "threadIdx.x=80" in outcome.reason, outcome.reason
    assert "lift_thread_binding.cc" in zoo.tvm_finding(outcome)
    assert outcome.stages_checked >= 4  # the stages before it emulate to the reference


def test_zoo_under_sanitizers_has_no_false_alarms(kernels):
    chosen = [k for k in kernels if k.name in SANITIZED_KERNELS]
    assert {k.name for k in chosen} == set(SANITIZED_KERNELS), sorted(k.name for k in kernels)
    report = zoo.run_zoo(mode="fast", kernels=chosen, check=True)
    alarms = [o for o in report.problems()
              if not zoo.tvm_finding(o) and not (o.outcome == "refused" and zoo.refusal_allowed(o))]
    assert not alarms, "\n".join(f"{o.flavour} {o.kernel}: {o.outcome} at {o.stage}: {o.reason}" for o in alarms)
    # Each real bug is still found; index_put's race needs repeated indices, which the zoo's seeded
    # ones need not have (its own test below makes them).
    tested_elsewhere = {"index_put"}
    for flavour, prefix, message in zoo.TVM_FINDINGS:
        if prefix in tested_elsewhere:
            continue
        assert any(zoo.finding_matches(o, flavour, prefix, message) for o in report.outcomes), (flavour, prefix, message)
    found_here = [key for key in zoo.TVM_FINDINGS if key[1] not in tested_elsewhere]
    assert sum(o.outcome == "ok" for o in report.outcomes) >= len(report.outcomes) - len(found_here)


def test_zoo_command_prints_the_table(capsys):
    status = cli.main(["zoo", "--flavour", "dlight-gpu", "--kernel", "softmax.", "--kernel", "sortscan.argmax"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "| dlight-gpu | 3 | 0 | 0 | 0 | 0 |" in out


def _nn_kernels(name, forward, spec):
    """The zoo kernels of a one-method ``nn.Module`` named ``name``."""
    from tvm.relax.frontend import nn

    class Model(nn.Module):
        pass

    Model.forward = forward
    return zoo.collect_kernels([(name, Model(), spec)])


def test_a_documented_tvm_bug_is_one_in_any_model():
    # TVM_FINDINGS name operators, not zoo models: a cumsum over rows of another model has the same race.
    from tvm.relax.frontend.nn import op, spec

    kernels = _nn_kernels("other", lambda self, x: op.cumsum(x, axis=0), {"x": spec.Tensor((4, 6), "float32")})
    (scan,) = [k for k in kernels if k.name.startswith("other.cumsum") and k.cuda is not None]
    outcome = zoo.check_kernel(scan.name, scan.cuda, "dlight-gpu", reference=scan.reference)
    assert outcome.outcome == "wrong" and zoo.TVM_FINDING in outcome.reason, outcome.reason
    assert "scan.py" in zoo.tvm_finding(outcome)


def test_a_gpu_cumsum_into_another_dtype_is_compared_in_that_dtype():
    # cumsum(x, dtype="float64") of float32 rows: relax's GPU scan sums in float64 (no llvm twin; the
    # numpy reference summed in float32 and the zoo called the float64 output wrong).
    import numpy as np
    from tvm.relax import op as R
    from tvm.relax.frontend.nn import spec
    from tvm.relax.frontend.nn.core import wrap_nested

    kernels = _nn_kernels("cs64", lambda self, x: wrap_nested(R.cumsum(x._expr, axis=1, dtype="float64"), "c"),
                          {"x": spec.Tensor((3, 8), "float32")})
    (scan,) = [k for k in kernels if k.cuda is not None and k.llvm is None]
    x = np.random.default_rng(0).standard_normal((2, 5)).astype("float32")
    want = np.cumsum(x.astype(np.float64), axis=-1)
    np.testing.assert_array_equal(scan.reference(x, out_dtypes=["float64"]), want)
    outcome = zoo.check_kernel(scan.name, scan.cuda, "dlight-gpu", reference=scan.reference)
    assert outcome.outcome == "ok" and outcome.stages_checked > 5, outcome


def test_llm_sampling_ops_are_exact_with_their_own_symbolic_sizes():
    # The samplers' PrimFuncs bring their own size vars (batch, vocab_size, out_batch): inputs get
    # OTHER_SYMBOLIC_SIZE, and sample_indices rows in [0, batch).  get_renorm_cutoff compares bools,
    # which TVM's LLVM code generation cannot build (TVM_CODEGEN_FINDINGS): it is emulated at every
    # stage against the native build of its rewrite.
    from tvm.relax.frontend.nn import op, spec

    def forward(self, prob, u, idx, sorted_prob, sorted_idx, top_p, top_k):
        return (op.multinomial_from_uniform(prob, u, idx),
                op.sample_top_p_top_k_from_sorted_prob(sorted_prob, sorted_idx, top_p, top_k, u, idx),
                op.renormalize_top_p_top_k_prob(prob, sorted_prob, top_p, top_k))

    f32 = "float32"
    kernels = _nn_kernels("sampling", forward, {
        "prob": spec.Tensor((3, 10), f32), "u": spec.Tensor((2, 1), f32), "idx": spec.Tensor((2, 1), "int32"),
        "sorted_prob": spec.Tensor((3, 10), f32), "sorted_idx": spec.Tensor((3, 10), "int32"),
        "top_p": spec.Tensor((3, 1), f32), "top_k": spec.Tensor((3, 1), "int32")})
    names = {k.name for k in kernels}
    assert {"sampling.get_index_from_sorted", "sampling.get_renorm_cutoff", "sampling.get_renorm_prob"} <= names
    report = zoo.run_zoo(kernels=kernels)
    assert not report.problems(), "\n".join(f"{o.flavour} {o.kernel}: {o.outcome} at {o.stage}: {o.reason}"
                                            for o in report.problems())
    # On a cumulative sum of probabilities (INPUT_CONTRACTS) one position matches: no race on the output.
    (pick,) = [k for k in kernels if k.name == "sampling.get_index_from_sorted"]
    outcome = zoo.check_kernel(pick.name, pick.cuda, "dlight-gpu", reference=pick.reference, check=True)
    assert outcome.outcome == "ok", outcome.reason


def test_a_kernel_tvm_cannot_build_is_checked_against_its_rewrite():
    import numpy as np
    import pytest
    import tvm
    from tvm.script import tirx as T

    import tvm_hybrid_nb as thn

    @T.prim_func(s_tir=True)
    def keep_large(a: T.Buffer((8,), "float32"), flags: T.Buffer((8,), "bool"), b: T.Buffer((8,), "float32"),
                   same: T.Buffer((8,), "bool")):
        for i in range(8):
            with T.sblock("b"):
                vi = T.axis.remap("S", [i])
                if (a[vi] < T.float32(0.25)) == T.bool(False):
                    b[vi] = a[vi]
                else:
                    b[vi] = T.float32(0)
                same[vi] = (a[vi] > T.float32(0)) != flags[vi]

    with pytest.raises(Exception, match=r"fcmp \w+ i1 "):  # TVM's bug: the day it is fixed, this fails
        tvm.build(keep_large, target="llvm")
    hm = thn.build(keep_large, on_failure="keep")
    assert hm.failure.step == "code generation" and zoo.codegen_finding(hm.failure.message)
    a = np.linspace(-1, 1, 8, dtype=np.float32)
    flags = np.array([True, False] * 4)
    b, same = np.zeros(8, np.float32), np.zeros(8, bool)
    hm.emulate(a, flags, b, same)
    np.testing.assert_array_equal(b, np.where(a < 0.25, 0, a))
    np.testing.assert_array_equal(same, (a > 0) != flags)
    for flavour in zoo.FLAVOURS:
        outcome = zoo.check_kernel("t.keep_large", keep_large, flavour)
        assert outcome.outcome == "ok" and outcome.stages_checked > 1, (flavour, outcome)


def test_a_dlight_rule_that_raises_is_a_tvm_finding_not_a_crash():
    # The p @ v matmul of a one-token step without cache: a reduction of extent 1.
    import pytest
    from tvm.relax.frontend.nn import op, spec

    f32 = "float32"
    kernels = _nn_kernels("step", lambda self, p, v: op.matmul(p, v),
                          {"p": spec.Tensor((1, 4, 1, 1), f32), "v": spec.Tensor((1, 4, 1, 32), f32)})
    (matmul,) = kernels
    with pytest.raises(AssertionError):  # TVM's bug: the day dlight declines it, this fails
        zoo.schedule(matmul.llvm, "dlight-cpu")
    report = zoo.run_zoo(kernels=kernels)
    by_flavour = {o.flavour: o for o in report.outcomes}
    assert by_flavour["none"].outcome == "ok"
    for flavour in ("dlight-cpu", "dlight-gpu"):
        o = by_flavour[flavour]
        assert o.outcome == "crash" and o.stage == "schedule", o
        assert "gemv.py" in zoo.tvm_finding(o) and "assert r_loops" in o.reason
    assert report.counts("dlight-gpu")["TVM finding"] == 1 and report.counts("dlight-gpu")["crash"] == 0


def test_bfloat16_sorts_are_checked_against_numpy_not_tvms_library():
    # TVM's tvm.contrib.sort sorts bfloat16 wrong and overwrites the heap: the native run is refused,
    # the emulation is numpy's sort, and the zoo compares every stage with it.
    import ml_dtypes
    import numpy as np
    import pytest
    from tvm.relax.frontend.nn import op, spec

    from tvm_hybrid_nb import module as hmodule
    from tvm_hybrid_nb.errors import ArgumentTypeError

    kernels = _nn_kernels("bfsort", lambda self, x: (op.sort(x, axis=-1), op.argsort(x, axis=-1)),
                          {"x": spec.Tensor((3, 8), "bfloat16")})
    (sort,) = [k for k in kernels if k.name == "bfsort.sort" and k.llvm is not None]
    (argsort,) = [k for k in kernels if k.name == "bfsort.argsort" and k.llvm is not None]
    x = np.random.default_rng(0).uniform(-1, 1, (3, 8)).astype(ml_dtypes.bfloat16)
    for kernel, out, want in ((sort, np.zeros((3, 8), ml_dtypes.bfloat16), np.sort(x.astype(np.float32), -1)),
                              (argsort, np.zeros((3, 8), "int32"),
                               np.argsort(x.astype(np.float32), -1, kind="stable"))):
        hm = hmodule.build(kernel.llvm)
        with pytest.raises(ArgumentTypeError, match="tvm.contrib.sort corrupts memory"):
            hm.run_native(x, out.copy())
        got = hm.emulate(x, out.copy(), mode="exact")
        np.testing.assert_array_equal(np.asarray(got).astype(np.float32), want.astype(np.float32))
    report = zoo.run_zoo(kernels=kernels)
    problems = [(o.flavour, o.kernel, o.stage, o.reason) for o in report.problems() if not zoo.tvm_finding(o)]
    assert not problems, problems
    # From BF16ComputeLegalize on, the arrays handed to the library are float32 over bfloat16 storage.
    for flavour in ("none", "dlight-cpu"):
        found = [o for o in report.outcomes if o.flavour == flavour and o.kernel in ("bfsort.sort", "bfsort.argsort")]
        assert len(found) == 2 and all(o.stage.endswith("BF16ComputeLegalize") and zoo.tvm_finding(o)
                                       and o.stages_checked > 1 for o in found), found
    assert all(o.outcome == "ok" for o in report.outcomes if o.flavour == "dlight-gpu")


def test_any_dlight_rule_that_raises_is_tvms_failure_with_its_evidence():
    # dl.cpu.Reduction's compute-at fails on relax's inference batch_norm; no document lists it, and
    # none is needed: the exception comes from TVM's own rule, before anything is emulated.
    from tvm import relax
    from tvm.relax.frontend.nn import spec
    from tvm.relax.frontend.nn.core import wrap_nested

    def forward(self, x, g, b, m, v):
        return wrap_nested(relax.TupleGetItem(relax.op.nn.batch_norm(x._expr, g._expr, b._expr, m._expr, v._expr,
                                                                     axis=1), 0), "bn")

    vec = spec.Tensor((4,), "float32")
    kernels = _nn_kernels("bn", forward, {"x": spec.Tensor((1, 4, 3, 3), "float32"), "g": vec, "b": vec, "m": vec,
                                          "v": vec})
    (bn,) = [k for k in kernels if k.llvm is not None]
    with pytest.raises(Exception, match="compute-at"):
        zoo.schedule(bn.llvm, "dlight-cpu")
    o = zoo.check_kernel(bn.name, bn.llvm, "dlight-cpu")
    assert o.outcome == "crash" and o.stage == "schedule" and "compute-at" in o.reason, o
    assert "ApplyDefaultSchedule fails" in zoo.tvm_finding(o)
    assert zoo.check_kernel(bn.name, bn.llvm, "none").outcome == "ok"


def test_a_pipeline_tvm_compile_cannot_get_through_is_tvms_failure():
    # topi's GPU scan over a middle axis of symbolic length: CompactBufferAllocation divides by zero
    # in tvm.compile too, so the failed staged build is TVM's, not the emulator's.
    import tvm
    from tvm.relax.frontend.nn import op, spec

    kernels = _nn_kernels("scan", lambda self, x: op.cumsum(x, axis=1), {"x": spec.Tensor((2, "n", 3), "float32")})
    (scan,) = [k for k in kernels if k.cuda is not None]
    target, mod = zoo.schedule(scan.cuda, "dlight-gpu")
    with pytest.raises(Exception, match="divide by zero"):
        tvm.compile(mod, target=target)
    o = zoo.check_kernel(scan.name, scan.cuda, "dlight-gpu", reference=scan.reference)
    assert o.outcome == "crash" and o.stage == "build", o
    assert zoo.tvm_finding(o).startswith("TVM cannot build it: tvm.compile raises") and "divide by zero" in o.reason
    # What tvm.compile builds is never excused: the same scan of fixed length is checked stage by stage.
    fixed = [k for k in _nn_kernels("scan3", lambda self, x: op.cumsum(x, axis=1),
                                    {"x": spec.Tensor((2, 5, 3), "float32")}) if k.llvm is not None]
    assert zoo.tvm_compile_failure(tvm.IRModule({"main": fixed[0].llvm}), "llvm") == ""
    ok = zoo.check_kernel(fixed[0].name, fixed[0].llvm, "none")
    assert ok.outcome == "ok" and not ok.tvm_failure and ok.stages_checked > 1, ok


def test_a_schedule_that_reorders_a_float16_sum_is_compared_within_its_rounding():
    # dlight's GEMV splits a float16 row of 96 products over threads: partial sums near 8 round in
    # units of 2**-7, so an element near zero may differ from the serial llvm sum by more than 8 of
    # its own units; a wrong element (another row's value) is still found.
    import numpy as np
    from tvm.relax.frontend.nn import op, spec

    kernels = _nn_kernels("gemv16", lambda self, x, w: op.matmul(x, w),
                          {"x": spec.Tensor((1, 96), "float16"), "w": spec.Tensor((96, 40), "float16")})
    (gemv,) = kernels
    o = zoo.check_kernel(gemv.name, gemv.cuda, "dlight-gpu", reference=gemv.reference)
    assert o.outcome == "ok" and o.stages_checked > 5, o
    want = np.array([[8.0, 0.01, -3.0]], dtype=np.float16)
    near_zero = want.copy()
    near_zero[0, 1] += np.float16(2.0 ** -7)  # one float16 unit of the partial sums
    assert zoo._outputs_equal([near_zero], [want], reordered=True) is None
    assert zoo._outputs_equal([near_zero], [want]) is not None  # unscheduled kernels: their own units
    swapped = want[:, ::-1].copy()
    assert "differs from native at (0, 0)" in zoo._outputs_equal([swapped], [want], reordered=True)
    # A float16 GEMV cast to a float32 output rounds in float16 units, whatever the output's dtype.
    (gemv32,) = _nn_kernels("gemv16to32", lambda self, x, w: op.astype(op.matmul(x, w), "float32"),
                            {"x": spec.Tensor((1, 256), "float16"), "w": spec.Tensor((256, 40), "float16")})
    o = zoo.check_kernel(gemv32.name, gemv32.cuda, "dlight-gpu", reference=gemv32.reference)
    assert o.outcome == "ok" and o.stages_checked > 5, o
    eps16 = float(np.finfo(np.float16).eps)
    want32, near32 = want.astype(np.float32), near_zero.astype(np.float32)
    assert zoo._outputs_equal([near32], [want32], reordered=True, arithmetic_eps=eps16) is None
    assert zoo._outputs_equal([near32], [want32], reordered=True) is not None
    assert "differs" in zoo._outputs_equal([swapped.astype(np.float32)], [want32], reordered=True,
                                           arithmetic_eps=eps16)


def test_an_operator_tvm_lowers_out_of_bounds_is_a_tvm_finding_with_the_read_named():
    # topi.slice_scatter gathers src for every output column before `where` keeps the sliced ones, with
    # the index clipped into the input's axis (13), not src's (4): the unscheduled kernel reads src out
    # of bounds, so there is no native reference; the emulation names the read.
    import numpy as np
    import pytest
    import tvm
    from tvm import te, topi

    import tvm_hybrid_nb as thn
    from tvm_hybrid_nb.errors import EmulationError

    x = te.placeholder((6, 13), "float32", name="x")
    src = te.placeholder((6, 4), "float32", name="src")
    func = te.create_prim_func([x, src, topi.slice_scatter(x, src, 1, 8, 2, 1)[0]]).with_attr("global_symbol",
                                                                                              "slice_scatter")
    hm = thn.build(tvm.IRModule({"main": func}))
    args = [np.ones((6, 13), "float32"), np.ones((6, 4), "float32"), np.zeros((6, 13), "float32")]
    with pytest.raises(EmulationError, match=r"out-of-bounds read of src\[0, 4\]"):
        hm.emulate(*args)
    outcome = zoo.check_kernel("t.slice_scatter", func, "none")
    assert outcome.outcome == "crash" and "native run refused" in outcome.reason, outcome
    assert "topi/slice_scatter.py" in zoo.tvm_finding(outcome)
    outcome.kernel = "t.take"  # another operator's out-of-bounds read stays a failure of the zoo
    assert zoo.tvm_finding(outcome) is None


def test_indices_copied_into_a_scratch_buffer_get_their_extent():
    # relax legalizes gather_nd and scatter_nd with the indices transposed into a scratch buffer
    # (T_transpose[i, j] = indices[j, i]) that the loads index with: random indices must still lie in
    # range, or the native reference is refused (out of bounds) and the kernel tests nothing.
    from tvm import relax
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import spec
    from tvm.relax.frontend.nn.core import wrap_nested

    R = relax.op

    class GatherScatterND(nn.Module):
        def forward(self, x, g, u):
            rows = R.reshape(R.strided_slice(g._expr, axes=[0], begin=[0], end=[2]), (4, 1))
            return (wrap_nested(R.gather_nd(x._expr, g._expr), "gnd"),
                    wrap_nested(R.scatter_nd(x._expr, rows, u._expr), "snd"))

    kernels = zoo.collect_kernels([("nd", GatherScatterND(), {
        "x": spec.Tensor((3, 5), "float32"), "g": spec.Tensor((3, 2), "int64"), "u": spec.Tensor((4, 5), "float32")})])
    nd = [k for k in kernels if ("gather_nd" in k.name or "scatter_nd" in k.name) and k.llvm is not None]
    assert len(nd) == 2, [k.name for k in kernels]
    for k in nd:
        outcome = zoo.check_kernel(k.name, k.llvm, "none", reference=k.reference)
        assert outcome.outcome == "ok" and outcome.stages_checked, outcome


def test_a_cuda_only_scan_is_compared_with_the_llvm_scan_at_its_call():
    # The lowerings name kernels differently where cuda dispatches a last-axis cumsum to
    # gpu_2d_continuous_cumsum: twins are found by call position, not by name.
    from tvm.relax import op as R
    from tvm.relax.frontend.nn import spec
    from tvm.relax.frontend.nn.core import wrap_nested

    def forward(self, x):
        return (wrap_nested(R.cumsum(x._expr, axis=2), "incl_last"),          # cuda: gpu_2d_continuous_cumsum
                wrap_nested(R.cumsum(x._expr, axis=0, exclusive=True), "excl0"))  # llvm cumsum1, cuda cumsum

    kernels = _nn_kernels("twins", forward, {"x": spec.Tensor((3, 4, 6), "float32")})
    (scan,) = [k for k in kernels if k.llvm is None and k.name == "twins.cumsum"]
    (excl0,) = [k for k in kernels if k.llvm is not None and k.name == "twins.cumsum1"]
    assert scan.reference is excl0.llvm
    outcome = zoo.check_kernel(scan.name, scan.cuda, "dlight-gpu", reference=scan.reference)
    # The input stage matches; later stages hit the documented scan race (a TVM finding) or pass.
    assert outcome.outcome == "ok" or zoo.tvm_finding(outcome), outcome
    assert outcome.stages_checked >= 1 and not outcome.stage.startswith("0 "), outcome


def test_a_gpu_cumsum_of_int8_into_int32_is_compared_in_int32():
    import numpy as np

    from tvm.relax import op as R
    from tvm.relax.frontend.nn import spec
    from tvm.relax.frontend.nn.core import wrap_nested

    kernels = _nn_kernels("cs32", lambda self, x: wrap_nested(R.cumsum(x._expr, axis=1, dtype="int32"), "c"),
                          {"x": spec.Tensor((3, 9), "int8")})
    (scan,) = [k for k in kernels if k.cuda is not None and k.llvm is None]
    x = np.arange(-10, 8, dtype=np.int8).reshape(2, 9)
    got = scan.reference(x, out_dtypes=["int32"])
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.cumsum(x.astype(np.int64), axis=-1))
    outcome = zoo.check_kernel(scan.name, scan.cuda, "dlight-gpu", reference=scan.reference)
    assert outcome.outcome == "ok" or zoo.tvm_finding(outcome), outcome


def test_median_is_exact_at_every_stage_with_and_without_the_sanitizers():
    # StorageRewrite views float32 scratch as int64 (84 bytes for 3 indices), and the argsort that
    # tvm.contrib.sort writes into scratch was read as never written under check=True.
    from tvm.relax import op as R
    from tvm.relax.frontend.nn import spec
    from tvm.relax.frontend.nn.core import wrap_nested

    (k,) = _nn_kernels("median", lambda self, x: wrap_nested(R.median(x._expr, axis=1), "median"),
                              {"x": spec.Tensor((3, 7), "float32")})
    for check in (False, True):
        for flavour in ("none", "dlight-cpu"):
            outcome = zoo.check_kernel(k.name, k.llvm, flavour, reference=k.reference, check=check)
            assert outcome.outcome == "ok", outcome


def test_nested_lazy_conditions_name_their_condition_once_in_fast_mode():
    # roi_align(mode="max", sample_ratio=-1) nests if_then_else: each arm's loads carried a copy of
    # every enclosing condition, 11.7 MB of fast-mode source (444 s for the kernel) against 22 KB exact.
    from tvm.relax import op as R
    from tvm.relax.frontend.nn import spec
    from tvm.relax.frontend.nn.core import wrap_nested

    import tvm_hybrid_nb as thn

    def forward(self, x, rois):
        return wrap_nested(R.vision.roi_align(x._expr, rois._expr, (3, 2), 0.5, sample_ratio=-1, mode="max",
                                              aligned=True), "roi_align_max")

    (k,) = _nn_kernels("roimax", forward, {"x": spec.Tensor((1, 3, 8, 8), "float32"),
                                                  "rois": spec.Tensor((2, 5), "float32")})
    hm = thn.build(k.llvm)
    for stage in hm.stages[:hm.packed_api_index]:
        if stage.changed:
            assert len(stage.fast_source()) < 4 * len(stage.source), stage.label
    outcome = zoo.check_kernel(k.name, k.llvm, "none", reference=k.reference)
    assert outcome.outcome == "ok", outcome


def test_shift_counts_read_from_an_input_are_drawn_within_the_bit_width():
    # relax's right_shift of two tensors: a count outside [0, 8) of an int8 is undefined in LLVM,
    # so random counts made the kernel's native result meaningless (reported wrong in every flavour).
    import numpy as np
    from tvm.script import tirx as T

    import tvm_hybrid_nb as thn

    @T.prim_func(s_tir=True)
    def shifts(a: T.Buffer((4, 9), "int8"), s: T.Buffer((4, 9), "int8"), b: T.Buffer((4, 9), "int8"),
               c: T.Buffer((4, 9), "int64")):
        for i, j in T.grid(4, 9):
            with T.sblock("shift"):
                vi, vj = T.axis.remap("SS", [i, j])
                b[vi, vj] = a[vi, vj] >> s[vi, vj]
                c[vi, vj] = T.shift_left(T.Cast("int64", a[vi, vj]), T.Cast("int64", s[vi, vj]))

    hm = thn.build(shifts)
    counts = hm.random_inputs(seed=3)[1]
    assert counts.min() >= 0 and counts.max() < 8 and len(np.unique(counts)) > 4
    for flavour in zoo.FLAVOURS:
        outcome = zoo.check_kernel("t.shifts", shifts, flavour)
        assert outcome.outcome == "ok", outcome


def test_a_model_dividing_by_an_integer_tensor_runs_on_inputs_without_zeros():
    # Seeded int8 inputs include 0: the native run of `a // b` is refused (it would crash the process),
    # and the kernel was reported as a crash in every flavour.
    from tvm import relax
    from tvm.relax.frontend.nn import spec
    from tvm.relax.frontend.nn.core import wrap_nested

    kernels = _nn_kernels("intdiv", lambda self, a, b: wrap_nested(relax.op.floor_divide(a._expr, b._expr), "div"),
                          {"a": spec.Tensor((4, 9), "int8"), "b": spec.Tensor((4, 9), "int8")})
    report = zoo.run_zoo(["none", "dlight-cpu"], kernels=kernels)
    assert [o.outcome for o in report.outcomes] == ["ok", "ok"], report.outcomes
    assert all("without 0" in o.reason for o in report.outcomes)


def test_tvms_runtime_failing_on_the_reference_is_tvms_failure():
    # tvm.contrib.sort has no int8 sort: the native run of the unscheduled kernel raises in TVM.
    from tvm import relax
    from tvm.relax.frontend.nn import spec
    from tvm.relax.frontend.nn.core import wrap_nested

    kernels = _nn_kernels("sort8", lambda self, a: wrap_nested(relax.op.sort(a._expr, axis=-1), "sort"),
                          {"a": spec.Tensor((3, 11), "int8")})
    report = zoo.run_zoo(["none"], kernels=kernels)
    (outcome,) = report.outcomes
    assert outcome.outcome == "crash" and "int8" in outcome.tvm_failure, outcome
    assert zoo.tvm_finding(outcome) == outcome.tvm_failure


def test_a_float16_sum_that_overflows_in_any_order_compares_as_overflowed():
    # dlight's GPU reduction adds in another order than the serial reference: past 65504 a row of
    # float16 sums overflowed to -inf one way and +inf the other (probe of float16 reductions;
    # replaying dlight's order in numpy gives the emulator's result).  Both overflowed: no order is
    # the right one.  A finite value against an infinity, or different finite values, still differ.
    import numpy as np

    eps16 = float(np.finfo(np.float16).eps)
    want = np.array([np.inf, 1.0], np.float16)
    overflowed = np.array([-np.inf, 1.0], np.float16)
    assert zoo._outputs_equal([overflowed], [want], reordered=True, arithmetic_eps=eps16) is None
    assert zoo._outputs_equal([np.array([np.nan, 1.0], np.float16)], [want], reordered=True,
                              arithmetic_eps=eps16) is None
    assert zoo._outputs_equal([overflowed], [want]) is not None  # not reordered: the same order
    assert zoo._outputs_equal([overflowed.astype(np.float32)], [want.astype(np.float32)], reordered=True) is not None
    assert zoo._outputs_equal([-want], [want], reordered=True, arithmetic_eps=eps16) is not None  # 1 vs -1
    assert zoo._outputs_equal([np.array([6e4, 1], np.float16)], [want], reordered=True, arithmetic_eps=eps16)


def test_a_schedule_that_changes_the_result_is_a_tvm_finding_with_tvms_own_build_as_evidence():
    # matmul with a reduction of extent 1 and a bias: dlight's Fallback rule inlines the add into the
    # reduction's init and its update (nn.Linear(1, n) with a bias).
    import numpy as np
    import tvm
    from tvm.script import tirx as T

    import tvm_hybrid_nb as thn

    @T.prim_func(s_tir=True)
    def matmul_k1(a: T.Buffer((5, 1), "float32"), b: T.Buffer((1, 4), "float32"), c: T.Buffer((5, 4), "float32"),
                  out: T.Buffer((5, 4), "float32")):
        T.func_attr({"tirx.noalias": True})
        mm = T.sblock_alloc_buffer((5, 4))
        for i0, i1, k in T.grid(5, 4, 1):
            with T.sblock("matmul"):
                v_i0, v_i1, v_k = T.axis.remap("SSR", [i0, i1, k])
                with T.init():
                    mm[v_i0, v_i1] = T.float32(0.0)
                mm[v_i0, v_i1] = mm[v_i0, v_i1] + a[v_i0, v_k] * b[v_k, v_i1]
        for i0, i1 in T.grid(5, 4):
            with T.sblock("add"):
                v_i0, v_i1 = T.axis.remap("SS", [i0, i1])
                out[v_i0, v_i1] = mm[v_i0, v_i1] + c[v_i0, v_i1]

    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((5, 1), (1, 4), (5, 4)))
    _, scheduled = zoo.schedule(matmul_k1, "dlight-gpu")
    serial = thn.build(zoo_diagnosis._serial_threads(scheduled["main"]).with_attr("global_symbol", "main"), target="llvm")
    by_tvm = np.zeros((5, 4), np.float32)
    serial.run_native(a, b, c, by_tvm)
    np.testing.assert_allclose(by_tvm, a @ b + 2 * c, rtol=1e-6)  # TVM's own build: the bias twice
    emulated = np.zeros((5, 4), np.float32)
    thn.build(scheduled, target=zoo.cuda_target()).emulate(a, b, c, emulated, stage=0)
    np.testing.assert_allclose(emulated, a @ b + 2 * c, rtol=1e-6)
    for flavour in zoo.FLAVOURS:
        o = zoo.check_kernel("k1.fused_matmul_add", matmul_k1, flavour)
        if flavour == "dlight-gpu":
            assert o.outcome == "wrong" and zoo.SCHEDULE_CHANGE in o.reason, o
            assert "reverse_compute_inline" in zoo.tvm_finding(o)
        else:
            assert o.outcome == "ok", o


def test_an_integer_product_that_overflows_on_the_seeded_inputs_is_checked_on_narrow_ones():
    # cumprod of int32 in [-100, 100] over 6 elements overflows (undefined: nsw); in [-1, 1] it cannot.
    import numpy as np
    from tvm.relax import op as R
    from tvm.relax.frontend.nn import spec
    from tvm.relax.frontend.nn.core import wrap_nested

    from tvm_hybrid_nb.signature import seeded_values

    kernels = _nn_kernels("prod", lambda self, x: wrap_nested(R.cumprod(x._expr, axis=1), "cumprod"),
                          {"x": spec.Tensor((3, 6), "int32")})
    (k,) = [k for k in kernels if k.llvm is not None and "cumprod" in k.name]
    (x,) = seeded_values([("x", "int32", [3, 6], False)], 0, {})
    assert np.abs(np.cumprod(x.astype(np.int64), axis=1)).max() > np.iinfo(np.int32).max  # the overflow is real
    for flavour in ("none", "dlight-cpu"):
        o = zoo.check_kernel(k.name, k.llvm, flavour, reference=k.reference, check=True)
        assert o.outcome == "ok" and o.reason.startswith(zoo.NARROW_INTEGERS), o
        assert zoo.check_kernel(k.name, k.llvm, flavour, reference=k.reference).reason == ""  # wraps alike


def test_an_integer_hash_that_overflows_on_every_input_is_tvms_poison_with_its_llvm_ir_as_evidence():
    # x * 2654435761 + 0x9e3779b9 in uint32 wraps in relax (numpy's meaning) and in the CUDA build, but
    # TVM's llvm code generator marks uint32 arithmetic `nuw`: the wrapped value is poison natively, on
    # the seeded inputs and on [-1, 1] alike (the constants overflow).  Not a crash of the emulator: a
    # TVM finding whose evidence is the native build's own LLVM IR.  A product that fits stays ok.
    from tvm.relax.frontend.nn import spec

    def hash_forward(self, x):
        return x * 2654435761 + 2654435769

    kernels = _nn_kernels("hash", hash_forward, {"x": spec.Tensor((6,), "uint32")})
    (k,) = [k for k in kernels if k.llvm is not None]
    for flavour in ("none", "dlight-cpu"):
        o = zoo.check_kernel(k.name, k.llvm, flavour, reference=k.reference, check=True)
        assert o.outcome == "crash" and "uint32 overflow" in o.reason, o
        evidence = zoo.tvm_finding(o)
        assert evidence is not None and "nuw i32" in evidence and "LLVM IR" in evidence, evidence
        assert zoo.check_kernel(k.name, k.llvm, flavour, reference=k.reference).outcome == "ok"  # wraps alike
    o = zoo.check_kernel(k.name, k.cuda or k.llvm, "dlight-gpu", reference=k.reference, check=True)
    assert o.outcome == "ok", o  # CUDA's unsigned arithmetic wraps: defined

    small = _nn_kernels("small", lambda self, x: x * 3 + 5, {"x": spec.Tensor((6,), "uint32")})
    (k,) = [k for k in small if k.llvm is not None]
    assert zoo.check_kernel(k.name, k.llvm, "none", reference=k.reference, check=True).outcome == "ok"


def test_a_shift_past_the_bit_width_on_every_input_is_tvms_poison_in_every_flavour():
    # uint8 x >> (s % 4 + 5): counts reach 8 on any input.  TVM's llvm code shifts with a plain
    # `lshr <n x i8>` (poison from a count of 8); CUDA C shifts the promoted int (0).  So the llvm
    # flavours' own stage 0 and, for cuda, the native reference are undefined: a TVM finding with
    # the reference's LLVM IR as evidence, not an emulator crash or a wrong answer (15th probe).
    from tvm import relax
    from tvm.relax import op as R
    from tvm.relax.frontend.nn import spec
    from tvm.relax.frontend.nn.core import wrap_nested

    def shift_forward(self, x, s):
        four, five = (relax.const(v, "uint8") for v in (4, 5))
        count = R.add(R.floor_mod(s._expr, four), five)
        return wrap_nested(R.right_shift(x._expr, count), "right_shift")

    kernels = _nn_kernels("shift", shift_forward, {"x": spec.Tensor((6,), "uint8"), "s": spec.Tensor((6,), "uint8")})
    (k,) = [k for k in kernels if "right_shift" in k.name]
    for flavour in ("none", "dlight-cpu", "dlight-gpu"):
        func = k.cuda if flavour == "dlight-gpu" and k.cuda is not None else k.llvm
        o = zoo.check_kernel(k.name, func, flavour, reference=k.reference, check=True)
        assert o.outcome == "crash" and "shift by 8 of a 8-bit integer" in o.reason, (flavour, o)
        evidence = zoo.tvm_finding(o)
        assert evidence is not None and "lshr" in evidence and "i8" in evidence, (flavour, evidence)
    o = zoo.check_kernel(k.name, k.cuda or k.llvm, "dlight-gpu", reference=k.reference, check=True)
    assert o.reason.startswith(zoo.REFERENCE_UNDEFINED), o


def test_index_put_with_repeated_indices_is_tvms_race():
    # topi's index_put updates in a T.parallel loop: six indices into an axis of 2 repeat, and with
    # accumulate=True two iterations read-modify-write one element (a lost update on real threads).
    # The race is reported at stage 0 and documented as TVM's (15th probe, index_put_acc).
    from tvm import relax
    from tvm.relax import op as R
    from tvm.relax.frontend.nn import spec
    from tvm.relax.frontend.nn.core import wrap_nested

    def put_forward(self, d, r, v):
        rows = R.floor_mod(r._expr, relax.const(2, "int64"))
        return wrap_nested(R.index_put(d._expr, (rows,), v._expr, accumulate=True), "index_put")

    kernels = _nn_kernels("put", put_forward, {"d": spec.Tensor((2,), "float32"), "r": spec.Tensor((6,), "int64"),
                                               "v": spec.Tensor((6,), "float32")})
    (k,) = [k for k in kernels if "index_put" in k.name and k.llvm is not None]
    for flavour in ("none", "dlight-cpu", "dlight-gpu"):
        func = k.cuda if flavour == "dlight-gpu" and k.cuda is not None else k.llvm
        o = zoo.check_kernel(k.name, func, flavour, reference=k.reference, check=True)
        assert o.outcome == "crash" and "data race on out_buf" in o.reason, (flavour, o)
        assert "topi/index_put.py" in zoo.tvm_finding(o)
        o.kernel = "put.scatter_elements"  # another operator's race stays a failure of the zoo
        assert zoo.tvm_finding(o) is None


def test_integer_inputs_that_index_out_of_bounds_are_checked_as_ones():
    # relax's dynamic_strided_slice reads x at begin + i * stride, begin and stride being inputs the
    # output's size must agree with (an NMS's shape function computes them): seeded values read out
    # of bounds, so the native reference refuses; ones read in bounds and the kernel is checked.
    # (Zeros did too, but a stride of 0 reads x[0, 0] everywhere: a kernel that ignored begin
    # passed.)
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def dynamic_slice(x: T.Buffer((6, 3), "int64"), begin: T.Buffer((2,), "int64"), stride: T.Buffer((2,), "int64"),
                      out: T.Buffer((4, 2), "int64")):
        for i, j in T.grid(4, 2):
            with T.sblock("slice"):
                vi, vj = T.axis.remap("SS", [i, j])
                out[vi, vj] = x[T.min(T.max(begin[0], T.int64(0)), T.int64(5)) + vi * stride[0],
                                T.min(T.max(begin[1], T.int64(0)), T.int64(2)) + vj * stride[1]]

    o = zoo.check_kernel("t.dynamic_strided_slice", dynamic_slice, "none", check=True)
    assert o.outcome == "ok" and "integer inputs 1" in o.reason, o

    @T.prim_func(s_tir=True)
    def slice_without_begin(x: T.Buffer((6, 3), "int64"), begin: T.Buffer((2,), "int64"),
                            stride: T.Buffer((2,), "int64"), out: T.Buffer((4, 2), "int64")):
        for i, j in T.grid(4, 2):
            with T.sblock("slice"):
                vi, vj = T.axis.remap("SS", [i, j])
                out[vi, vj] = x[vi * stride[0], vj * stride[1]]

    o = zoo.check_kernel("t.dynamic_strided_slice", slice_without_begin, "none", reference=dynamic_slice)
    assert o.outcome == "wrong", o


def test_integer_inputs_that_index_out_of_bounds_as_ones_are_checked_as_zeros():
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def gather_last(x: T.Buffer((4, 3), "float32"), at: T.Buffer((4,), "int32"), out: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("gather"):
                vi = T.axis.spatial(4, i)
                out[vi] = x[vi, at[vi] + 2]  # in bounds for at = 0 only

    o = zoo.check_kernel("t.gather_last", gather_last, "none", check=True)
    assert o.outcome == "ok" and "integer inputs 0" in o.reason, o
