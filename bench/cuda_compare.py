"""The zoo's GPU kernels run on a real GPU against their emulation: ``prepare`` here, ``run`` there, ``compare`` here.

The emulator's GPU answers are otherwise only checked against the llvm build of the unscheduled kernel
(a CPU).  This compares them with what TVM's own CUDA build of the same scheduled kernel computes on an
NVIDIA GPU, on the same inputs.

``prepare OUT`` (a machine without a GPU): every zoo kernel scheduled with the dlight GPU rules is built
with TVM's real pipeline (``hybrid_nb.build``, the same build the zoo emulates), its CUDA code compiled to
PTX with NVRTC (``compute_80``: the zoo's target is ``sm_80``; the driver JIT-compiles it for the GPU at
hand) and exported as a shared library; the zoo's seeded inputs and the fast emulation of the last stage
before ``MakePackedAPI`` are saved.  Needs ``cuda-bindings``, ``nvidia-cuda-nvrtc``, ``nvidia-cuda-runtime``
and ``nvidia-cuda-cccl`` (pip; bench only, never a dependency of the package).  TVM's CUDA runtime library
needs ``libcuda.so.1`` to load, which a machine without a driver lacks: ``prepare`` builds a stub of the
functions it links (never called: nothing runs here).

``run`` (the GPU machine; ``bench/cuda_device_run.py``, which needs only ``tvm_ffi``, ``numpy`` and ``torch``)
calls every exported kernel on the saved inputs and saves every buffer after the call.

``compare OUT RESULTS_DIR`` prints, per kernel, whether the GPU's buffers equal the emulation's bit for bit,
within the rounding that CUDA's fast math and fused multiply-adds may change, or differ.

    python bench/cuda_compare.py prepare /tmp/cuda_bundle [--models zoo] [--extra models.py:TABLE]
    python bench/cuda_compare.py compare /tmp/cuda_bundle RESULTS_DIR
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

#: The CUDA driver functions that TVM's CUDA runtime library links; the stub defines them (returning an error).
DRIVER_FUNCTIONS = ("cuDeviceGetName", "cuFuncSetAttribute", "cuGetErrorName", "cuGetErrorString",
                    "cuLaunchKernelEx", "cuModuleGetFunction", "cuModuleLoadData", "cuModuleUnload",
                    "cuTensorMapEncodeTiled")


def _nvidia_root() -> Path:
    import nvidia

    for base in nvidia.__path__:
        if (Path(base) / "cu13" / "include" / "cuda_runtime.h").exists():
            return Path(base) / "cu13"
    raise SystemExit("prepare needs the CUDA 13 headers and NVRTC: pip install cuda-bindings "
                     "'nvidia-cuda-nvrtc==13.0.*' 'nvidia-cuda-runtime==13.0.*' 'nvidia-cuda-cccl==13.0.*'")


def _toolkit(work: Path) -> tuple[Path, Path]:
    """``(CUDA_PATH, stub dir)``: a CUDA root laid out as TVM's NVRTC path looks for it, and a libcuda stub."""
    cu13 = _nvidia_root()
    root = work / "cuda"
    (root / "targets" / "x86_64-linux").mkdir(parents=True, exist_ok=True)
    for link, to in ((root / "include", cu13 / "include"),
                     (root / "targets" / "x86_64-linux" / "include", cu13 / "include")):
        if not link.exists():
            link.symlink_to(to)
    stub = work / "stub"
    stub.mkdir(exist_ok=True)
    (stub / "stub.c").write_text("".join(f"int {name}(void) {{ return 999; }}\n" for name in DRIVER_FUNCTIONS))
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(stub / "libcuda.so.1"), "-Wl,-soname,libcuda.so.1",
                    str(stub / "stub.c")], check=True)
    return root, stub


def _reexec_with_toolkit(args) -> None:
    """Run ``prepare`` again with the CUDA libraries on the loader's path (it is read once, at start)."""
    work = Path(tempfile.mkdtemp(prefix="cuda_toolkit_"))
    root, stub = _toolkit(work)
    env = dict(os.environ, CUDA_PATH=str(root), CUDA_COMPARE_READY="1",
               LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(stub), str(_nvidia_root() / "lib"),
                                                             os.environ.get("LD_LIBRARY_PATH")])))
    sys.exit(subprocess.call([sys.executable, __file__, *sys.argv[1:]], env=env))


