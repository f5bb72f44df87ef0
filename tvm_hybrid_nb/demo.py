"""The main job, end to end: ``python -m tvm_hybrid_nb.demo``.

Builds a real CPU matmul schedule with TVM's pipeline, prints its hybrid source and the passes that
changed it, emulates it with numpy (exact and fast), compares every emulatable stage with the natively
compiled kernel, and uses the kernel as an op in a larger TE computation.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns the process exit code (0 when every comparison matched)."""
    parser = argparse.ArgumentParser(prog="python -m tvm_hybrid_nb.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=64, help="matrix size (multiple of 8; default 64)")
    args = parser.parse_args(argv)

    import tvm
    from tvm import te

    import tvm_hybrid_nb as thn
    from tvm_hybrid_nb.examples import matmul_parallel_vectorize

    n = args.size
    example = matmul_parallel_vectorize(n)
    print(f"== Building a {n}x{n}x{n} float32 matmul (split 8x8, parallel, unroll, vectorize) for llvm")
    hm = thn.build(example.obj)
    print(hm)
    print(f"captured {len(hm.stages)} stages in {hm.build_seconds * 1e3:.0f} ms\n")

    print("== Hybrid source of stage 0 (runs with numpy alone)")
    print(hm.get_source(0))

    print("== Passes that changed the IR")
    for stage in hm.stages[1:]:
        if stage.changed:
            status = "emulatable" if stage.emulatable else f"not emulatable: {stage.reason}"
            print(f"  {stage.label:<32} {stage.seconds * 1e3:7.2f} ms  {status}")

    print("\n== Emulate stage 0 with numpy and compare with numpy's matmul")
    a, b, c = hm.random_inputs(seed=0)
    start = time.perf_counter()
    hm(a, b, c)
    exact_s = time.perf_counter() - start
    fast_c = np.zeros_like(c)
    start = time.perf_counter()
    hm.emulate(a, b, fast_c, mode="fast")
    fast_s = time.perf_counter() - start
    expected = a.astype(np.float64) @ b.astype(np.float64)
    print(f"exact {exact_s * 1e3:.1f} ms, fast {fast_s * 1e3:.1f} ms, fast == exact bit for bit: "
          f"{np.array_equal(c, fast_c)}, max |emulation - numpy| = {np.max(np.abs(c - expected)):.2e}")

    print("\n== Every emulatable stage against the native build")
    ok = True
    for stage in hm.emulatable_stages:
        if stage.index == 0 or stage.changed:
            result = hm.compare(a, b, np.zeros_like(c), stage=stage.index, mode="fast")
            ok &= result.ok
            print("  " + str(result).splitlines()[0])

    print("\n== The hybrid module as an op: D = matmul(X, W) * 2 + 1")
    x = te.placeholder((n, n), "float32", name="X")
    w = te.placeholder((n, n), "float32", name="W")
    y = hm(x, w)
    d = te.compute((n, n), lambda i, j: y[i, j] * 2.0 + 1.0, name="D")
    lib = tvm.tirx.build(te.create_prim_func([x, w, d]), target="llvm")
    out = tvm.runtime.tensor(np.zeros((n, n), np.float32))
    lib["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), out)
    op_err = float(np.max(np.abs(out.numpy() - (expected * 2 + 1))))
    op_ok = op_err < 1e-3 * n
    ok &= op_ok
    print(f"max |op - numpy| = {op_err:.2e} ({'MATCH' if op_ok else 'MISMATCH'})")
    print("\nall comparisons matched" if ok else "\nSOME COMPARISONS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
