"""What the zoo compares an emulated stage with, and how closely (used by :mod:`tvm_hybrid_nb.zoo`).

Owns the tolerances of a comparison with the native reference (:func:`_outputs_equal`: integers
exactly, floats within their units, a reordered sum within its partial sums' rounding), what the
kernel computes in (:func:`_bf16_native`, :func:`_arithmetic_eps`), and the two facts about the
reference that a second look at the native build establishes when a stage differs: the elements it
leaves unwritten (:func:`_unwritten_elements`) and how far it moves under rounding-sized input changes
(:func:`_rounding_noise`), and what it computes in float32 where it sums in float16 or bfloat16
(:func:`_wide_reference`); and the native run itself (:func:`_reference_run`), on other integer inputs
where the seeded ones make it divide by zero or read out of bounds.
"""
from __future__ import annotations

import re
from typing import Callable

import numpy as np


#: bfloat16's machine epsilon (2**-7).
_BF16_EPS = 2.0 ** -7


def _outputs_equal(got, want, bf16_native: bool = False, reordered: bool = False,
                   arithmetic_eps: float = 0.0, noise: list | None = None, wide: list | None = None) -> str | None:
    """None when every output matches the reference (integers exactly, float32 within 1e-5 relative,
    float16 and bfloat16 within 8 units in the last place: a schedule may reduce in another order than
    the unscheduled kernel), else the first difference.

    ``bf16_native``: the kernel computes bfloat16 as bfloat16, rounding every operation (cuda from
    sm_80 on), while the llvm reference computes it in float32 (``BF16ComputeLegalize``), and no
    native build here rounds per operation: every float output is then compared within 8 bfloat16
    units of its largest value, which finds a wrong element, not a wrong last bit.

    ``reordered``: a schedule may sum in another order than the reference (dlight's GEMV splits a
    reduction over threads): the rounding of a reordered sum scales with its partial sums, not with
    its result, so an element near zero is compared within the relative tolerance of the output's
    largest value (a float16 GEMV row of 96 products: partial sums near 8, a float16 unit there is
    2**-7).  ``arithmetic_eps``: the machine epsilon of the kernel's narrowest float arithmetic
    (:func:`_arithmetic_eps`); a reordered sum rounds in its units even when the output is wider
    (a float16 GEMV cast to a float32 output).  A float16 or bfloat16 sum that overflows in both orders
    may overflow to either infinity (or NaN, past both): non-finite against non-finite is then equal.
    ``noise``: per output, how far each element of the reference moves when the inputs move by
    rounding-sized amounts (:func:`_rounding_noise`); a difference within it is the kernel's own
    ill-conditioning (a reordered sum with heavy cancellation), not a wrong answer.
    ``wide``: per output, the reference computed in float32 (:func:`_wide_reference`).  With
    ``reordered``, where the reference is itself off it beyond the tolerances (nowhere else: a float16
    emulated as float32 would pass there), an element anywhere from the reference to the float32
    value (within the tolerances) is equal too: a narrow sum's rounding depends on its order so much
    that a serial sum and a tree of partial sums can differ several-fold (32,000 softmax terms: the
    serial float16 sum stalls near 256, the tree reaches 1,019 as float32 does), and a schedule's
    order lands between the serial stall and the float32 sum (a bfloat16 sum of 4,096 terms near 1.2:
    serial 1,024, the schedule's per-thread partial sums added one after another 2,048, its thread
    tree 4,778 as float32)."""
    from .compare import float_info

    for index, (g, w) in enumerate(zip(got, want)):
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"output {g.dtype}{list(g.shape)} vs native {w.dtype}{list(w.shape)}"
        if np.array_equal(g, w):  # the same values (most outputs): no tolerance to work out, in one pass
            continue
        info = float_info(g.dtype)
        if info is not None:
            # 1e-5 relative for float32; narrower floats a few units in their last place (float16's
            # is 8,192 times float32's), as a schedule's other order of a reduction rounds.
            g32, w32 = g.astype(np.float64), w.astype(np.float64)
            if info.bits <= 8:
                # float8 (and narrower) is a storage type: nothing sums in it, and a value is a rounding
                # of one computed wider.  One unit in its last place (8 would be 100% for e4m3fn, 200% for
                # e5m2), and its subnormal step absolutely (its smallest normal would pass 0 for 0.0137).
                rtol, atol = float(info.eps), float(info.smallest_subnormal)
            else:
                rtol = max(1e-5, 8 * float(info.eps))
                atol = max(1e-6, float(info.smallest_normal))
            largest = float(np.nanmax(np.abs(w32), initial=0.0, where=np.isfinite(w32)))
            if bf16_native:
                rtol = max(rtol, 8 * _BF16_EPS)
                atol = rtol * largest
            elif reordered:
                rtol = max(rtol, 8 * arithmetic_eps)
                atol = max(atol, rtol * largest)
            close = np.isclose(g32, w32, rtol=rtol, atol=atol, equal_nan=True)
            if reordered and arithmetic_eps >= float(np.finfo(np.float16).eps):
                close |= ~np.isfinite(g32) & ~np.isfinite(w32)  # a float16 sum past 65504 either way
            if reordered and wide is not None and not close.all():
                # Only where the serial reference itself is off the float32 values (elsewhere a float16
                # emulated as float32 would pass): anywhere from the one to the other.
                far = ~np.isclose(w32, wide[index], rtol=rtol, atol=atol, equal_nan=True)
                low, high = np.fmin(w32, wide[index]), np.fmax(w32, wide[index])
                slack = atol + rtol * np.abs(high)
                close |= far & (g32 >= low - slack) & (g32 <= high + slack)
        else:
            close = g == w
        if noise is not None and not close.all():
            close = close | (np.abs(g.astype(np.float64) - w.astype(np.float64)) <= noise[index])
        if not close.all():
            where = np.argwhere(~close)[0]
            return f"differs from native at {tuple(int(i) for i in where)}: {g[tuple(where)]} vs {w[tuple(where)]}"
    return None


