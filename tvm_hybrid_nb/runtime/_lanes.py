"""Lanes: loop kinds, TIR vectors, and the lanes fast mode runs a loop nest as.

Owns the loop-kind helpers (``parallel``, ``vectorized``, ``unrolled``), the vector constructors
(``ramp``, ``broadcast``, ``shuffle``, ``vector_lane_index``), the value many lanes leave in one
element (``last_lane``), fast mode's strided lane views (``lanes_view``) and the parallel loop split
over the machine's cores (``parallel_chunks``).  Numpy only, like every module of the runtime: the
code generator copies these functions into the scripts that use them.
"""
from __future__ import annotations

import numpy as np


# --------------------------------------------------------------------------- loop kinds
def parallel(*bounds):
    """A ``T.parallel`` loop: iterations run in order here (the IR says they are independent)."""
    return range(*bounds)


def vectorized(*bounds):
    """A ``T.vectorized`` loop, run lane by lane."""
    return range(*bounds)


def unrolled(*bounds):
    """A ``T.unroll`` loop."""
    return range(*bounds)


# --------------------------------------------------------------------------- vectors
def ramp(base, stride, lanes, dtype="int32"):
    """The vector ``[base, base + stride, ..., base + (lanes - 1) * stride]``."""
    return (np.arange(lanes, dtype=dtype) * np.asarray(stride, dtype=dtype) + np.asarray(base, dtype=dtype)).astype(dtype)


def broadcast(value, lanes, dtype):
    """``lanes`` copies of a scalar (of each element, for a per-iteration array in fast mode)."""
    value = np.asarray(value, dtype=dtype)
    if value.ndim == 0:
        return np.full(lanes, value, dtype=dtype)
    return np.broadcast_to(value, value.shape[:-1] + (lanes,))  # a read-only view: operands are never written


def shuffle(vectors, indices):
    """Concatenate ``vectors`` and pick lanes ``indices``."""
    return np.concatenate([np.atleast_1d(v) for v in vectors])[list(indices)]


def vector_lane_index(lanes, ndim=12):
    """The index of each vector lane along the last of ``ndim`` lane axes."""
    return np.arange(lanes, dtype=np.int32).reshape((1,) * (ndim - 1) + (lanes,))


# --------------------------------------------------------------------------- fast mode's lanes
def last_lane(value, vector=False, mask=None):
    """Many lanes writing one element in one statement (a race): the value of the last lane in
    thread order that writes (``mask``: the lanes whose store is not masked off), one valid
    outcome.  ``vector``: the last axis holds a vector's lanes."""
    value = np.asarray(value)
    lead = value.ndim - (1 if vector else 0)
    if lead <= 0:
        return value[()]
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        mask = mask.reshape(mask.shape[:lead]) if mask.ndim > lead else mask
        shape = np.broadcast_shapes(value.shape[:lead], mask.shape)
        writers = np.flatnonzero(np.broadcast_to(mask, shape))
        if writers.size:
            index = np.unravel_index(writers[-1], shape)
            full = np.broadcast_to(value, shape + value.shape[lead:])
            return full[tuple(int(i) for i in index)]
    return value[(-1,) * lead]


def last_lane_along(value, index, axes, vector=False, mask=None):
    """Lanes that write one element each along the array axes ``axes`` where ``index`` (the store's
    index arrays) does not move: the value of the last of them in thread order that writes
    (``mask``), one valid outcome of that race (``S[ty] = v`` by every ``threadIdx.x``; the sanitizer
    reports it where the values differ).  Axes along which the index moves keep their lanes.
    ``vector``: the last axis holds a vector's lanes."""
    value = np.asarray(value)
    lead = value.ndim - (1 if vector else 0)
    ishape = np.broadcast_shapes(*(np.shape(i) for i in index))
    if lead <= 0 or value.ndim < len(ishape):
        return value
    # ``axes`` number the 12 lane axes, aligned to the right as numpy broadcasts; a vector's lanes are
    # the last of them (a ``ramp`` index moves along it too, and it is never reduced).
    ishape = (1,) * (value.ndim - len(ishape)) + tuple(ishape)
    shift = value.ndim - 12
    reduce = sorted(a + shift for a in axes if 0 <= a + shift < lead and value.shape[a + shift] > 1
                    and ishape[a + shift] == 1)
    if not reduce:
        return value
    if mask is None:
        return value[tuple(slice(-1, None) if a in reduce else slice(None) for a in range(value.ndim))]
    mask = np.asarray(mask, dtype=bool)
    mask = mask if mask.ndim <= lead else mask.reshape(mask.shape[:lead])
    mask = mask.reshape((1,) * (lead - mask.ndim) + mask.shape)
    full = np.broadcast_shapes(value.shape[:lead], mask.shape)
    value = np.broadcast_to(value, full + value.shape[lead:])
    mask = np.broadcast_to(mask, full)
    kept = [a for a in range(lead) if a not in reduce]
    kept_shape = tuple(full[a] for a in kept)
    rows = np.transpose(mask, kept + reduce).reshape(kept_shape + (-1,))
    last = rows.shape[-1] - 1 - np.argmax(rows[..., ::-1], axis=-1)  # no writer: any lane (nothing stored)
    flat = np.transpose(value, kept + reduce + list(range(lead, value.ndim)))
    flat = flat.reshape(kept_shape + (-1,) + value.shape[lead:])
    where = last.reshape(last.shape + (1,) * (flat.ndim - last.ndim))
    picked = np.take_along_axis(flat, where, axis=len(kept_shape))[(slice(None),) * len(kept_shape) + (0,)]
    out_shape = tuple(1 if a in reduce else full[a] for a in range(lead)) + value.shape[lead:]
    return picked.reshape(out_shape)


