"""Emulation runtime: the numpy-only helpers that hybrid scripts call.

Each helper is named for the TIR semantics it implements and is self-contained (it uses only
``np``, ``math`` and the other helpers listed in :data:`HELPER_DEPENDENCIES`), because the code
generator copies the source of the helpers a kernel uses into that kernel's hybrid script: the script
then runs with numpy alone.  Scalars are numpy scalars of their TIR dtype (so integers wrap and
float32 stays float32) or plain Python ints for index arithmetic that the generator proved in range.
"""
from __future__ import annotations

import functools
import inspect
import math  # noqa: F401  (used inside helpers copied into scripts)

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


def thread_binding(*bounds, thread=""):
    """A loop bound to a GPU thread axis, run one thread after another."""
    return range(*bounds)


def thread_lanes(index, tag):
    """Marks the threads ``tag`` (e.g. ``threadIdx.x``) running in lockstep as the lanes of ``index``."""
    return index


def barrier(scope="shared", reached=True, log=None):
    """``__syncthreads``: a no-op in lockstep, but every thread of the block must reach it.

    With a sanitizer ``log``, the accesses since the previous barrier are checked for races.
    """
    reached = np.asarray(reached)
    if reached.any() and not reached.all():
        raise RuntimeError(f"barrier ({scope}) not reached by all threads of the block: "
                           f"{int(reached.sum())} of {reached.size} lanes reach it")
    if log is not None:
        log.flush("barrier")


def _lane_ids(lanes, shape):
    """Number each element of ``shape`` by the lane (thread or parallel iteration) it belongs to."""
    ids = np.zeros((), np.int64)
    for axis, extent, _tag in lanes:
        here = [1] * len(shape)
        here[axis] = extent
        ids = ids * extent + np.arange(extent).reshape(here)
    return np.broadcast_to(ids, shape)


def _lane_text(lanes, lane):
    parts = []
    for _axis, extent, tag in reversed(lanes):
        parts.append(f"{tag}={lane % extent}")
        lane //= extent
    return ", ".join(reversed(parts))


