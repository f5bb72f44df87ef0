"""One verify job: plain data (the PrimFunc as TVM JSON, the target, the settings, a cloudpickled
schedule and passes) that any process or machine can run; :func:`run_job` builds the kernel,
emulates its stages, compares them with the reference and names the first divergent pass.  Also the
loop of a local worker process (:func:`_worker_main`).
"""
from __future__ import annotations

import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

import tvm

from ..errors import BuildError, HybridError
from .kernels import build_kernel
from .results import KernelResult

__all__ = ["make_job", "run_job"]


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
        from ..capture import short_tvm_message

        where = traceback.extract_tb(exc.__traceback__)[-1]
        result = KernelResult(name, "crashed", None, f"{type(exc).__name__}: {short_tvm_message(exc)} "
                                                     f"({Path(where.filename).name}:{where.lineno})")
    result.seconds = time.perf_counter() - start
    return asdict(result)


def _native_reference(name: str, func, hm, arrays) -> list:
    """The outputs of the unscheduled PrimFunc compiled natively for llvm, on copies of ``arrays``."""
    from ..capture import RawStage
    from ..module import HybridModule

    mod = tvm.IRModule({name: func if func.attrs is not None and "global_symbol" in func.attrs
                        else func.with_attr("global_symbol", name)})
    llvm = tvm.target.Target("llvm")
    try:
        lib = tvm.tirx.build(mod, target=llvm)
    except Exception as exc:
        from ..capture import short_tvm_message

        raise BuildError(f"the reference (native llvm build of the unscheduled kernel) failed: "
                         f"{short_tvm_message(exc)}") from exc
    ref = HybridModule(name, llvm, [RawStage("input", mod, 0.0)], native=lib)
    copies = [a.copy() if hasattr(a, "copy") else a for a in arrays]
    ref.run_native(*copies)
    return [c for c, p in zip(copies, hm.params) if p.is_output]


def _verify_kernel(name: str, func, target, spec: dict, job: dict) -> KernelResult:
    from ..bisect import find_first_divergence

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
    if div.undefined:
        return KernelResult(name, "refused", None, _shorten(f"not checked on these inputs: {div.error}", 400),
                            0.0, checked, skipped)
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
