"""Dumps of a :class:`~tvm_hybrid_nb.module.HybridModule` on disk: save, load and resume the pipeline.

A dump directory holds, for every stage ``NNN`` (the stage number, zero-padded) and pass name ``P``:

``NNN_P.py``
    The stage's hybrid source, standalone: ``python NNN_P.py`` runs the kernel on seeded random
    inputs with numpy alone and prints a checksum of the outputs; importing it gives the kernel
    function.  Stages that cannot be emulated get a file that says why and exits with status 1.
``NNN_P.tvmscript.py``
    The module's TVMScript (edit it and :func:`resume` from it).
``NNN_P.json``
    The module as ``tvm.ir.save_json`` wrote it (exact; :func:`load` and :func:`resume` read it).
``index.json``
    The stages (number, pass name, seconds, changed, emulatable, reason, file names), the target,
    the TVM version and what is needed to rebuild the native kernel.

:func:`save` writes a dump, :func:`load` reads one back into a module that can be browsed and
emulated without recompiling (the native build is made on demand), and :func:`resume` continues
the pipeline from one dumped stage.
"""
from __future__ import annotations

import inspect
import json
import os
import re
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import tvm

from . import __version__
from . import capture as _capture
from .compare import CompareResult, OutputComparison
from .errors import BuildError, DumpError, HybridError, UnknownPassError
from .module import HybridModule, Stage
from .signature import ParamSpec, dim_symbols, dim_value, seeded_values

#: Identifies ``index.json`` files written by this module.
FORMAT = "tvm_hybrid_nb-dump"
#: Bumped when the layout changes incompatibly.
FORMAT_VERSION = 1
#: Size given to every symbolic dimension in the runnable ``.py`` files unless ``save(sizes=...)`` says.
DEFAULT_SYMBOLIC_SIZE = 16
#: ``tvm.build`` splits host and device code with this pass after the lowering pipeline; stages from
#: it on are per-target finalization and cannot be resumed.
SPLIT_PASS = "tirx.Filter"
INDEX_FILE = "index.json"

_STAGE_FILE = re.compile(r"^(\d{3,})_.+\.(py|json)$")

# ---------------------------------------------------------------------------------------------
# The numpy-only runner appended to every runnable stage file.  The same text is executed here
# (see ``_RUNNER``) so that in-process checksums are computed by exactly the code the files run.
_RUNNER_SRC = inspect.getsource(dim_value) + "\n\n" + inspect.getsource(seeded_values) + '''

_thn_random_arguments = seeded_values


def _thn_checksum(params, arrays):
    """One line per output: name, dtype, shape, exact sum and a hash of the bytes."""
    import hashlib
    import numpy as _thn_np
    lines = []
    for (name, dtype, shape, is_output), value in zip(params, arrays):
        if not is_output:
            continue
        value = _thn_np.ascontiguousarray(value)
        if _thn_np.issubdtype(value.dtype, _thn_np.floating):
            total = repr(float(value.astype(_thn_np.float64).sum()))
        else:
            total = str(int(value.astype(_thn_np.int64).sum()))
        digest = hashlib.sha256(value.tobytes()).hexdigest()[:16]
        lines.append(f"{name} {value.dtype}{list(value.shape)} sum={total} sha256={digest}")
    return lines


def _thn_main(kernel, params, sizes, scalars, description, argv=None):
    import argparse
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    parser.add_argument("--size", action="append", default=[], metavar="NAME=VALUE",
                        help="value of a symbolic dimension")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="value of a scalar parameter")
    args = parser.parse_args(argv)
    sizes = dict(sizes)
    scalars = dict(scalars)
    for text in args.size:
        key, _, value = text.partition("=")
        sizes[key] = int(value)
    for text in args.set:
        key, _, value = text.partition("=")
        scalars[key] = type(scalars.get(key, 0))(value)
    arrays = _thn_random_arguments(params, args.seed, sizes, scalars)
    kernel(*arrays)
    for line in _thn_checksum(params, arrays):
        print(line)
'''

_RUNNER: dict[str, Any] = {"__name__": "tvm_hybrid_nb._dump_runner"}
exec(compile(_RUNNER_SRC, "<tvm_hybrid_nb.dump runner>", "exec"), _RUNNER)


