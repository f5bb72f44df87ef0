"""Running jobs on a Dask cluster: :func:`run_job` mapped over it by ``client.map``; a job that kills
its Dask worker is reported as ``"crashed"``, one slower than the time limit as ``"timeout"``.
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict
from typing import Any, Callable, Sequence

from .jobs import run_job
from .results import KernelResult

__all__ = ["run_dask"]


def run_dask(jobs: Sequence[dict], client: Any, timeout: float | None,
             on_result: Callable[[dict], None]) -> None:
    """Run ``jobs`` on a Dask cluster through ``client`` (``client.map`` of :func:`run_job`)."""
    from distributed import as_completed
    from distributed.scheduler import KilledWorker

    futures = client.map(run_job, list(jobs), key=[f"tvm_hybrid_nb-verify-{j['name']}-{os.getpid()}-"
                                                   f"{time.monotonic_ns()}" for j in jobs], pure=False)
    by_key = {f.key: job for f, job in zip(futures, jobs)}
    starts = {f.key: time.monotonic() for f in futures}
    try:
        for future in as_completed(futures, timeout=None):
            job = by_key[future.key]
            try:
                result = future.result()
            except KilledWorker as exc:
                result = asdict(KernelResult(job["name"], "crashed", None,
                                             f"the job killed its Dask worker(s): {exc}",
                                             time.monotonic() - starts[future.key]))
            except Exception as exc:
                result = asdict(KernelResult(job["name"], "crashed", None, f"{type(exc).__name__}: {exc}",
                                             time.monotonic() - starts[future.key]))
            if timeout is not None and result["seconds"] > timeout and result["outcome"] != "crashed":
                result = asdict(KernelResult(job["name"], "timeout", None,
                                             f"took {result['seconds']:.1f} s, over the time limit of "
                                             f"{timeout:g} s", result["seconds"]))
            on_result(result)
    finally:
        client.cancel(futures)
