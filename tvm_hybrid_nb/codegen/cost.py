"""Whether fast mode pays: what the exact script of a stage executes, counted from its loop extents
before any dependence test (:func:`serial_cost`), the prices of those counts in seconds
(:func:`run_seconds`), and the decisions they make: fast mode runs the exact plan where the lanes
analysis would cost more than it saves (:func:`exact_plan_reason`) or its planned lanes would lose
(:func:`lanes_lose_reason`)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import tvm
from tvm import tirx

from .analysis import walk_typed
from .names import _dtype, _is_int, _key, _type_key
from .work import AnalysisOutgrown

if TYPE_CHECKING:
    from .decisions import EmulationPlan

#: The cost model of :func:`exact_plan_reason`, in seconds (measured on the model zoo's stages, see
#: the function): one statement of the serial script on scalars, one inside GPU threads (a numpy
#: call on the threads' lanes), and the lanes analysis with its emission, per statement of the program.
SERIAL_SECONDS_PER_STATEMENT = 0.3e-6
SERIAL_SECONDS_PER_LANES_STATEMENT = 8e-6
ANALYSIS_SECONDS_PER_STATEMENT = 1e-3
#: One simplification of the dependence tests (:mod:`.work`) with the rest of the planning that goes
#: with it, priced low: over the zoo's distinct stages, planning took a median 64 µs per counted
#: simplification on dlight's GPU schedules and 50 µs on dlight.cpu's (10th percentiles 39 and
#: 29 µs).  The limit of :func:`exact_plan_decision` is the serial run at its median price
#: (:func:`run_seconds`) over this: replayed over 2,387 stages of the zoo it cuts one (a dlight.cpu
#: stage, no slower).  At the guard's own low price of the serial run it cut analyses that still won
#: (GPU argsort over 2 x 700: 0.3 s lost at each of its later stages).
ANALYSIS_SECONDS_PER_SIMPLIFICATION = 33e-6
#: :func:`lanes_lose_reason` prices a statement on GPU threads' lanes at the measured median (34 µs,
#: see :func:`exact_plan_reason`): it compares two runs, with no analysis to favour.
LANES_SECONDS_PER_STATEMENT = 34e-6
#: A statement on the lanes of loops outside threads is one numpy call on strided views: measured
#: (a running sum per row, rows as lanes, 20,000 steps) at 1.7 µs a call on 1 to 64 lanes and
#: 4.7 µs on 1,024, against 0.17 µs a statement on scalars: a call, plus each lane's share.
LOOP_LANES_SECONDS_PER_CALL = 2e-6
LOOP_LANES_SECONDS_PER_LANE = 3e-9
#: A statement of many operations (a bicubic resize writes each output from 16 taps, each with its
#: clamped, cast index and cubic weights: about 1,000 operations in one store) costs per operation,
#: not per statement: numpy's scalar operations take 0.1-0.3 µs each (measured), and on a loop's
#: lanes each is one numpy call.  The prices above are medians of the zoo's statements; operations
#: past :data:`OPERATIONS_IN_A_STATEMENT` in one statement are priced on top, at
#: :data:`SERIAL_SECONDS_PER_OPERATION` on scalars and at :data:`LOOP_LANES_SECONDS_PER_CALL` on a
#: loop's lanes.  Statements on GPU threads' lanes keep their median, measured with their index
#: arithmetic.
OPERATIONS_IN_A_STATEMENT = 16
SERIAL_SECONDS_PER_OPERATION = 0.15e-6
#: The lanes analysis and emission walk every expression node: past a statement's median count, 20 µs
#: a node (measured: 16-28 µs on a bicubic resize of 1,069 nodes and a bicubic ``grid_sample`` of 11,257).
ANALYSIS_SECONDS_PER_NODE = 20e-6
#: Min and max nodes past which a stage with symbolic sizes is planned for the sizes of each call
#: (:func:`sizes_specialize_reason`).  TVM's simplifier explores nested mins and maxes of symbolic
#: sizes combinatorially: dlight.cpu's causal attention over a symbolic batch and length (its
#: ``compute_at`` regions: ``T.min(T.int64(1) - n, n - T.int64(1))`` nested hundreds deep in every
#: loop extent) has 22,490 such nodes, and one simplification of its indices took 22 ms on average
#: (0.05-0.2 ms with a few): 18-38 s of analysis a stage.  The zoo's most (dlight's GPU attention over
#: a symbolic length) has 952 and plans in 0.3 s a stage; dlight.cpu's group norm over a symbolic image
#: (a random conv net's, i206: ``CompactBufferAllocation``'s regions of ``(w - 1) // 2`` in 1,140 to
#: 2,430 such nodes) planned 2-7 s a stage for every size, about 0.1 s for the call's.
MIN_MAX_NODES_PER_CALL_SIZES = 1024
#: One combine step of a ``tvm_thread_allreduce`` (a call of the reducer on the lanes), measured at
#: 0.8-1.8 µs for a sum and 3.9-6.2 µs for TIR's ``Max`` (a select) over 32 to 1,024 threads.
FOLD_SECONDS = 3e-6

#: The iterations :func:`serial_cost` assumes for a ``while`` loop (its count is data-dependent).
#: TVM's while loops are binary searches (the merge path of its GPU sorts, ``searchsorted``, NMS):
#: ceil(log2(n + 1)) iterations over n elements, 16 for n up to 65535.  In the model zoo's sorts
#: (n <= 10) they run no iteration at all: their merge passes run only past the odd-even sort's
#: block of 128 (``tvm.topi.gpu.sort``).  Too few only makes fast mode run the exact plan (as fast
#: as exact); too many only makes it run the lanes analysis.
WHILE_ASSUMED_ITERATIONS = 16


@dataclass(frozen=True)
class SerialCost:
    """What the serial (exact-mode) script of a function executes, counted from its loop extents."""

    #: Statement executions outside GPU threads (plain Python on scalars).
    scalar: int
    #: Statement executions inside GPU threads (each one numpy call on the threads' lanes).
    lanes: int
    #: Statements in the program (each counted once): what code generation and the analysis walk.
    size: int
    #: Combine steps of ``tvm_thread_allreduce`` executed: each thread's value after the first is
    #: folded in by one call of the reducer (256 threads: 255 calls, in one statement).
    folds: int = 0
    #: A fast plan's statements on the lanes of its loops outside GPU threads (each one numpy call
    #: on plain strided views, far cheaper than one on threads' lanes) ...
    loop_lanes: int = 0
    #: ... and the lanes those calls act on, summed over the calls.
    loop_elements: int = 0
    #: Operations past :data:`OPERATIONS_IN_A_STATEMENT` in the statements executed on scalars ...
    scalar_operations: int = 0
    #: ... and in those executed on the lanes of loops outside threads, each one more numpy call.
    lane_operations: int = 0
    #: Expression nodes past :data:`OPERATIONS_IN_A_STATEMENT` in the program's statements, each
    #: statement counted once: what the analysis walks beyond the median statement.
    nodes: int = 0


def serial_cost(func, module_functions: dict | None = None, sizes: dict | None = None,
                lanes: Callable[[object], bool] | None = None) -> SerialCost | None:
    """How many statements the serial (exact-mode) script of ``func`` executes: each statement
    counts once per iteration of the loops around it that run one iteration after another (serial
    loops and GPU block loops; threads of a block run in lockstep as lanes in both modes, so they
    do not multiply, but their statements are numpy calls: counted apart).  Device kernels the
    function launches count at each launch.  ``sizes``: values of symbolic variables (by name); an
    extent that depends on the loops or threads around counts with its largest value over their
    ranges; one that is still not bounded or a recursive launch make the cost unknown: None.  A loop
    of no iteration costs nothing, whatever its body (TVM's sorts plan merge passes that do not run
    at small sizes, with extents of their own loop variable inside).  A ``while`` loop's body counts
    :data:`WHILE_ASSUMED_ITERATIONS` times: an estimate (a wrong one costs speed, never exactness:
    both plans compute the same).  Cheap: one walk over the statements, no dependence test.

    ``lanes`` (a loop or grid node -> whether a plan runs it as array lanes) counts a fast plan's
    script instead: a lanes loop does not multiply what it holds, which becomes numpy calls on lanes
    (outside GPU threads counted apart, with their lanes: ``loop_lanes``, ``loop_elements``).

    Without ``lanes`` the count is remembered for the last few functions and sizes: a stage asks it
    for its sizes, for no sizes (whether they decided), and again to show its plan."""
    if lanes is not None:
        return _count_serial(func, module_functions, sizes, lanes)
    key = (func.__chandle__(), tuple((name, f.__chandle__()) for name, f in (module_functions or {}).items()),
           tuple(sorted((str(name), int(value)) for name, value in (sizes or {}).items())),
           WHILE_ASSUMED_ITERATIONS, OPERATIONS_IN_A_STATEMENT)  # (the counting's assumptions: settable)
    known = _SERIAL_COSTS.get(key)
    if known is not None:
        return known[1]
    counted = _count_serial(func, module_functions, sizes, None)
    if len(_SERIAL_COSTS) >= _SERIAL_COSTS_MAX:
        _SERIAL_COSTS.pop(next(iter(_SERIAL_COSTS)))
    # The functions are held with the count: their addresses cannot name other functions meanwhile.
    _SERIAL_COSTS[key] = ((func, dict(module_functions or {})), counted)
    return counted


_SERIAL_COSTS: dict[tuple, tuple[tuple, SerialCost | None]] = {}
_SERIAL_COSTS_MAX = 8  # the asks of one stage come together; each entry holds its functions alive


def _count_serial(func, module_functions: dict | None, sizes: dict | None,
                  lanes: Callable[[object], bool] | None) -> SerialCost | None:
    """:func:`serial_cost`, counted."""
    functions = dict(module_functions or {})
    binds = {str(name): int(value) for name, value in (sizes or {}).items()}
    lets: dict[int, int] = {}  # let-bound variables (``cse_v1 = n * 32``) with a known value, by key
    let_exprs: dict[int, object] = {}  # every let-bound integer variable's expression, by key
    memo: dict[str, tuple] = {}
    active: set[str] = set()
    sizes_seen = [0]
    nodes_seen = [0]
    dead = [0]  # inside loops of no iteration: what they hold is counted in the size only
    ranges: dict[int, tuple] = {}  # the loop and thread variables around, by key: (var, min, extent)

    @contextlib.contextmanager
    def ranging(var, lo, extent):
        ranges[_key(var)] = (var, lo, extent)
        try:
            yield
        finally:
            ranges.pop(_key(var), None)

    class _Unknown(Exception):
        pass

    def extent_of(expr, exact: bool = False) -> int:
        """The value of ``expr``; unless ``exact``, its largest over the loops around when it varies."""
        if _type_key(expr) == "ir.IntImm":
            return int(expr.value)
        free = tvm.tirx.analysis.undefined_vars(expr)
        for _ in range(8):  # let-bound variables without one value (``cse_v60``): their expressions
            inline = [var for var in free if _key(var) in let_exprs and _key(var) not in lets]
            if not inline:
                break
            substitute = tvm.sym.Analyzer()
            for var in inline:
                substitute.bind(var, let_exprs[_key(var)])
            expr = substitute.simplify(expr)
            free = tvm.tirx.analysis.undefined_vars(expr)
        analyzer = tvm.sym.Analyzer()
        for var in free:
            value = lets.get(_key(var), binds.get(str(var.name)))
            if value is not None:
                analyzer.bind(var, tirx.const(value, str(var.ty.dtype)))
        value = analyzer.simplify(expr)
        if _type_key(value) == "ir.IntImm":
            return int(value.value)
        if exact:
            raise _Unknown
        # An extent of the loops or threads around (``min(128, 10 - blockIdx_y * 128)``): its largest value.
        around = [ranges[_key(var)] for var in free if _key(var) in ranges]
        if around:
            with contextlib.suppress(Exception):
                for var, lo, extent in around:  # their own ranges with the sizes bound too
                    dtype = _dtype(var)
                    analyzer.bind(var, tvm.ir.Range.from_min_extent(tirx.const(extent_of(lo), dtype),
                                                                    tirx.const(extent_of(extent), dtype)))
                largest = analyzer.const_int_bound(value).max_value
                if largest < 1 << 40:
                    return int(largest)
        if dead[0]:
            return 0
        raise _Unknown

    # A count is (scalar, lanes, folds, loop_lanes, loop_elements) statement executions, then
    # (scalar_operations, lane_operations) operations past the median statement's; ``threads`` below is
    # True inside GPU threads, else the number of lanes of the loops run as lanes around (1: none,
    # plain Python on scalars).
    nothing = (0, 0, 0, 0, 0, 0, 0)

    def add(a, b):
        return tuple(x + y for x, y in zip(a, b))

    def times(n, a):
        return tuple(n * x for x in a)

    def launches(expr, threads) -> tuple:
        total = nothing
        if not functions:  # no device kernels to launch: no expression walk (most stages)
            return total
        calls = []
        walk_typed(expr, ("ir.Call",), lambda n: calls.append(n) if _type_key(n) == "ir.Call" else None)
        for call in calls:
            name = getattr(call.op, "name_hint", None)
            if name is not None and name in functions:
                total = add(total, function_cost(name, list(call.args)))
        return total

    def function_cost(name: str, args: list) -> tuple:
        if name in active:
            raise _Unknown
        # The launch's integer arguments bind the kernel's parameters: after SplitHostDevice a
        # grid extent is often a host-side let passed in (``main_kernel(..., cse_v1, n)``).
        values = []
        for param, arg in zip(functions[name].params, args):
            if _is_int(_dtype(param)):
                with contextlib.suppress(_Unknown):
                    values.append((_key(param), extent_of(arg, exact=True)))
        memo_key = (name, tuple(values))
        if memo_key not in memo:
            lets.update(values)
            active.add(name)
            try:
                memo[memo_key] = stmt(functions[name].body, 1)
            finally:
                active.discard(name)
                for key, _ in values:
                    lets.pop(key, None)
        return memo[memo_key]

    def one(threads, *exprs) -> tuple:
        """One statement, whose own expressions are ``exprs``."""
        sizes_seen[0] += 1
        priced, nodes = map(sum, zip(*(_operations(expr) for expr in exprs))) if exprs else (0, 0)
        nodes_seen[0] += max(nodes - OPERATIONS_IN_A_STATEMENT, 0)
        if threads is True:  # the measured median on threads' lanes holds their index arithmetic
            return (0, 1, 0, 0, 0, 0, 0)
        heavy = max(priced - OPERATIONS_IN_A_STATEMENT, 0)
        return (1, 0, 0, 0, 0, heavy, 0) if threads == 1 else (0, 0, 0, 1, threads, 0, heavy)

    def widened(threads, node) -> object:
        """``threads`` inside loop ``node`` run as lanes: its lanes multiply the lanes around."""
        if threads is True:
            return True
        with contextlib.suppress(_Unknown):
            return threads * max(extent_of(node.extent if _type_key(node) == "tirx.For" else node.value), 1)
        return threads * 2  # a symbolic extent the sizes do not bind: lanes, count unknown

    def allreduce_folds(value) -> tuple:
        """The combine steps of a ``tvm_thread_allreduce`` call: one per thread after the first."""
        if _type_key(value) != "ir.Call" or not str(getattr(value.op, "name", "")).endswith("tvm_thread_allreduce"):
            return nothing
        count = int(value.args[0].value)
        threads = 1
        for var in list(value.args)[2 + 2 * count:]:
            around = ranges.get(_key(var))
            if around is not None:
                threads *= max(extent_of(around[2]), 1)
        return (0, 0, threads - 1, 0, 0, 0, 0)

    def stmt(node, threads) -> tuple:
        if node is None:
            return nothing
        key = _type_key(node)
        if key == "tirx.SeqStmt":
            total = nothing
            for s in node.seq:
                total = add(total, stmt(s, threads))
            return total
        if key == "tirx.For":
            if int(node.kind) == 4 and node.thread_binding is not None \
                    and not str(node.thread_binding.thread_tag).startswith("blockIdx"):
                with ranging(node.loop_var, node.min, node.extent):
                    return add(one(threads), stmt(node.body, True))  # threads: lanes in both modes
            if lanes is not None and lanes(node):
                with ranging(node.loop_var, node.min, node.extent):
                    return add(one(threads), stmt(node.body, widened(threads, node)))
            count = extent_of(node.extent)
            dead[0] += count <= 0
            try:
                with ranging(node.loop_var, node.min, node.extent):
                    body = add(stmt(node.body, threads), one(threads))
            finally:
                dead[0] -= count <= 0
            step = node.step
            if step is not None and not (_type_key(step) == "ir.IntImm" and int(step.value) >= 1):
                raise _Unknown
            if step is not None and int(step.value) > 1:
                count = -(-count // int(step.value))
            return times(max(count, 0), body)
        if key == "tirx.AttrStmt":
            if node.attr_key in ("thread_extent", "virtual_thread"):
                var = getattr(node.node, "var", None)
                with (ranging(var, tirx.const(0, str(var.ty.dtype)), node.value) if var is not None
                      else contextlib.nullcontext()):
                    if str(getattr(node.node, "thread_tag", "")).startswith("blockIdx"):
                        if lanes is not None and lanes(node):
                            return add(one(threads), stmt(node.body, widened(threads, node)))
                        return times(max(extent_of(node.value), 0), add(stmt(node.body, threads), one(threads)))
                    return stmt(node.body, True)
            return stmt(node.body, threads)
        if key == "tirx.While":  # the condition is evaluated once more than the body runs
            return add(one(threads), times(WHILE_ASSUMED_ITERATIONS, add(stmt(node.body, threads), one(threads))))
        if key == "tirx.IfThenElse":
            return add(add(one(threads, node.condition), launches(node.condition, threads)),
                       add(stmt(node.then_case, threads), stmt(node.else_case, threads)))
        if key == "s_tir.SBlockRealize":
            return add(one(threads), add(stmt(node.block.init, threads), stmt(node.block.body, threads)))
        if key in ("tirx.BufferStore", "tirx.Evaluate"):
            return add(add(one(threads, node.value, *getattr(node, "indices", ())), launches(node.value, threads)),
                       allreduce_folds(node.value))
        if key in ("tirx.Bind", "tirx.LetStmt"):
            with contextlib.suppress(_Unknown):
                if not _is_int(_dtype(node.value)):  # a pointer (``T.address_of(A[0, 0])``), a float
                    raise _Unknown
                let_exprs[_key(node.var)] = node.value  # varies with the loops around: bounded over them
                lets[_key(node.var)] = extent_of(node.value, exact=True)  # a bound would be taken as its value
            return add(add(one(threads, node.value), launches(node.value, threads)),
                       stmt(getattr(node, "body", None), threads))
        body = getattr(node, "body", None)
        return add(one(threads), stmt(body, threads) if body is not None and not isinstance(body, (list, tuple))
                   else nothing)

    try:
        scalar, on_threads, folds, loop_lanes, loop_elements, scalar_operations, lane_operations = stmt(func.body, 1)
    except _Unknown:
        return None
    return SerialCost(scalar, on_threads, sizes_seen[0], folds, loop_lanes, loop_elements, scalar_operations,
                      lane_operations, nodes_seen[0])


def _operations(expr) -> tuple[int, int]:
    """The operations evaluating ``expr`` takes, and its nodes: its expression nodes, less names and
    constants (a subexpression shared in the TIR is written, so evaluated, at each use).  Among the
    operations integer and boolean arithmetic counts a quarter (index arithmetic: Python ints,
    0.03-0.05 µs an operation against 0.1-0.3 µs for numpy's float scalars, measured); calls and
    casts count whole whatever their type.  A buffer's type, with its shape, is not walked.
    Remembered per expression object: a stage's cost is asked several times (the plan, the sizes)."""
    handle = expr.__chandle__()
    known = _OPERATIONS_SEEN.get(handle)
    if known is not None:
        return known[1]
    quarters, nodes = [0], [0]

    def visit(node) -> bool:  # pre-order: True skips the node's children
        kind = _COUNTED_KIND.get(type(node))
        if kind is None:  # isinstance against the classes' ABCs costs ~6 µs a node: once per class
            kind = _COUNTED_KIND[type(node)] = (
                "skip" if not isinstance(node, _COUNTED)
                else "whole" if isinstance(node, (tvm.ir.expr.Call, tirx.Cast)) else "typed")
        if kind == "skip":
            return True
        nodes[0] += 1
        if kind == "typed":
            dtype = _dtype(node)
            quarters[0] += 1 if _is_int(dtype) or dtype == "bool" else 4
        else:
            quarters[0] += 4
        return False

    global _COUNTED, _WALKED
    if _COUNTED is None:
        _COUNTED, _WALKED = _operation_classes()
    walk_typed(expr, _WALKED, visit, order="pre")
    if len(_OPERATIONS_SEEN) >= _OPERATIONS_SEEN_MAX:
        _OPERATIONS_SEEN.clear()
    counts = _OPERATIONS_SEEN[handle] = (expr, (quarters[0] // 4, nodes[0]))  # held: its address stays its own
    return counts[1]


_OPERATIONS_SEEN: dict[int, tuple[object, tuple[int, int]]] = {}
_OPERATIONS_SEEN_MAX = 1 << 15  # a few stages' statements: the repeated asks come close together


#: The expression classes :func:`_operations` counts (all but names and constants), and with them
#: a buffer's type, whose shape it does not walk: only these reach Python (see
#: :func:`~.analysis.walk_typed`).
_COUNTED: tuple | None = None
_WALKED: tuple | None = None
#: Per node class: "skip" (not counted), "whole" (a call or cast) or "typed" (by its dtype).
_COUNTED_KIND: dict[type, str] = {}


def _operation_classes() -> tuple[tuple, tuple]:
    from .analysis import node_classes, registered_node_classes

    registered = registered_node_classes()
    leaves = (tvm.ir.expr.Constant, tvm.ir.expr.Var)
    counted = tuple(cls for cls in registered if issubclass(cls, tvm.ir.expr.Expr) and not issubclass(cls, leaves)
                    and not any(issubclass(leaf, cls) for leaf in leaves))  # not a base class of theirs
    return counted, (*counted, *node_classes("tirx.BufferType"))


def run_seconds(cost: SerialCost) -> float:
    """The run time :func:`lanes_lose_reason` prices a counted script at (seconds)."""
    return (cost.scalar * SERIAL_SECONDS_PER_STATEMENT + cost.lanes * LANES_SECONDS_PER_STATEMENT
            + cost.folds * FOLD_SECONDS + cost.loop_lanes * LOOP_LANES_SECONDS_PER_CALL
            + cost.loop_elements * LOOP_LANES_SECONDS_PER_LANE + _operations_seconds(cost))


def _operations_seconds(cost: SerialCost) -> float:
    """The price of the operations past a statement's median count (:data:`OPERATIONS_IN_A_STATEMENT`)."""
    return (cost.scalar_operations * SERIAL_SECONDS_PER_OPERATION
            + cost.lane_operations * LOOP_LANES_SECONDS_PER_CALL)


#: Whether fast mode runs the exact plan where its analysis cannot win (:func:`exact_plan_reason`).
#: The test suite turns it off to exercise the lanes on small kernels (``tests/conftest.py``).
EXACT_PLAN_WHEN_CHEAP = True


def exact_plan_reason(func, module_functions: dict | None = None, sizes: dict | None = None) -> str:
    """Why fast mode cannot win on ``func`` ("" when it may): see :func:`exact_plan_decision`."""
    return exact_plan_decision(func, module_functions, sizes)[0]


def exact_plan_decision(func, module_functions: dict | None = None,
                        sizes: dict | None = None) -> tuple[str, int | None]:
    """Why fast mode cannot win on ``func`` ("" when it may), and when it may, the most
    simplifications its lanes analysis may make (:mod:`.work`; None: no limit): past them, the
    analysis alone has cost more than the serial run at its median price (:func:`analysis_outgrown_reason`).
    The static price below is a median; an analysis that proves nothing costs several times more per
    statement (TVM's GPU merge sort tries every reading of indices that move with values read
    from memory: the top 7 of 3 x 300 was priced 234 ms against a 258 ms serial run, and took
    1.1 s).  The count bounds what an analysis can cost past its price.

    The serial run, estimated from the loop
    extents (:func:`serial_cost`; ``sizes`` binds symbolic extents), would take less time
    than the lanes analysis and emission alone, estimated from the program's size.  Then even lanes
    that ran in no time would lose, and fast mode runs the exact plan.  An unknown cost (a symbolic
    extent, a ``while`` loop) is assumed large: the analysis runs (unless the stage is planned for
    the sizes of each call, :func:`sizes_specialize_reason`, a decision of the caller).

    The constants (:data:`SERIAL_SECONDS_PER_STATEMENT`, :data:`SERIAL_SECONDS_PER_LANES_STATEMENT`,
    :data:`ANALYSIS_SECONDS_PER_STATEMENT`) come from 772 stages of the model zoo, timed one by one:
    the exact run took a median 0.26 µs per statement execution on scalars (90th percentile 0.43)
    and 34 µs per statement on GPU threads' lanes (90th percentile 100); fast mode's code generation
    took a median 0.65 ms per statement of the program more than exact's (10th-90th percentile
    0.3-1.5).  The lanes constant is set below its median, at 8 µs: the analysis of GPU kernels
    costs more per statement (3-4 ms on the zoo's dlight matmuls), and the GPU stages it would have
    sent to lanes lost there.  At 10 µs, dlight's GPU matmuls over 6 tokens of random decoder layers
    (4,216 statements on 128 threads, 4.7 µs each, against 37 ms of analysis) ran the analysis and
    lost 60-90 ms a stage (generation and one run timed at 3,513 stages of random decoder layers and
    conv nets and 2,464 of the zoo's dlight-gpu stages: the GPU stages 38.1 -> 36.7 s, the zoo's
    216.1 s either way; stages more than 10 % slower than the exact plan 48 -> 5, none of them
    by more than 60 ms).  Kernels where fast mode matters are orders of magnitude past the
    line (a 128³ matmul: 2 million statement executions, about 0.6 s serially, against 6 ms).
    A ``tvm_thread_allreduce`` is one statement that folds its threads one after another
    (:data:`FOLD_SECONDS` a step): dlight's softmax over 120 blocks of 256 threads folds 61,200
    times, 0.27 s serially, against 8 ms for its blocks run as lanes.  Statements of more operations
    than the median's (:data:`OPERATIONS_IN_A_STATEMENT`) add the rest to both sides, priced per
    operation on the serial side and per node on the analysis side: LegalizeOps' bicubic resize of
    one statement of about 1,000 operations, run 2,852 times, cost 0.8 s serially against 50 ms for
    the analysis and its lanes, and was priced at 3 ms against 7 ms.
    """
    if not EXACT_PLAN_WHEN_CHEAP:
        return "", None
    cost = serial_cost(func, module_functions, sizes)
    if cost is None:
        return "", None
    bound = ""
    if sizes and serial_cost(func, module_functions) is None:  # the sizes decided: say which
        bound = " with " + ", ".join(f"{name} = {value}" for name, value in sorted(sizes.items()))
    serial = (cost.scalar * SERIAL_SECONDS_PER_STATEMENT + cost.lanes * SERIAL_SECONDS_PER_LANES_STATEMENT
              + cost.folds * FOLD_SECONDS + _operations_seconds(cost))
    analysis = cost.size * ANALYSIS_SECONDS_PER_STATEMENT + cost.nodes * ANALYSIS_SECONDS_PER_NODE
    if serial >= analysis:
        return "", int(run_seconds(cost) / ANALYSIS_SECONDS_PER_SIMPLIFICATION)
    executed = cost.scalar + cost.lanes
    folds = f" and {cost.folds} combine steps of thread allreduces" if cost.folds else ""
    heavy = f", {cost.scalar_operations} operations past their median" if cost.scalar_operations else ""
    nodes = f" ({cost.nodes} expression nodes past their median)" if cost.nodes else ""
    return (f"the serial run{bound} is cheap ({executed} statement executions, {cost.lanes} of them on GPU threads"
            f"{folds}{heavy}: about {serial * 1e3:.2g} ms), less than the lanes analysis of its {cost.size} statements"
            f"{nodes} would take (about {analysis * 1e3:.2g} ms)"), None


def analysis_outgrown_reason(exc: AnalysisOutgrown, limit: int) -> str:
    """The exact plan's reason when the lanes analysis stopped at its ``limit`` (``exc``, see
    :func:`exact_plan_decision`)."""
    where = f" by {exc.where}" if exc.where else ""
    return (f"the lanes analysis outgrew the serial run: it made {exc.simplifications} simplifications{where}, "
            f"more than the whole serial run would take (about {limit * ANALYSIS_SECONDS_PER_SIMPLIFICATION * 1e3:.3g} "
            f"ms, at {ANALYSIS_SECONDS_PER_SIMPLIFICATION * 1e6:.3g} µs a simplification)")


def lanes_lose_reason(func, plan: EmulationPlan, module_functions: dict | None = None,
                      sizes: dict | None = None) -> str:
    """Why the fast ``plan`` of ``func`` would run slower than the exact plan ("" when it may not):
    its script, counted as :func:`serial_cost` counts the exact one but with each lanes loop
    run once as numpy calls on its lanes, costs more (:func:`run_seconds`: a call on a loop's lanes
    priced per call and per lane, one on GPU threads' lanes at their median).  Lanes over a
    few iterations around long serial loops lose so: each statement inside becomes a numpy call on a
    handful of elements (dlight.cpu's group norm after ``CompactBufferAllocation``: lanes of 3 rows
    around a serial reduction over every element, 7 times slower than the exact run).  Unknown
    costs (symbolic extents without ``sizes``) make no claim."""
    if not EXACT_PLAN_WHEN_CHEAP or plan.mode != "fast" or plan.check or plan.exact_reason:
        return ""
    plans = [plan]
    for sub in plans:
        plans.extend(sub.launched.values())
    fast = serial_cost(func, module_functions, sizes, lanes=lambda node: any(p.runs_as_lanes(node) for p in plans))
    exact = serial_cost(func, module_functions, sizes)
    if fast is None or exact is None:
        return ""
    seconds_fast, seconds_exact = run_seconds(fast), run_seconds(exact)
    if seconds_fast <= seconds_exact:
        return ""
    bound = ""
    if sizes and serial_cost(func, module_functions) is None:
        bound = " with " + ", ".join(f"{name} = {value}" for name, value in sorted(sizes.items()))
    return (f"its lanes{bound} would run slower than the serial run ({fast.lanes + fast.loop_lanes} numpy "
            f"statements on lanes and {fast.scalar} on scalars: about {seconds_fast * 1e3:.2g} ms, against "
            f"{exact.scalar + exact.lanes} statement executions: about {seconds_exact * 1e3:.2g} ms)")



def per_call_rule(func, module_functions: dict | None = None) -> str:
    """What fast mode's plan of ``func`` shown without arguments cannot tell ("" when nothing): with
    symbolic loop extents, whether the exact plan is cheaper (:func:`exact_plan_reason`) is decided
    per call with the sizes its arguments bind, so a call on small arguments runs the exact plan."""
    if not EXACT_PLAN_WHEN_CHEAP or serial_cost(func, module_functions) is not None:
        return ""
    return ("this plan is for large sizes: each call decides with the sizes of its arguments, and runs the "
            "exact plan where its serial run costs less than the lanes analysis or than the lanes")


def min_max_nodes(func, module_functions: dict | None = None) -> int:
    """The ``Min`` and ``Max`` nodes in ``func`` and the kernels it launches."""
    nodes = [0]

    def count(_node):
        nodes[0] += 1

    for f in (func, *(module_functions or {}).values()):
        if f is not None:
            walk_typed(f.body, (tirx.Min, tirx.Max), count)
    return nodes[0]


def sizes_specialize_reason(func, module_functions: dict | None, nodes: int) -> str:
    """Why fast mode plans ``func`` for the sizes of each call rather than once for every size ("" when
    it does not): its loop extents are symbolic, and its symbolic sizes sit in more than
    :data:`MIN_MAX_NODES_PER_CALL_SIZES` nested mins and maxes (``nodes``: :func:`min_max_nodes` of the
    kernel at this stage and the earlier ones, since ``CommonSubexprElim`` names the repeated ones
    and the analysis expands them again), which the
    dependence tests cannot reason about in reasonable time, while with the sizes bound they fold to
    constants.  Without a size to bind, fast mode runs the exact plan for this reason."""
    if nodes <= MIN_MAX_NODES_PER_CALL_SIZES or serial_cost(func, module_functions) is not None:
        return ""
    return f"its symbolic sizes sit in {nodes} nested mins and maxes (more than {MIN_MAX_NODES_PER_CALL_SIZES})"
