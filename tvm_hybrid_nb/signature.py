"""Kernel signatures as plain data: what each parameter of a kernel expects (no TVM types here)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Sequence, Union

import numpy as np

from .errors import ArgumentCountError, ArgumentShapeError, ArgumentTypeError, InsufficientMemoryError

#: A dimension is a fixed size, the name of a symbolic size bound from the arrays (``"n"``), or an
#: integer expression over such names (``"n + 2"``, ``"(n - 1) // 2 + 1"``).
Dim = Union[int, str]


def dim_value(dim, sizes):
    """The value of dimension ``dim`` given the symbolic ``sizes`` (a name → int mapping).

    Expressions use ``+ - * // %``, ``min``/``max``, unary minus, parentheses, integer literals and names, and
    conditionals ``a if c else b`` over comparisons joined by ``and``/``or``/``not`` (a ceil-mode pool's
    output over a symbolic length), and float arithmetic as TVM computes it: ``np.float32(x)`` (a cast,
    likewise float16/float64), float literals, ``+ - * /`` on those numpy scalars and ``int(x)`` (a cast
    to an integer, toward zero: a resize by a float scale, ``int(np.float32(2.0) * np.float32(h))``);
    anything else is refused (they come from the kernel's signature, but are never handed to ``eval``).
    Raises KeyError naming a size that ``sizes`` lacks.  Self-contained: dumped stage files carry a
    copy of its source.
    """
    import ast as _ast

    import numpy as _np

    if not isinstance(dim, str):
        return int(dim)
    if dim.isidentifier():
        return int(sizes[dim])
    ops = {_ast.Add: lambda a, b: a + b, _ast.Sub: lambda a, b: a - b, _ast.Mult: lambda a, b: a * b,
           _ast.FloorDiv: lambda a, b: a // b, _ast.Mod: lambda a, b: a % b}
    float_casts = ("float16", "float32", "float64")
    compares = {_ast.Eq: lambda a, b: a == b, _ast.NotEq: lambda a, b: a != b, _ast.Lt: lambda a, b: a < b,
                _ast.LtE: lambda a, b: a <= b, _ast.Gt: lambda a, b: a > b, _ast.GtE: lambda a, b: a >= b}

    def value(node):
        if isinstance(node, _ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, _ast.BinOp) and isinstance(node.op, _ast.Div):  # of floats only
            left, right = value(node.left), value(node.right)
            if isinstance(left, (float, _np.floating)) or isinstance(right, (float, _np.floating)):
                return left / right
        if isinstance(node, _ast.UnaryOp) and isinstance(node.op, (_ast.USub, _ast.UAdd)):
            return -value(node.operand) if isinstance(node.op, _ast.USub) else value(node.operand)
        if isinstance(node, _ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, _ast.Name):
            return int(sizes[node.id])
        if (isinstance(node, _ast.Call) and isinstance(node.func, _ast.Attribute) and len(node.args) == 1
                and isinstance(node.func.value, _ast.Name) and node.func.value.id == "np"
                and node.func.attr in float_casts and not node.keywords):
            return getattr(_np, node.func.attr)(value(node.args[0]))
        if (isinstance(node, _ast.Call) and isinstance(node.func, _ast.Name) and node.func.id == "int"
                and len(node.args) == 1 and not node.keywords):
            return int(value(node.args[0]))
        if (isinstance(node, _ast.Call) and isinstance(node.func, _ast.Name) and node.func.id in ("min", "max")
                and len(node.args) == 2 and not node.keywords):
            return (min if node.func.id == "min" else max)(value(node.args[0]), value(node.args[1]))
        if isinstance(node, _ast.IfExp):
            return value(node.body) if condition(node.test) else value(node.orelse)
        raise ValueError(f"dimension {dim!r}: only + - * // %, min, max, conditionals of integers and sizes, "
                         f"and float casts (np.float32(x), int(x)) are allowed")

    def condition(node):
        if (isinstance(node, _ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in compares):
            return compares[type(node.ops[0])](value(node.left), value(node.comparators[0]))
        if isinstance(node, _ast.BoolOp) and isinstance(node.op, (_ast.And, _ast.Or)):
            parts = [condition(v) for v in node.values]
            return all(parts) if isinstance(node.op, _ast.And) else any(parts)
        if isinstance(node, _ast.UnaryOp) and isinstance(node.op, _ast.Not):
            return not condition(node.operand)
        raise ValueError(f"dimension {dim!r}: a condition compares integers and sizes")

    return value(_ast.parse(dim, mode="eval").body)


def dim_symbols(dim: Dim) -> list[str]:
    """The symbolic sizes a dimension uses, in order of appearance (``"n + m"`` → ``["n", "m"]``)."""
    if not isinstance(dim, str):
        return []
    if dim.isidentifier():
        return [dim]
    import ast as _ast

    tree = _ast.parse(dim, mode="eval")
    called = {id(f) for n in _ast.walk(tree) if isinstance(n, _ast.Call)  # min, max, int, np.float32
              for f in _ast.walk(n.func)}
    names = [n.id for n in sorted((n for n in _ast.walk(tree) if isinstance(n, _ast.Name) and id(n) not in called),
                                   key=lambda n: n.col_offset)]
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
    strides : tuple of Dim or None
        A buffer declared with strides that are not row-major (in elements; constants or
        expressions over sizes and scalar parameters); None otherwise.
    elem_offset : Dim
        A buffer declared with an ``elem_offset`` (a constant or an expression over sizes and scalar
        parameters): its element 0 lies that many elements into its storage.  Such a buffer is a strided view (``as_strided``) of storage that holds
        ``elem_offset`` plus the strides' span; the kernel receives that view.
    index_extent : Dim or None
        An integer input whose elements index a dimension of this extent as they are (an
        embedding's token ids; a symbolic size such as ``batch`` for the rows a sampler picks):
        random inputs for it lie in [0, index_extent).
    """

    name: str
    dtype: str
    shape: tuple[Dim, ...] | None
    is_output: bool = False
    strides: tuple[Dim, ...] | None = None
    elem_offset: Dim = 0
    index_extent: Dim | None = None

    @property
    def is_strided(self) -> bool:
        """Whether the buffer is a strided view or starts at an offset into its storage."""
        return self.strides is not None or self.elem_offset != 0

    @property
    def is_buffer(self) -> bool:
        return self.shape is not None

    def describe(self) -> str:
        if not self.is_buffer:
            return f"{self.name}: {self.dtype}"
        dims = ", ".join(str(d) for d in self.shape)
        layout = ""
        if self.strides is not None:
            layout += ", strides=(" + ", ".join(str(st) for st in self.strides) + ("," if len(self.strides) == 1 else "") + ")"
        if self.elem_offset:
            layout += f", elem_offset={self.elem_offset}"
        return f"{self.name}: {self.dtype}[{dims}{layout}]"

    def layout_strides(self, shape: Sequence[int], known: dict | None = None) -> tuple[int, ...]:
        """The strides (in elements) of a buffer of this parameter with concrete ``shape`` (``known``:
        the sizes and scalar parameters symbolic strides use)."""
        if self.strides is not None:
            return tuple(dim_value(s, known or {}) for s in self.strides)
        out, step = [], 1
        for dim in reversed(list(shape)):
            out.append(step)
            step *= int(dim)
        return tuple(reversed(out))

    def layout_offset(self, known: dict | None = None) -> int:
        """The ``elem_offset`` of this parameter's buffer (``known`` as for :meth:`layout_strides`)."""
        return dim_value(self.elem_offset, known or {})


def strided_extent(shape: Sequence[int], strides: Sequence[int]) -> int:
    """Elements a strided buffer addresses from its element 0: the strides' span, at least each
    axis's extent times its stride (TVM flattens such a buffer to that size)."""
    if any(int(d) == 0 for d in shape):
        return 0
    span = 1 + sum((int(d) - 1) * int(s) for d, s in zip(shape, strides))
    return max([span] + [int(d) * int(s) for d, s in zip(shape, strides)])


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
    #: Strided or offset parameter buffers (by argument index): their strides and elem_offset.
    layouts: dict = None

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
        if spec.is_strided:
            values.append(arg)  # its view is made once the scalar parameters are bound
        elif arg.flags.c_contiguous and not (copy_inputs and not spec.is_output):
            values.append(arg)
        else:
            work = np.ascontiguousarray(arg).copy() if copy_inputs else np.ascontiguousarray(arg)
            values.append(work)
            if spec.is_output and work is not arg:
                write_back.append((arg, work))
    _bind_scalar_sizes(params, values, sizes)
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
    layouts = {}
    for k, (spec, arg) in enumerate(zip(params, args)):
        if spec.is_buffer and spec.is_strided:
            known = {**scalars, **sizes}
            try:
                layout = (spec.layout_strides(arg.shape, known), spec.layout_offset(known))
            except KeyError as exc:
                raise ArgumentShapeError(f"parameter {spec.name}: its layout uses {exc}, which no argument gives") from None
            if layout[1] < 0 or any(st < 0 for st in layout[0]):
                raise ArgumentShapeError(f"parameter {spec.name}: strides {layout[0]} and elem_offset {layout[1]} "
                                         f"must not be negative")
            layouts[k] = layout
            values[k] = strided_argument(spec, arg, copy_inputs, layout)
            if spec.is_output and values[k] is not arg:
                write_back.append((arg, values[k]))
    return BoundArguments(values, sizes, write_back, layouts)


def strided_argument(spec: ParamSpec, arg: np.ndarray, copy: bool, layout) -> np.ndarray:
    """The view a strided or offset parameter buffer runs on: ``arg`` itself when it already is such
    a view (its strides are the buffer's and the ``elem_offset`` elements before it lie in the same
    contiguous allocation), else a view of fresh zeroed storage holding a copy of ``arg``."""
    strides, offset = layout
    item = arg.itemsize
    need = offset + strided_extent(arg.shape, strides)
    if not copy and all(d <= 1 or s * item == got for d, s, got in zip(arg.shape, strides, arg.strides)):
        root = arg
        while True:  # the allocation it views (through as_strided's wrapper too)
            base = root.base
            base = getattr(base, "base", None) if base is not None and not isinstance(base, np.ndarray) else base
            if not isinstance(base, np.ndarray):
                break
            root = base
        start = (arg.__array_interface__["data"][0] - root.__array_interface__["data"][0]
                 - offset * item)
        if root.flags.c_contiguous and start >= 0 and start % item == 0 and start + need * item <= root.nbytes:
            return arg
    check_allocation(need * item, f"the storage of parameter {spec.name}")
    storage = np.zeros(need, arg.dtype)
    view = np.ndarray(arg.shape, arg.dtype, storage, offset * item, tuple(s * item for s in strides))
    view[...] = arg
    return view


def _bind_scalar_sizes(params: Sequence[ParamSpec], values: list, sizes: dict[str, int]) -> None:
    """Integer scalar parameters that are buffer sizes (``X: (2, n * 4)``, ``n: int32``): their
    value binds the size, and must agree with the arrays' shapes (TVM asserts it too)."""
    symbols = {name for spec in params if spec.is_buffer for dim in spec.shape for name in dim_symbols(dim)}
    for spec, value in zip(params, values):
        if spec.is_buffer or spec.name not in symbols or not spec.dtype.startswith(("int", "uint")):
            continue
        if spec.name in sizes and sizes[spec.name] != int(value):
            raise ArgumentShapeError(f"parameter {spec.name}: is {int(value)} but the arrays' shapes give "
                                     f"{spec.name}={sizes[spec.name]}")
        sizes[spec.name] = int(value)


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


def size_names(params: Sequence[ParamSpec]) -> list[str]:
    """The names of the kernel's symbolic sizes, in order of appearance."""
    names: list[str] = []
    for spec in params:
        for dim in spec.shape or ():
            names += [n for n in dim_symbols(dim) if n not in names]
    return names


def check_size_names(params: Sequence[ParamSpec], sizes) -> None:
    """Refuse a size name the kernel does not have (a typo would otherwise be silently ignored).

    Raises
    ------
    ArgumentShapeError
        Naming the unknown size and listing the kernel's sizes, or a value that is not a
        non-negative integer.
    """
    known = size_names(params)
    for name, value in (sizes or {}).items():
        if name not in known:
            have = f"the kernel's sizes are {', '.join(known)}" if known else "the kernel has no symbolic sizes"
            raise ArgumentShapeError(f"unknown size {name!r}: {have}")
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ArgumentShapeError(f"size {name}: expected a non-negative integer, got {value!r}")


def check_scalar_names(params: Sequence[ParamSpec], scalars) -> None:
    """Refuse a scalar name that is not a scalar parameter of the kernel (naming the ones it has)."""
    known = [p.name for p in params if not p.is_buffer]
    for name in scalars or {}:
        if name not in known:
            have = (f"its scalar parameters are {', '.join(known)}" if known
                    else "the kernel has no scalar parameters")
            raise ArgumentTypeError(f"unknown scalar parameter {name!r}: {have}")


def _bits(dtype: str) -> int | None:
    match = re.match(r"^[a-z]+?(\d+)", dtype)
    return int(match.group(1)) if match else None


def check_native_transfer(params: Sequence[ParamSpec]) -> None:
    """Refuse parameters whose arrays cannot be handed to the natively compiled kernel.

    TVM stores sub-byte types (``int4``, ``uint4``, ``float4_*``) packed, two values a byte, while
    numpy (ml_dtypes) keeps one value a byte; TVM's copy then fails with a size mismatch.

    Raises
    ------
    ArgumentTypeError
        Naming the parameter and dtype, and what to do instead.
    """
    for spec in params:
        bits = _bits(spec.dtype)
        if spec.dtype != "bool" and bits is not None and bits < 8:
            raise ArgumentTypeError(
                f"parameter {spec.name}: {spec.dtype} arrays cannot be passed to the native kernel (TVM packs "
                f"two {bits}-bit values a byte, numpy keeps one a byte); emulate it instead, or compare "
                f"with a numpy reference: compare(..., reference=FUNC)")


def random_arguments(params: Sequence[ParamSpec], seed: int = 0, sizes: dict[str, int] | None = None,
                     scalars: dict | None = None) -> list:
    """Seeded random inputs for ``params``; outputs are zero-filled.

    Floats are uniform in [-1, 1) (bfloat16 and float8 too, through ml_dtypes); 8-bit and smaller
    integers cover their whole range (wrap-around shows); wider integers stay within [-100, 100]
    (or [0, 100] unsigned); bools are fair coins; integer arrays whose elements index another
    buffer (``index_extent``) lie in [0, extent).  Scalar parameters take their value from
    ``scalars``.

    Raises
    ------
    ArgumentShapeError
        For a size name the kernel does not have, or a missing symbolic size.
    ArgumentTypeError
        For a scalar parameter without a value, or a dtype random values cannot be made for.
    """
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ArgumentTypeError(f"seed: expected a non-negative integer, got {seed!r}")
    sizes = dict(sizes or {})
    scalars = dict(scalars or {})
    check_size_names(params, sizes)
    check_scalar_names(params, scalars)
    shapes = []
    for spec in params:
        if not spec.is_buffer:
            if spec.name not in scalars:
                raise ArgumentTypeError(
                    f"parameter {spec.name} is a scalar ({spec.dtype}): random inputs cannot choose its value; "
                    f"pass every argument explicitly, the arrays and a value for {spec.name}")
            scalars[spec.name] = _scalar_argument(spec, scalars[spec.name])
            shapes.append(None)
            continue
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
    total = sum(_nbytes(shape, numpy_dtype(spec.dtype)) for spec, shape in zip(params, shapes) if shape is not None)
    check_allocation(total, f"the arguments ({', '.join(p.name for p in params)})")
    try:
        values = seeded_values([(p.name, p.dtype, shape, p.is_output) for p, shape in zip(params, shapes)], seed,
                               {}, scalars)
    except ValueError as exc:  # a dtype random values cannot be made for
        raise ArgumentTypeError(str(exc)) from None
    return in_range_indices(params, values, seed, {**scalars, **sizes})


def in_range_indices(params: Sequence[ParamSpec], values: list, seed: int = 0, sizes: dict | None = None) -> list:
    """``values`` with the arrays of parameters that have an ``index_extent`` (token ids, gather
    indices) drawn again, seeded, in [0, index_extent): random integers there would only make the
    kernel read outside its buffers.  A symbolic extent takes its value from ``sizes`` (the
    symbolic sizes and scalar parameters the values were made for); without it, the array stays."""
    values = list(values)
    for k, (spec, value) in enumerate(zip(params, values)):
        if spec.index_extent is not None and not spec.is_output and isinstance(value, np.ndarray):
            try:
                extent = dim_value(spec.index_extent, sizes or {})
            except (KeyError, ValueError):
                continue
            rng = np.random.default_rng([seed, k])
            high = min(int(extent), int(np.iinfo(value.dtype).max) + 1)
            values[k] = rng.integers(0, max(high, 1), value.shape).astype(value.dtype)
    return values


def seeded_values(specs, seed, sizes, scalars=None):
    """Seeded arguments for ``(name, dtype, shape, is_output)`` tuples; outputs are zeros.

    Floats are uniform in [-1, 1); 8-bit and smaller integers cover their whole range; wider
    integers stay in [-100, 100]; bools are fair coins; symbolic dimensions come from ``sizes``,
    scalars from ``scalars``.  bfloat16, float8 and int4 use ml_dtypes (installed with TVM).
    Self-contained (numpy and :func:`dim_value`): dumped stage files carry a copy of both sources.
    Raises ValueError naming the parameter for a dtype random values cannot be made for.
    """
    import re

    import numpy

    def value_kind(name, dtype, np_dtype):
        """("bool"|"float"|"int", integer range or None) of one lane of ``np_dtype``."""
        if np_dtype == numpy.bool_:
            return "bool", None
        if numpy.issubdtype(np_dtype, numpy.floating):
            return "float", None
        if numpy.issubdtype(np_dtype, numpy.integer):
            return "int", numpy.iinfo(np_dtype)
        try:
            import ml_dtypes
        except ImportError:
            raise ValueError(f"parameter {name}: random {dtype} values need the ml_dtypes package") from None
        try:
            ml_dtypes.finfo(np_dtype)
            return "float", None
        except (TypeError, ValueError):
            pass
        try:
            return "int", ml_dtypes.iinfo(np_dtype)
        except (TypeError, ValueError):
            pass
        raise ValueError(f"parameter {name}: cannot make random values of dtype {dtype}; pass the arrays")

    def lane_dtype(name, dtype):
        base = "bool" if dtype.startswith("bool") else re.sub(r"x\d+$", "", dtype)
        try:
            return numpy.dtype(base)
        except TypeError:
            try:
                import ml_dtypes
                return numpy.dtype(getattr(ml_dtypes, base))
            except (ImportError, AttributeError, TypeError):
                raise ValueError(f"parameter {name}: dtype {dtype} has no numpy equivalent; pass the arrays") \
                    from None

    rng = numpy.random.default_rng(seed)
    values = []
    for name, dtype, shape, is_output in specs:
        if shape is None:
            values.append((scalars or {})[name])
            continue
        shape = [dim_value(d, sizes) for d in shape]
        np_dtype = lane_dtype(name, dtype)
        kind, info = value_kind(name, dtype, np_dtype)
        if is_output:
            values.append(numpy.zeros(shape, np_dtype))
        elif kind == "bool":
            values.append(rng.integers(0, 2, shape).astype(numpy.bool_))
        elif kind == "float":
            values.append(rng.uniform(-1.0, 1.0, shape).astype(np_dtype))
        else:
            lo, hi = (info.min, info.max) if info.bits <= 8 else (max(info.min, -100), min(info.max, 100))
            wide = np_dtype if numpy.issubdtype(np_dtype, numpy.integer) else numpy.int16
            values.append(rng.integers(int(lo), int(hi), shape, endpoint=True, dtype=wide).astype(np_dtype))
    return values
