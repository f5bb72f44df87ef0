"""The emulation plan as data: each loop's strategy and reason, each allocation's copies, and the
texts the explorer shows (:class:`EmulationPlan`).  :mod:`.plan` decides them; the emitting rooms read
them and never undo what they emitted."""
from __future__ import annotations

from dataclasses import dataclass, field

from .names import _key

#: The strategies, as the explorer names them.
SERIAL = "serial"
LANES = "lanes"
PARALLEL_CHUNKS = "parallel chunks"
RACE_LANES = "race-check lanes"
THREAD_LANES = "thread lanes"
SAME_THREADS = "same threads"
BLOCK_LOOP = "block loop"
#: Iterations proven independent inside lanes that leave no array axis for them: chunks of them run
#: on the machine's cores, each chunk one iteration after another.
CORE_CHUNKS = "core chunks"


@dataclass(frozen=True)
class LoopDecision:
    """How one loop runs, and why."""

    loop: str       #: the TIR loop (or thread) variable's name
    kind: str       #: ``serial``, ``parallel``, ``vectorized``, ``unrolled``, ``thread_binding`` or ``attr``
    strategy: str   #: one of the strategy names above
    reason: str
    depth: int      #: nesting depth among the function's loops
    #: Buffers (keys) that get a copy per lane: block-scoped memory the blocks would share in the IR.
    private: tuple = ()
    #: Their names, for the explanation.
    copies: tuple = ()
    #: Of ``private``, the buffers every block writes alike (keys, and names): the blocks run in
    #: lockstep, so one copy serves all the blocks of this loop.
    alike: tuple = ()
    alike_names: tuple = ()
    #: What gets a copy of ``private``: each ``block`` of a grid, or each ``lane`` (an allocation
    #: every iteration writes before it reads, see :func:`~.sharing.written_before_read`).
    per: str = "block"
    #: ``(lo, hi)``: the lanes run only over these values of the loop variable (the guard inside
    #: provably fails for the others, see :func:`~.guards.predicate_cut`); None: the whole range.
    cut: tuple | None = None

    def text(self) -> str:
        per_block = [n for n in self.copies if n not in self.alike_names]
        copies = f"; a copy of {', '.join(per_block)} per {self.per}" if per_block else ""
        if self.alike_names:
            copies += f"; one copy of {', '.join(self.alike_names)} for all the blocks (each writes it alike)"
        return f"{self.loop}: {self.strategy} ({self.reason}{copies})"


@dataclass(frozen=True)
class AllocationDecision:
    """An allocation inside loops that run as lanes, of which one copy serves the lanes of some of
    them (the compiled loop gives each iteration its own copy; fast mode, by default, each lane)."""

    buffer: str     #: the buffer's name
    loops: tuple    #: the lanes loops (names) whose lanes share one copy
    reason: str
    depth: int
    #: Where it stands among the loop decisions (for the outline): the number of decisions before it.
    position: int = 0
    #: The loop variables (keys) of ``loops``.
    loop_keys: frozenset = frozenset()

    def text(self) -> str:
        return f"{self.buffer}: one copy for the lanes of {', '.join(self.loops)} ({self.reason})"


