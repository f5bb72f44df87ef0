"""Zoo models with several methods: a decoder's ``prefill`` and ``decode`` (the way
``relax.frontend.nn`` models for LLMs are exported) give the kernels of every method, each checked
against TVM's native build; a spec that names a method the module lacks is one clear error."""
from __future__ import annotations

import pytest
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op, spec

from tvm_hybrid_nb import cli, zoo


class Decoder(nn.Module):
    def __init__(self):
        self.proj = nn.Linear(16, 16, bias=False)
        self.cache = nn.KVCache(8, [16])

    def prefill(self, x):
        return op.softmax(self.proj(x), axis=-1)

    def decode(self, x):
        self.cache.append(op.reshape(x, (1, 16)))
        return op.sum(self.proj(x), axis=-1), op.sum(self.cache.view(4), axis=0)


SPEC = {"prefill": {"x": spec.Tensor((3, 16), "float32")}, "decode": {"x": spec.Tensor((1, 16), "float32")}}


def test_every_method_of_a_model_gives_its_kernels_and_each_is_exact():
    kernels = zoo.collect_kernels([("decoder", Decoder(), SPEC)])
    names = {k.name for k in kernels}
    assert "decoder.softmax" in names, names  # prefill's
    assert sum(name.startswith("decoder.sum") for name in names) == 2, names  # decode's two sums
    for kernel in kernels:
        for flavour in zoo.FLAVOURS:
            func = kernel.cuda if flavour == "dlight-gpu" else kernel.llvm
            outcome = zoo.check_kernel(kernel.name, func, flavour, reference=kernel.reference)
            assert outcome.outcome == "ok" and outcome.stages_checked > 0, outcome


def test_a_spec_for_a_missing_method_or_mixing_methods_with_parameters_is_refused_by_name():
    with pytest.raises(TypeError, match="Decoder has no method 'forward'"):
        zoo.collect_kernels([("decoder", Decoder(), {"forward": {"x": spec.Tensor((1, 16), "float32")}})])
    with pytest.raises(TypeError, match=r"mixes methods \(prefill\) with parameters \(x\)"):
        zoo.collect_kernels([("decoder", Decoder(), {"prefill": SPEC["prefill"], "x": spec.Tensor((1, 16), "float32")})])


SCRIPT = '''
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op, spec


class Decoder(nn.Module):
    def __init__(self):
        self.proj = nn.Linear(16, 16, bias=False)

    def prefill(self, x):
        return op.softmax(self.proj(x), axis=-1)

    def decode(self, x):
        return op.sum(self.proj(x), axis=-1)


def models():
    return [("mine", Decoder(), {"prefill": {"x": spec.Tensor((3, 16), "float32")},
                                 "decode": {"x": spec.Tensor((1, 16), "float32")}})]
'''


def test_the_zoo_command_checks_a_users_own_models(tmp_path, capsys):
    script = tmp_path / "my_models.py"
    script.write_text(SCRIPT)
    status = cli.main(["zoo", "--models", str(script), "--flavour", "none", "-v"])
    out = capsys.readouterr().out
    assert status == 0, out
    expected = {k.name for k in zoo.collect_kernels(cli.load_zoo_models(str(script)))}
    assert {"mine.softmax", "mine.sum"} <= expected, expected
    assert f"| none | {len(expected)} | 0 | 0 | 0 | 0 |" in out, out
    assert all(" ok " in line for line in out.splitlines() if line.startswith("none ")), out


def test_a_models_script_without_models_is_one_usage_error(tmp_path, capsys):
    script = tmp_path / "empty.py"
    script.write_text("x = 1\n")
    assert cli.main(["zoo", "--models", str(script)]) == cli.EXIT_USAGE
    assert "defines no models()" in capsys.readouterr().err
    script.write_text("def models():\n    return [('m', None)]\n")
    assert cli.main(["zoo", "--models", str(script)]) == cli.EXIT_USAGE
    assert "(name, nn.Module, spec) tuples" in capsys.readouterr().err
    script.write_text(SCRIPT.replace('"decode": {', '"step": {'))  # a method the module lacks
    assert cli.main(["zoo", "--models", str(script)]) == cli.EXIT_USAGE
    assert "Decoder has no method 'step'" in capsys.readouterr().err


def test_a_model_tvm_cannot_export_is_a_build_error_that_names_it(tmp_path, capsys):
    from tvm_hybrid_nb.errors import BuildError

    wrong_width = {"prefill": {"x": spec.Tensor((3, 15), "float32")}, "decode": SPEC["decode"]}  # Linear(16, 16)
    with pytest.raises(BuildError, match="zoo model 'decoder': export_tvm raised"):
        zoo.collect_kernels([("decoder", Decoder(), wrong_width)])
    script = tmp_path / "my_models.py"
    script.write_text(SCRIPT.replace("spec.Tensor((3, 16)", "spec.Tensor((3, 15)"))
    assert cli.main(["zoo", "--models", str(script)]) == cli.EXIT_USAGE
    assert "zoo model 'mine': export_tvm raised" in capsys.readouterr().err


class _KVAttention(nn.Module):
    def forward(self, q, past_k, past_v):
        k, v = op.concat([past_k, q], dim=1), op.concat([past_v, q], dim=1)  # m + n positions
        return op.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_a_model_tvm_cannot_lower_is_a_build_error_that_names_it():
    """TVM's attention legalization asserts on a query of ``n`` positions over ``m + n`` keys (topi's
    batch_matmul compares the two ``m + n`` by identity): the zoo names the model and the lowering."""
    from tvm_hybrid_nb.errors import BuildError

    specs = {"q": spec.Tensor((1, "n", 2, 8), "float32"), "past_k": spec.Tensor((1, "m", 2, 8), "float32"),
             "past_v": spec.Tensor((1, "m", 2, 8), "float32")}
    with pytest.raises(BuildError, match="zoo model 'kv': TVM's lowering for llvm raised AssertionError"):
        zoo.collect_kernels([("kv", _KVAttention(), specs)])
