"""Undefined behaviour in a zoo kernel or in its native reference: the sanitizers' alarms that other
inputs may avoid, whether the reference itself is undefined on the inputs, and TVM's own LLVM IR as
the evidence where no input avoids it (an ``nuw``/``nsw`` operation that overflows, a plain shift
by the bit width); TVM's own CUDA source where it keeps 8- and 16-bit arithmetic in C's ``int``
that the TIR wraps; and TVM's TIR at the input sizes where a symbolic size of 0 leaves a result
unwritten, divides by 0 or accesses an empty buffer."""
from __future__ import annotations

import re

import numpy as np

#: Says that a stage-0 difference is the reference's: the sanitizers find the native reference's own
#: kernel undefined on the seeded inputs (a shift by its bit width, an nsw/nuw overflow), so its
#: result there is no reference (the uint8 ``>> 8`` that CUDA C defines and TVM's llvm code does not).
REFERENCE_UNDEFINED = "the native reference is undefined on these inputs"
#: The sanitizers' words for an 8- or 16-bit result that C keeps in ``int`` and the TIR wraps.
PROMOTION_ALARM = "read before any store truncates it"
#: The sanitizer alarms of behaviour the target leaves undefined, which other inputs may avoid, or
#: gives a meaning of its own (a C target's promoted narrow values: some in every lane, ``~`` of a uint8).
UNDEFINED_ALARMS = (" overflow: ", "shift by ", PROMOTION_ALARM)

_LLVM_OPCODES = {"+": "add", "-": "sub", "*": "mul", "<<": "shl"}
_POISON_ALARM = re.compile(r"\b(u?int)(\d+) overflow: .*?TVM's llvm code marks \w+ (\S+) (nuw|nsw)\b")
_SHIFT_ALARM = re.compile(r"shift by (-?\d+) of a (\d+)-bit integer")


def reference_undefined(native, inputs, mode: str) -> str | None:
    """The sanitizers' alarm when the native reference's own kernel is undefined on ``inputs`` (a
    shift by its bit width, an overflow its llvm code marks nsw/nuw), else None."""
    from .errors import EmulationError

    args = [a.copy() if isinstance(a, np.ndarray) else a for a in inputs]
    try:
        native.emulate(*args, stage=0, mode=mode, check=True)
    except EmulationError as exc:
        text = str(exc).splitlines()[0]
        if any(alarm in text for alarm in UNDEFINED_ALARMS):
            return text.rsplit("): ", 1)[-1][:400]
    except Exception:  # noqa: BLE001 - no verdict on the reference: nothing said
        return None
    return None


def llvm_poison_evidence(mod, target, reason: str) -> str | None:
    """TVM's own evidence when an integer operation is undefined on every input the zoo tries (the
    sanitizers' ``reason``), from the LLVM IR of ``mod`` built for ``target`` (llvm):
    an overflow (a hash ``x * 2654435761`` in uint32), where TVM's ``CodeGenLLVM`` marks 32- and 64-bit
    arithmetic ``nuw``/``nsw``, or a shift count reaching the bit width, where it emits a plain LLVM
    shift; either is poison natively, where the model's meaning in relax (numpy's) wraps or gives 0.
    None unless the IR shows that instruction."""
    import tvm

    found, shift = _POISON_ALARM.search(reason), _SHIFT_ALARM.search(reason)
    if mod is None or (found is None and shift is None):
        return None
    if found is not None:
        kind, bits, op, flag = found.groups()
        opcode = _LLVM_OPCODES.get(op)
        if opcode is None:
            return None
        pattern = rf"%[\w.]+ = {opcode} (?:nuw |nsw )*(?<= ){flag} (?:nuw |nsw )*(?:<\d+ x i{bits}>|i{bits}) [^\n]*"
    else:
        count, bits = shift.groups()
        # a count that is a value, not a constant: index arithmetic shifts by constants
        pattern = rf"%[\w.]+ = (?:shl|lshr|ashr) (?:nuw |nsw |exact )*(?:<\d+ x i{bits}>|i{bits}) %[\w.]+, %[^\n]*!dbg[^\n]*"
    try:
        source = tvm.tirx.build(mod, target=target).inspect_source("ll")
    except Exception:  # noqa: BLE001 - no IR, no evidence
        return None
    line = re.search(pattern, source)
    if line is None:
        return None
    instruction = line.group(0).split(", !dbg")[0]
    if found is None:
        return (f"TVM's llvm code shifts {bits}-bit integers with a plain LLVM shift (the native build's LLVM IR: "
                f"`{instruction}`), whose result for a count of {bits} or more is poison, where relax's "
                f"(numpy's) shift gives 0 or the sign; the kernel's counts reach {count} on the seeded inputs "
                f"and on inputs in [-1, 1] alike, so no input gives a defined reference")
    return (f"TVM's llvm code generator emits {kind}{bits} `{op}` with `{flag}` (the native build's LLVM IR: "
            f"`{instruction}`), so where this kernel's {kind}{bits} arithmetic wraps, as "
            f"relax's (numpy's) meaning has it, the native result is poison; it overflows on the seeded inputs "
            f"and on inputs in [-1, 1] alike, so no input gives a defined reference")


