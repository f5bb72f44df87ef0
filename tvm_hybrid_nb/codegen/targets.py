"""What the target a function is compiled for means for its semantics: which code generator prints
it (TVM's ``CodeGenLLVM`` or one that prints C), and so which integer overflow has no defined result,
whether ``&&``/``||`` evaluate their right side in every lane, what a float min/max of NaN gives, and
where CUDA's float arithmetic is not the IEEE operations the emulation computes
(:func:`cuda_float_differences`)."""
from __future__ import annotations

from .names import _float_bits, _is_int, _scalar_dtype

#: Target kinds whose code generator derives from TVM's ``CodeGenLLVM`` (``nsw``/``nuw`` on 32- and
#: 64-bit add, sub and mul; ``CreateAnd``/``CreateOr`` evaluate both sides).
LLVM_KINDS = frozenset({"llvm", "rocm", "nvptx", "hexagon"})
#: Target kinds printed as C: signed overflow is undefined, unsigned arithmetic wraps, and ``&&``/``||``
#: short-circuit.
C_KINDS = frozenset({"cuda", "opencl", "metal", "c"})
#: Target kinds whose kernels run on a device: their host code cannot dereference device memory.
GPU_KINDS = frozenset({"cuda", "rocm", "nvptx", "opencl", "metal", "vulkan", "webgpu"})


def target_kind(func, device_code: bool) -> str:
    """The kind of target ``func`` is compiled for: its ``target`` attribute, else (the input, before
    BindTarget) ``cuda`` for a function with threads (``device_code``) and ``llvm`` otherwise."""
    target = func.attrs.get("target") if func.attrs is not None else None
    if target is not None:
        return str(target.kind.name)
    return "cuda" if device_code else "llvm"


def short_circuits(kind: str) -> bool:
    """Whether TIR's ``And``/``Or`` are printed as C's ``&&``/``||`` for target ``kind``."""
    return kind in C_KINDS


def overflow_is_poison(kind: str, dtype: str) -> bool:
    """Whether an add, sub or mul of integer ``dtype`` that overflows has no defined result on target
    ``kind`` (32- and 64-bit: narrower C operands are promoted to ``int``, and TVM's llvm code leaves
    them without ``nsw``)."""
    if not _is_int(dtype) or _float_bits(dtype) < 32:
        return False
    return kind in LLVM_KINDS or (kind in C_KINDS and not dtype.startswith("uint"))


def operand_bits(kind: str, dtype: str) -> int:
    """The width in which an integer shift or division of ``dtype`` is computed on target ``kind``:
    C's integer promotion makes a narrower operand an ``int`` (so a uint8 shifted by 8..31, or int8
    ``-128 / -1``, is defined there and the store truncates); TVM's llvm code keeps the dtype's width."""
    bits = _float_bits(dtype)
    return 32 if kind in C_KINDS and bits < 32 else bits


def min_max_ignores_nan(kind: str, dtype: str) -> bool:
    """Whether TIR's float ``Min``/``Max`` of ``dtype`` gives the other operand where one is NaN on
    target ``kind``.  TVM prints them as ``min``/``max`` in CUDA, which for float and double are CUDA's
    ``fminf``/``fmaxf`` (``fmin``/``fmax``); TVM's own ``max(half, half)`` and ``max(nv_bfloat16, ...)``
    are ``a > b ? a : b``, and its llvm code is that select for every type."""
    return kind == "cuda" and _scalar_dtype(dtype) in ("float32", "float64")


#: TIR float operations whose value CUDA rounds once (``Add``/``Sub`` of a ``Mul``: nvcc's
#: ``-fmad=true`` contracts them into a fused multiply-add).
_CONTRACTED = ("prim.Add", "prim.Sub")
#: Float intrinsics that are exact in every library (CUDA's included): no note for them.
_EXACT_MATH = frozenset({"tirx.fabs", "tirx.floor", "tirx.ceil", "tirx.trunc", "tirx.round", "tirx.nearbyint",
                         "tirx.copysign", "tirx.fmod", "tirx.isnan", "tirx.isinf", "tirx.isfinite", "tirx.ldexp",
                         "tirx.reinterpret", "tirx.if_then_else", "tirx.likely"})


def cuda_float_differences(funcs) -> list[str]:
    """Where a GPU computes the float arithmetic of ``funcs`` (CUDA code) otherwise than as the IEEE
    operations the TIR writes, one rounding each, which the emulation computes: TVM builds CUDA with
    ``--use_fast_math`` (``tvm.support.nvcc``: NVRTC always, nvcc unless ``TVM_CUDA_NVCC_NO_FAST_MATH``
    is set), which flushes float32 subnormals to zero and makes float32 division, square root and
    ``expf``/``logf``/``sinf``/``cosf``/``powf`` approximate, and nvcc contracts a multiply feeding an
    add into one fused multiply-add.  Empty when the functions have none of these."""
    from .analysis import walk_typed
    from .names import _dtype, _is_float, _type_key

    found: dict[str, set] = {"fma": set(), "ftz": set(), "approx": set(), "math": set()}

    def visit(node) -> None:
        key = _type_key(node)
        if key in ("prim.Add", "prim.Sub", "prim.Mul", "prim.Div", "ir.Call") and _is_float(_dtype(node)):
            dtype = _scalar_dtype(_dtype(node))
            if key == "ir.Call":
                name = getattr(node.op, "name", "")
                if not name.startswith("tirx.") or name in _EXACT_MATH:
                    return
                if name != "tirx.sqrt" or dtype != "float32":  # that one is said approximate below
                    found["math"].add(name[len("tirx."):])
            elif key in _CONTRACTED and any(_type_key(side) == "prim.Mul" for side in (node.a, node.b)):
                found["fma"].add(dtype)
            elif key == "prim.Div" and dtype == "float32":
                found["approx"].add("division")
            if dtype == "float32":
                found["ftz"].add(dtype)
                if key == "ir.Call" and name in ("tirx.sqrt", "tirx.rsqrt"):
                    found["approx"].add("square root")

    for func in funcs:
        if func is not None:
            walk_typed(func.body, ("prim.Add", "prim.Sub", "prim.Mul", "prim.Div", "ir.Call"), visit, order="pre")
    differences = []
    if found["fma"]:
        differences.append(f"a {'/'.join(sorted(found['fma']))} multiply feeding an add or subtract is one fused "
                           f"multiply-add (rounded once)")
    if found["ftz"]:
        differences.append("float32 subnormals flush to zero")
    if found["approx"]:
        differences.append(f"float32 {' and '.join(sorted(found['approx']))} are approximate")
    if found["math"]:
        differences.append(f"{', '.join(sorted(found['math']))} come from CUDA's math library (float32 exp, log, "
                           f"sin, cos, pow as its fast approximate intrinsics)")
    return differences


def cuda_float_note(funcs) -> str:
    """The script header's note on :func:`cuda_float_differences` of ``funcs``; empty when none."""
    differences = cuda_float_differences(funcs)
    if not differences:
        return ""
    return ("TVM builds CUDA with --use_fast_math and the emulation computes each float operation as the TIR "
            "writes it, in IEEE arithmetic; on a GPU " + "; ".join(differences)
            + ", so float results may differ from a GPU's")
