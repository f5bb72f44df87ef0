"""Command line: ``python -m tvm_hybrid_nb {dump,resume,report,emulate,verify}`` (also ``tvm-hybrid-nb``).

Every command prints one clear line on error and exits with a status scripts can rely on:
:data:`EXIT_OK`, :data:`EXIT_MISMATCH`, :data:`EXIT_USAGE` or :data:`EXIT_INTERNAL`.
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys
import traceback
from pathlib import Path
from typing import Any, Sequence

#: Success (and, for ``emulate``, every output matched).
EXIT_OK = 0
#: ``emulate``: an output mismatched, the emulation failed, or the stage cannot be emulated.
EXIT_MISMATCH = 1
#: Usage error or bad input: missing or corrupt files, a script without a schedule, a TVM build
#: error, an unknown pass or stage, a non-empty output directory.
EXIT_USAGE = 2
#: A bug in tvm_hybrid_nb (run with ``--traceback`` and report it).
EXIT_INTERNAL = 3

#: Names a script given to ``dump`` may define, looked up in this order.
SCRIPT_CALLABLE = "hybrid_target"
SCRIPT_VARIABLE = "schedule"
#: ``run_name`` of a script executed by ``dump`` (its ``if __name__ == "__main__":`` block does not run).
SCRIPT_RUN_NAME = "__tvm_hybrid_nb_dump__"

EPILOG = """\
exit status:
  0  success (emulate: every output matched the native build)
  1  emulate: an output mismatched, the emulation failed, or the stage cannot be emulated
  2  usage error or bad input: missing/corrupt files, script without a schedule,
     TVM build error, unknown pass or stage, non-empty output directory
  3  internal error in tvm_hybrid_nb (rerun with --traceback)
"""

DUMP_EPILOG = f"""\
script convention:
  SCRIPT.py is run with runpy (as module {SCRIPT_RUN_NAME!r}, so an
  `if __name__ == "__main__":` block is not run). It must define, at module level, either
    {SCRIPT_CALLABLE}()  a function taking no arguments that returns what to build, or
    {SCRIPT_VARIABLE}         what to build:
  a tvm.s_tir.Schedule, a tvm.IRModule with one PrimFunc, a tvm.tirx.PrimFunc or a list
  of te.Tensor (given to te.create_prim_func). An optional module-level `target`
  (e.g. "llvm" or {{"kind": "llvm", "mcpu": "skylake"}}) is used unless --target is given.

example SCRIPT.py:
  from tvm import te, s_tir
  A = te.placeholder((64,), "float32", name="A")
  B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
  schedule = s_tir.Schedule(te.create_prim_func([A, B]))

