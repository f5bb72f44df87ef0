"""Kernel signatures as plain data: what each parameter of a kernel expects (no TVM types here)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence, Union

import numpy as np

from .errors import ArgumentCountError, ArgumentShapeError, ArgumentTypeError, InsufficientMemoryError

#: A dimension is a fixed size, the name of a symbolic size bound from the arrays (``"n"``), or an
#: integer expression over such names (``"n + 2"``, ``"(n - 1) // 2 + 1"``).
Dim = Union[int, str]


def dim_value(dim, sizes):
    """The value of dimension ``dim`` given the symbolic ``sizes`` (a name → int mapping).

    Expressions use ``+ - * // %``, unary minus, parentheses, integer literals and names; anything
    else is refused (they come from the kernel's signature, but are never handed to ``eval``).
    Raises KeyError naming a size that ``sizes`` lacks.  Self-contained: dumped stage files carry a
    copy of its source.
    """
    import ast as _ast

    if not isinstance(dim, str):
        return int(dim)
    if dim.isidentifier():
        return int(sizes[dim])
    ops = {_ast.Add: lambda a, b: a + b, _ast.Sub: lambda a, b: a - b, _ast.Mult: lambda a, b: a * b,
           _ast.FloorDiv: lambda a, b: a // b, _ast.Mod: lambda a, b: a % b}

    def value(node):
        if isinstance(node, _ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, _ast.UnaryOp) and isinstance(node.op, (_ast.USub, _ast.UAdd)):
            return -value(node.operand) if isinstance(node.op, _ast.USub) else value(node.operand)
        if isinstance(node, _ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, _ast.Name):
            return int(sizes[node.id])
        raise ValueError(f"dimension {dim!r}: only + - * // % of integers and sizes are allowed")

    return value(_ast.parse(dim, mode="eval").body)


def dim_symbols(dim: Dim) -> list[str]:
    """The symbolic sizes a dimension uses, in order of appearance (``"n + m"`` → ``["n", "m"]``)."""
    if not isinstance(dim, str):
        return []
    if dim.isidentifier():
        return [dim]
    import ast as _ast

    names = [n.id for n in _ast.walk(_ast.parse(dim, mode="eval")) if isinstance(n, _ast.Name)]
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class ParamSpec:
    """One kernel parameter.

    Attributes
    ----------
    name : str
        The Python name used in the hybrid source (``A``, ``A_1``).
    dtype : str
        TVM dtype string (``"float32"``, ``"int8"``, ``"bool"``).
    shape : tuple of Dim or None
        For buffers, the shape with symbolic sizes named; ``None`` for scalar parameters.
    is_output : bool
        Whether the kernel writes this buffer.
    """

    name: str
    dtype: str
    shape: tuple[Dim, ...] | None
    is_output: bool = False

    @property
    def is_buffer(self) -> bool:
        return self.shape is not None

    def describe(self) -> str:
        if not self.is_buffer:
            return f"{self.name}: {self.dtype}"
        dims = ", ".join(str(d) for d in self.shape)
        return f"{self.name}: {self.dtype}[{dims}]"


def numpy_dtype(tvm_dtype: str) -> np.dtype:
    """The numpy dtype that stores one lane of ``tvm_dtype``."""
    base = tvm_dtype.split("x")[0] if "x" in tvm_dtype and not tvm_dtype.startswith("bool") else tvm_dtype
    if base == "bool":
        return np.dtype(np.bool_)
    try:
        return np.dtype(base)
    except TypeError:
        raise ArgumentTypeError(f"dtype {tvm_dtype!r} has no numpy equivalent") from None


@dataclass
class BoundArguments:
    """Arguments checked against a signature: contiguous work arrays and the symbolic sizes."""

    values: list
    sizes: dict[str, int]
    write_back: list[tuple[np.ndarray, np.ndarray]]

    def finish(self) -> None:
        """Copy results from work copies back into the caller's non-contiguous output arrays."""
        for user, work in self.write_back:
            user[...] = work


def bind_arguments(params: Sequence[ParamSpec], args: Sequence, *, copy_inputs: bool = False) -> BoundArguments:
    """Check ``args`` against ``params`` and return what the kernel runs on.

    Output arrays are used in place when they are C-contiguous; otherwise the kernel runs on a
    contiguous copy that :meth:`BoundArguments.finish` copies back.  Errors name the parameter.
    """
    if len(args) != len(params):
        expected = ", ".join(p.name for p in params)
        raise ArgumentCountError(
            f"expected {len(params)} arguments ({expected}), got {len(args)}")
    sizes: dict[str, int] = {}
    scalars: dict[str, int] = {}
    values: list = []
    write_back: list[tuple[np.ndarray, np.ndarray]] = []
    for spec, arg in zip(params, args):
        if not spec.is_buffer:
            values.append(_scalar_argument(spec, arg))
            if isinstance(values[-1], int) and not isinstance(values[-1], bool):
                scalars[spec.name] = values[-1]  # a size parameter may appear in shape expressions
            continue
        if not isinstance(arg, np.ndarray):
            raise ArgumentTypeError(
                f"parameter {spec.name}: expected a numpy array of {spec.dtype}, got {type(arg).__name__}")
        want = numpy_dtype(spec.dtype)
        if arg.dtype != want:
            raise ArgumentTypeError(
                f"parameter {spec.name}: expected dtype {spec.dtype}, got {arg.dtype}")
        if arg.ndim != len(spec.shape):
            raise ArgumentShapeError(
                f"parameter {spec.name}: expected {len(spec.shape)} dimensions {_shape_text(spec.shape)}, "
                f"got shape {arg.shape}")
        for axis, (dim, got) in enumerate(zip(spec.shape, arg.shape)):
            if isinstance(dim, str):
                if not dim.isidentifier():
                    continue  # an expression: checked once every plain size is bound
                if dim in sizes and sizes[dim] != got:
                    raise ArgumentShapeError(
                        f"parameter {spec.name}: dimension {axis} is {dim}={sizes[dim]} from an earlier "
                        f"argument, got {got}")
                sizes.setdefault(dim, got)
            elif dim != got:
                raise ArgumentShapeError(
                    f"parameter {spec.name}: expected shape {_shape_text(spec.shape)}, got {arg.shape}")
        if spec.is_output and not arg.flags.writeable:
            raise ArgumentTypeError(f"parameter {spec.name}: output array is read-only")
        if arg.flags.c_contiguous and not (copy_inputs and not spec.is_output):
            values.append(arg)
        else:
            work = np.ascontiguousarray(arg).copy() if copy_inputs else np.ascontiguousarray(arg)
            values.append(work)
            if spec.is_output and work is not arg:
                write_back.append((arg, work))
    for spec, arg in zip(params, args):
        for axis, dim in enumerate(spec.shape or ()):
            if isinstance(dim, str) and not dim.isidentifier():
                known = {**scalars, **sizes}
                want = dim_value(dim, known)  # expressions over bound sizes and scalar size parameters
                if arg.shape[axis] != want:
                    bound = ", ".join(f"{n}={known[n]}" for n in dim_symbols(dim))
                    raise ArgumentShapeError(
                        f"parameter {spec.name}: dimension {axis} must be {dim} = {want} ({bound}), "
                        f"got {arg.shape[axis]}")
    return BoundArguments(values, sizes, write_back)


def _scalar_argument(spec: ParamSpec, arg):
    if isinstance(arg, np.ndarray) and arg.ndim == 0:
        arg = arg[()]
    if isinstance(arg, (bool, np.bool_)) and spec.dtype != "bool":
        raise ArgumentTypeError(f"parameter {spec.name}: expected a {spec.dtype} number, got bool")
    if spec.dtype.startswith(("int", "uint")):
        if not isinstance(arg, (int, np.integer)):
            raise ArgumentTypeError(f"parameter {spec.name}: expected an integer ({spec.dtype}), got {type(arg).__name__}")
        info = np.iinfo(numpy_dtype(spec.dtype))
        if not info.min <= int(arg) <= info.max:
            raise ArgumentTypeError(f"parameter {spec.name}: {arg} does not fit in {spec.dtype}")
        return int(arg)
    if spec.dtype.startswith("float"):
        if not isinstance(arg, (int, float, np.integer, np.floating)):
            raise ArgumentTypeError(f"parameter {spec.name}: expected a number ({spec.dtype}), got {type(arg).__name__}")
        return numpy_dtype(spec.dtype).type(arg)
    if spec.dtype == "bool":
        return bool(arg)
    raise ArgumentTypeError(f"parameter {spec.name}: scalar parameters of dtype {spec.dtype} are not supported")


def _shape_text(shape: Sequence[Dim]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def physical_memory() -> int | None:
    """Bytes of physical memory of this machine (None where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def check_allocation(nbytes: int, what: str) -> None:
    """Refuse, before allocating, ``nbytes`` that exceed the machine's physical memory.

    Raises
    ------
    InsufficientMemoryError
        Naming ``what`` and both sizes.
    """
    limit = physical_memory()
    if limit is not None and nbytes > limit:
        raise InsufficientMemoryError(
            f"{what} would need {_gib(nbytes)} but this machine has {_gib(limit)} of memory; "
            f"nothing was allocated (use smaller sizes)")


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:.3g} GiB"


def _nbytes(shape: Sequence[int], dtype: np.dtype) -> int:
    count = 1
    for dim in shape:
        count *= max(int(dim), 0)
    return count * np.dtype(dtype).itemsize


def random_arguments(params: Sequence[ParamSpec], seed: int = 0, sizes: dict[str, int] | None = None) -> list:
    """Seeded random inputs for ``params``; outputs are zero-filled.

    Floats are uniform in [-1, 1); 8-bit integers cover their whole range (wrap-around shows);
    wider integers stay within [-100, 100] (or [0, 100] unsigned); bools are fair coins.
    """
    sizes = dict(sizes or {})
    shapes = []
    for spec in params:
        if not spec.is_buffer:
            raise ArgumentTypeError(
                f"parameter {spec.name} is a scalar: give its value (e.g. --inputs) instead of random inputs")
        shape = []
        for dim in spec.shape:
            missing = [n for n in dim_symbols(dim) if n not in sizes]
            if missing:
                raise ArgumentShapeError(
                    f"parameter {spec.name} has symbolic size {missing[0]}: give sizes={{'{missing[0]}': ...}} "
                    f"or explicit inputs")
            shape.append(dim_value(dim, sizes))
        if any(int(d) < 0 for d in shape):
            raise ArgumentShapeError(f"parameter {spec.name}: negative size in shape {tuple(shape)}")
        shapes.append(shape)
    total = sum(_nbytes(shape, numpy_dtype(spec.dtype)) for spec, shape in zip(params, shapes))
    check_allocation(total, f"the arguments ({', '.join(p.name for p in params)})")
    return seeded_values([(p.name, p.dtype, shape, p.is_output) for p, shape in zip(params, shapes)], seed, {})


def seeded_values(specs, seed, sizes, scalars=None):
    """Seeded arguments for ``(name, dtype, shape, is_output)`` tuples; outputs are zeros.

    Floats are uniform in [-1, 1); 8-bit integers cover their whole range; wider integers stay in
    [-100, 100]; bools are fair coins; symbolic dimensions come from ``sizes``, scalars from
    ``scalars``.  Self-contained (numpy and :func:`dim_value`): dumped stage files carry a copy of
    both sources.
    """
    import numpy

    rng = numpy.random.default_rng(seed)
    values = []
    for name, dtype, shape, is_output in specs:
        if shape is None:
            values.append((scalars or {})[name])
            continue
        shape = [dim_value(d, sizes) for d in shape]
        np_dtype = numpy.dtype("bool" if dtype.startswith("bool") else dtype.split("x")[0])
        if is_output:
            values.append(numpy.zeros(shape, np_dtype))
        elif np_dtype == numpy.bool_:
            values.append(rng.integers(0, 2, shape).astype(numpy.bool_))
        elif numpy.issubdtype(np_dtype, numpy.floating):
            values.append(rng.uniform(-1.0, 1.0, shape).astype(np_dtype))
        else:
            info = numpy.iinfo(np_dtype)
            lo, hi = (info.min, info.max) if info.bits == 8 else (max(info.min, -100), min(info.max, 100))
            values.append(rng.integers(lo, hi, shape, endpoint=True, dtype=np_dtype))
    return values