def held_copy(view):
    """Fast mode: the elements of lane view ``view`` in one contiguous array, which a loop that
    reaches its buffer through nothing else works on instead (an accumulator tile summed over a
    reduction: one strided view rewritten at every step is several times slower); :func:`hold_back`
    stores it after the loop.  ``view`` itself where two of its indices reach one element (a copy
    would hold that element twice)."""
    reach = 0
    for stride, size in sorted((abs(s), n) for s, n in zip(view.strides, view.shape) if n > 1):
        if stride <= reach:
            return view
        reach += stride * (size - 1)
    return np.array(view, order="C")


def hold_back(view, held) -> None:
    """After the loop: the elements :func:`held_copy` held, stored back into their buffer."""
    if held is not view:
        view[...] = held


def lanes_view(buffer, base, lanes, ndim=12, _layouts={}):  # noqa: B006 (the default is the cache)
    """Fast mode: ``buffer[base + sum(coefs * lane)]`` for every lane, as a strided view (no copy).

    ``lanes`` holds ``(axis, extent, coefs)``: along array axis ``axis`` the index moves by ``coefs``
    (one per buffer dimension).  The generator only emits it for accesses proven in bounds; numpy
    checks again that the view lies inside the buffer.  A kernel builds the same few views every
    iteration, so their shapes and strides are kept in ``_layouts`` (one dict per script, since
    helpers are copied into the scripts that use them).
    """
    if any(int(extent) == 0 for _axis, extent, _coefs in lanes):  # a zero-trip loop: no element
        shape = [1] * ndim
        for axis, extent, _coefs in lanes:
            shape[axis] = int(extent)
        return np.empty(shape, buffer.dtype)
    if not buffer.flags.c_contiguous:
        # A view (a match_buffer's region): the lanes move by the view's own strides, within its shape.
        lo, hi = [int(b) for b in base], [int(b) for b in base]
        shape, strides = [1] * ndim, [0] * ndim
        for axis, extent, coefs in lanes:
            shape[axis] = int(extent)
            strides[axis] = sum(int(c) * s for c, s in zip(coefs, buffer.strides))
            for d, c in enumerate(coefs):
                span = (int(extent) - 1) * int(c)
                hi[d], lo[d] = hi[d] + max(span, 0), lo[d] + min(span, 0)
        if any(a < 0 or b >= n for a, b, n in zip(lo, hi, buffer.shape)):
            raise IndexError(f"lanes from {lo} to {hi} outside a view of shape {buffer.shape}")
        origin = buffer[tuple(slice(int(b), int(b) + 1) for b in base)]
        return np.lib.stride_tricks.as_strided(origin, tuple(shape), tuple(strides))
    key = (buffer.shape, buffer.itemsize, lanes, ndim)
    layout = _layouts.get(key)
    if layout is None:
        steps = [1] * buffer.ndim
        for d in range(buffer.ndim - 2, -1, -1):
            steps[d] = steps[d + 1] * buffer.shape[d + 1]
        shape, strides = [1] * ndim, [0] * ndim
        for axis, extent, coefs in lanes:
            shape[axis] = int(extent)
            strides[axis] = sum(int(c) * s for c, s in zip(coefs, steps)) * buffer.itemsize
        layout = _layouts[key] = (tuple(steps), tuple(shape), tuple(strides))
    steps, shape, strides = layout
    start = 0
    for b, s in zip(base, steps):
        start += int(b) * s
    return np.ndarray(shape, buffer.dtype, buffer, start * buffer.itemsize, strides)


