"""The zoo's kinds of model at sizes closer to real ones, checked as the zoo checks its own.

``tvm_hybrid_nb.zoo`` keeps its models tiny so that CI can check every stage of every kernel.  Real
models are wider: a Llama-style layer at hidden 256 and 1,024 (prefill and a float16 decode step
over a KV cache), float16 LM heads over 4,096 and 32,000 words with their softmax and argmax,
sampling's sort / cumsum / topk over a vocabulary, a small convolutional net on 32 x 32 images and
a wider conv block on 64 x 64 (depthwise conv, group norm); ``--convs``: a UNet up-block's 3 x 3
conv on 32 x 32, Whisper's conv1d front over 1,000 frames and a ViT's patch embedding of 224 x 224.
Each kernel is lowered by TVM's own Relax pipeline (``zoo.collect_kernels``), scheduled the zoo's
three ways and emulated at every changed stage against the native build (``zoo.check_kernel``);
the table gives each kernel's outcome and seconds, and the kernels over 60 s.

    python bench/real_sizes.py                       # the medium sizes, fast mode (a few minutes)
    python bench/real_sizes.py --large               # hidden 1,024 and 32,000 words too (longer)
    python bench/real_sizes.py --check --models lm_head,sort_sample
    python bench/real_sizes.py --check --convs       # UNet, Whisper and ViT convolutions, sanitized
"""
from __future__ import annotations

import argparse
import sys
import time

LIMIT_S = 60.0


