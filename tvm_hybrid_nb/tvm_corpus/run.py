"""Running a harvest: worker processes (one function at a time, each with a time and an address-space
limit, so that a hang or a segfault costs only that function) and the parent that schedules them,
kills the late and counts the outcomes."""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from ..tvmscript_parsing import remembered_module_misses
from ..zoo import KernelOutcome
from .check import NOT_TESTED, TESTED, _error_line, check_function
from .harvest import HarvestedFunc, construct


#: Seconds a fresh worker process may take to import TVM before its first function's clock starts.
_STARTUP_SECONDS = 60.0

#: Seconds the imports and assignments around a function may take, outside the function's clock: a
#: test module's imports (``tvm.s_tir.tensor_intrin.cuda`` registers hundreds of intrinsics) take
#: minutes on a loaded machine, once per worker.  A file whose surroundings take longer is given up.
_CONTEXT_SECONDS = 600.0


def _worker(result_fd: int, mode: str, memory_gib: float) -> None:
    """Check the functions named on stdin (one JSON line each), reporting on ``result_fd``."""
    import resource

    if memory_gib > 0:
        limit = int(memory_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    out = os.fdopen(result_fd, "w", buffering=1)
    parent = os.getppid()

    def orphaned() -> None:  # the parent was killed: do not run on in the background
        while os.getppid() == parent:
            time.sleep(2)
        os._exit(1)

    import threading
    threading.Thread(target=orphaned, daemon=True).start()
    import tvm  # noqa: F401 - warm up before the first function's clock starts

    from .. import module  # noqa: F401

    def send(**msg) -> None:
        out.write(json.dumps(msg) + "\n")
        out.flush()

    # Test modules define many TVMScript functions (and import tvm.s_tir.tensor_intrin): each
    # decorator's inspect.stack() costs a fifth with the module misses remembered.
    with remembered_module_misses():
        for line in sys.stdin:
            item = HarvestedFunc(**json.loads(line))
            start = time.perf_counter()
            send(phase="construct")
            try:
                func = construct(item, report=lambda phase: send(phase=phase))
            except BaseException as exc:  # noqa: BLE001 - TVMScript errors come as many types
                if isinstance(exc, KeyboardInterrupt):
                    raise
                send(done=asdict(KernelOutcome("tvm-tests", item.origin, "not built here",
                                               reason=f"{type(exc).__name__}: {_error_line(exc)[:200]}",
                                               seconds=time.perf_counter() - start)))
                continue
            import tvm_ffi
            # TVM's build needs an entry symbol; a private function (no symbol) gets "main", as the zoo's do,
            # and duplicates that differ only in their name are found.
            func = func.with_attr("global_symbol", "main")
            send(phase="built", hash=str(tvm_ffi.structural_hash(func)))
            if sys.stdin.readline().strip() != "go":
                continue
            outcome = check_function(func, item.origin, mode=mode, report=lambda phase: send(phase=phase))
            outcome.seconds = time.perf_counter() - start
            send(done=asdict(outcome))


# ---------------------------------------------------------------------- run (the parent)
#: The worker's phases in which a death or a timeout is TVM's or the test module's, not the emulator's.
_NOT_OURS = {"startup": "not built here", "construct": "not built here", "parse": "not built here",
             "built": "not built here", "build": "no native reference", "native": "no native reference"}


class _Worker:
    def __init__(self, mode: str, memory_gib: float):
        read_fd, write_fd = os.pipe()
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])  # the directory holding tvm_hybrid_nb
        env["PYTHONPATH"] = package_root + os.pathsep + env.get("PYTHONPATH", "")
        self.stderr = tempfile.TemporaryFile()  # the last line tells why a worker died
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tvm_hybrid_nb.tvm_corpus", "--worker", str(write_fd), mode, str(memory_gib)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self.stderr, pass_fds=(write_fd,),
            text=True, env=env, start_new_session=True)
        os.close(write_fd)
        self.fd = read_fd
        self.buffer = b""
        self.item: HarvestedFunc | None = None
        self.phase = ""
        self.deadline = 0.0
        self.started = 0.0

    def read_lines(self) -> list[str] | None:
        """The complete lines the worker has written since the last call; None once it has exited."""
        data = os.read(self.fd, 1 << 16)
        if not data:
            return None
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b"\n")
        return [line.decode() for line in lines]

    def last_error(self) -> str:
        self.stderr.seek(0)
        lines = [line for line in self.stderr.read().decode(errors="replace").splitlines() if line.strip()]
        return lines[-1].strip()[:200] if lines else ""

    def send(self, text: str) -> None:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        os.close(self.fd)
        self.stderr.close()


@dataclass
class CorpusReport:
    """Every harvested function's outcome; the table has one row per test directory."""

    outcomes: list[tuple[HarvestedFunc, KernelOutcome]] = field(default_factory=list)

    def table(self) -> str:
        cols = NOT_TESTED + TESTED
        head = "| tests dir | harvested | " + " | ".join(cols[:3]) + " | tested | " + " | ".join(cols[3:]) + " |"
        lines = [head, "|" + "---|" * (len(cols) + 3)]
        groups = sorted({item.group for item, _ in self.outcomes}) + ["total"]
        for group in groups:
            counts = Counter(o.outcome for item, o in self.outcomes if group in ("total", item.group))
            tested = sum(counts[c] for c in TESTED)
            row = [group, str(sum(counts.values()))] + [str(counts[c]) for c in NOT_TESTED] + [str(tested)]
            row += [str(counts[c]) for c in TESTED]
            lines.append("| " + " | ".join(f"**{c}**" if group == "total" else c for c in row) + " |")
        return "\n".join(lines)

    def counts(self) -> Counter:
        return Counter(o.outcome for _, o in self.outcomes)