class RaceLog:
    """Sanitizer: the elements each lane touched since the last barrier, per buffer.

    Two different lanes touching one element, at least one of them writing, with no barrier in
    between, is a race, whatever order the emulator ran them in.  Lanes that only write, all the
    same value (bit for bit), are not: whichever write lands last, the element holds that value
    (dlight's CPU schedules recompute a shared value in several parallel iterations).  Nor are
    reads racing with writes that all store the value the element already holds (silent stores:
    ``LowerThreadAllreduce`` has every thread copy the reduced value onto itself), since every
    read sees that value in any order.

    ``statement=True`` records are kept for one statement only (threads before
    ``s_tir.ThreadSync``, where the IR implies a barrier between statements but none inside one).
    """

    def __init__(self):
        self.records = {}
        self.statement = {}
        #: Lanes whose value in the statement being run came from never-written memory (see ``access``).
        self.pending = None

    def taint(self, lanes):
        """Mark ``lanes`` (a boolean lane array) as carrying an uninitialised value."""
        self.pending = lanes if self.pending is None else (self.pending | lanes)

    def new_statement(self):
        self.statement = {}

    def record(self, name, shape, index, lane_ids, write, lanes, values=None, statement=False, previous=None):
        """``values``: what a write stores; ``previous``: what the elements held before it."""
        elems = np.ravel_multi_index(index, shape) if index else np.zeros(lane_ids.shape, np.int64)
        book = self.statement if statement else self.records
        entry = book.setdefault(name, (shape, lanes, []))
        item = (elems, lane_ids, write, values, previous)
        entry[2].append(item)
        if write:
            self._check(name, shape, lanes, entry[2] if statement else [item])

    def flush(self, where="end of the parallel region"):
        try:
            for name, (shape, lanes, items) in self.records.items():
                self._check(name, shape, lanes, items, where)
        finally:
            self.records = {}

    @staticmethod
    def _value_keys(items, sizes, column=3):
        """The bits of each written value (``column`` 4: of the value it overwrote), one key per
        access, or None when some write has no comparable value (buffers of vectors)."""
        keys = []
        for item, size in zip(items, sizes):
            write, values = item[2], item[column]
            if not write:
                keys.append(np.zeros(size, np.uint64))
                continue
            values = None if values is None else np.ascontiguousarray(values)
            if values is None or values.ndim != 1 or values.dtype.itemsize not in (1, 2, 4, 8):
                return None
            keys.append(values.view(f"u{values.dtype.itemsize}").astype(np.uint64))
        return np.concatenate(keys)

    def _check(self, name, shape, lanes, items, where="one statement"):
        elems = np.concatenate([item[0] for item in items])
        ids = np.concatenate([item[1] for item in items])
        writes = np.concatenate([np.full(item[0].shape, item[2]) for item in items])
        seq = np.concatenate([np.full(item[0].shape, k) for k, item in enumerate(items)])
        sizes = [item[0].size for item in items]
        keys = self._value_keys(items, sizes)
        old_keys = self._value_keys(items, sizes, column=4) if keys is not None else None
        written = np.unique(elems[writes])
        if written.size == 0:
            return
        keep = np.isin(elems, written)
        elems, ids, writes, seq = elems[keep], ids[keep], writes[keep], seq[keep]
        keys = keys[keep] if keys is not None else None
        old_keys = old_keys[keep] if old_keys is not None else None
        order = np.lexsort((ids, elems))
        elems, ids, writes, seq = elems[order], ids[order], writes[order], seq[order]
        starts = np.flatnonzero(np.r_[True, elems[1:] != elems[:-1]])
        low = np.minimum.reduceat(ids, starts)
        high = np.maximum.reduceat(ids, starts)
        conflict = low != high
        if keys is not None and conflict.any():
            # Harmless: every write of the element stores one value (bit for bit), and every lane
            # reading it wrote it itself before, so each read sees that value in any order.
            keys = keys[order]
            big = np.iinfo(np.uint64).max
            write_keys = np.where(writes, keys, 0)
            same = (np.minimum.reduceat(np.where(writes, keys, big), starts)
                    == np.maximum.reduceat(write_keys, starts))
            pairs = np.unique(np.stack([elems, ids]), axis=1, return_inverse=True)[1].reshape(-1)
            first_write = np.full(pairs.max() + 1, np.iinfo(np.int64).max)
            np.minimum.at(first_write, pairs[writes], seq[writes])
            read_ok = writes | (first_write[pairs] < seq)
            harmless = same & np.logical_and.reduceat(read_ok, starts)
            if old_keys is not None:  # every write silent: the element never changes
                silent = ~writes | (old_keys[order] == keys)
                harmless |= same & np.logical_and.reduceat(silent, starts)
            conflict &= ~harmless
        bad = np.flatnonzero(conflict)
        if bad.size:
            k = starts[bad[0]]
            where_index = np.unravel_index(elems[k], shape)
            raise RuntimeError(
                f"data race on {name}{[int(i) for i in where_index]}: lanes ({_lane_text(lanes, int(low[bad[0]]))}) "
                f"and ({_lane_text(lanes, int(high[bad[0]]))}) both access it, at least one writing, with no "
                f"barrier in between (checked at {where})")


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


def access(buffer, index, name, write=False, value=None, mask=None, shadow=None, log=None, lanes=(),
           statement=False, poison=None):
    """Sanitizer access (``check=True``): bounds, reads of never-written allocation elements, and
    the per-lane record for race detection; then the read (returned) or write itself.

    ``poison`` (a :class:`RaceLog`) follows MemorySanitizer's rule for a thread's registers: a
    never-written element read into a value that is only stored to thread-local memory is no error
    yet; the lanes carrying it are remembered and the stored element stays "never written", so the
    error comes if and when the value reaches shared or global memory, a branch or an address.
    """
    index = tuple(np.asarray(i) for i in index)
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
    ok = np.ones(shape, bool)
    for i, n in zip(full, buffer.shape):
        ok = ok & (i >= 0) & (i < n)
    if np.any(keep & ~ok):
        first = tuple(int(f[keep & ~ok][0]) for f in full)
        raise IndexError(f"out-of-bounds {'write' if write else 'read'} of {name}{list(first)} "
                         f"(shape {tuple(buffer.shape)})")
    sel = tuple(f[keep] for f in full)
    written = np.broadcast_to(value, shape + extra)[keep] if write else None
    if log is not None and lanes:
        log.record(name, buffer.shape[:len(index)], sel, _lane_ids(lanes, shape)[keep], write, lanes, written,
                   statement, previous=buffer[sel] if write else None)
    if write:
        buffer[sel] = written
        if shadow is not None:
            shadow[sel] = True if tainted is None else ~np.broadcast_to(tainted, shape)[keep]
        if poison is not None:
            poison.pending = None
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
            raise RuntimeError(f"read of {name}{list(first)}, an element of a buffer allocation that was never "
                               f"written")
    out = np.zeros(shape + extra, buffer.dtype)
    out[keep] = buffer[sel]
    return out[()] if out.ndim == 0 else out