def _bf16_native(hm) -> bool:
    """Whether ``hm``'s kernel has bfloat16 and its target computes bfloat16 as bfloat16."""
    stage0 = hm.stages[0].function if hm.stages else None
    return stage0 is not None and _bf16_per_operation(stage0, hm.target)


def _bf16_per_operation(func, target) -> bool:
    """Whether PrimFunc ``func`` has bfloat16 and ``target`` computes bfloat16 as bfloat16 (sm_80)."""
    from .stage import _has_bf16_arithmetic

    return "bfloat16" in func.script(show_meta=False) and _has_bf16_arithmetic(target)


def _arithmetic_eps(hm) -> float:
    """The machine epsilon of the narrowest float type that stage 0 of ``hm`` computes in (every
    expression's type), 0.0 for a kernel without float arithmetic."""
    from .codegen.analysis import walk_typed
    from .codegen.names import _type_key
    from .compare import float_info
    from .signature import numpy_dtype

    dtypes: set[str] = set()

    def visit(node) -> None:
        if _type_key(node) == "ir.PrimType" and "float" in str(node.dtype):
            dtypes.add(str(node.dtype).split("x")[0])

    if hm.stages:
        walk_typed(hm.stages[0].function.body, ("ir.PrimType",), visit)
    infos = [float_info(numpy_dtype(d)) for d in dtypes]
    # float8 and narrower are storage types (FP8ComputeLegalize computes them in float16/float32): a
    # float8 cast in the kernel does not make its sums round in float8 units.
    return max((float(i.eps) for i in infos if i is not None and i.bits > 8), default=0.0)


#: The relative input change of :func:`_rounding_noise` (8 float32 units in the last place) and the
#: factor on the reference's change: a reordered sum of N terms rounds by about sqrt(N) units of its
#: terms' root sum of squares (a random walk of roundings), a random input change of s moves it by
#: s times that root: 4 x 8 units cover a sum's reordering to beyond 1,000 terms.
_NOISE_STEP = 2.0 ** -20
_NOISE_FACTOR = 4


#: A narrow float type in TVMScript (a dtype string, a constant's constructor, a vector of lanes).
_NARROW_FLOAT = re.compile(r"(?<![A-Za-z0-9_])b?float16(?=x[0-9]|[^A-Za-z0-9_])")


