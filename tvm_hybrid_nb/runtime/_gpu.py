"""GPU threads, emulated in lockstep: thread loops, barriers, blocks and cross-thread values.

Owns ``thread_binding`` and ``thread_lanes`` (threads as lanes), ``barrier`` (``__syncthreads``,
checked to be reached by every thread), ``sblock`` (a block marker), and the values threads exchange:
``thread_allreduce``/``thread_allreduce_values`` (``tvm_thread_allreduce``), ``warp_shuffle`` and
``warp_activemask``, with their private helpers ``_lane_array`` and ``_threads_first``.
"""
from __future__ import annotations

import numpy as np

from ._sanitizers import _lane_note  # named threads in errors (a helper dependency)


# --------------------------------------------------------------------------- threads
def thread_binding(*bounds, thread=""):
    """A loop bound to a GPU thread axis, run one thread after another."""
    return range(*bounds)


def thread_lanes(index, tag):
    """Marks the threads ``tag`` (e.g. ``threadIdx.x``) running in lockstep as the lanes of ``index``."""
    return index


def barrier(scope="shared", reached=True, log=None, thread_axes=None, ndim=None, at=()):
    """``__syncthreads``: a no-op in lockstep, but every thread of the block must reach it.

    ``scope="warp"`` is TVM's warp-synchronous step (``LowerThreadAllreduce`` puts it between the
    shared-memory steps of its last warp, in a branch that only some lanes take): the CUDA code
    generator emits nothing for it, so no thread need reach it.
    ``thread_axes`` (of ``ndim``-dimensional lanes): blocks run as lanes too, and each block's
    threads must agree among themselves only (one block may have left a loop another still runs).
    ``at`` (as ``access`` takes it) names a thread that reaches the barrier and one that does not.
    With a sanitizer ``log``, the accesses since the previous barrier are checked for races.
    """
    reached = np.asarray(reached)
    if scope == "warp" or not reached.any():
        pass
    elif thread_axes is not None:
        per_block = _lane_array(reached, ndim)
        split = (per_block.any(axis=thread_axes, keepdims=True)
                 & ~per_block.all(axis=thread_axes, keepdims=True))
        if split.any():
            first = np.argwhere(split)[0]
            block = per_block[tuple(slice(None) if a in thread_axes else int(i) for a, i in enumerate(first))]
            raise RuntimeError(f"barrier ({scope}) not reached by all threads of the block: "
                               f"{int(block.sum())} of {block.size} lanes reach it"
                               f"{_barrier_threads(*_first_block(split, first, per_block), at)}")
    elif not reached.all():
        raise RuntimeError(f"barrier ({scope}) not reached by all threads of the block: "
                           f"{int(reached.sum())} of {reached.size} lanes reach it"
                           f"{_barrier_threads(reached, ~reached, at)}")
    if log is not None:
        log.flush("barrier")


def _first_block(split, first, per_block):
    """The threads of the block at ``first`` (a lane of ``split``) that reach and that miss the barrier."""
    block = np.zeros(split.shape, bool)
    block[tuple(first)] = True
    return block & per_block, block & ~per_block


def _barrier_threads(reaching, missing, at) -> str:
    """``; (threadIdx.x=0) reaches it, (threadIdx.x=7) does not``; empty without ``at``."""
    if not at:
        return ""
    return (f"; ({_lane_note(reaching, at)[len(' at ('):]} reaches it, "
            f"({_lane_note(missing, at)[len(' at ('):]} does not")