def _ptx_compiler() -> None:
    import tvm_ffi
    from tvm.support import nvcc

    @tvm_ffi.register_global_func("tvm_callback_cuda_compile", override=True)
    def _compile(code):
        # PTX, not an sm_80 cubin: the driver JIT-compiles it for the GPU it runs on.
        return nvcc.compile_cuda(code, target_format="ptx", arch="compute_80", compiler="nvrtc")


def _raw(value) -> np.ndarray:
    """An array's bytes (bfloat16 and float8 are ml_dtypes arrays, which torch cannot take)."""
    return np.ascontiguousarray(value).reshape(-1).view(np.uint8)


def _models(names: list[str], extra: list[str]) -> list:
    from tvm_hybrid_nb.zoo_models import models

    chosen = []
    if "zoo" in names:
        chosen += models()
    for spec in extra:
        path, _, table = spec.partition(":")
        namespace: dict = {"__name__": "cuda_compare_extra"}
        saved = sys.argv
        sys.argv = [path, "", ""]  # probe scripts read their arguments at import
        try:
            exec(compile(Path(path).read_text().split("\nnames, flavours =")[0], path, "exec"), namespace)
        finally:
            sys.argv = saved
        for name, make in namespace[table or "TABLE"].items():
            model, spec_ = make()
            chosen.append((f"{Path(path).stem}.{name}", model, spec_))
    return chosen


def _emulated_path(out: Path) -> Path:
    return out.with_name(out.name + "_emulated.npz")


def prepare(out: Path, names: list[str], extra: list[str], only: str | None) -> int:
    from tvm_hybrid_nb import module as hmodule
    from tvm_hybrid_nb import zoo
    from tvm_hybrid_nb.errors import EmulationError
    from tvm_hybrid_nb.zoo_reference import _without_integer_zeros

    _ptx_compiler()
    out.mkdir(parents=True, exist_ok=True)
    manifest, arrays = [], {}
    kernels = zoo.collect_kernels(_models(names, extra))
    for index, kernel in enumerate(kernels):
        if kernel.cuda is None or (only and only not in kernel.name):
            continue
        entry = {"index": index, "name": kernel.name}
        manifest.append(entry)
        start = time.perf_counter()
        try:
            target, mod = zoo.schedule(zoo._without_target(kernel.cuda), "dlight-gpu")
            hm = hmodule.build(mod, target=target, on_failure="keep")
            if hm.failure is not None:
                entry["skipped"] = f"TVM's build fails: {hm.failure.summary}"[:300]
                continue
            inputs = zoo._inputs(hm.params, 0, kernel.name)
            library = f"k{index}.so"
            hm.native.export_library(str(out / library))
            # The last stage before MakePackedAPI: the device kernels as TVM's CUDA code generator gets them.
            stage = max(s.index for s in hm.stages
                        if hm.packed_api_index is None or s.index < hm.packed_api_index)
            try:
                args = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
                hm.emulate(*args, stage=stage, mode="fast")
            except EmulationError as exc:
                if "division by zero" not in str(exc):
                    raise
                inputs = _without_integer_zeros(hm.params, inputs)  # a model that divides by a tensor
                args = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
                hm.emulate(*args, stage=stage, mode="fast")
            entry.update(library=library, stage=hm.stages[stage].label, params=[])
            for position, (param, given, emulated) in enumerate(zip(hm.params, inputs, args)):
                if not param.is_buffer:
                    entry["params"].append({"name": param.name, "scalar": int(given)})
                    continue
                key = f"k{index}_{position}"
                arrays[f"{key}_in"] = _raw(given)
                if param.is_output:
                    arrays[f"{key}_emu"] = _raw(emulated)
                entry["params"].append({"name": param.name, "dtype": str(given.dtype), "shape": list(given.shape),
                                        "key": key, "output": bool(param.is_output)})
        except Exception as exc:  # noqa: BLE001 - every kernel is reported, none stops the run
            entry["skipped"] = f"{type(exc).__name__}: {exc}"[:300]
        finally:
            entry["seconds"] = round(time.perf_counter() - start, 2)
            print(f"{entry['seconds']:6.1f} s  {kernel.name}  {entry.get('skipped', '')}", flush=True)
    np.savez_compressed(out / "inputs.npz", **{k: v for k, v in arrays.items() if k.endswith("_in")})
    # Beside the bundle, not in it: only the inputs travel to the GPU machine.
    np.savez_compressed(_emulated_path(out), **{k: v for k, v in arrays.items() if k.endswith("_emu")})
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    import tvm

    lib = Path(tvm.__file__).parent / "lib"
    for name in ("libtvm_runtime.so", "libtvm_runtime_cuda.so"):
        shutil.copy(lib / name, out / name)
    shutil.copy(_nvidia_root() / "lib" / "libcudart.so.13", out / "libcudart.so.13")
    print(f"{sum('library' in e for e in manifest)} kernels exported to {out}")
    return 0


