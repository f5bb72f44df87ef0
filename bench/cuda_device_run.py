"""The GPU side of ``bench/cuda_compare.py``: run every exported kernel of a bundle on the GPU.

Needs only ``tvm_ffi`` (the wheel that matches the bundle's TVM), ``numpy`` and ``torch`` with CUDA: TVM's
runtime libraries travel in the bundle.  Each kernel gets the bundle's inputs (every buffer, outputs
included, so elements a kernel leaves unwritten hold the same values as in the emulation); every buffer
after the call is saved.  Kernels run in worker processes, a fresh one after a kernel that fails (a CUDA
error leaves the context unusable).

    python bench/cuda_device_run.py BUNDLE RESULTS_DIR [--workers N] [--parts DIR]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

TORCH_DTYPES = {"float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float64",
                "int8": "int8", "uint8": "uint8", "int16": "int16", "int32": "int32", "int64": "int64",
                "bool": "bool", "uint16": "uint16", "uint32": "uint32", "uint64": "uint64",
                "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}

#: Bytes of results per file brought back.
CHUNK_BYTES = 10 * 2 ** 20


def _load_runtime(bundle: Path) -> None:
    import torch

    __import__("tvm_ffi")  # loads libtvm_ffi.so, which the runtime libraries link
    torch.cuda.init()  # the driver and torch's CUDA runtime, which TVM's CUDA library then shares
    mapped = Path("/proc/self/maps").read_text()
    for name in ("libcudart.so.13", "libtvm_runtime.so", "libtvm_runtime_cuda.so"):
        if name not in mapped:
            ctypes.CDLL(str(bundle / name), mode=ctypes.RTLD_GLOBAL)


def _tensor(raw: np.ndarray, dtype: str, shape: list):
    import torch

    flat = torch.from_numpy(raw.copy())
    return flat.view(getattr(torch, TORCH_DTYPES[dtype])).reshape(shape).cuda()


def worker(bundle: Path, results: Path, indices: list[int]) -> int:
    import torch
    import tvm_ffi

    _load_runtime(bundle)
    manifest = {e["index"]: e for e in json.loads((bundle / "manifest.json").read_text())}
    inputs = np.load(bundle / "inputs.npz")
    for index in indices:
        entry = manifest[index]
        out, error = {}, None
        start = time.perf_counter()
        try:
            func = tvm_ffi.load_module(str(bundle / entry["library"]))["main"]
            tensors, args = {}, []
            for p in entry["params"]:
                if "scalar" in p:
                    args.append(p["scalar"])
                    continue
                tensors[p["key"]] = _tensor(inputs[f"{p['key']}_in"], p["dtype"], p["shape"])
                args.append(tvm_ffi.from_dlpack(tensors[p["key"]]))
            func(*args)
            torch.cuda.synchronize()
            for p in entry["params"]:
                if p.get("output"):
                    out[f"{p['key']}_gpu"] = tensors[p["key"]].cpu().reshape(-1).view(torch.uint8).numpy()
        except Exception:  # noqa: BLE001 - reported per kernel
            error = traceback.format_exc(limit=3)[-1500:]
        seconds = time.perf_counter() - start
        np.savez(results / f"r{index}.npz", **out)
        (results / f"r{index}.json").write_text(json.dumps({"error": error, "seconds": seconds}))
        if error is not None:
            return 3  # the CUDA context may be unusable: the next kernel starts a fresh process
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("bundle", type=Path)
    parser.add_argument("results", type=Path)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--kernel-timeout", type=float, default=90.0, help="seconds without a result before a worker is killed")
    parser.add_argument("--parts", type=Path, help="where each kernel's result is kept (default RESULTS/parts)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    parts = args.parts or args.results / "parts"
    parts.mkdir(parents=True, exist_ok=True)
    args.results.mkdir(parents=True, exist_ok=True)
    if args.worker is not None:
        return worker(args.bundle, parts, [int(i) for i in args.worker.split(",")])
    pending = [e["index"] for e in json.loads((args.bundle / "manifest.json").read_text()) if "library" in e]
    queues = [pending[i::args.workers] for i in range(args.workers)]
    running = []
    start = time.perf_counter()
    while queues or running:
        while queues and len(running) < args.workers:
            queue = queues.pop()
            if queue:
                cmd = [sys.executable, __file__, str(args.bundle), str(args.results), "--parts", str(parts), "--worker",
                       ",".join(map(str, queue))]
                running.append([subprocess.Popen(cmd), queue, 0, time.perf_counter()])
        time.sleep(0.2)
        for item in list(running):
            proc, queue, done, since = item
            left = [i for i in queue if not (parts / f"r{i}.json").exists()]
            if len(queue) - len(left) != done:
                item[2:] = [len(queue) - len(left), time.perf_counter()]
            elif proc.poll() is None and time.perf_counter() - since > args.kernel_timeout:
                proc.kill()  # a kernel that never returns (a GPU hang): reported, the rest go on
                proc.wait()
            if proc.poll() is None:
                continue
            running.remove(item)
            left = [i for i in queue if not (parts / f"r{i}.json").exists()]
            if left and proc.returncode != 3:  # died without saying why: that kernel killed it
                (parts / f"r{left[0]}.json").write_text(json.dumps({"error": f"process died or timed out ({proc.returncode})"}))
                left = left[1:]
            if left:
                queues.append(left)
    chunk, errors, size, written = {}, {}, 0, 0
    for index in pending:
        info = json.loads((parts / f"r{index}.json").read_text())
        if info.get("error"):
            errors[str(index)] = info["error"]
        if (parts / f"r{index}.npz").exists():
            for key, value in np.load(parts / f"r{index}.npz").items():
                chunk[key], size = value, size + value.nbytes
        if size > CHUNK_BYTES or index == pending[-1]:  # files that come back are at most 16 MB each
            np.savez_compressed(args.results / f"results{written}.npz", **chunk)
            chunk, size, written = {}, 0, written + 1
    (args.results / "errors.json").write_text(json.dumps(errors, indent=1))
    print(f"{len(pending)} kernels, {len(errors)} failed, {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
