"""Running jobs on local worker processes forked from a forkserver that has already imported TVM;
a worker that crashes or runs past the time limit costs only its own job.
"""
from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import time
from collections import deque
from dataclasses import asdict
from typing import Any, Callable, Sequence

from .jobs import _worker_main
from .results import KernelResult

__all__ = ["FORKSERVER_PRELOAD", "run_local"]


#: Imported once by the forkserver, so that no worker pays for them (about 0.5 s per process otherwise).
#: The first is the workers' entry point (:func:`_worker_main`); importing it imports the whole package.
FORKSERVER_PRELOAD = ["tvm_hybrid_nb.verification.jobs", "tvm_hybrid_nb.module", "tvm_hybrid_nb.bisect",
                      "cloudpickle", "tvm.s_tir.dlight"]


def _forkserver_context():
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(FORKSERVER_PRELOAD)
    return ctx


class _Worker:
    """One worker process and the parent's end of its pipe; ``job``/``start`` while it runs one."""

    def __init__(self, ctx, number: int):
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_worker_main, args=(child,), name=f"verify worker {number}", daemon=True)
        self.proc.start()
        child.close()
        self.job: dict | None = None
        self.start = 0.0

    def give(self, job: dict) -> None:
        self.conn.send(job)
        self.job, self.start = job, time.monotonic()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()
        self.conn.close()

    def stop(self) -> None:
        """Ask an idle worker to exit; kill it if it does not."""
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()


def run_local(jobs: Sequence[dict], workers: int, timeout: float | None,
              on_result: Callable[[dict], None]) -> None:
    """Run ``jobs`` on ``workers`` local worker processes, forked from a forkserver.

    A worker runs one job at a time and is reused for the next, so a process's first build and
    emulation (TVM's lazy initialisation, first calls into numpy) are paid once per worker, not
    once per kernel.  ``on_result`` gets every result dict as it arrives (in completion order).  A
    worker that dies without a result gives ``"crashed"`` (with its exit signal); one past
    ``timeout`` seconds on a job is killed and gives ``"timeout"``.  Either way only that job is
    lost: the worker is replaced by a fresh process for the jobs still pending.
    """
    ctx = _forkserver_context()
    pending = deque(jobs)
    idle: list[_Worker] = []
    busy: dict[Any, _Worker] = {}  # the parent's end of the pipe -> worker
    started = 0
    try:
        while pending or busy:
            while pending and len(busy) < workers:
                fresh = not idle
                if fresh:
                    started += 1
                    worker = _Worker(ctx, started)
                else:
                    worker = idle.pop()
                try:
                    worker.give(pending[0])
                except OSError:
                    worker.kill()
                    if fresh:  # a new process that cannot take a job: report it rather than retry forever
                        on_result(_died(pending.popleft(), worker.proc.exitcode, 0.0))
                    # else an idle worker that died between jobs: not the job's fault, give it to another
                    continue
                pending.popleft()
                busy[worker.conn] = worker
            wait = None
            if timeout is not None:
                wait = max(0.0, min(w.start + timeout for w in busy.values()) - time.monotonic())
            for conn in multiprocessing.connection.wait(list(busy), timeout=wait):
                worker = busy.pop(conn)
                try:
                    result = conn.recv()
                except (EOFError, OSError):
                    worker.proc.join()
                    result = _died(worker.job, worker.proc.exitcode, time.monotonic() - worker.start)
                    worker.kill()
                else:
                    worker.job = None
                    idle.append(worker)
                on_result(result)
            if timeout is not None:
                now = time.monotonic()
                for conn, worker in list(busy.items()):
                    if now - worker.start >= timeout:
                        worker.kill()
                        del busy[conn]
                        on_result(asdict(KernelResult(worker.job["name"], "timeout", None,
                                                      f"stopped after the time limit of {timeout:g} s",
                                                      now - worker.start)))
    finally:
        for worker in busy.values():
            worker.kill()
        for worker in idle:
            worker.stop()


def _died(job: dict, exitcode: int | None, seconds: float) -> dict:
    import signal

    if exitcode is not None and exitcode < 0:
        try:
            how = f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"signal {-exitcode}"
    else:
        how = f"exit status {exitcode}"
    return asdict(KernelResult(job["name"], "crashed", None, f"the worker process died ({how})", seconds))