_PROMOTED = re.compile(r"\b(u?int)(8|16) overflow: (-?\d+) (\S+) (-?\d+) = (-?\d+), outside .*?"
                       + PROMOTION_ALARM)
#: The sanitizers' words for ``~`` of an unsigned 8- or 16-bit value that C computes in ``int``.
_PROMOTED_INVERT = re.compile(r"\b(uint)(8|16) ~(\d+) = (\d+) in the TIR, " + PROMOTION_ALARM)
#: The spellings of each narrow type in TVM's CUDA source (``uchar``, ``ushort``: its own macros) and
#: Metal source (``char`` is signed there).
_C_TYPES = {"int8": "(?:signed char|char)", "uint8": "(?:unsigned char|uchar)", "int16": "short",
            "uint16": "(?:unsigned short|ushort)"}


def c_promotion_evidence(mod, target, reason: str) -> str | None:
    """TVM's own evidence for a ``check=True`` alarm that an 8- or 16-bit result is read unwrapped
    on a C-family GPU target (CUDA, Metal): the line of TVM's source for ``mod`` where that operation
    between values of the narrow C type (or ``~`` of one) is used other than stored into the narrow
    type (C promotes to ``int`` and keeps the ``int`` result; the TIR, and TVM's llvm build, wrap it).
    None unless the source shows it."""
    import tvm

    found, inverted = _PROMOTED.search(reason), _PROMOTED_INVERT.search(reason)
    language = "Metal" if target.kind.name == "metal" else "CUDA"
    if mod is None or (found is None and inverted is None):
        return None
    kind, bits = (found or inverted).group(1, 2)
    op = found.group(4) if found is not None else "~"
    ctype = _C_TYPES[f"{kind}{bits}"]
    try:
        lib = tvm.tirx.build(mod, target=target)
        source = "\n".join(m.inspect_source() for m in lib.imports)
    except Exception:  # noqa: BLE001 - no source, no evidence
        return None
    narrow = set(re.findall(rf"\b{ctype}\*? (?:__restrict__ )?(\w+)", source))
    for line in source.splitlines():
        if (f" {op} " if found is not None else "(~") not in line:
            continue
        for start, end in _parenthesized(line):
            text = line[start + 1:end - 1]
            operands = _split_at(text, op) if found is not None else (text[1:],) if text.startswith("~") else None
            if operands is None or not all(_is_narrow(o, narrow, ctype) for o in operands):
                continue
            before = line[:start]
            if re.search(rf"\(\({ctype}\)$", before):
                continue  # cast back to the narrow type at once
            stored = re.fullmatch(r"\s*(\w+)(?:\[[^\]]*\])? = ", before)
            if stored and stored.group(1) in narrow and line[end:].strip() == ";":
                continue  # stored into the narrow type: truncated as the TIR wraps
            if found is None:
                x, complement = inverted.group(3, 4)
                return (f"TVM's {language} code computes {kind}{bits} `~` in C's int and uses the result "
                        f"unwrapped (TVM's {language} source: `{line.strip()}`), so ~{x} is {-(int(x) + 1)} "
                        f"on the GPU where the TIR (and TVM's llvm build) has {complement}")
            x, y, value = found.group(3, 5, 6)
            return (f"TVM's {language} code computes {kind}{bits} `{op}` in C's int and uses the result "
                    f"unwrapped (TVM's {language} source: `{line.strip()}`), so where {x} {op} {y} = {value} "
                    f"leaves the {kind}{bits} range the GPU kernel computes with {value} where the TIR (and "
                    f"TVM's llvm build) wraps it")
    return None