def _wide_function(func):
    """``func`` computing in float32 where it computes in float16 or bfloat16: buffers, casts and
    constants alike, through its TVMScript.  None when that does not parse back (a reinterpret of
    float16 bits) or there is nothing narrow."""
    import tvm

    text = func.script(show_meta=False)
    wide_text = _NARROW_FLOAT.sub("float32", text)
    if wide_text == text:
        return None
    try:
        return tvm.script.from_source(wide_text)
    except Exception:  # noqa: BLE001 - TVMScript that no longer type-checks: no wide reference
        return None


def _wide_reference(func, inputs: list) -> list | None:
    """Per result of the unscheduled ``func`` (``inputs`` in the order of its parameters),
    what it computes on ``inputs`` in float32 arithmetic (:func:`_wide_function`), as float64 arrays;
    None where it cannot be built or run.  The values a reordered float16 sum approaches (see
    :func:`_outputs_equal`)."""
    from . import module as hmodule

    wide_func = _wide_function(func)
    if wide_func is None:
        return None
    try:
        wide = hmodule.build(wide_func, target="llvm")
        values = []
        for a in inputs:
            narrow = isinstance(a, np.ndarray) and str(a.dtype) in ("float16", "bfloat16")
            values.append(a.astype(np.float32) if narrow else a.copy() if isinstance(a, np.ndarray) else a)
        result = wide.run_native(*values)
        return [np.asarray(v).astype(np.float64) for v in wide.result_values(values, result)]
    except Exception:  # noqa: BLE001 - TVM cannot build or run the float32 form: no wide reference
        return None


def _rounding_noise(native, inputs: list, expected: list, runs: int = 8, seed: int = 1) -> list:
    """Per result of ``native``, how far each reference element moves (the most of ``runs`` native
    runs, times :data:`_NOISE_FACTOR`) when every float input element moves by
    :data:`_NOISE_STEP` of itself (or two units in its last place, if more), up or down at random.

    A schedule that reorders a float sum (dlight's thread trees) rounds differently from the serial
    reference, by up to about N units in the last place of the sum of the terms' magnitudes.  After
    heavy cancellation that is far more than the result's own units: a row sum of 314 normal values
    that comes to 0.039 (the magnitudes sum to 167) differs by 4.6e-5 relative between the serial
    and the exact sum.  How much the reference moves under small input changes measures exactly
    that ill-conditioning, element by element; an element where a change made a NaN or flipped a
    decision (a comparison, an argmax) moves by an infinite or large amount and is so excused too.
    Every element's allowance is at least the output's median one.
    A wrong element (another index, a lost term) differs by far more than a millionth of its inputs
    makes."""
    from .compare import float_info
    from .errors import EmulationError

    rng = np.random.default_rng(seed)
    noise = [np.zeros(np.shape(e), np.float64) for e in expected]
    for _ in range(runs):
        values = []
        for a, p in zip(inputs, native.params):
            info = float_info(a.dtype) if isinstance(a, np.ndarray) and not p.is_output else None
            if info is not None and a.size:
                step = max(_NOISE_STEP, 2 * float(info.eps))
                # np.asarray: on a 0-d array (a per-tensor scale) numpy's arithmetic gives a scalar
                a = np.asarray(a.astype(np.float64) * (1 + step * rng.choice([-1.0, 1.0], a.shape))).astype(a.dtype)
            values.append(a.copy() if isinstance(a, np.ndarray) else a)
        try:
            result = native.run_native(*values)
        except EmulationError:  # the moved inputs trap (a float used as an index): no allowance from them
            continue
        for k, (moved, reference) in enumerate(zip(native.result_values(values, result), expected)):
            m64, r64 = np.asarray(moved).astype(np.float64), np.asarray(reference).astype(np.float64)
            with np.errstate(invalid="ignore"):
                change = np.abs(m64 - r64)
            change[np.isnan(change) & ~(np.isnan(m64) & np.isnan(r64))] = np.inf  # a NaN appeared or vanished
            change[np.isnan(change)] = 0.0  # NaN in both
            noise[k] = np.maximum(noise[k], _NOISE_FACTOR * change)
    # A few random moves can leave one element of a sum almost where it was, by chance (its roundings
    # cancel): the output's typical move is an element's least.  A float16 GEMV over 4,096 products
    # moved by 0.6 at the median and by 0 at one element, where the dlight order differed by 0.125.
    for k, n in enumerate(noise):
        finite = n[np.isfinite(n)]
        if finite.size:
            noise[k] = np.maximum(n, np.median(finite))
    return noise


