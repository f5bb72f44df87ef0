#!/usr/bin/env python
"""The CPU emulators of GPU kernels that users pick instead, timed on the benchmark's GPU workloads.

- ``numba``: numba-cuda's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) running the classic shared-memory
  tiled matmul of numba's documentation (16×16 threads per block, like the project's 16×16 schedule)
  and a one-block-per-row softmax with shared-memory tree reductions.
- ``triton``: Triton's interpreter (``TRITON_INTERPRET=1``, CPU ``torch`` tensors) running the
  tutorial matmul (03-matrix-multiplication, fixed block sizes instead of autotuning) and the
  tutorial fused softmax (02-fused-softmax, one program per row).

``bench/run.py --peers`` starts one server process per peer (``python bench/peers.py serve PEER``)
with that peer's environment variable set only there, and sends it one JSON request per line::

    {"op": "probe"}                                   -> {"ok": true, "versions": {...}} or {"ok": false, "error": ...}
    {"op": "run", "workload": "matmul", "n": 256}     -> {"ok": true, "seconds": ..., "max_abs_err": ...}
    {"op": "run", "workload": "softmax", "rows": 256, "cols": 512}

Each ``run`` is one timed call (float32 inputs from a fixed seed, outputs checked against a float64
numpy reference, the error is returned).  The first ``run`` of a workload also pays the peer's
one-time setup (tracing, kernel object creation); ``run.py`` makes one untimed warm-up call first.
This file imports neither tvm nor tvm_hybrid_nb: it runs under any Python that has the peer installed
(``--peers-python``).
"""
from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

#: The environment variable each peer needs, set in its server process only.
PEER_ENV = {"numba": {"NUMBA_ENABLE_CUDASIM": "1"}, "triton": {"TRITON_INTERPRET": "1"}}

#: Triton tutorial matmul block sizes (fixed; the tutorial autotunes over configurations like these).
TRITON_BLOCK_M = TRITON_BLOCK_N = TRITON_BLOCK_K = 32
TRITON_GROUP_M = 8
#: numba's classic tiled matmul: threads per block side (and tile size).
NUMBA_TPB = 16
#: numba softmax: threads per block (one block per row), like the project's gpu_softmax.
NUMBA_SOFTMAX_THREADS = 32


def inputs(workload: str, req: dict) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    if workload == "matmul":
        n = req["n"]
        return [rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)]
    return [rng.standard_normal((req["rows"], req["cols"])).astype(np.float32)]


def reference(workload: str, arrays: list[np.ndarray]) -> np.ndarray:
    if workload == "matmul":
        return arrays[0].astype(np.float64) @ arrays[1].astype(np.float64)
    x = arrays[0].astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# ---------------------------------------------------------------------- numba-cuda simulator
