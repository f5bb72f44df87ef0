"""The emulation plan: how each loop of a PrimFunc runs in the hybrid script, and why.

Decide, then emit.  :func:`plan_emulation` walks the TIR (TVM's analyzer, no Python ``ast``) and
decides every loop's strategy with its reason; the emitting rooms read the decision
(:meth:`EmulationPlan.decision`) and never undo what they emitted.  One thing the analysis cannot
see is whether every expression in a loop body has a lane form (a buffer of vectors indexed per lane,
a per-lane copy too large for memory, a packed call with per-lane arguments...): emission then stops
with :class:`PlanRejected` naming the loop, and :func:`emit_with_plan` records that loop as serial with
the reason, plans again and emits again from scratch.  Exact mode is the plan "every loop as written".

Fast mode must never be slower than exact.  Before any dependence test, :func:`~.cost.exact_plan_reason`
estimates from the loop extents what the serial run costs (:func:`~.cost.serial_cost`) and what
the lanes analysis and its emission would cost; when the analysis alone would cost more than the
whole serial run, fast mode's plan is the exact plan, with that reason (``EmulationPlan.exact_reason``),
and the fast script is the exact script.  While planning, the analysis counts its simplifications
(:mod:`.work`): past the serial run's price it stops, and the plan is the exact plan.  After planning,
:func:`~.cost.lanes_lose_reason` prices the planned script the same way: lanes that would run slower
than the serial run give the exact plan too.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import tvm
from tvm import tirx

from ..errors import UnsupportedConstructError
from .analysis import (_adds_lanes, _buffer_access_counts, _has_threads, _thread_extents, _type_key, allocations_in,
                       allocations_moved_into, block_scoped_allocations, child_statements, grid_loop,
                       per_block_memory, walk_typed)
from .decisions import (BLOCK_LOOP, CORE_CHUNKS, LANES, PARALLEL_CHUNKS, RACE_LANES, SAME_THREADS, SERIAL, THREAD_LANES,
                        AllocationDecision, EmulationPlan, LoopDecision)
from .dependence import allocation_overlap, loop_dependences
from .guards import predicate_cut
from .sharing import read_after_written_alike, stored_in_an_inner_loop, written_alike, written_before_read
from .lanes import LanesMixin
from .names import _dtype, _is_int, _key, buffer_labels, thread_key
from .work import WorkCount, counting, working_on

#: Array axes available to loops run as lanes (those left after the thread axes and the vector axis).
LOOP_AXES = LanesMixin.FAST_AXES - 1 - LanesMixin.FIRST_LOOP_AXIS
#: Fewer lanes than this do not pay for numpy's per-call cost: such a loop stays serial.
FAST_MIN_LANES = 8

#: Memory scopes of which privatisation and one copy written alike give the lanes copies.
_COPIED_SCOPES = ("global", "local", "shared", "shared.dyn")


class PlanRejected(Exception):
    """Emission met, in a loop planned as lanes, a construct with no lane form."""

    def __init__(self, node, reason: str, copies: bool = False):
        super().__init__(reason)
        self.node_key = _key(node)
        self.reason = reason
        #: Rejected for the memory of its lanes' private copies: planned again without privatisation.
        self.copies = copies


_KIND_NAMES = {0: "serial", 1: "parallel", 2: "vectorized", 3: "unrolled", 4: "thread_binding"}


@dataclass
class _Lane:
    extent: int | None   # None: symbolic (assumed large)
    is_thread: bool
    tag: str = ""
    loop: object = None  # the loop (a For) whose iterations are the lanes; None for threads
    grid: bool = False   # a loop over the blocks of a GPU grid


class _Planner:
    """One walk over the function in program order, with the lane axes the emitted code will have open."""

    def __init__(self, func, mode: str, check: bool, rejected: dict[int, str], exact_reason: str = "",
                 copies_rejected: frozenset = frozenset()):
        self.fast = mode == "fast" and not exact_reason
        self.check = check
        self.plan = EmulationPlan(mode, check, rejected=dict(rejected), exact_reason=exact_reason,
                                  copies_rejected=frozenset(copies_rejected))
        #: Why every loop runs as written.
        self.as_written = (f"fast mode runs the exact plan: {exact_reason}" if exact_reason
                           else "exact mode runs every loop as written")
        self.lanes: list[_Lane] = []
        self.serial_depth = 0
        self.on_cores = 0  # loops around whose chunks run on several cores (one level of them only)
        self.depth = 0
        self.roots: dict[int, int] = {}
        self.walks: dict = {}  # sharing.written_alike's walks of loop bodies, kept for this planning
        #: The accesses of each loop body, analysed once (see ``dependence._accesses``).
        self.accesses: dict = {}
        self.func = func
        self.shared: dict | None = None  # shared-memory allocations (found on first use)
        self.gpu: bool | None = None  # whether the function runs threads (found on first use)
        self.addresses: dict[int, object] = {}  # pointer variables bound to address_of(A[...])
        self.allocated: dict[int, object] = {}  # every allocation seen so far, by key
        self.block_allocated: dict[int, object] = {}  # of those, the blocks' alloc_buffers
        self.counts: dict[int, int] | None = None  # loads and stores of each buffer (found on first use)
        #: The loops open at this point of the walk, outermost first: ``(loop, (var, min, extent))``
        #: (the dependence test bounds their variables by their ranges).
        self.open_loops: list[tuple] = []
        self.labels: dict[int, str] | None = None  # buffers' names in the plan's text (see ``_label``)
        #: The threads launched around this point of the walk: ``(var, 0, extent)``.  Every thread runs
        #: each block of a grid inside them, so the dependence test of the grid ranges their variables
        #: within each block, as inner loops'.  (A loop inside threads keeps them fixed, as each
        #: thread's own loop: dlight's tensor-core copies index by thread and iteration as digits of
        #: one number, which that test does not read.)
        self.open_threads: list[tuple] = []
        #: The integer bindings (``Bind``) met so far, in order: a loop's dependence test expands those
        #: it reads (each variable is bound once in the function).
        self.bindings: list[tuple] = []

    # -------------------------------------------------------------- walk
    def stmt(self, node) -> None:
        if node is None:
            return
        key = _type_key(node)
        handler = getattr(self, "visit_" + key.split(".")[-1], None)
        if handler is not None:
            handler(node)
            return
        for child in child_statements(node):
            self.stmt(child)

    def decide(self, node, loop: str, kind: str, strategy: str, reason: str, private: tuple = (),
               grid=None, cut: tuple | None = None) -> None:
        """Record ``node``'s decision (``grid``: the loop over the blocks of a GPU grid, when it is one)."""
        private = private if strategy in (LANES, PARALLEL_CHUNKS) else ()
        per_lane = grid is None and bool(private)  # privatised allocations (see ``privatise``)
        if per_lane:
            names = tuple(self._label(self.plan.privatised[key]) for key in private)
        else:
            names = tuple(self._label(self.shared[key]) for key in private if self.shared and key in self.shared)
        alike: tuple = ()
        if grid is not None and private and self.fast and not self.check:  # the sanitizers keep every copy
            alike = tuple(sorted(self._written_alike(grid, private), key=self._shared_order))
        alike_names = tuple(self._label(self.shared[key]) for key in alike if key in self.shared)
        decision = LoopDecision(loop, kind, strategy, reason, self.depth, private, names, alike, alike_names,
                                "lane" if per_lane else "block", cut)
        self.plan.decisions.append(decision)
        self.plan.by_node[_key(node)] = decision

    def _shared_order(self, key: int) -> tuple:
        """Block-scoped allocation ``key`` sorted by name, then by where the IR allocates it: never by
        its key (an address, different in each process), so every process emits one script."""
        order = list(self.shared or ())
        return (self._label(self.shared[key]) if key in order else "", order.index(key) if key in order else len(order))

    def nested(self, body, lane: _Lane | None = None, serial: bool = False) -> None:
        if lane is not None:
            self.lanes.append(lane)
        self.serial_depth += serial
        self.depth += 1
        try:
            self.stmt(body)
        finally:
            self.depth -= 1
            self.serial_depth -= serial
            if lane is not None:
                self.lanes.pop()

    def visit_Bind(self, node) -> None:
        value = node.value
        if _is_int(_dtype(node.var)):
            self.bindings.append((node.var, value))
        if (_type_key(value) == "ir.Call" and value.args and _type_key(value.args[0]) == "ir.TensorLoad"
                and getattr(value.op, "name", "") == "tirx.address_of"):
            self.addresses[_key(node.var)] = value  # a pointer to an element: views over it alias its buffer
        self.stmt(getattr(node, "body", None))

    def visit_DeclBuffer(self, node) -> None:
        data = node.data
        if data is not None and _type_key(data) == "ir.Var" and _key(data) in self.addresses:
            data = self.addresses[_key(data)]
        if data is not None and _type_key(data) == "ir.Call" and data.args:
            source = data.args[0]
            if _type_key(source) == "ir.TensorLoad":
                source = source.source
            if hasattr(source, "data"):
                self.roots[_key(node.buffer)] = self.roots.get(_key(source), _key(source))
        self.stmt(node.body) if hasattr(node, "body") else None

    def visit_AllocBuffer(self, node) -> None:
        self.allocation(node.buffer)
        self.stmt(getattr(node, "body", None))

    def visit_SBlockRealize(self, node) -> None:
        for buf in node.block.alloc_buffers:
            self.allocation(buf)
            self.block_allocated[_key(buf)] = buf
        self.stmt(node.block.init)
        self.stmt(node.block.body)

    def allocation(self, buf) -> None:
        """An allocation inside loops that run as lanes: fast mode gives each lane a copy, as the
        compiled loop gives each iteration one, unless each iteration of a loop provably touches
        its own elements of it; then one copy serves that loop's lanes (a whole ``(128, 128, 128)``
        buffer that ``PlanAndUpdateBufferAllocationLocation`` moved into the innermost block, indexed
        by the loop variables, is one array, not one per lane)."""
        self.allocated[_key(buf)] = buf
        loops = [lane for lane in self.lanes if not lane.is_thread]
        if not self.fast or not loops:
            return
        if self.is_gpu():  # per-thread memory of GPU kernels has copies of its own
            self.grid_allocation(buf)
            return
        if len(loops) != len(self.lanes) or any(lane.loop is None for lane in loops):
            return
        # A function without threads: shared memory (a schedule's cache_write "shared") is plain memory.
        if str(buf.scope()) not in _COPIED_SCOPES:
            return
        shared = [lane.loop for lane in loops
                  if allocation_overlap(lane.loop, buf, self.roots, self.outer(lane.loop), self.accesses) is None]
        if shared:
            names = tuple(str(loop.loop_var.name) for loop in shared)
            self.one_copy(buf, shared,
                          f"each iteration of {', '.join(names)} touches its own elements of {self._label(buf)}")
            return
        # Every lane recomputes it alike through a loop (the row maximum of a softmax that a schedule
        # recomputes per element): one copy, the loop run once for them all instead of once per lane.
        # (Not under the sanitizers, which check each iteration's own accesses.)
        root = self.roots.get(_key(buf), _key(buf))
        shared = [] if self.check else [
            lane.loop for lane in loops if stored_in_an_inner_loop(lane.loop, {root}, self.roots)
            and read_after_written_alike(lane.loop, buf, self.func.body, self.context(lane.loop)) is None
            and (_key(buf) in self._written_alike(lane.loop, set(allocations_in(lane.loop.body)))
                 or _key(buf) in self._written_alike(lane.loop, {_key(buf)}, by_index=True))]
        if shared:
            names = tuple(str(loop.loop_var.name) for loop in shared)
            self.one_copy(buf, shared, f"every iteration of {', '.join(names)} writes {self._label(buf)} alike before "
                                       f"reading it")
            return
        # Copies for every lane would not fit in memory, or the sanitizers run (each lane's reads are
        # of elements it wrote: the checks of its own copy hold on the one copy, at a lane's cost, not
        # the lanes' times the copy's): one serves lanes that write it by index, or alike.
        rejected = [lane.loop for lane in loops if (self.check or _key(lane.loop) in self.plan.copies_rejected)
                    and read_after_written_alike(lane.loop, buf, self.func.body, self.context(lane.loop)) is None]
        shared = [loop for loop in rejected if self._written_alike(loop, {_key(buf)}, by_index=True)]
        if shared:
            names = tuple(str(loop.loop_var.name) for loop in shared)
            self.one_copy(buf, shared, f"each iteration of {', '.join(names)} writes the elements of "
                                       f"{self._label(buf)} it reads before reading them, with values their "
                                       f"index decides")
            return
        shared = [loop for loop in rejected if self.check
                  and _key(buf) in self._written_alike(loop, set(allocations_in(loop.body)))]
        if shared:
            names = tuple(str(loop.loop_var.name) for loop in shared)
            self.one_copy(buf, shared, f"every iteration of {', '.join(names)} writes {self._label(buf)} alike before "
                                       f"reading it")

    def grid_allocation(self, buf) -> None:
        """In a GPU kernel, an allocation inside grid loops run as lanes (each block of the compiled
        kernel has its own): one copy serves the blocks of a grid loop that touch it apart, or
        that write it alike (they run in lockstep; not under the sanitizers, whose records are per
        block) — the whole tile ``PlanAndUpdateBufferAllocationLocation`` moves into each block."""
        shared, why = [], []
        for lane in self.lanes:
            if lane.is_thread or not lane.grid or lane.loop is None:
                continue
            name = str(lane.loop.loop_var.name)
            if allocation_overlap(lane.loop, buf, self.roots, self.outer(lane.loop), self.accesses) is None:
                shared.append(lane.loop)
                why.append(f"the blocks of {name} touch their own elements of {self._label(buf)}")
            elif not self.check and _key(buf) in self._written_alike(lane.loop, {_key(buf)}):
                shared.append(lane.loop)
                why.append(f"every block of {name} writes {self._label(buf)} alike")
        if shared:
            self.one_copy(buf, shared, "; ".join(why))

    def _label(self, buf) -> str:
        """``buf``'s name in the plan's text (an unnamed one's as the generated script names it)."""
        if str(buf.name):
            return str(buf.name)
        if self.labels is None:
            self.labels = buffer_labels(self.func)
        return self.labels.get(_key(buf), "buffer")

    def one_copy(self, buf, loops: list, reason: str) -> None:
        """Record that one copy of allocation ``buf`` serves the lanes of ``loops``."""
        names = tuple(str(loop.loop_var.name) for loop in loops)
        decision = AllocationDecision(self._label(buf), names, reason, self.depth, len(self.plan.decisions),
                                      frozenset(_key(loop.loop_var) for loop in loops))
        self.plan.allocations.append(decision)
        self.plan.by_buffer[_key(buf)] = decision

    def visit_AttrStmt(self, node) -> None:
        if node.attr_key in ("thread_extent", "virtual_thread"):
            iv = node.node
            if not hasattr(iv, "thread_tag"):  # TVMScript's T.env_thread gives a plain Var in 0.27
                raise UnsupportedConstructError(f"{node.attr_key} attribute",
                                                f"on {iv}, a variable without a thread tag (not an IterVar)")
            tag = str(iv.thread_tag)
            if tag.startswith("blockIdx"):
                loop = grid_loop(node)
                strategy, reason, private = self.strategy(loop, 4, key=node, grid=True)
                self.decide(node, str(iv.var.name), "attr", BLOCK_LOOP if strategy == SERIAL else strategy, reason,
                            private, grid=loop)
                # Open around the grids inside, as a loop: their dependence tests bound it by its range
                # (``by * 1024 + tx < 64`` with one block along y bounds tx).
                with self.opened(loop):
                    self.nested_as(strategy, node.value, node.body, loop, grid=True)
                return
            self.thread(node, str(iv.var.name), "attr", tag, node.value, node.body, iv.var)
            return
        self.stmt(node.body)

    def thread(self, node, name: str, kind: str, tag: str, extent, body, var) -> None:
        tag = thread_key(tag)
        self.open_threads.append((var, tirx.const(0, _dtype(var)), extent))
        try:
            if any(lane.is_thread and lane.tag == tag for lane in self.lanes):
                self.decide(node, name, kind, SAME_THREADS, f"{tag} is already running: the same threads")
                self.nested(body)
                return
            self.decide(node, name, kind, THREAD_LANES, "threads of a block run in lockstep, one array lane each")
            self.nested(body, _Lane(_int(extent), True, tag))
        finally:
            self.open_threads.pop()

    def visit_For(self, node) -> None:
        step = node.step
        if step is not None and not (_type_key(step) == "ir.IntImm" and int(step.value) == 1):
            self.plan_loop(node)
            return
        with self.opened(node):
            self.plan_loop(node)

    @contextlib.contextmanager
    def opened(self, loop):
        """``loop`` open around what the walk meets inside (see :attr:`open_loops`)."""
        self.open_loops.append((loop, (loop.loop_var, loop.min, loop.extent)))
        try:
            yield
        finally:
            self.open_loops.pop()

    def outer(self, loop=None) -> tuple:
        """``(var, min, extent)`` of the open loops around ``loop`` (all of them when None)."""
        ranges = []
        for node, rng in self.open_loops:
            if loop is not None and node.same_as(loop):
                break
            ranges.append(rng)
        return tuple(ranges)

    def context(self, loop) -> tuple:
        """What is known of the variables around ``loop``, for the must-write walks: the open
        loops' ranges and the integer bindings met so far."""
        ranges = tuple((var, tvm.ir.Range.from_min_extent(lo, extent)) for var, lo, extent in self.outer(loop))
        return ranges + tuple(self.bindings)

    def plan_loop(self, node) -> None:
        kind = int(node.kind)
        name = str(node.loop_var.name)
        kind_name = _KIND_NAMES.get(kind, str(kind))
        step = node.step
        if step is not None and not (_type_key(step) == "ir.IntImm" and int(step.value) == 1):
            self.decide(node, name, kind_name, SERIAL, "a loop with a step runs as range(start, end, step)")
            self.nested(node.body, serial=True)
            return
        grid = False
        if kind == 4 and node.thread_binding is not None:
            tag = str(node.thread_binding.thread_tag)
            if not tag.startswith("blockIdx"):
                self.thread(node, name, kind_name, tag, node.extent, node.body, node.loop_var)
                return
            grid = True
        strategy, reason, private = self.strategy(node, kind, grid=grid)
        cut = None
        if strategy in (LANES, PARALLEL_CHUNKS) and not grid:
            cut = predicate_cut(node)
            if cut is not None:
                reason += f"; only {name} in [{cut[0]}, {cut[1]}) can pass the guard inside: the lanes run over those"
        self.decide(node, name, kind_name, strategy, reason, private, grid=node if grid else None, cut=cut)
        self.nested_as(strategy, node.extent if cut is None else cut[1] - cut[0], node.body, node, grid=grid)

    def nested_as(self, strategy: str, extent, body, loop=None, grid: bool = False) -> None:
        cores = strategy in (PARALLEL_CHUNKS, CORE_CHUNKS)
        self.on_cores += cores
        try:
            if strategy in (LANES, PARALLEL_CHUNKS, RACE_LANES):
                lane_loop = loop if strategy in (LANES, PARALLEL_CHUNKS) else None
                size = extent if isinstance(extent, int) else _int(extent)
                self.nested(body, _Lane(None if strategy == PARALLEL_CHUNKS else size, False, loop=lane_loop,
                                        grid=grid))
            else:
                self.nested(body, serial=True)
        finally:
            self.on_cores -= cores

    def strategy(self, node, kind: int, key=None, grid: bool = False) -> tuple[str, str, tuple]:
        """The strategy of loop ``node`` (``key``: the statement the decision belongs to, when not the
        loop itself; ``grid``: a loop over the blocks of a GPU grid), the reason, and the buffers
        that get a copy per lane."""
        private: tuple = ()
        why = ""
        if not (self.fast or self.check):
            return SERIAL, self.as_written, private
        working_on(f"the dependence test of loop {node.loop_var.name}")
        rejected = self.plan.rejected.get(_key(key if key is not None else node))
        # Private copies too large for memory: lanes may still share one copy written by index.
        shared_copy_only = rejected is not None and _key(key if key is not None else node) in self.plan.copies_rejected
        if rejected is not None and not shared_copy_only:
            return SERIAL, f"no lane form: {rejected}", private
        if grid:
            # Shared and per-thread memory belong to one block: a buffer that blocks would share in
            # the IR gets a copy per block lane; one they touch apart needs none.
            candidates = self.per_block(node)
            blocking, shared = loop_dependences(node, self.roots, outer=self.outer(node), cache=self.accesses,
                                                 threads=tuple(self.open_threads), bindings=tuple(self.bindings),
                                                 fatal=lambda root: root not in candidates)
            if blocking is None and shared and set(shared) <= set(candidates):
                # the order the copies are allocated in, the same in any process
                private = tuple(sorted(shared, key=self._shared_order))
            dependence = blocking or next((why for buf, why in shared.items() if buf not in candidates), None)
        else:
            blocking, shared = loop_dependences(node, self.roots, outer=self.outer(node), cache=self.accesses,
                                                 bindings=tuple(self.bindings), fatal=self.no_copy_lifts)
            dependence = blocking or next(iter(shared.values()), None)
            if blocking is None and shared and self.fast and not self.check:
                # Scratch that every iteration recomputes alike through a loop (the row's maximum of a
                # softmax recomputed per element): a copy per lane would redo that loop per lane.
                recomputed = stored_in_an_inner_loop(node, set(shared), self.roots)
                why = self.alike(node, shared) if recomputed else ""
                private = ()
                if not why and not shared_copy_only:
                    private, why = self.privatise(node, shared)
                if private:
                    dependence = None
                else:
                    why = why if recomputed else self.alike(node, shared)  # (tried already when recomputed)
                    if why:
                        dependence = None
                        # One copy for all: chunks on several cores would race on it.
                        kind = 0 if kind == 1 else kind
        free_axis = sum(not lane.is_thread for lane in self.lanes) < LOOP_AXES
        race_check = kind == 1 and self.check and dependence is not None and free_axis
        race_why = "sanitizer: the iterations of a parallel loop run as lanes whose accesses are compared"
        # Race-check lanes share one copy of the scratch each iteration writes before reading, where
        # proven: the same checks as per-lane copies, without a copy (and its work) per lane.
        one_copy = self.race_lanes_one_copy(node) if race_check else ""
        if one_copy:
            return RACE_LANES, f"{race_why}; {one_copy}", private
        if shared_copy_only:
            if grid or (shared and not why):
                return SERIAL, f"no lane form: {rejected}", private
            kind = 0 if kind == 1 else kind  # lanes that share copies: not on several cores
        if race_check:
            return RACE_LANES, race_why, private
        if not self.fast:
            return SERIAL, self.as_written, private
        extent = _int(node.extent)
        if extent is not None and extent <= 1:
            return SERIAL, "a loop of one iteration", private
        if dependence is not None:
            return SERIAL, dependence, private
        if not free_axis:
            if (kind in (0, 1, 3) and not grid and not (private or why) and not self.check and not self.on_cores
                    and not self.open_threads and not any(lane.is_thread or lane.grid for lane in self.lanes)):
                return CORE_CHUNKS, ("iterations independent, but no array axis is left for them: chunks of them "
                                     "run on all cores at once, each one iteration after another"), private
            return SERIAL, "too many nested array axes", private
        few = self.too_few_lanes(node)
        if few is not None:
            return SERIAL, few, private
        what = "blocks" if grid else "iterations"
        what += f" independent once {why}" if (private or why) and not grid else " independent"
        if (kind == 1 or grid) and self.serial_depth == 0 and not self.lanes and not self.check:
            return PARALLEL_CHUNKS, f"{what}: chunks of them run as lanes on all cores", private
        return LANES, f"{what}: all of them run at once as array lanes", private

    def _written_alike(self, loop, keys, by_index: bool = False) -> set[int]:
        """:func:`~.sharing.written_alike` with this planning's views and walks."""
        return written_alike(loop, keys, self.roots, by_index, cache=self.walks)

    def race_lanes_one_copy(self, node) -> str:
        """Under the sanitizers, parallel loop ``node`` whose race-check lanes would each need a copy
        of the block allocations that ``PlanAndUpdateBufferAllocationLocation`` moves into it (only
        the loop touches them): one copy serves all the lanes (at one lane's cost, whether or not the
        copies would fit in memory) where each iteration touches its own elements of it, or writes the
        elements it reads before reading them with the same values whatever the iteration
        (dlight.cpu's softmax recomputes the row's maximum and sum per element) or values their index
        decides (its padded conv input).
        No lane then sees a value another lane's copy would hold and its own would not, so the checks
        of each iteration's own copy hold on the one copy; the accesses of memory each iteration owns
        are no race records.  Returns the reason ("" when some allocation is not proven)."""
        bufs = allocations_moved_into(node, self.block_allocated, self.access_counts())
        keys = {_key(buf) for buf in bufs}
        alike, by_index = None, None  # (proven once, for all of them: their values may flow into each other)
        whys = []
        for buf in bufs:
            if allocation_overlap(node, buf, self.roots, self.outer(node), self.accesses) is None:
                whys.append(f"each iteration touches its own elements of {self._label(buf)}")
                continue
            if read_after_written_alike(node, buf, self.func.body, self.context(node)) is not None:
                return ""
            alike = self._written_alike(node, keys) if alike is None else alike
            if _key(buf) in alike:
                whys.append(f"each iteration writes {self._label(buf)} alike (the same values, whatever the iteration) "
                            f"before reading it")
                continue
            by_index = self._written_alike(node, keys, by_index=True) if by_index is None else by_index
            if _key(buf) not in by_index:
                return ""
            whys.append(f"each iteration writes the elements of {self._label(buf)} it reads before reading them, "
                        f"with values their index decides")
        for buf, why in zip(bufs, whys):
            self.one_copy(buf, [node], why)
        return "; ".join(f"one copy serves the lanes: {why}" for why in whys)

    def privatise(self, node, shared: dict) -> tuple[tuple, str]:
        """Privatisation (scalar expansion): the allocations outside loop ``node`` that carry its
        only dependences, when every iteration writes what it reads of them before reading it and
        nothing reads them after the loop (:func:`~.sharing.written_before_read`): with a copy per
        lane, as the compiled loop's iterations would each have if the allocation were inside, the
        iterations are independent (``shared``: the buffers, by root key, the iterations may share).
        Returns their keys and the reason ("" when none)."""
        bufs = []
        for root in shared:
            buf = self.copyable(root)
            if buf is None:
                return (), ""
            if written_before_read(node, buf, self.func.body, self.context(node)) is not None:
                return (), ""
            bufs.append(buf)
        for buf in bufs:
            self.plan.privatised[_key(buf)] = buf
        names = ", ".join(self._label(b) for b in bufs)
        seen = list(self.allocated)  # ties of names (StorageRewrite's ``v``) in the IR's order, not by address
        return tuple(_key(b) for b in sorted(bufs, key=lambda b: (self._label(b), seen.index(_key(b))))), \
            f"each writes {names} before reading it"

    def copyable(self, root: int):
        """The allocation of buffer ``root`` when lanes can have copies of it (:meth:`privatise`,
        :meth:`alike`): plain memory of a function without threads; None otherwise."""
        buf = None if self.is_gpu() else self.allocated.get(root)
        return buf if buf is not None and str(buf.scope()) in _COPIED_SCOPES else None

    def no_copy_lifts(self, root: int) -> bool:
        """Whether an overlap on buffer ``root`` keeps a loop serial whatever the other buffers do."""
        return not self.fast or self.check or self.copyable(root) is None

    def is_gpu(self) -> bool:
        """Whether the function binds threads (its memory then has per-thread and per-block copies)."""
        if self.gpu is None:
            self.gpu = bool(_thread_extents(self.func.body)) or _has_threads(self.func.body)
        return self.gpu

    def alike(self, node, shared: dict) -> str:
        """Iterations that all write the same values to the allocations that carry loop ``node``'s
        dependences, each reading them only where it wrote them first (the softmax of one row that a
        schedule recomputes for every column): run in lockstep as lanes on the one copy, they compute
        what they compute one after another (see :func:`~.sharing.read_after_written_alike`).
        Returns the reason ("" when not proven)."""
        bufs = [self.copyable(root) for root in shared]
        if any(buf is None for buf in bufs):
            return ""
        alike = self._written_alike(node, set(shared)) == set(shared)
        if not alike and self._written_alike(node, set(shared), by_index=True) != set(shared):
            return ""
        if any(read_after_written_alike(node, buf, self.func.body, self.context(node)) is not None for buf in bufs):
            return ""
        names = ", ".join(sorted(self._label(b) for b in bufs))
        if alike:
            return f"each writes {names} alike (the same values, whatever the iteration) before reading it"
        return (f"each writes the elements of {names} it reads before reading them, with values their "
                f"index decides (iterations writing one element write the same value)")

    def per_block(self, loop) -> dict:
        if self.shared is None:
            self.shared = block_scoped_allocations(self.func)
        return per_block_memory(self.shared, loop.body, self.access_counts() if self.shared else {})

    def access_counts(self) -> dict[int, int]:
        """How many loads and stores of each buffer the function holds (counted once)."""
        if self.counts is None:
            self.counts = _buffer_access_counts(self.func.body)
        return self.counts

    def too_few_lanes(self, node) -> str | None:
        """Why running this loop as lanes cannot beat running it serially, or None (fast mode must
        never be slower than exact): never a unit loop, and an innermost loop only when its
        statements then act on enough lanes."""
        extent = _int(node.extent)
        lanes = 1
        for size in [lane.extent for lane in self.lanes] + [extent]:
            if size is None:
                return None  # a symbolic extent: assume it is large
            lanes *= size
        if lanes >= FAST_MIN_LANES:
            return None
        inner = []
        walk_typed(node.body, ("tirx.For", "tirx.AttrStmt"), lambda n: inner.append(_adds_lanes(n)))
        if any(inner):
            return None  # the loops (or threads) inside may add lanes
        return f"only {lanes} lane(s): numpy's per-call cost would exceed the loop's"


