"""Memory: buffer allocations, views over existing storage, and bounds-checked loads and stores.

Owns ``alloc``, the views that share storage and never copy (``view``, ``flat_view``, ``rows_view``,
``strided`` with ``strided_span``, ``strided_view``, ``storage_extent``), and ``load``/``store`` with their private
``_in_bounds``/``_bounds_error``/``_all``/``_kept``/``_kept_rows``.
"""
from __future__ import annotations

import numpy as np

from ._sanitizers import _lane_note  # named threads in errors (a helper dependency)


# --------------------------------------------------------------------------- allocations and views
def _as_dtype(storage, dtype):
    """``storage`` (its last axis contiguous) reinterpreted as ``dtype``, sharing memory: the whole
    elements of ``dtype`` that its last axis holds.  TVM reuses an allocation for a buffer of another
    dtype (``StorageRewrite`` puts 3 int64 in the 84 bytes of 21 float32): the bytes past the last
    whole element are not addressable in the new dtype, and numpy refuses a view of a size that its
    itemsize does not divide."""
    dtype = np.dtype(dtype)
    if storage.dtype == dtype:
        return storage
    nbytes = storage.shape[-1] * storage.itemsize if storage.ndim else storage.itemsize
    if storage.ndim and dtype.itemsize > storage.itemsize and nbytes % dtype.itemsize:
        storage = storage.view(np.uint8)[..., :nbytes - nbytes % dtype.itemsize]
    return storage.view(dtype)


def alloc(shape, dtype):
    """A new buffer; TVM leaves it uninitialised, here it starts at zero.

    A buffer larger than the machine's physical memory is refused (MemoryError) before allocating.
    """
    import os

    nbytes = np.dtype(dtype).itemsize
    for dim in np.atleast_1d(shape):
        nbytes *= max(int(dim), 0)
    try:
        limit = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        limit = None
    if limit is not None and nbytes > limit:
        raise MemoryError(f"buffer of shape {tuple(int(d) for d in np.atleast_1d(shape))} ({dtype}) would need "
                          f"{nbytes / 2**30:.3g} GiB but this machine has {limit / 2**30:.3g} GiB of memory; "
                          f"nothing was allocated")
    if nbytes >= 1 << 24:
        # A large buffer is often touched sparsely (each thread's copy of a local buffer that
        # CompactBufferAllocation has not shrunk yet, each thread using its own row).  The OS zeroes
        # np.zeros' memory at first touch, but with transparent huge pages 2 MiB at a time: 1,024
        # threads' rows cost 2 GiB of zeroing.  Mapped without huge pages, a touch zeroes 4 KiB.
        import mmap

        try:
            storage = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            storage.madvise(mmap.MADV_NOHUGEPAGE)
        except (AttributeError, OSError, ValueError):  # no madvise (not Linux): numpy's zeroed memory
            return np.zeros(shape, dtype=dtype)
        return np.frombuffer(storage, dtype=dtype).reshape(tuple(int(d) for d in np.atleast_1d(shape)))
    return np.zeros(shape, dtype=dtype)


def view(data, dtype, shape, elem_offset=0):
    """A buffer declared over existing storage (``DeclBuffer``): shares memory, never copies."""
    flat = _as_dtype(data.reshape(-1), dtype)
    size = int(np.prod(shape, dtype=np.int64))
    if elem_offset < 0 or elem_offset + size > flat.size:
        raise IndexError(f"view of {size} elements at offset {elem_offset} exceeds its storage of {flat.size}")
    out = flat[elem_offset:elem_offset + size].reshape(shape)
    if out.size and not np.shares_memory(out, data):  # an empty view shares no memory, and copies none
        raise RuntimeError("buffer view would copy its storage")
    return out


def strided_span(shape, strides):
    """Elements of storage a strided buffer spans."""
    if any(int(d) == 0 for d in shape):
        return 0
    return 1 + sum((int(d) - 1) * int(s) for d, s in zip(shape, strides))


