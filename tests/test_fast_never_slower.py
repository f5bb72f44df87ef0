"""Fast mode never slower than exact: lanes that would lose run the exact plan.

A lanes loop over a few iterations around a long serial loop turns every statement inside into a
numpy call on a handful of elements; run serially, the same statements are cheap Python scalars.
After planning, ``lanes_lose_reason`` prices the planned script against the exact one (both counted
from the loop extents, with the call's sizes for symbolic ones) and fast mode runs the exact plan
where its lanes would lose.  Both plans compute the same, bit for bit.
"""
from __future__ import annotations

import numpy as np
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.codegen import cost as C
from tvm_hybrid_nb.codegen import plan as P
from tvm_hybrid_nb.codegen.cost import serial_cost


@T.prim_func
def running_sums_of_few_rows(a: T.handle, b: T.handle):
    n, m = T.int32(), T.int32()
    A = T.match_buffer(a, (n, m), "float32")
    B = T.match_buffer(b, (n, m), "float32")
    for i in range(n):  # rows: independent, lanes
        B[i, 0] = A[i, 0]
        for j in range(1, m):  # a running sum: carried, serial
            B[i, j] = B[i, j - 1] + A[i, j]


def test_lanes_over_few_rows_around_a_long_serial_loop_run_the_exact_plan(monkeypatch):
    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)
    hm = thn.build(running_sums_of_few_rows)
    stage = hm.stage(0)
    shown = stage.plan("fast")
    by_loop = {d.loop: d.strategy for d in shown.decisions}
    assert by_loop == {"i": P.LANES, "j": P.SERIAL} and not shown.exact_reason
    # Two rows of 30000: 2 lanes around 30000 serial steps; 30000 rows of 3: lanes win.
    few = stage.kernel("fast", sizes={"n": 2, "m": 30000}).plan
    assert few.exact_reason.startswith("its lanes with m = 30000, n = 2 would run slower than the serial run")
    assert few.lane_loops() == []
    many = stage.kernel("fast", sizes={"n": 30000, "m": 3}).plan
    assert not many.exact_reason and [d.loop for d in many.lane_loops()] == ["i"]
    for rows, cols in ((2, 30000), (30000, 3)):
        a = np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32)
        want = np.cumsum(a, axis=1, dtype=np.float32)
        fast = hm.emulate(a, np.zeros_like(a), mode="fast")
        np.testing.assert_array_equal(fast, hm.emulate(a, np.zeros_like(a), mode="exact"))
        np.testing.assert_allclose(fast, want, rtol=1e-5, atol=1e-4)


def test_the_planned_cost_counts_lanes_loops_once_and_their_statements_as_numpy_calls():
    hm = thn.build(running_sums_of_few_rows)
    func = hm.stage(0).computed_function
    plan = hm.stage(0).plan("fast")
    exact = serial_cost(func, sizes={"n": 4, "m": 10})
    fast = serial_cost(func, sizes={"n": 4, "m": 10}, lanes=plan.runs_as_lanes)
    # exact: per row an iteration of i, the first store, and 9 iterations of j with their store
    assert (exact.scalar, exact.lanes) == (4 * (1 + 1 + 9 * 2), 0)
    # fast: the loop i once, on scalars; inside it as numpy calls on the 4 rows' lanes (not GPU
    # threads'): the first store, 9 iterations of j with their store
    assert (fast.scalar, fast.lanes, fast.loop_lanes, fast.loop_elements) == (1, 0, 1 + 9 * 2, 4 * (1 + 9 * 2))


def test_a_call_whose_lanes_would_lose_generates_the_exact_script_once(monkeypatch):
    from tvm_hybrid_nb.codegen import generator

    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)
    hm = thn.build(running_sums_of_few_rows)
    stage = hm.stage(0)
    stage.kernel("fast")  # the plan for any sizes (lanes), which each call's decision reads
    modes = []
    real = generator.HybridCodegen.__init__

    def counting(self, func, function_name, stage=None, mode="exact", *args, **kwargs):
        modes.append(mode)
        real(self, func, function_name, stage, mode, *args, **kwargs)

    monkeypatch.setattr(generator.HybridCodegen, "__init__", counting)
    kernel = stage.kernel("fast", sizes={"n": 2, "m": 30000})
    assert kernel.plan.exact_reason.startswith("its lanes with m = 30000, n = 2")
    assert modes == ["exact"]  # decided with the plan at hand: no second lanes emission for these sizes