def _param_tuples(params: Sequence[ParamSpec]) -> list[tuple]:
    return [(p.name, p.dtype, tuple(p.shape) if p.shape is not None else None, bool(p.is_output))
            for p in params]


def checksum(params: Sequence[ParamSpec], arrays: Sequence) -> list[str]:
    """The checksum lines a runnable stage file prints for ``arrays`` (one line per output).

    Parameters
    ----------
    params : sequence of ParamSpec
        The kernel's parameters (``hm.params``), outputs marked.
    arrays : sequence
        One value per parameter, after the kernel ran.

    Returns
    -------
    list of str
        ``"NAME DTYPE[SHAPE] sum=S sha256=H"`` for every output, in parameter order.
    """
    return _RUNNER["_thn_checksum"](_param_tuples(params), list(arrays))


def symbolic_sizes(params: Sequence[ParamSpec], sizes: dict[str, int] | None = None) -> dict[str, int]:
    """Every symbolic dimension of ``params`` with a value: from ``sizes``, else :data:`DEFAULT_SYMBOLIC_SIZE`."""
    out: dict[str, int] = {}
    for p in params:
        for d in p.shape or ():
            for name in dim_symbols(d):
                out[name] = int((sizes or {}).get(name, DEFAULT_SYMBOLIC_SIZE))
    return out


def _scalar_defaults(params: Sequence[ParamSpec]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in params:
        if p.shape is None:
            out[p.name] = 1.0 if p.dtype.startswith("float") else (True if p.dtype == "bool" else 1)
    return out


# ---------------------------------------------------------------------------------------------
# File names and text
def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text) or "_"


def stage_stem(stage: Stage) -> str:
    """``NNN_<pass>``: the common stem of a stage's files (the stage number, zero-padded to 3)."""
    return f"{stage.number:03d}_{_safe(stage.name)}"


def _comment(text: str) -> str:
    """``text`` made safe for one ``#`` comment line."""
    return " ".join(str(text).split())


def _header(hm: HybridModule, stage: Stage, what: str) -> str:
    return (f"# {what} of stage {_comment(stage.label)} ({_comment(stage.name)}) of kernel "
            f"{_comment(hm.func_name)}, target {_comment(hm.target)}\n"
            f"# written by tvm_hybrid_nb {__version__} with TVM {tvm.__version__}\n")


def runnable_source(hm: HybridModule, stage: Stage, sizes: dict[str, int] | None = None) -> str:
    """The text of ``NNN_<pass>.py``: the stage's hybrid source plus a ``__main__`` block.

    The block makes seeded random inputs (the rule of
    :func:`tvm_hybrid_nb.signature.random_arguments`), runs the kernel and prints
    :func:`checksum` of the outputs.  It uses numpy alone.  For a stage that cannot be emulated the
    file holds the reason and exits with status 1 when run.
    """
    stem = stage_stem(stage)
    reason = stage.reason
    params = None
    if reason is None:
        try:
            params = hm.params
        except HybridError as exc:
            reason = str(exc)
    if reason is not None:
        return (_header(hm, stage, "No hybrid source")
                + f"# Stage {_comment(stage.label)} of {_comment(hm.func_name)} cannot be emulated.\n"
                + f"# Reason: {_comment(reason)}\n"
                + "# Running this file prints the reason and exits with status 1.\n"
                + "import sys\n\n"
                + f"REASON = {reason!r}\n\n"
                + "if __name__ == \"__main__\":\n"
                + f"    sys.exit({('stage ' + stage.label + ' cannot be emulated: ')!r} + REASON)\n")
    source = stage.source.rstrip("\n") + "\n"
    usage = (f"# Run:    python {stem}.py [--seed N] [--size NAME=VALUE]   (needs numpy only)\n"
             f"# Import: importlib.util.spec_from_file_location(...) gives the function "
             f"{hm.name}({', '.join(p.name for p in params)})\n")
    description = (f"Run stage {stage.label} of {hm.func_name} on seeded random inputs and print "
                   f"a checksum of the outputs.")
    block = ("\n\n# ---- runner added by tvm_hybrid_nb.dump.save (numpy only) ----\n"
             f"_THN_PARAMS = {_param_tuples(params)!r}  # (name, dtype, shape, is_output)\n"
             f"_THN_SIZES = {symbolic_sizes(params, sizes)!r}\n"
             f"_THN_SCALARS = {_scalar_defaults(params)!r}\n"
             + _RUNNER_SRC
             + "\n\nif __name__ == \"__main__\":\n"
             + f"    _thn_main({hm.name}, _THN_PARAMS, _THN_SIZES, _THN_SCALARS, {description!r})\n")
    return _header(hm, stage, "Hybrid source") + usage + source + block


