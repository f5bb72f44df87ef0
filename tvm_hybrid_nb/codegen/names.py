"""Small data of code generation: values, buffer records, lane axes, the namer and Python-ast builders."""
from __future__ import annotations

import ast
import builtins
import keyword
import math
import re
import unicodedata
from dataclasses import dataclass, field

from .. import runtime
from ..errors import UnsupportedConstructError
from ..signature import ParamSpec

_FOR_KIND_ITERATORS = {0: "range", 1: "parallel", 2: "vectorized", 3: "unrolled", 4: "thread_binding"}
_INT64_MAX = (1 << 63) - 1


_TYPE_KEYS: dict[type, str] = {}


def _type_key(node) -> str:
    cls = type(node)
    try:
        return _TYPE_KEYS[cls]
    except KeyError:
        info = getattr(cls, "__tvm_ffi_type_info__", None)
        key = _TYPE_KEYS[cls] = info.type_key if info is not None else cls.__name__
        return key


def _packed_function(call) -> str | None:
    """The name of the runtime function a ``tvm_call_packed`` calls, else None."""
    if getattr(call.op, "name", "") != "tirx.tvm_call_packed" or not call.args:
        return None
    return str(call.args[0].value) if _type_key(call.args[0]) == "ir.StringImm" else None


def _buffer_of(data):
    """The buffer of ``buffer_data(B)`` (``B.data``) or of ``B`` itself (a buffer is a variable,
    which ``StorageRewrite`` passes as it is), or None."""
    if _type_key(data) == "ir.Call" and getattr(data.op, "name", "") == "tirx.buffer_data":
        return data.args[0]
    if _type_key(data) == "ir.Var" and getattr(getattr(data, "ty", None), "shape", None) is not None:
        return data
    return None


def _key(obj) -> int:
    return obj.__chandle__()


#: dtype text by the handle of its ``PrimType``, which TVM interns (one object a dtype), held here so
#: that no other object can take its address: ``str(ty.dtype)`` costs ~1 us, the generator asks often.
_PRIM_TYPE_DTYPES: dict[int, tuple[object, str]] = {}


def _dtype(expr) -> str:
    ty = expr.ty
    known = _PRIM_TYPE_DTYPES.get(ty.__chandle__()) if ty is not None else None
    if known is not None:
        return known[1]
    dtype = getattr(ty, "dtype", None)
    if dtype is None:
        return "handle"  # PointerType: a data pointer
    text = str(dtype)
    if type(ty).__name__ == "PrimType":
        _PRIM_TYPE_DTYPES[ty.__chandle__()] = (ty, text)
    return text


def _scalar_dtype(dtype: str) -> str:
    return dtype.split("x")[0] if "x" in dtype else dtype


def _lanes(dtype: str) -> int:
    if "x" not in dtype:
        return 1
    lanes = dtype.split("x", 1)[1]
    if not lanes.isdigit():  # float32xvscalex4: as many lanes as the machine's vectors hold
        raise UnsupportedConstructError("scalable vector", f"dtype {dtype} (its lane count is the machine's)")
    return int(lanes)


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def _float_bits(dtype: str) -> int:
    """The bits of one lane of ``dtype``: the digits after its kind (``float8_e4m3fn`` is 8 bits, not 843)."""
    digits = re.search(r"\d+", _scalar_dtype(dtype))
    return int(digits.group()) if digits else 0


def _is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint"))


def _int_range(dtype: str) -> tuple[int, int]:
    base = _scalar_dtype(dtype)
    bits = int(base[4:] if base.startswith("uint") else base[3:])
    if base.startswith("uint"):
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


@dataclass
class Value:
    """A generated expression with what the generator knows about its Python value."""

    node: ast.expr
    kind: str  # "np" | "py" | "weak"
    dtype: str
    varying: bool = False  # fast mode: differs between the lanes of vectorised loops

    @property
    def lanes(self) -> int:
        return _lanes(self.dtype)


def _varying(*values: "Value") -> bool:
    return any(v.varying for v in values)


class _CannotVectorize(Exception):
    """Fast mode met a construct it cannot run for all lanes at once; the loop runs serially.

    ``loop``, when known, is the variable of the enclosing lanes loop that causes it (an inner loop
    whose bounds use ``i``): that loop runs serially, and the lanes loops inside it keep their lanes."""

    def __init__(self, reason: str = "", loop=None, copies: bool = False):
        super().__init__(reason)
        self.loop = loop
        #: The lanes' private copies of an allocation would take too much memory (one shared copy may do).
        self.copies = copies