def _typed(raw: np.ndarray, dtype: str, shape: list) -> np.ndarray:
    import ml_dtypes

    dtype = getattr(ml_dtypes, dtype, dtype)  # bfloat16 and float8 are ml_dtypes' own

    return raw.view(np.dtype(dtype)).reshape(shape)


def _verdict(got: np.ndarray, want: np.ndarray) -> tuple[str, str]:
    """``(kind, detail)``: ``identical`` bit for bit, ``rounding`` (within what fast math and fused
    multiply-adds change in float arithmetic), or ``differs``."""
    if got.tobytes() == want.tobytes():
        return "identical", ""
    kind = np.dtype(got.dtype).kind
    if kind not in "fV":  # ml_dtypes' bfloat16 and float8 are kind "V"
        bad = np.flatnonzero(got.reshape(-1) != want.reshape(-1))
        return "differs", f"{bad.size} of {got.size} elements, first at {bad[0]}: {got.reshape(-1)[bad[0]]} vs {want.reshape(-1)[bad[0]]}"
    g, w = got.astype(np.float64).reshape(-1), want.astype(np.float64).reshape(-1)
    nan_mismatch = np.isnan(g) != np.isnan(w)
    both = ~np.isnan(g) & ~np.isnan(w)
    inf_mismatch = both & (np.isinf(g) | np.isinf(w)) & (g != w)
    scale = max(float(np.max(np.abs(w[both & np.isfinite(w)]), initial=0.0)), 1e-30)
    eps = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23, "float64": 2.0 ** -52}.get(got.dtype.name, 2.0 ** -3)
    err = np.abs(g - w)[both & np.isfinite(g) & np.isfinite(w)]
    worst = float(err.max(initial=0.0))
    detail = f"max |diff| {worst:.3g} ({worst / scale / eps:.1f} eps of the largest |value| {scale:.3g})"
    if nan_mismatch.any() or inf_mismatch.any():
        return "differs", f"{int(nan_mismatch.sum())} NaN and {int(inf_mismatch.sum())} inf mismatches; {detail}"
    return ("rounding" if worst <= 64 * eps * scale else "differs"), detail


def compare(out: Path, results: Path) -> int:
    manifest = json.loads((out / "manifest.json").read_text())
    emulated = np.load(_emulated_path(out))
    on_gpu: dict = {}
    for part in sorted(results.glob("results*.npz")):
        on_gpu.update(np.load(part))
    errors = json.loads((results / "errors.json").read_text())
    counts: dict[str, int] = {}
    for entry in manifest:
        if "library" not in entry:
            kind, detail = "not built", entry.get("skipped", "")
        elif str(entry["index"]) in errors:
            kind, detail = "GPU run failed", errors[str(entry["index"])].strip().splitlines()[-1]
        else:
            verdicts = []
            for p in entry["params"]:
                if "key" not in p or not p["output"]:
                    continue
                if f"{p['key']}_gpu" not in on_gpu:
                    verdicts.append(("GPU run failed", f"{p['name']} missing"))
                    continue
                got = _typed(on_gpu[f"{p['key']}_gpu"], p["dtype"], p["shape"])
                want = _typed(emulated[f"{p['key']}_emu"], p["dtype"], p["shape"])
                kind, detail = _verdict(got, want)
                verdicts.append((kind, f"{p['name']}: {detail}" if detail else ""))
            order = ["GPU run failed", "differs", "rounding", "identical"]
            kind = min((k for k, _ in verdicts), key=order.index, default="identical")
            detail = "; ".join(d for k, d in verdicts if k == kind and d)
        counts[kind] = counts.get(kind, 0) + 1
        print(f"{kind:15s} {entry['name']:55s} {detail[:240]}")
    print("counts:", counts)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("out", type=Path)
    p.add_argument("--models", default="zoo", help="comma-separated: zoo")
    p.add_argument("--extra", action="append", default=[], help="PATH[:TABLE] of a probe script's model table")
    p.add_argument("--only", help="kernels whose name contains this")
    c = sub.add_parser("compare")
    c.add_argument("out", type=Path)
    c.add_argument("results", type=Path)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        if not os.environ.get("CUDA_COMPARE_READY"):
            _reexec_with_toolkit(args)
        return prepare(args.out, args.models.split(","), args.extra, args.only)
    return compare(args.out, args.results)


if __name__ == "__main__":
    sys.exit(main())
