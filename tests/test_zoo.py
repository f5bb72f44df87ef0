"""The real-model zoo (tvm_hybrid_nb.zoo): every kernel of small Relax models, scheduled three ways,
emulated in fast mode at every changed stage before MakePackedAPI and compared with the native llvm
build of the unscheduled kernel.  No wrong answer, no crash, refusals only from the allow-list."""
from __future__ import annotations

import pytest

from tvm_hybrid_nb import cli, zoo


@pytest.fixture(scope="module")
def kernels():
    return zoo.collect_kernels()


def test_zoo_covers_the_operators_it_promises(kernels):
    names = " ".join(k.name for k in kernels)
    for op in ("matmul", "softmax", "log_softmax", "layer_norm", "group_norm", "rms_norm", "conv2d",
               "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "argmax", "topk", "sort", "cumsum",
               "gelu", "silu", "triu", "concatenate", "cast", "take", "repeat", "argmin", "variance", "prod",
               "erf", "floor_divide", "conv1d", "right_shift", "cumprod", "argsort", "strided_slice", "tile", "flip"):
        assert op in names, op
    assert len(kernels) >= 100
    assert any(k.cuda is not None and k.llvm is None for k in kernels)  # GPU-only sort/scan kernels


@pytest.mark.parametrize("flavour", zoo.FLAVOURS)
def test_every_zoo_kernel_is_exact_at_every_stage(kernels, flavour):
    report = zoo.run_zoo([flavour], mode="fast", kernels=kernels)
    problems = [o for o in report.problems()
                if not (o.outcome == "refused" and zoo.refusal_allowed(o)) and not zoo.tvm_finding(o)]
    assert not problems, "\n".join(f"{o.kernel}: {o.outcome} at {o.stage}: {o.reason}" for o in problems)
    for flavour_, prefix, message in zoo.TVM_FINDINGS:  # TVM's races that change the result are found
        if flavour_ == flavour and "scan.py" in zoo.TVM_FINDINGS[(flavour_, prefix, message)]:
            assert any(o.kernel.startswith(prefix) and o.outcome == "wrong" and zoo.TVM_FINDING in o.reason
                       and message in o.reason for o in report.outcomes), prefix
    counts = report.counts(flavour)
    assert counts["ok"] >= len(report.outcomes) // 2 and counts["wrong"] == counts["crash"] == 0
    assert sum(o.stages_checked for o in report.outcomes) > 5 * counts["ok"]


#: Kernels whose TVM output once raised false sanitizer alarms (LowerThreadAllreduce's select over
#: uninitialised lanes and silent stores; dlight.cpu's per-iteration reduction temporaries), the one
#: with a real race, and clean ones.
SANITIZED_KERNELS = ("lm_head.fused_matmul1_add1", "lm_head.fused_matmul_silu_multiply", "lm_head.fused_rms_norm_add",
                     "norms.group_norm", "sortscan.argmax", "sortscan.gpu_2d_continuous_cumsum", "norms.layer_norm",
                     "softmax.softmax", "shapes.cumsum", "shapes.cumprod")


def test_zoo_under_sanitizers_has_no_false_alarms(kernels):
    chosen = [k for k in kernels if k.name in SANITIZED_KERNELS]
    assert {k.name for k in chosen} == set(SANITIZED_KERNELS), sorted(k.name for k in kernels)
    report = zoo.run_zoo(mode="fast", kernels=chosen, check=True)
    alarms = [o for o in report.problems()
              if not zoo.tvm_finding(o) and not (o.outcome == "refused" and zoo.refusal_allowed(o))]
    assert not alarms, "\n".join(f"{o.flavour} {o.kernel}: {o.outcome} at {o.stage}: {o.reason}" for o in alarms)
    for flavour, prefix, message in zoo.TVM_FINDINGS:  # each real bug is still found
        assert any(o.flavour == flavour and o.kernel.startswith(prefix) and message in o.reason
                   for o in report.outcomes), (flavour, prefix, message)
    assert sum(o.outcome == "ok" for o in report.outcomes) >= len(report.outcomes) - len(zoo.TVM_FINDINGS)


def test_zoo_command_prints_the_table(capsys):
    status = cli.main(["zoo", "--flavour", "dlight-gpu", "--kernel", "softmax.", "--kernel", "sortscan.argmax"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "| dlight-gpu | 3 | 0 | 0 | 0 | 0 |" in out