def test_each_binding_of_the_sizes_is_decided_once(monkeypatch):
    from tvm_hybrid_nb import stage as stage_module

    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)
    hm = thn.build(running_sums_of_few_rows)
    stage = hm.stage(0)
    decided = []
    real = stage_module.exact_plan_reason
    monkeypatch.setattr(stage_module, "exact_plan_reason", lambda *a: decided.append(a[2]) or real(*a))
    for _ in range(3):
        assert stage.kernel("fast", sizes={"n": 2, "m": 30000}).plan.exact_reason
        assert not stage.kernel("fast", sizes={"n": 30000, "m": 3}).plan.exact_reason
    assert decided == [{"n": 2, "m": 30000}, {"n": 30000, "m": 3}]


def test_a_stage_is_counted_once_per_binding_of_its_sizes(monkeypatch):
    """A stage's decision asks the serial cost for the call's sizes, again without them (did the sizes
    decide?), and the stage asks once more to show its plan: each walk of a dlight GPU matmul's
    program costs milliseconds, which fast mode paid on top of exact mode's work at every stage."""
    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)
    monkeypatch.setattr(C, "_SERIAL_COSTS", {})  # (thn.build reuses the build of an earlier test)
    counted = []
    real = C._count_serial
    monkeypatch.setattr(C, "_count_serial", lambda *a: counted.append((a[2], a[3] is None)) or real(*a))
    hm = thn.build(running_sums_of_few_rows)
    stage = hm.stage(0)
    for _ in range(2):
        for sizes in ({"n": 2, "m": 30000}, {"n": 30000, "m": 3}):
            stage.kernel("fast", sizes=sizes)
            C.exact_plan_reason(stage.computed_function, None, sizes)  # asked again: remembered
    serial = sorted(sorted((sizes or {}).items()) for sizes, exact_plan in counted if exact_plan)
    assert serial == [[], [("m", 3), ("n", 30000)], [("m", 30000), ("n", 2)]]  # (a fast plan's count is its own)
    # the same count as a fresh walk, and another function is counted apart
    assert serial_cost(stage.computed_function, sizes={"n": 4, "m": 10}) == real(
        stage.computed_function, None, {"n": 4, "m": 10}, None)
    assert serial_cost(_row_kernel, sizes={"count": 3}).scalar == 1 + 3 * 2  # its buffer, 3 x (loop, store)


@T.prim_func(private=True)
def _row_kernel(a_ptr: T.handle("float32", "global"), count: T.int32):
    A = T.decl_buffer((1024,), data=a_ptr)
    for i in range(count):
        A[i] = A[i] * T.float32(2)


def test_a_launch_binds_the_kernels_integer_parameters_to_its_arguments():
    """After SplitHostDevice a kernel's loop extent is often a parameter the host computes
    (``main_kernel(..., cse_v1, n)``); without its value the cost was unknown and fast mode ran
    the lanes analysis on kernels whose serial run takes milliseconds."""
    import tvm

    n = tvm.tirx.Var("n", "int32")
    call = tvm.tirx.Evaluate(tvm.ir.Call(tvm.ir.GlobalVar("row_kernel"), [tvm.tirx.Var("a", "handle"), n * 3],
                                         ret_ty="int32"))
    host = tvm.tirx.PrimFunc([n], call)
    cost = serial_cost(host, {"row_kernel": _row_kernel}, sizes={"n": 5})
    # the launch, the kernel's buffer declaration, then 15 iterations of the loop with its store
    assert cost is not None and (cost.scalar, cost.lanes) == (2 + 15 * 2, 0)
    twice = serial_cost(host, {"row_kernel": _row_kernel}, sizes={"n": 10})
    assert twice.scalar == 2 + 30 * 2
    assert serial_cost(host, {"row_kernel": _row_kernel}) is None  # n unbound: unknown


