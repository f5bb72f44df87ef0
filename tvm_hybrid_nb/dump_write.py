"""Writing a dump of a :class:`~tvm_hybrid_nb.module.HybridModule`: :func:`save` and the file format.

The layout is described in :mod:`tvm_hybrid_nb.dump`, which also reads dumps back (``load``,
``resume``).  Writing sits below :mod:`tvm_hybrid_nb.module` and reading above it:
``HybridModule.save`` calls :func:`save` here, and ``dump.load`` builds a ``HybridModule`` subclass,
so neither module imports the other's layer upward.  The module and its stages are taken duck-typed
(``func_name``, ``name``, ``target``, ``params``, ``stages``, ``build_seconds``, ``first_index``,
``last_compare``; a stage's ``number``, ``name``, ``label``, ``mod``, ``seconds``, ``changed``,
``emulatable``, ``reason``, ``source``, ``script``).
"""
from __future__ import annotations

import ctypes
import errno
import inspect
import json
import os
import re
import shutil
import stat
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import tvm

from ._version import __version__
from .compare import CompareResult
from .errors import DumpError, HybridError
from .files import TEMP_PREFIX, os_error_text, umask, write_file_atomically
from .signature import ParamSpec, check_size_names, dim_symbols, dim_value, seeded_values

#: Identifies ``index.json`` files written by this module.
FORMAT = "tvm_hybrid_nb-dump"
#: Bumped when the layout changes incompatibly.
FORMAT_VERSION = 1
#: Size given to every symbolic dimension in the runnable ``.py`` files unless ``save(sizes=...)`` says.
DEFAULT_SYMBOLIC_SIZE = 16
INDEX_FILE = "index.json"


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
    sizes = dict(sizes)
    scalars = dict(scalars)

    def fail(message):
        import sys
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)

    parser.error = lambda message: fail(f"{message} (see --help)")
    args = parser.parse_args(argv)

    def pairs(option, texts, known, what):
        for text in texts:
            key, sep, value = text.partition("=")
            key, value = key.strip(), value.strip()
            if not sep or not key or not value:
                fail(f"{option} expects NAME=VALUE, got {text!r}")
            if key not in known:
                have = f"the kernel's {what} are {', '.join(known)}" if known else f"the kernel has no {what}"
                fail(f"{option} {key}: unknown name; {have}")
            yield key, value

    if args.seed < 0:
        fail(f"--seed {args.seed}: the seed must be a non-negative integer")
    for key, value in pairs("--size", args.size, sizes, "symbolic sizes"):
        if not value.lstrip("-").isdigit() or int(value) < 0:
            fail(f"--size {key}={value}: the value must be a non-negative integer")
        sizes[key] = int(value)
    for key, value in pairs("--set", args.set, scalars, "scalar parameters"):
        kind = type(scalars[key])
        try:
            if kind is bool:
                if value.lower() not in ("0", "1", "true", "false"):
                    raise ValueError(value)
                scalars[key] = value.lower() in ("1", "true")
            else:
                scalars[key] = kind(value)
        except ValueError:
            fail(f"--set {key}={value}: the value must be a {kind.__name__}")
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


def stage_stem(stage: Any) -> str:
    """``NNN_<pass>``: the common stem of a stage's files (the stage number, zero-padded to 3)."""
    return f"{stage.number:03d}_{_safe(stage.name)}"


def _comment(text: str) -> str:
    """``text`` made safe for one ``#`` comment line."""
    return " ".join(str(text).split())


def _header(hm: Any, stage: Any, what: str) -> str:
    return (f"# {what} of stage {_comment(stage.label)} ({_comment(stage.name)}) of kernel "
            f"{_comment(hm.func_name)}, target {_comment(hm.target)}\n"
            f"# written by tvm_hybrid_nb {__version__} with TVM {tvm.__version__}\n")


def runnable_source(hm: Any, stage: Any, sizes: dict[str, int] | None = None) -> str:
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


def _tvmscript_text(hm: Any, stage: Any) -> str:
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