def _unwritten_elements(native, inputs: list, expected: list) -> list | None:
    """Per result of ``native`` (its :meth:`~HybridModule.result_values`), the mask of the elements
    that its run on ``inputs`` left unwritten, or None where it wrote them all.

    TVM's llvm build runs a reduction block's init in the first iteration of its reduction loop,
    never when the loop is empty: a max over a zero-size axis leaves its output as the memory held
    it, where a GPU schedule writes the identity; roi_align's max over a bin without samples writes
    nothing at all.  Such reference elements mean nothing and are not compared.  ``inputs`` give the
    pure outputs as zeros; a second run on outputs filled with another value finds the elements where
    each run kept its own fill (a written value cannot equal both, unless the kernel reads it from
    the output: such an element is counted as written)."""
    values, fills = [], {}
    for index, (a, p) in enumerate(zip(inputs, native.params)):
        if isinstance(a, np.ndarray) and p.is_output and a.size and not a.any():
            fills[index] = True if a.dtype == np.bool_ else 91
            a = np.full_like(a, fills[index])
        values.append(a.copy() if isinstance(a, np.ndarray) else a)
    if not fills:
        return None
    native.run_native(*values)
    outputs = [index for index, p in enumerate(native.params) if p.is_output]
    masks = [(first == inputs[index]) & (values[index] == fills[index]) if index in fills
             else np.zeros(first.shape, np.bool_) for index, first in zip(outputs, expected)]
    masks += [np.zeros(value.shape, np.bool_) for value in expected[len(outputs):]]  # the returned value
    return masks if any(m.any() for m in masks) else None


def _reference_undefined_elements(native, inputs: list) -> tuple[list | None, str]:
    """Per result of ``native``, the mask of the elements its own value leaves undefined on
    ``inputs`` (its emulation raises :class:`~tvm_hybrid_nb.errors.UndefinedResultError`: LLVM
    poison, the order of NaN in TVM's runtime sort) and the emulator's reason; (None, "") when it
    defines them all.  A schedule that computes such elements otherwise (a GPU sort network) is no
    wrong answer there."""
    from .errors import UndefinedResultError

    args = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
    try:
        native.emulate(*args, stage=0, mode="fast")
    except UndefinedResultError as exc:
        return exc.undefined, str(exc).split(": it depends on ", 1)[-1]
    except Exception:  # noqa: BLE001 - no verdict on the reference: nothing left out
        return None, ""
    return None, ""


def _left_out_elements(native, inputs: list, expected: list) -> tuple[list | None, list | None, str]:
    """What the zoo leaves out of a comparison with ``native``'s run: the masks of
    :func:`_unwritten_elements` and those of :func:`_reference_undefined_elements` with its reason."""
    return (_unwritten_elements(native, inputs, expected), *_reference_undefined_elements(native, inputs))


def _integer_constant(params, inputs: list, value: int, addresses: list[bool] | None = None) -> list:
    """``inputs`` with every integer input array made ``value``; with ``addresses`` (per parameter),
    only those whose values become part of an index, when there are any."""
    if addresses is None or not any(addresses) or len(addresses) != len(params):
        addresses = [True] * len(params)
    return [np.full_like(a, value) if isinstance(a, np.ndarray) and not p.is_output and a.dtype.kind in "iu"
            and address else a for a, p, address in zip(inputs, params, addresses)]


def _address_params(func) -> list[bool]:
    """Per parameter of ``func``: whether it is a buffer whose values become part of an index (the
    begin and strides of a dynamic slice, a gather's indices) rather than data."""
    from .tir_info import _indexing_buffers

    indexing = _indexing_buffers(func)
    return [any(p.same_as(buf) for buf in indexing) for p in func.params]