def models(names: list[str]) -> list:
    """(name, nn.Module, spec) of the named models."""
    from tvm import relax
    from tvm.relax.frontend import nn
    from tvm.relax.frontend.nn import op, spec
    from tvm.relax.frontend.nn.core import wrap_nested

    f32 = "float32"

    class LlamaLayer(nn.Module):
        """RMS norms, fused QKV, RoPE, grouped-query causal attention over a KV cache, SwiGLU."""

        def __init__(self, h=256, heads=4, kv=2, ffn=512, dtype=f32):
            self.h, self.heads, self.kv, self.d = h, heads, kv, h // heads
            self.n1 = nn.RMSNorm(h, axes=-1, dtype=dtype)
            self.n2 = nn.RMSNorm(h, axes=-1, dtype=dtype)
            self.qkv = nn.Linear(h, (heads + 2 * kv) * self.d, bias=False, dtype=dtype)
            self.o = nn.Linear(h, h, bias=False, dtype=dtype)
            self.gate_up = nn.Linear(h, 2 * ffn, bias=False, dtype=dtype)
            self.down = nn.Linear(ffn, h, bias=False, dtype=dtype)

        def forward(self, x, cos, sin, past_k, past_v):
            b, n, _ = x.shape
            qkv = op.reshape(self.qkv(self.n1(x)), (b, n, self.heads + 2 * self.kv, self.d))
            q, k, v = op.split(qkv, [self.heads, self.heads + self.kv], axis=2)

            def rope(t):
                t1, t2 = op.split(t, 2, axis=-1)
                return t * cos + op.concat([op.negative(t2), t1], dim=-1) * sin

            q, k = rope(q), rope(k)
            k, v = op.concat([past_k, k], dim=1), op.concat([past_v, v], dim=1)
            q, k, v = (op.permute_dims(t, [0, 2, 1, 3]) for t in (q, k, v))
            k, v = op.repeat(k, self.heads // self.kv, axis=1), op.repeat(v, self.heads // self.kv, axis=1)
            s = op.matmul(q, op.permute_dims(k, [0, 1, 3, 2])) * (1.0 / self.d ** 0.5)
            mask = op.triu(op.full((n, k.shape[2]), -1e4, s.dtype), 1)
            a = op.matmul(op.softmax(s + mask, axis=-1), v)
            x = x + self.o(op.reshape(op.permute_dims(a, [0, 2, 1, 3]), (b, n, self.h)))
            g, u = op.split(self.gate_up(self.n2(x)), 2, axis=-1)
            return x + self.down(op.silu(g) * u)

    class LMHead(nn.Module):
        def __init__(self, h, vocab):
            self.norm = nn.RMSNorm(h, axes=-1, dtype="float16")
            self.head = nn.Linear(h, vocab, bias=False, dtype="float16")

        def forward(self, x):
            logits = op.astype(self.head(self.norm(x)), f32)
            return op.softmax(logits, axis=-1), wrap_nested(relax.op.argmax(logits._expr, axis=-1), "argmax")

    class Sampling(nn.Module):
        def forward(self, probs):
            ordered = op.sort(probs, axis=-1, descending=True)
            values, indices = op.topk(probs, k=40, axis=-1)
            return ordered, op.cumsum(ordered, axis=-1), values, indices

    class ConvNet(nn.Module):
        def __init__(self):
            self.c1 = nn.Conv2D(3, 16, 3, padding=1)
            self.c2 = nn.Conv2D(16, 32, 3, padding=1, stride=2)
            self.gn = nn.GroupNorm(8, 32)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            y = wrap_nested(relax.op.nn.max_pool2d(op.relu(self.c1(x))._expr, (2, 2), (2, 2)), "max_pool")
            y = op.silu(self.gn(self.c2(y)))
            y = wrap_nested(relax.op.nn.adaptive_avg_pool2d(y._expr, (1, 1)), "adaptive")
            return self.fc(op.reshape(y, (1, 32)))

    class ConvBlock(nn.Module):
        """A wider block of a diffusion-style net: 16 -> 64 channels on 64 x 64, a depthwise conv,
        group norm in 16 groups, SiLU, pooling, a softmax over 1,024 positions."""

        def __init__(self):
            self.c1 = nn.Conv2D(16, 64, 3, padding=1)
            self.c2 = nn.Conv2D(64, 64, 3, padding=1, groups=64)
            self.gn = nn.GroupNorm(16, 64)

        def forward(self, x):
            y = op.silu(self.gn(self.c2(op.relu(self.c1(x)))))
            y = wrap_nested(relax.op.nn.avg_pool2d(y._expr, (2, 2), (2, 2)), "avg_pool")
            return op.softmax(op.reshape(y, (1, 64, 1024)), axis=-1)

    class UNetUp(nn.Module):
        """A UNet up-block: nearest resize, skip concat, a 3 x 3 conv 96 -> 32, group norm, SiLU."""

        def __init__(self):
            self.c = nn.Conv2D(96, 32, 3, padding=1)
            self.gn = nn.GroupNorm(8, 32)

        def forward(self, x, skip):
            up = wrap_nested(relax.op.image.resize2d(x._expr, (32, 32), method="nearest_neighbor"), "up")
            return op.silu(self.gn(self.c(op.concat([up, skip], dim=1))))

    class WhisperFront(nn.Module):
        """Whisper's audio front: conv1d 80 -> 128 over 1,000 frames, GELU, a strided conv1d, layer norm."""

        def __init__(self):
            self.c1 = nn.Conv1D(80, 128, 3, padding=1)
            self.c2 = nn.Conv1D(128, 128, 3, stride=2, padding=1)
            self.ln = nn.LayerNorm(128)

        def forward(self, x):
            y = op.gelu(self.c2(op.gelu(self.c1(x))))
            return self.ln(op.permute_dims(y, [0, 2, 1]))

    class ViTBlock(nn.Module):
        """A ViT's 16 x 16 patch embedding of a 224 x 224 image (196 tokens of 192), layer norm, GELU MLP."""

        def __init__(self):
            self.patch = nn.Conv2D(3, 192, 16, stride=16)
            self.ln = nn.LayerNorm(192)
            self.fc1 = nn.Linear(192, 768)
            self.fc2 = nn.Linear(768, 192)

        def forward(self, x):
            t = op.permute_dims(op.reshape(self.patch(x), (1, 192, 196)), [0, 2, 1])
            return t + self.fc2(op.gelu(self.fc1(self.ln(t))))

    def layer_spec(h, n, past, heads_kv, dtype):
        return {"x": spec.Tensor((1, n, h), dtype), "cos": spec.Tensor((n, 1, 64), dtype),
                "sin": spec.Tensor((n, 1, 64), dtype), "past_k": spec.Tensor((1, past, heads_kv, 64), dtype),
                "past_v": spec.Tensor((1, past, heads_kv, 64), dtype)}

    table = {
        "llama_prefill": lambda: (LlamaLayer(), layer_spec(256, 16, 16, 2, f32)),
        "llama_decode16": lambda: (LlamaLayer(dtype="float16"), layer_spec(256, 1, 63, 2, "float16")),
        "lm_head": lambda: (LMHead(256, 4096), {"x": spec.Tensor((1, 1, 256), "float16")}),
        "sort_sample": lambda: (Sampling(), {"probs": spec.Tensor((1, 4096), f32)}),
        "convnet": lambda: (ConvNet(), {"x": spec.Tensor((1, 3, 32, 32), f32)}),
        "llama1k_decode": lambda: (LlamaLayer(1024, 16, 4, 2816, "float16"), layer_spec(1024, 1, 255, 4, "float16")),
        "lm_head32k": lambda: (LMHead(512, 32000), {"x": spec.Tensor((1, 1, 512), "float16")}),
        "sort32k": lambda: (Sampling(), {"probs": spec.Tensor((1, 32000), f32)}),
        "convblock": lambda: (ConvBlock(), {"x": spec.Tensor((1, 16, 64, 64), f32)}),
        "unet_up": lambda: (UNetUp(), {"x": spec.Tensor((1, 64, 16, 16), f32), "skip": spec.Tensor((1, 32, 32, 32), f32)}),
        "whisper_front": lambda: (WhisperFront(), {"x": spec.Tensor((1, 80, 1000), f32)}),
        "vit_block": lambda: (ViTBlock(), {"x": spec.Tensor((1, 3, 224, 224), f32)}),
    }
    unknown = [n for n in names if n not in table]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(table)}")
    return [(name, *table[name]()) for name in names]


