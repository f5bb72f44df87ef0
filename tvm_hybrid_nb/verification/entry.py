"""The entry point, :func:`verify`: check the settings, turn the model's kernels into jobs, run them
where asked (local workers, Dask, or in this process) and assemble the :class:`VerifyReport`.
"""
from __future__ import annotations

import os
import time
from typing import Any, Callable, Sequence

import tvm

from .cluster import run_dask
from .jobs import _dumps, make_job, run_job
from .kernels import _resolve_pass, model_kernels, pipeline_pass_names
from .local import run_local
from .results import KernelResult, VerifyReport
from .settings import DEFAULT_TIMEOUT, REFERENCES, STAGE_SELECTIONS, VerifyError

__all__ = ["verify", "default_workers", "p_name"]


def _target(target: Any) -> "tvm.target.Target":
    if isinstance(target, tvm.target.Target):
        return target
    if target == "cuda":  # dlight and the CUDA code generator want an architecture
        target = {"kind": "cuda", "arch": "sm_80"}
    try:
        return tvm.target.Target(target)
    except Exception as exc:
        from ..capture import short_tvm_message

        raise VerifyError(f"unknown target {target!r}: {short_tvm_message(exc)}") from None


def _schedule_label(schedule: Any) -> str:
    if schedule is None:
        return "none"
    if isinstance(schedule, str):
        return schedule
    if isinstance(schedule, (list, tuple)):
        return "dlight rules: " + ", ".join(type(r).__name__ for r in schedule)
    return getattr(schedule, "__qualname__", type(schedule).__name__)


def _check_settings(schedule, reference, stages, mode, passes, workers, timeout) -> None:
    from ..module import EMULATION_MODES

    if isinstance(schedule, str) and schedule != "dlight":
        raise VerifyError(f"schedule must be None, 'dlight', a list of dlight rules or a callable, got {schedule!r}")
    if not (schedule is None or isinstance(schedule, (str, list, tuple)) or callable(schedule)):
        raise VerifyError(f"schedule must be None, 'dlight', a list of dlight rules or a callable, "
                          f"got {type(schedule).__name__}")
    if reference not in REFERENCES:
        raise VerifyError(f"reference must be one of {REFERENCES}, got {reference!r}")
    if stages not in STAGE_SELECTIONS:
        raise VerifyError(f"stages must be one of {STAGE_SELECTIONS}, got {stages!r}")
    if mode not in EMULATION_MODES:
        raise VerifyError(f"mode must be one of {EMULATION_MODES}, got {mode!r}")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 0):
        raise VerifyError(f"workers must be a whole number >= 0, got {workers!r}")
    if timeout is not None and not timeout > 0:
        raise VerifyError(f"timeout must be a positive number of seconds, got {timeout!r}")
    known = set(pipeline_pass_names())
    for item in passes:
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str)):
            raise VerifyError(f"passes must be a list of (AFTER, pass) pairs, got {item!r}")
        after, p = item
        if after not in known:
            raise VerifyError(f"passes: no pass named {after!r} in TVM's TIR pipeline "
                              f"(e.g. 'tirx.FlattenBuffer', 's_tir.LowerOpaqueBlock')")
        if not (isinstance(p, tvm.transform.Pass) or callable(p)):
            raise VerifyError(f"passes: the pass after {after!r} must be a tvm.transform.Pass or a function "
                              f"returning one, got {type(p).__name__}")