def parallel_chunks(body, lo, extent, lanes, min_lanes=None, max_lanes=None, report=None, threads=None):
    """Fast mode: a loop whose iterations are proven independent (a ``T.parallel`` loop, the blocks
    of a GPU grid), split into consecutive chunks ``body(chunk_lo, chunk_extent)`` that run on the
    machine's cores at once, as the compiled kernel runs them on its threads (numpy releases the GIL
    in its loops).

    ``lanes`` is the largest number of elements one numpy operation of the whole loop handles.  Each
    chunk gets at least ``min_lanes`` of them (``TVM_HYBRID_NB_CHUNK_LANES``, default 32768):
    threads whose operations are shorter spend more time handing the GIL to each other than they
    save; and at most ``max_lanes`` (``TVM_HYBRID_NB_MAX_CHUNK_LANES``, default 2**21), so a large
    grid never holds all its lanes in memory at once: there are then more chunks than threads, and
    each thread takes the next chunk when it is done with one.  ``TVM_HYBRID_NB_THREADS`` caps the
    number of threads (1 turns this off); so does ``threads``, for a loop whose chunks each rewrite
    memory beyond their own elements (they then run one after another).  Chunks never change the
    result: the iterations are independent.

    ``report(done)``, when given, is called in the calling thread with the number of iterations
    done so far: after each of its own chunks, and while it waits for the other threads.

    The calling thread runs chunks too.  An exception in any chunk stops the others and the first
    one in chunk order propagates; KeyboardInterrupt stops every chunk before it propagates.
    Worker threads inherit the caller's context (numpy's ``errstate``).
    """
    import contextvars
    import ctypes
    import os
    import threading

    def setting(name, default):
        value = os.environ.get(name, "")
        return int(value) if value.isdigit() and int(value) > 0 else default

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cores = min(cores, setting("TVM_HYBRID_NB_THREADS", cores), threads or cores)
    min_lanes = min_lanes if min_lanes is not None else setting("TVM_HYBRID_NB_CHUNK_LANES", 1 << 15)
    max_lanes = max_lanes if max_lanes is not None else setting("TVM_HYBRID_NB_MAX_CHUNK_LANES", 1 << 21)
    extent, lanes = int(extent), int(lanes)
    parts = max(1, min(extent, max(min(cores, lanes // min_lanes), -(-lanes // max(max_lanes, 1)))))
    edges = [lo + extent * p // parts for p in range(parts + 1)]
    chunks = [(a, b - a) for a, b in zip(edges, edges[1:])]
    workers = min(cores, parts)
    if workers == 1:
        done = 0
        for chunk in chunks:
            body(*chunk)
            done += chunk[1]
            if report is not None:
                report(done)
        return
    errors = [None] * parts
    finished = [0]  # iterations done, over all threads
    lock = threading.Lock()
    queue = iter(range(1, parts))  # chunk 0 is the caller's: it starts at once
    stop = []

    def work(caught=BaseException, index=None):
        while not stop:
            if index is None:
                with lock:
                    index = next(queue, None)
                if index is None:
                    return
            try:
                body(*chunks[index])
            except caught as exc:  # noqa: BLE001  (handed to the calling thread)
                errors[index] = exc
                stop.append(index)
                return
            with lock:
                finished[0] += chunks[index][1]
            if caught is Exception and report is not None:  # the calling thread
                report(finished[0])
            index = None

    threads = [threading.Thread(target=contextvars.copy_context().run, args=(work,), daemon=True,
                                name=f"parallel-chunk-{n}") for n in range(1, workers)]
    for thread in threads:
        thread.start()
    try:
        work(Exception, 0)  # the caller's KeyboardInterrupt goes straight to the handler below
        for thread in threads:
            while thread.is_alive():
                thread.join(0.1)
                if report is not None:
                    report(finished[0])
        if report is not None and not stop:
            report(finished[0])  # the last chunks may have ended on other threads
    except BaseException:
        stop.append(-1)
        with lock:  # stop the chunks still running at their next Python step, then wait for them
            for thread in threads:
                if thread.is_alive():
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                               ctypes.py_object(KeyboardInterrupt))
        for thread in threads:
            thread.join()
        raise
    for exc in errors:
        if exc is not None:
            raise exc