def _parenthesized(line: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each parenthesized group of ``line``, innermost first (``end`` past its ``)``)."""
    open_at, groups = [], []
    for i, ch in enumerate(line):
        if ch == "(":
            open_at.append(i)
        elif ch == ")" and open_at:
            groups.append((open_at.pop(), i + 1))
    return groups


def _split_at(text: str, op: str) -> tuple[str, str] | None:
    """``(left, right)`` when ``text`` is ``left op right`` with ``op`` its one operator outside
    parentheses and brackets (TVM's C printer parenthesizes each binary operation); ``","``: the two
    arguments of a call."""
    token, depth, found, i = (", " if op == "," else f" {op} "), 0, [], 0
    while i < len(text):
        if text[i] in "([":
            depth += 1
        elif text[i] in ")]":
            depth -= 1
        elif depth == 0 and text.startswith(token, i):
            found.append(i)
            i += len(token)
            continue
        i += 1
    return (text[:found[0]].strip(), text[found[0] + len(token):].strip()) if len(found) == 1 else None


def _is_narrow(operand: str, narrow: set, ctype: str) -> bool:
    """Whether C operand ``operand`` holds a value of the narrow type ``ctype`` (a regex of its
    spellings) as the TIR has it: a variable or element of one, a constant or an expression cast to
    it, the min or max of such values, a bitwise operation of them, or one shifted right or divided (C types those
    ``int``, but they stay in the narrow range: ``(((uchar)(x << 2)) >> (uchar)3)``, ``(x / d)``)."""
    element = re.fullmatch(r"(\w+)(?:\[.*\])?", operand)
    if element is not None:
        return element.group(1) in narrow
    if re.fullmatch(rf"\({ctype}\)-?\d+", operand):
        return True
    if re.match(r"(?:min|max)\(", operand) and (3, len(operand)) in _parenthesized(operand):
        args = _split_at(operand[4:-1], ",")  # min/max of narrow values is one of them
        return args is not None and all(_is_narrow(a, narrow, ctype) for a in args)
    if (0, len(operand)) not in _parenthesized(operand):
        return False
    if re.match(rf"\(\({ctype}\)", operand):
        return True
    for op in (">>", "/", "%", "&", "|", "^"):
        parts = _split_at(operand[1:-1], op)
        if parts is not None:
            left_only = op in (">>", "/", "%")  # no larger than the left operand, whatever the right
            return _is_narrow(parts[0], narrow, ctype) and (left_only or _is_narrow(parts[1], narrow, ctype))
    return False


#: The sanitizers' words for a read of memory that nothing wrote, and the buffer they name.
_NEVER_WRITTEN = re.compile(r"read of (\w+)\[[^\]]*\], an element of a buffer allocation that was never written")
_DIVISIONS = ("prim.Div", "prim.Mod", "prim.FloorDiv", "prim.FloorMod")


def _plain(node) -> str:
    """The first line of ``node`` as TVMScript prints it, after the declarations of the variables and
    buffers it uses (``n = T.int64()``), integer literals without ``T.int64(...)``."""
    lines = [line for line in str(node).strip().splitlines() if not re.match(r"\w+ = T\.(?:u?int\d+|Buffer)\(", line)]
    return re.sub(r"T\.u?int\d+\((-?\d+)\)", r"\1", (lines or [""])[0])


class _KernelAtSizes:
    """A kernel's stores, loads and statement expressions, each with the loops around it and whether a
    branch statement guards it, and its loop extents evaluated at the sizes of ``args`` (its arguments
    in order: symbolic dimensions from the arrays' shapes, integer scalars as given).  Read from the
    TIR, independently of the emulation; :class:`LookupError` for a statement it does not read (a
    ``While``: its stores may run any number of times)."""

    def __init__(self, func, args: list) -> None:
        import tvm

        from .codegen.names import _dtype, _type_key

        self.analyzer, self.sizes = tvm.sym.Analyzer(), {}
        for param, arg in zip(func.params, args):
            if tvm.tirx.is_buffer_var(param):
                bound = [(dim, extent) for dim, extent in zip(param.shape, np.shape(arg)) if _type_key(dim) == "ir.Var"]
            else:
                bound = [(param, arg)] if isinstance(arg, (int, np.integer)) and "int" in _dtype(param) else []
            for var, value in bound:
                self.sizes[var.name] = int(value)
                self.analyzer.bind(var, tvm.tirx.const(int(value), _dtype(var)))
        self.stores: list = []       # (buffer, loops, branch, statement)
        self.loads: list = []        # (buffer, loops, branch, statement)
        self.expressions: list = []  # (expression, statement, loops, branch)
        self._walk(func.body, (), False)

    def value(self, expr) -> int | None:
        """``expr`` at these sizes, where it is a constant there."""
        from .codegen.names import _type_key

        value = self.analyzer.simplify(expr)
        return int(value.value) if _type_key(value) == "ir.IntImm" else None

    def runs(self, loops) -> bool:
        """Whether every loop of ``loops`` surely has an iteration."""
        return all((self.value(loop.extent) or 0) > 0 for loop in loops)

    def spelled(self, expr) -> tuple[str, str]:
        """``expr`` as :func:`_plain` spells it, and the sizes it names (``", n = 0"``)."""
        text = _plain(expr)
        bound = ", ".join(f"{n} = {v}" for n, v in self.sizes.items() if re.search(rf"\b{re.escape(n)}\b", text))
        return text, f", {bound}" if bound else ""

    def _walk(self, node, loops: tuple, branch: bool) -> None:
        from .codegen.names import _type_key

        key = _type_key(node)
        if key == "tirx.For":
            self._walk(node.body, loops + (node,), branch)
        elif key == "tirx.BufferStore":
            self.stores.append((node.buffer, loops, branch, node))
            for expr in [node.value, *node.indices]:
                self._expression(expr, node, loops, branch)
        elif key == "tirx.SeqStmt":
            for stmt in node.seq:
                self._walk(stmt, loops, branch)
        elif key == "s_tir.SBlockRealize":
            if node.block.init is not None:
                self._walk(node.block.init, loops, branch)
            self._walk(node.block.body, loops, branch)
        elif key == "tirx.IfThenElse":
            self._expression(node.condition, node, loops, branch)
            self._walk(node.then_case, loops, True)
            if node.else_case is not None:
                self._walk(node.else_case, loops, True)
        elif key in ("tirx.AttrStmt", "tirx.AllocBuffer", "tirx.DeclBuffer", "tirx.Bind", "tirx.Evaluate"):
            if key in ("tirx.Bind", "tirx.Evaluate"):
                self._expression(node.value, node, loops, branch)
            if getattr(node, "body", None) is not None:
                self._walk(node.body, loops, branch)
        else:
            raise LookupError(key)

    def _expression(self, expr, stmt, loops: tuple, branch: bool) -> None:
        from .codegen.names import _type_key
        from .zoo_thread_local import _children

        self.expressions.append((expr, stmt, loops, branch))
        # a load in an arm of an expression counts: what is claimed is about the stores, and the
        # alarm's read ran; a load under a branch statement does not
        self.loads.extend((n.source, loops, branch, stmt) for n in _children(expr) if _type_key(n) == "ir.TensorLoad")


def zero_trip_evidence(func, args: list, reason: str) -> str | None:
    """TVM's own kernel as the evidence for a ``check=True`` alarm that a buffer is read never written,
    when every store into it sits in a loop that runs no iteration at the sizes of ``args`` (``func``'s
    arguments in order): a reduction over an empty axis, whose init TVM runs in the first iteration of
    the reduction loop, leaves its result as the memory held it, and TVM's output is undefined there.
    The loop extents are evaluated from the arguments' shapes, not by the emulation; the read must sit
    outside such loops and outside any branch.  None unless that holds for the buffer the alarm names."""
    from .codegen.names import _key

    found = _NEVER_WRITTEN.search(reason)
    if found is None:
        return None
    try:
        kernel = _KernelAtSizes(func, args)
    except LookupError:
        return None
    name = found.group(1)

    def named(buffer) -> bool:  # as the hybrid script spells it (``x_red_temp.v0`` is ``x_red_temp_v0``)
        return re.sub(r"\W", "_", buffer.name) == name

    written = [loops for buffer, loops, *_ in kernel.stores if named(buffer)]
    read = [loops for buffer, loops, branch, _ in kernel.loads if named(buffer) and not branch]
    buffers = [buffer for buffer, *_ in kernel.stores + kernel.loads if named(buffer)]
    if not written or not read or len({_key(b) for b in buffers}) != 1:
        return None  # no store, no unconditional read, or two buffers of that name: nothing claimed
    empty = [next((loop for loop in loops if kernel.value(loop.extent) == 0), None) for loops in written]
    if None in empty or not any(kernel.runs(loops) for loops in read):
        return None  # a store that may run, or no read that surely runs
    extent, sizes = kernel.spelled(empty[0].extent)
    return (f"TVM's kernel writes {name} only inside loops that run no iteration at these sizes "
            f"(`for {empty[0].loop_var.name} in range({extent})`{sizes}) and reads it "
            f"outside them: a reduction over an empty axis, whose init TVM runs in the reduction loop's first "
            f"iteration, leaves the result as the memory held it, so TVM's native output there is undefined. "
            f"Found from the kernel's loop extents at these sizes, not by the emulation.")


def refused_reference_evidence(func, args: list, message: str) -> str | None:
    """TVM's own kernel as the evidence that no native run of it is defined at the sizes of ``args``
    (``func``'s arguments in order), where the zoo refused to run it (``message``, the emulation's
    division by zero or out-of-bounds access), read from the TIR, not the emulation: a statement
    that surely runs there (every loop around it has an iteration, no branch guards it) divides an
    integer by 0 (topi's cumsum of an empty axis indexes ``out_buf[v * n // n, v * n % n]`` before
    its loop; natively a trap, or LLVM folds it to ``v``), or reads or writes a buffer that is empty
    at these sizes (the same cumsum along the first axis, a gather from an empty axis).  None when
    there is no such statement."""
    from .codegen.names import _dtype, _type_key
    from .zoo_thread_local import _children

    try:
        kernel = _KernelAtSizes(func, args)
    except LookupError:
        return None
    if "division by zero" in message:
        for expr, stmt, loops, branch in kernel.expressions:
            if branch or not kernel.runs(loops):
                continue
            for node in _children(expr):
                if (_type_key(node) in _DIVISIONS and _dtype(node).startswith(("int", "uint"))
                        and kernel.value(node.b) == 0):
                    divisor, sizes = kernel.spelled(node.b)
                    return (f"TVM's kernel divides by `{divisor}`{sizes} in `{_plain(stmt)}`, a statement that "
                            f"runs at these sizes (every loop around it has an iteration, no branch guards it): "
                            f"an integer division by zero, undefined in TVM's native code. {_FROM_THE_TIR}")
    if "out-of-bounds" in message:
        accesses = [("writes", *store) for store in kernel.stores] + [("reads", *load) for load in kernel.loads]
        for verb, buffer, loops, branch, stmt in accesses:
            shape = [kernel.value(dim) for dim in buffer.shape]
            if 0 in shape and not branch and kernel.runs(loops):
                return (f"TVM's kernel {verb} {buffer.name}, empty at these sizes (shape {tuple(shape)}), in "
                        f"`{_plain(stmt)}`, a statement that runs at these sizes (every loop around it has an "
                        f"iteration, no branch guards it): every element of an empty buffer is out of bounds, so "
                        f"no input gives a defined native result. {_FROM_THE_TIR}")
    return None


_FROM_THE_TIR = "Found from the kernel at these sizes, not by the emulation."
