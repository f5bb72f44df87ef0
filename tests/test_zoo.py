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
               "gelu", "silu", "triu", "concatenate", "cast"):
        assert op in names, op
    assert len(kernels) >= 40
    assert any(k.cuda is not None and k.llvm is None for k in kernels)  # GPU-only sort/scan kernels


@pytest.mark.parametrize("flavour", zoo.FLAVOURS)
def test_every_zoo_kernel_is_exact_at_every_stage(kernels, flavour):
    report = zoo.run_zoo([flavour], mode="fast", kernels=kernels)
    problems = [o for o in report.problems() if not (o.outcome == "refused" and zoo.refusal_allowed(o))]
    assert not problems, "\n".join(f"{o.kernel}: {o.outcome} at {o.stage}: {o.reason}" for o in problems)
    counts = report.counts(flavour)
    assert counts["ok"] >= len(report.outcomes) // 2
    assert sum(o.stages_checked for o in report.outcomes) > 5 * counts["ok"]


def test_zoo_command_prints_the_table(capsys):
    status = cli.main(["zoo", "--flavour", "dlight-gpu", "--kernel", "softmax.", "--kernel", "sortscan.argmax"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "| dlight-gpu | 3 | 0 | 0 | 0 |" in out
