"""``zoo --random N``: random chains of ``nn`` operators, fused by TVM's Relax pipeline into kernels
that no single-operator model makes, each checked as the zoo checks its own models."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.zoo_random import chain_plan, random_models


def test_a_seed_draws_the_same_chain_and_widths_follow_the_steps():
    assert chain_plan(9).describe() == chain_plan(9).describe()
    assert chain_plan(9).describe() != chain_plan(10).describe()
    plans = [chain_plan(s) for s in range(40)]
    assert any(p.shape[1] == "n" for p in plans) and any(p.tail == "self_attention" for p in plans)


@pytest.mark.parametrize("seed, dtype", [(9, "float32"), (14, "float32"), (101, "float16")])
def test_random_chains_fuse_into_multi_operator_kernels_that_emulate_exactly(seed, dtype):
    kernels = zoo.collect_kernels(random_models(1, seed=seed, dtype=dtype))
    assert any(k.name.split(".", 1)[1].startswith("fused_") for k in kernels), [k.name for k in kernels]
    for kernel in (k for k in kernels if k.llvm is not None):  # GPU-only kernels: a scan for cuda
        outcome = zoo.check_kernel(kernel.name, kernel.llvm, "none", reference=kernel.reference)
        assert outcome.outcome == "ok", outcome


def test_the_command_line_takes_random_models_and_refuses_them_with_a_script():
    run = subprocess.run([sys.executable, "-m", "tvm_hybrid_nb", "zoo", "--random", "1", "--seed", "9",
                          "--flavour", "none"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "| none |" in run.stdout and " 0 | 0 | 0 |" in run.stdout
    both = subprocess.run([sys.executable, "-m", "tvm_hybrid_nb", "zoo", "--random", "1", "--models", "x.py"],
                          capture_output=True, text=True, timeout=600)
    assert both.returncode != 0 and "--random and --models are exclusive" in both.stderr
