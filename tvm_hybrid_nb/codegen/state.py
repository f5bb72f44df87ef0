"""The generator's state while it walks one PrimFunc, grouped by the concern that owns it.

Each group is a small record; :class:`~.generator.HybridCodegen` holds one of each, so a room reads
``self.lanes.axes`` or ``self.gpu.launched`` and the owner of every field is visible at the use.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .names import _Axis, _BufferInfo, _SerialFrame


@dataclass
class Scope:
    """What is declared at the point being generated: buffers, variables and their Python kinds."""

    buffers: dict[int, _BufferInfo] = field(default_factory=dict)
    #: TIR variable -> ("np" | "py", dtype, varies between lanes).
    var_kinds: dict[int, tuple] = field(default_factory=dict)
    #: Allocations with explicit strides (by buffer key and by name): their flat storage's name.
    strided_storage: dict = field(default_factory=dict)
    #: Parameter buffers (by key) whose constant strides reach one element by several indices.
    overlapping: set = field(default_factory=set)
    #: Buffer -> the allocation whose storage it views.
    storage_roots: dict[int, int] = field(default_factory=dict)
    #: Buffers allocated by a block (``s_tir``): where they live is decided later, by
    #: ``PlanAndUpdateBufferAllocationLocation`` (see ``LanesMixin._planned_into``).
    block_allocs: dict[int, object] = field(default_factory=dict)
    access_counts: dict[int, int] | None = None
    #: Pointer variables bound to ``address_of(A[...])`` (by key) -> that call: buffers declared
    #: over them are views at the element (``_address_view``).
    address_binds: dict = field(default_factory=dict)
    #: Runtime helpers the script calls (their source is appended to it).
    helpers: set[str] = field(default_factory=set)
    #: Loop variable (by key) -> ``(var, min, extent)``: the values it takes, symbolic ones included
    #: (for the bounds the analyzer's constant bounds cannot prove, see ``_within_symbolic_range``).
    loop_domains: dict[int, tuple] = field(default_factory=dict)
    #: Math on constants computed once (see :mod:`.constants`): the assignments of the prologue,
    #: their names by the expression's text, and per TIR expression (by key) whether it holds
    #: constants alone and whether a math call is among them.
    constants: list[ast.stmt] = field(default_factory=list)
    constant_names: dict[str, str] = field(default_factory=dict)
    closed_exprs: dict[int, tuple] = field(default_factory=dict)


@dataclass
class LaneState:
    """Fast mode (and the GPU's lockstep threads): the array axes open at the point being generated."""

    axes: list[_Axis] = field(default_factory=list)
    #: Array axis planned for each loop of the current lane nest (see ``analysis._plan_lane_axes``).
    axis_plan: dict[int, int] = field(default_factory=dict)
    vector_depth: int = 0
    #: Lane conditions of the statements being generated (branches that differ between lanes).
    stmt_masks: list[ast.expr] = field(default_factory=list)
    masks: list[ast.expr] = field(default_factory=list)
    #: Lane conditions of the lazy ``if_then_else`` arms being generated: lanes outside them
    #: do not evaluate the arm, so they must not trap (divide by zero) there.
    lazy_masks: list[ast.expr] = field(default_factory=list)
    vectorized_loops: list[str] = field(default_factory=list)
    #: ``T.parallel`` loops whose chunks run on several cores (see ``LanesMixin._split_parallel``).
    parallel_loops: list[str] = field(default_factory=list)
    #: While generating a chunk function: its loop variable and full extent, and the largest
    #: number of lanes one of its statements runs (to decide how many cores it is worth).
    chunked_var: int | None = None
    chunked_extent: ast.expr | None = None
    peak_lanes: int = 0
    #: While generating a chunk function: the variables and buffers (keys) that may differ between
    #: its iterations; a statement touching none of them runs without the chunk's lanes (None: unknown).
    chunk_varying: tuple[set[int], set[int]] | None = None
    #: A statement of the chunk function rewrites memory beyond its own chunk's elements (a whole
    #: accumulator shared with every thread): its chunks run one after another, not on several cores.
    chunks_in_turn: bool = False


@dataclass
class SerialState:
    """The serial loops around the statement being generated (fast mode hoists views out of the
    innermost) and how many analyser guards are open."""

    depth: int = 0
    frames: list[_SerialFrame] = field(default_factory=list)
    guard_depth: int = 0
    hoisted_views: set[str] = field(default_factory=set)
    #: ``break_loop``/``continue_loop`` calls (by key) of serial loops run inside GPU threads -> the
    #: masks of their loop (:class:`LoopExits`).
    exits: dict = field(default_factory=dict)


@dataclass
class LoopExits:
    """A serial loop inside GPU threads with ``break``/``continue``, which some threads may take and
    others not: ``going`` masks the threads still running the iteration, ``alive`` (with a
    ``break``) those that have not left the loop; ``mask_depth`` is where the statement masks of the
    loop body begin (``going`` first)."""

    going: str
    alive: str | None
    mask_depth: int


@dataclass
class ProgressLevel:
    """A loop that reports progress: its ``__progress__`` call, whether it is an outermost loop of
    few iterations (a constant extent of at most 16: any first loop inside then reports too) and
    whether a loop inside reports (then its own call says the iterations done, not the one starting)."""

    call: ast.Call
    few: bool = False
    child: bool = False


@dataclass
class ProgressHooks:
    """``__progress__`` calls of the executed variant."""

    enabled: bool = False
    #: Number of loops that report (the outermost serial loops).
    loops: int = 0
    #: The reporting loops around the statement being generated, outermost first: an outermost
    #: serial loop, then in each the first serial loop that holds a loop (any first loop, under
    #: an outermost one of few iterations), and so on (empty where a loop in between does not report).
    chain: list[ProgressLevel] = field(default_factory=list)


@dataclass
class GpuState:
    """Threads, launches and cross-thread reductions."""

    #: Sanitizer: global buffers (by name) that threads write under the region records (see
    #: ``RaceLog(watched=...)``): their reads are kept until the barrier.
    region_written: set[str] = field(default_factory=set)

    #: Constant extent of each thread tag launched in the function (for per-thread memory).
    thread_extents: dict[str, int] = field(default_factory=dict)
    #: Whether the function binds threads (device code: CUDA C's float ``!=``, not LLVM's ``fcmp one``).
    device_code: bool = False
    #: Threads race only where barriers are explicit: after s_tir.ThreadSync, or written by the user.
    #: Before that pass the IR implies a barrier wherever one is needed.
    thread_races: bool = False
    #: Other functions of the module (kernels this one launches) and the Python names given to them.
    module_functions: dict = field(default_factory=dict)
    launched: dict[str, str] = field(default_factory=dict)
    extra_defs: list[ast.FunctionDef] = field(default_factory=list)
    #: The emulation plan of each launched kernel (by its name in the module).
    launched_plans: dict = field(default_factory=dict)
    reducers: list = field(default_factory=list)
    #: Sanitizer: how many warp stores of a tensor-core tile (``tensorcore.WARP_STORE_ATTR``) enclose
    #: the point being generated: their writes are recorded as the warp's, no thread's.
    warp_store: int = 0
    #: Thread tag -> loop variable of a thread run serially (inside a cross-thread reduction block),
    #: and the per-thread buffers that block reduces into -> the tags it reduces across.
    serial_thread_lanes: dict[str, str] = field(default_factory=dict)
    accumulator_tags: dict[str, set] = field(default_factory=dict)
    #: Sanitizer: how many loops over GPU blocks that run one after another enclose the point being
    #: generated (their global-memory accesses go to the grid ledger, see ``RaceLog.at_block``).
    serial_blocks: int = 0
    #: (tag, Python loop variable) of each loop bound to a GPU thread tag whose iterations run one
    #: after another around the point being generated, outermost first (errors name them).
    serial_loops: list = field(default_factory=list)
    #: Per loop body that changes them: [those loops, the Python name of their tuple or None, the
    #: race-record keywords assigned there by key] (see ``SanitizerMixin._thread_names_scope``).
    naming_frames: list = field(default_factory=list)
    #: The function's block-scoped allocations, by key (found on first use).
    shared: dict | None = None
    #: Loop variable of each grid loop run as lanes -> (the buffers allocated outside it, which the
    #: plan's proof covers; of those, the ones that need a copy per block along that lane axis: the
    #: blocks would share them in the IR and write them differently).
    block_copies: dict = field(default_factory=dict)
