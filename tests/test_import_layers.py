"""Layering of the package: every module imports only its own layer or lower ones.

The static tests read every module's imports with :mod:`ast` (module level and inside functions,
``importlib.import_module("...")`` of a literal name too) and check them against :data:`LAYERS`.
A subpackage (``codegen/``, ``runtime/``) has the layer of its name: its modules are mapped by the
first component after ``tvm_hybrid_nb.``.  The dynamic tests import modules in a fresh interpreter and
look at ``sys.modules``: nothing below the UI loads IPython or ipywidgets, the UI loads no TVM, and
``HybridModule.save`` loads neither the dump reader nor the presentation.
"""
from __future__ import annotations

import ast
import functools
import json
import pkgutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

import tvm_hybrid_nb

PACKAGE = "tvm_hybrid_nb"
PACKAGE_DIR = Path(tvm_hybrid_nb.__file__).parent
UI_MODULES = {"ui", "magic"}

#: The layers, lowest first.  A module may import modules of its own layer or of a lower one, never
#: of a higher one; within a layer the imports form no cycle (see the cycle test).  ``__init__`` is the
#: package itself (the facade ``thn.build`` / ``thn.load`` / ``thn.verify``, importing lazily).
LAYERS: list[tuple[str, set[str]]] = [
    ("data and errors", {"_version", "_compat", "errors", "signature", "compare", "files"}),
    ("emulation runtime (numpy only)", {"runtime", "loader"}),
    # native (a native run's tensors), specialize (as_op's sizes), tir_info (outputs, return value
    # and names read off the TIR): HybridModule's helpers that need TVM but nothing of the module;
    # tvmscript_parsing: TVMScript's decorators at a fifth of their cost (the zoo, verify, the tests)
    ("hybrid codegen and pipeline capture (TVM)", {"codegen", "capture", "examples", "dlpack", "native",
                                                   "specialize", "tir_info", "tvmscript_parsing"}),
    # stage (a captured stage) < module (HybridModule owns its stages);
    # dump_write (save) < module (HybridModule.save calls it) < dump (load/resume build DumpedModule)
    ("module and dumps (persistence)", {"stage", "dump_write", "module", "bisect", "dump"}),
    ("presentation (pygments, difflib: strings in, HTML out)", {"presentation", "html_report", "verify_report"}),
    ("tools over modules (thn.verify, fuzzing, model zoo)", {"verification", "fuzz", "zoo", "zoo_outcomes", "zoo_reference", "zoo_undefined", "zoo_thread_local", "zoo_diagnosis", "zoo_models",
                                                             "zoo_random", "tvm_corpus"}),
    ("UI (ipywidgets)", {"ui"}),
    ("magic (the only IPython glue)", {"magic"}),
    ("entry points", {"__init__", "__main__", "cli", "demo"}),
]

#: The UI package's modules, lowest first (the package has the layer "ui" of LAYERS): each imports
#: only modules of a lower entry here, so they form no cycle.  ``__init__`` is the package's facade.
UI_LAYERS: list[tuple[str, set[str]]] = [
    ("leaves: one-line errors, HTML and image widgets, closing a widget tree", {"basics"}),
    ("runs on a worker thread, Cancel, Kernel > Interrupt, the run controls", {"runs"}),
    ("run panels: Emulate & compare, Find first divergent pass", {"run_panels"}),
    ("stage panels: views, diff, plan fold, failed pass", {"stage_panels"}),
    ("pass list data; what the buttons do with a module", {"pass_list", "actions"}),
    ("the explorer; the verification table", {"explorer", "verify"}),
    ("the package facade", {"__init__"}),
]

#: The fuzzer's modules, lowest first (the package has the layer "fuzz" of LAYERS), like UI_LAYERS.
FUZZ_LAYERS: list[tuple[str, set[str]]] = [
    ("random TE computes", {"computes"}),
    ("schedule steps: draw, apply, replay", {"schedules"}),
    ("cases and their verdicts", {"cases"}),
    ("the evidence of TVM's miscompilations", {"findings"}),
    ("checking one case against the native kernel", {"oracle"}),
    ("the batch run, reduction, report and command line", {"runner"}),
    ("the package facade; python -m tvm_hybrid_nb.fuzz", {"__init__", "__main__"}),
]

#: The dump reader's modules, lowest first (the package has the layer "dump" of LAYERS).
DUMP_LAYERS: list[tuple[str, set[str]]] = [
    ("index.json, read and checked", {"index"}),
    ("a stage's module JSON, checked and read", {"stage_json"}),
    ("finishing the pipeline from a stage; passes by name", {"pipeline"}),
    ("DumpedModule", {"dumped"}),
    ("load and record_compare; resume", {"loading", "resuming"}),
    ("the package facade", {"__init__"}),
]