def _is_int(value: Any) -> bool:
    return type(value) is int


def _plain_file_name(name: Any) -> bool:
    """Whether ``name`` names a file directly inside the dump directory (no path, no hidden file)."""
    return (isinstance(name, str) and bool(name) and name == os.path.basename(name) and "\\" not in name
            and not name.startswith(".") and "\0" not in name)


def _own_files(directory: Path) -> tuple[set[str] | None, str]:
    """The names of the files a dump in ``directory`` wrote, or (None, why it is not such a dump).

    A dump is recognised by its ``index.json`` (a regular file with this package's format marker);
    its files are the index itself and the stage files the index lists.
    """
    index_path = directory / INDEX_FILE
    if index_path.is_symlink() or not index_path.is_file():
        return None, f"it has no {INDEX_FILE}"
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None, f"its {INDEX_FILE} is not readable JSON"
    if not isinstance(index, dict) or index.get("format") != FORMAT or not isinstance(index.get("stages"), list):
        return None, f"its {INDEX_FILE} is not a tvm_hybrid_nb dump index"
    names = {INDEX_FILE}
    for entry in index["stages"]:
        # exactly the names save() gives a stage: an index edited to claim other files claims nothing
        if not (isinstance(entry, dict) and _is_int(entry.get("index")) and isinstance(entry.get("name"), str)):
            return None, f"its {INDEX_FILE} is not a tvm_hybrid_nb dump index"
        stem = f"{entry['index']:03d}_{_safe(entry['name'])}"
        if entry.get("files") != {"py": f"{stem}.py", "tvmscript": f"{stem}.tvmscript.py", "json": f"{stem}.json"}:
            return None, f"its {INDEX_FILE} lists files that a dump does not write"
        names.update(entry["files"].values())
    return names, ""


def _is_own_entry(entry: Path, own: set[str]) -> bool:
    """Whether ``entry`` was written by the dump whose files are ``own`` (or is a leftover of ours)."""
    if entry.is_symlink():
        return False
    if entry.name.startswith(TEMP_PREFIX):  # a temporary file of an interrupted atomic write of ours
        rest = entry.name[len(TEMP_PREFIX):]
        return entry.is_file() and any(rest.startswith(name[:64] + ".") for name in own)
    if entry.name == "__pycache__" and entry.is_dir():
        # importing a stage file (``importlib``) caches its bytecode here
        stems = [n[:-len(".py")] + "." for n in own if n.endswith(".py")]
        return all(p.is_file() and not p.is_symlink() and p.suffix == ".pyc"
                   and any(p.name.startswith(stem) for stem in stems) for p in entry.iterdir())
    return entry.name in own and entry.is_file()


def check_output_directory(directory: str | os.PathLike, overwrite: bool = False) -> str:
    """Say whether :func:`save` may write ``directory``, before anything is built or written.

    Returns ``"new"`` (it does not exist), ``"empty"`` or ``"replace"`` (a previous dump, with
    ``overwrite``).  Only a directory holding a dump written by this package, and nothing else, is
    ever replaced; a directory with any other file is refused even with ``overwrite``.

    Raises
    ------
    DumpError
        One line saying why the directory cannot be written.
    """
    try:
        return _check_output_directory(Path(directory), overwrite)
    except OSError as exc:
        raise DumpError(f"{directory}: cannot use it as the dump directory: {os_error_text(exc)}") from None


