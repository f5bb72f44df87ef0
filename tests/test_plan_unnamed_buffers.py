"""The plan's text names unnamed buffers (SplitHostDevice's local pointers in TVM's GPU sort) as the
generated script does (``buffer``, ``buffer_1``...), not by their empty names."""
from __future__ import annotations

import re

from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op, spec

from tvm_hybrid_nb import module as hmodule, zoo


class Sort(nn.Module):
    def forward(self, x):
        return op.sort(x, axis=-1)


def test_copies_of_unnamed_buffers_are_named_as_in_the_script():
    (kernel,) = [k for k in zoo.collect_kernels([("sort", Sort(), {"x": spec.Tensor((1, 300), "float32")})])
                 if k.cuda is not None]
    target, mod = zoo.schedule(kernel.cuda, "dlight-gpu")
    hm = hmodule.build(mod, target=target, on_failure="keep")
    stage = next(s for s in hm.stages if s.label.endswith("ConvertSSA"))
    copies = re.findall(r"a copy of ([^;)]*) per block", stage.plan("fast").text())
    named = [name.strip() for names in copies for name in names.split(",")]
    assert named and all(named), copies  # the merge sort's per-block scratch: no empty name
    assert any(name.startswith("buffer") for name in named), named
    for name in named:
        assert re.search(rf"^\s*{re.escape(name)} = alloc\(", stage.source, re.M), name
