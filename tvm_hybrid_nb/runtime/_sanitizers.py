"""Sanitizers (``check=True``): checked accesses, reads of never-written memory, bounds.

Owns ``access`` (the checked read or write of exact mode, which feeds the race log of
:mod:`._race_log` and the written-marks), ``read_written`` (the check that a lane view was written),
``write_where`` (a masked store into a lane view and its written-marks) and the messages that name
the thread of a failed check.
"""
from __future__ import annotations

import numpy as np

from ._race_log import RaceLog, _lane_ids


# --------------------------------------------------------------------------- checked accesses
def _direct_access(buffer, index, write, value, mask, shadow, lanes, poison):
    """:func:`access` without a race record where every lane's index is in bounds, masked-out lanes'
    too (the common case: a thread's own memory): numpy indexes with the index arrays as they
    broadcast, without materialising them.  ``NotImplemented`` where the general path decides:
    an error to report, a value or taint with more lanes than the index, a buffer of vectors with a
    mask or taint.  A masked write stores the kept lanes only, as the general path does (lanes that
    write one element store in lane order)."""
    ishape = np.broadcast_shapes(*(i.shape for i in index))
    per_lane = len(index) == buffer.ndim and not lanes  # masks and taints line up with the index lanes
    if write:
        tainted = None if poison is None else poison.pending
        if tainted is not None and (not per_lane or poison.note is not None):
            return NotImplemented
        vshape = np.shape(value)[:np.ndim(value) - (buffer.ndim - len(index))]
        if mask is not None:
            if not per_lane:
                return NotImplemented
            shape = np.broadcast_shapes(ishape, np.shape(mask), vshape, np.shape(tainted))
            keep = np.broadcast_to(np.asarray(mask, dtype=bool), shape)
            sel = tuple(i if i.ndim == 0 else np.broadcast_to(i, shape)[keep] for i in index)
            buffer[sel] = np.broadcast_to(value, shape)[keep]
            if shadow is not None:
                shadow[sel] = True if tainted is None else ~np.broadcast_to(tainted, shape)[keep]
            if poison is not None:
                poison.pending = None
            return None
        if np.broadcast_shapes(ishape, vshape, np.shape(tainted)) != ishape:
            return NotImplemented
        buffer[index] = value
        if shadow is not None:
            shadow[index] = True if tainted is None else ~np.broadcast_to(tainted, ishape)
        if poison is not None:
            poison.pending = None
        return None
    if mask is None:
        if shadow is not None:
            written = shadow[index]
            if not written.all():
                if poison is None or not per_lane:
                    return NotImplemented
                poison.taint(~written)
        out = np.array(buffer[index])
        return out[()] if out.ndim == 0 else out
    if len(index) != buffer.ndim or (lanes and poison is not None):
        return NotImplemented
    keep = np.asarray(mask, dtype=bool)
    if shadow is not None:
        unset = keep & ~shadow[index]
        if unset.any():
            if poison is None:
                return NotImplemented
            poison.taint(unset)
    values = buffer[index]  # every lane's, kept or not: masked-out lanes read memory, as load() does
    out = np.array(np.broadcast_to(values, np.broadcast_shapes(keep.shape, values.shape)))
    return out[()] if out.ndim == 0 else out