def _tvmscript_text(hm: HybridModule, stage: Stage) -> str:
    return (_header(hm, stage, "TVMScript")
            + "# Edit it and continue the pipeline from it: tvm_hybrid_nb.resume(<this file>)\n"
            + stage.script)


# ---------------------------------------------------------------------------------------------
# save
def _compare_to_json(result: CompareResult | None) -> dict | None:
    if result is None:
        return None
    return {
        "stage": result.stage, "reference": result.reference, "mode": result.mode,
        "emulate_seconds": result.emulate_seconds, "reference_seconds": result.reference_seconds,
        "outputs": [{"name": o.name, "dtype": o.dtype, "shape": list(o.shape),
                     "max_abs_error": o.max_abs_error, "max_rel_error": o.max_rel_error,
                     "mismatches": o.mismatches,
                     "first_mismatch": list(o.first_mismatch) if o.first_mismatch is not None else None,
                     "rtol": o.rtol, "atol": o.atol} for o in result.outputs],
    }


def _compare_from_json(data: dict | None) -> CompareResult | None:
    if not data:
        return None
    outputs = [OutputComparison(name=o["name"], dtype=o["dtype"], shape=tuple(o["shape"]),
                                max_abs_error=o["max_abs_error"], max_rel_error=o["max_rel_error"],
                                mismatches=o["mismatches"],
                                first_mismatch=tuple(o["first_mismatch"]) if o["first_mismatch"] else None,
                                rtol=o["rtol"], atol=o["atol"]) for o in data["outputs"]]
    return CompareResult(stage=data["stage"], reference=data["reference"], outputs=outputs,
                         emulate_seconds=data["emulate_seconds"], reference_seconds=data["reference_seconds"],
                         mode=data.get("mode", "exact"))


def _prepare_directory(directory: Path, overwrite: bool) -> None:
    if directory.exists() and not directory.is_dir():
        raise DumpError(f"{directory}: exists and is not a directory")
    if directory.is_dir() and any(directory.iterdir()):
        if not overwrite:
            raise DumpError(f"{directory}: directory is not empty (use overwrite=True / --overwrite to replace "
                            f"a previous dump)")
        for item in directory.iterdir():
            if item.is_file() and (item.name == INDEX_FILE or _STAGE_FILE.match(item.name)):
                item.unlink()
    directory.mkdir(parents=True, exist_ok=True)