def test_the_box_test_counts_every_combination_as_records_do():
    from tvm_hybrid_nb.codegen.mustwrite import _fills_box

    rng = np.random.default_rng(0)
    full = np.stack(np.meshgrid(np.arange(-3, 4), [0, 5, 9], np.arange(4), indexing="ij"), -1).reshape(-1, 3)
    cases = [np.concatenate([full, full[rng.integers(0, len(full), 40)]]),  # every combination, repeated
             np.delete(full, 17, axis=0),  # one missing
             np.concatenate([np.delete(full, 17, axis=0), full[:1]]),  # one missing, as many rows as the box
             rng.integers(-2, 2, (200, 4))]
    for rows in cases:
        rows = rows[rng.permutation(len(rows))]
        columns = [rows[:, d] for d in range(rows.shape[1])]
        dims = [np.unique(c) for c in columns]
        want = np.unique(rows, axis=0).shape[0] == np.prod([d.size for d in dims])
        assert _fills_box(columns, dims) == want
    assert [_fills_box([r[:, d] for d in range(3)], [np.unique(r[:, d]) for d in range(3)])
            for r in cases[:3]] == [True, False, False]


@T.prim_func(s_tir=True)
def _row_max_over_threads(a: T.handle, b: T.handle):
    rows = T.int32()
    A = T.match_buffer(a, (rows, 256), "float32")
    B = T.match_buffer(b, (rows,), "float32")
    for i in T.thread_binding(rows, thread="blockIdx.x"):
        for k in T.thread_binding(256, thread="threadIdx.x"):
            with T.sblock("B"):
                vi, vk = T.axis.remap("SR", [i, k])
                with T.init():
                    B[vi] = T.float32(-3.4028234663852886e38)
                B[vi] = T.max(B[vi], A[vi, vk])


def test_a_thread_allreduce_costs_a_combine_step_per_thread(monkeypatch):
    """A ``tvm_thread_allreduce`` is one statement, but the serial run folds its threads one after
    another; priced as one statement, dlight's GPU softmax (120 blocks of 256 threads) ran the exact
    plan in 0.27 s a stage where its blocks as lanes take 8 ms."""
    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)
    hm = thn.build(_row_max_over_threads, target="cuda")
    index = next(i for i, s in enumerate(hm.stages) if s.label.endswith(" LowerCrossThreadReduction"))
    stage = hm.stages[index]
    func = stage.computed_function
    for rows in (2, 120):
        assert serial_cost(func, sizes={"rows": rows}).folds == rows * 255
    assert serial_cost(hm.stage(0).computed_function, sizes={"rows": 2}).folds == 0  # no allreduce yet
    few, many = (stage.kernel("fast", sizes={"rows": rows}).plan for rows in (2, 120))
    assert few.exact_reason.startswith("the serial run with rows = 2 is cheap") and "510 combine steps" in few.exact_reason
    assert not many.exact_reason and many.lane_loops()  # the blocks run as lanes
    for rows in (2, 120):
        a = np.random.default_rng(rows).standard_normal((rows, 256)).astype(np.float32)
        fast = hm.emulate(a, np.zeros(rows, np.float32), stage=index, mode="fast")
        np.testing.assert_array_equal(fast, hm.emulate(a, np.zeros(rows, np.float32), stage=index, mode="exact"))
        np.testing.assert_array_equal(fast, a.max(axis=1))


def test_lanes_of_a_loop_are_priced_per_call_and_lane_not_as_gpu_threads(monkeypatch):
    """A statement on the lanes of a CPU loop is one numpy call on strided views (about 2 µs on a
    few lanes), not a statement on GPU threads' lanes (34 µs, masks and gathers): priced so, 16 rows
    around a 20,000-step running sum ran the exact plan, 7 times slower than its lanes; 4 rows
    still lose to the exact plan (the crossover measured between 4 and 8 rows)."""
    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)
    stage = thn.build(running_sums_of_few_rows).stage(0)
    sixteen = stage.kernel("fast", sizes={"n": 16, "m": 20000}).plan
    assert not sixteen.exact_reason and [d.loop for d in sixteen.lane_loops()] == ["i"]
    four = stage.kernel("fast", sizes={"n": 4, "m": 20000}).plan
    assert four.exact_reason.startswith("its lanes with m = 20000, n = 4 would run slower")