def default_workers() -> int:
    """The number of cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def verify(model: Any, target: Any = "llvm", schedule: Any = None, reference: str = "native",
           stages: str = "changed", mode: str = "fast", check: bool = False, sizes: dict | None = None,
           workers: int | None = None, client: Any = None, passes: Sequence[tuple[str, Any]] = (),
           timeout: float | None = DEFAULT_TIMEOUT, seed: int = 0,
           progress: Callable[[int, int, KernelResult], None] | None = None) -> VerifyReport:
    """Verify every kernel of ``model`` at every pass against a reference.

    Parameters
    ----------
    model : tvm.IRModule or list
        A Relax module (lowered with LegalizeOps … FuseTIR under ``target``), an IRModule of
        PrimFuncs, or a list of PrimFuncs, Schedules or HybridModules.
    target : str, dict or tvm.target.Target
        What the kernels are built for (``"cuda"`` means sm_80; emulation needs no GPU).
    schedule : None, "dlight", list of dlight rules, or callable
        Applied to every kernel before building.  A callable gets the PrimFunc (under ``with
        target:``) and returns a PrimFunc, Schedule or IRModule, or None to keep the kernel.
    reference : {"native", "input"}
        ``"native"``: the unscheduled PrimFunc compiled natively for llvm (for cuda kernels too);
        ``"input"``: the emulation of the kernel before any pass (after the schedule).
    stages : {"changed", "all"}
        Emulate only the stages whose IR changed, or every stage before MakePackedAPI.
    mode : {"fast", "exact"}
        Emulation mode (bit-identical results).
    check : bool
        Run the sanitizers (a bounds error, race or uninitialised read makes the stage wrong).
    sizes : dict, optional
        Values of symbolic sizes for the seeded inputs (a kernel with a size not given is refused).
    workers : int, optional
        Local processes at once (default: every core); ``0`` runs in this process, one kernel after
        another, without isolation or time limit.
    client : dask.distributed.Client, optional
        Run the jobs on this Dask cluster instead.
    passes : list of (AFTER, pass)
        Custom passes, each inserted right after the pipeline pass named AFTER (a stage of its own).
        A pass is a ``tvm.transform.Pass`` (only with ``workers=0``: TVM passes cannot be shipped)
        or a function with no arguments returning one (shipped by cloudpickle).
    timeout : float or None
        Per-kernel time limit in seconds (local workers kill the job; on Dask a slower job is
        reported as ``"timeout"`` when it finishes).
    seed : int
        Seed of the random inputs.
    progress : callable, optional
        ``progress(0, total, None)`` before the first job starts, then ``progress(done, total,
        kernel_result)`` as each kernel finishes (in completion order).

    Returns
    -------
    VerifyReport
    """
    start = time.perf_counter()
    target_obj = _target(target)
    passes = list(passes)
    _check_settings(schedule, reference, stages, mode, passes, workers, timeout)
    if client is None and workers is None:
        workers = default_workers()
    if client is None and workers != 0 and any(isinstance(p, tvm.transform.Pass) for _, p in passes):
        raise VerifyError("passes: a tvm.transform.Pass object cannot be sent to worker processes; give a "
                          "function that returns the pass (e.g. `lambda: my_pass`) or use workers=0")
    funcs = model_kernels(model, target_obj)
    spec_obj = {"schedule": schedule, "passes": passes}
    if client is not None or workers != 0:
        try:
            spec = _dumps(spec_obj)
        except Exception as exc:
            raise VerifyError(f"the schedule or passes cannot be sent to workers: {type(exc).__name__}: {exc}") \
                from None
    else:
        spec = b""
    settings = {"reference": reference, "stages": stages, "mode": mode, "check": bool(check),
                "sizes": dict(sizes or {}), "seed": int(seed)}
    jobs = [make_job(name, func, target_obj, spec, settings) for name, func in funcs.items()]
    results: dict[str, dict] = {}
    if progress is not None:
        progress(0, len(jobs), None)

    def on_result(result: dict) -> None:
        results[result["name"]] = result
        if progress is not None:
            progress(len(results), len(jobs), KernelResult(**result))

    if client is not None:
        runner, n = "dask", len(client.scheduler_info().get("workers", {})) or 1
        run_dask(jobs, client, timeout, on_result)
    elif workers == 0:
        runner, n = "in-process", 1
        for job in jobs:  # the spec is used as it is: TVM pass objects cannot be serialised
            on_result(run_job(job, spec_obj))
    else:
        runner, n = "local", workers
        run_local(jobs, workers, timeout, on_result)
    kernels = [KernelResult(**results[name]) for name in funcs]
    return VerifyReport(kernels=kernels, target=str(target_obj.kind.name), schedule=_schedule_label(schedule),
                        reference=reference, stages=stages, mode=mode,
                        passes=[f"{p_name(p)} after {after}" for after, p in passes],
                        seconds=time.perf_counter() - start, runner=runner, workers=n,
                        _rebuild=(funcs, target_obj, spec_obj))


def p_name(item: Any) -> str:
    """A custom pass's name (resolving a factory)."""
    try:
        return _resolve_pass(item).info.name
    except Exception:
        return getattr(item, "__name__", type(item).__name__)
