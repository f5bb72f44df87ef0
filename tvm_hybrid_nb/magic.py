"""IPython glue: the ``%%hybrid_build`` cell magic and the ``%hybrid_build EXPR`` line magic.

This is the only module that talks to IPython.  Errors are translated here, once: the domain
exceptions of :mod:`tvm_hybrid_nb.errors`, exceptions raised by the cell and TVM's own errors all
become one :class:`~IPython.core.error.UsageError` line (the whole traceback with ``--verbose``).
The kernel stays alive, and a failed build never rebinds NAME.

Load with ``%load_ext tvm_hybrid_nb``; ``%%hybrid_build?`` shows the arguments.
"""
from __future__ import annotations

import ast
import re
from typing import Any, Callable, Sequence

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

#: Where ``%%hybrid_build`` binds the module when no NAME is given.
DEFAULT_NAME = "hybrid_mod"

_OPTION_RE = re.compile(r"(?:^|\s)--(?:target|reference|inputs|no-widget|dump|overwrite|verbose|help)(?=\s|=|$)|(?:^|\s)-h(?=\s|$)")


class _CellError(Exception):
    """The user's cell (or an option expression) raised; carries a one-line description."""

    def __init__(self, message: str, original: BaseException):
        super().__init__(message)
        self.original = original


def rendered_tvm_message(exc: BaseException) -> str | None:
    """TVM's rendered message when it shows the IR with ``^^^`` markers (schedule errors), else None."""
    text = str(exc)
    return text.strip() if "^^^" in text else None


