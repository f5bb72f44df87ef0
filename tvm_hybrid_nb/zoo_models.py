"""The zoo's models: small ``tvm.relax.frontend.nn`` models whose kernels TVM's own pipeline makes.

Each covers operators a real model has: an MLP and an LM head (GEMV), causal attention with a KV
cache and grouped-query attention, RoPE, token and position embeddings, norms (layer, RMS, group,
float16), softmax and log-softmax, convolutions (strided, dilated depthwise, 1-D) and pooling,
reductions over several axes, elementwise math, argmax/argmin, sort/argsort/topk and scans over
any axis, multinomial sampling, float16, bfloat16 and int8 (quantise, integer matmul, shifts), slicing
and layout ops, a float16 LM head over 1,000 words, mixture-of-experts routing, 3-D convolution and
pooling, a transposed 1-D convolution, bitwise ops, an image of symbolic height and width, degenerate
sizes (1 x 1 matmul, one-element softmax), ``scaled_dot_product_attention``, a timestep embedding,
prelu/softplus/relu6/tanh-GELU, user kernels through ``tensor_ir_op`` and ``tensor_expr_op``, and
symbolic sizes (``n``, ``m``).  Sizes are small:
the zoo runs in CI.
"""
from __future__ import annotations


def models() -> list:
    """(name, nn.Module, spec) of every zoo model; small sizes, some symbolic."""
    from tvm import relax, te, topi
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import op, spec
    from tvm.relax.frontend.nn.core import wrap_nested
    from tvm.script import tirx as T

    class MLP(nn.Module):
        def __init__(self):
            self.fc1 = nn.Linear(16, 32)
            self.fc2 = nn.Linear(32, 8, bias=False)

        def forward(self, x):
            return self.fc2(op.gelu(self.fc1(x)) + op.silu(self.fc1(x)))

    class Attention(nn.Module):
        """One causal self-attention head with a KV cache: past (m) plus new (n) positions."""

        def __init__(self):
            self.q = nn.Linear(16, 16, bias=False)
            self.k = nn.Linear(16, 16, bias=False)
            self.v = nn.Linear(16, 16, bias=False)
            self.o = nn.Linear(16, 16, bias=False)

        def forward(self, x, past_k, past_v):
            b, n, _ = x.shape
            q = op.reshape(self.q(x), (b, n, 2, 8))
            k = op.concat([past_k, op.reshape(self.k(x), (b, n, 2, 8))], dim=1)
            v = op.concat([past_v, op.reshape(self.v(x), (b, n, 2, 8))], dim=1)
            q, k, v = (op.permute_dims(t, [0, 2, 1, 3]) for t in (q, k, v))
            scores = op.matmul(q, op.permute_dims(k, [0, 1, 3, 2])) * (1.0 / 8 ** 0.5)
            total = k.shape[2]
            mask = op.triu(op.full((n, total), -1e4, "float32"), 1)  # future positions masked
            probs = op.softmax(scores + mask, axis=-1)
            out = op.permute_dims(op.matmul(probs, v), [0, 2, 1, 3])
            return self.o(op.reshape(out, (b, n, 16)))

    class Sampler(nn.Module):
        """Token sampling: softmax, then multinomial_from_uniform (relax's GPU kernel for cuda)."""

        def forward(self, logits, u, idx):
            return op.multinomial_from_uniform(op.softmax(logits, axis=-1), u, idx)

    class RoPE(nn.Module):
        def forward(self, x, cos, sin):
            x1, x2 = op.split(x, 2, axis=-1)
            rotated = op.concat([op.negative(x2), x1], dim=-1)
            return x * cos + rotated * sin

    class Norms(nn.Module):
        def __init__(self):
            self.ln = nn.LayerNorm(16)
            self.rms = nn.RMSNorm(16, axes=-1)
            self.gn = nn.GroupNorm(4, 8)

        def forward(self, x, img):
            return self.rms(self.ln(x)), self.gn(img)

    class Softmaxes(nn.Module):
        def forward(self, x):
            return op.softmax(x, axis=-1), wrap_nested(relax.op.nn.log_softmax(x._expr, axis=-1), "log_softmax")

    class ConvNet(nn.Module):
        def __init__(self):
            self.conv = nn.Conv2D(3, 4, 3, padding=1)

        def forward(self, x):
            y = op.relu(self.conv(x))
            pooled = wrap_nested(relax.op.nn.max_pool2d(y._expr, (2, 2), (2, 2)), "max_pool")
            avg = wrap_nested(relax.op.nn.avg_pool2d(y._expr, (3, 3), (1, 1), (1, 1)), "avg_pool")
            ada = wrap_nested(relax.op.nn.adaptive_avg_pool2d(pooled._expr, (1, 1)), "adaptive")
            return ada, avg

    class SortScan(nn.Module):
        def forward(self, x):
            idx = wrap_nested(relax.op.argmax(x._expr, axis=-1), "argmax")
            values, indices = op.topk(x, k=3, axis=-1)
            return idx, values, indices, op.sort(x, axis=-1), op.cumsum(x, axis=-1)

    class LowPrecision(nn.Module):
        def forward(self, a16, b16, a8, b8):
            c16 = op.matmul(a16, b16)
            c8 = op.matmul(op.astype(a8, "int32"), op.astype(b8, "int32"))
            return c16, c8

    class LMHead(nn.Module):
        """One decoded token through an RMS norm, a gated MLP and the vocabulary projection (GEMV)."""

        def __init__(self):
            self.norm = nn.RMSNorm(32, axes=-1)
            self.gate = nn.Linear(32, 48, bias=False)
            self.up = nn.Linear(32, 48, bias=False)
            self.down = nn.Linear(48, 32, bias=False)
            self.head = nn.Linear(32, 64, bias=False)

        def forward(self, x):
            h = self.norm(x)
            h = x + self.down(op.silu(self.gate(h)) * self.up(h))
            return self.head(h)

    R = relax.op
    f32 = "float32"

    class Embed(nn.Module):
        """Token and position embeddings (``take`` of int32 ids: random inputs in range)."""

        def __init__(self):
            self.emb = nn.Embedding(50, 24)
            self.pos = nn.Embedding(16, 24)

        def forward(self, ids, pos):
            return self.emb(ids) + self.pos(pos)

    class GQA(nn.Module):
        """Grouped-query attention: 4 query heads share 2 key/value heads (``repeat``), symbolic batch."""

        def __init__(self):
            self.q = nn.Linear(32, 32, bias=True)
            self.k = nn.Linear(32, 16, bias=False)
            self.v = nn.Linear(32, 16, bias=False)

        def forward(self, x):
            b, n, _ = x.shape
            q = op.permute_dims(op.reshape(self.q(x), (b, n, 4, 8)), [0, 2, 1, 3])
            k = op.repeat(op.permute_dims(op.reshape(self.k(x), (b, n, 2, 8)), [0, 2, 1, 3]), 2, axis=1)
            v = op.repeat(op.permute_dims(op.reshape(self.v(x), (b, n, 2, 8)), [0, 2, 1, 3]), 2, axis=1)
            probs = op.softmax(op.matmul(q, op.permute_dims(k, [0, 1, 3, 2])) * 0.35, axis=-1)
            return op.reshape(op.permute_dims(op.matmul(probs, v), [0, 2, 1, 3]), (b, n, 32))

    class Reductions(nn.Module):
        def forward(self, x):
            e = x._expr
            return (wrap_nested(R.sum(e, axis=[0, 2], keepdims=True), "sum"), wrap_nested(R.mean(e, axis=1), "mean"),
                    wrap_nested(R.max(e, axis=0), "max"), wrap_nested(R.min(e, axis=[1, 2]), "min"),
                    wrap_nested(R.prod(e, axis=2), "prod"), wrap_nested(R.variance(e, axis=[2]), "variance"),
                    wrap_nested(R.argmin(e, axis=1), "argmin"), wrap_nested(R.std(e, axis=-1), "std"))

    class Elementwise(nn.Module):
        def forward(self, x, y):
            e, f = x._expr, y._expr
            one = relax.const(1.0, f32)
            a = wrap_nested(R.add(R.add(R.tanh(e), R.multiply(R.sigmoid(f), R.erf(e))),
                                  R.subtract(R.sqrt(R.abs(e)), R.rsqrt(R.add(R.abs(f), one)))), "math")
            c = wrap_nested(R.multiply(R.clip(R.power(R.abs(e), relax.const(1.5, f32)), 0.1, 2.0),
                                       R.where(R.greater(e, f), R.exp(f), R.log(R.add(R.abs(e), one)))), "select")
            g = wrap_nested(R.floor_divide(R.floor(R.multiply(e, relax.const(7.0, f32))), relax.const(3.0, f32)),
                            "floor_divide")
            return a, c, g, wrap_nested(R.round(R.multiply(e, relax.const(3.3, f32))), "round")

    class Convs(nn.Module):
        """Strided conv2d, a dilated depthwise conv2d, ceil-mode max pool, average pool without the
        padding, conv1d."""

        def __init__(self):
            self.c1 = nn.Conv2D(4, 8, 3, stride=2, padding=1)
            self.dw = nn.Conv2D(8, 8, 3, padding=2, dilation=2, groups=8, bias=False)
            self.c1d = nn.Conv1D(4, 6, 3, padding=1)

        def forward(self, x, s):
            y = op.silu(self.dw(self.c1(x)))
            mp = wrap_nested(R.nn.max_pool2d(y._expr, (3, 3), (2, 2), (1, 1), ceil_mode=True), "max_pool_ceil")
            ap = wrap_nested(R.nn.avg_pool2d(y._expr, (2, 2), (2, 2), count_include_pad=False), "avg_pool_nopad")
            return mp, ap, self.c1d(s)

    class IntQuant(nn.Module):
        """Quantise to int8 (divide, round, clip, cast), an int32 matmul, dequantise, a shift."""

        def forward(self, x, w8, scale):
            q = wrap_nested(R.astype(R.clip(R.round(R.divide(x._expr, scale._expr)), -128, 127), "int8"), "quantize")
            acc = op.matmul(op.astype(q, "int32"), op.astype(w8, "int32"))
            return op.astype(acc, f32) * 0.01, wrap_nested(R.right_shift(acc._expr, relax.const(3, "int32")), "shift")

    class HalfNorm(nn.Module):
        def __init__(self):
            self.ln = nn.LayerNorm(20, dtype="float16")

        def forward(self, x):
            return op.softmax(self.ln(x), axis=1)

    class Shapes(nn.Module):
        """Strided slice, tile, flip, split and concat, and scans over a leading axis (cumsum, cumprod)."""

        def forward(self, x):
            e = x._expr
            parts = op.split(x, [1, 3], axis=1)
            return (wrap_nested(R.strided_slice(e, axes=[1, 2], begin=[1, 0], end=[5, 6], strides=[2, 3]), "slice"),
                    wrap_nested(R.tile(e, (1, 2, 1)), "tile"), wrap_nested(R.flip(e, axis=2), "flip"),
                    op.concat([parts[2], parts[0]], dim=1), wrap_nested(R.cumsum(e, axis=0), "cumsum0"),
                    wrap_nested(R.cumprod(e, axis=1), "cumprod1"))

    class SortMore(nn.Module):
        def forward(self, x):
            values, indices = op.topk(x, k=4, axis=0, largest=False)
            return (values, indices, wrap_nested(R.sort(x._expr, axis=0, descending=True), "sort_desc"),
                    wrap_nested(R.argsort(x._expr, axis=-1, descending=True), "argsort_desc"))

    class BatchMatmul(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(12, 20, bias=True)

        def forward(self, a, b, x):
            return op.matmul(a, b), self.fc(x)

    class BFloat16(nn.Module):
        """bfloat16: float32 arithmetic rounded at stores on a CPU, bf16 arithmetic on cuda sm_80."""

        def __init__(self):
            self.fc = nn.Linear(16, 8, bias=False, dtype="bfloat16")
            self.norm = nn.RMSNorm(16, axes=-1, dtype="bfloat16")

        def forward(self, x):
            return self.fc(self.norm(x)), op.softmax(x, axis=-1), op.astype(op.silu(x), f32)

    class HalfPrefill(nn.Module):
        """A float16 projection of a symbolic number of tokens: dlight's Matmul rule tensorizes it for
        sm_80 (WMMA fragments, ``tvm_mma_sync``), as it does every float16 LLM prefill."""

        def __init__(self):
            self.proj = nn.Linear(128, 128, bias=True, dtype="float16")

        def forward(self, x):
            return op.silu(self.proj(x))

    class HalfLMHead(nn.Module):
        """A float16 LM head over a 1,000-word vocabulary, then a float32 softmax: dlight's GEMV sums
        float16 products in another order than the serial reference (compared within float16
        rounding, though the output is float32), and dlight.cpu recomputes the softmax's maximum and
        sum for every word in scratch memory shared by the words (a parallel loop split by 16)."""

        def __init__(self):
            self.norm = nn.RMSNorm(256, axes=-1, dtype="float16")
            self.head = nn.Linear(256, 1000, bias=False, dtype="float16")

        def forward(self, x):
            return op.softmax(op.astype(self.head(self.norm(x)), f32), axis=-1)

    class Loss(nn.Module):
        """A classifier's loss written out: log-sum-exp, each target's log-probability picked with
        ``take``, their mean a 0-d tensor (one GPU thread of 1,024 writes it; dlight's GEMV rule raises
        on the exponentials' sum, every spatial axis of it a batch axis); a softmax over a middle axis
        (dlight.cpu recomputes each column's maximum and sum for every row, in scratch the rows
        share); a linear layer over two symbolic sizes (dlight.cpu fuses ``b * n * 24`` outputs
        into one loop)."""

        def __init__(self):
            self.proj = nn.Linear(16, 24)

        def forward(self, logits, target, h, x):
            m = op.max(logits, axis=-1, keepdims=True)
            lse = op.log(op.sum(op.exp(logits - m), axis=-1, keepdims=True)) + m
            picked = op.take(op.reshape(logits - lse, (4 * 10,)), target)
            return op.negative(op.sum(picked)) * 0.25, op.softmax(h, axis=1), self.proj(x)

    class EdgeShapes(nn.Module):
        """Layers at the edge of dlight's GPU rules, where TVM's schedules compute something else: a
        linear layer of one input feature (its reduction has extent 1; the Fallback rule adds the
        bias twice) and a depthwise convolution with channel multiplier 2 (the Reduction rule's
        bias step reads per-thread elements another thread wrote)."""

        def __init__(self):
            self.fc = nn.Linear(1, 8)
            self.dw = nn.Conv2D(3, 6, 3, dilation=2, groups=3)

        def forward(self, t, x):
            return self.fc(t), self.dw(x)

    class MoERouter(nn.Module):
        """Mixture-of-experts routing: a router's softmax, its top 2 experts (``topk`` of both values
        and indices), each expert's row taken by index and the rows summed by weight."""

        def forward(self, x, wg, eb):
            probs = op.softmax(op.matmul(x, wg), axis=-1)
            top = relax.op.topk(probs._expr, 2, axis=-1, ret_type="both", largest=True, dtype="int32")
            weights = wrap_nested(relax.TupleGetItem(top, 0), "weights")
            experts = wrap_nested(relax.TupleGetItem(top, 1), "experts")
            rows = wrap_nested(relax.op.take(eb._expr, experts._expr, axis=0), "expert_rows")
            return op.sum(op.unsqueeze(weights, -1) * rows, axis=1)

    class Volumes(nn.Module):
        """A 3-D convolution and pooling (video, medical volumes) and a transposed 1-D convolution
        (an upsampling decoder)."""

        def __init__(self):
            self.c3 = nn.Conv3D(2, 4, 3, padding=1)
            self.up = nn.ConvTranspose1D(4, 3, 4, stride=2, padding=1)

        def forward(self, v, s):
            pooled = wrap_nested(relax.op.nn.avg_pool3d(self.c3(v)._expr, (2, 2, 2), (2, 2, 2)), "pool3d")
            return pooled, self.up(s)

    class Bits(nn.Module):
        """Bitwise and/xor and shifts on int32 (hashing, packed flags) and a shift on uint8."""

        def forward(self, a, b, u):
            mixed = wrap_nested(relax.op.bitwise_xor(relax.op.bitwise_and(a._expr, b._expr),
                                                     relax.const(0x5A5A, "int32")), "bitmix")
            shifted = wrap_nested(relax.op.right_shift(relax.op.left_shift(a._expr, relax.const(3, "int32")),
                                                       relax.const(2, "int32")), "shifts")
            return mixed, shifted, wrap_nested(relax.op.right_shift(u._expr, relax.const(1, "uint8")), "ushift")

    class SymbolicImage(nn.Module):
        """A conv, relu and max pool over an image of symbolic height and width."""

        def __init__(self):
            self.conv = nn.Conv2D(3, 6, 3, padding=1)

        def forward(self, x):
            y = op.relu(self.conv(x))
            return wrap_nested(relax.op.nn.max_pool2d(y._expr, (2, 2), (2, 2)), "sympool")

    class Degenerate(nn.Module):
        """Sizes at the edge: a 1 x 1 x 1 matmul, a softmax over one element, a row sum over 97."""

        def forward(self, a, b, x, y):
            return op.matmul(a, b), op.softmax(x, axis=-1), op.sum(y, axis=1)

    class Detection(nn.Module):
        """A detector's head: boxes over a score threshold (``get_valid_counts``), non-maximum suppression
        (its CPU kernel sorts each image's valid boxes with ``tvm.contrib.sort.argsort_nms``) and region
        pooling (``roi_align`` averaging 2 x 2 samples, ``roi_pool``)."""

        def forward(self, boxes, feat, rois):
            counted = relax.BlockBuilder.current().emit(relax.op.get_valid_counts(boxes._expr, 0.3, 0, 1))
            kept = wrap_nested(relax.op.non_max_suppression(
                relax.TupleGetItem(counted, 1), relax.TupleGetItem(counted, 0), relax.TupleGetItem(counted, 2),
                iou_threshold=0.5), "nms")
            aligned = wrap_nested(relax.op.roi_align(feat._expr, rois._expr, (3, 3), 0.5, sample_ratio=2,
                                                     aligned=True), "roi_align")
            return kept, aligned, wrap_nested(relax.op.roi_pool(feat._expr, rois._expr, (2, 2), 0.5), "roi_pool")

    class SDPA(nn.Module):
        """``nn.op.scaled_dot_product_attention`` (topi's attention kernel), causal, over symbolic
        query and key lengths."""

        def forward(self, q, k, v):
            return op.scaled_dot_product_attention(q, k, v, is_causal=True)

    @T.prim_func(private=True, s_tir=True)
    def scale_rows(a: T.handle, s: T.handle, o: T.handle):
        A = T.match_buffer(a, (T.int64(6), T.int64(8)), "float32")
        S = T.match_buffer(s, (T.int64(6),), "float32")
        O = T.match_buffer(o, (T.int64(6), T.int64(8)), "float32")
        for i, j in T.grid(T.int64(6), T.int64(8)):
            with T.sblock("o"):
                vi, vj = T.axis.remap("SS", [i, j])
                O[vi, vj] = A[vi, vj] * S[vi] + T.float32(1)

    class Extras(nn.Module):
        """The rest of ``nn.op``: a diffusion timestep embedding, prelu, softplus, relu6, tanh-GELU,
        chunk, a user's TIR kernel (``tensor_ir_op``, fused with the ``exp`` before it) and a TE one
        (``tensor_expr_op``: a neighbour max, then topi's 1-D average pooling)."""

        def __init__(self):
            self.alpha = nn.Parameter((8,), f32)

        def forward(self, t, x, s):
            e = op.get_timestep_embedding(t, 8, flip_sin_to_cos=True, downscale_freq_shift=0)
            a = op.permute_dims(op.prelu(op.permute_dims(x, [0, 2, 1]), self.alpha), [0, 2, 1])
            p, q = op.chunk(a + op.softplus(x, beta=2.0, threshold=5.0), 2, dim=-1)
            acts = op.concat([q, p], dim=-1) + op.relu6(x * 4.0) * op.gelu(x, approximate="tanh") + e
            rows = op.tensor_ir_op(scale_rows, "scale_rows", args=[op.exp(op.reshape(acts, (6, 8))), s],
                                   out=nn.Tensor.placeholder((6, 8), f32))
            neighbours = op.tensor_expr_op(lambda a: te.compute(
                a.shape, lambda i, j: te.max(a[i, j], a[i, (j + 1) % a.shape[1]]), name="m"), "neighbour_max", [rows])
            pooled = op.tensor_expr_op(lambda a: topi.nn.pool1d(a, (3,), (2,), (1,), (1, 1), "avg", layout="NCW"),
                                       "pool1d", [op.reshape(neighbours, (1, 6, 8))])
            return acts, pooled

    return [
        ("lm_head", LMHead(), {"x": spec.Tensor((1, 1, 32), f32)}),
        ("mlp", MLP(), {"x": spec.Tensor((2, 16), f32)}),
        ("mlp_sym", MLP(), {"x": spec.Tensor(("n", 16), f32)}),
        ("attention", Attention(), {"x": spec.Tensor((1, 4, 16), f32), "past_k": spec.Tensor((1, 3, 2, 8), f32),
                                    "past_v": spec.Tensor((1, 3, 2, 8), f32)}),
        ("attention_sym", Attention(), {"x": spec.Tensor((1, "n", 16), f32),
                                        "past_k": spec.Tensor((1, "m", 2, 8), f32),
                                        "past_v": spec.Tensor((1, "m", 2, 8), f32)}),
        ("rope", RoPE(), {"x": spec.Tensor((1, "n", 8), f32), "cos": spec.Tensor(("n", 8), f32),
                          "sin": spec.Tensor(("n", 8), f32)}),
        ("norms", Norms(), {"x": spec.Tensor((3, 16), f32), "img": spec.Tensor((1, 8, 4, 4), f32)}),
        ("softmax", Softmaxes(), {"x": spec.Tensor((4, 24), f32)}),
        ("convnet", ConvNet(), {"x": spec.Tensor((1, 3, 8, 8), f32)}),
        ("sortscan", SortScan(), {"x": spec.Tensor((3, 10), f32)}),
        ("sampler", Sampler(), {"logits": spec.Tensor((2, 24), f32), "u": spec.Tensor((3, 1), f32),
                                "idx": spec.Tensor((3, 1), "int64")}),
        ("lowprec", LowPrecision(), {"a16": spec.Tensor((4, 16), "float16"), "b16": spec.Tensor((16, 8), "float16"),
                                     "a8": spec.Tensor((4, 16), "int8"), "b8": spec.Tensor((16, 8), "int8")}),
        ("embed", Embed(), {"ids": spec.Tensor((2, 5), "int32"), "pos": spec.Tensor((2, 5), "int32")}),
        ("gqa", GQA(), {"x": spec.Tensor(("n", 6, 32), f32)}),
        ("reductions", Reductions(), {"x": spec.Tensor((3, 5, 7), f32)}),
        ("elementwise", Elementwise(), {"x": spec.Tensor((4, 9), f32), "y": spec.Tensor((4, 9), f32)}),
        ("convs", Convs(), {"x": spec.Tensor((1, 4, 9, 9), f32), "s": spec.Tensor((2, 4, 10), f32)}),
        ("intquant", IntQuant(), {"x": spec.Tensor((3, 16), f32), "w8": spec.Tensor((16, 5), "int8"),
                                  "scale": spec.Tensor((1,), f32)}),
        ("halfnorm", HalfNorm(), {"x": spec.Tensor((2, 7, 20), "float16")}),
        ("shapes", Shapes(), {"x": spec.Tensor((2, 6, 7), f32)}),
        ("sortmore", SortMore(), {"x": spec.Tensor((6, 9), f32)}),
        ("batch_matmul", BatchMatmul(), {"a": spec.Tensor((3, "n", 12), f32), "b": spec.Tensor((3, 12, 7), f32),
                                         "x": spec.Tensor(("m", 12), f32)}),
        ("bf16", BFloat16(), {"x": spec.Tensor((4, 16), "bfloat16")}),
        ("half_prefill", HalfPrefill(), {"x": spec.Tensor((1, "n", 128), "float16")}),
        ("half_lm_head", HalfLMHead(), {"x": spec.Tensor((1, 1, 256), "float16")}),
        ("loss", Loss(), {"logits": spec.Tensor((4, 10), f32), "target": spec.Tensor((4,), "int32"),
                          "h": spec.Tensor((2, 40, 3), f32), "x": spec.Tensor(("b", "n", 16), f32)}),
        ("edge", EdgeShapes(), {"t": spec.Tensor((3, 1), f32), "x": spec.Tensor((1, 3, 12, 13), f32)}),
        ("moe", MoERouter(), {"x": spec.Tensor((5, 16), f32), "wg": spec.Tensor((16, 6), f32),
                              "eb": spec.Tensor((6, 8), f32)}),
        ("volumes", Volumes(), {"v": spec.Tensor((1, 2, 4, 6, 6), f32), "s": spec.Tensor((1, 4, 9), f32)}),
        ("bits", Bits(), {"a": spec.Tensor((4, 33), "int32"), "b": spec.Tensor((4, 33), "int32"),
                          "u": spec.Tensor((4, 33), "uint8")}),
        ("symbolic_image", SymbolicImage(), {"x": spec.Tensor((1, 3, "h", "w"), f32)}),
        ("degenerate", Degenerate(), {"a": spec.Tensor((1, 1), f32), "b": spec.Tensor((1, 1), f32),
                                      "x": spec.Tensor((4, 1), f32), "y": spec.Tensor((3, 97), f32)}),
        ("detection", Detection(), {"boxes": spec.Tensor((1, 12, 6), f32), "feat": spec.Tensor((1, 3, 10, 10), f32),
                                    "rois": spec.Tensor((2, 5), f32)}),
        ("sdpa", SDPA(), {"q": spec.Tensor((1, "n", 2, 8), f32), "k": spec.Tensor((1, "m", 2, 8), f32),
                          "v": spec.Tensor((1, "m", 2, 8), f32)}),
        ("extras", Extras(), {"t": spec.Tensor((3,), f32), "x": spec.Tensor((2, 3, 8), f32), "s": spec.Tensor((6,), f32)}),
    ]
