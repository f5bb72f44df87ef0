"""Seconds to import ``tvm.s_tir.tensor_intrin`` (what dlight's GPU Matmul rule imports on first use,
248 TVMScript functions) as TVM does it and through ``tvmscript_parsing.import_tensor_intrinsics``,
each in a fresh process with the zoo's modules loaded.  Run: ``python bench/tvmscript_import.py``."""
import subprocess
import sys
from pathlib import Path

_SETUP = "import time; from tvm_hybrid_nb import zoo; from tvm import relax; import tvm.s_tir.dlight; t = time.time(); "
_WAYS = {
    "import tvm.s_tir.tensor_intrin": "import tvm.s_tir.tensor_intrin",
    "import_tensor_intrinsics()": "from tvm_hybrid_nb.tvmscript_parsing import import_tensor_intrinsics; "
                                  "import_tensor_intrinsics()",
}

if __name__ == "__main__":
    root = Path(__file__).resolve().parents[1]
    for label, code in _WAYS.items():
        out = subprocess.run([sys.executable, "-c", _SETUP + code + "; print(round(time.time() - t, 1))"],
                             cwd=root, capture_output=True, text=True, check=True)
        print(f"{label:34s} {out.stdout.strip()} s")