{EPILOG}"""


class CliError(Exception):
    """A usage error or bad input: printed as one line, exit status :data:`EXIT_USAGE`."""


class _OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (``PROG: error: ...``), exit status 2."""

    def error(self, message: str):
        self.exit(EXIT_USAGE, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")



def _run_script(path: Path, run_name: str) -> dict:
    """Run the user's script with runpy, as ``python SCRIPT.py`` would (sibling imports work), and
    return its namespace; a missing file, ``sys.exit`` or an exception is one :class:`CliError`."""
    if not path.is_file():
        raise CliError(f"{path}: no such script")
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        return runpy.run_path(str(path), run_name=run_name)
    except SystemExit as exc:
        raise CliError(f"{path}: the script called sys.exit({exc.code!r})") from None
    except Exception as exc:
        raise CliError(f"{path}: the script raised {type(exc).__name__}: {exc}") from exc
    finally:
        sys.path.remove(folder)


#: ``zoo --models SCRIPT.py``: the function the script defines that returns its models.
ZOO_MODELS_FUNCTION = "models"


def _zoo_models(args) -> list | None:
    """The models ``zoo`` checks: ``--models SCRIPT.py``'s, ``--random N`` chains, or the zoo's (None)."""
    if args.random is not None and args.models:
        raise CliError("zoo: --random and --models are exclusive: give one")
    if args.random is not None:
        if args.random < 1:
            raise CliError(f"zoo: --random wants a number of models of 1 or more, got {args.random}")
        from .zoo_random import INTEGER_DTYPES, random_models

        integer = args.family == "integer"
        if (args.dtype in INTEGER_DTYPES) != integer and args.dtype is not None:
            raise CliError(f"zoo: --dtype {args.dtype} does not go with --family {args.family}: "
                           f"integer dtypes ({', '.join(INTEGER_DTYPES)}) are for the integer family, "
                           f"float ones for the others")
        dtype = args.dtype or ("" if integer else "float32")
        return random_models(args.random, seed=args.seed, dtype=dtype, family=args.family)
    return load_zoo_models(args.models)


def load_zoo_models(script: str | None) -> list | None:
    """The ``(name, nn.Module, spec)`` list that ``script``'s ``models()`` returns (None without a
    script: the zoo's own models); a script without it, or a list of another form, is a :class:`CliError`."""
    if script is None:
        return None
    path = Path(script)
    found = _run_script(path, "__tvm_hybrid_nb_zoo__").get(ZOO_MODELS_FUNCTION)
    if not callable(found):
        raise CliError(f"{path}: defines no {ZOO_MODELS_FUNCTION}() returning [(name, nn.Module, spec), ...]")
    try:
        models = list(found())
    except Exception as exc:
        raise CliError(f"{path}: {ZOO_MODELS_FUNCTION}() raised {type(exc).__name__}: {exc}") from exc
    from . import zoo

    for entry in models:
        if not (isinstance(entry, tuple) and len(entry) == 3 and isinstance(entry[0], str)):
            raise CliError(f"{path}: {ZOO_MODELS_FUNCTION}() must return (name, nn.Module, spec) tuples, "
                           f"got {entry!r:.80}")
        try:
            zoo.method_specs(*entry)
        except TypeError as exc:
            raise CliError(f"{path}: {exc}") from None
    if not models:
        raise CliError(f"{path}: {ZOO_MODELS_FUNCTION}() returned no models")
    return models


def _sizes(pairs: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for text in pairs or ():
        name, sep, value = text.partition("=")
        if not sep or not name.strip() or not value.strip().isdigit():
            raise CliError(f"--size expects NAME=INTEGER (a non-negative integer), got {text!r}")
        out[name.strip()] = int(value)
    return out


def _scalars(pairs: Sequence[str], params: Sequence[Any]) -> dict[str, Any]:
    """``--scalar NAME=VALUE`` values, converted to each scalar parameter's dtype."""
    from .signature import check_scalar_names

    by_name = {p.name: p for p in params if not p.is_buffer}
    out: dict[str, Any] = {}
    for text in pairs or ():
        name, sep, value = text.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise CliError(f"--scalar expects NAME=VALUE, got {text!r}")
        check_scalar_names(params, {name: value})
        dtype = by_name[name].dtype
        try:
            if dtype == "bool":
                if value.lower() not in ("0", "1", "true", "false"):
                    raise ValueError(value)
                out[name] = value.lower() in ("1", "true")
            elif dtype.startswith(("int", "uint")):
                out[name] = int(value)
            else:
                out[name] = float(value)
        except ValueError:
            raise CliError(f"--scalar {name}={value}: not a {dtype} value") from None
    missing = [n for n in by_name if n not in out]
    if missing:
        raise CliError(f"parameter {missing[0]} is a scalar ({by_name[missing[0]].dtype}): give its value with "
                       f"--scalar {missing[0]}=VALUE")
    return out


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= 500 else text[:499] + "…"


def load_script_target(script: str | os.PathLike) -> tuple[Any, str | None]:
    """Run ``script`` and return (what to build, its ``target`` or None) by the documented convention.

    Parameters
    ----------
    script : str or path
        A Python file defining ``hybrid_target()`` or ``schedule``.

    Returns
    -------
    tuple
        The object for :func:`tvm_hybrid_nb.build` and the script's ``target`` variable (or None).

    Raises
    ------
    CliError
        When the file is missing, raises, or defines neither name.
    """
    path = Path(script)
    namespace = _run_script(path, SCRIPT_RUN_NAME)
    target = namespace.get("target")
    target = target if isinstance(target, (str, dict)) or type(target).__name__ == "Target" else None
    if callable(namespace.get(SCRIPT_CALLABLE)):
        try:
            return namespace[SCRIPT_CALLABLE](), target
        except Exception as exc:
            raise CliError(f"{path}: {SCRIPT_CALLABLE}() raised {type(exc).__name__}: {exc}") from exc
    if SCRIPT_VARIABLE in namespace:
        return namespace[SCRIPT_VARIABLE], target
    raise CliError(f"{path}: defines neither {SCRIPT_CALLABLE}() nor {SCRIPT_VARIABLE} "
                   f"(see python -m tvm_hybrid_nb dump --help)")


def _summary(hm: Any) -> str:
    stages = hm.stages
    changed = sum(1 for s in stages[1:] if s.changed)
    emulatable = sum(1 for s in stages if s.emulatable)
    return (f"{len(stages)} stages ({stages[0].number}..{stages[-1].number}) of {hm.func_name}: "
            f"{changed} passes changed the IR, {emulatable} stages emulatable")


def cmd_dump(args: argparse.Namespace) -> int:
    """``dump SCRIPT.py --out DIR``: build the script's schedule and save every stage."""
    import tvm_hybrid_nb as thn
    from . import dump

    dump.check_output_directory(args.out, args.overwrite)  # before the build: refuse early
    obj, script_target = load_script_target(args.script)
    hm = thn.build(obj, target=args.target or script_target or "llvm")
    out = dump.save(hm, args.out, overwrite=args.overwrite, sizes=_sizes(args.size))
    print(f"dumped {_summary(hm)} to {out}")
    return EXIT_OK


def cmd_resume(args: argparse.Namespace) -> int:
    """``resume FILE [--passes A,B] --out DIR``: continue the pipeline from a dumped stage."""
    import tvm_hybrid_nb as thn
    from . import dump

    passes = [p.strip() for p in args.passes.split(",") if p.strip()] if args.passes is not None else None
    if passes is not None and not passes:
        raise CliError("--passes is empty: name at least one pass (e.g. --passes tirx.FlattenBuffer)")
    dump.check_output_directory(args.out, args.overwrite)
    hm = thn.resume(args.file, passes=passes, target=args.target)
    out = dump.save(hm, args.out, overwrite=args.overwrite)
    what = f"ran {', '.join(s.name for s in hm.stages[1:])}" if passes is not None else "ran the rest of the pipeline"
    print(f"resumed from {args.file}, {what}: dumped {_summary(hm)} to {out}")
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    """``report DIR -o out.html``: write the self-contained HTML report of a dump."""
    import tvm_hybrid_nb as thn

    out = Path(args.output)
    if out.is_dir():
        raise CliError(f"{out}: is a directory; give the HTML file to write (e.g. {out / 'report.html'})")
    if not out.parent.is_dir():
        raise CliError(f"{out}: directory {out.parent} does not exist")
    hm = thn.load(args.dir)
    thn.report(hm, out)
    print(f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB, {len(hm.stages)} stages)")
    return EXIT_OK


def _stage_key(hm: Any, text: str) -> Any:
    if text.lstrip("-").isdigit():
        number = int(text)
        first = hm.first_index
        if not first <= number < first + len(hm.stages):
            raise CliError(f"--stage {number}: this dump has stages {first}..{first + len(hm.stages) - 1}")
        return number - first
    return text


def cmd_emulate(args: argparse.Namespace) -> int:
    """``emulate DIR --stage N``: emulate a dumped stage and compare it with the native build."""
    import tvm_hybrid_nb as thn
    from . import dump
    from .errors import EmulationError, StageNotEmulatableError
    from .signature import check_size_names, random_arguments

    hm = thn.load(args.dir)
    stage = hm.stage(_stage_key(hm, args.stage))
    given = _sizes(args.size)
    try:
        params = hm.params
        check_size_names(params, given)
        sizes = {**(getattr(hm, "sizes", None) or {}), **given}
        arrays = random_arguments(params, seed=args.seed, sizes=sizes, scalars=_scalars(args.scalar, params))
        result = hm.compare(*arrays, stage=stage.index, rtol=args.rtol, atol=args.atol)
    except (StageNotEmulatableError, EmulationError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_MISMATCH
    print(result)
    if args.record:
        dump.record_compare(args.dir, result)
    return EXIT_OK if result.ok else EXIT_MISMATCH


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m tvm_hybrid_nb``."""
    fmt = argparse.RawDescriptionHelpFormatter
    parser = _OneLineParser(
        prog="python -m tvm_hybrid_nb", formatter_class=fmt, epilog=EPILOG,
        description="Dump, reload, resume, report on and emulate TVM compilations, pass by pass.")
    parser.add_argument("--traceback", action="store_true", help="print the full traceback on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    common = _OneLineParser(add_help=False)
    common.add_argument("--traceback", action="store_true", default=argparse.SUPPRESS,
                        help="print the full traceback on errors")

    p = sub.add_parser("dump", parents=[common], formatter_class=fmt, epilog=DUMP_EPILOG,
                       help="build a script's schedule and write every stage to a directory",
                       description="Build the schedule SCRIPT.py defines with TVM's real pipeline and write "
                                   "every stage as NNN_<pass>.py (runnable with numpy), .tvmscript.py and "
                                   ".json, plus index.json.")
    p.add_argument("script", metavar="SCRIPT.py")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (created; must be empty)")
    p.add_argument("--target", help="TVM target (default: the script's `target`, else llvm)")
    p.add_argument("--overwrite", action="store_true", help="replace a previous dump in DIR")
    p.add_argument("--size", action="append", default=[], metavar="NAME=VALUE",
                   help="value of a symbolic dimension for the runnable .py files (default 16)")
    p.set_defaults(func=cmd_dump)

    p = sub.add_parser("resume", parents=[common], formatter_class=fmt, epilog=EPILOG,
                       help="continue the pipeline from a dumped stage and write the new stages",
                       description="Load stage FILE (NNN_<pass>.json, or an edited NNN_<pass>.tvmscript.py) "
                                   "and run the rest of the default pipeline, or just --passes, after it. "
                                   "The new dump's stage numbers continue from NNN.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--passes", metavar="A,B",
                   help="comma-separated passes to run instead of the rest of the pipeline "
                        "(e.g. tirx.FlattenBuffer,s_tir.ThreadSync(warp))")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (created; must be empty)")
    p.add_argument("--target", help="TVM target (default: the dump's)")
    p.add_argument("--overwrite", action="store_true", help="replace a previous dump in DIR")
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser("report", parents=[common], formatter_class=fmt, epilog=EPILOG,
                       help="write a self-contained HTML report of a dump",
                       description="Write one HTML file (no network, no scripts): pass list, highlighted "
                                   "TVMScript and hybrid source per stage, diffs, latest comparison.")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("-o", "--output", required=True, metavar="OUT.html")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("emulate", parents=[common], formatter_class=fmt, epilog=EPILOG,
                       help="emulate a dumped stage and compare it with the native build",
                       description="Emulate stage N of a dump on seeded random inputs and compare the outputs "
                                   "with the natively compiled kernel (built from the dump, no script needed). "
                                   "Exit status 0 when every output matches, 1 otherwise.")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--stage", default="0", metavar="N",
                   help="stage number as in the file names (NNN), or a pass name (default 0)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--size", action="append", default=[], metavar="NAME=VALUE",
                   help="value of a symbolic dimension (default: the sizes the dump was written with)")
    p.add_argument("--scalar", "--set", action="append", default=[], metavar="NAME=VALUE",
                   help="value of a scalar parameter of the kernel (required for each one)")
    p.add_argument("--rtol", type=float, default=None, help="relative tolerance (default by dtype)")
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance (default by dtype)")
    p.add_argument("--no-record", dest="record", action="store_false",
                   help="do not store the result in DIR/index.json (the report shows the latest one)")
    p.set_defaults(func=cmd_emulate)
    add_verify_command(sub, common)

    from . import tvm_corpus, zoo
    zoo_parser = zoo.add_parser(sub, [common], fmt)
    # ``zoo --tvm-tests PATH``: the TIR of a TVM checkout's tests instead of the model zoo.
    tvm_corpus.add_arguments(zoo_parser)
    zoo_parser.set_defaults(func=lambda args: tvm_corpus.cli_main(args) if args.tvm_tests
                            else zoo.cli_main(args, models=_zoo_models(args)))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (see :data:`EPILOG`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    from .errors import HybridError

    try:
        return args.func(args)
    except (CliError, HybridError) as exc:
        if args.traceback:
            traceback.print_exc()
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:  # the file system refused (permissions, disk full, a file where a directory goes)
        if args.traceback:
            traceback.print_exc()
        from .files import os_error_text

        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{os_error_text(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: say so, keep the status distinct from bad input
        if args.traceback:
            traceback.print_exc()
        print(f"internal error: {type(exc).__name__}: {exc} (rerun with --traceback)", file=sys.stderr)
        return EXIT_INTERNAL


#: Names a script given to ``verify`` may define.
VERIFY_CALLABLE = "verify_target"
VERIFY_VARIABLE = "mod"
VERIFY_RUN_NAME = "__tvm_hybrid_nb_verify__"

VERIFY_EPILOG = f"""\
script convention:
  SCRIPT.py is run with runpy (as module {VERIFY_RUN_NAME!r}). It must define, at module
  level, either {VERIFY_CALLABLE}() (no arguments, returns the model) or {VERIFY_VARIABLE}: a Relax
  tvm.IRModule (e.g. from relax.frontend.nn's export_tvm), an IRModule of PrimFuncs, or a list
  of PrimFuncs. Optional: `target`, `passes` (a list of (AFTER, function returning a
  tvm.transform.Pass)), `sizes` (symbolic size -> value).

exit status:
  0  every kernel ok (or refused: cannot be emulated)
  1  a kernel is wrong, crashed or timed out
  2  usage error or bad input (script without a model, unknown pass, unreachable scheduler)
  3  internal error in tvm_hybrid_nb (rerun with --traceback)
"""


def load_verify_script(script: str | os.PathLike) -> dict:
    """Run ``script`` and return its model, ``target``, ``passes`` and ``sizes`` (see :data:`VERIFY_EPILOG`)."""
    path = Path(script)
    namespace = _run_script(path, VERIFY_RUN_NAME)
    if callable(namespace.get(VERIFY_CALLABLE)):
        try:
            model = namespace[VERIFY_CALLABLE]()
        except Exception as exc:
            raise CliError(f"{path}: {VERIFY_CALLABLE}() raised {type(exc).__name__}: {exc}") from exc
    elif VERIFY_VARIABLE in namespace:
        model = namespace[VERIFY_VARIABLE]
    else:
        raise CliError(f"{path}: defines neither {VERIFY_CALLABLE}() nor {VERIFY_VARIABLE} "
                       f"(see python -m tvm_hybrid_nb verify --help)")
    return {"model": model, "target": namespace.get("target"), "passes": namespace.get("passes") or [],
            "sizes": namespace.get("sizes")}


def cmd_verify(args: argparse.Namespace) -> int:
    """``verify SCRIPT.py --out report.html``: every kernel of a model, every changed pass."""
    from .verification import verify

    loaded = load_verify_script(args.script)
    sizes = {**(loaded["sizes"] or {}), **_sizes(args.size)}
    out = Path(args.out) if args.out else None
    if out is not None and not out.parent.is_dir():
        raise CliError(f"{out}: directory {out.parent} does not exist")
    if args.workers is not None and args.workers < 1:
        raise CliError(f"--workers must be at least 1, got {args.workers}")
    client = None
    if args.scheduler:
        try:
            from distributed import Client
        except ImportError:
            raise CliError("--scheduler needs dask's distributed package (pip install tvm_hybrid_nb[cluster])") \
                from None
        try:
            client = Client(args.scheduler, timeout=args.connect_timeout)
        except Exception as exc:
            raise CliError(f"--scheduler {args.scheduler}: cannot connect: {type(exc).__name__}: {exc}") from None
    bar = _ProgressBar()
    try:
        report = verify(loaded["model"], target=args.target or loaded["target"] or "llvm",
                        schedule=args.schedule, reference=args.reference, stages=args.stages,
                        sizes=sizes or None, workers=args.workers, client=client, passes=loaded["passes"],
                        timeout=args.timeout, progress=bar)
    finally:
        bar.close()
        if client is not None:
            client.close()
    print(report)
    if out is not None:
        report.to_html(out)
        print(f"wrote {out}")
    if args.json:
        Path(args.json).write_text(report.to_json(), encoding="utf-8")
    return EXIT_OK if report.ok else EXIT_MISMATCH


class _ProgressBar:
    """A tqdm bar (kernels done, ETA) fed by :func:`tvm_hybrid_nb.verification.verify`'s progress callback."""

    def __init__(self):
        self._bar = None

    def __call__(self, done: int, total: int, kernel: Any) -> None:
        from tqdm import tqdm

        if self._bar is None:
            self._bar = tqdm(total=total, unit="kernel", desc="verify", file=sys.stderr)
        if kernel is not None:
            self._bar.set_postfix_str(f"{kernel.name}: {kernel.outcome}", refresh=False)
            self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def add_verify_command(sub: Any, common: argparse.ArgumentParser) -> None:
    """Register ``verify`` with the subcommand parser ``sub``."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser("verify", parents=[common], formatter_class=fmt, epilog=VERIFY_EPILOG,
                       help="verify every kernel of a model at every changed pass; write an HTML report",
                       description="Lower the model SCRIPT.py defines, build every kernel with the pass capture, "
                                   "emulate every changed stage on seeded inputs and compare with the native "
                                   "build of the unscheduled kernel; name the first divergent pass of each "
                                   "wrong kernel. Kernels run as independent jobs on local processes or a "
                                   "Dask cluster.")
    p.add_argument("script", metavar="SCRIPT.py")
    p.add_argument("--out", metavar="REPORT.html", help="write the self-contained HTML report here")
    p.add_argument("--json", metavar="REPORT.json", help="write the report as JSON here")
    p.add_argument("--target", help="TVM target (default: the script's `target`, else llvm)")
    p.add_argument("--schedule", choices=["dlight"], help="schedule every kernel with dlight's default rules")
    p.add_argument("--reference", choices=["native", "input"], default="native",
                   help="native: the unscheduled kernel compiled for llvm (default); input: the stage-0 emulation")
    p.add_argument("--stages", choices=["changed", "all"], default="changed",
                   help="emulate only the stages that changed the IR (default) or all")
    p.add_argument("--workers", type=int, metavar="N", help="local worker processes at once (default: all cores)")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run on this Dask scheduler (e.g. tcp://host:8786)")
    p.add_argument("--connect-timeout", type=float, default=10.0, metavar="S", help=argparse.SUPPRESS)
    p.add_argument("--timeout", type=float, default=600.0, metavar="S", help="per-kernel time limit (default 600)")
    p.add_argument("--size", action="append", default=[], metavar="NAME=VALUE",
                   help="value of a symbolic dimension")
    p.set_defaults(func=cmd_verify)