def one_line(text: str, limit: int = 400) -> str:
    """Collapse ``text`` to its first non-empty line, at most ``limit`` characters."""
    for line in str(text).splitlines():
        if line.strip():
            text = line.strip()
            break
    else:
        text = str(text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe_exception(exc: BaseException) -> str:
    """One line for any exception: our own messages as they are, TVM's without the C++ trace."""
    from .errors import HybridError

    if isinstance(exc, HybridError):
        return one_line(str(exc))
    text = str(exc)
    if "\n" in text or type(exc).__module__.startswith(("tvm", "tvm_ffi")):
        try:
            from .capture import short_tvm_message

            text = short_tvm_message(exc)
        except Exception:  # keep the plain message when TVM itself is what failed to import
            pass
    message = one_line(text)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _error_line_in(exc: BaseException, filename: str) -> int | None:
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def split_line_form(line: str) -> tuple[str, str]:
    """Split the line of ``%hybrid_build EXPR [options]`` into (EXPR, options).

    The expression ends where the first known option (``--target`` …) starts.
    """
    match = _OPTION_RE.search(line)
    if match is None:
        return line.strip(), ""
    return line[: match.start()].strip(), line[match.start():].strip()


def complete_arguments(params: Sequence[Any], values: Sequence[Any]) -> list:
    """Every kernel argument from ``values``: all of them, or the inputs only.

    Given only the inputs (the parameters the kernel does not write), zero-filled outputs are
    added; their symbolic sizes are taken from the inputs.

    Raises
    ------
    UsageError
        When the count fits neither form or an output size cannot be inferred.
    """
    import numpy as np

    from .signature import check_allocation, dim_symbols, dim_value, numpy_dtype

    values = list(values)
    if len(values) == len(params):
        return values
    inputs = [p for p in params if not p.is_output]
    if len(values) != len(inputs):
        names = ", ".join(p.name for p in params)
        in_names = ", ".join(p.name for p in inputs)
        raise UsageError(f"--inputs gave {len(values)} values; the kernel takes {len(params)} ({names}) "
                         f"or, outputs left out, {len(inputs)} ({in_names})")
    sizes: dict[str, int] = {}
    for spec, value in zip(inputs, values):
        if spec.is_buffer and hasattr(value, "shape"):
            for dim, got in zip(spec.shape, value.shape):
                if isinstance(dim, str) and dim.isidentifier():
                    sizes.setdefault(dim, int(got))
    shapes: dict[int, list] = {}
    for index, spec in enumerate(params):
        if not spec.is_output:
            continue
        shape = []
        for dim in spec.shape:
            missing = [n for n in dim_symbols(dim) if n not in sizes]
            if missing:
                raise UsageError(f"--inputs: cannot tell the size {missing[0]} of output {spec.name}; "
                                 f"give every argument")
            shape.append(dim_value(dim, sizes))
        shapes[index] = shape
    total = sum(int(np.prod(shape, dtype=object)) * numpy_dtype(params[i].dtype).itemsize
                for i, shape in shapes.items())
    check_allocation(total, "the outputs (" + ", ".join(params[i].name for i in shapes) + ")")
    given = iter(values)
    return [np.zeros(shapes[i], numpy_dtype(spec.dtype)) if spec.is_output else next(given)
            for i, spec in enumerate(params)]


@magics_class
class HybridMagics(Magics):
    """Magics of tvm_hybrid_nb."""

    def __init__(self, shell=None, **kwargs):
        super().__init__(shell=shell, **kwargs)
        #: The explorer shown for each bound name, closed when a cell binds the name again.
        self._explorers: dict[str, Any] = {}

    @magic_arguments()
    @argument("name", nargs="?", default=None, metavar="NAME",
              help=f"cell form: variable to bind the HybridModule to (default {DEFAULT_NAME}); "
                   "line form: the expression to explore (EXPR)")
    @argument("--target", default=None, metavar="T", help="TVM target (default llvm)")
    @argument("--reference", default=None, metavar="FUNC",
              help="a Python function of the input arrays returning the expected output(s), "
                   "used by 'Emulate & compare' instead of the native build")
    @argument("--inputs", default=None, metavar="EXPR",
              help="an expression giving the arrays to compare on: every argument, or the inputs only "
                   "(default: seeded random values by dtype and shape)")
    @argument("--no-widget", action="store_true", help="show the HTML summary instead of the explorer widget")
    @argument("--dump", default=None, metavar="DIR",
              help="also write every stage to DIR (HybridModule.save); DIR must be new or empty")
    @argument("--overwrite", action="store_true",
              help="with --dump: replace a previous dump in DIR (only a directory holding nothing but a "
                   "dump is ever replaced)")
    @argument("--verbose", action="store_true", help="show full tracebacks, TVM's C++ trace included")
    @line_cell_magic
    def hybrid_build(self, line: str, cell: str | None = None):
        """Build a TVM schedule with every pass captured and show the pass explorer.

        Cell form:

            %%hybrid_build [NAME] [--target T] [--reference FUNC] [--inputs EXPR]
                           [--no-widget] [--dump DIR [--overwrite]] [--verbose]
            sch = ...          # runs in the notebook's namespace
            sch                # the last expression is built (anything thn.build takes)

        The HybridModule is bound to NAME (default ``hybrid_mod``) and the explorer is shown.  When a
        TVM pass fails, NAME is bound all the same (``NAME.failure`` says where and why) and the
        explorer ends with the failed pass.  Re-running the cell closes the explorer it showed before.

        Line form:

            %hybrid_build EXPR [--target T] [--reference FUNC] [--inputs EXPR] ...

        explores EXPR: a schedule, IRModule, PrimFunc, list of te.Tensor or HybridModule.  A module
        built from EXPR is bound to ``hybrid_mod``; a HybridModule is shown as it is.

        Errors are one line (``--verbose`` shows the whole traceback; a schedule error adds TVM's
        message with the IR, folded) and a cell that raised leaves NAME as it was.
        """
        if cell is None:
            expr, options = split_line_form(line)
            args = self._parse(options)
            if args.name is not None:  # a stray positional after an option
                raise UsageError(f"unexpected argument {args.name!r}: %hybrid_build EXPR [options]")
            if not expr:
                raise UsageError("%hybrid_build needs an expression: %hybrid_build EXPR [options], "
                                 "or use the cell form %%hybrid_build [NAME]")
            return self._run(args, lambda: self._eval(expr, "the expression", args.verbose), line_form=True)
        args = self._parse(line)
        name = args.name or DEFAULT_NAME
        if not name.isidentifier() or _is_keyword(name):
            raise UsageError(f"NAME must be a Python identifier, got {name!r}")
        return self._run(args, lambda: self._run_cell(cell, args.verbose), name=name)

    # ------------------------------------------------------------------ steps
    def _parse(self, options: str):
        try:
            args = parse_argstring(self.hybrid_build, options)
        except UsageError:
            raise
        except ValueError as exc:  # unbalanced quotes from the argument splitter
            raise UsageError(f"%hybrid_build: {exc}") from None
        # IPython splits arguments without removing quotes: --inputs "[a, b]" arrives quoted.
        for key in ("name", "target", "reference", "inputs", "dump"):
            setattr(args, key, _unquote(getattr(args, key)))
        if args.dump:
            import os

            args.dump = os.path.expanduser(args.dump)  # --dump ~/stages means the home directory
        return args

    def _run(self, args, produce: Callable[[], Any], name: str | None = None, line_form: bool = False):
        try:
            return self._build_and_show(args, produce, name, line_form)
        except UsageError:
            raise
        except _CellError as exc:
            if args.verbose:
                raise exc.original
            rendered = rendered_tvm_message(exc.original)
            if rendered is not None:  # the IR with TVM's ^^^ markers, folded under the one line
                from IPython.display import HTML, display

                from .presentation import tvm_error_html

                display(HTML(tvm_error_html(str(exc), rendered)))
            raise UsageError(str(exc)) from None
        except Exception as exc:  # the one translation of every error into one line
            if args.verbose:
                raise
            raise UsageError(describe_exception(exc)) from None

    def _build_and_show(self, args, produce: Callable[[], Any], name: str | None, line_form: bool):
        from . import ui
        from .module import HybridModule, build

        if args.overwrite and not args.dump:
            raise UsageError("--overwrite goes with --dump DIR")
        if args.dump:
            from .dump import check_output_directory

            check_output_directory(args.dump, args.overwrite)  # refuse before building, not after
        value = produce()
        reference = self._option_value(args.reference, "--reference", args.verbose)
        if reference is not None and not callable(reference):
            raise UsageError(f"--reference must name a function, got a {type(reference).__name__}")
        inputs = self._option_value(args.inputs, "--inputs", args.verbose)
        if inputs is not None and (isinstance(inputs, (str, bytes)) or not hasattr(inputs, "__len__")):
            raise UsageError(f"--inputs must be a list or tuple of arrays, got a {type(inputs).__name__}")

        if isinstance(value, HybridModule) and args.target is None:
            hm, built = value, False
        else:
            with _quiet_cuda_version_probe():
                hm, built = build(value, target=args.target or "llvm", on_failure="keep"), True
        arguments = complete_arguments(hm.params, inputs) if inputs is not None else None
        if arguments is not None:
            from .signature import bind_arguments

            bind_arguments(hm.params, arguments)  # wrong shape or dtype: one line naming the parameter

        bound = (DEFAULT_NAME if built else None) if line_form else name
        if bound is not None:
            self.shell.user_ns[bound] = hm

        from IPython.display import display

        if bound is not None:  # a re-run cell replaces its explorer: close the old one and its widgets
            previous = self._explorers.pop(bound, None)
            if previous is not None:
                previous.close()
        if args.no_widget:
            display(hm)
        else:
            shown = ui.explorer(hm, reference=reference, inputs=arguments)
            if bound is not None:
                self._explorers[bound] = shown
            display(shown)
        if args.dump:
            path = hm.save(args.dump, overwrite=args.overwrite)
            print(f"stages written to {path if path is not None else args.dump}")
        return None

    def _run_cell(self, cell: str, verbose: bool) -> Any:
        """Run ``cell`` in the user namespace and return the value of its last expression."""
        shell = self.shell
        source = shell.transform_cell(cell)
        filename = shell.compile.cache(source, shell.execution_count, raw_code=cell)
        try:
            tree = ast.parse(source, filename=filename)
        except SyntaxError as exc:
            raise _CellError(f"syntax error in the cell, line {exc.lineno}: {exc.msg}", exc) from None
        if not tree.body or not isinstance(tree.body[-1], ast.Expr):
            raise UsageError("the cell must end with an expression giving what to build "
                             "(a schedule, IRModule, PrimFunc or list of te.Tensor)")
        last = ast.Expression(tree.body[-1].value)
        body = ast.Module(body=tree.body[:-1], type_ignores=[])
        ns = shell.user_ns
        try:
            exec(compile(body, filename, "exec"), ns)  # noqa: S102 - the user's own cell
            return eval(compile(last, filename, "eval"), ns)  # noqa: S307
        except KeyboardInterrupt:
            raise
        except Exception as exc:
            line = _error_line_in(exc, filename)
            # Numbered as the notebook shows the cell: the %%hybrid_build line is line 1.
            stripped = len(cell) - len(cell.lstrip("\n"))
            where = f" (cell line {line + 1 + stripped})" if line else ""
            raise _CellError(f"the cell raised {describe_exception(exc)}{where}", exc) from None

    def _eval(self, expr: str, what: str, verbose: bool) -> Any:
        try:
            return eval(expr, self.shell.user_ns)  # noqa: S307 - the user's own expression
        except KeyboardInterrupt:
            raise
        except SyntaxError as exc:
            raise _CellError(f"{what} {expr!r} is not valid Python: {exc.msg}", exc) from None
        except Exception as exc:
            raise _CellError(f"{what} {expr!r} raised {describe_exception(exc)}", exc) from None

    def _option_value(self, expr: str | None, option: str, verbose: bool) -> Any:
        if expr is None:
            return None
        return self._eval(expr, option, verbose)


class _quiet_cuda_version_probe:
    """Hide TVM's "Unable to detect CUDA version, default to -arch=sm_50" note (no GPU here).

    TVM's C++ logging writes it to file descriptor 2 while a CUDA target builds; it means nothing
    to the notebook user.  Everything else written there is passed on to ``sys.stderr``.
    """

    NOTE = "Unable to detect CUDA version"

    def __enter__(self):
        import os
        import sys
        import tempfile

        self._saved = None
        try:
            sys.stderr.flush()
            self._file = tempfile.TemporaryFile()
            self._saved = os.dup(2)
            os.dup2(self._file.fileno(), 2)
        except (OSError, ValueError, AttributeError):  # no real fd 2 (some test runners): leave it
            self._saved = None
        return self

    def __exit__(self, *exc):
        import os
        import sys

        if self._saved is None:
            return False
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        text = self._file.read().decode("utf-8", "replace")
        self._file.close()
        kept = "".join(line for line in text.splitlines(keepends=True) if self.NOTE not in line)
        if kept:
            sys.stderr.write(kept)
        return False


def _unquote(value: str | None) -> str | None:
    if value is not None and len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return value


def _is_keyword(name: str) -> bool:
    import keyword

    return keyword.iskeyword(name)


#: Where ``%hybrid_verify`` binds its VerifyReport.
VERIFY_REPORT_NAME = "verify_report"


@magics_class
class VerifyMagics(Magics):
    """``%hybrid_verify``: verify every kernel of a model (see :func:`tvm_hybrid_nb.verification.verify`)."""

    @magic_arguments()
    @argument("model", metavar="MOD", help="expression giving the model: a Relax IRModule, an IRModule of "
                                           "PrimFuncs, or a list of PrimFuncs")
    @argument("--target", default="llvm", metavar="T", help="TVM target (default llvm)")
    @argument("--schedule", default=None, metavar="dlight",
              help="'dlight', or an expression giving a schedule function or a list of dlight rules")
    @argument("--passes", default=None, metavar="EXPR",
              help="an expression giving custom passes: a list of (AFTER, pass or function returning one)")
    @argument("--reference", default="native", choices=["native", "input"],
              help="native: the unscheduled kernel compiled for llvm (default); input: the stage-0 emulation")
    @argument("--stages", default="changed", choices=["changed", "all"], help="which stages to emulate")
    @argument("--workers", type=int, default=None, metavar="N", help="local worker processes (default: all cores)")
    @argument("--scheduler", default=None, metavar="ADDR", help="run on this Dask scheduler")
    @argument("--timeout", type=float, default=600.0, metavar="S", help="per-kernel time limit in seconds")
    @argument("--verbose", action="store_true", help="show full tracebacks")
    @line_magic
    def hybrid_verify(self, line: str):
        """Verify every kernel of a model at every changed pass and show the table.

        ::

            %hybrid_verify MOD [--target T] [--schedule dlight] [--passes EXPR] [--workers N]
                               [--scheduler ADDR] [--reference native|input] [--timeout S]

        A progress bar runs while the kernels are verified; then a table (kernel, outcome, first
        divergent pass, time) whose Explore buttons open a kernel's pass explorer.  The
        VerifyReport is bound to ``verify_report``.
        """
        try:
            args = parse_argstring(self.hybrid_verify, line)
        except UsageError:
            raise
        except ValueError as exc:
            raise UsageError(f"%hybrid_verify: {exc}") from None
        for key in ("model", "target", "schedule", "passes", "scheduler"):
            setattr(args, key, _unquote(getattr(args, key)))
        try:
            return self._verify_and_show(args)
        except UsageError:
            raise
        except Exception as exc:
            if args.verbose:
                raise
            raise UsageError(describe_exception(exc)) from None

    def _value(self, expr: str, what: str) -> Any:
        try:
            return eval(expr, self.shell.user_ns)  # noqa: S307 - the user's own expression
        except Exception as exc:
            raise UsageError(f"{what} {expr!r} raised {describe_exception(exc)}") from None

    def _verify_and_show(self, args) -> None:
        from IPython.display import display

        from . import ui
        from .verification import verify

        model = self._value(args.model, "MOD")
        schedule = args.schedule
        if schedule is not None and schedule != "dlight":
            schedule = self._value(schedule, "--schedule")
        passes = self._value(args.passes, "--passes") if args.passes else ()
        client = None
        if args.scheduler:
            try:
                from distributed import Client
            except ImportError:
                raise UsageError("--scheduler needs dask's distributed package "
                                 "(pip install tvm_hybrid_nb[cluster])") from None
            client = Client(args.scheduler, timeout=10)
        reports: list = []

        def open_kernel(name: str):
            return ui.explorer(reports[0].hybrid_module(name))

        view = ui.VerifyView(open_kernel)
        display(view)
        try:
            report = verify(model, target=args.target, schedule=schedule, reference=args.reference,
                            stages=args.stages, workers=args.workers, client=client, passes=passes,
                            timeout=args.timeout, progress=view.on_progress)
        finally:
            if client is not None:
                client.close()
        reports.append(report)
        self.shell.user_ns[VERIFY_REPORT_NAME] = report
        view.show(report)
        return None


# IPython's magic_arguments starts the help with an RST "::" line; `%%hybrid_build?` shows it as is.
HybridMagics.hybrid_build.__doc__ = re.sub(r"\A::\s*\n\s*\n\s*", "", HybridMagics.hybrid_build.__doc__ or "")


def load_ipython_extension(ipython) -> None:
    """Register ``%%hybrid_build`` / ``%hybrid_build`` and ``%hybrid_verify`` with ``ipython``."""
    ipython.register_magics(HybridMagics)
    ipython.register_magics(VerifyMagics)
