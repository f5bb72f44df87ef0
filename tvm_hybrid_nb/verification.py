"""Verify a whole model: every kernel, every changed pass, against a reference, on all cores or a cluster.

:func:`verify` lowers a Relax ``IRModule`` the way TVM's backends do (``LegalizeOps`` … ``FuseTIR``),
takes every PrimFunc, and turns each into an independent **job**: the PrimFunc as TVM JSON
(``tvm.ir.save_json``) plus the settings, with a user's schedule and custom passes serialised by
cloudpickle (by value for code defined in a notebook or script).  A job builds its kernel with the
capture (schedule applied, custom passes inserted as stages of their own), emulates every changed
stage before MakePackedAPI on seeded inputs, compares with the reference and, for a wrong kernel,
names the first divergent pass.  The result is a plain dict, so jobs move between processes and
machines without pickling TVM objects.

Where jobs run:

* default: ``workers`` worker processes forked from a ``forkserver`` that has already imported TVM
  (a fork costs milliseconds), each running one job at a time and reused for the next, so that a
  process's cold first build and emulation are paid once per worker, not once per kernel.  A job
  that crashes (a segfault, an abort) takes only its own worker down and is reported as
  ``"crashed"``; one that runs past ``timeout`` is killed with its worker and reported as
  ``"timeout"``; either way a fresh worker takes the jobs still pending;
* ``client=dask.distributed.Client(...)``: the same job function mapped over the cluster
  (``client.map``); a job that kills its Dask worker surfaces as ``KilledWorker`` → ``"crashed"``;
* ``workers=0``: in this process, one job after another (no isolation; for debugging and for custom
  passes given as ``tvm.transform.Pass`` objects, which cannot be shipped).

No IPython, no widgets: :mod:`tvm_hybrid_nb.verify_report` renders the report, the magic and the
command line show it.
"""
from __future__ import annotations

import contextlib
import json
import multiprocessing
import multiprocessing.connection
import os
import time
import traceback
from collections import Counter, deque
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import tvm

from .errors import BuildError, HybridError

OUTCOMES = ("ok", "refused", "wrong", "crashed", "timeout")
#: Outcomes that make a report fail (``refused`` means "could not be checked", not "wrong").
FAILING_OUTCOMES = ("wrong", "crashed", "timeout")
REFERENCES = ("native", "input")
STAGE_SELECTIONS = ("changed", "all")
#: Name under which the pipeline with inserted custom passes is registered (in each worker).
PIPELINE_NAME = "tvm_hybrid_nb.verify"
#: Default per-kernel time limit, seconds.
DEFAULT_TIMEOUT = 600.0


class VerifyError(HybridError):
    """Bad arguments to :func:`verify` (an unknown pass name, schedule, reference, ...)."""


# ---------------------------------------------------------------------- report data
@dataclass
class KernelResult:
    """The verdict on one kernel.

    Attributes
    ----------
    name : str
        The PrimFunc's name in the model.
    outcome : str
        ``"ok"`` (every compared stage matches the reference), ``"refused"`` (cannot be emulated or
        checked; ``reason`` says why), ``"wrong"`` (a stage differs), ``"crashed"`` (the job failed:
        a TVM error, or its process died) or ``"timeout"``.
    pass_name : str or None
        For ``"wrong"``: the first divergent pass (``"input"`` when the kernel before any pass,
        i.e. after the schedule, already differs); for ``"crashed"``: the pass that failed, if known.
    reason : str or None
        One line: the mismatch, the error, or why the kernel was refused.
    seconds : float
        Wall time of the job.
    stages_checked : int
        Stages emulated and compared.
    stages_skipped : int
        Stages passed over because they cannot be emulated.
    """

    name: str
    outcome: str
    pass_name: str | None = None
    reason: str | None = None
    seconds: float = 0.0
    stages_checked: int = 0
    stages_skipped: int = 0

    @property
    def failed(self) -> bool:
        return self.outcome in FAILING_OUTCOMES

    def describe(self) -> str:
        where = f" at {self.pass_name}" if self.pass_name else ""
        why = f": {self.reason}" if self.reason else ""
        return f"{self.name}: {self.outcome}{where}{why}"