def _legalized_group_norm():
    """relax's group norm of a (1, 32, 32, 32) tensor in 16 groups, as LegalizeOps writes it."""
    import tvm
    from tvm import relax
    from tvm.script import ir as I
    from tvm.script import relax as R

    @I.ir_module
    class GroupNorm:
        @R.function
        def main(x: R.Tensor((1, 32, 32, 32), "float32"), gamma: R.Tensor((32,), "float32"),
                 beta: R.Tensor((32,), "float32")):
            return R.nn.group_norm(x, gamma, beta, num_groups=16, channel_axis=1, axes=[2, 3])

    mod = relax.transform.LegalizeOps()(GroupNorm)
    func = next(f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc))
    return func.with_attr("global_symbol", "main")


def test_a_group_norm_runs_its_groups_as_lanes_around_the_ordered_reduction(monkeypatch):
    """LegalizeOps' group norm reduces each group's elements in one serial loop nest; its groups
    run as lanes around it (16 groups of 2,048 elements here).  The old price sent every stage to
    the exact plan: 4.7 s a stage instead of 0.11 s at 16 groups of 16,384 (a conv block's
    group norm, 35 s for the kernel).  Lanes and exact plans agree bit for bit, and with numpy."""
    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)
    hm = thn.build(_legalized_group_norm())
    plan = hm.stage(0).plan("fast")
    assert not plan.exact_reason
    reduction = [d for d in plan.decisions if d.loop.startswith("k")]
    assert reduction and all(d.strategy == P.SERIAL for d in reduction)  # each group's order kept
    assert any(d.strategy == P.LANES and d.loop == "ax1" for d in plan.decisions)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 32, 32, 32)).astype(np.float32)
    gamma, beta = rng.standard_normal(32).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    fast = hm.emulate(x, gamma, beta, np.zeros_like(x), mode="fast")
    np.testing.assert_array_equal(fast, hm.emulate(x, gamma, beta, np.zeros_like(x), mode="exact"))
    g = x.reshape(16, -1).astype(np.float64)
    want = ((g - g.mean(1, keepdims=True)) / np.sqrt(g.var(1, keepdims=True) + 1e-5)).reshape(x.shape)
    want = want * gamma.reshape(1, -1, 1, 1) + beta.reshape(1, -1, 1, 1)
    np.testing.assert_allclose(fast, want, rtol=1e-4, atol=1e-4)


def _legalized_bicubic_resize():
    """relax's bicubic resize of (1, 4, 12, 15) to 23 x 31 (align_corners), as LegalizeOps writes it:
    each output one store of 16 taps, each tap's index clamped and cast from a float, with cubic
    weights recomputed inline (about 1,000 operations in the one statement)."""
    import tvm
    from tvm import relax
    from tvm.script import ir as I
    from tvm.script import relax as R

    @I.ir_module
    class Resize:
        @R.function
        def main(x: R.Tensor((1, 4, 12, 15), "float32")):
            return R.image.resize2d(x, (23, 31), method="cubic", coordinate_transformation_mode="align_corners")

    mod = relax.transform.LegalizeOps()(Resize)
    func = next(f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc))
    return func.with_attr("global_symbol", "main")