#: thn.verify's modules, lowest first (the package has the layer "verification" of LAYERS).
VERIFICATION_LAYERS: list[tuple[str, set[str]]] = [
    ("the settings' vocabulary and VerifyError", {"settings"}),
    ("a model's kernels, schedules, custom passes, build_kernel", {"kernels"}),
    ("results and the report as data", {"results"}),
    ("one job: plain data, run anywhere", {"jobs"}),
    ("runners: local worker pool; Dask", {"local", "cluster"}),
    ("the entry point, verify()", {"entry"}),
    ("the package facade", {"__init__"}),
]

#: The TVM-test corpus's modules, lowest first (the package has the layer "tvm_corpus" of LAYERS).
CORPUS_LAYERS: list[tuple[str, set[str]]] = [
    ("harvesting @T.prim_func definitions (ast) and rebuilding them", {"harvest"}),
    ("checking one function: native reference, stages", {"check"}),
    ("worker processes and the parent", {"run"}),
    ("the command's output; the worker's entry", {"cli", "__main__"}),
    ("the package facade", {"__init__"}),
]

#: Subpackages whose modules are ordered too: package -> its layers, lowest first.  Each module
#: imports only modules of a lower entry of its package's list, so they form no cycle.
PACKAGE_LAYERS: dict[str, list[tuple[str, set[str]]]] = {
    "ui": UI_LAYERS,
    "fuzz": FUZZ_LAYERS,
    "dump": DUMP_LAYERS,
    "verification": VERIFICATION_LAYERS,
    "tvm_corpus": CORPUS_LAYERS,
}

#: The upward imports allowed, each only as a function-level import inside the one function named:
#: (importer, function, imported) -> why.  Anything else going up fails.
HOOKS: dict[tuple[str, str, str], str] = {
    ("module", "HybridModule._repr_html_", "presentation"):
        "Jupyter's display protocol asks the object itself for its HTML. The import runs only when a "
        "notebook displays a module, and presentation imports nothing of this package (no cycle).",
}

#: Third-party packages and the lowest layer (index into LAYERS) allowed to import them.
THIRD_PARTY: dict[str, int] = {
    "numpy": 0, "ml_dtypes": 0,
    "tvm": 2, "tvm_ffi": 2,
    "pygments": 4, "matplotlib": 4,
    "cloudpickle": 5, "distributed": 5, "tqdm": 5,
    "ipywidgets": 6,
    "IPython": 7,
}


# ---------------------------------------------------------------------------------------------
# Reading the imports
@dataclass(frozen=True)
class Import:
    importer: str          # dotted module name, e.g. tvm_hybrid_nb.codegen.emit
    path: Path
    line: int
    statement: str         # the import, as ast.unparse writes it
    function: str | None   # qualified name of the enclosing function, None at module level
    target: str            # absolute dotted name imported

    def where(self, root: Path) -> str:
        place = f"in {self.function}()" if self.function else "at module level"
        return f"{self.path.relative_to(root.parent)}:{self.line} {place}: {self.statement!r}"


def package_modules(package_dir: Path) -> dict[str, Path]:
    """Every module of the package, dotted name -> file (a subpackage's ``__init__`` is the subpackage)."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def component(dotted: str) -> str:
    """The name that carries the layer: the first component after the package (``__init__`` for it)."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _resolve_from(importer: str, is_package: bool, node: ast.ImportFrom, modules: dict[str, Path]) -> list[str]:
    if node.level:
        base = importer.split(".") if is_package else importer.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    # ``from pkg import name``: the submodule pkg.name when there is one, else pkg itself
    return [f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names]