@dataclass
class GeneratedKernel:
    """The result of code generation for one stage."""

    source: str
    function_name: str
    params: list[ParamSpec]
    helpers: list[str] = field(default_factory=list)
    #: Number of outermost serial loops that report progress (executed variant only).
    progress_loops: int = 0
    #: How each loop runs, and why (a ``codegen.plan.EmulationPlan``).
    plan: object = None


@dataclass
class _BufferInfo:
    name: str
    shape: list
    dtype: str
    #: Lane indices prepended to every access of a buffer private to each lane (an allocation inside
    #: a loop that runs as array lanes).
    prefix: list = field(default_factory=list)
    #: Per-thread memory (``local`` scope): indexed by the thread lanes first.
    per_thread: bool = False
    #: Sanitizer (``check=True``): name of the array that marks which elements were written.
    shadow: str | None = None
    #: The loop variables (keys) of the ``prefix`` lane indices, in order (for strided views).
    prefix_axes: list = field(default_factory=list)
    #: A warp's memory (tensor-core fragments, ``wmma.*``): per-thread memory whose ``threadIdx.x``
    #: index is 0, every thread of the warp (``threadIdx.x`` of extent 32) sharing the one copy.
    per_warp: bool = False
    #: The memory scope (``global``, ``shared``, ``local``...): the sanitizer keeps race records of
    #: memory that ``s_tir.ThreadSync`` synchronises (shared) for one statement before that pass,
    #: of other memory until the threads end.
    scope: str = "global"
    #: Loop variables (keys) of lanes that share this one copy where each iteration of the compiled
    #: loop has its own (the plan proved it serves them, ``EmulationPlan.shared_lanes``): memory no
    #: two iterations share, whose accesses by those lanes are no race records.
    own_copy_axes: list = field(default_factory=list)
    #: A slice of another buffer (``match_buffer``): its elements are not in row-major order in memory.
    sliced: bool = False


def thread_key(tag: str) -> str:
    """A thread tag as the per-thread copies are laid out: every ``vthread*`` tag is one axis."""
    return "vthread" if tag.startswith("vthread") else tag


@dataclass
class _Axis:
    """An array axis standing for the iterations of a loop (fast mode) or the threads of a block."""

    name: str
    lo: ast.expr
    extent: ast.expr
    is_thread: bool
    axis: int = 0
    tag: str = ""
    race: bool = False  # lanes that run concurrently (threads; parallel iterations when checking)
    var: object = None  # the TIR loop or thread variable
    min_expr: object = None


def _name(ident: str) -> ast.Name:
    return ast.Name(id=ident, ctx=ast.Load())


def _store_name(ident: str) -> ast.Name:
    return ast.Name(id=ident, ctx=ast.Store())


def _const(value) -> ast.expr:
    if isinstance(value, float) and not math.isfinite(value):
        if math.isnan(value):
            return ast.Attribute(_name("np"), "nan", ast.Load())
        inf = ast.Attribute(_name("np"), "inf", ast.Load())
        return inf if value > 0 else ast.UnaryOp(ast.USub(), inf)
    return ast.Constant(value)


#: Scalar types that numpy itself lacks: ml_dtypes registers them with numpy (arrays of them are what the
#: kernel receives), so a script names them ``np.dtype("bfloat16").type`` and needs no other import.
_EXTENSION_TYPES = ("bfloat16", "float8", "float6", "float4", "int4", "uint4", "int2", "uint2")


def _np(attr: str) -> ast.expr:
    if attr.startswith(_EXTENSION_TYPES):
        dtype = ast.Call(ast.Attribute(_name("np"), "dtype", ast.Load()), [ast.Constant(attr)], [])
        return ast.Attribute(dtype, "type", ast.Load())
    return ast.Attribute(_name("np"), attr, ast.Load())


def ascii_identifier(text: str) -> str:
    """``text`` as an ASCII identifier body: NFKC-normalised as Python normalises identifiers
    (``ﬁ`` is ``fi``, ``Ⅻ`` is ``XII``, ``x²`` is ``x2``), every other character an underscore.
    ASCII names are their own NFKC form, so distinct names stay distinct in Python."""
    text = unicodedata.normalize("NFKC", str(text))
    return "".join(c if (c.isascii() and (c.isalnum() or c == "_")) else "_" for c in text)


