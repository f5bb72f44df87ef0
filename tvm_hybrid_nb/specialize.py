"""Binding a kernel's symbolic sizes: for a TE op made from it (``HybridModule.as_op``), its sizes
from the inputs' shapes; for an emulation planned per call, the sizes of the call's arguments
(:func:`with_sizes`).

:func:`_bind_sizes` binds each size variable to the input tensors' dimensions (solving a linear
dimension such as ``n + 2`` for its one unknown, :func:`_solve_size`, and checking the rest);
:func:`_specialized` specialises the PrimFunc to those sizes; :func:`_element_reader` re-expresses an
input over the buffer's own shape objects (TVM compares them by identity).
"""
from __future__ import annotations

import tvm
import tvm_ffi

from . import capture as _capture
from .codegen.names import _dtype
from .errors import ArgumentShapeError, BuildError


def _element_reader(tensor):
    """An fcompute that reads ``tensor`` at the same indices (te.compute rejects default arguments)."""
    return lambda *indices: tensor(*indices)


def _bind_sizes(tensors, buffers, specs) -> dict:
    """The kernel's symbolic sizes given by the input tensors' shapes (size var → value).

    A plain dimension ``n`` binds ``n``; a dimension ``n + 2`` binds ``n`` when it is its only unknown
    (solved for a whole number), and is checked otherwise.  Errors name the parameter and dimension.
    """
    sizes: dict = {}
    pending = []
    for tensor, buf, spec in zip(tensors, buffers, specs):
        for axis, (got, want) in enumerate(zip(tensor.shape, buf.shape)):
            if isinstance(want, tvm.tirx.Var):
                if want in sizes and not _same_dim(got, sizes[want]):
                    raise ArgumentShapeError(f"parameter {spec.name}: dimension {axis} is {got}, but {want} = "
                                             f"{sizes[want]} from an earlier input")
                sizes[want] = got
            else:
                pending.append((got, want, axis, spec))
    for got, want, axis, spec in pending:
        _solve_size(want, got, sizes)
        analyzer = tvm.sym.Analyzer()
        for var, value in sizes.items():
            analyzer.bind(var, value)
        if not _same_dim(got, analyzer.simplify(want)):
            raise ArgumentShapeError(f"parameter {spec.name}: dimension {axis} is {got}, expected {want}")
    return sizes


def _solve_size(want, got, sizes: dict) -> None:
    """Bind the one size of the expression ``want`` that ``sizes`` lacks so that ``want == got``,
    when ``want`` is linear in it with a whole-number solution; otherwise bind nothing."""
    free = [v for v in tvm.tirx.analysis.undefined_vars(want) if v not in sizes]
    if len(free) != 1:
        return
    (var,) = free
    at = []
    for trial in (0, 1):
        analyzer = tvm.sym.Analyzer()
        for known, value in sizes.items():
            analyzer.bind(known, value)
        analyzer.bind(var, tvm.tirx.const(trial, str(var.ty.dtype)))
        at.append(analyzer.simplify(want))
    try:
        base, slope = int(at[0]), int(at[1]) - int(at[0])
    except (TypeError, ValueError):
        return
    if slope == 0:
        return
    try:
        diff = int(got) - base
    except (TypeError, ValueError):  # a symbolic input size: solvable when the slope is 1
        if slope == 1:
            sizes[var] = tvm.sym.Analyzer().simplify(got - base)
        return
    if diff % slope == 0 and diff // slope >= 0:
        sizes[var] = diff // slope


def _specialized(func, sizes: dict, name: str):
    """``func`` with its symbolic sizes replaced by ``sizes`` (see :func:`_size_param_map`)."""
    param_map, covered = _size_param_map(func, sizes.get)
    missing = [str(v) for v in sizes if v not in covered]
    if missing:
        raise BuildError(f"could not make an op from {name}: size {missing[0]} is no parameter's plain dimension")
    try:
        return func.specialize(param_map)
    except Exception as exc:
        raise BuildError(f"could not make an op from {name}: {_capture.short_tvm_message(exc)}") from exc


def with_sizes(func, sizes: dict):
    """``func`` (a PrimFunc) with the symbolic sizes named in ``sizes`` (name -> int) bound where its
    parameter buffers' dimensions are plain sizes (see :func:`_size_param_map`) and where they are
    scalar parameters (Relax passes a symbolic image's ``h`` and ``w`` so, its buffers sized
    ``(h - 1) // 2 + 1``).  Its parameters stay as they are: ``specialize`` drops a bound scalar
    parameter from the signature, so it is put back, unread (the caller passes its value, the one it
    was bound to).  None when TVM's ``PrimFunc.specialize`` refuses."""
    scalars = {p: tvm.tirx.const(int(sizes[str(p.name)]), _dtype(p))
               for p in func.params if not tvm.tirx.is_buffer_var(p) and str(p.name) in sizes}

    def value_of(var):
        name = str(var.name)
        return tvm.tirx.const(int(sizes[name]), _dtype(var)) if name in sizes else None

    param_map, _ = _size_param_map(func, value_of)
    param_map.update(scalars)
    if not param_map:
        return func
    try:
        bound = func.specialize(param_map)
    except Exception:  # e.g. a compacted buffer's old form used undeclared: the plan for every size then
        return None
    if not scalars:
        return bound
    kept = iter(bound.params)
    params = [p if p in scalars else next(kept) for p in func.params]
    return tvm.tirx.PrimFunc(params, bound.body, bound.ret_type, bound.attrs)


def _size_param_map(func, value_of) -> tuple[dict, set]:
    """``PrimFunc.specialize``'s map binding the size variables that ``value_of`` gives a value
    (None: unbound), and the variables it covers: through parameters whose dimensions are plain sizes,
    which is how ``PrimFunc.specialize`` binds them."""
    param_map, covered = {}, set()
    for p in func.params:
        if not tvm.tirx.is_buffer_var(p) or not all(isinstance(d, (tvm.tirx.Var, tvm.tirx.IntImm)) for d in p.shape):
            continue
        values = [value_of(d) if isinstance(d, tvm.tirx.Var) else None for d in p.shape]
        if all(v is None for v in values):
            continue
        shape = [d if v is None else v for d, v in zip(p.shape, values)]
        # The parameter's own alignment and offset: PrimFunc.specialize refuses a buffer that
        # differs there (topi's sort and scan buffers are aligned to 8, at offset 0).
        param_map[p] = tvm.tirx.decl_buffer(shape, p.dtype, name=p.name, data_alignment=p.data_alignment,
                                            offset_factor=p.offset_factor, elem_offset=p.elem_offset)
        covered |= {d for d in p.shape if isinstance(d, tvm.tirx.Var)}
    return param_map, covered


def _same_dim(got, want) -> bool:
    try:
        return int(got) == int(want)
    except (TypeError, ValueError):
        return tvm_ffi.structural_equal(got, want)