class sblock:  # noqa: N801  (reads like TVMScript's T.sblock)
    """Marks the extent of a schedulable block; does nothing at run time."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# --------------------------------------------------------------------------- cross-thread values
def _lane_array(value, ndim):
    value = np.asarray(value)
    return value.reshape((1,) * (ndim - value.ndim) + value.shape)


def _threads_first(value, axes, extents, ndim):
    """The threads' values with the reduced thread ``axes`` (of ``extents``) flattened into one leading
    axis, in thread order (lowest thread first)."""
    full = _lane_array(value, ndim)
    shape = list(full.shape)
    for axis, extent in zip(axes, extents):
        shape[axis] = extent
    full = np.broadcast_to(full, shape)
    moved = np.moveaxis(full, list(axes), list(range(len(axes))))
    # The thread count spelled out: -1 is ambiguous when another lane axis is empty (a zero-trip loop).
    return moved.reshape((int(np.prod(moved.shape[:len(axes)], dtype=np.int64)),) + moved.shape[len(axes):])


def _fold_order(count, policy):
    """The threads' indices as a fold of ``count`` values combines them: ``(a, b)`` pairs, level by
    level, each giving ``a`` the combined value.  ``"native"`` and None: in thread order (lowest
    thread first); ``"min"``: highest first; ``"max"``: the halving tree of TVM's shared-memory
    allreduce (the top part folded onto the lowest threads, then ``i`` with ``i + offset`` for halving
    offsets); ``"zero"``: that tree over the threads reversed."""
    if policy in (None, "native"):
        return [(0, k) for k in range(1, count)]
    if policy == "min":
        return [(count - 1, k) for k in range(count - 2, -1, -1)]
    index = list(range(count)) if policy == "max" else list(range(count - 1, -1, -1))
    pairs, align = [], 1
    while align < count:
        align <<= 1
    if align > count:
        align >>= 1
        pairs += [(index[i], index[i + align]) for i in range(count - align)]
    while align > 1:
        align >>= 1
        pairs += [(index[i], index[i + align]) for i in range(align)]
    return pairs


def _allreduce_policy(flats):
    """The run's order for a fold of ``flats`` (None: thread order): another where a value is NaN,
    chosen by the run's record (``__out_of_range__``)."""
    if not any(f.dtype.kind in "fc" and np.isnan(f).any() for f in flats):
        return None
    record = globals().get("__out_of_range__")
    record = record.get() if record is not None else None
    return None if record is None else record.unordered(
        "the order in which tvm_thread_allreduce combines the threads' values, some of them NaN: a min/max "
        "of NaN depends on it, and the TIR leaves it open until LowerThreadAllreduce fixes one")


def _fold(combine, flats, policy):
    """``flats`` (each the threads' values, threads first) folded with ``combine`` (tuples to a tuple)
    in thread order; the lanes whose threads hold a NaN folded in :func:`_fold_order`'s ``policy``
    order instead (the others' order is not in question: a sum's rounding is the schedule's)."""
    count = flats[0].shape[0]
    acc = tuple(f[0] for f in flats)
    for k in range(1, count):
        acc = tuple(combine(*acc, *(f[k] for f in flats)))
    if policy in (None, "native"):
        return acc
    slots = [list(f) for f in flats]
    pairs = _fold_order(count, policy)
    for a, b in pairs:
        combined = tuple(combine(*(s[a] for s in slots), *(s[b] for s in slots)))
        for s, value in zip(slots, combined):
            s[a] = value
    first = pairs[-1][0] if pairs else 0
    nan = np.zeros(np.shape(acc[0]), bool)
    for f in flats:
        if f.dtype.kind in "fc":
            nan = nan | np.isnan(f).any(axis=0)
    return tuple(np.where(nan, s[first], a).astype(np.asarray(a).dtype) for s, a in zip(slots, acc))


def thread_allreduce(combine, value, axes, extents, ndim=12):
    """``tvm_thread_allreduce``: fold the values of the threads along ``axes`` with ``combine`` in
    thread order (lowest thread first) and give every thread the result.  Where a value is NaN the
    result may depend on the order (a min), which the TIR leaves open: the run's record picks one
    (:func:`_allreduce_policy`)."""
    flat = _threads_first(value, axes, extents, ndim)
    (acc,) = _fold(lambda a, b: (combine(a, b),), [flat], _allreduce_policy([flat]))
    return np.expand_dims(acc, tuple(axes))