def _check_output_directory(directory: Path, overwrite: bool) -> str:
    if "\0" in str(directory):
        raise DumpError(f"{str(directory)!r}: a path cannot contain a NUL character")
    if directory.is_symlink() and not directory.exists():
        raise DumpError(f"{directory}: is a symlink to a missing path ({os.readlink(directory)})")
    if directory.exists() and not directory.is_dir():
        raise DumpError(f"{directory}: exists and is not a directory")
    for parent in directory.parents:
        if parent.exists():
            if not parent.is_dir():
                raise DumpError(f"{directory}: cannot create it: {parent} is not a directory")
            break
    if not directory.exists():
        return "new"
    try:
        entries = list(directory.iterdir())
    except OSError as exc:
        raise DumpError(f"{directory}: cannot list it: {os_error_text(exc)}") from None
    if not entries:
        return "empty"
    own, why_not = _own_files(directory)
    if own is None:
        raise DumpError(f"{directory}: directory is not empty and is not a tvm_hybrid_nb dump ({why_not}); "
                        f"nothing was written — choose a new or empty directory")
    foreign = sorted(e.name for e in entries if not _is_own_entry(e, own))
    if foreign:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise DumpError(f"{directory}: holds files that are not part of its dump ({shown}); nothing was "
                        f"written — move them away or choose another directory")
    if not overwrite:
        raise DumpError(f"{directory}: directory is not empty: it holds a previous dump (use overwrite=True / "
                        f"--overwrite to replace it)")
    return "replace"


_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap two directories atomically (Linux ``renameat2``); False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    result = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _remove_own_dump(directory: Path, own: set[str]) -> None:
    """Delete the files of the dump in ``directory`` (only those), then the directory if empty."""
    for entry in list(directory.iterdir()):
        if not _is_own_entry(entry, own):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            try:
                entry.unlink()
            except OSError:
                pass
    try:
        directory.rmdir()
    except OSError:
        warnings.warn(f"{directory}: the replaced dump's directory was kept: files appeared in it while "
                      f"writing", stacklevel=4)


def _holds_cwd(directory: Path) -> bool:
    try:
        cwd = Path(os.getcwd()).resolve()
    except OSError:
        return False
    target = directory.resolve()
    return cwd == target or target in cwd.parents


def _move_files_in(staging: Path, directory: Path) -> None:
    """Move every file of ``staging`` into the empty ``directory``; on failure take them out again."""
    moved: list[Path] = []
    try:
        for item in sorted(staging.iterdir()):
            if os.path.lexists(directory / item.name):
                raise DumpError(f"{directory}: {item.name} appeared in it while the dump was written; "
                                f"nothing written")
            os.rename(item, directory / item.name)
            moved.append(directory / item.name)
    except BaseException:
        for path in moved:
            try:
                path.unlink()
            except OSError:
                pass
        raise
    staging.rmdir()


def _swap_in(staging: Path, directory: Path, mode: str) -> None:
    """Put the complete dump ``staging`` at ``directory`` (see :func:`save`); ``staging`` is gone after.

    ``"new"``: rename it into place.  ``"empty"``: rename it over the empty directory (or, for the
    working directory, a mount point, or a staging directory inside it, move the files in).
    ``"replace"``: exchange the two directories atomically, then delete the old dump's own files.
    """
    if mode == "new":
        os.chmod(staging, 0o777 & ~umask())
        try:
            os.rename(staging, directory)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise DumpError(f"{directory}: was filled by someone else while the dump was written; left as "
                                f"it is, nothing written") from None
            raise
        return
    holds_cwd = _holds_cwd(directory)  # renaming it would leave this process in a deleted directory
    if mode == "empty":
        if staging.parent == directory:
            _move_files_in(staging, directory)
            return
        os.chmod(staging, stat.S_IMODE(directory.stat().st_mode))
        if not holds_cwd:
            try:
                os.rename(staging, directory)
                return
            except OSError as exc:
                if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    raise DumpError(f"{directory}: was filled by someone else while the dump was written; "
                                    f"left as it is, nothing written") from None
        _move_files_in(staging, directory)
        return
    if holds_cwd:
        raise DumpError(f"{directory}: is (or holds) the current working directory and cannot be swapped for "
                        f"the new dump; run from another directory")
    own, _ = _own_files(directory)
    if own is None:  # changed since it was checked
        raise DumpError(f"{directory}: is no longer a tvm_hybrid_nb dump; nothing replaced")
    os.chmod(staging, stat.S_IMODE(directory.stat().st_mode))
    if _exchange(staging, directory):
        _remove_own_dump(staging, own)  # staging now holds the old dump (and anything added meanwhile)
        return
    old = directory.parent / f"{TEMP_PREFIX}{directory.name[:64]}.old.{os.getpid()}.{time.time_ns()}"
    os.rename(directory, old)
    try:
        os.rename(staging, directory)
    except BaseException:
        os.rename(old, directory)
        raise
    _remove_own_dump(old, own)