def strided(storage, shape, strides):
    """A buffer with explicit strides (in elements) over ``storage``, whose last axis holds the
    elements of each copy; shares memory, never copies."""
    item = storage.itemsize
    return np.lib.stride_tricks.as_strided(storage, storage.shape[:-1] + tuple(int(d) for d in shape),
                                           storage.strides[:-1] + tuple(int(s) * item for s in strides))


def strided_view(data, dtype, shape, strides, elem_offset=0):
    """A buffer declared with explicit strides over existing storage (``decl_buffer(shape,
    data=B.data, strides=[s0, s1], elem_offset=e)``): its element ``(i, j)`` is element
    ``e + i * s0 + j * s1`` of the storage from ``data``'s first element on; shares memory, never copies."""
    flat = _as_dtype(data.reshape(-1), dtype)
    shape = tuple(int(d) for d in shape)
    strides = tuple(int(s) for s in strides)
    elem_offset = int(elem_offset)
    if not np.shares_memory(flat, data) and flat.size:
        raise RuntimeError("buffer view would copy its storage")
    if any(d == 0 for d in shape):
        return flat[:0].reshape(shape)
    lo = elem_offset + sum(min(0, (d - 1) * s) for d, s in zip(shape, strides))
    hi = elem_offset + sum(max(0, (d - 1) * s) for d, s in zip(shape, strides))
    if lo < 0 or hi >= flat.size:
        raise IndexError(f"strided view of shape {shape} with strides {strides} at offset {elem_offset} reaches "
                         f"elements {lo} to {hi} of its storage of {flat.size}")
    return np.lib.stride_tricks.as_strided(flat[elem_offset:], shape, tuple(s * flat.itemsize for s in strides))


def param_storage(array, elem_offset, strides):
    """The storage of a strided or offset parameter buffer (``strides=``, ``elem_offset=``): the
    elements from the buffer's data pointer on, as TVM addresses them: ``elem_offset`` and the
    strides' span, at least each axis's extent times its stride (TVM's flattened view of it).

    ``array`` is the buffer as the kernel receives it: a view whose element 0 lies ``elem_offset``
    elements into one contiguous allocation that holds the whole span; shares memory, never copies."""
    root = array
    while True:  # the allocation it views (through as_strided's wrapper too)
        base = root.base
        base = getattr(base, "base", None) if base is not None and not isinstance(base, np.ndarray) else base
        if not isinstance(base, np.ndarray):
            break
        root = base
    item = array.itemsize
    start = array.__array_interface__["data"][0] - root.__array_interface__["data"][0] - int(elem_offset) * item
    if strides is None:  # row-major
        strides = [int(np.prod(array.shape[axis + 1:], dtype=np.int64)) for axis in range(array.ndim)]
    count = int(elem_offset)
    if all(int(d) for d in array.shape):
        count += max([1 + sum((int(d) - 1) * int(s) for d, s in zip(array.shape, strides))]
                     + [int(d) * int(s) for d, s in zip(array.shape, strides)])
    if any(int(d) > 1 and got != int(s) * array.itemsize for d, s, got in zip(array.shape, strides, array.strides)):
        raise ValueError(f"a buffer with strides {tuple(strides)} is given an array with strides "
                         f"{array.strides} (bytes)")
    if not root.flags.c_contiguous or start < 0 or start % item or start + count * item > root.nbytes:
        raise ValueError(f"a buffer with elem_offset {elem_offset} needs a view {elem_offset} elements into a "
                         f"contiguous allocation of at least {count} elements")
    return np.ndarray((count,), array.dtype, root.reshape(-1).view(np.uint8), start)


def flat_view(data, dtype, size, elem_offset=0):
    """A flat buffer of ``size`` elements declared over existing storage at ``elem_offset``: a view
    to the end of the storage (accesses past ``size`` stay inside the allocation, as in TVM)."""
    flat = _as_dtype(data.reshape(-1), dtype)
    if elem_offset < 0 or elem_offset + size > flat.size:
        raise IndexError(f"view of {size} elements at offset {elem_offset} exceeds its storage of {flat.size}")
    out = flat[elem_offset:]
    if out.size and not np.shares_memory(out, data):  # an empty view shares no memory, and copies none
        raise RuntimeError("buffer view would copy its storage")
    return out


