"""Under the sanitizers, an access of a few lanes (the two rows of a parallel softmax, each with its
own copy of the row's maximum and sum) is a view of the buffer and of its written-marks, checked by
``read_written``, not a call of ``access``: fast mode gathers fewer than 16 lanes rather than viewing
them, since a gather costs less than a view there, but ``access`` costs about 15 us a call against 4
for the views.

Before, dlight.cpu's softmax over 2 x 32,000 ran each of its 128,000 serial reduction steps through
three ``access`` calls: 2.7 s a stage under ``check=True`` against 0.18 s in fast mode (26 s for the
kernel); with views, 0.5 s a stage.  The views check the same: a row read before it is written is
still reported, naming the parallel iteration.
"""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op, spec

from tvm_hybrid_nb import module as hmodule, zoo
from tvm_hybrid_nb.errors import EmulationError

ROWS, N = 2, 512
MAXIMUM_INIT = "T_softmax_maxelem[v0] = T.float32(-340282346638528859811704183484516925440.0)"


class Softmax(nn.Module):
    def forward(self, x):
        return op.softmax(x, axis=-1)


@pytest.fixture(scope="module")
def scheduled():
    (kernel,) = zoo.collect_kernels([("softmax", Softmax(), {"x": spec.Tensor((ROWS, N), "float32")})])
    return zoo.schedule(kernel.llvm, "dlight-cpu")


def _softmax(x):
    e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_two_rows_of_scratch_are_checked_through_views(scheduled):
    target, mod = scheduled
    hm = hmodule.build(mod, target=target)
    x = np.random.default_rng(0).standard_normal((ROWS, N)).astype(np.float32)
    late = next(i for i, s in enumerate(hm.stages) if s.label.endswith("StorageRewrite"))
    for stage in (0, 9, late):
        body = hm.stage(stage).kernel("fast", check=True).source.split("\ndef main", 1)[1]
        assert "lanes_view(T_softmax_maxelem" in body and "read_written(" in body, body
        assert "access(" not in body, body
        out = hm.emulate(x, np.zeros_like(x), stage=stage, check=True)
        np.testing.assert_allclose(out, _softmax(x), rtol=1e-5, atol=1e-7)
        np.testing.assert_array_equal(out, hm.emulate(x, np.zeros_like(x), stage=stage, mode="exact"))


def test_a_row_read_before_it_is_written_is_still_reported(scheduled):
    target, mod = scheduled
    text = mod["main"].script()
    assert MAXIMUM_INIT in text, text
    # Only the second row starts its maximum at -inf: the first reads a never-written element.
    line = next(line for line in text.splitlines() if line.strip() == MAXIMUM_INIT)
    indent = line[:len(line) - len(line.lstrip())]
    broken = tvm.script.from_source(text.replace(line, f"{indent}if v0 == 1:\n{indent}    {MAXIMUM_INIT}"))
    hm = hmodule.build(tvm.IRModule({"main": broken}), target=target)
    x = np.random.default_rng(1).standard_normal((ROWS, N)).astype(np.float32)
    for stage in (0, 9):
        kernel = hm.stage(stage).kernel("fast", check=True)
        assert "read_written(" in kernel.source  # the masked init goes through access(); the reads do not
        with pytest.raises(RuntimeError, match=r"maxelem\[0\], an element .* never written at \(parallel ax0=0\)"):
            kernel(x, np.zeros_like(x))
        with pytest.raises(EmulationError, match=r"T_softmax_maxelem\[0\], an element .* never written"):
            hm.emulate(x, np.zeros_like(x), stage=stage, check=True)