@dataclass
class EmulationPlan:
    """Every loop's :class:`LoopDecision`, in program order."""

    mode: str
    check: bool = False
    decisions: list[LoopDecision] = field(default_factory=list)
    #: For node (by handle) -> its decision.
    by_node: dict[int, LoopDecision] = field(default_factory=dict)
    #: Loops emission found it could not run as lanes (by handle) -> why.
    rejected: dict[int, str] = field(default_factory=dict)
    #: Of those, the loops rejected only for the memory of their lanes' private copies (planned again
    #: with one copy shared by the lanes where that is proven right, else serial).
    copies_rejected: frozenset = frozenset()
    #: The plans of the device kernels this function launches (after SplitHostDevice), by name.
    launched: dict[str, "EmulationPlan"] = field(default_factory=dict)
    #: Allocations inside lanes loops that one copy serves (see :class:`AllocationDecision`).
    allocations: list[AllocationDecision] = field(default_factory=list)
    #: For buffer (by key) -> its allocation decision.
    by_buffer: dict[int, AllocationDecision] = field(default_factory=dict)
    #: Allocations outside a lanes loop that get a copy per lane of it (by key -> the buffer).
    privatised: dict[int, object] = field(default_factory=dict)
    #: Fast mode only: why it runs the exact plan (its analysis would cost more than the serial run
    #: saves, see :func:`~.cost.exact_plan_reason`); "" when it planned lanes.
    exact_reason: str = ""
    #: Fast mode without sizes, of a function whose loop extents are symbolic: the rule each call
    #: applies with its arguments' sizes (it may run the exact plan instead, see :func:`per_call_rule`).
    per_call: str = ""
    #: Fast mode: the loop nests whose spatial loops were moved outside their reduction loops before
    #: planning (:mod:`.interchange`), one note each.
    interchanges: list[str] = field(default_factory=list)

    def decision(self, node) -> LoopDecision | None:
        return self.by_node.get(_key(node))

    def runs_as_lanes(self, node) -> bool:
        """Whether loop ``node`` runs as array lanes."""
        decision = self.by_node.get(_key(node))
        return decision is not None and decision.strategy in (LANES, PARALLEL_CHUNKS, RACE_LANES)

    def shared_lanes(self, buf) -> frozenset:
        """The loop variables (keys) whose lanes share one copy of allocation ``buf``."""
        found = self.by_buffer.get(_key(buf))
        return found.loop_keys if found is not None else frozenset()

    def all_decisions(self) -> list[LoopDecision]:
        """This function's decisions, then those of the kernels it launches."""
        return self.decisions + [d for plan in self.launched.values() for d in plan.all_decisions()]

    def lane_loops(self) -> list[LoopDecision]:
        return [d for d in self.all_decisions() if d.strategy in (LANES, PARALLEL_CHUNKS, RACE_LANES)]

    def summary(self) -> str:
        """One line: which loops run as arrays, which stay serial and why (the first reasons)."""
        if self.mode != "fast" and not self.check:
            return "exact mode: every loop runs as written, one iteration after another"
        if self.exact_reason:
            return f"{self.mode} mode runs the exact plan: {self.exact_reason}"
        text = "; ".join([self._lanes_summary(), *self.interchanges])
        return f"{text}; {self.per_call}" if self.per_call else text

    def _lanes_summary(self) -> str:
        decisions = self.all_decisions()
        fast = ", ".join(f"{d.loop} ({d.strategy})" for d in self.lane_loops())
        text = f"{self.mode} mode: " + (f"loops {fast}" if fast else "no loop runs as array lanes")
        threads = sorted({d.loop for d in decisions if d.strategy == THREAD_LANES})
        if threads:
            text += "; threads " + ", ".join(threads) + " run in lockstep as lanes"
        blocks = sorted({d.loop for d in decisions if d.strategy == BLOCK_LOOP})
        if blocks:
            text += "; blocks " + ", ".join(blocks) + " run one after another"
        on_cores = [d.loop for d in decisions if d.strategy == CORE_CHUNKS]
        if on_cores:
            text += "; loops " + ", ".join(on_cores) + " run in chunks on all cores"
        if self.allocations:
            text += "; " + ", ".join(sorted({a.buffer for a in self.allocations})) + " allocated once for all lanes"
        serial = [d for d in decisions if d.strategy == SERIAL]
        if serial:
            text += "; " + "; ".join(f"{d.loop} stays serial: {d.reason}" for d in serial[:4])
            if len(serial) > 4:
                text += f"; and {len(serial) - 4} more serial loop(s)"
        return text

    def text(self) -> str:
        """The plan as an indented outline, one loop a line."""
        return "\n".join([self.summary()] + self.outline())

    def outline(self, indent: int = 1) -> list[str]:
        """One line a loop, indented by nesting; launched kernels follow under their names."""
        lines = []
        allocations = list(self.allocations)  # in program order, after the decisions before them
        for i, d in enumerate(self.decisions + [None]):
            while allocations and allocations[0].position <= i:
                a = allocations.pop(0)
                lines.append("  " * (a.depth + indent) + a.text())
            if d is not None:
                lines.append("  " * (d.depth + indent) + d.text())
        for name, plan in self.launched.items():
            lines.append("  " * indent + f"kernel {name}:")
            lines += plan.outline(indent + 1)
        return lines

    def as_dict(self) -> dict:
        """The plan as JSON-ready data."""
        return {"mode": self.mode, "check": self.check, "summary": self.summary(), "exact_reason": self.exact_reason,
                "per_call": self.per_call, "interchanges": list(self.interchanges),
                "loops": [{"loop": d.loop, "kind": d.kind, "strategy": d.strategy, "reason": d.reason,
                           "depth": d.depth, "copies": list(d.copies), "alike": list(d.alike_names)}
                          for d in self.decisions],
                "allocations": [{"buffer": a.buffer, "loops": list(a.loops), "reason": a.reason, "depth": a.depth}
                                for a in self.allocations],
                "launched": {name: plan.as_dict() for name, plan in self.launched.items()}}
