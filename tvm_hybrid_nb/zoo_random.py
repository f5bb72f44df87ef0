"""Random models for the zoo: chains of ``tvm.relax.frontend.nn`` operators (``zoo --random N``).

The zoo's own models cover each operator kind; real models combine them, and ``FuseOps``/``FuseTIR``
fuse the combinations into kernels no single-operator model makes (a softmax over a middle axis fused
with a float16 round trip and a transpose, a reduction broadcast back into an activation).  Each model
here is drawn from a seed: an input of shape ``(batch, length, width)`` (a third of them over a
symbolic length ``n``), then 3 to 6 steps, each one of :data:`STEPS`, then a tail (:data:`TAILS`).
A model is plain data first (:class:`ChainPlan`, so that a failing seed can be printed and replayed),
then the ``nn.Module`` that runs it (:func:`chain_module`).

The ``decoder`` family (``zoo --random N --family decoder``) draws Llama- and GPT-style decoder layers
instead (:class:`DecoderPlan`, :func:`decoder_module`): heads and grouped key/value heads, head size,
rotary embedding or none, RMS or layer norm, a gated or plain MLP with SiLU, GELU or ReLU, biases,
a causal mask, a past key/value cache of symbolic length ``m``, a static or symbolic length ``n``:
the shapes dlight's rules pick different schedules for (GEMV for one token, Matmul otherwise).
The ``image`` family draws small conv nets (:class:`ImagePlan`, :func:`image_module`): 2 to 5 steps
among convolutions (1x1 or 3x3, strides 1 and 2, biases), depthwise convolutions, max pooling (ceil or
floor mode), average pooling (with or without the padding counted), group norm, activations, residual
adds, nearest or bilinear upsampling, a softmax over channels, centring over the image, concatenation
of channels; a quarter over a symbolic image size ``h x w``.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

#: The steps a chain draws from (unary activations twice as often).
STEPS = ("unary", "unary", "param", "reduce_bcast", "softmax", "norm", "linear", "transpose", "cumsum",
         "half_round_trip", "scale", "concat", "split_gate", "leaky", "soft_abs")
#: How a chain ends: as it is, a sum over the length, the chain and its row max, or self-attention
#: (``softmax(x @ x^T * 0.3) @ x``).
TAILS = ("none", "none", "sum_length", "and_row_max", "self_attention")
UNARY = ("tanh", "sigmoid", "silu", "gelu", "relu", "negative")
#: The dtypes TVM legalizes ``layer_norm`` and ``group_norm`` for (its topi checks float32 and float16):
#: a bfloat16 model draws an RMS norm for a layer norm, and centres the image for a group norm.
NORM_DTYPES = ("float32", "float16")


@dataclass
class ChainPlan:
    """One random model as data: ``shape`` of its input, ``steps`` as ``(kind, choice)`` pairs (the
    choice: an operator name, an axis or a width), ``tail`` (one of :data:`TAILS`) and ``dtype``."""

    name: str
    shape: tuple
    steps: list = field(default_factory=list)
    tail: str = "none"
    dtype: str = "float32"

    def widths(self) -> list:
        """The width (last axis) of the value each step takes."""
        widths = [self.shape[2]]
        for kind, choice in self.steps[:-1]:
            widths.append(_next_width(widths[-1], kind, choice))
        return widths

    def describe(self) -> str:
        steps = ", ".join(f"{kind}({choice})" if choice is not None else kind for kind, choice in self.steps)
        return f"{self.name}: {self.dtype}{list(self.shape)} -> {steps} -> {self.tail}"


def chain_plan(seed: int, dtype: str = "float32") -> ChainPlan:
    """The chain that ``seed`` draws (the same for every run and platform: Python's ``random``)."""
    rng = random.Random(seed)
    length = "n" if rng.random() < 1 / 3 else rng.choice([4, 5, 7])
    width = rng.choice([6, 8, 12, 16])
    plan = ChainPlan(f"r{seed}", (rng.choice([2, 3]), length, width), dtype=dtype)
    for _ in range(rng.randint(3, 6)):
        kind = rng.choice(STEPS)
        choice = None
        if kind == "unary":
            choice = rng.choice(UNARY)
        elif kind == "param":
            choice = rng.choice(["add", "gate"])
        elif kind == "reduce_bcast":
            choice = f"{rng.choice(['sum', 'max', 'min'])}:{rng.choice([0, 1, 2])}:{rng.choice(['sub', 'tanh'])}"
        elif kind == "softmax":
            choice = rng.choice([0, 1, 2])
        elif kind == "norm":
            choice = rng.choice(["layer", "rms"])
            choice = choice if dtype in NORM_DTYPES else "rms"
        elif kind == "linear":
            choice = f"{rng.choice([4, 8, 10, 16])}:{rng.choice(['bias', 'nobias'])}"
        elif kind == "cumsum":
            choice = rng.choice([1, 2])
        elif kind == "scale":
            choice = f"{rng.choice([0.5, 2.0, -1.5])}:{rng.choice([0.0, 1.0])}"
        elif kind == "split_gate" and width % 2:
            kind, choice = "unary", rng.choice(UNARY)
        width = _next_width(width, kind, choice)
        plan.steps.append((kind, choice))
    plan.tail = rng.choice(TAILS)
    return plan


def _next_width(width: int, kind: str, choice) -> int:
    """The width after step ``(kind, choice)`` of a value of ``width``."""
    if kind == "linear":
        return int(choice.split(":")[0])
    return width * 2 if kind == "concat" else width // 2 if kind == "split_gate" else width


def chain_module(plan: ChainPlan):
    """The ``nn.Module`` that runs ``plan`` (its parameters made in step order)."""
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import op

    dtype = plan.dtype
    other = "float16" if dtype == "float32" else "float32"

    class Chain(nn.Module):
        def __init__(self):
            self.layers = nn.ModuleList([])
            for (kind, choice), width in zip(plan.steps, plan.widths()):
                if kind in ("param", "norm"):  # a parameter step's norm is a layer norm where TVM has one
                    layer = (kind == "param" or choice == "layer") and dtype in NORM_DTYPES
                    self.layers.append(nn.LayerNorm(width, dtype=dtype) if layer
                                       else nn.RMSNorm(width, axes=-1, dtype=dtype))
                elif kind == "linear":
                    out, bias = choice.split(":")
                    self.layers.append(nn.Linear(width, int(out), bias=bias == "bias", dtype=dtype))

        def forward(self, x):
            layers = iter(self.layers)
            transposed = False
            for kind, choice in plan.steps:
                if kind in ("norm", "linear") and transposed:  # their weights belong to the width axis
                    x, transposed = op.permute_dims(x, [1, 0, 2]), False
                if kind == "unary":
                    x = getattr(op, choice)(x)
                elif kind == "param":
                    layer = next(layers)
                    x = layer(x) if choice == "add" else x * op.sigmoid(layer(x))
                elif kind == "reduce_bcast":
                    reduce, axis, combine = choice.split(":")
                    r = getattr(op, reduce)(x, axis=int(axis), keepdims=True)
                    x = x - r if combine == "sub" else x * op.tanh(r)
                elif kind == "softmax":
                    x = op.softmax(x, axis=choice)
                elif kind in ("norm", "linear"):
                    x = next(layers)(x)
                elif kind == "transpose":
                    x, transposed = op.permute_dims(x, [1, 0, 2]), not transposed
                elif kind == "cumsum":
                    x = op.cumsum(x, axis=choice)
                elif kind == "half_round_trip":
                    x = op.astype(op.tanh(op.astype(x, other)), dtype)
                elif kind == "scale":
                    factor, shift = (float(v) for v in choice.split(":"))
                    x = x * factor + shift
                elif kind == "concat":
                    x = op.concat([x, op.tanh(x)], dim=2)
                elif kind == "split_gate":
                    a, b = op.split(x, 2, axis=2)
                    x = a * op.sigmoid(b)
                elif kind == "leaky":
                    x = op.maximum(x, x * 0.1)
                elif kind == "soft_abs":
                    x = op.sqrt(op.square(x) + 1.0) - 1.0
            if transposed:
                x = op.permute_dims(x, [1, 0, 2])
            if plan.tail == "sum_length":
                return op.sum(x, axis=1)
            if plan.tail == "and_row_max":
                return x, op.max(x, axis=2)
            if plan.tail == "self_attention":
                return op.matmul(op.softmax(op.matmul(x, op.permute_dims(x, [0, 2, 1])) * 0.3, axis=-1), x)
            return x

    return Chain()


@dataclass
class DecoderPlan:
    """One random decoder layer as data (see the module docstring); ``length``: tokens, an int or
    ``"n"``; ``ffn``: the MLP's hidden width."""

    name: str
    dtype: str
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    length: object
    rope: bool
    norm: str
    act: str
    gated: bool
    bias: bool
    past: bool
    causal: bool

    @property
    def width(self) -> int:
        return self.heads * self.head_dim

    def describe(self) -> str:
        parts = [f"{self.heads} heads ({self.kv_heads} kv) of {self.head_dim}", f"ffn {self.ffn}",
                 f"{self.norm} norm", f"{'gated ' if self.gated else ''}{self.act}"]
        parts += [flag for flag, on in (("rope", self.rope), ("bias", self.bias), ("past cache", self.past),
                                        ("causal", self.causal)) if on]
        return f"{self.name}: {self.dtype}[1, {self.length}, {self.width}] decoder, " + ", ".join(parts)


def decoder_plan(seed: int, dtype: str = "float32") -> DecoderPlan:
    """The decoder layer that ``seed`` draws."""
    rng = random.Random(seed)
    heads = rng.choice([1, 2, 4])
    kv_heads = rng.choice([h for h in (1, 2, 4) if h <= heads and heads % h == 0])
    head_dim = rng.choice([8, 16, 32])
    width = heads * head_dim
    plan = DecoderPlan(
        f"d{seed}", dtype, heads, kv_heads, head_dim, ffn=rng.choice([2 * width, 3 * width, 40]),
        length="n" if rng.random() < 0.6 else rng.choice([1, 3, 6]), rope=rng.random() < 0.6,
        norm=rng.choice(["rms", "layer"]), act=rng.choice(["silu", "gelu", "relu"]), gated=rng.random() < 0.6,
        bias=rng.random() < 0.4, past=rng.random() < 0.5, causal=rng.random() < 0.7)
    if dtype not in NORM_DTYPES:
        plan.norm = "rms"
    return plan


def decoder_module(plan: DecoderPlan):
    """The ``nn.Module`` of ``plan``: ``forward(x, cos, sin, past_k, past_v)`` (the inputs a plan
    without rotary embedding or cache leaves unused)."""
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import op

    dt, hd, nh, kvh, width = plan.dtype, plan.head_dim, plan.heads, plan.kv_heads, plan.width

    def norm():
        return nn.RMSNorm(width, -1, dtype=dt, bias=False) if plan.norm == "rms" else nn.LayerNorm(width, dtype=dt)

    def rotate(t, cos, sin):
        t1, t2 = op.split(t, 2, axis=-1)
        return t * cos + op.concat([op.negative(t2), t1], dim=-1) * sin

    class Decoder(nn.Module):
        def __init__(self):
            self.attn_norm, self.mlp_norm = norm(), norm()
            self.q = nn.Linear(width, nh * hd, bias=plan.bias, dtype=dt)
            self.kv = nn.Linear(width, 2 * kvh * hd, bias=plan.bias, dtype=dt)
            self.o = nn.Linear(nh * hd, width, bias=plan.bias, dtype=dt)
            self.up = nn.Linear(width, 2 * plan.ffn if plan.gated else plan.ffn, bias=plan.bias, dtype=dt)
            self.down = nn.Linear(plan.ffn, width, bias=plan.bias, dtype=dt)

        def forward(self, x, cos, sin, past_k, past_v):
            b, n, _ = x.shape
            h = self.attn_norm(x)
            q = op.reshape(self.q(h), (b, n, nh, hd))
            k, v = op.split(op.reshape(self.kv(h), (b, n, 2 * kvh, hd)), 2, axis=2)
            if plan.rope:
                q, k = rotate(q, cos, sin), rotate(k, cos, sin)
            if plan.past:
                k, v = op.concat([past_k, k], dim=1), op.concat([past_v, v], dim=1)
            if kvh != nh:
                k, v = op.repeat(k, nh // kvh, axis=2), op.repeat(v, nh // kvh, axis=2)
            q, k, v = (op.permute_dims(t, [0, 2, 1, 3]) for t in (q, k, v))
            scores = op.matmul(q, op.permute_dims(k, [0, 1, 3, 2])) * (1.0 / hd ** 0.5)
            if plan.causal:  # a token sees the cache and the tokens up to itself
                total = k.shape[2]
                scores = scores + op.triu(op.full((n, total), -1e4, dt), total - n + 1 if plan.past else 1)
            probs = op.astype(op.softmax(op.astype(scores, "float32"), axis=-1), dt)
            x = x + self.o(op.reshape(op.permute_dims(op.matmul(probs, v), [0, 2, 1, 3]), (b, n, nh * hd)))
            u = self.up(self.mlp_norm(x))
            if plan.gated:
                gate, u = op.split(u, 2, axis=-1)
                u = getattr(op, plan.act)(gate) * u
            else:
                u = getattr(op, plan.act)(u)
            return x + self.down(u)

    return Decoder()


def decoder_spec(plan: DecoderPlan) -> dict:
    """The input specs of :func:`decoder_module`'s ``forward``."""
    from tvm.relax.frontend.nn import spec

    n, dt = plan.length, plan.dtype
    return {"x": spec.Tensor((1, n, plan.width), dt), "cos": spec.Tensor((n, 1, plan.head_dim), dt),
            "sin": spec.Tensor((n, 1, plan.head_dim), dt),
            "past_k": spec.Tensor((1, "m", plan.kv_heads, plan.head_dim), dt),
            "past_v": spec.Tensor((1, "m", plan.kv_heads, plan.head_dim), dt)}


#: The steps an image plan draws from (convolutions twice as often).
IMAGE_STEPS = ("conv", "conv", "dwconv", "maxpool", "avgpool", "group_norm", "unary", "residual", "upsample",
               "channel_softmax", "center", "concat")


@dataclass
class ImagePlan:
    """One random conv net as data: ``shape`` ``(batch, channels, h, w)`` of its input (``h`` and ``w``
    names for a symbolic image), ``steps`` as ``(kind, choice)`` pairs."""

    name: str
    shape: tuple
    steps: list = field(default_factory=list)
    dtype: str = "float32"

    def channels(self) -> list:
        """The channels of the value each step takes."""
        channels = [self.shape[1]]
        for kind, choice in self.steps[:-1]:
            channels.append(int(choice.split(":")[0]) if kind == "conv" else
                            channels[-1] * 2 if kind == "concat" else channels[-1])
        return channels

    def describe(self) -> str:
        steps = ", ".join(f"{kind}({choice})" if choice is not None else kind for kind, choice in self.steps)
        return f"{self.name}: {self.dtype}{list(self.shape)} -> {steps}"


def image_plan(seed: int, dtype: str = "float32") -> ImagePlan:
    """The conv net that ``seed`` draws.  The image size is tracked (a symbolic one as the zoo binds it,
    4) so that no pooling empties it; upsampling only a fixed size."""
    rng = random.Random(seed)
    symbolic = rng.random() < 0.25
    size = 4 if symbolic else rng.choice([8, 9, 12])
    shape = (rng.choice([1, 2]), rng.choice([3, 4]), "h" if symbolic else size, "w" if symbolic else size)
    plan = ImagePlan(f"i{seed}", shape, dtype=dtype)
    for _ in range(rng.randint(2, 5)):
        kind, choice = rng.choice(IMAGE_STEPS), None
        if kind == "conv":
            kernel, stride = rng.choice([1, 3]), rng.choice([1, 1, 2])
            choice = f"{rng.choice([4, 6, 8])}:{kernel}:{stride}:{rng.choice(['bias', 'bias', 'nobias'])}"
            size = (size + 2 * (kernel // 2) - kernel) // stride + 1
        elif kind == "maxpool" and size >= 2:
            choice = rng.choice(["ceil", "floor"])
            size = -(-size // 2) if choice == "ceil" else size // 2
        elif kind == "avgpool":
            choice = rng.choice(["count_pad", "no_pad"])
        elif kind == "upsample" and not symbolic:
            choice = rng.choice(["nearest", "bilinear"])
            size *= 2
        elif kind in ("unary", "maxpool", "upsample"):
            kind, choice = "unary", rng.choice(["relu", "silu", "gelu", "sigmoid"])
        elif kind == "group_norm" and dtype not in NORM_DTYPES:
            kind = "center"
        plan.steps.append((kind, choice))
    return plan


def image_module(plan: ImagePlan):
    """The ``nn.Module`` that runs ``plan`` (its parameters made in step order)."""
    from tvm import relax
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import op
    from tvm.relax.frontend.nn.op import wrap_nested

    dt = plan.dtype

    class ConvNet(nn.Module):
        def __init__(self):
            self.layers = nn.ModuleList([])
            for (kind, choice), channels in zip(plan.steps, plan.channels()):
                if kind == "conv":
                    out, kernel, stride, bias = choice.split(":")
                    self.layers.append(nn.Conv2D(channels, int(out), int(kernel), stride=int(stride),
                                                 padding=int(kernel) // 2, bias=bias == "bias", dtype=dt))
                elif kind == "dwconv":
                    self.layers.append(nn.Conv2D(channels, channels, 3, padding=1, groups=channels, dtype=dt))
                elif kind == "group_norm":
                    self.layers.append(nn.GroupNorm(2 if channels % 2 == 0 else 1, channels, dtype=dt))

        def forward(self, x):
            layers = iter(self.layers)
            for kind, choice in plan.steps:
                if kind in ("conv", "dwconv", "group_norm"):
                    x = next(layers)(x)
                elif kind == "maxpool":
                    x = wrap_nested(relax.op.nn.max_pool2d(x._expr, (2, 2), (2, 2), ceil_mode=choice == "ceil"),
                                    "maxpool")
                elif kind == "avgpool":
                    x = wrap_nested(relax.op.nn.avg_pool2d(x._expr, (3, 3), (1, 1), padding=(1, 1),
                                                           count_include_pad=choice == "count_pad"), "avgpool")
                elif kind == "unary":
                    x = getattr(op, choice)(x)
                elif kind == "residual":
                    x = x + op.tanh(x)
                elif kind == "upsample":
                    x = op.interpolate(x, scale_factor=2, mode=choice)
                elif kind == "channel_softmax":
                    x = op.softmax(x, axis=1)
                elif kind == "center":
                    x = x - wrap_nested(relax.op.mean(x._expr, axis=[2, 3], keepdims=True), "mean_hw")
                elif kind == "concat":
                    x = op.concat([x, op.relu(x)], dim=1)
            return x

    return ConvNet()


#: The dtypes an integer plan draws from (``--dtype`` one of them fixes it).
INTEGER_DTYPES = ("int8", "int16", "int32", "int64", "uint8")
#: The steps an integer plan draws from (arithmetic twice as often).
INTEGER_STEPS = ("arith", "arith", "divide", "shift", "bitwise", "cast", "minmax", "reduce_bcast", "where",
                 "cumsum", "abs_neg", "float_trip", "matmul")
#: How an integer plan ends: as it is, a sum over the length, or each row's argmax and argmin.
INTEGER_TAILS = ("none", "sum_length", "arg_extremes")


@dataclass
class IntegerPlan:
    """One random integer model as data: two inputs ``x`` and ``y`` of ``shape`` and ``dtype``, ``steps``
    as ``(kind, choice)`` pairs (``cast`` and ``matmul`` change the dtype of the value, ``matmul`` its width)
    and a ``tail`` (:data:`INTEGER_TAILS`)."""

    name: str
    shape: tuple
    dtype: str
    steps: list = field(default_factory=list)
    tail: str = "none"

    def dtypes(self) -> list:
        """The dtype of the value each step takes."""
        dtypes = [self.dtype]
        for kind, choice in self.steps[:-1]:
            dtypes.append(choice if kind == "cast" else "int32" if kind == "matmul" else dtypes[-1])
        return dtypes

    def widths(self) -> list:
        """The width (last axis) of the value each step takes."""
        widths = [self.shape[2]]
        for kind, choice in self.steps[:-1]:
            widths.append(int(choice) if kind == "matmul" else widths[-1])
        return widths

    def describe(self) -> str:
        steps = ", ".join(f"{kind}({choice})" if choice is not None else kind for kind, choice in self.steps)
        return f"{self.name}: {self.dtype}{list(self.shape)} x2 -> {steps} -> {self.tail}"


def integer_plan(seed: int, dtype: str = "float32") -> IntegerPlan:
    """The integer model that ``seed`` draws: wrap-around in 8 and 16 bits (32 and 64 bits are kept
    from overflowing: TVM's LLVM code generator marks their arithmetic no-signed-wrap, so an overflow
    there has no defined result to compare), truncating and flooring division and remainder by
    divisors that are never 0 or -1, arithmetic shifts, narrowing and widening casts, integer
    reductions and scans, float round trips that round halves."""
    rng = random.Random(seed)
    drawn = rng.choice(INTEGER_DTYPES)
    length = "n" if rng.random() < 1 / 3 else rng.choice([4, 5, 7])
    plan = IntegerPlan(f"q{seed}", (rng.choice([1, 2, 3]), length, rng.choice([6, 8, 12, 16])),
                       dtype if dtype in INTEGER_DTYPES else drawn)
    current = plan.dtype
    for _ in range(rng.randint(3, 6)):
        kind, choice = rng.choice(INTEGER_STEPS), None
        signed = not current.startswith("u")
        if kind == "arith":
            choice = rng.choice(["add", "subtract", "multiply"])
        elif kind == "divide":
            choice = (f"{rng.choice(['divide', 'floor_divide', 'mod', 'floor_mod'])}:"
                      f"{rng.choice(['const', 'tensor'])}:{rng.choice(['+', '-']) if signed else '+'}")
        elif kind == "shift":
            choice = rng.choice(["right_shift:1", "right_shift:3", "left_shift:1", "left_shift:2"])
        elif kind == "bitwise":
            choice = rng.choice(["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"])
        elif kind == "cast":
            choice = rng.choice([d for d in INTEGER_DTYPES if d != current])
        elif kind == "minmax":
            choice = rng.choice(["maximum", "minimum", "clip"])
        elif kind == "reduce_bcast":
            choice = f"{rng.choice(['sum', 'max', 'min'])}:{rng.choice([0, 1, 2])}:{rng.choice(['add', 'subtract'])}"
        elif kind == "where":
            choice = rng.choice(["greater", "equal", "less_equal"])
        elif kind == "cumsum":
            choice = rng.choice([1, 2])
        elif kind == "abs_neg":
            choice = rng.choice(["abs", "negative"]) if signed else None
            kind = kind if signed else "bitwise"
            choice = choice if signed else "bitwise_not"
        elif kind == "float_trip":
            choice = rng.choice(["round", "floor", "ceil", "trunc"])
        elif kind == "matmul":
            choice = rng.choice([4, 8])
        current = choice if kind == "cast" else "int32" if kind == "matmul" else current
        plan.steps.append((kind, choice))
    plan.tail = rng.choice(INTEGER_TAILS)
    return plan


#: Where 32- and 64-bit values are clipped after a step that could grow them past their range.
_WIDE_BOUND = 1 << 15


def integer_module(plan: IntegerPlan):
    """The ``nn.Module`` of ``plan``: ``forward(x, y)`` (``y`` cast to the value's dtype and cut or
    repeated to its width)."""
    from tvm import relax
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn.op import wrap_nested

    R = relax.op

    def const(value, dtype):
        return relax.const(value, dtype)

    def bounded(value, dtype):
        if dtype in ("int32", "int64"):
            return R.clip(value, -_WIDE_BOUND, _WIDE_BOUND)
        return value

    class IntegerChain(nn.Module):
        def __init__(self):
            self.weights = nn.ParameterList([nn.Parameter((width, int(choice)), "int8")
                                             for (kind, choice), width in zip(plan.steps, plan.widths())
                                             if kind == "matmul"])

        def forward(self, x, y):
            X, Y0 = x._expr, y._expr
            weights = iter(self.weights)
            for (kind, choice), dt, width in zip(plan.steps, plan.dtypes(), plan.widths()):
                Y = Y0 if dt == plan.dtype else R.astype(Y0, dt)
                if width != plan.shape[2]:  # after a matmul: y's first columns, repeated where too few
                    Y = R.strided_slice(R.concat([Y, Y], axis=2), axes=[2], begin=[0], end=[width])
                if kind == "arith":
                    X = bounded(getattr(R, choice)(X, Y), dt)
                elif kind == "divide":
                    op_name, by, sign = choice.split(":")
                    divisor = const(3, dt) if by == "const" else R.add(R.bitwise_and(Y, const(7, dt)), const(2, dt))
                    X = getattr(R, op_name)(X, R.negative(divisor) if sign == "-" else divisor)
                elif kind == "shift":
                    op_name, amount = choice.split(":")
                    X = bounded(getattr(R, op_name)(X, const(int(amount), dt)), dt)
                elif kind == "bitwise":
                    X = R.bitwise_not(X) if choice == "bitwise_not" else getattr(R, choice)(X, Y)
                elif kind == "cast":
                    X = R.astype(X, choice)
                elif kind == "minmax":
                    X = (R.clip(X, 3 if dt.startswith("u") else -5, 60)
                         if choice == "clip" else getattr(R, choice)(X, Y))
                elif kind == "reduce_bcast":
                    reduce, axis, combine = choice.split(":")
                    X = bounded(getattr(R, combine)(X, getattr(R, reduce)(X, axis=[int(axis)], keepdims=True)), dt)
                elif kind == "where":
                    X = R.where(getattr(R, choice)(X, Y), X, R.bitwise_xor(Y, const(5, dt)))
                elif kind == "cumsum":
                    X = bounded(R.cumsum(X, axis=choice), dt)
                elif kind == "abs_neg":
                    X = getattr(R, choice)(X)
                elif kind == "float_trip":  # halves: round goes to the even neighbour
                    X = R.astype(getattr(R, choice)(R.multiply(R.astype(X, "float32"), const(0.5, "float32"))), dt)
                elif kind == "matmul":
                    small = R.astype(X, "int32")
                    if dt != "int8":  # an int8 range keeps the int32 sums of products exact
                        small = R.clip(small, -128, 127)
                    X = R.matmul(small, R.astype(next(weights)._expr, "int32"))
            if plan.tail == "sum_length":
                return wrap_nested(R.sum(X, axis=[1]), "sum_length")
            if plan.tail == "arg_extremes":
                return (wrap_nested(X, "chain"), wrap_nested(R.argmax(X, axis=2), "argmax"),
                        wrap_nested(R.argmin(X, axis=2), "argmin"))
            return wrap_nested(X, "chain")

    return IntegerChain()


def integer_spec(plan: IntegerPlan) -> dict:
    """The input specs of :func:`integer_module`'s ``forward``."""
    from tvm.relax.frontend.nn import spec

    return {"x": spec.Tensor(plan.shape, plan.dtype), "y": spec.Tensor(plan.shape, plan.dtype)}


#: ``zoo --random N --family F``: what each family draws.
FAMILIES = ("chain", "decoder", "image", "integer")


def random_plans(count: int, seed: int = 0, dtype: str = "float32", family: str = "chain") -> list:
    """The plans of ``count`` random models of ``family`` from seeds ``seed, seed + 1, ...``."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    draw = {"chain": chain_plan, "decoder": decoder_plan, "image": image_plan, "integer": integer_plan}[family]
    return [draw(s, dtype) for s in range(seed, seed + count)]


def random_models(count: int, seed: int = 0, dtype: str = "float32", family: str = "chain") -> list:
    """``count`` random models of ``family`` (:data:`FAMILIES`) from seeds ``seed, seed + 1, ...`` as
    ``(name, nn.Module, spec)``, the form :func:`~tvm_hybrid_nb.zoo.collect_kernels` takes."""
    from tvm.relax.frontend.nn import spec

    models = []
    for plan in random_plans(count, seed, dtype, family):
        if isinstance(plan, DecoderPlan):
            models.append((plan.name, decoder_module(plan), decoder_spec(plan)))
        elif isinstance(plan, ImagePlan):
            models.append((plan.name, image_module(plan), {"x": spec.Tensor(plan.shape, dtype)}))
        elif isinstance(plan, IntegerPlan):
            models.append((plan.name, integer_module(plan), integer_spec(plan)))
        else:
            models.append((plan.name, chain_module(plan), {"x": spec.Tensor(plan.shape, dtype)}))
    return models