def _int(expr) -> int | None:
    return int(expr.value) if _type_key(expr) == "ir.IntImm" else None


def plan_emulation(func, mode: str = "exact", check: bool = False,
                   rejected: dict[int, str] | None = None, exact_reason: str = "",
                   copies_rejected: frozenset = frozenset()) -> EmulationPlan:
    """Decide how every loop of ``func`` runs in the ``mode`` script (``check``: with sanitizers).

    ``rejected`` names loops (by handle) that emission found have no lane form, with the reason.
    ``exact_reason``: fast mode runs the exact plan, for this reason (see :func:`~.cost.exact_plan_reason`)."""
    planner = _Planner(func, mode, check, rejected or {}, exact_reason, copies_rejected)
    planner.stmt(func.body)
    return planner.plan


def emit_with_plan(func, mode: str, check: bool, emit: Callable[[EmulationPlan], object], exact_reason: str = "",
                   work_limit: int | None = None):
    """``emit(plan)`` with the plan of ``func``; each loop emission rejects runs serially instead.

    Returns ``(result, plan)``.  Every rejection demotes one more loop (one rejected for the memory of
    its lanes' private copies is first planned once more with a shared copy), so this ends after at
    most twice as many tries as the function has loops.  ``work_limit``: the most simplifications
    the plannings may make together (:mod:`.work`); past it, :class:`~.work.AnalysisOutgrown`."""
    rejected: dict[int, str] = {}
    copies_rejected: set[int] = set()
    work = WorkCount(work_limit)
    while True:
        with counting(work):
            plan = plan_emulation(func, mode, check, rejected, exact_reason, frozenset(copies_rejected))
        try:
            return emit(plan), plan
        except PlanRejected as exc:
            if exc.node_key in rejected and exc.node_key not in copies_rejected:
                raise RuntimeError(f"emission rejected loop twice: {exc.reason}") from None  # a planner bug
            if exc.node_key in rejected or not exc.copies:
                copies_rejected.discard(exc.node_key)  # serial now (the one shared copy did not do either)
            else:
                copies_rejected.add(exc.node_key)
            rejected[exc.node_key] = exc.reason