def _cubic_weights(t: np.ndarray) -> np.ndarray:
    """Keys' cubic convolution weights (a = -0.75) of the 4 taps around fractions ``t``."""
    a = -0.75
    return np.stack([a * (t ** 3 - 2 * t ** 2 + t), (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1,
                     -(a + 2) * t ** 3 + (2 * a + 3) * t ** 2 - a * t, -a * (t ** 3 - t ** 2)], axis=-1)


def test_a_statement_of_many_operations_is_priced_per_operation(monkeypatch):
    """A bicubic resize is 2,852 executions of one statement of about 1,000 operations: priced at
    0.3 µs a statement, its serial run looked cheaper (3 ms) than the lanes analysis (7 ms), and fast
    mode ran the exact plan, 0.8 s a stage where its lanes take milliseconds.  Operations past a
    statement's median count are now priced too: lanes, bit for bit the exact run's values."""
    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)
    hm = thn.build(_legalized_bicubic_resize())
    stage = hm.stage(0)
    counted = serial_cost(stage.computed_function)
    assert counted.scalar_operations > 900 * 4 * 23 * 31  # the store, at each of its executions
    plan = stage.plan("fast")
    assert not plan.exact_reason and {d.loop for d in plan.lane_loops()} >= {"i1", "i2", "i3"}
    x = np.random.default_rng(5).standard_normal((1, 4, 12, 15)).astype(np.float32)
    fast = hm.emulate(x, np.zeros((1, 4, 23, 31), np.float32), mode="fast")
    np.testing.assert_array_equal(fast, hm.emulate(x, np.zeros((1, 4, 23, 31), np.float32), mode="exact"))
    want = np.empty((4, 23, 31))
    rows, cols = np.arange(23) * 11 / 22, np.arange(31) * 14 / 30  # align_corners: ends on ends
    r0, c0 = np.floor(rows).astype(int), np.floor(cols).astype(int)
    wr, wc = _cubic_weights(rows - r0), _cubic_weights(cols - c0)
    for i in range(23):
        for j in range(31):
            taps = x[0][:, np.clip(r0[i] + np.arange(-1, 3), 0, 11)][:, :, np.clip(c0[j] + np.arange(-1, 3), 0, 14)]
            want[:, i, j] = np.einsum("r,crk,k->c", wr[i], taps.astype(np.float64), wc[j])
    np.testing.assert_allclose(fast[0], want, rtol=1e-5, atol=1e-5)


def test_operations_count_expression_nodes_integer_ones_a_quarter_but_not_names_constants_or_shapes():
    from tvm import tirx

    from tvm_hybrid_nb.codegen.cost import _operations

    x, n = tirx.Var("x", "float32"), tirx.Var("n", "int32")
    buf = tirx.decl_buffer((4, n * 2), "float32", "B")
    index = x.astype("int32") * 3  # a cast and a product
    expr = tirx.Cast("int64", tirx.floor(x * 2.0)) + tirx.BufferLoad(buf, [tirx.IntImm("int32", 1), index]).astype("int64")
    # whole: three casts, floor, the float product, the load; a quarter each: the integer + and *;
    # nothing for x, 2.0, 1 or the buffer's n * 2
    assert _operations(expr) == ((6 * 4 + 2) // 4, 8)  # priced operations, nodes
    assert _operations(n * 4 + 1 - n) == (0, 3)  # index arithmetic: three integer operations


def _linear_under_dlights_gpu_rules(tokens: int):
    """A (1, tokens, 64) x (64, 64) matmul, as a decoder layer's projection, scheduled by dlight's
    GPU ``Matmul`` rule for cuda (shared tiles, a ``local`` accumulator, 8 x 16 threads)."""
    from tvm import te

    from tvm_hybrid_nb import zoo

    x = te.placeholder((1, tokens, 64), name="x")
    w = te.placeholder((64, 64), name="w")
    k = te.reduce_axis((0, 64), name="k")
    y = te.compute((1, tokens, 64), lambda b, i, j: te.sum(x[b, i, k] * w[k, j], axis=k), name="matmul")
    target, mod = zoo.schedule(te.create_prim_func([x, w, y]).with_attr("global_symbol", "main"), "dlight-gpu")
    return thn.build(mod, target=target)


def test_a_gpu_matmul_over_a_few_tokens_runs_the_exact_plan_and_over_many_its_lanes(monkeypatch):
    """Over 6 tokens the matmul's 128 threads execute 4,216 statements (4.7 µs each, measured): about
    20 ms serially, against 37 statements of analysis (3-4 ms each on a GPU matmul).  Priced at
    10 µs a statement on threads' lanes, the analysis ran and lost 60-90 ms at each of its stages;
    over 512 tokens the lanes still win."""
    monkeypatch.setattr(C, "EXACT_PLAN_WHEN_CHEAP", True)
    few, many = _linear_under_dlights_gpu_rules(6), _linear_under_dlights_gpu_rules(512)
    assert few.stage(0).plan("fast").exact_reason.startswith("the serial run is cheap")
    lanes = many.stage(0).plan("fast")
    assert not lanes.exact_reason and lanes.lane_loops()
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((1, 6, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    got = few.emulate(x, w, np.zeros((1, 6, 64), np.float32), mode="fast")
    np.testing.assert_allclose(got, x @ w, rtol=1e-5, atol=1e-5)
