"""Layering: nothing below the UI imports IPython or ipywidgets; the UI does not import TVM."""
from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import tvm_hybrid_nb

PACKAGE_DIR = Path(tvm_hybrid_nb.__file__).parent
UI_MODULES = {"ui", "magic"}


def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_modules_below_the_ui_never_import_ipython_or_ipywidgets():
    # Subpackages too (runtime/...): walk_packages names their modules "runtime._numerics" and so on.
    walked = (m.name.split(".", 1)[1] for m in pkgutil.walk_packages(tvm_hybrid_nb.__path__, "tvm_hybrid_nb."))
    below = sorted(name for name in walked if name.split(".")[0] not in UI_MODULES)
    assert {"presentation", "bisect", "module", "capture", "compare", "runtime", "runtime._numerics"} <= set(below)
    # Import them all, and exercise the presentation paths that load lazily (HTML, heat map).
    code = f"""
import importlib, sys
import numpy as np
for name in {below!r}:
    importlib.import_module("tvm_hybrid_nb." + name)
from tvm_hybrid_nb import presentation as P
P.highlight_python("x = 1")
P.diff_html("a\\n", "b\\n", "x", "y")
P.heatmap_png(np.eye(3, dtype=bool))
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("IPython", "ipywidgets", "ipykernel"))
print(",".join(bad))
"""
    assert _run(code).strip() == ""


def test_ui_does_not_import_tvm_and_the_package_import_is_light():
    code = """
import sys
import tvm_hybrid_nb
assert "tvm" not in sys.modules and "ipywidgets" not in sys.modules, "import tvm_hybrid_nb is not light"
import tvm_hybrid_nb.ui
print(",".join(sorted(m for m in sys.modules if m.split(".")[0] in ("tvm", "tvm_ffi"))))
"""
    assert _run(code).strip() == ""


def test_ipython_is_only_imported_by_the_magic():
    for path in PACKAGE_DIR.rglob("*.py"):
        if path.stem in UI_MODULES:
            continue
        text = path.read_text(encoding="utf-8")
        for banned in ("import IPython", "from IPython", "import ipywidgets", "from ipywidgets"):
            assert banned not in text, f"{path.name} contains {banned!r}"


def test_the_runtime_imports_only_numpy_and_the_standard_library():
    # Its helpers are copied into hybrid scripts that run with numpy alone: no TVM, no UI, and no
    # other tvm_hybrid_nb module, neither at import time nor inside a helper.
    runtime_dir = PACKAGE_DIR / "runtime"
    files = sorted(runtime_dir.glob("*.py"))
    assert {p.stem for p in files} >= {"__init__", "_numerics", "_memory", "_lanes", "_gpu", "_sanitizers"}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    assert node.level == 1, f"{path.name}:{node.lineno} imports from outside the runtime"
                    continue
                roots = [node.module.split(".")[0]]
            else:
                continue
            for root in roots:
                assert root == "numpy" or root in sys.stdlib_module_names, f"{path.name}:{node.lineno} imports {root}"
    names = [f"tvm_hybrid_nb.runtime.{p.stem}" for p in files if p.stem != "__init__"]
    code = f"""
import importlib, sys
for name in {names!r}:
    importlib.import_module(name)
print(",".join(sorted(m for m in sys.modules
                      if m.split(".")[0] in ("tvm", "tvm_ffi", "IPython", "ipywidgets", "ipykernel"))))
"""
    assert _run(code).strip() == ""