def rows_view(data, lead, dtype, shape, elem_offset=0, to_end=False):
    """A buffer declared over per-thread storage: the same view of the row of every thread (the
    first ``lead`` axes index the threads); shares memory, never copies.  ``to_end``: a flat view
    reaching to the end of each row, as :func:`flat_view` (the bounds of an access belong to the
    allocation: ``MergeSharedMemoryAllocations`` indexes a view past its declared size)."""
    rows = _as_dtype(data.reshape(data.shape[:lead] + (int(np.prod(data.shape[lead:], dtype=np.int64)),)), dtype)
    size = int(np.prod(shape, dtype=np.int64))
    if elem_offset < 0 or elem_offset + size > rows.shape[-1]:
        raise IndexError(f"view of {size} elements at offset {elem_offset} exceeds its storage of {rows.shape[-1]}")
    if to_end:
        out = rows[..., elem_offset:]
    else:
        out = rows[..., elem_offset:elem_offset + size].reshape(data.shape[:lead] + tuple(shape))
    if out.size and not np.shares_memory(out, data):  # an empty view shares no memory, and copies none
        raise RuntimeError("buffer view would copy its storage")
    return out


def storage_extent(data, dtype, elem_offset, known):
    """The one dimension of a view over ``data`` that the kernel declares without its value: the
    storage after ``elem_offset`` divided by the product of the ``known`` dimensions."""
    flat = data.reshape(-1)
    count = flat.size * flat.dtype.itemsize // np.dtype(dtype).itemsize - int(elem_offset)
    rest = int(np.prod(known, dtype=np.int64))
    if count < 0 or (rest and count % rest):
        raise IndexError(f"storage of {flat.size} elements does not hold whole rows of {rest} at offset {elem_offset}")
    return count // rest if rest else 0


# --------------------------------------------------------------------------- bounds-checked access
def _bounds_error(kind, name, buffer, index, mask=None, lead=0, at=()):
    """The first offending element (of all lanes) named in one line, with its thread where ``at``
    names one (see ``_lane_note``); ``lead``: how many leading entries of ``index`` pick the
    emulator's copy of the buffer (left out of the name)."""
    arrays = [np.asarray(i) for i in index]
    shape = np.broadcast_shapes(*(a.shape for a in arrays), np.shape(mask) if mask is not None else ())
    full = [np.broadcast_to(a, shape) for a in arrays]
    bad = np.zeros(shape, bool)
    for i, n in zip(full, buffer.shape):
        bad |= (i < 0) | (i >= n)
    if mask is not None:
        bad &= np.broadcast_to(np.asarray(mask, dtype=bool), shape)
    count = int(bad.sum())
    first = [int(f[bad][0]) for f in full] if count else [np.asarray(a).tolist() for a in arrays]
    share = f" ({count} of {bad.size} lanes)" if bad.size > 1 else ""
    return IndexError(f"out-of-bounds {kind} of {name}{first[lead:]}{share} (shape {tuple(buffer.shape)[lead:]})"
                      f"{_lane_note(bad, at) if count else ''}")


def _all(ok) -> bool:
    return ok if isinstance(ok, bool) else bool(np.all(ok))


def _in_bounds(buffer, index):
    ok = True
    for i, n in zip(index, buffer.shape):  # one element: no arrays to build
        if not isinstance(i, (int, np.integer)):
            break
        ok = ok and 0 <= i < n
    else:
        return ok
    ok = True
    for i, n in zip(index, buffer.shape):
        i = np.asarray(i)
        kind, bits = i.dtype.kind, i.dtype.itemsize * 8
        if kind == "u":
            inside = i < n
        elif kind == "i" and n <= 1 << (bits - 1):
            # One comparison: a negative index read as unsigned is at least 2**(bits - 1), past n.
            inside = i.view(f"uint{bits}") < n
        else:
            inside = (i >= 0) & (i < n)
        ok = inside if ok is True else ok & inside
    return ok