def save(hm: HybridModule, directory: str | os.PathLike, overwrite: bool = False,
         sizes: dict[str, int] | None = None) -> Path:
    """Write every stage of ``hm`` to ``directory`` (the function ``%%hybrid_build --dump`` uses).

    Parameters
    ----------
    hm : HybridModule
        The module to dump.
    directory : str or path
        Created if missing.  A non-empty directory is refused unless ``overwrite``.
    overwrite : bool
        Replace the files of a previous dump (``index.json`` and ``NNN_*.py/.json``) in ``directory``;
        other files are left alone.
    sizes : dict, optional
        Values of symbolic dimensions used by the runnable ``.py`` files (default
        :data:`DEFAULT_SYMBOLIC_SIZE` each).

    Returns
    -------
    pathlib.Path
        The directory written.

    Raises
    ------
    DumpError
        When the directory is not empty (and not ``overwrite``) or is not a directory.
    """
    directory = Path(directory)
    _prepare_directory(directory, overwrite)
    if sizes is None:
        sizes = getattr(hm, "sizes", None)
    try:
        params = hm.params
    except HybridError:
        params = None
    stages_meta = []
    in_pipeline = getattr(hm, "in_pipeline", None) or [True] * len(hm.stages)
    for stage, in_pipe in zip(hm.stages, in_pipeline):
        stem = stage_stem(stage)
        files = {"py": f"{stem}.py", "tvmscript": f"{stem}.tvmscript.py", "json": f"{stem}.json"}
        (directory / files["json"]).write_text(tvm.ir.save_json(stage.mod), encoding="utf-8")
        (directory / files["tvmscript"]).write_text(_tvmscript_text(hm, stage), encoding="utf-8")
        (directory / files["py"]).write_text(runnable_source(hm, stage, sizes), encoding="utf-8")
        stages_meta.append({
            "index": stage.number, "name": stage.name, "seconds": stage.seconds, "changed": stage.changed,
            "emulatable": stage.emulatable, "reason": stage.reason, "in_pipeline": bool(in_pipe),
            "files": files,
        })
    index = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "func_name": hm.func_name, "name": hm.name, "target": str(hm.target),
        "tvm_version": tvm.__version__, "tvm_hybrid_nb_version": __version__, "numpy_version": np.__version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "build_seconds": hm.build_seconds,
        "first_index": hm.first_index,
        "resumed_from": getattr(hm, "resumed_from", None),
        "pipeline_done": list(getattr(hm, "pipeline_done", [])),
        "params": ([{"name": p.name, "dtype": p.dtype, "shape": list(p.shape) if p.shape is not None else None,
                     "is_output": p.is_output} for p in params] if params is not None else None),
        "sizes": symbolic_sizes(params, sizes) if params is not None else {},
        "stages": stages_meta,
        "last_compare": _compare_to_json(hm.last_compare),
    }
    (directory / INDEX_FILE).write_text(json.dumps(index, indent=1), encoding="utf-8")
    return directory


# ---------------------------------------------------------------------------------------------
# Modules read back from disk
class DumpedModule(HybridModule):
    """A :class:`HybridModule` read from a dump or resumed from one.

    Besides the usual attributes it knows which default-pipeline passes its stage 0 has been
    through, so that its native build (made on demand) finishes the same pipeline.

    Attributes
    ----------
    pipeline_done : list of str
        Names of the default-pipeline leaf passes already applied to stage 0's module.
    in_pipeline : list of bool
        Per stage, whether it came from the default pipeline (False for passes named in
        :func:`resume` ``passes=``).
    resumed_from : str or None
        The file this module was resumed from.
    directory : pathlib.Path or None
        The dump it was loaded from.
    sizes : dict
        Values of symbolic dimensions the dump's runnable files use (``emulate`` uses them too).
    """

    def __init__(self, func_name: str, target: Any, raw_stages: Sequence[_capture.RawStage], *,
                 pipeline_done: Sequence[str] = (), in_pipeline: Sequence[bool] | None = None,
                 resumed_from: str | None = None, directory: Path | None = None,
                 params: Sequence[ParamSpec] | None = None, **kwargs: Any):
        self.pipeline_done = list(pipeline_done)
        self.resumed_from = resumed_from
        self.directory = directory
        self.sizes: dict[str, int] = {}
        self.in_pipeline = list(in_pipeline) if in_pipeline is not None else [True] * len(raw_stages)
        if _capture.PACKED_API_PASS in self.pipeline_done:
            kwargs.setdefault("packed_api_index", 0)
        super().__init__(func_name, target, raw_stages, **kwargs)
        if params is not None:
            # The signature of the original input stage: a resumed stage 0 may be flattened (its writes
            # go through views) or a packed-API wrapper, where outputs cannot be found again.
            self._params = list(params)

    @property
    def native(self):
        """The natively compiled module: the rest of the default pipeline, built on first use."""
        if self._native is None:
            last_extra = max((i for i, p in enumerate(self.in_pipeline) if not p), default=0)
            skip = self.pipeline_done + [s.name for s, p in zip(self.stages[1:last_extra + 1],
                                                                 self.in_pipeline[1:last_extra + 1]) if p]
            self._native, _, _ = _finish_pipeline(self.stages[last_extra].mod, self.target, skip,
                                                  f"stage {self.stages[last_extra].label}")
        return self._native