def access(buffer, index, name, write=False, value=None, mask=None, shadow=None, log=None, lanes=(),
           statement=False, poison=None, grid=False, region=False, lead=0, at=(), warp_store=False):
    """Sanitizer access (``check=True``): bounds, reads of never-written allocation elements, and
    the per-lane record for race detection; then the read (returned) or write itself.

    ``grid``: an access of global memory by a GPU block run one after the others, checked
    against the other blocks of the launch too (see ``RaceLog.at_block``); ``region``: see
    ``RaceLog.record``; ``lead``: how many leading entries of ``index`` pick the emulator's copy
    of the buffer (per thread, per block lane), left out of the element that errors name;
    ``at``: the GPU (or parallel) loops around it, by which errors name the thread (see
    :func:`_lane_note`); ``warp_store``: a warp's store of a tensor-core tile (see ``RaceLog.record``).

    ``poison`` (a :class:`RaceLog`) follows MemorySanitizer's rule for a thread's registers: a
    never-written element read into a value that is only stored to thread-local memory is no error
    yet; the lanes carrying it are remembered and the stored element stays "never written", so the
    error comes if and when the value reaches shared or global memory, a branch or an address.
    """
    if (mask is None and log is None and index and len(index) == buffer.ndim
            and not (write and poison is not None and poison.pending is not None)):
        # One element of a thread's own memory (a serial loop's scalar indices): no arrays to build.
        for i, n in zip(index, buffer.shape):
            if not (isinstance(i, (int, np.integer)) and 0 <= i < n):
                break
        else:
            if not write:
                if shadow is None or shadow[index]:
                    return buffer[index]
            elif np.ndim(value) == 0:
                buffer[index] = value
                if shadow is not None:
                    shadow[index] = True
                if poison is not None:
                    poison.pending = None
                return None
    if not index:  # a 0-d buffer: as a buffer of one element, which many lanes may access
        buffer, index = buffer[np.newaxis], (0,)
        shadow = None if shadow is None else shadow[np.newaxis]
    index = tuple(np.asarray(i) for i in index)
    in_bounds = all((0 <= i < n) if i.ndim == 0 else (i.size == 0 or (i.min() >= 0 and i.max() < n))
                    for i, n in zip(index, buffer.shape))  # every lane, kept or not
    if (log is not None and not write and in_bounds and not grid and lanes
            and not (statement and region and log.ledgered(name))):
        # A read whose record may never be needed: the record waits for a write (``_check``).
        done = _direct_access(buffer, index, False, None, mask, shadow, lanes, poison)
        if done is not NotImplemented:
            log.record_read(name, buffer.shape[:len(index)], tuple(np.array(i) for i in index), lanes, statement,
                            lead, None if mask is None else np.array(mask, dtype=bool))
            return done
    if log is None and in_bounds:
        done = _direct_access(buffer, index, write, value, mask, shadow, lanes, poison)
        if done is not NotImplemented:
            return done
    # A buffer of vectors (float32x3 after StorageRewrite): each element is a row of lanes.
    extra = tuple(buffer.shape[len(index):])
    lane_shape = [1] * 12
    for axis, extent, _tag in lanes:
        lane_shape[axis] = extent
    shapes = [i.shape for i in index] + ([tuple(lane_shape)] if lanes else [])
    if mask is not None:
        shapes.append(np.shape(mask))
    if write:
        shapes.append(np.shape(value)[:np.ndim(value) - len(extra)])
    tainted = poison.pending if write and poison is not None else None
    if tainted is not None:
        shapes.append(np.shape(tainted))
    shape = np.broadcast_shapes(*shapes)
    full = [np.broadcast_to(i, shape) for i in index]
    keep = np.broadcast_to(np.asarray(True if mask is None else mask, dtype=bool), shape)
    if not in_bounds:
        ok = np.ones(shape, bool)
        for i, n in zip(full, buffer.shape):
            ok = ok & (i >= 0) & (i < n)
        if np.any(keep & ~ok):
            first = tuple(int(f[keep & ~ok][0]) for f in full)
            raise IndexError(f"out-of-bounds {'write' if write else 'read'} of {name}{list(first)[lead:]} "
                             f"(shape {tuple(buffer.shape)[lead:]}){_lane_note(keep & ~ok, at)}")
    sel = tuple(f[keep] for f in full)
    # In the buffer's dtype, as the store writes it: its bits are compared (a Python float is float64).
    written = np.broadcast_to(np.asarray(value).astype(buffer.dtype, copy=False), shape + extra)[keep] if write else None
    if log is not None and lanes:
        log.record(name, buffer.shape[:len(index)], sel, _lane_ids(lanes, shape)[keep], write, lanes, written,
                   statement, previous=buffer[sel] if write else None, grid=grid, region=region, lead=lead,
                   warp_store=warp_store)
    if write:
        buffer[sel] = written
        if shadow is not None:
            shadow[sel] = True if tainted is None else ~np.broadcast_to(tainted, shape)[keep]
        if poison is not None:
            poison.stored(name, tainted is not None and np.broadcast_to(tainted, shape)[keep].any())
        return None
    if shadow is not None:
        written = shadow[sel]
        written = written.all(axis=tuple(range(1, written.ndim))) if written.ndim > 1 else written
        if poison is not None and not np.all(written):
            unset = np.zeros(shape, bool)
            unset[keep] = ~written
            poison.taint(unset)
        elif not np.all(written):
            first = tuple(int(s[~written][0]) for s in sel)
            unset = np.zeros(shape, bool)
            unset[keep] = ~written
            raise RuntimeError(_unwritten_message(name, list(first)[lead:]) + _lane_note(unset, at))
    out = np.zeros(shape + extra, buffer.dtype)
    out[keep] = buffer[sel]
    if mask is not None and buffer.size:
        # Masked-out lanes (a Select's other arm, which the native code computes too) read the
        # memory where it is in bounds, as load() does: a divisor read there is the real one, not 0.
        rest = ~keep if in_bounds else ~keep & ok
        if rest.any():
            out[rest] = buffer[tuple(f[rest] for f in full)]
    if lanes:
        # Along the lane axes of the race record that neither the index nor the mask follows, every
        # lane reads the same element: one value, the shape the read has without the sanitizer (a
        # fragment that all threads load alike is one copy, written through a view without them).
        own = np.broadcast_shapes(*[i.shape for i in index], *([np.shape(mask)] if mask is not None else []))
        own = (1,) * (len(shape) - len(own)) + tuple(own)
        if own != shape:
            out = out[tuple(slice(0, 1) if extent == 1 else slice(None) for extent in own)]
    return out[()] if out.ndim == 0 else out