@dataclass
class VerifyReport:
    """Result of :func:`verify`: one :class:`KernelResult` per kernel, in the model's order."""

    kernels: list[KernelResult]
    target: str
    schedule: str
    reference: str
    stages: str
    mode: str
    passes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    runner: str = "local"
    workers: int = 1
    #: Settings to rebuild one kernel in this process (for the explorer); not part of the JSON.
    _rebuild: Any = field(default=None, repr=False, compare=False)

    @property
    def counts(self) -> dict[str, int]:
        """Outcome → number of kernels (every outcome listed, zeros included)."""
        counted = Counter(k.outcome for k in self.kernels)
        return {outcome: counted.get(outcome, 0) for outcome in OUTCOMES}

    @property
    def ok(self) -> bool:
        """No kernel is wrong, crashed or timed out."""
        return not any(k.failed for k in self.kernels)

    @property
    def failures(self) -> list[KernelResult]:
        return [k for k in self.kernels if k.failed]

    def kernel(self, name: str) -> KernelResult:
        for k in self.kernels:
            if k.name == name:
                return k
        raise VerifyError(f"no kernel named {name!r} in this report")

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}
        data["kernels"] = [asdict(k) for k in self.kernels]
        data["passes"] = list(self.passes)
        data["counts"] = self.counts
        data["ok"] = self.ok
        return data

    def to_json(self, indent: int | None = 1) -> str:
        """The report as JSON: settings, counts, and every kernel's result."""
        return json.dumps(self.to_dict(), indent=indent)

    def to_html(self, path: str | os.PathLike | None = None) -> str:
        """A self-contained HTML report (the style of :func:`tvm_hybrid_nb.report`); written to
        ``path`` when given.  Returns the HTML."""
        from .verify_report import verify_report_html

        text = verify_report_html(self)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    def _repr_html_(self) -> str:
        from .verify_report import verify_table_html

        return verify_table_html(self)

    def __str__(self) -> str:
        counts = ", ".join(f"{n} {o}" for o, n in self.counts.items() if n)
        head = f"{'OK' if self.ok else 'FAILED'}: {len(self.kernels)} kernels ({counts}) in {self.seconds:.1f} s"
        return "\n".join([head] + ["  " + k.describe() for k in self.kernels if k.outcome != "ok"])

    def hybrid_module(self, name: str):
        """Build kernel ``name`` in this process exactly as its job did (schedule and custom passes
        applied) and return its :class:`~tvm_hybrid_nb.module.HybridModule`, for the explorer."""
        self.kernel(name)
        if self._rebuild is None:
            raise VerifyError("this report was loaded without its model; cannot rebuild a kernel")
        funcs, target, spec = self._rebuild
        return build_kernel(name, funcs[name], target, spec.get("schedule"), spec.get("passes", []))


# ---------------------------------------------------------------------- kernels of a model
def lower_model(mod: "tvm.IRModule", target: "tvm.target.Target") -> "tvm.IRModule":
    """Lower a Relax module's operators to fused PrimFuncs, as TVM's backends do before scheduling."""
    from tvm import relax

    with target:
        for transform in (relax.backend.DispatchSortScan(), relax.transform.LegalizeOps(),
                          relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(),
                          relax.transform.FuseOps(), relax.transform.FuseTIR()):
            mod = transform(mod)
    return mod


