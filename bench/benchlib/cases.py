"""The kernels measured: CPU cases (``Case``) and GPU cases for the cuda target (``GpuCase``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import tvm
from tvm import te

from tvm_hybrid_nb import examples as ex

PV_SCHEDULE = "split 8x8, reorder, parallel, unroll, vectorize"
CACHE_SCHEDULE = "split 16x16, reorder, cache_read A + cache_write C (local), compute_at"


@dataclass
class Case:
    kernel: str
    size: str
    schedule: str
    make: Callable[[], Any]     # -> examples.Example (fresh schedule each call)
    target_256: bool = False    # the case the 256³ targets are checked on
    capture: bool = True        # include in the capture-overhead measurement


def cases(quick: bool) -> list[Case]:
    out = []
    sizes = (128, 256) if quick else (128, 256, 512)
    for n in sizes:
        # building does not depend on the size much: capture overhead is measured up to 256³
        out.append(Case("matmul", f"{n}^3", PV_SCHEDULE, lambda n=n: ex.matmul_parallel_vectorize(n),
                        target_256=(n == 256), capture=(n <= 256)))
        if not quick or n == 128:
            out.append(Case("matmul", f"{n}^3", CACHE_SCHEDULE, lambda n=n: ex.matmul_cache_compute_at(n),
                            capture=(n <= 256)))
    if quick:
        out.append(Case("conv2d", "1x8x16x16, 8 filters 3x3", "pad inlined, split x by 5, vectorize",
                        lambda: ex.conv2d_padded(1, 8, 16, 15, 8)))
        out.append(Case("softmax", "128x256", "split j by 8, vectorize", lambda: ex.softmax(128, 256)))
    else:
        out.append(Case("conv2d", "1x16x30x30, 16 filters 3x3", "pad inlined, split x by 5, vectorize",
                        lambda: ex.conv2d_padded(1, 16, 30, 30, 16)))
        out.append(Case("softmax", "256x512", "split j by 8, vectorize", lambda: ex.softmax(256, 512)))
    return out



GPU_MM16_SCHEDULE = "cuda: 16x16 threads, shared A/B tiles"
GPU_MM8_SCHEDULE = "cuda: 8x8 threads, shared A/B tiles, local accumulator"
GPU_SOFTMAX_SCHEDULE = "cuda: 4 kernels, 32 threads/row, cross-thread max/sum"


def gpu_matmul_local_accumulator(n: int, tile: int = 8) -> ex.Example:
    """The shared-tile CUDA matmul with each thread's sum kept in a local (register) accumulator."""
    example = ex.gpu_tiled_matmul(n, tile)
    sch = example.obj
    block = sch.get_sblock("C")
    local = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(local, sch.get_loops(block)[3])  # under (blockIdx.y, blockIdx.x, threadIdx.y, threadIdx.x)
    example.name = "gpu_matmul_local_accumulator"
    return example


@dataclass
class GpuCase:
    kernel: str
    size: str
    schedule: str
    make: Callable[[], Any]             # -> examples.Example for target cuda
    unscheduled: Callable[[], Any]      # -> IRModule: the same TE compute, unscheduled (native llvm build)
    cpu_scheduled: Callable[[], Any]    # -> IRModule: the project's CPU schedule of it (second native column)
    workload: dict                      # the peers' request for the same work


def gpu_cases(quick: bool) -> list[GpuCase]:
    n = 64 if quick else 256
    rows, cols = (64, 128) if quick else (256, 512)
    matmul_plain = lambda: tvm.IRModule({"main": te.create_prim_func(list(ex._matmul_te(n, n, n)))})  # noqa: E731
    matmul_cpu = lambda: ex.matmul_parallel_vectorize(n).obj.mod  # noqa: E731
    softmax_plain = lambda: ex._softmax_schedule(rows, cols).mod  # noqa: E731
    softmax_cpu = lambda: ex.softmax(rows, cols).obj.mod  # noqa: E731
    mm = {"workload": "matmul", "n": n}
    return [
        GpuCase("matmul", f"{n}^3", GPU_MM16_SCHEDULE, lambda: ex.gpu_tiled_matmul(n, 16), matmul_plain,
                matmul_cpu, mm),
        GpuCase("matmul", f"{n}^3", GPU_MM8_SCHEDULE, lambda: gpu_matmul_local_accumulator(n, 8), matmul_plain,
                matmul_cpu, mm),
        GpuCase("softmax", f"{rows}x{cols}", GPU_SOFTMAX_SCHEDULE, lambda: ex.gpu_softmax(rows, cols, 32),
                softmax_plain, softmax_cpu, {"workload": "softmax", "rows": rows, "cols": cols}),
    ]
