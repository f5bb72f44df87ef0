"""TVM's runtime sorts (``tvm.contrib.sort.sort``, ``argsort``, ``topk``, ``argsort_nms``) on numpy views.

Owns ``contrib_sort``, ``argsort_nms`` (its row counts read memory by value: a trapping helper) and the stable order it shares, ``_stable_order``.
"""
from __future__ import annotations

import numpy as np


# --------------------------------------------------------------------------- sorting
def _stable_order(data, axis, ascend, nan_policy=None):
    """The order ``std::stable_sort`` gives with TVM's comparators: ascending (``<``) or descending
    (``>``) values, equal values in their original order.  NaN breaks the strict weak order those
    comparators need, so the C++ order of a row holding NaN depends on the library's merge steps (it
    may leave other values unsorted too): with no ``nan_policy`` that is refused; an emulation run
    gives one (see ``OutOfRangeConversions.unordered``) and such rows are ordered by it: numpy's
    (``"native"``), NaN first (``"min"``), reversed (``"max"``) or left as they are (``"zero"``), so
    that the outputs which depend on the order can be told apart."""
    has_nan = data.dtype.kind == "f" and bool(np.isnan(data).any())
    if has_nan and nan_policy is None:
        raise ValueError("sorting NaN: std::stable_sort's order is implementation-defined for NaN "
                         "(TVM's comparators are not a strict weak order), so it cannot be emulated exactly")
    keys = data
    if has_nan and nan_policy == "min":
        keys = np.where(np.isnan(data), np.asarray(-np.inf if ascend else np.inf, data.dtype), data)
    if ascend:
        order = np.argsort(keys, axis=axis, kind="stable")
    else:
        n = data.shape[axis]
        flipped = np.argsort(np.flip(keys, axis=axis), axis=axis, kind="stable")
        order = np.flip(n - 1 - flipped, axis=axis)
    if has_nan and nan_policy in ("max", "zero"):
        rows = np.isnan(data).any(axis=axis, keepdims=True)
        shape = [1] * data.ndim
        shape[axis] = data.shape[axis]
        other = (np.flip(order, axis=axis) if nan_policy == "max"
                 else np.broadcast_to(np.arange(data.shape[axis]).reshape(shape), order.shape))
        order = np.where(rows, other, order)
    return order


def _sort_axis(function, axis, ndim):
    """``axis`` of an array of ``ndim`` dimensions, a negative one counted from the end, as the library does."""
    axis = axis + ndim if axis < 0 else axis
    if not 0 <= axis < ndim:
        raise ValueError(f"{function}: axis out of bounds for input of {ndim} dimensions")
    return axis


def _nan_policy(function, data):
    """The run's order for values holding NaN (see :func:`_stable_order`), None without NaN or outside a run."""
    record = globals().get("__out_of_range__")
    record = record.get() if record is not None else None
    if record is None or data.dtype.kind != "f" or not np.isnan(data).any():
        return None
    return record.unordered(
        f"the order of NaN in a sort ({function} of {data.dtype} values holding NaN): TVM's runtime sorts "
        f"with std::stable_sort and '<', which does not order NaN, so the native order depends on the C++ "
        f"library's merge steps")


def argsort_nms(data, sort_num, output, axis, is_ascend, written=None):
    """``tvm.contrib.sort.argsort_nms(data, sort_num, output, axis, is_ascend)`` (vision's NMS on a CPU):
    along ``axis``, each row's first ``sort_num`` values (``sort_num`` holds one count per row, the data's
    shape without ``axis``) sorted stably; the row's output holds their indices, then ``k`` at each
    position ``k`` past the count.  The library reads float32 data and int32 counts only; a count past the
    row's length reads past the row (the next rows' values, or past the buffer): an out-of-bounds read.
    ``written`` as for :func:`contrib_sort`."""
    function = "tvm.contrib.sort.argsort_nms"
    axis, ascend = int(axis), bool(is_ascend)
    axis = _sort_axis(function, axis, data.ndim)
    if data.dtype != np.float32 or sort_num.dtype != np.int32 or output.dtype != np.int32:
        raise ValueError(f"{function} reads float32 data, int32 counts and writes int32 indices, "
                         f"not {data.dtype}, {sort_num.dtype} and {output.dtype}")
    rows, out = np.moveaxis(data, axis, -1), np.moveaxis(output, axis, -1)
    n = rows.shape[-1]
    counts = np.asarray(sort_num).reshape(-1)
    if counts.size != int(np.prod(rows.shape[:-1])):
        raise ValueError(f"{function}: {counts.size} counts for {int(np.prod(rows.shape[:-1]))} rows")
    for flat, row in enumerate(np.ndindex(*rows.shape[:-1])):
        count = int(counts[flat])
        if count > n:
            raise IndexError(f"out-of-bounds read: {function} sorts a row's first {count} values (its "
                             f"sort_num), past the row's {n}")
        indices = np.arange(n, dtype=np.int32)
        if count > 0:
            values = rows[row][:count]
            indices[:count] = _stable_order(values, 0, ascend, _nan_policy(function, values))
        out[row] = indices
    if written is not None and written[2] is not None:
        written[2][...] = True
    return 0


def contrib_sort(function, *args, written=None):
    """TVM's runtime sort functions (``src/runtime/contrib/sort/sort.cc``) on numpy views:
    ``sort(data, out, axis, is_ascend)``, ``argsort(data, out, axis, is_ascend)`` and
    ``topk(data, out..., k, axis, ret_type, is_ascend)`` (``ret_type`` "both": values then indices;
    ``k < 1`` means all).  Indices are cast to the output's dtype.  Returns 0 like a packed call.
    ``written`` (the sanitizers): per argument, its written-marks or None; the elements written are marked.
    A row holding NaN is ordered by the run's record of undefined values (``__out_of_range__``, an
    :class:`OutOfRangeConversions`): the native order is unspecified there (see :func:`_stable_order`)."""
    data = args[0]
    if function == "tvm.contrib.sort.topk":
        k, axis, ret_type, ascend = int(args[-4]), int(args[-3]), str(args[-2]), bool(args[-1])
        outs = list(args[1:-4])
        values = outs[0] if ret_type in ("both", "values") else None
        indices = outs[-1] if ret_type in ("both", "indices") else None
        if ret_type not in ("both", "values", "indices"):
            raise ValueError(f"topk: unsupported ret_type {ret_type!r}")
    else:
        axis, ascend = int(args[2]), bool(args[3])
    axis = _sort_axis(function, axis, data.ndim)
    order = _stable_order(data, axis, ascend, _nan_policy(function, data))
    marks = list(written) if written is not None else [None] * len(args)
    if function == "tvm.contrib.sort.sort":
        args[1][...] = np.take_along_axis(data, order, axis=axis)
        if marks[1] is not None:
            marks[1][...] = True
    elif function == "tvm.contrib.sort.argsort":
        args[1][...] = order.astype(args[1].dtype)
        if marks[1] is not None:
            marks[1][...] = True
    else:
        n = data.shape[axis]
        k = n if k < 1 else min(k, n)
        top = np.take(order, np.arange(k), axis=axis)
        index = (slice(None),) * axis + (slice(0, k),)
        if values is not None:
            values[index] = np.take_along_axis(data, top, axis=axis)
        if indices is not None:
            indices[index] = top.astype(indices.dtype)
        for mark in marks[1:len(outs) + 1]:
            if mark is not None:
                mark[index] = True
    return 0