def model_kernels(model: Any, target: "tvm.target.Target") -> dict[str, "tvm.tirx.PrimFunc"]:
    """Every PrimFunc of ``model`` by name: a Relax IRModule (lowered first), an IRModule of
    PrimFuncs, or a list of PrimFuncs, Schedules or HybridModules."""
    from .module import HybridModule, as_ir_module

    if isinstance(model, tvm.IRModule):
        if any(not isinstance(f, tvm.tirx.PrimFunc) for f in model.functions.values()):
            try:
                model = lower_model(model, target)
            except Exception as exc:
                from .capture import short_tvm_message

                raise VerifyError(f"lowering the Relax module failed: {short_tvm_message(exc)}") from exc
        funcs = {gv.name_hint: f for gv, f in model.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    elif isinstance(model, (list, tuple)):
        funcs = {}
        for item in model:
            if isinstance(item, HybridModule):
                name, func = item.func_name, item.stages[0].function
            else:
                try:
                    name, mod = as_ir_module(item)
                except BuildError as exc:
                    raise VerifyError(f"cannot verify a list item: {exc}") from None
                func = mod[name]
            if name in funcs:
                raise VerifyError(f"two kernels are named {name!r}; give them distinct global_symbol names")
            funcs[name] = func
    else:
        raise VerifyError(f"cannot verify a {type(model).__name__}: expected a Relax tvm.IRModule, an IRModule "
                          f"of PrimFuncs, or a list of PrimFuncs, Schedules or HybridModules")
    if not funcs:
        raise VerifyError("the model has no PrimFunc to verify")
    return funcs


# ---------------------------------------------------------------------- schedules and custom passes
def dlight_rules(target: "tvm.target.Target") -> list:
    """dlight's default rules for ``target`` (the GPU set for GPUs, the CPU set otherwise)."""
    from tvm.s_tir import dlight as dl

    if "gpu" in target.keys:
        return [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]
    return [dl.cpu.GEMV(), dl.cpu.Reduction()]


def apply_schedule(name: str, mod: "tvm.IRModule", target: "tvm.target.Target", schedule: Any) -> "tvm.IRModule":
    """``mod`` (one kernel) with ``schedule`` applied: None, ``"dlight"``, a list of dlight rules, or a
    callable taking the PrimFunc (under ``with target:``) and returning a PrimFunc, Schedule or
    IRModule (None: leave the kernel as it is)."""
    from .module import as_ir_module

    if schedule is None:
        return mod
    if isinstance(schedule, str) or isinstance(schedule, (list, tuple)):
        from tvm.s_tir import dlight as dl

        rules = dlight_rules(target) if isinstance(schedule, str) else list(schedule)
        with target:
            # ApplyDefaultSchedule edits its module in place: give it a copy.
            return dl.ApplyDefaultSchedule(*rules)(tvm.IRModule(dict(mod.functions.items()), attrs=mod.attrs))
    with target:
        out = schedule(mod[name])
    if out is None:
        return mod
    try:
        _, scheduled = as_ir_module(out, name if isinstance(out, tvm.IRModule) and len(out.functions) > 1 else None)
    except BuildError as exc:
        raise BuildError(f"the schedule returned something unusable: {exc}") from None
    func = scheduled[scheduled.get_global_vars()[0]]
    return tvm.IRModule({name: func.with_attr("global_symbol", name)})


def _resolve_pass(item: Any) -> "tvm.transform.Pass":
    obj = item() if callable(item) and not isinstance(item, tvm.transform.Pass) else item
    if not isinstance(obj, tvm.transform.Pass):
        raise VerifyError(f"a custom pass must be a tvm.transform.Pass or a function returning one, "
                          f"got {type(obj).__name__}")
    return obj


def _insert_after(passes: list, insertions: Sequence[tuple[str, Any]]) -> list:
    names = [p.info.name for p in passes]
    out = list(passes)
    for after, _ in insertions:
        if after not in names:
            raise VerifyError(f"no pass named {after!r} in the pipeline (passes: {', '.join(names)})")
    for after, item in reversed(list(insertions)):
        # reversed: several passes after one name keep the order they were given in
        out.insert(next(i for i, p in enumerate(out) if p.info.name == after) + 1, _resolve_pass(item))
    return out


@contextlib.contextmanager
def _sequential_with(insertions: Sequence[tuple[str, Any]]):
    """While active, the pipeline's ``Sequential`` gets the custom passes inserted after their passes.

    TVM's default TIR pipeline builds its pass list inside one module pass and runs it with
    ``tvm.ir.transform.Sequential(passes)``; wrapping that constructor is the one place where the
    list can be extended without copying TVM's pipeline.
    """
    transform = tvm.ir.transform
    original = transform.Sequential

    def sequential(passes=None, *args, **kwargs):
        return original(_insert_after(list(passes or []), insertions), *args, **kwargs)

    transform.Sequential = sequential
    try:
        yield
    finally:
        transform.Sequential = original


def register_pipeline(insertions: Sequence[tuple[str, Any]]) -> str:
    """Register TVM's default TIR pipeline with ``insertions`` ``(AFTER, pass)`` as :data:`PIPELINE_NAME`."""
    def factory():
        base, finalize_host, finalize_device = tvm.tirx.get_tir_pipeline("default")

        @tvm.transform.module_pass(opt_level=0, name="tvm_hybrid_nb.verify_pipeline")
        def pipeline(mod, _ctx):
            with _sequential_with(insertions):
                return base(mod)

        return pipeline, finalize_host, finalize_device

    tvm.tirx.register_tir_pipeline(PIPELINE_NAME, factory)
    return PIPELINE_NAME


class _Listed(Exception):
    pass


def pipeline_pass_names() -> list[str]:
    """The names of the default TIR pipeline's passes, in order (no module is built)."""
    transform = tvm.ir.transform
    original = transform.Sequential
    names: list[str] = []

    def listing(passes=None, *args, **kwargs):
        names.extend(p.info.name for p in passes or [])
        raise _Listed

    base = tvm.tirx.get_tir_pipeline("default")[0]
    transform.Sequential = listing
    try:
        with tvm.transform.PassContext():
            base(tvm.IRModule())
    except Exception:
        pass
    finally:
        transform.Sequential = original
    return names


def build_kernel(name: str, func: "tvm.tirx.PrimFunc", target: "tvm.target.Target", schedule: Any = None,
                 passes: Sequence[tuple[str, Any]] = ()):
    """Build one kernel as a verify job does: ``schedule`` applied, ``passes`` inserted, every pass captured."""
    from .module import build

    if func.attrs is None or "global_symbol" not in func.attrs:
        func = func.with_attr("global_symbol", name)
    mod = apply_schedule(name, tvm.IRModule({name: func}), target, schedule)
    pipeline = register_pipeline(passes) if passes else "default"
    return build(mod, target=target, name=name, pipeline=pipeline)


# ---------------------------------------------------------------------- one job
def _dumps(obj: Any) -> bytes:
    import cloudpickle

    return cloudpickle.dumps(obj)


def make_job(name: str, func: "tvm.tirx.PrimFunc", target: "tvm.target.Target", spec: bytes,
             settings: dict) -> dict:
    """A job: plain data (strings, bytes, numbers) that any process or machine can run."""
    return {"name": name, "func": tvm.ir.save_json(func), "target": tvm.ir.save_json(target),
            "spec": spec, **settings}


def run_job(job: dict, spec: dict | None = None) -> dict:
    """Run one verify job (see :func:`make_job`) and return its :class:`KernelResult` as a dict.

    ``spec`` (schedule and passes) replaces the job's serialised one when running in this process.
    """
    import pickle

    start = time.perf_counter()
    name = job["name"]
    try:
        func = tvm.ir.load_json(job["func"])
        target = tvm.ir.load_json(job["target"])
        if spec is None:
            spec = pickle.loads(job["spec"])
        result = _verify_kernel(name, func, target, spec, job)
    except BuildError as exc:
        message = str(exc)
        failed = message.split(" in pass ", 1)[1].split(":", 1)[0] if " in pass " in message else None
        result = KernelResult(name, "crashed", failed, message)
    except HybridError as exc:
        result = KernelResult(name, "refused", None, str(exc))
    except Exception as exc:  # the job must report, not raise: a TVM error in a user's schedule, say
        from .capture import short_tvm_message

        where = traceback.extract_tb(exc.__traceback__)[-1]
        result = KernelResult(name, "crashed", None, f"{type(exc).__name__}: {short_tvm_message(exc)} "
                                                     f"({Path(where.filename).name}:{where.lineno})")
    result.seconds = time.perf_counter() - start
    return asdict(result)


def _native_reference(name: str, func, hm, arrays) -> list:
    """The outputs of the unscheduled PrimFunc compiled natively for llvm, on copies of ``arrays``."""
    from .capture import RawStage
    from .module import HybridModule

    mod = tvm.IRModule({name: func if func.attrs is not None and "global_symbol" in func.attrs
                        else func.with_attr("global_symbol", name)})
    llvm = tvm.target.Target("llvm")
    try:
        lib = tvm.tirx.build(mod, target=llvm)
    except Exception as exc:
        from .capture import short_tvm_message

        raise BuildError(f"the reference (native llvm build of the unscheduled kernel) failed: "
                         f"{short_tvm_message(exc)}") from exc
    ref = HybridModule(name, llvm, [RawStage("input", mod, 0.0)], native=lib)
    copies = [a.copy() if hasattr(a, "copy") else a for a in arrays]
    ref.run_native(*copies)
    return [c for c, p in zip(copies, hm.params) if p.is_output]


def _verify_kernel(name: str, func, target, spec: dict, job: dict) -> KernelResult:
    from .bisect import find_first_divergence

    hm = build_kernel(name, func, target, spec.get("schedule"), spec.get("passes", []))
    arrays = hm.random_inputs(seed=job["seed"], sizes=job["sizes"])  # refuses kernels it cannot bind
    last = hm.packed_api_index if hm.packed_api_index is not None else len(hm.stages)
    candidates = hm.stages[:last]
    if job["reference"] == "native":
        expected = _native_reference(name, func, hm, arrays)
    else:
        first = hm.stages[0]
        if not first.emulatable:
            return KernelResult(name, "refused", None, f"the input stage cannot be emulated: {first.reason}")
        expected = list(_as_tuple(hm.emulate(*[a.copy() for a in arrays], mode=job["mode"])))
        candidates = candidates[1:]

    def reference(*_inputs):
        return [e.copy() for e in expected]

    reference.__name__ = job["reference"]
    div = find_first_divergence(hm, *arrays, reference=reference, stages=candidates,
                                only_changed=job["stages"] == "changed", mode=job["mode"], check=job["check"])
    checked, skipped = len(div.checked), len(div.skipped)
    if div.found:
        checked += 1 if div.result is None else 0
        if div.result is not None:
            bad = next(o for o in div.result.outputs if not o.ok)
            reason = f"stage {div.stage.label} differs from {job['reference']}: {bad.summary()}"
        else:
            reason = div.error
        return KernelResult(name, "wrong", div.stage.name, _shorten(reason, 400), 0.0, checked, skipped)
    if not div.checked:
        why = div.skipped[0].reason if div.skipped else "no stage to compare"
        return KernelResult(name, "refused", None, _shorten(f"no stage could be emulated: {why}", 400),
                            0.0, 0, skipped)
    note = None
    if skipped:
        note = f"{skipped} stage(s) not emulatable, e.g. {div.skipped[0].name}: {div.skipped[0].reason}"
    return KernelResult(name, "ok", None, _shorten(note, 400) if note else None, 0.0, checked, skipped)


def _shorten(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _as_tuple(value) -> tuple:
    return value if isinstance(value, tuple) else (value,)


def _worker_main(conn) -> None:
    """Entry point of a worker process: run the jobs it is sent, one at a time, until ``None``."""
    try:
        while True:
            try:
                job = conn.recv()
            except (EOFError, OSError):  # the parent has gone
                return
            if job is None:
                return
            conn.send(run_job(job))
    finally:
        conn.close()


# ---------------------------------------------------------------------- runners
#: Imported once by the forkserver, so that no worker pays for them (about 0.5 s per process otherwise).
FORKSERVER_PRELOAD = [__name__, "tvm_hybrid_nb.module", "tvm_hybrid_nb.bisect", "cloudpickle", "tvm.s_tir.dlight"]


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


# ---------------------------------------------------------------------- the entry point
def _target(target: Any) -> "tvm.target.Target":
    if isinstance(target, tvm.target.Target):
        return target
    if target == "cuda":  # dlight and the CUDA code generator want an architecture
        target = {"kind": "cuda", "arch": "sm_80"}
    try:
        return tvm.target.Target(target)
    except Exception as exc:
        from .capture import short_tvm_message

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
    from .module import EMULATION_MODES

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


def load_report(text: str | Iterable[str]) -> VerifyReport:
    """A :class:`VerifyReport` from :meth:`VerifyReport.to_json` (without the model: no explorer)."""
    data = json.loads(text)
    data.pop("counts", None)
    data.pop("ok", None)
    data["kernels"] = [KernelResult(**k) for k in data["kernels"]]
    return VerifyReport(**data)