def save(hm: Any, directory: str | os.PathLike, overwrite: bool = False,
         sizes: dict[str, int] | None = None) -> Path:
    """Write every stage of ``hm`` to ``directory`` (the function ``%%hybrid_build --dump`` uses).

    Parameters
    ----------
    hm : HybridModule
        The module to dump.
    directory : str or path
        Created if missing.  A non-empty directory is refused unless ``overwrite``.
    overwrite : bool
        Replace a previous dump in ``directory``.  Only a directory that holds a dump written by
        this package and nothing else is replaced; one with any other file is refused.  The new
        dump is written beside the old one and swapped in when complete, so a failure (disk full,
        Ctrl-C) leaves the old dump as it was.
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
        When the directory is not empty (and not ``overwrite``), holds files that are not part of a
        dump, is not a directory, or cannot be written (one line; nothing is changed on disk).
    """
    mode = check_output_directory(directory, overwrite)
    directory = Path(os.path.abspath(directory))  # "." has no name to write a sibling of
    if directory.is_symlink() and directory.is_dir():
        directory = directory.resolve()  # write where the link points; the link stays
    if sizes is None:
        sizes = getattr(hm, "sizes", None)
    try:
        params = hm.params
    except HybridError:
        params = None
    if sizes:
        check_size_names(params or [], sizes)
    staging = None
    try:
        if mode == "new":
            directory.parent.mkdir(parents=True, exist_ok=True)
        prefix = f"{TEMP_PREFIX}{directory.name[:64]}.new."
        try:
            staging = Path(tempfile.mkdtemp(prefix=prefix, dir=directory.parent))
        except OSError:
            if mode != "empty":
                raise
            staging = Path(tempfile.mkdtemp(prefix=prefix, dir=directory))  # the parent is not writable
        _write_dump(hm, staging, params, sizes)
        _swap_in(staging, directory, mode)
        staging = None  # it is the dump now, or (replace) it held the old one and was cleared
    except OSError as exc:
        raise DumpError(f"{directory}: cannot write the dump: {os_error_text(exc)}"
                        + ("; the previous dump is unchanged" if mode == "replace" else "")) from None
    finally:
        if staging is not None and staging.exists():  # only the incomplete new dump, never the old one
            shutil.rmtree(staging, ignore_errors=True)
    return directory


def _write_dump(hm: Any, directory: Path, params: list | None, sizes: dict | None) -> None:
    stages_meta = []
    in_pipeline = getattr(hm, "in_pipeline", None) or [True] * len(hm.stages)
    for stage, in_pipe in zip(hm.stages, in_pipeline):
        stem = stage_stem(stage)
        files = {"py": f"{stem}.py", "tvmscript": f"{stem}.tvmscript.py", "json": f"{stem}.json"}
        write_file_atomically(directory / files["json"], tvm.ir.save_json(stage.mod))
        write_file_atomically(directory / files["tvmscript"], _tvmscript_text(hm, stage))
        write_file_atomically(directory / files["py"], runnable_source(hm, stage, sizes))
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
                     "is_output": p.is_output,
                     **({"strides": list(p.strides) if p.strides is not None else None,
                         "elem_offset": p.elem_offset} if p.is_buffer and p.is_strided else {}),
                     **({"index_extent": p.index_extent} if p.index_extent is not None else {})}
                    for p in params] if params is not None else None),
        "sizes": symbolic_sizes(params, sizes) if params is not None else {},
        "stages": stages_meta,
        "last_compare": _compare_to_json(hm.last_compare),
    }
    write_file_atomically(directory / INDEX_FILE, json.dumps(index, indent=1))
