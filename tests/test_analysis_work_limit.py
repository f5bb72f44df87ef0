"""Fast mode stops its lanes analysis once that has cost more than the whole serial run.

The static price of the analysis (per statement and expression node) is a median; an analysis that
proves nothing costs several times more: TVM's GPU merge sort (behind ``topk`` on cuda) tries every
reading of indices that move with values read from memory.  dlight's GPU top 7 of 3 x 300 was
priced at 234 ms of analysis against a 258 ms serial run; the analysis took 1.1 s.  The analysis
now counts its simplifications (the same IR, the same count: the plan does not depend on the
machine) and past the serial run's price (its median price, not the guard's low one) fast mode runs
the exact plan, saying why: a bound on what an analysis can cost, priced so that it does not cut
analyses that still win (cut at the guard's price, the later stages of GPU argsort over 2 x 700 ran
0.3 s slower each).  The test sorts 4 x 300: at 3 x 300 the static price now sends the stage to
the exact plan, where it belongs (0.50 s exact against 0.61 s of analysis and lanes, measured).
"""
from __future__ import annotations

import numpy as np
import pytest
from tvm import tirx
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op, spec

from tvm_hybrid_nb import module as hmodule, zoo
from tvm_hybrid_nb.codegen import cost as C
from tvm_hybrid_nb.codegen.generator import generate_kernel, program_text
from tvm_hybrid_nb.codegen.work import Analyzer, AnalysisOutgrown, WorkCount, counting, working_on

ROWS, WIDTH, K = 4, 300, 7


class _SmallestK(nn.Module):
    def forward(self, x):
        return op.topk(x, k=K, axis=-1, ret_type="both", largest=False)


def test_simplifications_are_counted_in_the_block_and_the_one_past_the_limit_raises():
    x = tirx.Var("x", "int32")
    outside = Analyzer()
    outside.simplify(x + 0)  # no block open: nothing counted, nothing raised
    with counting(WorkCount(limit=2)) as work:
        working_on("loop i")
        Analyzer().simplify(x * 1)
        with counting(WorkCount()) as inner:  # a nested block counts apart
            Analyzer().simplify(x + 0)
        assert (work.simplifications, inner.simplifications) == (1, 1)
        Analyzer().simplify(x - 0)
        with pytest.raises(AnalysisOutgrown, match="3 simplifications by loop i"):
            Analyzer().simplify(x + x)
        work.limit = None  # the block's exit raises on its own where a raise was swallowed
    assert work.simplifications == 3
    with pytest.raises(AnalysisOutgrown):
        with counting(WorkCount(limit=0)):
            try:
                Analyzer().simplify(x)
            except AnalysisOutgrown:
                pass


@pytest.fixture(scope="module")
def sort_stage():
    specs = {"x": spec.Tensor((ROWS, WIDTH), "float32")}
    kernel = next(k for k in zoo.collect_kernels([("smallest", _SmallestK(), specs)]) if k.cuda is not None)
    target, mod = zoo.schedule(kernel.cuda, "dlight-gpu")
    return hmodule.build(mod, target=target)


def test_a_merge_sort_analysis_past_the_serial_runs_price_runs_the_exact_plan(monkeypatch, sort_stage):
    hm = sort_stage
    stage = hm.stage(0)
    func, functions = stage.computed_function, stage.computed_module_functions
    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)
    reason, limit = C.exact_plan_decision(func, functions)
    assert not reason and limit  # statically priced below the serial run: the analysis starts
    # At the shipped price the analysis ends within the serial run's price, and plans lanes.
    shipped = generate_kernel(func, "main", mode="fast", module_functions=functions)
    assert not shipped.plan.exact_reason and shipped.plan.lane_loops()
    # Priced ten times higher (its simplifications made on a much slower machine, say), the same
    # analysis passes the serial run's price: it stops there, and the plan is the exact plan.  (The
    # analysis makes about an eighth of the simplifications its price allows: 4,377 of 35,437.)
    monkeypatch.setattr(C, "ANALYSIS_SECONDS_PER_SIMPLIFICATION", 10 * C.ANALYSIS_SECONDS_PER_SIMPLIFICATION)
    reason, limit = C.exact_plan_decision(func, functions)
    assert not reason
    fast = generate_kernel(func, "main", mode="fast", module_functions=functions)
    assert fast.plan.exact_reason.startswith("the lanes analysis outgrew the serial run: it made "
                                             f"{limit + 1} simplifications by the dependence test of loop ")
    assert program_text(fast.source) == program_text(generate_kernel(func, "main", mode="exact",
                                                                      module_functions=functions).source)
    again = generate_kernel(func, "main", mode="fast", module_functions=functions)
    assert again.plan.exact_reason == fast.plan.exact_reason  # counted, not timed: the same plan
    x = np.random.default_rng(0).standard_normal((ROWS, WIDTH)).astype(np.float32)
    values, indices = hm.emulate(x, np.zeros((ROWS, K), np.float32), np.zeros((ROWS, K), np.int32),
                                 stage=0, mode="fast")
    assert "outgrew" in stage.plan("fast").exact_reason
    order = np.argsort(x, axis=1, kind="stable")[:, :K]
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(values, np.take_along_axis(x, order, axis=1))