def _without_integer_zeros(params, inputs: list) -> list:
    """``inputs`` with every 0 of an integer input array made 1 (a model that divides by a tensor)."""
    return [np.where(a == 0, 1, a).astype(a.dtype) if isinstance(a, np.ndarray) and not p.is_output
            and a.dtype.kind in "iu" else a for a, p in zip(inputs, params)]


def _reference_run(native, inputs: list, outcome) -> tuple[list, list, Callable | None]:
    """The inputs used, the values the native build of the reference computes on them and a function
    that finds the elements it leaves unwritten or undefined (:func:`_left_out_elements`; None when the reference
    is not a native run; ``outcome``, a ``KernelOutcome``, gets the reason and any TVM failure).  Seeded
    integer arrays whose zeros the kernel divides by (the run is refused: it would
    crash the process) are run again without zeros; a failure of TVM's own runtime (its sort library
    has no int8) is TVM's."""
    from .errors import ArgumentTypeError, EmulationError

    def run(values):
        args = [a.copy() if isinstance(a, np.ndarray) else a for a in values]
        return args, native.run_native(*args)

    try:
        try:
            args, result = run(inputs)
        except EmulationError as exc:
            if "native run refused" in str(exc) and "division by zero" in str(exc):
                inputs = _without_integer_zeros(native.params, inputs)
                args, result = run(inputs)
                outcome.reason = "on integer inputs without 0 (the seeded ones divide by zero)"
            elif "native run refused" in str(exc) and "out-of-bounds" in str(exc):
                # Integer inputs that say where to read (a dynamic strided slice's begin and
                # strides; data stays seeded) with no contract the zoo knows: ones first (begin 1,
                # stride 1 reads a window that a wrong begin or stride would move), then zeros, which
                # read in bounds where any input does (but a stride of 0 reads one element everywhere).
                addresses = _address_params(native.stages[0].function)
                for value in (1, 0):
                    constant = _integer_constant(native.params, inputs, value, addresses)
                    try:
                        args, result = run(constant)
                        break
                    except EmulationError:
                        continue
                else:
                    raise exc from None
                inputs = constant
                outcome.reason = f"on integer inputs {value} (the seeded ones index out of bounds)"
            else:
                raise
    except ArgumentTypeError as exc:
        if "tvm.contrib.sort" not in str(exc):
            raise
        # TVM's library sorts bfloat16 wrong and corrupts memory: the reference is the exact
        # emulation of the unscheduled kernel (tests/test_zoo.py checks it against numpy).
        outcome.reason = f"reference: the emulation of the unscheduled kernel ({exc})"
        args = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
        result = native.emulate(*args, stage=0, mode="exact")
        return inputs, native.result_values(args, result), None
    except Exception as exc:  # noqa: BLE001
        if type(exc).__module__.split(".")[0] in ("tvm", "tvm_ffi"):
            outcome.tvm_failure = (f"TVM's runtime fails on the native build of the unscheduled kernel: "
                                   f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        raise
    expected = native.result_values(args, result)
    return inputs, expected, lambda: _left_out_elements(native, inputs, expected)


def _binds_threads(func) -> bool:
    from .codegen.analysis import _has_threads

    return _has_threads(func.body)


def _no_native_reference(reference, func) -> str | None:
    """Why the unscheduled kernel has no native llvm run to serve as the reference, or None: a
    GPU-only kernel with no llvm twin and no numpy meaning (llvm cannot build it), or a sub-byte
    parameter (``int4``: TVM's llvm code loads one value a byte in scalar loads and packs them in
    vector loads, and its runtime packs two a byte: no layout makes every native run mean the TIR)."""
    import tvm

    if reference is not None and not isinstance(reference, tvm.tirx.PrimFunc):
        return None
    if reference is not None and _binds_threads(reference):
        return "GPU-only: no llvm build, no numpy meaning"
    unscheduled = reference if reference is not None else func
    for param in unscheduled.params:
        dtype = str(param.ty.dtype) if tvm.tirx.is_buffer_var(param) else "bool"
        if dtype != "bool" and tvm.DataType(dtype).bits < 8:
            return (f"its {dtype} parameter {param.name}: TVM's llvm code reads it one value a byte, packed "
                    "in vector loads, and its runtime packs two a byte, so no native run means the TIR")
    return None


#: Notes a GPU-flavour outcome whose reference is the unscheduled kernel's meaning on its GPU target
#: (see :func:`_expected_on_gpu`); ``{target}``: CUDA or Metal.
GPU_REFERENCE = ("reference: the exact emulation of the unscheduled kernel on {target}, which differs from its "
                 "llvm build here (NaN in a float min/max, which CUDA's fminf/fmaxf ignore and llvm's select "
                 "picks as the second operand, or in a float !=, true in C and false in llvm's fcmp one; or an "
                 "intrinsic such as tanh that TVM's llvm lowering computes as a formula in its dtype, "
                 "(1 - exp(-2x)) / (1 + exp(-2x)) in float16, where the GPU calls its math library; or "
                 "bfloat16, which the GPU rounds at every operation and llvm code computes in float32)")
CUDA_REFERENCE = GPU_REFERENCE.format(target="CUDA")


def _nan_meaning_differs(func, kind: str = "cuda") -> bool:
    """Whether ``func`` takes an operation whose value on NaN differs between target ``kind``'s code
    and llvm code: a float32/float64 ``Min``/``Max`` (CUDA's fminf/fmaxf) or a float ``NE`` (C's ``!=``)."""
    from .codegen.analysis import _contains
    from .codegen.names import _dtype, _is_float, _type_key
    from .codegen.targets import min_max_ignores_nan

    def differs(node) -> bool:
        key = _type_key(node)
        if key in ("prim.Min", "prim.Max"):
            return min_max_ignores_nan(kind, _dtype(node))
        return key == "prim.NE" and _is_float(_dtype(node.a))

    return _contains(func.body, differs)


def _formula_meaning_differs(func) -> bool:
    """Whether ``func`` calls an intrinsic that TVM lowers for llvm as a formula of other operations
    in its dtype (:data:`~tvm_hybrid_nb.stage.LLVM_FORMULA_INTRINSICS`: ``tanh`` as
    ``(1 - exp(-2x)) / (1 + exp(-2x))``, 1-2 ulps off in float16) where CUDA calls the math library
    (``htanh``: ``tanhf`` of the value as float32, rounded once)."""
    import tvm
    import tvm_ffi

    from .stage import intrinsics_as_computed

    return not tvm_ffi.structural_equal(intrinsics_as_computed(func, tvm.target.Target("llvm")), func)


def _expected_on_gpu(func, target, inputs: list, expected: list) -> list | None:
    """What the unscheduled ``func`` computes on ``inputs`` on a GPU (``target``: CUDA, Metal), by its exact emulation
    there, where that differs from ``expected``, its llvm build; else None.  TIR's float ``Min``/``Max``
    ignore a NaN operand on CUDA (fminf/fmaxf) and pick the second operand in llvm code (a select), so a
    row max over NaN is NaN on a CPU and the largest number (or the reduction's initial value) on a GPU;
    a float ``!=`` of NaN is true in CUDA's C and false in llvm's ``fcmp one``; a float16 ``tanh`` is
    rounded from float32 on CUDA and computed as a formula in float16 by llvm code
    (:func:`_formula_meaning_differs`); bfloat16 arithmetic rounds at every operation on a GPU that has
    it (sm_80), while llvm code computes it in float32 and holds its allocations so
    (``BF16ComputeLegalize``): a bfloat16 softmax's serial sum of 32,000 exponentials stalls at 256 on
    the GPU and reaches 10,500 in llvm code.  The GPU kernel is then compared with the unscheduled
    kernel's meaning on the GPU."""
    from . import module as hmodule

    if not (_nan_meaning_differs(func, str(target.kind.name)) or _formula_meaning_differs(func)
            or _bf16_per_operation(func, target)):
        return None
    unscheduled = hmodule.build(func.with_attr("target", target), target=target, on_failure="keep")
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
    on_cuda = unscheduled.result_values(args, unscheduled.emulate(*args, stage=0, mode="exact"))
    same = all(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=np.asarray(a).dtype.kind in "fc")
               for a, b in zip(on_cuda, expected))
    return None if same else on_cuda