def read_written(values, written, name, marks):
    """Sanitizer, fast mode: the lane view ``values`` of an allocation when every element in it
    was written; ``written`` is the same view of the allocation's written-marks ``marks``."""
    if not written.all():
        lane = np.argwhere(~written)[0]
        offset = written.__array_interface__["data"][0] - marks.__array_interface__["data"][0]
        offset += sum(int(i) * int(s) for i, s in zip(lane, written.strides))
        first = [int(i) for i in np.unravel_index(offset // marks.itemsize, marks.shape)]
        raise RuntimeError(f"read of {name}{first}, an element of a buffer allocation that was never written")
    return values


def lanes_view(buffer, base, lanes, ndim=12, _layouts={}):  # noqa: B006 (the default is the cache)
    """Fast mode: ``buffer[base + sum(coefs * lane)]`` for every lane, as a strided view (no copy).

    ``lanes`` holds ``(axis, extent, coefs)``: along array axis ``axis`` the index moves by ``coefs``
    (one per buffer dimension).  The generator only emits it for accesses proven in bounds; numpy
    checks again that the view lies inside the buffer.  A kernel builds the same few views every
    iteration, so their shapes and strides are kept in ``_layouts`` (one dict per script, since
    helpers are copied into the scripts that use them).
    """
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


def parallel_chunks(body, lo, extent, lanes, min_lanes=None):
    """Fast mode: a ``T.parallel`` loop whose iterations are proven independent, split into
    consecutive chunks ``body(chunk_lo, chunk_extent)`` that run on the machine's cores at once, as
    the compiled kernel runs them on its threads (numpy releases the GIL in its loops).

    ``lanes`` is the largest number of elements one numpy operation of the loop handles.  Each
    chunk gets at least ``min_lanes`` of them (``TVM_HYBRID_NB_CHUNK_LANES``, default 32768):
    threads whose operations are shorter spend more time handing the GIL to each other than they
    save.  ``TVM_HYBRID_NB_THREADS`` caps the number of threads (1 turns this off).

    The first chunk runs in the calling thread.  An exception in any chunk stops the others and the
    first one in chunk order propagates; KeyboardInterrupt stops every chunk before it propagates.
    Worker threads inherit the caller's context (numpy's ``errstate``).
    """
    import contextvars
    import ctypes
    import os
    import threading

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cap = os.environ.get("TVM_HYBRID_NB_THREADS", "")
    if cap.isdigit() and int(cap) > 0:
        cores = min(cores, int(cap))
    if min_lanes is None:
        setting = os.environ.get("TVM_HYBRID_NB_CHUNK_LANES", "")
        min_lanes = int(setting) if setting.isdigit() and int(setting) > 0 else 1 << 15
    parts = max(1, min(cores, int(extent), int(lanes) // min_lanes))
    edges = [lo + extent * p // parts for p in range(parts + 1)]
    chunks = [(a, b - a) for a, b in zip(edges, edges[1:])]
    if parts == 1:
        body(*chunks[0])
        return
    errors = [None] * parts
    running, lock = set(), threading.Lock()

    def work(index):
        try:
            try:
                body(*chunks[index])
            finally:
                with lock:
                    running.discard(index)
        except BaseException as exc:  # noqa: BLE001  (handed to the calling thread)
            errors[index] = exc

    threads = []
    for index in range(1, parts):
        thread = threading.Thread(target=contextvars.copy_context().run, args=(work, index), daemon=True,
                                  name=f"parallel-chunk-{index}")
        running.add(index)
        threads.append(thread)
        thread.start()
    try:
        body(*chunks[0])
        for thread in threads:
            thread.join()
    except BaseException:
        with lock:  # stop the chunks still running at their next Python step, then wait for them
            for index in running:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threads[index - 1].ident),
                                                           ctypes.py_object(KeyboardInterrupt))
        for thread in threads:
            thread.join()
        raise
    for exc in errors:
        if exc is not None:
            raise exc


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
    return moved.reshape((-1,) + moved.shape[len(axes):])


def thread_allreduce(combine, value, axes, extents, ndim=12):
    """``tvm_thread_allreduce``: fold the values of the threads along ``axes`` with ``combine`` in
    thread order (lowest thread first) and give every thread the result."""
    flat = _threads_first(value, axes, extents, ndim)
    acc = flat[0]
    for k in range(1, flat.shape[0]):
        acc = combine(acc, flat[k])
    return np.expand_dims(acc, tuple(axes))


def thread_allreduce_values(combine, values, axes, extents, ndim=12):
    """``tvm_thread_allreduce`` of several values: fold the threads' value tuples along ``axes`` with
    ``combine(*acc, *next)`` (which returns a tuple) in thread order, and give every thread the result."""
    flats = [_threads_first(value, axes, extents, ndim) for value in values]
    count = max(f.shape[0] for f in flats)
    acc = tuple(f[0] for f in flats)
    for k in range(1, count):
        acc = tuple(combine(*acc, *(f[k] for f in flats)))
    return tuple(np.expand_dims(np.asarray(a), tuple(axes)) for a in acc)


def warp_shuffle(kind, value, offset, width, extents, ndim=12, poison=None):
    """``tvm_warp_shuffle`` (kind "idx"), ``_down`` and ``_up`` over threads numbered x fastest,
    warps of 32 consecutive threads split into segments of ``width`` lanes.  With ``poison``
    (sanitizer), the lanes carrying uninitialised values move with the values."""
    full = _lane_array(value, ndim)
    shape = list(full.shape)
    shape[:len(extents)] = extents
    full = np.broadcast_to(full, shape)
    count = int(np.prod(extents))
    flat = full.reshape((count,) + full.shape[len(extents):])
    lane = np.arange(count)
    pos = lane % width
    if kind == "idx":
        src = lane - pos + int(offset) % width
    elif kind == "down":
        src = np.where(pos + offset < width, lane + offset, lane)
    else:
        src = np.where(pos >= offset, lane - offset, lane)
    src = np.minimum(src, count - 1)
    if poison is not None and poison.pending is not None:
        tainted = np.broadcast_to(_lane_array(poison.pending, ndim), full.shape)
        poison.pending = tainted.reshape(flat.shape)[src].reshape(full.shape)
    return flat[src].reshape(full.shape)


def warp_activemask():
    """``__activemask()``: every lane of the warp takes part (divergent shuffles are refused)."""
    return np.uint32(0xFFFFFFFF)


class sblock:  # noqa: N801  (reads like TVMScript's T.sblock)
    """Marks the extent of a schedulable block; does nothing at run time."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# --------------------------------------------------------------------------- integer semantics
def wrap(value, dtype):
    """Wrap a Python int into ``dtype``'s range (two's complement), as the hardware does."""
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value).astype(dtype)[()]
    info = np.iinfo(dtype)
    span = 1 << info.bits
    return (value - info.min) % span + info.min


def _check_divisor(a, b, dtype=None, mask=None):
    """Raise where the hardware traps: a zero divisor, or ``INT_MIN / -1`` of a signed dtype
    (x86's ``idiv`` raises SIGFPE for both; LLVM calls the overflow undefined).  Lanes where
    ``mask`` is false (the untaken arm of a lazy ``if_then_else``, a branch not taken) do not
    divide: a zero divisor there becomes 1.  Returns the divisor to use."""
    taken = True if mask is None else np.asarray(mask, dtype=bool)
    zero = np.asarray(b) == 0
    if np.any(zero & taken):
        raise ZeroDivisionError("integer division by zero")
    if dtype is None and not (isinstance(a, int) and isinstance(b, int)):
        dtype = np.result_type(a, b)
    if dtype is not None and np.dtype(dtype).kind == "i":
        low = np.iinfo(dtype).min
        if np.any((np.asarray(a) == low) & (np.asarray(b) == -1) & taken):
            raise OverflowError(f"integer division overflow: {low} / -1 does not fit {np.dtype(dtype)} "
                                f"(the native kernel traps with SIGFPE)")
    if mask is not None and np.any(zero):
        b = np.where(taken, b, np.ones((), np.asarray(b).dtype))
    return b


def truncdiv(a, b, dtype=None, mask=None):
    """Integer division rounding toward zero (TIR ``Div`` on integers, C semantics)."""
    b = _check_divisor(a, b, dtype, mask)
    if isinstance(a, int) and isinstance(b, int):
        q = abs(a) // abs(b)
        return q if (a < 0) == (b < 0) else -q
    r = np.fmod(a, b)
    return (a - r) // b


def truncmod(a, b, dtype=None, mask=None):
    """Remainder with the sign of the dividend (TIR ``Mod`` on integers, C ``%``)."""
    b = _check_divisor(a, b, dtype, mask)
    if isinstance(a, int) and isinstance(b, int):
        r = abs(a) % abs(b)
        return r if a >= 0 else -r
    return np.fmod(a, b)


def floordiv(a, b, dtype=None, mask=None):
    """Integer division rounding toward minus infinity (TIR ``FloorDiv``)."""
    b = _check_divisor(a, b, dtype, mask)
    return a // b


def floormod(a, b, dtype=None, mask=None):
    """Remainder with the sign of the divisor (TIR ``FloorMod``)."""
    b = _check_divisor(a, b, dtype, mask)
    return a % b


def shift_count(count, bits, mask=None):
    """Sanitizer: a shift count must lie in ``[0, bits)`` (LLVM makes other shifts poison)."""
    bad = (np.asarray(count) < 0) | (np.asarray(count) >= bits)
    if mask is not None:
        bad = bad & np.asarray(mask, dtype=bool)
    if np.any(bad):
        first = np.broadcast_to(np.asarray(count), np.shape(bad))[bad].reshape(-1)[0]
        raise ValueError(f"shift by {int(first)} of a {bits}-bit integer: counts outside [0, {bits}) are "
                         f"undefined in LLVM (the native result depends on how it was compiled)")
    return count


def float_floordiv(a, b):
    """TIR ``FloorDiv`` on floats: ``floor(a / b)`` in the operands' dtype."""
    return np.floor(a / b)


def float_floormod(a, b):
    """TIR ``FloorMod`` on floats: ``a - floor(a / b) * b`` in the operands' dtype."""
    return a - np.floor(a / b) * b


# --------------------------------------------------------------------------- conversions
def _float_to_int32_or_64(x, bits):
    """x86 ``cvttss2si``/``cvttsd2si``: truncate toward zero; NaN and out-of-range values give
    the "integer indefinite" ``INT_MIN`` of the width.  Returns int64."""
    t = np.trunc(np.asarray(x, np.float64))
    limit = 2.0 ** (bits - 1)
    ok = (t >= -limit) & (t < limit)  # False for NaN
    return np.where(ok, t, -limit).astype(np.int64)


def _float_to_int(x, dtype):
    """Float → integer as the native LLVM kernel computes it on x86-64 (measured, vectorised
    loops): in-range values truncate; NaN, infinities and out-of-range values follow the
    instruction sequences LLVM emits (``fptosi``/``fptoui`` of such values are poison in LLVM
    IR, so scalar remainder iterations of a native loop may differ)."""
    dtype = np.dtype(dtype)
    src = np.asarray(x).dtype
    if dtype.itemsize == 8:
        t1 = _float_to_int32_or_64(x, 64)
        if dtype.kind == "i":
            return t1
        t2 = _float_to_int32_or_64(np.asarray(x, np.float64) - 2.0 ** 63, 64)
        return (t1 | (t2 & (t1 >> 63))).view(np.uint64)
    t1 = _float_to_int32_or_64(x, 32)
    if dtype == np.uint32:
        t2 = _float_to_int32_or_64(np.asarray(x, np.float64) - 2.0 ** 31, 32)
        sign = np.where(t1 < 0, np.int64(-1), np.int64(0))
        return ((t1 | (t2 & sign)) & 0xFFFFFFFF).astype(np.uint32)
    if dtype == np.int32:
        return t1.astype(np.int32)
    if dtype == np.uint16 or (dtype == np.int16 and src == np.float16):
        return t1.astype(dtype)  # the low bits (wrap)
    info = np.iinfo(dtype)
    return np.clip(t1, info.min, info.max).astype(dtype)  # packed with saturation


def _float_to_float(arr, dtype):
    """Float → float as the native kernel converts (x86-64, F16C): numpy's values, but a NaN
    leaves a conversion quiet (its quiet bit set), as ``cvtss2sd``/``vcvtps2ph`` and compiler-rt
    make it, except float16 → float32 (``vcvtph2ps`` keeps the payload as it is)."""
    out = arr.astype(dtype)
    nan = np.isnan(arr)
    if not nan.any() or (arr.dtype == np.float16 and out.dtype == np.float32):
        return out
    out = np.array(out, copy=True)
    bits = out.view(f"u{out.itemsize}")
    if out.dtype == np.float16:  # sign, quiet NaN, the top 9 payload bits of the source
        src_bits = arr.view(f"u{arr.itemsize}").astype(np.uint64)
        mant_bits = np.finfo(arr.dtype).nmant
        sign = (src_bits >> (arr.itemsize * 8 - 1)).astype(np.uint16) << 15
        payload = ((src_bits >> (mant_bits - 10)) & 0x1FF).astype(np.uint16)
        bits[nan] = (sign | 0x7E00 | payload)[nan]
    else:
        quiet = np.array(1 << (np.finfo(out.dtype).nmant - 1), bits.dtype)
        bits[nan] |= quiet
    return out


def cast(value, dtype):
    """Convert like TVM's ``Cast``: integers wrap, floats round to nearest, float→int truncates
    (NaN and out-of-range values as the native kernel converts them, see ``_float_to_int``)."""
    arr = np.asarray(value)
    if dtype == "bool":
        out = arr != 0
    elif arr.dtype.kind == "f" and np.dtype(dtype).kind in "iu":
        out = _float_to_int(arr, dtype)
    elif arr.dtype.kind == "f" and np.dtype(dtype).kind == "f":
        out = _float_to_float(arr, dtype)
    else:
        out = arr.astype(dtype)
    return out[()] if out.ndim == 0 else out


def reinterpret(value, dtype):
    """Reinterpret the bits of ``value`` as ``dtype`` (same total width)."""
    arr = np.ascontiguousarray(value)
    out = arr.view(dtype)
    return out[()] if out.ndim == 0 else out


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


def select(condition, true_value, false_value):
    """TIR ``Select``: both sides are already evaluated; pick per lane."""
    out = np.where(condition, true_value, false_value)
    return out[()] if out.ndim == 0 else out


def minimum(a, b):
    """TIR ``Min`` as the backend emits it, ``select(a < b, a, b)`` (NaN picks ``b``)."""
    return select(a < b, a, b)


def maximum(a, b):
    """TIR ``Max`` as the backend emits it, ``select(a > b, a, b)`` (NaN picks ``b``)."""
    return select(a > b, a, b)


# --------------------------------------------------------------------------- memory
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
    return np.zeros(shape, dtype=dtype)


def view(data, dtype, shape, elem_offset=0):
    """A buffer declared over existing storage (``DeclBuffer``): shares memory, never copies."""
    flat = data.reshape(-1)
    if flat.dtype != np.dtype(dtype):
        flat = flat.view(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    if elem_offset < 0 or elem_offset + size > flat.size:
        raise IndexError(f"view of {size} elements at offset {elem_offset} exceeds its storage of {flat.size}")
    out = flat[elem_offset:elem_offset + size].reshape(shape)
    if not np.shares_memory(out, data):
        raise RuntimeError("buffer view would copy its storage")
    return out


def _stable_order(data, axis, ascend):
    """The order ``std::stable_sort`` gives with TVM's comparators: ascending (``<``) or descending
    (``>``) values, equal values in their original order.  NaN breaks the strict weak order those
    comparators need, so the C++ result depends on the library's merge steps: refused."""
    if data.dtype.kind == "f" and np.isnan(data).any():
        raise ValueError("sorting NaN: std::stable_sort's order is implementation-defined for NaN "
                         "(TVM's comparators are not a strict weak order), so it cannot be emulated exactly")
    if ascend:
        return np.argsort(data, axis=axis, kind="stable")
    n = data.shape[axis]
    flipped = np.argsort(np.flip(data, axis=axis), axis=axis, kind="stable")
    return np.flip(n - 1 - flipped, axis=axis)


def contrib_sort(function, *args):
    """TVM's runtime sort functions (``src/runtime/contrib/sort/sort.cc``) on numpy views:
    ``sort(data, out, axis, is_ascend)``, ``argsort(data, out, axis, is_ascend)`` and
    ``topk(data, out..., k, axis, ret_type, is_ascend)`` (``ret_type`` "both": values then indices;
    ``k < 1`` means all).  Indices are cast to the output's dtype.  Returns 0 like a packed call."""
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
    axis = axis + data.ndim if axis < 0 else axis
    if not 0 <= axis < data.ndim:
        raise ValueError(f"{function}: axis out of bounds for input of {data.ndim} dimensions")
    order = _stable_order(data, axis, ascend)
    if function == "tvm.contrib.sort.sort":
        args[1][...] = np.take_along_axis(data, order, axis=axis)
    elif function == "tvm.contrib.sort.argsort":
        args[1][...] = order.astype(args[1].dtype)
    else:
        n = data.shape[axis]
        k = n if k < 1 else min(k, n)
        top = np.take(order, np.arange(k), axis=axis)
        index = (slice(None),) * axis + (slice(0, k),)
        if values is not None:
            values[index] = np.take_along_axis(data, top, axis=axis)
        if indices is not None:
            indices[index] = top.astype(indices.dtype)
    return 0


def vector_lane_index(lanes, ndim=12):
    """The index of each vector lane along the last of ``ndim`` lane axes."""
    return np.arange(lanes, dtype=np.int32).reshape((1,) * (ndim - 1) + (lanes,))


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


def flat_view(data, dtype, size, elem_offset=0):
    """A flat buffer of ``size`` elements declared over existing storage at ``elem_offset``: a view
    to the end of the storage (accesses past ``size`` stay inside the allocation, as in TVM)."""
    flat = data.reshape(-1)
    if flat.dtype != np.dtype(dtype):
        flat = flat.view(dtype)
    if elem_offset < 0 or elem_offset + size > flat.size:
        raise IndexError(f"view of {size} elements at offset {elem_offset} exceeds its storage of {flat.size}")
    out = flat[elem_offset:]
    if not np.shares_memory(out, data):
        raise RuntimeError("buffer view would copy its storage")
    return out


def rows_view(data, lead, dtype, shape, elem_offset=0):
    """A buffer declared over per-thread storage: the same view of the row of every thread (the
    first ``lead`` axes index the threads); shares memory, never copies."""
    rows = data.reshape(data.shape[:lead] + (-1,))
    if rows.dtype != np.dtype(dtype):
        rows = rows.view(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    if elem_offset < 0 or elem_offset + size > rows.shape[-1]:
        raise IndexError(f"view of {size} elements at offset {elem_offset} exceeds its storage of {rows.shape[-1]}")
    out = rows[..., elem_offset:elem_offset + size].reshape(data.shape[:lead] + tuple(shape))
    if not np.shares_memory(out, data):
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


def _bounds_error(kind, name, buffer, index, mask=None):
    """The first offending element (of all lanes) named in one line."""
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
    lanes = f" ({count} of {bad.size} lanes)" if bad.size > 1 else ""
    return IndexError(f"out-of-bounds {kind} of {name}{first}{lanes} (shape {tuple(buffer.shape)})")


def _in_bounds(buffer, index):
    ok = True
    for i, n in zip(index, buffer.shape):
        i = np.asarray(i)
        ok = ok & (i >= 0) & (i < n)
    return ok


def load(buffer, index, name="buffer", mask=None):
    """Bounds-checked read of ``buffer[index]``.

    Lanes where ``mask`` is false (masked-out lanes of a ``Select``) may be out of bounds: they read 0.
    """
    index = tuple(index)
    ok = _in_bounds(buffer, index)
    if mask is None:
        if not np.all(ok):
            raise _bounds_error("read", name, buffer, index)
        return buffer[index]
    if not np.all(ok | ~np.asarray(mask, dtype=bool)):
        raise _bounds_error("read", name, buffer, index, mask)
    safe = tuple(np.where(ok, i, 0) for i in index)
    out = np.where(ok, buffer[safe], np.zeros((), buffer.dtype))
    return out[()] if out.ndim == 0 else out


def store(buffer, index, value, name="buffer", mask=None):
    """Bounds-checked write of ``value`` to ``buffer[index]``; with ``mask``, only where it holds."""
    index = tuple(index)
    if mask is not None:
        shape = np.broadcast_shapes(np.shape(mask), np.shape(value), *(np.shape(i) for i in index))
        keep = np.broadcast_to(np.asarray(mask, dtype=bool), shape)
        index = tuple(np.broadcast_to(i, shape)[keep] for i in index)
        value = np.broadcast_to(value, shape)[keep]
    if not np.all(_in_bounds(buffer, index)):
        raise _bounds_error("write", name, buffer, index)
    buffer[index] = value


# --------------------------------------------------------------------------- math in the operand dtype
def rsqrt(x):
    """``1 / sqrt(x)`` in ``x``'s dtype."""
    x = np.asarray(x)
    out = np.asarray(1, dtype=x.dtype) / np.sqrt(x)
    return out[()] if out.ndim == 0 else out


def sigmoid(x):
    """``1 / (1 + exp(-x))`` in ``x``'s dtype."""
    x = np.asarray(x)
    one = np.asarray(1, dtype=x.dtype)
    out = one / (one + np.exp(-x))
    return out[()] if out.ndim == 0 else out


def erf(x):
    """The error function, computed in double and rounded to ``x``'s dtype."""
    x = np.asarray(x)
    out = np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)
    return out[()] if out.ndim == 0 else out


def _unary_in_dtype(fn, x):
    x = np.asarray(x)
    out = np.asarray(fn(x.astype(np.float64))).astype(x.dtype)
    return out[()] if out.ndim == 0 else out


def clz(x, dtype):
    """Leading zero bits of each integer in its own width, as ``dtype``.  Zero is refused: TVM's
    llvm backend emits ``ctlz`` with a poisoned zero, so the compiled kernel's result is undefined."""
    x = np.asarray(x)
    if not np.all(x):
        raise ValueError("clz(0) is undefined in TVM's llvm code (ctlz with is_zero_poison)")
    bits = x.dtype.itemsize * 8
    rest = x.astype(np.dtype(f"uint{bits}"))
    length = np.zeros(rest.shape, np.int64)
    shift = bits // 2
    while shift:
        high = rest >= (np.uint64(1) << np.uint64(shift)).astype(rest.dtype)
        length += np.where(high, shift, 0)
        rest = np.where(high, rest >> rest.dtype.type(shift), rest)
        shift //= 2
    out = (bits - length - (rest > 0)).astype(dtype)
    return out[()] if out.ndim == 0 else out


def in_double(fn, x):
    """``fn`` of a float32 (or float16) ``x`` computed in float64 and rounded to float32 (then to
    ``x``'s dtype): the correctly rounded value that libm's ``expf``/``logf``/``sinf``/``cosf``
    give the native kernel."""
    x = np.asarray(x)
    out = fn(x.astype(np.float64)).astype(np.float32).astype(x.dtype)
    return out[()] if out.ndim == 0 else out


def nan_through(out, x):
    """A NaN operand comes out as itself, quieted, as libm returns it (numpy's vector loops may
    give their own NaN instead), so NaN signs and payloads do not depend on how numpy ran."""
    nan = np.isnan(x)
    if not np.any(nan):
        return out
    res = np.where(nan, x + x, out).astype(np.result_type(out), copy=False)
    return res[()] if res.ndim == 0 else res


def popcount(x):
    """Number of set bits, in ``x``'s dtype."""
    x = np.asarray(x)
    bits = np.unpackbits(np.ascontiguousarray(x).reshape(-1).view(np.uint8)).reshape(x.size, -1).sum(axis=1)
    out = bits.astype(x.dtype).reshape(x.shape)
    return out[()] if out.ndim == 0 else out


#: Which helpers each helper calls, so a script gets everything it needs.
HELPER_DEPENDENCIES: dict[str, tuple[str, ...]] = {
    "cast": ("_float_to_int", "_float_to_float"),
    "_float_to_int": ("_float_to_int32_or_64",),
    "truncdiv": ("_check_divisor",),
    "truncmod": ("_check_divisor",),
    "floordiv": ("_check_divisor",),
    "floormod": ("_check_divisor",),
    "minimum": ("select",),
    "maximum": ("select",),
    "load": ("_in_bounds", "_bounds_error"),
    "thread_allreduce": ("_threads_first",),
    "thread_allreduce_values": ("_threads_first",),
    "_threads_first": ("_lane_array",),
    "RaceLog": ("_lane_text",),
    "access": ("_lane_ids",),
    "warp_shuffle": ("_lane_array",),
    "store": ("_in_bounds", "_bounds_error"),
    "contrib_sort": ("_stable_order",),
}

#: Helpers that need ``import math`` in the script.
NEEDS_MATH = frozenset({"erf"})


def helper_closure(names) -> list[str]:
    """``names`` plus every helper they depend on, in this module's definition order."""
    wanted: set[str] = set()
    stack = list(names)
    while stack:
        name = stack.pop()
        if name not in wanted:
            wanted.add(name)
            stack.extend(HELPER_DEPENDENCIES.get(name, ()))
    order = list(globals())
    return sorted(wanted, key=order.index)


def helper_source(names) -> str:
    """The source text of the given helpers and their dependencies, ready to paste into a script."""
    return "\n\n".join(_helper_text(name) for name in helper_closure(names))


@functools.lru_cache(maxsize=None)
def _helper_text(name: str) -> str:
    # inspect.getsource re-reads and re-tokenizes this file on every call (~30 ms): once per helper.
    return inspect.getsource(globals()[name]).rstrip()
