"""What the target a function is compiled for means for its semantics: which code generator prints
it (TVM's ``CodeGenLLVM`` or one that prints C), and so which integer overflow has no defined result
and whether ``&&``/``||`` evaluate their right side in every lane."""
from __future__ import annotations

from .names import _float_bits, _is_int, _scalar_dtype

#: Target kinds whose code generator derives from TVM's ``CodeGenLLVM`` (``nsw``/``nuw`` on 32- and
#: 64-bit add, sub and mul; ``CreateAnd``/``CreateOr`` evaluate both sides).
LLVM_KINDS = frozenset({"llvm", "rocm", "nvptx", "hexagon"})
#: Target kinds printed as C: signed overflow is undefined, unsigned arithmetic wraps, and ``&&``/``||``
#: short-circuit.
C_KINDS = frozenset({"cuda", "opencl", "metal", "c"})


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