class _Namer:
    """Distinct objects get distinct names, chosen like TVMScript's printer (``A``, ``A_1``)."""

    def __init__(self, reserved: set[str]):
        self._used = set(reserved)
        self._names: dict[int, str] = {}
        # The named objects themselves: an object's key is its address, which a freed object (a
        # variable the generator made for one loop) would hand to the next, with its name.
        self._named: list = []
        # The last suffix tried per hint: a stage that names thousands of objects alike (an unrolled
        # kernel's ``threads``) would otherwise try every taken suffix again on each name.
        self._last_suffix: dict[str, int] = {}

    def define(self, obj, hint: str) -> str:
        hint = ascii_identifier(hint or "v") or "v"
        if hint[0].isdigit():
            hint = "v_" + hint
        if hint.startswith("__"):  # dunders are the script's own hooks (``__progress__``)
            hint = "v" + hint
        name = self._fresh(hint)
        self._names[_key(obj)] = name
        self._named.append(obj)
        return name

    def _fresh(self, hint: str) -> str:
        name, n = hint, 0
        if name in self._used or keyword.iskeyword(name):
            n = self._last_suffix.get(hint, 0)
            while True:
                n += 1
                name = f"{hint}_{n}"
                if name not in self._used:
                    break
            self._last_suffix[hint] = n
        self._used.add(name)
        return name

    def lookup(self, obj) -> str | None:
        return self._names.get(_key(obj))

    def define_name(self, hint: str) -> str:
        """A fresh name that belongs to no TIR object (sanitizer bookkeeping)."""
        return self._fresh(hint)


@dataclass
class _SerialFrame:
    """Fast mode: a serial loop whose body is being generated, and the lane views hoisted out of it."""

    var: object                 # the TIR loop variable
    min_expr: object            # its TIR start
    lo: ast.expr                # its start and extent in Python
    extent: ast.expr
    name: str                   # its Python name
    outside: set                # Python names defined before the loop (usable in front of it)
    guard_depth: int
    hoisted: list = field(default_factory=list)   # statements to put in front of the loop
    views: dict = field(default_factory=dict)     # ast.dump of a hoisted view -> its name
    fixed: dict = field(default_factory=dict)     # hoisted views the loop does not move -> their buffer's name


class _BinaryLike:
    """Adapts a bitwise intrinsic call to the binary-node interface (``a``, ``b``, ``ty``)."""

    def __init__(self, a, b, call):
        self.a, self.b, self.ty = a, b, call.ty
        self._call = call

    def __getattr__(self, item):
        return getattr(self._call, item)


class _AllocLike:
    def __init__(self, buffer, per_block: bool = False):
        self.buffer = buffer
        #: A copy per block of block-scoped memory allocated outside the grid loops: copied only
        #: along the block lane axes whose blocks would share it.
        self.per_block = per_block


def _is_zero(expr) -> bool:
    return expr is None or (_type_key(expr) == "ir.IntImm" and int(expr.value) == 0)


def _is_true(expr) -> bool:
    return expr is None or (_type_key(expr) == "ir.IntImm" and bool(expr.value))


def _python_name(name: str) -> str:
    """A module function's name as a Python function name that shadows no builtin, keyword or helper."""
    clean = ascii_identifier(name) or "kernel"
    if (clean[0].isdigit() or keyword.iskeyword(clean) or hasattr(builtins, clean) or clean.startswith("_")
            or clean in vars(runtime) or clean == "race_log"):
        clean = "k_" + clean
    return clean


def buffer_labels(func) -> dict[int, str]:
    """The names of ``func``'s allocated and declared buffers (by key) in definition order, an unnamed
    one's (SplitHostDevice's local pointers) ``buffer``, ``buffer_1``... as the generated script names them."""
    import tvm_ffi

    namer = _Namer(set())
    for param in func.params:
        namer.define(param, str(param.name))
    labels: dict[int, str] = {}

    def visit(node) -> None:
        if _type_key(node) in ("tirx.AllocBuffer", "tirx.DeclBuffer") and _key(node.buffer) not in labels:
            labels[_key(node.buffer)] = namer.define(node.buffer, str(node.buffer.name) or "buffer")

    tvm_ffi.structural_walk(func.body, visit, order="pre")
    return labels