def run_corpus(items: list[HarvestedFunc], mode: str = "fast", timeout: float = 60.0, jobs: int = 1,
               memory_gib: float = 8.0,
               progress: Callable[[HarvestedFunc, KernelOutcome], None] | None = None) -> CorpusReport:
    """Check every harvested function in worker processes (``jobs`` at once), each within ``timeout``
    seconds and ``memory_gib`` of address space; structural duplicates are checked once."""
    report = CorpusReport()
    pending = list(items)
    seen_hashes: set[str] = set()
    slow_context: set[str] = set()  # files whose imports and assignments were over _CONTEXT_SECONDS
    workers: list[_Worker] = []
    sel = selectors.DefaultSelector()

    def finish(worker: _Worker, outcome: KernelOutcome) -> None:
        report.outcomes.append((worker.item, outcome))
        if progress is not None:
            progress(worker.item, outcome)
        worker.item = None

    def start_next(worker: _Worker) -> bool:
        while pending and pending[0].path in slow_context:
            worker.item = pending.pop(0)
            finish(worker, KernelOutcome("tvm-tests", worker.item.origin, "not built here",
                                         reason=f"over {_CONTEXT_SECONDS:g} s in the test module's imports"))
        if not pending:
            return False
        worker.item = pending.pop(0)
        worker.phase = "startup"
        worker.started = time.perf_counter()
        # The clock starts when the worker reads the function ("construct"); a fresh worker first
        # imports TVM, which gets a minute of its own.
        worker.deadline = worker.started + timeout + _STARTUP_SECONDS
        worker.send(json.dumps(asdict(worker.item)))
        return True

    def replace(worker: _Worker) -> _Worker:
        sel.unregister(worker.fd)
        worker.kill()
        workers.remove(worker)
        fresh = _Worker(mode, memory_gib)
        workers.append(fresh)
        sel.register(fresh.fd, selectors.EVENT_READ, fresh)
        return fresh

    def handle(w: _Worker, msg: dict) -> None:
        if "done" in msg:
            finish(w, KernelOutcome(**msg["done"]))
            start_next(w)
        elif msg.get("phase") == "built":
            w.phase = "built"
            if msg["hash"] in seen_hashes:
                w.send("skip")
                finish(w, KernelOutcome("tvm-tests", w.item.origin, "duplicate",
                                        seconds=time.perf_counter() - w.started))
                start_next(w)
            else:
                seen_hashes.add(msg["hash"])
                w.send("go")
        else:
            w.phase = msg.get("phase", w.phase)
            if w.phase == "construct":  # the imports and assignments around the function
                w.started = time.perf_counter()
                w.deadline = w.started + _CONTEXT_SECONDS
            elif w.phase == "parse":  # the function's own clock
                w.deadline = time.perf_counter() + timeout

    try:
        for _ in range(max(1, min(jobs, len(pending)))):
            w = _Worker(mode, memory_gib)
            workers.append(w)
            sel.register(w.fd, selectors.EVENT_READ, w)
            start_next(w)
        while any(w.item is not None for w in workers):
            now = time.perf_counter()
            wait = min(w.deadline for w in workers if w.item is not None) - now
            for key, _ in sel.select(timeout=max(wait, 0.0)):
                w: _Worker = key.data
                if w.item is None:
                    continue
                lines = w.read_lines()
                if lines is None:  # the worker died: a signal, or memory beyond its limit
                    code = w.proc.wait()
                    died = f"the process died ({'signal ' + str(-code) if code < 0 else 'exit ' + str(code)})"
                    died += f" in TVM's {w.phase}" if w.phase in ("build", "native") else ""
                    died += f": {w.last_error()}" if w.last_error() else ""
                    kind = _NOT_OURS.get(w.phase, "crash")
                    outcome = KernelOutcome("tvm-tests", w.item.origin, kind,
                                            stage=w.phase if kind == "crash" else "", reason=died,
                                            seconds=time.perf_counter() - w.started)
                    finish(w, outcome)
                    start_next(replace(w))
                    continue
                for line in lines:
                    if w.item is None:
                        break
                    handle(w, json.loads(line))
            now = time.perf_counter()
            for w in list(workers):
                if w.item is not None and now >= w.deadline:
                    # Over the limit while TVM parses, builds or runs natively: no reference in time.
                    kind = _NOT_OURS.get(w.phase, "timeout")
                    stage = "" if kind != "timeout" else w.phase
                    reason = f"over {timeout:g} s" + (f" in TVM's {w.phase}" if kind != "timeout" else "")
                    if w.phase == "construct":
                        slow_context.add(w.item.path)
                        reason = f"over {_CONTEXT_SECONDS:g} s in the test module's imports"
                    finish(w, KernelOutcome("tvm-tests", w.item.origin, kind, stage=stage, reason=reason,
                                            seconds=now - w.started))
                    start_next(replace(w))
    finally:
        for w in workers:
            w.kill()
        sel.close()
    return report