def numba_peer():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        raise RuntimeError("NUMBA_ENABLE_CUDASIM=1 is not set: numba would need a GPU")
    # The simulator swaps the kernels' global ``cuda`` for its thread-aware fake: it must be a module global.
    global cuda, float32
    from numba import cuda, float32

    tpb = NUMBA_TPB

    @cuda.jit
    def fast_matmul(A, B, C):
        # numba documentation, "Matrix multiplication": square tiles staged through shared memory.
        sA = cuda.shared.array(shape=(tpb, tpb), dtype=float32)
        sB = cuda.shared.array(shape=(tpb, tpb), dtype=float32)
        x, y = cuda.grid(2)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        bpg = cuda.gridDim.x
        tmp = float32(0.)
        for i in range(bpg):
            sA[ty, tx] = 0
            sB[ty, tx] = 0
            if y < A.shape[0] and (tx + i * tpb) < A.shape[1]:
                sA[ty, tx] = A[y, tx + i * tpb]
            if x < B.shape[1] and (ty + i * tpb) < B.shape[0]:
                sB[ty, tx] = B[ty + i * tpb, x]
            cuda.syncthreads()
            for j in range(tpb):
                tmp += sA[ty, j] * sB[j, tx]
            cuda.syncthreads()
        if y < C.shape[0] and x < C.shape[1]:
            C[y, x] = tmp

    nt = NUMBA_SOFTMAX_THREADS

    @cuda.jit
    def softmax(X, Y):
        # One block per row: per-thread strided max / sum, then a shared-memory tree reduction.
        buf = cuda.shared.array(shape=nt, dtype=float32)
        row = cuda.blockIdx.x
        t = cuda.threadIdx.x
        cols = X.shape[1]
        m = float32(-3.4e38)
        for j in range(t, cols, nt):
            m = max(m, X[row, j])
        buf[t] = m
        cuda.syncthreads()
        s = nt // 2
        while s > 0:
            if t < s:
                buf[t] = max(buf[t], buf[t + s])
            cuda.syncthreads()
            s //= 2
        row_max = buf[0]
        cuda.syncthreads()
        acc = float32(0.)
        for j in range(t, cols, nt):
            e = float32(np.exp(X[row, j] - row_max))
            Y[row, j] = e
            acc += e
        buf[t] = acc
        cuda.syncthreads()
        s = nt // 2
        while s > 0:
            if t < s:
                buf[t] = buf[t] + buf[t + s]
            cuda.syncthreads()
            s //= 2
        total = buf[0]
        for j in range(t, cols, nt):
            Y[row, j] = Y[row, j] / total

    def run(workload, arrays):
        if workload == "matmul":
            a, b = arrays
            c = np.zeros((a.shape[0], b.shape[1]), np.float32)
            blocks = ((c.shape[1] + tpb - 1) // tpb, (c.shape[0] + tpb - 1) // tpb)
            fast_matmul[blocks, (tpb, tpb)](a, b, c)
            return c
        x, = arrays
        y = np.zeros_like(x)
        softmax[x.shape[0], nt](x, y)
        return y

    import numba
    versions = {"numba": numba.__version__}
    try:
        from importlib.metadata import version
        versions["numba-cuda"] = version("numba-cuda")
    except Exception:
        pass
    return run, versions


# ---------------------------------------------------------------------- Triton interpreter
def triton_peer():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                      stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                      BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                      GROUP_SIZE_M: tl.constexpr):
        # Triton tutorial 03-matrix-multiplication (grouped ordering), float32 accumulator.
        pid = tl.program_id(axis=0)
        num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
        num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
        num_pid_in_group = GROUP_SIZE_M * num_pid_n
        group_id = pid // num_pid_in_group
        first_pid_m = group_id * GROUP_SIZE_M
        group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
        pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
        pid_n = (pid % num_pid_in_group) // group_size_m
        offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
        offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
        offs_k = tl.arange(0, BLOCK_SIZE_K)
        a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
        accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
            a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
            accumulator = tl.dot(a, b, accumulator, input_precision="ieee")
            a_ptrs += BLOCK_SIZE_K * stride_ak
            b_ptrs += BLOCK_SIZE_K * stride_bk
        offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
        offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
        c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
        tl.store(c_ptrs, accumulator, mask=c_mask)

    @triton.jit
    def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                       BLOCK_SIZE: tl.constexpr):
        # Triton tutorial 02-fused-softmax, one program per row.
        row_idx = tl.program_id(0)
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = tl.arange(0, BLOCK_SIZE)
        input_ptrs = row_start_ptr + col_offsets
        mask = col_offsets < n_cols
        row = tl.load(input_ptrs, mask=mask, other=-float("inf"))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        tl.store(output_row_start_ptr + col_offsets, softmax_output, mask=mask)

    def run(workload, arrays):
        if workload == "matmul":
            a, b = (torch.from_numpy(x) for x in arrays)
            M, K = a.shape
            N = b.shape[1]
            c = torch.empty((M, N), dtype=torch.float32)
            grid = (triton.cdiv(M, TRITON_BLOCK_M) * triton.cdiv(N, TRITON_BLOCK_N),)
            matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                c.stride(0), c.stride(1), BLOCK_SIZE_M=TRITON_BLOCK_M, BLOCK_SIZE_N=TRITON_BLOCK_N,
                                BLOCK_SIZE_K=TRITON_BLOCK_K, GROUP_SIZE_M=TRITON_GROUP_M)
            return c.numpy()
        x = torch.from_numpy(arrays[0])
        y = torch.empty_like(x)
        n_rows, n_cols = x.shape
        softmax_kernel[(n_rows,)](y, x, x.stride(0), y.stride(0), n_rows, n_cols,
                                  BLOCK_SIZE=triton.next_power_of_2(n_cols))
        return y.numpy()

    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("TRITON_INTERPRET=1 is not set: Triton would need a GPU")
    return run, {"triton": triton.__version__, "torch": torch.__version__}


PEERS = {"numba": numba_peer, "triton": triton_peer}


def serve(peer: str) -> None:
    """Answer JSON requests on stdin, one per line, until EOF."""
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    sys.stdout = sys.stderr  # whatever the peers print must not mix with the replies
    try:
        run, versions = PEERS[peer]()
        setup_error = None
    except Exception as exc:  # a missing or broken install: reported by "probe"
        run, versions, setup_error = None, {}, f"{type(exc).__name__}: {exc}".splitlines()[0]
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "probe":
            reply = {"ok": setup_error is None, "versions": versions, "error": setup_error}
        elif setup_error is not None:
            reply = {"ok": False, "error": setup_error}
        else:
            workload = req["workload"]
            arrays = inputs(workload, req)
            try:
                start = time.perf_counter()
                out = run(workload, arrays)
                seconds = time.perf_counter() - start
                err = float(np.max(np.abs(np.asarray(out, np.float64) - reference(workload, arrays))))
                reply = {"ok": True, "seconds": seconds, "max_abs_err": err}
            except Exception as exc:
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
        print(json.dumps(reply), file=replies, flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "serve" or sys.argv[2] not in PEERS:
        sys.exit(f"usage: {sys.argv[0]} serve {{{','.join(PEERS)}}}")
    serve(sys.argv[2])