def thread_allreduce_values(combine, values, axes, extents, ndim=12):
    """``tvm_thread_allreduce`` of several values: fold the threads' value tuples along ``axes`` with
    ``combine(*acc, *next)`` (which returns a tuple) in thread order, and give every thread the result
    (the order where a value is NaN as :func:`thread_allreduce`)."""
    flats = [_threads_first(value, axes, extents, ndim) for value in values]
    acc = _fold(combine, flats, _allreduce_policy(flats))
    return tuple(np.expand_dims(np.asarray(a), tuple(axes)) for a in acc)


def warp_shuffle(kind, value, offset, width, extents, ndim=12, poison=None, active=None, strict=False):
    """``tvm_warp_shuffle`` (kind "idx"), ``_down``, ``_up`` and ``_xor`` over threads numbered x
    fastest, warps of 32 consecutive threads (``width`` where wider: rocm's 64-lane wavefronts) split
    into segments of ``width`` lanes (``_xor``, as
    ``__shfl_xor_sync``: the lane ``lane ^ offset`` of the warp, or the thread's own value where that
    lane lies in a later segment).  With ``poison``
    (sanitizer), the lanes carrying uninitialised values move with the values.  ``active`` is a lane
    mask of the threads taking the branch around the shuffle: a thread reading one outside it gets a
    value CUDA leaves undefined (``s_tir.LowerThreadAllreduce`` lets threads whose result nobody uses
    read so), tainted with ``poison``; with ``strict`` (sanitizer, no ``poison`` to carry it), an error."""
    full = _lane_array(value, ndim)
    if active is not None:
        active = _lane_array(active, ndim)
        full = np.broadcast_to(full, np.broadcast_shapes(full.shape, active.shape))
    shape = list(full.shape)
    shape[:len(extents)] = extents
    full = np.broadcast_to(full, shape)
    count = int(np.prod(extents))
    flat = full.reshape((count,) + full.shape[len(extents):])
    lane = np.arange(count)
    if np.ndim(offset):  # a source lane (or delta) per thread: one per lane of ``flat``
        off = _lane_array(offset, ndim)
        off = np.broadcast_to(off.reshape(off.shape + (1,) * (full.ndim - off.ndim)), full.shape)
        offset = off.reshape(flat.shape).astype(np.int64)
        lane = lane.reshape((count,) + (1,) * (flat.ndim - 1))
    else:
        offset = int(offset)
    pos = lane % width
    if kind == "idx":
        src = lane - pos + offset % width
    elif kind == "down":
        src = np.where(pos + offset < width, lane + offset, lane)
    elif kind == "xor":
        in_warp = lane % max(32, width)  # rocm's wavefronts hold 64 lanes
        partner = np.bitwise_xor(in_warp, offset)
        src = np.where(partner // width > in_warp // width, lane, lane - in_warp + partner)
    else:
        src = np.where(pos >= offset, lane - offset, lane)
    src = np.minimum(src, count - 1)

    def pick(values):
        if np.ndim(src) == 1:
            return values[src]
        return np.take_along_axis(values, np.broadcast_to(src, values.shape), axis=0)

    undefined = None
    if active is not None:
        taking = np.broadcast_to(active, full.shape).reshape(flat.shape).astype(bool)
        missing = taking & ~pick(taking)
        if missing.any():
            undefined = missing.reshape(full.shape)
            if strict:
                raise RuntimeError(_shuffle_message(missing, src))
    if poison is not None and poison.pending is not None:
        tainted = np.broadcast_to(_lane_array(poison.pending, ndim), full.shape)
        poison.pending = pick(tainted.reshape(flat.shape)).reshape(full.shape)
    if poison is not None and undefined is not None:
        poison.taint(undefined)
        if poison.note is None:  # named if the value reaches memory that is read (see ``access``)
            poison.note = _shuffle_message(undefined.reshape(flat.shape), src)
    return pick(flat).reshape(full.shape)


def _shuffle_message(missing, src) -> str:
    """The first thread (lane of ``missing``, threads first) that reads a thread outside the branch,
    and the thread it reads (``src``, per thread or one for all)."""
    where = tuple(int(i) for i in np.argwhere(missing)[0])
    sources = np.broadcast_to(np.reshape(src, np.shape(src) + (1,) * (missing.ndim - np.ndim(src))), missing.shape)
    return (f"warp shuffle: thread {where[0]} of the block reads thread {int(sources[where])}, which does not "
            f"take the branch around the shuffle (CUDA leaves that value undefined)")


def atomic_add(buffer, index, value, name="buffer", mask=None, shadow=None):
    """CUDA's ``atomicAdd`` by every lane (where ``mask`` holds): the adds are applied one after
    another in lane order, each lane getting the value it found.  CUDA leaves the order among the
    threads open: for integers (wrapping) every order gives the same element; for floats this is
    one of the valid outcomes.  ``shadow``: the written-marks (sanitizer): the element must hold a
    value."""
    index = tuple(np.asarray(i) for i in index)
    value = np.asarray(value).astype(buffer.dtype, copy=False)
    shape = np.broadcast_shapes(*(i.shape for i in index), value.shape, np.shape(mask) if mask is not None else ())
    coords = [np.broadcast_to(i, shape).reshape(-1) for i in index]
    adds = np.broadcast_to(value, shape).reshape(-1)
    keep = np.ones(adds.size, bool) if mask is None else np.broadcast_to(np.asarray(mask, bool), shape).reshape(-1)
    for c, n in zip(coords, buffer.shape):
        bad = keep & ((c < 0) | (c >= n))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise IndexError(f"out-of-bounds atomic add on {name}{[int(c[k]) for c in coords]} "
                             f"(shape {tuple(buffer.shape)})")
    lanes = np.flatnonzero(keep)
    at = tuple(c[lanes] for c in coords)
    if shadow is not None and at and not np.all(shadow[at]):
        k = int(np.flatnonzero(~shadow[at])[0])
        raise RuntimeError(f"atomic add on {name}{[int(c[k]) for c in at]}, an element never written")
    old = np.zeros(adds.size, buffer.dtype)
    if lanes.size:
        elems = np.ravel_multi_index(at, buffer.shape[:len(at)]) if at else np.zeros(lanes.size, np.int64)
        order = np.argsort(elems, kind="stable")  # lane order within an element
        first = np.r_[True, elems[order][1:] != elems[order][:-1]]
        rank = np.empty(lanes.size, np.int64)
        rank[order] = np.arange(lanes.size) - np.maximum.accumulate(np.where(first, np.arange(lanes.size), 0))
        for r in range(int(rank.max()) + 1):  # each round adds to distinct elements
            sel = np.flatnonzero(rank == r)
            where = tuple(a[sel] for a in at)
            found = buffer[where]
            old[lanes[sel]] = found
            buffer[where] = found + adds[lanes[sel]]
    out = old.reshape(shape)
    return out[()] if out.ndim == 0 else out


def warp_activemask(extents=None, ndim=12, active=None):
    """``__activemask()``: in each thread, the bits of the lanes of its warp (32 consecutive threads,
    x fastest) that exist and take the branch it is in (``active``, a lane mask; all when None)."""
    if extents is None:
        return np.uint32(0xFFFFFFFF)
    count = int(np.prod(extents))
    if active is None:
        if count % 32 == 0:
            return np.uint32(0xFFFFFFFF)
        active = np.ones((), bool)
    taking = _lane_array(active, ndim).astype(bool)
    shape = list(taking.shape)
    shape[:len(extents)] = extents
    taking = np.broadcast_to(taking, shape).reshape((count,) + tuple(shape[len(extents):]))
    lane = np.arange(count)
    bits = np.left_shift(np.uint32(1), (lane % 32).astype(np.uint32)).reshape((count,) + (1,) * (taking.ndim - 1))
    words = np.where(taking, bits, np.uint32(0)).astype(np.uint32)
    warps = -(-count // 32)
    padded = np.zeros((warps * 32,) + words.shape[1:], np.uint32)
    padded[:count] = words
    per_warp = np.bitwise_or.reduce(padded.reshape((warps, 32) + words.shape[1:]), axis=1)
    return per_warp[lane // 32].reshape(shape)