# ---------------------------------------------------------------------------------------------
# load
def _read_json_file(path: Path, what: str) -> Any:
    if not path.is_file():
        raise DumpError(f"{path}: missing ({what})")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise DumpError(f"{path}: corrupt ({what}): not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise DumpError(f"{path}: corrupt ({what}): invalid JSON at line {exc.lineno} column {exc.colno}: "
                        f"{exc.msg}") from None


def read_index(directory: str | os.PathLike) -> dict:
    """The checked contents of ``directory/index.json``.

    Raises
    ------
    DumpError
        One line naming the file when the directory or index is missing, corrupt or of another format.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise DumpError(f"{directory}: no such dump directory")
    path = directory / INDEX_FILE
    if not path.is_file():
        raise DumpError(f"{path}: missing — {directory} is not a dump written by HybridModule.save")
    index = _read_json_file(path, "the dump index")
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise DumpError(f"{path}: not a tvm_hybrid_nb dump index (no \"format\": \"{FORMAT}\")")
    if index.get("format_version") != FORMAT_VERSION:
        raise DumpError(f"{path}: dump format version {index.get('format_version')!r}, this tvm_hybrid_nb "
                        f"reads version {FORMAT_VERSION}")
    for key, kind in (("func_name", str), ("target", str), ("stages", list), ("first_index", int)):
        if not isinstance(index.get(key), kind):
            raise DumpError(f"{path}: corrupt: field {key!r} missing or not a {kind.__name__}")
    if not index["stages"]:
        raise DumpError(f"{path}: corrupt: no stages")
    for i, entry in enumerate(index["stages"]):
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("index"), int)
                and isinstance(entry.get("files"), dict) and isinstance(entry["files"].get("json"), str)):
            raise DumpError(f"{path}: corrupt: stage entry {i} lacks index/name/files")
        if entry["index"] != index["first_index"] + i:
            raise DumpError(f"{path}: corrupt: stage entry {i} has number {entry['index']}, "
                            f"expected {index['first_index'] + i}")
    if index.get("tvm_version") != tvm.__version__:
        warnings.warn(f"{path}: dump written with TVM {index.get('tvm_version')}, this is TVM {tvm.__version__}",
                      stacklevel=3)
    return index


def _load_module_json(path: Path) -> "tvm.IRModule":
    if not path.is_file():
        raise DumpError(f"{path}: missing (stage module JSON listed in index.json)")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DumpError(f"{path}: corrupt: not UTF-8 text") from None
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise DumpError(f"{path}: corrupt: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    try:
        mod = tvm.ir.load_json(text)
    except Exception as exc:
        raise DumpError(f"{path}: corrupt: tvm.ir.load_json failed: {_capture.short_tvm_message(exc)}") from None
    if not isinstance(mod, tvm.IRModule):
        raise DumpError(f"{path}: corrupt: holds a {type(mod).__name__}, not an IRModule")
    return mod


def _target_of(index: dict, path: Path) -> "tvm.target.Target":
    try:
        return tvm.target.Target(index["target"])
    except Exception as exc:
        raise DumpError(f"{path}: bad target {index['target']!r}: {_capture.short_tvm_message(exc)}") from None


def _params_of(index: dict, path: Path) -> list[ParamSpec] | None:
    data = index.get("params")
    if data is None:
        return None
    try:
        return [ParamSpec(str(p["name"]), str(p["dtype"]),
                          tuple(d if isinstance(d, (int, str)) else int(d) for d in p["shape"])
                          if p["shape"] is not None else None, bool(p["is_output"])) for p in data]
    except (KeyError, TypeError, ValueError):
        raise DumpError(f"{path}: corrupt: field 'params' is malformed") from None


def load(directory: str | os.PathLike) -> DumpedModule:
    """Read a dump written by :func:`save` back into a module, without recompiling.

    Every stage is browsable and emulatable; the native kernel is built on first use
    (``hm.native``, ``hm.compare()``).

    Parameters
    ----------
    directory : str or path
        A directory written by :meth:`HybridModule.save`.

    Returns
    -------
    DumpedModule

    Raises
    ------
    DumpError
        One line naming the missing or corrupt file.
    """
    directory = Path(directory)
    index = read_index(directory)
    target = _target_of(index, directory / INDEX_FILE)
    raw = []
    for entry in index["stages"]:
        mod = _load_module_json(directory / entry["files"]["json"])
        raw.append(_capture.RawStage(entry["name"], mod, float(entry.get("seconds") or 0.0)))
    in_pipeline = [bool(e.get("in_pipeline", True)) for e in index["stages"]]
    hm = DumpedModule(index["func_name"], target, raw, pipeline_done=index.get("pipeline_done") or [],
                      in_pipeline=in_pipeline, resumed_from=index.get("resumed_from"), directory=directory,
                      build_seconds=index.get("build_seconds"), name=index.get("name"),
                      first_index=index["first_index"], params=_params_of(index, directory / INDEX_FILE))
    for stage, entry in zip(hm.stages, index["stages"]):
        if isinstance(entry.get("changed"), bool):
            stage._changed = entry["changed"]  # as measured on the original build's modules
    hm.last_compare = _compare_from_json(index.get("last_compare"))
    hm.sizes = dict(index.get("sizes") or {})
    return hm


def record_compare(directory: str | os.PathLike, result: CompareResult) -> None:
    """Store ``result`` as the dump's latest comparison (``last_compare`` in ``index.json``).

    Parameters
    ----------
    directory : str or path
        A dump directory.
    result : CompareResult
        What :meth:`HybridModule.compare` returned; the report shows it.
    """
    index = read_index(directory)
    index["last_compare"] = _compare_to_json(result)
    (Path(directory) / INDEX_FILE).write_text(json.dumps(index, indent=1), encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# resume
@tvm.ir.instrument.pass_instrument
class _SkipAndCapture(_capture.PassCapture):
    """Skip the first leaf passes (by expected name) and capture the rest like ``PassCapture``.

    ``should_run`` is called in pre-order: a pass whose name is the next expected one is skipped;
    any other pass is taken to be a wrapper (``sequential``, ``_pipeline``...) and runs.  A skipped
    child counts as a child, so a wrapper whose children were all skipped is not mistaken for a leaf.
    """

    def __init__(self, skip: Sequence[str]):
        self.expected = list(skip)
        self.skipped = 0
        self.mismatch: str | None = None
        super().__init__()

    def should_run(self, mod, info) -> bool:
        if self.skipped < len(self.expected) and info.name == self.expected[self.skipped]:
            self.skipped += 1
            if self._stack:
                self._stack[-1].has_children = True
            return False
        return True

    def run_after_pass(self, mod, info) -> None:
        frame_is_leaf = self._stack and not self._stack[-1].has_children
        if frame_is_leaf and self.skipped < len(self.expected) and self.mismatch is None:
            self.mismatch = (f"pass {info.name} ran where the dump's pipeline has "
                             f"{self.expected[self.skipped]}")
        super().run_after_pass(mod, info)


def _finish_pipeline(mod: "tvm.IRModule", target: Any, skip: Sequence[str], what: str):
    """Run ``tvm.build`` on ``mod`` skipping the leaf passes ``skip``; return (lib, stages, seconds)."""
    inst = _SkipAndCapture(skip)
    start = time.perf_counter()
    try:
        with tvm.transform.PassContext(instruments=[inst]):
            lib = tvm.tirx.build(mod, target=target)  # what tvm.build runs, without its warning
    except Exception as exc:
        failed = inst._stack[-1].name if inst._stack else None
        where = f" in pass {failed}" if failed else ""
        raise BuildError(f"resuming the pipeline from {what} failed{where}: "
                         f"{_capture.short_tvm_message(exc)}") from exc
    seconds = time.perf_counter() - start
    if inst.mismatch or inst.skipped != len(skip):
        detail = inst.mismatch or f"only {inst.skipped} of the {len(skip)} earlier passes were found"
        raise BuildError(f"cannot resume from {what}: this TVM's pipeline differs from the dump's ({detail})")
    return lib, inst.stages, seconds


#: Arguments for pass factories that need one (the values the default pipeline uses).
_PASS_ARGS = {"NarrowDataType": (32,), "ThreadSync": ("shared",)}
_PASS_SPEC = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?:\((.*)\))?\s*$")


def resolve_pass(spec: str, target: Any = None) -> "tvm.transform.Pass":
    """Make the pass named ``spec`` (``"tirx.FlattenBuffer"``, ``"FlattenBuffer"``, ``"s_tir.ThreadSync(warp)"``).

    Passes are looked up in ``tvm.tirx.transform`` and ``tvm.s_tir.transform``.  An argument in
    parentheses is given to the factory (an int when it is one); without it, passes that need one
    get the default pipeline's value (``NarrowDataType(32)``, ``ThreadSync(shared)``,
    ``BindTarget(<target>)``).

    Raises
    ------
    UnknownPassError
        For an unknown or ambiguous name.
    """
    match = _PASS_SPEC.match(spec)
    if not match:
        raise UnknownPassError(f"bad pass name {spec!r}: expected e.g. tirx.FlattenBuffer or s_tir.ThreadSync(warp)")
    name, arg = match.group(1), match.group(2)
    namespaces = {"tirx": tvm.tirx.transform, "s_tir": tvm.s_tir.transform}
    if "." in name:
        ns, short = name.split(".", 1)
        if ns not in namespaces:
            raise UnknownPassError(f"unknown pass {spec!r}: the namespace must be tirx or s_tir")
        found = [(ns, getattr(namespaces[ns], short, None))]
    else:
        short = name
        found = [(ns, getattr(m, short, None)) for ns, m in namespaces.items()]
    found = [(ns, f) for ns, f in found if callable(f) and short[:1].isupper() and not isinstance(f, type)]
    if not found:
        raise UnknownPassError(f"unknown pass {spec!r}: no such pass in tvm.tirx.transform or tvm.s_tir.transform")
    if len(found) > 1:
        raise UnknownPassError(f"ambiguous pass {spec!r}: say " + " or ".join(f"{ns}.{short}" for ns, _ in found))
    ns, factory = found[0]
    if arg is not None and arg.strip():
        args: tuple = (int(arg) if arg.strip().lstrip("-").isdigit() else arg.strip().strip("'\""),)
        if short == "BindTarget":
            try:
                args = (tvm.target.Target(args[0]),)
            except Exception as exc:
                raise UnknownPassError(f"bad target for pass {spec!r}: {_capture.short_tvm_message(exc)}") from None
    elif short == "BindTarget":
        args = (target,)
    else:
        args = _PASS_ARGS.get(short, ())
    try:
        made = factory(*args)
    except Exception as exc:
        raise UnknownPassError(f"cannot make pass {spec!r}: {_capture.short_tvm_message(exc)}") from None
    if not isinstance(made, tvm.transform.Pass):
        raise UnknownPassError(f"{ns}.{short} is not a pass")
    return made


def _stage_file_number(path: Path) -> int:
    m = re.match(r"^(\d{3,})_", path.name)
    if not m:
        raise DumpError(f"{path}: not a stage file (names start with the stage number, e.g. 019_tirx.FlattenBuffer.json)")
    return int(m.group(1))


def _load_stage_module(path: Path, func_name: str) -> "tvm.IRModule":
    if path.name.endswith(".tvmscript.py"):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise DumpError(f"{path}: corrupt: not UTF-8 text") from None
        try:
            mod = tvm.script.from_source(text)
        except Exception as exc:
            msg = " ".join(_capture.short_tvm_message(exc).split())
            raise DumpError(f"{path}: cannot parse the TVMScript: {msg}") from None
        if isinstance(mod, tvm.tirx.PrimFunc):
            mod = tvm.IRModule({func_name: mod})
        if not isinstance(mod, tvm.IRModule):
            raise DumpError(f"{path}: the TVMScript defines a {type(mod).__name__}, not an IRModule")
    elif path.name.endswith(".json"):
        mod = _load_module_json(path)
    elif path.name.endswith(".py"):
        raise DumpError(f"{path}: this is hybrid Python; resume from the stage's .json or .tvmscript.py file")
    else:
        raise DumpError(f"{path}: not a stage file (.json or .tvmscript.py)")
    if not any(gv.name_hint == func_name for gv in mod.functions.keys()):
        raise DumpError(f"{path}: the module has no function {func_name!r}")
    return mod


def resume(path: str | os.PathLike, passes: Sequence[str] | str | None = None, target: Any = None) -> DumpedModule:
    """Load one dumped stage and continue compiling from it.

    Parameters
    ----------
    path : str or path
        A stage's ``NNN_<pass>.json``, or its ``NNN_<pass>.tvmscript.py`` (possibly edited).  The
        dump's ``index.json`` must be next to it.
    passes : list of str or comma-separated str, optional
        Run just these passes (see :func:`resolve_pass`), inserted after the stage; the native
        build (on demand) then finishes the default pipeline.  Default: run the rest of the
        default pipeline, which also makes the native build.
    target : str or tvm.target.Target, optional
        Defaults to the dump's target.

    Returns
    -------
    DumpedModule
        Stage 0 is the loaded module (named ``"input"``, ``hm.resumed_from`` says which file);
        the stage numbers continue from the loaded stage's (``hm.first_index``).

    Raises
    ------
    DumpError
        Missing or corrupt files, or a stage after the host/device split.
    UnknownPassError
        A name in ``passes`` that is not a pass.
    BuildError
        A pass failed.
    """
    path = Path(path)
    if not path.is_file():
        raise DumpError(f"{path}: no such file")
    if path.name == INDEX_FILE:
        raise DumpError(f"{path}: give a stage file (NNN_<pass>.json or .tvmscript.py), not the index")
    number = _stage_file_number(path)
    index = read_index(path.parent)
    first = index["first_index"]
    entries = index["stages"]
    if not first <= number < first + len(entries):
        raise DumpError(f"{path}: stage {number} is not in {path.parent / INDEX_FILE} "
                        f"(stages {first}..{first + len(entries) - 1})")
    before = entries[1:number - first + 1]
    pipeline_done = list(index.get("pipeline_done") or [])
    split_at = next((e["index"] for e in entries if e["name"] == SPLIT_PASS), None)
    if SPLIT_PASS in pipeline_done or (split_at is not None and number >= split_at):
        raise DumpError(f"{path}: stage {number} comes after the host/device split ({SPLIT_PASS}); resume from "
                        f"an earlier stage")
    func_name = index["func_name"]
    target = _target_of(index, path.parent / INDEX_FILE) if target is None else tvm.target.Target(target)
    mod = _load_stage_module(path, func_name)
    skip = pipeline_done + [e["name"] for e in before if e.get("in_pipeline", True)]
    common = dict(resumed_from=path.name, name=index.get("name"), first_index=number,
                  params=_params_of(index, path.parent / INDEX_FILE),
                  packed_api_index=0 if _capture.PACKED_API_PASS in skip else None)
    sizes = dict(index.get("sizes") or {})
    if isinstance(passes, str):
        passes = [p for p in passes.split(",") if p.strip()]
    if passes is None:
        lib, stages, seconds = _finish_pipeline(mod, target, skip, path.name)
        raw = [_capture.RawStage("input", _capture.snapshot_module(mod), 0.0)] + stages
        hm = DumpedModule(func_name, target, raw, native=lib, build_seconds=seconds, pipeline_done=skip,
                          in_pipeline=[True] * len(raw), **common)
        hm.sizes = sizes
        return hm
    made = [(spec, resolve_pass(spec, target)) for spec in passes]
    if not made:
        raise UnknownPassError("passes is empty: name at least one pass, or give passes=None for the rest of "
                               "the pipeline")
    cap = _capture.PassCapture()
    start = time.perf_counter()
    current = mod
    try:
        with target, tvm.transform.PassContext(instruments=[cap]):
            for spec, p in made:
                current = p(current)
    except Exception as exc:
        failed = cap._stack[-1].name if cap._stack else spec
        raise BuildError(f"pass {failed} failed on {path.name}: {_capture.short_tvm_message(exc)}") from exc
    seconds = time.perf_counter() - start
    raw = [_capture.RawStage("input", _capture.snapshot_module(mod), 0.0)] + cap.stages
    hm = DumpedModule(func_name, target, raw, native=None, build_seconds=seconds, pipeline_done=skip,
                      in_pipeline=[True] + [False] * len(cap.stages), **common)
    hm.sizes = sizes
    return hm
