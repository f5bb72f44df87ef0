"""Post-processing of the generated Python ``ast``: splitting nests deeper than Python allows and
dropping dead assignments."""
from __future__ import annotations

import ast
import collections

from .names import _name, _store_name



# ---------------------------------------------------------------------- deep loop nests
#: Python compiles at most 20 statically nested blocks (loops, ``with``) per function; a loop that
#: would be nested deeper than this moves into a function of its own.
_MAX_NESTED_BLOCKS = 16


def _split_deep_nests(module: ast.Module) -> None:
    """Move every loop nested deeper than :data:`_MAX_NESTED_BLOCKS` into a nested function called
    in its place (``nonlocal`` for the names it shares with the enclosing function)."""
    counter = [0]
    for node in list(module.body):
        if isinstance(node, ast.FunctionDef):
            _split_function(node, counter)


def _split_function(fdef: ast.FunctionDef, counter: list) -> None:
    fdef.body = _split_block(fdef, fdef.body, 0, counter)


def _split_block(fdef, stmts: list, depth: int, counter: list) -> list:
    out = []
    for st in stmts:
        if isinstance(st, ast.FunctionDef):
            _split_function(st, counter)
        elif isinstance(st, (ast.For, ast.While)) and depth + 1 > _MAX_NESTED_BLOCKS:
            out.extend(_outline_loop(fdef, st, counter))
            continue
        elif isinstance(st, (ast.For, ast.While)):
            st.body = _split_block(fdef, st.body, depth + 1, counter)
            st.orelse = _split_block(fdef, st.orelse, depth + 1, counter)
        elif isinstance(st, ast.With):
            st.body = _split_block(fdef, st.body, depth + 1, counter)
        elif isinstance(st, ast.If):
            st.body = _split_block(fdef, st.body, depth, counter)
            st.orelse = _split_block(fdef, st.orelse, depth, counter)
        out.append(st)
    return out


def _outline_loop(fdef: ast.FunctionDef, loop: ast.stmt, counter: list) -> list:
    counter[0] += 1
    name = f"_nest_{counter[0]}"
    stored = _names_in([loop], ast.Store)
    params = {a.arg for a in fdef.args.args}
    shared = stored & (_names_in(fdef.body, None, skip=loop) | params)
    prebind = [ast.Assign([_store_name(n)], ast.Constant(None))
               for n in sorted(shared - _names_in(fdef.body, ast.Store, skip=loop) - params)]
    body = ([ast.Nonlocal(sorted(shared))] if shared else []) + [loop]
    inner = ast.FunctionDef(name=name, args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                                        defaults=[]),
                            body=body, decorator_list=[], returns=None, type_params=[])
    _split_function(inner, counter)
    call = ast.Call(_name(name), [], [])
    if not _returns(loop):
        return prebind + [inner, ast.Expr(call)]
    # A ``return`` in the loop (tirx.Return, never of None) must leave the kernel, not the nest.
    result = f"{name}_result"
    leave = ast.If(ast.Compare(_name(result), [ast.IsNot()], [ast.Constant(None)]), [ast.Return(_name(result))], [])
    return prebind + [inner, ast.Assign([_store_name(result)], call), leave]


def _returns(node: ast.AST) -> bool:
    """Whether ``node`` holds a ``return`` of its function (not one of a function defined in it)."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Return):
            return True
        stack.extend(c for c in ast.iter_child_nodes(n) if not isinstance(c, (ast.FunctionDef, ast.Lambda)))
    return False


def _names_in(nodes, kind, skip=None) -> set[str]:
    """Names that ``nodes`` bind (``kind`` ast.Store: assignments, ``nonlocal``, ``def``) or use at
    all (``kind`` None, including inside nested functions), leaving out the statement ``skip``."""
    found: set[str] = set()
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if node is skip:
            continue
        if isinstance(node, ast.Name) and (kind is None or isinstance(node.ctx, kind)):
            found.add(node.id)
        elif isinstance(node, ast.Nonlocal):
            found.update(node.names)
        elif isinstance(node, ast.FunctionDef):
            found.add(node.name)
            if kind is not None:  # its own assignments are its locals
                continue
        stack.extend(ast.iter_child_nodes(node))
    return found


# ---------------------------------------------------------------------- fast-mode dead code
#: Expression nodes that cannot raise or have effects (with the operators below and np.arange/reshape).
_PURE_NODES = (ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Tuple,
               ast.Load, ast.Add, ast.Sub, ast.Mult, ast.USub, ast.Not, ast.Invert, ast.And, ast.Or,
               ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _is_pure(expr: ast.expr) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            func = node.func
            if not (isinstance(func, ast.Attribute) and (func.attr == "reshape" or (
                    func.attr == "arange" and isinstance(func.value, ast.Name) and func.value.id == "np"))):
                return False
        elif isinstance(node, (ast.Attribute, ast.keyword)):
            continue
        elif not isinstance(node, _PURE_NODES):
            return False
    return True


def _drop_dead_assignments(module: ast.Module) -> None:
    """Fast mode: remove assignments of pure expressions to names nothing reads (block iterators
    and lane index arrays whose accesses all became strided views), until none is left.

    One walk counts the reads of each name; removing an assignment takes back the reads of its
    value, which may leave the assignments of those names unread in turn (a worklist, not a walk
    of the module per round)."""
    reads: collections.Counter = collections.Counter()
    assigned: dict[str, list] = {}  # name -> the candidate assignments to it
    bodies: list[tuple[ast.AST, str]] = []
    for node in ast.walk(module):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            reads[node.id] += 1
        for field_name in ("body", "orelse"):
            stmts = getattr(node, field_name, None)
            if not isinstance(stmts, list) or not stmts or not isinstance(stmts[0], ast.stmt):
                continue
            bodies.append((node, field_name))
            for st in stmts:
                if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
                    assigned.setdefault(st.targets[0].id, []).append(st)
    dead: set[int] = set()
    pending = [name for name in assigned if not reads[name]]
    while pending:
        for st in assigned.pop(pending.pop(), ()):
            if not _is_pure(st.value):
                continue
            dead.add(id(st))
            for node in ast.walk(st.value):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                    reads[node.id] -= 1
                    if not reads[node.id] and node.id in assigned:
                        pending.append(node.id)
    if not dead:
        return
    for node, field_name in bodies:
        stmts = getattr(node, field_name)
        kept = [st for st in stmts if id(st) not in dead]
        if len(kept) != len(stmts):
            setattr(node, field_name, kept or ([ast.Pass()] if field_name == "body" else []))


def _number_statements(module: ast.Module) -> None:
    """Give every statement a line number, all that ``ast.unparse`` reads of locations (it looks up
    type comments by line); the script is compiled from its text.  ``ast.fix_missing_locations``
    visits every expression node too: a fifth of a large unrolled stage's code generation."""
    stack: list = list(module.body)
    while stack:
        node = stack.pop()
        if not hasattr(node, "lineno"):
            node.lineno = node.end_lineno = 1
            node.col_offset = node.end_col_offset = 0
        for field in ("body", "orelse", "finalbody", "handlers"):
            stack.extend(child for child in getattr(node, field, ()) if isinstance(child, ast.AST))