def _literal_dynamic_import(node: ast.Call, importer: str, is_package: bool) -> str | None:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
        return None
    text = arg.value
    if text.startswith("."):  # relative to the importer's package
        level = len(text) - len(text.lstrip("."))
        base = importer.split(".") if is_package else importer.split(".")[:-1]
        base = base[:len(base) - (level - 1)]
        return ".".join(base + ([text.lstrip(".")] if text.lstrip(".") else []))
    return text


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> list[Import]:
    """Every import in ``path`` (module ``name``), at module level or inside functions and classes."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, scope: list[str], function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            targets: list[str] = []
            if isinstance(child, ast.Import):
                targets = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                targets = _resolve_from(name, is_package, child, modules)
            elif isinstance(child, ast.Call):
                dynamic = _literal_dynamic_import(child, name, is_package)
                targets = [dynamic] if dynamic else []
            if targets:
                statement = ast.unparse(child)
                found.extend(Import(name, path, child.lineno, statement, function, t) for t in targets)
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = scope + [child.name]
                visit(child, inner, ".".join(inner))
            elif isinstance(child, ast.ClassDef):
                visit(child, scope + [child.name], function)
            else:
                visit(child, scope, function)

    visit(tree, [], None)
    return found


@functools.lru_cache(maxsize=None)
def all_imports(package_dir: Path) -> list[Import]:
    modules = package_modules(package_dir)
    return [imp for name, path in modules.items() for imp in imports_of(name, path, modules)]


def layer_of() -> dict[str, int]:
    out: dict[str, int] = {}
    for i, (_, names) in enumerate(LAYERS):
        for n in names:
            assert n not in out, f"LAYERS names {n!r} twice"
            out[n] = i
    return out


def _describe(layer: int) -> str:
    return f"layer {layer} ({LAYERS[layer][0]})"


def upward_imports(package_dir: Path) -> tuple[list[str], set[tuple[str, str, str]]]:
    """Messages for every package-internal import that goes to a higher layer (hooks excepted),
    and the hooks that were used."""
    layers = layer_of()
    problems, used = [], set()
    for imp in all_imports(package_dir):
        if imp.target != PACKAGE and not imp.target.startswith(PACKAGE + "."):
            continue
        src, dst = component(imp.importer), component(imp.target)
        if src == dst:
            continue
        if src not in layers or dst not in layers:
            missing = src if src not in layers else dst
            problems.append(f"{imp.where(package_dir)}: {missing!r} is in no layer of LAYERS; add it")
            continue
        if layers[dst] <= layers[src]:
            continue
        hook = (src, imp.function or "", dst)
        if hook in HOOKS:
            used.add(hook)
            continue
        problems.append(f"{imp.where(package_dir)}: {src} ({_describe(layers[src])}) imports {dst}, "
                        f"a higher {_describe(layers[dst])}")
    return list(dict.fromkeys(problems)), used


def import_cycles(package_dir: Path) -> list[str]:
    """Each cycle among the package's components (every import counted, hooks too): ``a -> b -> a``
    followed by the import statements that make its edges."""
    edges: dict[tuple[str, str], list[Import]] = {}
    for imp in all_imports(package_dir):
        if imp.target == PACKAGE or imp.target.startswith(PACKAGE + "."):
            src, dst = component(imp.importer), component(imp.target)
            if src != dst:
                edges.setdefault((src, dst), []).append(imp)
    graph: dict[str, list[str]] = {}
    for src, dst in sorted(edges):
        graph.setdefault(src, []).append(dst)
    cycles: list[str] = []
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        path = path + [node]
        for nxt in graph.get(node, ()):
            if state.get(nxt) == "open":  # on the current path: a cycle
                ring = path[path.index(nxt):] + [nxt]
                how = "; ".join(dict.fromkeys(imp.where(package_dir) for a, b in zip(ring, ring[1:])
                                              for imp in edges[a, b]))
                cycles.append(f"{' -> '.join(ring)} ({how})")
            elif nxt not in state:
                visit(nxt, path)
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return cycles


# ---------------------------------------------------------------------------------------------
# The package as it is
def test_layers_name_every_module_of_the_package_once():
    present = {component(name) for name in package_modules(PACKAGE_DIR)}
    named = set(layer_of())
    assert not present - named, f"modules in no layer of LAYERS (add them): {sorted(present - named)}"
    assert not named - present, f"LAYERS names modules that do not exist: {sorted(named - present)}"


@pytest.mark.parametrize("package", sorted(PACKAGE_LAYERS))
def test_package_layers_name_every_module_of_the_subpackage_once(package):
    layers = PACKAGE_LAYERS[package]
    present = {name.split(".")[2] if name.count(".") >= 2 else "__init__"
               for name in package_modules(PACKAGE_DIR) if component(name) == package}
    named = [n for _, names in layers for n in names]
    assert len(named) == len(set(named)), f"the layers of {package} name a module twice: {named}"
    assert present == set(named), (f"not in the layers of {package}: {sorted(present - set(named))}; "
                                   f"in them but not in {package}/: {sorted(set(named) - present)}")


@pytest.mark.parametrize("package", sorted(PACKAGE_LAYERS))
def test_subpackage_modules_import_only_lower_modules_of_their_package(package):
    layers = PACKAGE_LAYERS[package]
    order = {n: i for i, (_, names) in enumerate(layers) for n in names}
    prefix = f"{PACKAGE}.{package}"

    def sub(dotted: str) -> str:
        return dotted[len(prefix) + 1:].split(".")[0] if dotted.startswith(prefix + ".") else "__init__"

    problems = []
    for imp in all_imports(PACKAGE_DIR):
        if component(imp.importer) != package or not (imp.target == prefix or imp.target.startswith(prefix + ".")):
            continue
        src, dst = sub(imp.importer), sub(imp.target)
        if order[dst] >= order[src]:
            problems.append(f"{imp.where(PACKAGE_DIR)}: {package}.{src} ({layers[order[src]][0]}) imports "
                            f"{package}.{dst}, not a lower entry of its layers ({layers[order[dst]][0]})")
    assert not problems, "\n".join(problems)


def test_every_import_goes_to_the_same_layer_or_a_lower_one():
    problems, used = upward_imports(PACKAGE_DIR)
    assert not problems, "imports that go up a layer:\n" + "\n".join(problems)
    stale = set(HOOKS) - used
    assert not stale, f"HOOKS allows imports the package no longer makes (remove them): {sorted(stale)}"


def test_the_package_has_no_import_cycle():
    cycles = import_cycles(PACKAGE_DIR)
    assert not cycles, "import cycles: " + "; ".join(cycles)


def test_each_layer_imports_only_the_libraries_it_may():
    layers = layer_of()
    problems = []
    for imp in all_imports(PACKAGE_DIR):
        top = imp.target.split(".")[0]
        if top == PACKAGE or top in sys.stdlib_module_names or top == "__future__":
            continue
        here = layers.get(component(imp.importer))
        if here is None:
            continue  # reported by the coverage test
        if top not in THIRD_PARTY:
            problems.append(f"{imp.where(PACKAGE_DIR)}: {top!r} is not in THIRD_PARTY; say which layer may use it")
        elif THIRD_PARTY[top] > here:
            problems.append(f"{imp.where(PACKAGE_DIR)}: {_describe(here)} may not import {top} "
                            f"(allowed from {_describe(THIRD_PARTY[top])})")
    assert not problems, "\n".join(problems)


def test_the_checks_see_function_level_relative_and_subpackage_imports(tmp_path):
    """The checker itself: a made-up package with upward imports of every kind is caught, by name."""
    pkg = tmp_path / PACKAGE
    files = {
        "__init__.py": "",
        "errors.py": "from .module import HybridModule\n",
        "module.py": textwrap.dedent("""\
            from . import errors
            class HybridModule:
                def save(self):
                    from .dump import save
                def _repr_html_(self):
                    from .presentation import module_html
            """),
        "dump.py": "from .module import HybridModule\n",
        "presentation.py": "def f():\n    import importlib\n    importlib.import_module('tvm_hybrid_nb.ui')\n",
        "ui.py": "",
        "runtime/__init__.py": "from .kernels import load\n",
        "runtime/kernels.py": "from ..codegen import emit\nfrom . import helpers\n",
        "runtime/helpers.py": "import numpy\n",
        "codegen/__init__.py": "from ..errors import E\n",
    }
    for name, text in files.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    problems, used = upward_imports(pkg)
    text = "\n".join(problems)
    assert "errors.py:1 at module level: 'from .module import HybridModule'" in text
    assert "presentation.py:3 in f(): \"importlib.import_module('tvm_hybrid_nb.ui')\"" in text
    assert "runtime/kernels.py:1 at module level: 'from ..codegen import emit'" in text
    assert "runtime (layer 1 (emulation runtime (numpy only))) imports codegen" in text
    assert len(problems) == 3, text  # not the hook, not the downward or same-layer imports
    assert used == {("module", "HybridModule._repr_html_", "presentation")}
    # module <-> dump is within one layer: the cycle test catches it, naming the lazy import
    cycles = "\n".join(import_cycles(pkg))
    assert "errors -> module -> errors" in cycles or "module -> errors -> module" in cycles, cycles
    assert "dump -> module -> dump" in cycles or "module -> dump -> module" in cycles, cycles
    assert "module.py:4 in HybridModule.save(): 'from .dump import save'" in cycles


# ---------------------------------------------------------------------------------------------
# What actually loads
def _run(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_save_needs_neither_the_dump_reader_nor_the_presentation(tmp_path):
    code = f"""
import json, sys
from tvm import te
from tvm_hybrid_nb.module import build
A = te.placeholder((4,), "float32", name="A")
B = te.compute((4,), lambda i: A[i] + 1, name="B")
hm = build(te.create_prim_func([A, B]))
out = hm.save({str(tmp_path / "d")!r})
loaded = sorted(m for m in sys.modules if m in ("tvm_hybrid_nb.dump", "tvm_hybrid_nb.presentation"))
print(json.dumps([len(json.load(open(out / "index.json"))["stages"]), len(hm.stages), loaded]))
"""
    written, stages, loaded = json.loads(_run(code).strip().splitlines()[-1])
    assert written == stages > 1 and loaded == []


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
        if path.relative_to(PACKAGE_DIR).with_suffix("").parts[0] in UI_MODULES:  # ui.py or ui/
            continue
        text = path.read_text(encoding="utf-8")
        for banned in ("import IPython", "from IPython", "import ipywidgets", "from ipywidgets"):
            assert banned not in text, f"{path.relative_to(PACKAGE_DIR)} contains {banned!r}"


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
