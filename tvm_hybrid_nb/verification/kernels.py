"""A model's kernels and how a job builds one: lowering a Relax module to PrimFuncs, applying a
schedule (dlight or a callable), inserting custom passes into TVM's default TIR pipeline, and
:func:`build_kernel`, which does all of that under the capture.
"""
from __future__ import annotations

import contextlib
from typing import Any, Sequence

import tvm

from ..errors import BuildError
from .settings import VerifyError

__all__ = ["PIPELINE_NAME", "lower_model", "model_kernels", "dlight_rules", "apply_schedule",
           "register_pipeline", "pipeline_pass_names", "build_kernel"]


#: Name under which the pipeline with inserted custom passes is registered (in each worker).
PIPELINE_NAME = "tvm_hybrid_nb.verify"


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
    from ..module import HybridModule, as_ir_module

    if isinstance(model, tvm.IRModule):
        if any(not isinstance(f, tvm.tirx.PrimFunc) for f in model.functions.values()):
            try:
                model = lower_model(model, target)
            except Exception as exc:
                from ..capture import short_tvm_message

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

    from ..tvmscript_parsing import import_tensor_intrinsics

    if "gpu" in target.keys:
        import_tensor_intrinsics()  # Matmul's import, at a fifth of its cost
        return [dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(), dl.gpu.GeneralReduction(), dl.gpu.Fallback()]
    return [dl.cpu.GEMV(), dl.cpu.Reduction()]


def apply_schedule(name: str, mod: "tvm.IRModule", target: "tvm.target.Target", schedule: Any) -> "tvm.IRModule":
    """``mod`` (one kernel) with ``schedule`` applied: None, ``"dlight"``, a list of dlight rules, or a
    callable taking the PrimFunc (under ``with target:``) and returning a PrimFunc, Schedule or
    IRModule (None: leave the kernel as it is)."""
    from ..module import as_ir_module

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
    from ..module import build

    if func.attrs is None or "global_symbol" not in func.attrs:
        func = func.with_attr("global_symbol", name)
    mod = apply_schedule(name, tvm.IRModule({name: func}), target, schedule)
    pipeline = register_pipeline(passes) if passes else "default"
    return build(mod, target=target, name=name, pipeline=pipeline)
