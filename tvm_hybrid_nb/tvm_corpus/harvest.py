"""Harvesting: every ``@T.prim_func`` in a tree of TVM test files, found with :mod:`ast` (no
import, no TVM), and its rebuilding in a worker: the imports and simple assignments of the scopes
around it in a fresh namespace, then its own source through ``tvm.script.parse``."""
from __future__ import annotations

import ast
import errno
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


#: Decorators that make a PrimFunc (as TVM's tests spell them).
_PRIM_FUNC_DECORATORS = ("T.prim_func", "tvm.script.tirx.prim_func", "tirx.prim_func", "prim_func")


# ---------------------------------------------------------------------- harvest (ast only, no TVM)
@dataclass(frozen=True)
class HarvestedFunc:
    """Where one ``@T.prim_func`` definition is: ``path`` (absolute), ``origin`` (``file:qualname``)."""

    path: str
    rel: str
    qualname: str
    lineno: int

    @property
    def origin(self) -> str:
        return f"{self.rel}:{self.qualname}"

    @property
    def group(self) -> str:
        """The directory the test file is in, relative to the harvested root (the table's rows)."""
        parent = str(Path(self.rel).parent)
        return "." if parent in ("", ".") else parent


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    try:
        return ast.unparse(target)
    except Exception:  # pragma: no cover - ast.unparse handles every expression
        return ""


def _is_prim_func(node: ast.AST) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
        _decorator_name(d) in _PRIM_FUNC_DECORATORS for d in node.decorator_list)


def _scoped_children(node: ast.AST):
    """Statements directly in ``node``'s scope, descending into if/for/with/try but not into defs."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield child
        elif isinstance(child, ast.stmt):
            yield child
            yield from _scoped_children(child)


def _find_prim_funcs(tree: ast.Module):
    """(qualname, FunctionDef node, enclosing scopes) of every ``@T.prim_func`` in ``tree``."""
    found = []

    def walk(scope: ast.AST, chain: list, prefix: str) -> None:
        for node in _scoped_children(scope):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + node.name
                if _is_prim_func(node):
                    found.append((name, node, chain))
                    continue  # a PrimFunc's body is TIR, nothing to harvest inside it
                walk(node, chain + [node], name + ".")
            elif isinstance(node, ast.ClassDef):
                walk(node, chain + [node], prefix + node.name + ".")

    walk(tree, [tree], "")
    return found


def harvest(root: str | os.PathLike) -> list[HarvestedFunc]:
    """Every ``@T.prim_func`` definition in the ``.py`` files under ``root`` (a directory or one file),
    found with :mod:`ast`; files that do not parse as Python are skipped.  Sorted by file and line."""
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(root))
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*.py") if p.is_file())
    base = root.parent if root.is_file() else root
    out = []
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        rel = str(path.relative_to(base))
        for qualname, node, _chain in _find_prim_funcs(tree):
            out.append(HarvestedFunc(str(path.resolve()), rel, qualname, node.lineno))
    return out


# ---------------------------------------------------------------------- construct (in the worker)
_PRELUDE = """\
import numpy
import numpy as np
import tvm
from tvm.script import tirx as T
from tvm.script import ir as I
"""


def _simple_statement(node: ast.stmt, module_level: bool) -> bool:
    """Statements run to rebuild a function's surroundings: imports and assignments to names; at module
    level also helper function definitions (``@T.macro`` and plain ones) that are not PrimFuncs."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(node, ast.Assign):
        return all(isinstance(t, (ast.Name, ast.Tuple)) for t in node.targets)
    if isinstance(node, ast.AnnAssign):
        return node.value is not None and isinstance(node.target, ast.Name)
    if module_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return not _is_prim_func(node) and not node.name.startswith("test")
    return False


def _check_well_formed(node: ast.FunctionDef) -> bool:
    for d in node.decorator_list:
        if isinstance(d, ast.Call) and _decorator_name(d) in _PRIM_FUNC_DECORATORS:
            for kw in d.keywords:
                if kw.arg == "check_well_formed" and isinstance(kw.value, ast.Constant):
                    return bool(kw.value.value)
    return True


def construct(item: HarvestedFunc, _cache: dict = {},  # noqa: B006 - a per-process parse cache
              report: Callable[[str], None] = lambda phase: None):
    """The PrimFunc ``item`` defines, rebuilt without importing its test module.

    The imports and simple assignments of every enclosing scope that precede the function run (each on
    its own; one that fails is skipped), then its source, decorators but the PrimFunc one dropped,
    goes through ``tvm.script.parse`` with that namespace (``report("parse")`` first).
    """
    import tvm

    if item.path not in _cache:
        text = Path(item.path).read_text(encoding="utf-8")
        _cache.clear()
        _cache[item.path] = (text.splitlines(keepends=True), ast.parse(text, filename=item.path))
    lines, tree = _cache[item.path]
    match = [(q, n, c) for q, n, c in _find_prim_funcs(tree) if n.lineno == item.lineno]
    if not match:
        raise LookupError(f"no @T.prim_func at {item.rel}:{item.lineno}")
    _, node, chain = match[0]
    namespace: dict = {"__name__": "tvm_corpus_snippet", "__file__": item.path}
    exec(compile(_PRELUDE, "<prelude>", "exec"), namespace)
    for depth, scope in enumerate(chain):
        child = chain[depth + 1] if depth + 1 < len(chain) else node
        for stmt in _scoped_children(scope):
            if stmt.lineno >= child.lineno or not _simple_statement(stmt, depth == 0):
                continue
            if any(stmt is c for c in chain):
                continue
            try:
                exec(compile(ast.Module([stmt], []), item.path, "exec"), namespace)
            except BaseException as exc:  # noqa: BLE001 - the test's own code; skip what fails
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
    report("parse")
    body = textwrap.dedent("".join(lines[node.lineno - 1:node.end_lineno]))
    pf_decorator = next(d for d in node.decorator_list if _decorator_name(d) in _PRIM_FUNC_DECORATORS)
    source = "@" + ast.unparse(pf_decorator) + "\n" + body
    func = tvm.script.parse(source, extra_vars=namespace, check_well_formed=_check_well_formed(node))
    if not isinstance(func, tvm.tirx.PrimFunc):
        raise TypeError(f"parsed a {type(func).__name__}, not a PrimFunc")
    return func
