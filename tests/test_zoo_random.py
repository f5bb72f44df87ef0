"""``zoo --random N``: random chains of ``nn`` operators, fused by TVM's Relax pipeline into kernels
that no single-operator model makes, and (``--family``) random decoder layers and conv nets, each
checked as the zoo checks its own models."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.zoo_random import (INTEGER_DTYPES, INTEGER_STEPS, IntegerPlan, chain_plan, decoder_plan,
                                      image_plan, integer_module, integer_plan, integer_spec, random_models,
                                      random_plans)


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


def test_bfloat16_plans_draw_norms_that_tvm_legalizes_and_otherwise_the_float32_draw():
    """TVM's ``layer_norm`` and ``group_norm`` legalize float32 and float16 only: a bfloat16 plan draws
    an RMS norm (chains, decoders) or centres the image (conv nets) in their place, the rest as drawn."""
    for seed in range(60):
        for draw in (chain_plan, image_plan):
            wide, narrow = draw(seed, "float32"), draw(seed, "bfloat16")
            swapped = {("norm", "layer"): ("norm", "rms"), ("group_norm", None): ("center", None)}
            assert narrow.steps == [swapped.get(step, step) for step in wide.steps], wide.describe()
        assert decoder_plan(seed, "bfloat16") == dataclasses.replace(decoder_plan(seed, "float32"), dtype="bfloat16",
                                                                     norm="rms")


@pytest.mark.parametrize("seed, family", [(93, "chain"), (15, "image")])
def test_a_bfloat16_model_lowers_and_emulates_exactly_unscheduled_and_under_dlights_gpu_rules(seed, family):
    """r93: a layer norm and a gated LayerNorm parameter step (both RMS norms in bfloat16), then
    self-attention; i15: a strided 1x1 convolution, a group norm (centring in bfloat16), max pooling."""
    kernels = zoo.collect_kernels(random_models(1, seed=seed, dtype="bfloat16", family=family))
    names = [k.name for k in kernels]
    assert any("rms_norm" in n for n in names) if family == "chain" else any("mean" in n for n in names), names
    _assert_ok_unscheduled_and_under_dlights_gpu_rules(kernels)


def test_the_command_line_takes_random_models_and_refuses_them_with_a_script():
    run = subprocess.run([sys.executable, "-m", "tvm_hybrid_nb", "zoo", "--random", "1", "--seed", "9",
                          "--flavour", "none"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "| none |" in run.stdout and " 0 | 0 | 0 |" in run.stdout
    decoder = subprocess.run([sys.executable, "-m", "tvm_hybrid_nb", "zoo", "--random", "1", "--family", "decoder",
                              "--seed", "2", "--flavour", "none", "-v"], capture_output=True, text=True, timeout=600)
    assert decoder.returncode == 0, decoder.stderr[-2000:]
    assert "d2.fused_matmul" in decoder.stdout and " 0 | 0 | 0 |" in decoder.stdout
    mismatched = subprocess.run([sys.executable, "-m", "tvm_hybrid_nb", "zoo", "--random", "1", "--dtype", "int8"],
                                capture_output=True, text=True, timeout=600)
    assert mismatched.returncode != 0 and "--dtype int8 does not go with --family chain" in mismatched.stderr
    both = subprocess.run([sys.executable, "-m", "tvm_hybrid_nb", "zoo", "--random", "1", "--models", "x.py"],
                          capture_output=True, text=True, timeout=600)
    assert both.returncode != 0 and "--random and --models are exclusive" in both.stderr


def test_decoder_plans_cover_grouped_heads_caches_rope_and_symbolic_lengths():
    assert decoder_plan(23).describe() == decoder_plan(23).describe() != decoder_plan(24).describe()
    plans = random_plans(40, family="decoder")
    assert all(p.heads % p.kv_heads == 0 for p in plans)
    for feature in (lambda p: p.kv_heads < p.heads, lambda p: p.past, lambda p: p.rope, lambda p: p.gated,
                    lambda p: p.length == "n", lambda p: p.length == 1, lambda p: p.norm == "layer"):
        assert any(feature(p) for p in plans) and not all(feature(p) for p in plans)
    with pytest.raises(ValueError, match="family must be one of"):
        random_plans(1, family="encoder")


def test_a_random_decoder_layer_emulates_exactly_unscheduled_and_under_dlights_gpu_rules():
    """d23: two query heads sharing one key/value head, rotary embedding, a past cache of m positions
    before n new tokens under a causal mask, layer norms and biases."""
    (name, module, spec), = random_models(1, seed=23, family="decoder")
    assert "2 heads (1 kv)" in decoder_plan(23).describe() and "past cache" in decoder_plan(23).describe()
    kernels = zoo.collect_kernels([(name, module, spec)])
    names = [k.name for k in kernels]
    assert any("repeat" in n for n in names) and any("triu" in n for n in names), names
    for kernel in kernels:
        if kernel.llvm is not None:
            outcome = zoo.check_kernel(kernel.name, kernel.llvm, "none", reference=kernel.reference)
            assert outcome.outcome == "ok", outcome
    # The attention's own kernels under dlight's GPU rules: scores with the mask over cache and tokens,
    # the grouped heads' repeat, the softmax (the projections are the zoo's Linear layers).
    attention = [k for k in kernels if k.cuda is not None and any(w in k.name for w in ("triu", "repeat", "softmax"))]
    assert len(attention) >= 3, [k.name for k in kernels]
    for kernel in attention:
        outcome = zoo.check_kernel(kernel.name, kernel.cuda, "dlight-gpu", reference=kernel.reference)
        assert outcome.outcome == "ok", outcome


def test_image_plans_never_pool_an_image_away_and_cover_symbolic_sizes():
    plans = random_plans(60, family="image")
    assert any(p.shape[2] == "h" for p in plans) and any(p.shape[2] != "h" for p in plans)
    kinds = {kind for p in plans for kind, _ in p.steps}
    assert {"conv", "dwconv", "maxpool", "avgpool", "group_norm", "upsample", "concat"} <= kinds
    for plan in plans:
        size = 4 if plan.shape[2] == "h" else plan.shape[2]
        for kind, choice in plan.steps:
            if kind == "conv":
                _, kernel, stride, _ = (int(v) if v.isdigit() else v for v in choice.split(":"))
                size = (size + 2 * (kernel // 2) - kernel) // stride + 1
            elif kind == "maxpool":
                size = -(-size // 2) if choice == "ceil" else size // 2
            elif kind == "upsample":
                assert plan.shape[2] != "h", plan.describe()
                size *= 2
            assert size >= 1, plan.describe()


def _assert_ok_unscheduled_and_under_dlights_gpu_rules(kernels):
    for kernel in kernels:
        for flavour, func in (("none", kernel.llvm), ("dlight-gpu", kernel.cuda)):
            if func is not None:
                outcome = zoo.check_kernel(kernel.name, func, flavour, reference=kernel.reference)
                assert outcome.outcome == "ok", outcome


def test_a_random_conv_net_emulates_exactly_unscheduled_and_under_dlights_gpu_rules():
    """i4: a depthwise and a 1x1 convolution, average pooling counting the padding, floor-mode max pooling,
    over a symbolic h x w image."""
    assert image_plan(4).shape[2:] == ("h", "w")
    kernels = zoo.collect_kernels(random_models(1, seed=4, family="image"))
    names = [k.name for k in kernels]
    assert any("conv2d" in n for n in names) and any("pool" in n for n in names), names
    _assert_ok_unscheduled_and_under_dlights_gpu_rules(kernels)


def test_integer_plans_cover_every_dtype_and_step_and_never_negate_unsigned_values():
    plans = random_plans(80, family="integer", dtype="")
    assert {p.dtype for p in plans} == set(INTEGER_DTYPES)
    assert {kind for p in plans for kind, _ in p.steps} == set(INTEGER_STEPS)
    for plan in plans:
        for (kind, choice), dtype in zip(plan.steps, plan.dtypes()):
            if dtype.startswith("u"):  # relax cannot negate an unsigned value
                assert kind != "abs_neg" and not (kind == "divide" and choice.endswith("-")), plan.describe()
    assert integer_plan(5, "int16").dtype == "int16" and integer_plan(5).describe() == integer_plan(5).describe()


def test_an_integer_chain_wraps_divides_shifts_and_rounds_as_tvms_builds_do():
    """int8 products that wrap, truncating division by a negative tensor and flooring remainder by a
    negative constant, an arithmetic right shift, halves rounded to even through float32, a narrowing
    cast to uint8 and a uint8 sum that wraps, argmax/argmin with ties: unscheduled and under dlight's
    GPU rules, against TVM's llvm build."""
    plan = IntegerPlan("qt", (2, "n", 8), "int8", tail="arg_extremes", steps=[
        ("arith", "multiply"), ("divide", "divide:tensor:-"), ("divide", "floor_mod:const:-"),
        ("shift", "right_shift:1"), ("float_trip", "round"), ("cast", "uint8"), ("reduce_bcast", "sum:2:add")])
    assert plan.dtypes()[-1] == "uint8"
    kernels = zoo.collect_kernels([(plan.name, integer_module(plan), integer_spec(plan))])
    names = [k.name for k in kernels]
    assert any("floor_mod" in n for n in names) and any("argmax" in n for n in names), names
    _assert_ok_unscheduled_and_under_dlights_gpu_rules(kernels)


def test_a_complement_that_cuda_c_reads_as_an_int_is_tvms_finding_with_its_source():
    """q101: where(y < ~x, ~x, y ^ 5) on uint8 under dlight's GPU rules: TVM's CUDA source compares
    C's ``~x`` (an int, negative) where the TIR compares the uint8 complement."""
    kernels = zoo.collect_kernels(random_models(1, seed=101, family="integer", dtype=""))
    kernel = next(k for k in kernels if k.name.startswith("q101.fused_tir_bitwise_not") and k.cuda is not None)
    outcome = zoo.check_kernel(kernel.name, kernel.cuda, "dlight-gpu", reference=kernel.reference, check=True)
    assert outcome.outcome == "crash" and zoo.tvm_finding(outcome), outcome
    assert "computes uint8 `~` in C's int" in outcome.tvm_failure and "(~x_ptr[" in outcome.tvm_failure
    assert zoo.check_kernel(kernel.name, kernel.cuda, "dlight-gpu", reference=kernel.reference).outcome == "ok"