def read_written(values, written, name, marks, lead=0, at=(), mask=None):
    """Sanitizer (lane views): the lane view ``values`` of an allocation when every element in it
    was written; ``written`` is the same view of the allocation's written-marks ``marks``;
    ``at`` (as ``access`` takes it) names the first thread that reads a never-written one;
    ``lead``: the leading dimensions of ``marks`` that are the emulator's copies (as ``access``);
    ``mask``: the lanes that read (a branch's, a loop's), others read memory unchecked, as
    :func:`access` lets masked-out lanes do."""
    unset = ~written if mask is None else mask & ~written
    if unset.any():
        written = np.broadcast_to(written, unset.shape)  # a mask's lane axes step nowhere in memory
        lane = np.argwhere(unset)[0]
        offset = written.__array_interface__["data"][0] - marks.__array_interface__["data"][0]
        offset += sum(int(i) * int(s) for i, s in zip(lane, written.strides))
        first = [int(i) for i in np.unravel_index(offset // marks.itemsize, marks.shape)]
        raise RuntimeError(_unwritten_message(name, first[lead:]) + _lane_note(unset, at))
    return values


def read_or_taint(values, written, log, mask=None):
    """Sanitizer (lane views): a lane view of a thread's own memory read into a value stored to a
    thread's own memory: lanes whose element was never written are carried (``log.taint``), as
    :func:`access` does with ``poison``, and reported if the value reaches other memory.
    ``mask``: the lanes that read (see :func:`read_written`)."""
    unset = ~written if mask is None else mask & ~written
    if unset.any():
        log.taint(unset)
    return values


def write_where(values, written, value, mask, log=None, name=None):
    """Sanitizer (lane views): ``value`` stored into the lane view ``values`` of an allocation
    where the lane mask ``mask`` holds, each lane its own element, and the same lanes of its
    written-marks view ``written`` set.  With ``log`` (a thread's own memory, :func:`mark_written`)
    the lanes whose value carries a never-written or poison value (``log.pending``) are marked
    unwritten instead, and the store is noted under ``name``."""
    np.copyto(values, value, casting="unsafe", where=mask)
    tainted = None if log is None else log.pending
    np.copyto(written, True if tainted is None else ~np.asarray(tainted, dtype=bool), where=mask)
    if log is not None:
        log.stored(name, tainted is not None and bool(np.any(mask & tainted)))


def mark_written(written, log, name):
    """Sanitizer (lane views): the written-marks of a lane view of a thread's own memory just stored:
    written, except the lanes whose value carries a never-written or poison value (``log.pending``;
    :func:`access` with ``poison``)."""
    tainted = log.pending
    if tainted is None:
        written[...] = True
    else:
        tainted = np.broadcast_to(tainted, written.shape)
        written[...] = ~tainted
    log.stored(name, tainted is not None and tainted.any())


def read_logged(values, written, name, marks, log, index, lanes, statement=False, lead=0, at=()):
    """Sanitizer (lane views): :func:`read_written` of a lane view of shared memory, whose race
    record (of the element ``index`` each of the ``lanes`` reads) is kept deferred in ``log``
    until a write to the same memory before the next barrier needs it."""
    read_written(values, written, name, marks, lead, at)
    log.record_read(name, marks.shape, tuple(np.array(i) for i in index), lanes, statement, lead)
    return values


def _lane_note(where, at) -> str:
    """`` at (blockIdx.x=1, threadIdx.x=31)``: the thread (block, iteration of a parallel loop) of
    the first lane where ``where`` (a boolean lane array) holds.  ``at`` holds ``(tag, value)`` for
    each GPU loop (or parallel loop) around the access: ``value`` is the loop variable, a number
    where the iterations run one after another, the lane array where they run as lanes (lanes
    broadcast as the script's arrays do).  Empty without ``at``."""
    if not at:
        return ""
    values = [np.asarray(v) for _tag, v in at]
    where = np.asarray(where, dtype=bool)
    try:
        shape = np.broadcast_shapes(where.shape, *(v.shape for v in values))
    except ValueError:  # not lanes of the same arrays: name what is certain
        values = [v if v.ndim == 0 else None for v in values]
        shape = ()
    where = np.broadcast_to(where, shape)
    first = tuple(np.argwhere(where)[0]) if where.any() else (0,) * len(shape)
    parts = [f"{tag}={int(np.broadcast_to(v, shape)[first])}" for (tag, _v), v in zip(at, values) if v is not None]
    return f" at ({', '.join(parts)})" if parts else ""


def _unwritten_message(name, first):
    """The error for a read of an allocation element without a defined value."""
    note = RaceLog.undefined_stores.get(name)
    if note is None:
        return f"read of {name}{first}, an element of a buffer allocation that was never written"
    return (f"read of {name}{first}, an element of a buffer allocation that was never written or was stored an "
            f"undefined value ({note})")


def host_device_access(name, what):
    """Sanitizer: host code of a GPU function ``what`` (reads, writes) ``name``, device memory, outside
    any kernel launch: a GPU's host cannot dereference it (the native run would crash or read
    garbage), whatever the emulation's shared arrays would give."""
    raise RuntimeError(f"host code {what} {name}, device memory, outside any kernel launch: on a GPU the host "
                       f"cannot dereference it (a loop left unbound to threads runs on the host)")