def load(buffer, index, name="buffer", mask=None, lead=0, at=()):
    """Bounds-checked read of ``buffer[index]``.

    Lanes where ``mask`` is false (masked-out lanes of a ``Select``) may be out of bounds: they read 0.
    ``lead`` and ``at`` only name the element and the thread in errors (see :func:`_bounds_error`).
    """
    index = tuple(index)
    ok = _in_bounds(buffer, index)
    if mask is None:
        if not _all(ok):
            raise _bounds_error("read", name, buffer, index, None, lead, at)
        return buffer[index]
    if _all(ok):  # no lane out of bounds, masked out or not: no stand-in needed
        out = buffer[index]
        return out[()] if isinstance(out, np.ndarray) and out.ndim == 0 else out
    if not np.all(ok | ~np.asarray(mask, dtype=bool)):
        raise _bounds_error("read", name, buffer, index, mask, lead, at)
    if buffer.size == 0:  # no element to stand in for the masked-out lanes (a (4, 0) slice): all read 0
        shape = np.broadcast_shapes(np.shape(ok), *(np.shape(i) for i in index))
        out = np.zeros(shape + tuple(buffer.shape[len(index):]), buffer.dtype)
        return out[()] if out.ndim == 0 else out
    safe = tuple(np.where(ok, i, 0) for i in index)
    out = np.where(ok, buffer[safe], np.zeros((), buffer.dtype))
    return out[()] if out.ndim == 0 else out


def _kept(values, shape, keep):
    """The elements of ``values`` (broadcast to ``shape``) where ``keep`` holds."""
    values = np.asarray(values)
    return (values if values.shape == shape else np.broadcast_to(values, shape))[keep]


def _kept_rows(keep, shape):
    """The slice of ``shape`` holding the lanes where ``keep`` holds, when ``keep`` varies along
    one axis only and holds on one run of it (the rows of a triangle with trips left); else None."""
    if keep.ndim != len(shape) or keep.size < 2:
        return None
    axes = [a for a, n in enumerate(keep.shape) if n != 1]
    if len(axes) != 1:
        return None
    along = np.flatnonzero(keep.reshape(-1))
    if along.size and along[-1] - along[0] + 1 != along.size:
        return None
    rows = [slice(None)] * len(shape)
    rows[axes[0]] = slice(int(along[0]), int(along[-1]) + 1) if along.size else slice(0, 0)
    return tuple(rows)


def store(buffer, index, value, name="buffer", mask=None, lead=0, at=()):
    """Bounds-checked write of ``value`` to ``buffer[index]``; with ``mask``, only where it holds.
    ``lead`` and ``at`` only name the element and the thread in errors (see :func:`_bounds_error`)."""
    index = given = tuple(index)
    if mask is not None:
        if not index:  # a 0-d buffer written by the lanes the mask keeps: the last of them wins
            buffer, index = buffer[np.newaxis], (0,)
        keep = np.asarray(mask, dtype=bool)
        shape = np.broadcast_shapes(keep.shape, np.shape(value), *(np.shape(i) for i in index))
        rows = _kept_rows(keep, shape)
        # A scalar index (a thread's own copy of a local buffer at 0) stays one number: it pairs
        # with each element kept of the index arrays beside it.
        lanes = any(np.ndim(i) for i in index)
        if rows is not None:  # the lanes kept are a run along one axis: those rows, in the lanes' order
            # (raveled: numpy assigns through index arrays of several axes in memory order, and lanes
            # that write one element must write it in the lanes' order)
            index = tuple(i if lanes and not np.ndim(i) else np.broadcast_to(i, shape)[rows].ravel()
                          for i in index)
            value = np.broadcast_to(value, shape)[rows].ravel()
        else:
            keep = keep if keep.shape == shape else np.broadcast_to(keep, shape)
            index = tuple(i if lanes and not np.ndim(i) else _kept(i, shape, keep) for i in index)
            value = _kept(value, shape, keep)
    if not _all(_in_bounds(buffer, index)):
        if mask is not None and given:  # named in the lanes' own shape, not as the kept elements
            raise _bounds_error("write", name, buffer, given, mask, lead, at)
        raise _bounds_error("write", name, buffer, index, None, lead, at)
    buffer[index] = value