MEDIUM = ["llama_prefill", "llama_decode16", "lm_head", "sort_sample", "convnet"]
LARGE = ["llama1k_decode", "lm_head32k", "sort32k", "convblock"]
#: Convolutions at real sizes whose stages the sanitizers once took minutes over (``--check``).
CONVS = ["unet_up", "whisper_front", "vit_block"]


def main(argv=None) -> int:
    from tvm_hybrid_nb import zoo

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated model names (default: the medium sizes)")
    parser.add_argument("--large", action="store_true", help="the large sizes too")
    parser.add_argument("--convs", action="store_true", help="the UNet, Whisper and ViT convolutions too")
    parser.add_argument("--check", action="store_true", help="run the sanitizers (check=True)")
    parser.add_argument("--flavours", default=",".join(zoo.FLAVOURS))
    args = parser.parse_args(argv)
    names = (args.models.split(",") if args.models
             else MEDIUM + (LARGE if args.large else []) + (CONVS if args.convs else []))
    over, counts = [], {}
    for name, model, spec in models(names):
        kernels = zoo.collect_kernels([(name, model, spec)])
        for kernel in kernels:
            for flavour in args.flavours.split(","):
                func = kernel.cuda if flavour == "dlight-gpu" else kernel.llvm
                if func is None:
                    continue
                start = time.perf_counter()
                outcome = zoo.check_kernel(kernel.name, func, flavour, reference=kernel.reference, check=args.check)
                seconds = time.perf_counter() - start
                kind = "TVM" if outcome.outcome != "ok" and zoo.tvm_finding(outcome) else outcome.outcome
                counts[kind] = counts.get(kind, 0) + 1
                if seconds > LIMIT_S:
                    over.append(f"{kernel.name} ({flavour}) {seconds:.0f} s")
                print(f"{kind:7s} {seconds:7.1f} s  {flavour:10s} {kernel.name}"
                      + (f"  [{outcome.stage}] {outcome.reason[:160]}" if kind != "ok" else ""), flush=True)
    print("outcomes:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"over {LIMIT_S:.0f} s:", "; ".join(over) if over else "none")
    return 0 if set(counts) <= {"ok", "TVM"} and not over else 1


if __name__ == "__main__":
    sys.exit(main())
