"""Writing files without ever leaving one half-written: temp file beside it, then ``os.replace``.

Standard library only (the data layer).  Every error is one :class:`~tvm_hybrid_nb.errors.DumpError`
line naming the path and the cause; the file that was there before stays as it was.
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from .errors import DumpError

#: Prefix of the temporary files and directories this package creates next to its outputs.
TEMP_PREFIX = ".thn-tmp-"


def os_error_text(exc: OSError) -> str:
    """``exc`` as a short phrase (``"permission denied"``, ``"file too large"``) without the errno noise."""
    text = exc.strerror or type(exc).__name__
    return text[:1].lower() + text[1:]


def atomic_write_text(path: str | os.PathLike, text: str, before_replace=None) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically: readers see the old file or the whole new one.

    The text goes to a temporary file in the same directory, is flushed to disk, and replaces
    ``path`` with :func:`os.replace`.  A symlink at ``path`` is replaced by the file, never followed
    (what it points to is left alone).  On any failure the temporary file is removed.
    ``before_replace``, if given, is called just before the replace and may raise to cancel it.

    Raises
    ------
    DumpError
        One line naming ``path`` and the cause (permission denied, disk full, file too large...).
    """
    path = Path(path)
    if path.is_dir():
        raise DumpError(f"{path}: is a directory, expected a file name")
    existed = os.path.lexists(path)
    try:
        write_file_atomically(path, text, before_replace)
    except OSError as exc:
        kept = "; the previous file is unchanged" if existed else ""
        raise DumpError(f"{path}: cannot write: {os_error_text(exc)}{kept}") from None
    return path


def write_file_atomically(path: Path, text: str, before_replace=None) -> None:
    """:func:`atomic_write_text` that lets the ``OSError`` through (for callers that say it their way).

    A device, FIFO or socket at ``path`` (``/dev/stdout``, a pipe) is written through, not replaced.
    """
    try:
        target = os.stat(path)  # through a symlink: what the name finally is
    except OSError:
        target = None
    if target is not None and not stat.S_ISREG(target.st_mode) and not stat.S_ISDIR(target.st_mode):
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(text)
        return
    fd, temp = tempfile.mkstemp(prefix=TEMP_PREFIX + path.name[:64] + ".", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(text.encode("utf-8"))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, 0o666 & ~umask())
        if before_replace is not None:
            before_replace()
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


_UMASK: int | None = None


def umask() -> int:
    """The process's umask (read once: reading it means setting it)."""
    global _UMASK
    if _UMASK is None:
        _UMASK = os.umask(0o022)
        os.umask(_UMASK)
    return _UMASK
