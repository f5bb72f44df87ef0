"""Kernels only the cuda lowering has, in the zoo; first relax's multinomial_from_uniform.

1. ``zoo._lower`` ran DispatchSortScan but not DispatchSampling (which every relax backend pipeline runs
   first: relax/backend/{cpu_generic,cuda,gpu_generic}/pipeline.py), so ``R.multinomial_from_uniform``
   stayed a Relax op and no kernel of it was ever checked (the sampling test's model has one).
2. Its cuda lowering is one cuda-only kernel, ``parallel_sampling_from_prob`` (llvm: cumsum +
   get_sample_index, no twin at its call): without a numpy reference the zoo built the GPU kernel for
   llvm as its own reference, that failed, and the zoo called it "TVM cannot build it" [TVM finding].
3. The kernel's while loop is ``while T.tvm_thread_invariant(cond)``: the emulator refused the hint
   ("no exact numpy translation"); it is ``cond`` itself.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import zoo


def _sampling_kernels(vocab=10, batch=3, samples=4):
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import op, spec

    class Model(nn.Module):
        def forward(self, prob, u, idx):
            return op.multinomial_from_uniform(prob, u, idx)

    f32 = "float32"
    model = Model()
    s = {"prob": spec.Tensor((batch, vocab), f32), "u": spec.Tensor((samples, 1), f32),
         "idx": spec.Tensor((samples, 1), "int64")}
    return model, s, zoo.collect_kernels([(f"mult{vocab}", model, s)])


def _inputs(vocab, batch, samples, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.01, 1, (batch, vocab))
    prob = (p / p.sum(axis=-1, keepdims=True)).astype("float32")
    u = rng.uniform(0, 1, (samples, 1)).astype("float32")
    idx = rng.integers(0, batch, (samples, 1)).astype("int64")
    return prob, u, idx


def _numpy_truth(prob, u, idx):
    """Inverse-CDF sampling: the first position whose cumulative probability exceeds u."""
    cdf = np.cumsum(prob[idx[:, 0]].astype(np.float64), axis=-1)
    return np.minimum((cdf <= u.astype(np.float64)).sum(axis=-1), prob.shape[-1] - 1).reshape(-1, 1)


def test_multinomial_from_uniform_is_lowered_and_its_gpu_kernel_checked():
    _, _, kernels = _sampling_kernels()
    names = {k.name.split(".", 1)[1] for k in kernels}
    assert {"get_sample_index", "parallel_sampling_from_prob"} <= names, names
    report = zoo.run_zoo(kernels=kernels)
    assert not report.problems(), "\n".join(f"{o.flavour} {o.kernel}: {o.outcome} at {o.stage}: {o.reason}"
                                            for o in report.problems())
    (gpu,) = [k for k in kernels if k.name.endswith("parallel_sampling_from_prob")]
    outcome = zoo.check_kernel(gpu.name, gpu.cuda, "dlight-gpu", reference=gpu.reference)
    assert outcome.outcome == "ok" and outcome.stages_checked > 5, outcome
    # Under the sanitizers: the warp scan's real race (relax's sampling.py), documented as TVM's.
    outcome = zoo.check_kernel(gpu.name, gpu.cuda, "dlight-gpu", reference=gpu.reference, check=True)
    assert outcome.outcome == "crash" and "data race on cumsum" in outcome.reason, outcome
    assert "sampling.py" in zoo.tvm_finding(outcome)


@pytest.mark.parametrize("vocab", [10, 700])  # 700: two 512-wide steps of the kernel's while loop
def test_gpu_sampling_kernel_and_its_reference_agree_with_tvms_cpu_build(vocab):
    from tvm import relax

    batch, samples = 3, 6
    model, s, kernels = _sampling_kernels(vocab, batch, samples)
    prob, u, idx = _inputs(vocab, batch, samples)
    want = _numpy_truth(prob, u, idx)
    # TVM's own CPU build of the model (DispatchSampling: cumsum + get_sample_index)
    mod, _ = model.export_tvm(spec={"forward": s})
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    native = vm["forward"](*[tvm.runtime.tensor(a) for a in (prob, u, idx)]).numpy()
    np.testing.assert_array_equal(native, want)
    (gpu,) = [k for k in kernels if k.name.endswith("parallel_sampling_from_prob")]
    np.testing.assert_array_equal(gpu.reference(prob, u, idx, out_dtypes=["int64"]), want)
    hm = thn.build(gpu.cuda, target=zoo.cuda_target())
    for stage in hm.stages[:hm.packed_api_index]:
        if not (stage.changed or stage.index == 0):
            continue
        out = np.zeros((samples, 1), "int64")
        hm.emulate(prob, u, idx, out, stage=stage.index, mode="fast")
        np.testing.assert_array_equal(out, want, err_msg=stage.label)


@T.prim_func(s_tir=True)
def _first_above(A: T.Buffer((16,), "float32"), B: T.Buffer((1,), "int32")):
    i = T.alloc_buffer((1,), "int32")
    i[0] = 0
    while T.tvm_thread_invariant(i[0] < 15 and A[i[0]] < T.float32(0.5)):
        i[0] = i[0] + 1
    B[0] = i[0]


def test_tvm_thread_invariant_is_its_condition():
    hm = thn.build(_first_above, target="llvm")
    a = np.random.default_rng(1).uniform(0, 1, 16).astype("float32")
    a[:3] = 0.1
    want = np.zeros(1, "int32")
    hm.run_native(a.copy(), want)
    assert want[0] == int(np.argmax(a >= 0.5))
    for mode in ("exact", "fast"):
        got = np.zeros(1, "int32")
        hm.emulate(a.copy(), got, mode=mode, check=True)
        np.testing.assert_array_equal(got, want, err_msg=mode)


def test_a_gpu_only_kernel_without_twin_or_numpy_meaning_is_checked_against_its_stage_0():
    # It was built for llvm as its own reference, which fails, and reported as "TVM cannot build it".
    from tvm_hybrid_nb.examples import gpu_row_sum

    row_sum = gpu_row_sum().obj.mod["main"]  # bound to blockIdx.x and threadIdx.x: llvm cannot build it
    outcome = zoo.check_kernel("x.row_sum", row_sum, "dlight-gpu", reference=row_sum)
    assert outcome.outcome == "ok" and outcome.stages_checked > 5 and not outcome.tvm_failure, outcome
    assert "exact emulation of the unscheduled kernel" in outcome.reason
