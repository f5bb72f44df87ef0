"""Sanitizer: data race detection (``check=True``).

Owns :class:`RaceLog` (the per-lane accesses between barriers, and the race check; the warp
ledgers of global memory; the grid ledger of the GPU blocks that run one after another; the views
that share one memory) with its helpers: ``_lane_ids``/``_lane_text`` (which lane is which thread),
``_warp_numbers``/``_warp_bits``, ``_distinct``/``_lanes_apart`` (quick tests before the full check)
and ``_DeferredRead`` (a read's record kept until a write needs it).
"""
from __future__ import annotations

import numpy as np


# --------------------------------------------------------------------------- race detection
def _lane_ids(lanes, shape):
    """Number each element of ``shape`` by the lane (thread or parallel iteration) it belongs to."""
    ids = np.zeros((), np.int64)
    for axis, extent, _tag in lanes:
        here = [1] * len(shape)
        here[axis] = extent
        ids = ids * extent + np.arange(extent).reshape(here)
    return np.broadcast_to(ids, shape)


def _lane_text(lanes, lane):
    span = int(np.prod([int(extent) for _axis, extent, _tag in lanes]))
    if lane >= span:  # a warp's tile store (:func:`_warp_store_ids`)
        warp, lane = divmod(lane, span)
        others = [part for part in _lane_text(lanes, lane).split(", ") if not part.startswith("threadIdx.")]
        store = f"the warp of threads {32 * (warp - 1)}-{32 * warp - 1}, storing a tensor-core tile"
        return ", ".join(others + [store])
    parts = []
    for _axis, extent, tag in reversed(lanes):
        parts.append(f"{tag}={lane % extent}")
        lane //= extent
    return ", ".join(reversed(parts))


def _thread_numbers(lanes, ids):
    """Each lane's thread number in its block (``threadIdx.x`` fastest, then ``.y``, ``.z``: CUDA's
    linear order, which cuts the block into warps), from lane numbers ``ids`` (:func:`_lane_ids` of
    ``lanes``); the threads that are no lane axis count as thread 0 of their axis."""
    extents = {tag: int(extent) for _axis, extent, tag in lanes if tag.startswith("threadIdx.")}
    coords = {}
    ids = np.asarray(ids, np.int64)
    for _axis, extent, tag in reversed(lanes):
        coords[tag] = ids % int(extent)
        ids = ids // int(extent)
    x, y = extents.get("threadIdx.x", 1), extents.get("threadIdx.y", 1)
    return coords.get("threadIdx.x", 0) + x * (coords.get("threadIdx.y", 0) + y * coords.get("threadIdx.z", 0))


def _warp_store_ids(lanes, ids):
    """The race-record lane of a warp's store of a tensor-core tile (``RaceLog.record(warp_store=True)``):
    the warp stores the tile together, each element by one lane, which one unspecified, so no thread
    owns the element: one number per warp (and per lane of the other axes, GPU blocks), none a
    thread's: ``span * (1 + warp)`` plus the lane's number with its thread coordinates 0."""
    span = int(np.prod([int(extent) for _axis, extent, _tag in lanes]))
    ids = np.asarray(ids, np.int64)
    rest, left, weight = np.zeros_like(ids), ids, 1
    for _axis, extent, tag in reversed(lanes):
        if not tag.startswith("threadIdx."):
            rest = rest + left % int(extent) * weight
        left, weight = left // int(extent), weight * int(extent)
    return span * (1 + _thread_numbers(lanes, ids) // 32) + rest


def _warp_numbers(lanes):
    """A function from lane numbers (:func:`_lane_ids` of ``lanes``) to the warp each thread runs in
    (32 consecutive threads, ``threadIdx.x`` fastest, then ``.y``, ``.z``), or None when the lanes are
    not all threads of one block or fit in one warp."""
    tags = [tag for _axis, _extent, tag in lanes]
    if not tags or any(tag not in ("threadIdx.x", "threadIdx.y", "threadIdx.z") for tag in tags) \
            or len(set(tags)) != len(tags):
        return None
    if int(np.prod([int(extent) for _axis, extent, _tag in lanes])) <= 32:
        return None
    return lambda ids: np.asarray(_thread_numbers(lanes, ids) // 32, np.int64)


def _warp_bits(lanes, lane_ids):
    """The warp of each lane of ``lane_ids`` and its bit (``1 << warp``), or None when the lanes
    are not all threads of one block or fit in one warp (:func:`_warp_numbers`)."""
    warp_of = _warp_numbers(lanes)
    if warp_of is None:
        return None
    numbers = warp_of(np.ravel(lane_ids))
    return numbers, np.left_shift(np.uint32(1), numbers.astype(np.uint32))


def _distinct(elems, size) -> bool:
    """Whether the flat element numbers ``elems`` (of a buffer of ``size`` elements) are all different."""
    if size <= 8 * elems.size:  # marks cost less than a sort
        marks = np.zeros(size, bool)
        marks[elems] = True
        return int(np.count_nonzero(marks)) == elems.size
    return np.unique(elems).size == elems.size


def _lanes_apart(items, size) -> bool:
    """Whether no element of a buffer of ``size`` elements is touched by two lanes, one of them
    writing, in race records ``items`` (then :meth:`RaceLog._check` has nothing to compare): the
    writing lane of each element in an array, without the sort the full check needs (a statement
    ``buf[i] = buf[i + 1]`` of 16,000 lanes, each under its own mask, ran hundreds of them)."""
    owner = np.full(size, -1, np.int64)
    writes = [(np.ravel(item[0]), np.ravel(item[1])) for item in items if item[2]]
    for elems, ids in writes:
        owner[elems] = ids
    for elems, ids in writes:  # an element two lanes write keeps one of them
        if (owner[elems] != ids).any():
            return False
    for item in items:
        if not item[2]:
            seen = owner[np.ravel(item[0])]
            if ((seen >= 0) & (seen != np.ravel(item[1]))).any():
                return False
    return True


class _DeferredRead:
    """A race record of a read, kept as its index arrays until a write to the same memory before
    the next barrier needs it (most reads meet none: shared-memory tiles read between barriers)."""

    __slots__ = ("index", "lanes", "shape", "mask", "alias")

    def __init__(self, index, lanes, shape, mask=None, alias=None):
        """``alias``: the view's (:meth:`RaceLog.alias`) whose ``index`` it is; then ``shape`` is its root's."""
        self.index, self.lanes, self.shape, self.mask, self.alias = index, lanes, shape, mask, alias

    def item(self):
        """The record as :meth:`RaceLog.record` keeps it: ``(elements, lane ids, False, None, None)``,
        of the lanes the read's ``mask`` keeps."""
        lane_shape = [1] * 12
        for axis, extent, _tag in self.lanes:
            lane_shape[axis] = extent
        shapes = [i.shape for i in self.index] + [tuple(lane_shape)]
        if self.mask is not None:
            shapes.append(self.mask.shape)
        shape = np.broadcast_shapes(*shapes)
        if self.alias is not None:
            elems = np.broadcast_to(_root_elements(self.alias, self.index), shape).reshape(-1)
        else:
            elems = np.ravel_multi_index([np.broadcast_to(i, shape).reshape(-1) for i in self.index], self.shape)
        ids = _lane_ids(self.lanes, shape).reshape(-1)
        if self.mask is not None:
            keep = np.broadcast_to(self.mask, shape).reshape(-1)
            elems, ids = elems[keep], ids[keep]
        return (elems, ids, False, None, None)


def _root_elements(alias, index):
    """The root's flat element numbers of a view's ``index`` (see :meth:`RaceLog.alias`)."""
    offset, strides = alias[4], alias[5]
    elems = np.int64(offset)
    for i, stride in zip(index, strides):
        elems = elems + np.asarray(i, np.int64) * stride
    return elems


def _memory_root(name, array, unit=None):
    """A root of race records (:meth:`RaceLog.alias`): ``(name, shape, address, item size)``.  With
    ``unit`` (an item size other than the array's), the array's memory as elements of ``unit`` bytes,
    named ``name@unit``: the root that views of that element size share (:func:`_race_element`)."""
    address = array.__array_interface__["data"][0]
    if unit is not None:
        return (f"{name}@{unit}", (array.nbytes // unit,), address, unit)
    return (name, array.shape or (1,), address, array.itemsize)


def _race_element(name, shape, element, lead=0, aliases=None):
    """How a race message names flat element ``element`` of records ``name`` (of ``shape``): its index,
    without the ``lead`` copy axes.  A root of ``unit``-byte elements (``name@unit``) is named by its
    bytes, after the first contiguous view in ``aliases`` (:meth:`RaceLog.alias`) that holds them."""
    if "@" not in name:
        return f"{name}{[int(i) for i in np.unravel_index(int(element), shape)[lead:]]}"
    base, unit = name.rsplit("@", 1)
    first = int(element) * int(unit)
    where = f"bytes {first}-{first + int(unit) - 1} of {base}"
    for view, alias in (aliases or {}).items():
        if alias[0] != name or len(alias) < 7:
            continue
        view_shape, inner = alias[6], int(element) - alias[4]
        contiguous = tuple(int(np.prod(view_shape[k + 1:], dtype=np.int64)) for k in range(len(view_shape)))
        if alias[5] == contiguous and 0 <= inner < int(np.prod(view_shape, dtype=np.int64)):
            return f"{view}{[int(i) for i in np.unravel_index(inner, view_shape)]} ({where})"
    return where


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

    Blocks of a GPU grid never synchronise: between them, global memory is checked by the grid
    ledger (``new_grid``, ``at_block``, ``end_grid``) for the whole launch.

    Records are kept per memory, not per name: a buffer declared over another's data
    (``decl_buffer(data=buf.data)``, ``StorageRewrite``'s merged allocations) is declared with
    :meth:`alias`, and its records are kept in its root's elements, so two names of one memory race.
    """

    #: Per allocation name: why an element of it holds an undefined value (an overflow that LLVM
    #: makes poison, stored by :func:`access`), for the error when such an element is read.
    undefined_stores: dict = {}

    def __init__(self, watched=()):
        self.records = {}
        #: Global buffers that threads write (by name, from the script): their reads by GPU threads
        #: are kept until the barrier too, in ``read_ledger`` (a bit per warp that read each element).
        self.watched = set(watched)
        #: Per view name (:meth:`alias`): ``(root name, root shape, root address, item size, offset,
        #: strides, view shape)``, offset and strides in the root's elements.
        self.aliases = {}
        #: Buffers declared over pointer parameters (:meth:`alias_pointer`): ``(weak reference to the
        #: array owning the memory, root)``.
        self.pointer_roots = []
        #: Per root of views (:meth:`_alias_to`): its element size; the roots of one memory in views of
        #: several element sizes (``pool``, ``pool@2``, ``pool@4``) are checked against each other too
        #: (:meth:`_check_across_sizes`).
        self.root_units = {}
        self.read_ledger = {}
        #: Per global buffer written by GPU threads since the last barrier: which warps wrote each
        #: element (:meth:`_warp_write`); None where no claim is made.
        self.warp_ledger = {}
        self.statement = {}
        #: Per buffer name: how many leading dimensions of its array are the emulator's copies (a copy
        #: per thread or per block lane), left out of the element a message names.
        self.leads = {}
        #: Lanes whose value in the statement being run came from never-written memory (see ``access``)
        #: or is poison (``note``: the overflow that made it so, see ``checked_arith``).
        self.pending = None
        self.note = None
        type(self).undefined_stores.clear()
        #: The grid ledger (GPU blocks run one after another): per global buffer, the block that last
        #: wrote each element (-1: none), the block that read it (-1: none, -2: several) and the bits
        #: written; None outside a grid.  ``block``: the running block's number in ``block_keys``.
        self.grid = None
        self.block = None
        self.block_keys = []
        self.block_axes = set()
        self._block_numbers = {}
        self._block_at = [0, 0, 0]

    def alias(self, name, source, view, storage):
        """``name`` (its array ``view``) is declared over the memory of ``source`` (its array
        ``storage``): its records are kept as the root's elements (``source``'s, or its own root's
        if ``source`` is a view too)."""
        self.aliases.pop(name, None)
        root = self.aliases.get(source)
        if root is None:
            if not storage.flags.c_contiguous:
                return
            # A view of another element size (StorageRewrite's and MergeSharedMemoryAllocations'
            # uint8 pools) shares the records of every view of its size over that memory.
            unit = view.itemsize if view.itemsize != storage.itemsize and storage.nbytes % view.itemsize == 0 \
                else None
            root = _memory_root(source, storage, unit)
        self._alias_to(name, root[:4], view)

    def alias_pointer(self, name, view):
        """``name`` (its array ``view``) is declared over a kernel's pointer parameter: where the
        memory of another such buffer, still alive, holds it (the host passed one array as two
        parameters), it is that buffer's alias (see :meth:`alias`)."""
        import weakref  # here: the helper's source is pasted into scripts, which import numpy and math only

        self.aliases.pop(name, None)
        owner = view
        while isinstance(owner.base, np.ndarray):
            owner = owner.base
        self.pointer_roots = [entry for entry in self.pointer_roots if entry[0]() is not None]
        for ref, root in self.pointer_roots:
            if ref() is owner and self._alias_to(name, root, view):
                return
        if view.flags.c_contiguous:
            self.pointer_roots.append((weakref.ref(owner), _memory_root(name, view)))

    def _alias_to(self, name, root, view) -> bool:
        """Keep ``name``'s records as elements of ``root`` (``(name, shape, address, item size)``)
        where its array ``view`` lies in the root's memory in whole elements of the root's size (a
        view of another element size keeps its own records: no claim between the two)."""
        root_name, shape, address, item = root
        offset = view.__array_interface__["data"][0] - address
        if view.itemsize != item or offset % item or any(s % item for s in view.strides):
            return False
        strides = tuple(s // item for s in view.strides)
        low = offset // item + sum(min(0, (d - 1) * s) for d, s in zip(view.shape, strides))
        high = offset // item + sum(max(0, (d - 1) * s) for d, s in zip(view.shape, strides))
        if view.size and (low < 0 or high >= int(np.prod(shape, dtype=np.int64))):
            return False
        self.aliases[name] = (*root, offset // item, strides, view.shape)
        self.root_units[root_name] = item
        if name in self.watched or root_name in self.watched:
            self.watched |= {name, root_name}
        return True

    def ledgered(self, name) -> bool:
        """Whether reads of ``name`` go to the warp ledgers (see :meth:`_warp_read`)."""
        alias = self.aliases.get(name)
        if alias is not None:
            name = alias[0]
        return name in self.warp_ledger or name in self.watched

    def new_grid(self):
        """A kernel launch begins: its blocks share nothing with the blocks of other launches."""
        self.grid, self.block, self.block_keys, self.block_axes = {}, None, [], set()
        self._block_numbers, self._block_at = {}, [0, 0, 0]

    def end_grid(self):
        self.grid = self.block = None

    def at_block(self, axis, value):
        """Block ``value`` of grid axis ``axis`` (0, 1, 2: ``blockIdx.x``, ``.y``, ``.z``) runs."""
        self._block_at[axis] = int(value)
        self.block_axes.add(axis)
        key = tuple(self._block_at)
        if key not in self._block_numbers:
            self._block_numbers[key] = len(self.block_keys)
            self.block_keys.append(key)
        self.block = self._block_numbers[key]

    def _block_text(self, number):
        key = self.block_keys[int(number)]
        return ", ".join(f"blockIdx.{'xyz'[axis]}={key[axis]}" for axis in sorted(self.block_axes))

    def taint(self, lanes):
        """Mark ``lanes`` (a boolean lane array) as carrying an uninitialised value."""
        self.pending = lanes if self.pending is None else (self.pending | lanes)

    def stored(self, name, undefined):
        """The pending value was stored into ``name``: ``undefined``, whether a lane stored one that is
        undefined (then reading it names why: ``note``)."""
        if self.note is not None and undefined:
            type(self).undefined_stores[name] = self.note
        self.pending = self.note = None

    def new_statement(self):
        self.statement = {}

    def record(self, name, shape, index, lane_ids, write, lanes, values=None, statement=False, previous=None,
               grid=False, region=False, lead=0, warp_store=False):
        """``values``: what a write stores; ``previous``: what the elements held before it;
        ``grid``: global memory, also checked against the other blocks of the grid; ``region``
        (with ``statement``): writes are also kept until the threads end (global memory before
        ThreadSync: no barrier orders two threads' writes, while a read before another thread's write
        in a later statement is ordered by the lockstep TVM's warp-synchronous code relies on); a
        read is checked against them: another warp's earlier write is a race
        (:meth:`_warp_read`); ``warp_store``: a warp's store of a tensor-core tile, which the warp
        performs together, each element by a lane of its own, unspecified: recorded as written by the
        warp (:func:`_warp_store_ids`), not by each lane that runs the emulated store, so a lane that
        reads the tile back before a barrier races with it."""
        alias = None if lead else self.aliases.get(name)
        if lead:
            self.leads[name] = lead
        if alias is not None:
            name, shape = alias[0], alias[1]
            elems = np.broadcast_to(_root_elements(alias, index), lane_ids.shape)
        else:
            elems = np.ravel_multi_index(index, shape) if index else np.zeros(lane_ids.shape, np.int64)
        ledger = (elems, lane_ids, values, previous)  # the warp ledgers count real threads
        if warp_store and any(tag.startswith("threadIdx.") for _axis, _extent, tag in lanes):
            first = _thread_numbers(lanes, lane_ids) % 32 == 0  # one record a warp
            elems, lane_ids = elems[first], _warp_store_ids(lanes, lane_ids[first])
            values = None if values is None else values[first]
            previous = None if previous is None else previous[first]
        book = self.statement if statement else self.records
        entry = book.setdefault(name, (shape, lanes, []))
        item = (elems, lane_ids, write, values, previous)
        entry[2].append(item)
        if write:
            self._check(name, shape, lanes, entry[2] if statement else [item])
            if statement and alias is not None:
                self._check_across_sizes(self.statement, "one statement", only=name)
        if write and statement and region:
            self.records.setdefault(name, (shape, lanes, []))[2].append(item)
            self._warp_write(name, shape, ledger[0], ledger[1], lanes, ledger[2], ledger[3])
        elif statement and region and (name in self.warp_ledger or name in self.watched):
            self._warp_read(name, shape, elems, lane_ids, lanes)
        if grid and self.block is not None:
            self._check_blocks(name, shape, elems, write, values, previous)

    def record_read(self, name, shape, index, lanes, statement=False, lead=0, mask=None):
        """A read's record, as :meth:`record` keeps it (``statement``), deferred (:class:`_DeferredRead`);
        ``mask``: the lanes that read (a boolean lane array), None for all."""
        alias = None if lead else self.aliases.get(name)
        if lead:
            self.leads[name] = lead
        book = self.statement if statement else self.records
        if alias is not None:  # kept as the root's elements
            read = _DeferredRead(index, lanes, alias[1], mask, alias)
            book.setdefault(alias[0], (alias[1], lanes, []))[2].append(read)
            return
        book.setdefault(name, (shape, lanes, []))[2].append(_DeferredRead(index, lanes, shape, mask))

    def _warp_write(self, name, shape, elems, lane_ids, lanes, values, previous):
        """A write of global memory by GPU threads since the last barrier.  Checked against the read
        ledger: changing an element that a thread of another warp read in an earlier statement races
        (the read may see either value: warps do not run in lockstep; writes that keep the element's
        value are silent).  Then noted in the warp ledger, per element: a bit per warp that wrote
        it, one per warp whose write changed it, the first value written and whether a later write
        differed (:meth:`_warp_read`).  Ledgers are made on first use (zeroed pages: memory only
        where elements are touched) and dropped at the barrier."""
        warps = _warp_bits(lanes, lane_ids)
        if warps is None:
            return
        numbers, bit = warps
        keys = self._value_keys([(elems, None, True, values, None)], [np.size(elems)])
        old = self._value_keys([(elems, None, True, previous, None)], [np.size(elems)])
        if keys is None or old is None or numbers.size and numbers.max() >= 32:
            self.warp_ledger[name] = None  # buffers of vectors: no value to compare, no claim
            return
        elems, changed = np.ravel(elems), keys != old
        read = self.read_ledger.get(name)
        if read is not None and read[0] == lanes:
            bad = np.flatnonzero(changed & ((read[1][elems] & ~bit) != 0))
            if bad.size:
                k = int(bad[0])
                element, writer = int(elems[k]), int(numbers[k])
                reader = next(w for w in range(32) if (int(read[1][element]) >> w) & 1 and w != writer)
                raise RuntimeError(
                    f"data race on {_race_element(name, shape, element, 0, self.aliases)}: read by a thread of "
                    f"warp {reader} and overwritten in a later statement by thread "
                    f"({_lane_text(lanes, int(np.ravel(lane_ids)[k]))}) of warp {writer}, "
                    f"with no barrier in between: warps do not run in lockstep")
        if name not in self.warp_ledger:
            size = int(np.prod(shape))
            self.warp_ledger[name] = (lanes, *(np.zeros(size, t) for t in (np.uint32, np.uint32, np.uint64, bool)))
        ledger = self.warp_ledger[name]
        if ledger is None or ledger[0] != lanes:
            self.warp_ledger[name] = None
            return
        _lanes, writers, changers, first, differs = ledger
        fresh = writers[elems] == 0
        first[elems[fresh]] = keys[fresh]
        np.logical_or.at(differs, elems, first[elems] != keys)
        np.bitwise_or.at(writers, elems, bit)
        np.bitwise_or.at(changers, elems[changed], bit[changed])

    def _warp_read(self, name, shape, elems, lane_ids, lanes):
        """A read of global memory by GPU threads since the last barrier.  Checked against the warp
        ledger (:meth:`_warp_write`): reading an element that a thread of another warp wrote races
        (only a barrier orders warps), unless every write kept the value the element held (silent)
        or every write stored one value and the reading warp wrote it too.  Then, for a buffer the
        threads also write (``watched``), noted in the read ledger: a bit per warp that read each
        element.  Threads of one warp are left to the lockstep TVM's warp-synchronous code relies on."""
        warps = _warp_bits(lanes, lane_ids)
        if warps is None:
            return
        numbers, bit = warps
        elems = np.ravel(elems)
        ledger = self.warp_ledger.get(name)
        if ledger is not None and ledger[0] == lanes:
            _lanes, writers, changers, _first, differs = ledger
            others = (changers[elems] & ~bit) != 0
            agreed = ~differs[elems] & ((writers[elems] & bit) != 0)
            bad = np.flatnonzero(others & ~agreed)
            if bad.size:
                k = int(bad[0])
                element, reader = int(elems[k]), int(numbers[k])
                writer_warp = next(w for w in range(32) if (int(changers[element]) >> w) & 1 and w != reader)
                writer = self._warp_writer(name, element, writer_warp, lanes)
                thread = f"thread ({_lane_text(lanes, writer)})" if writer is not None else "a thread"
                raise RuntimeError(
                    f"data race on {_race_element(name, shape, element, 0, self.aliases)}: written by {thread} of "
                    f"warp {writer_warp} and read in a later statement by thread "
                    f"({_lane_text(lanes, int(np.ravel(lane_ids)[k]))}) of warp {reader}, "
                    f"with no barrier in between: warps do not run in lockstep")
        if name not in self.watched or numbers.size and numbers.max() >= 32:
            return
        if name not in self.read_ledger:
            self.read_ledger[name] = (lanes, np.zeros(int(np.prod(shape)), np.uint32))
        read = self.read_ledger[name]
        if read[0] == lanes:
            np.bitwise_or.at(read[1], elems, bit)

    def _warp_writer(self, name, element, warp, lanes):
        """A thread of ``warp`` that wrote ``element`` of ``name`` since the last barrier (for the
        message), from the region's write records; None if they do not say."""
        entry = self.records.get(name)
        warp_of = _warp_numbers(lanes)
        for item in (entry[2] if entry is not None else []):
            if type(item) is _DeferredRead:
                continue
            elems, ids, write, _values, _previous = item
            ids = np.ravel(ids)
            hit = (np.ravel(elems) == element) & (warp_of(ids) == warp)
            if write and hit.any():
                return int(ids[hit][0])
        return None

    def _check_blocks(self, name, shape, elems, write, values, previous):
        """The grid ledger: an element one block wrote and another block touches is a race (the
        blocks of a launch run in any order, at once); writes of the value the element already
        holds change nothing and two blocks writing one value (bit for bit) agree."""
        ledger = self.grid.get(name)
        if ledger is None:
            size = int(np.prod(shape))
            ledger = self.grid[name] = (np.full(size, -1, np.int64), np.full(size, -1, np.int64),
                                        np.zeros(size, np.uint64))
        writer, reader, bits = ledger
        me = self.block
        elems = np.ravel(elems)
        if not write:
            other = writer[elems]
            clash = (other >= 0) & (other != me)
            if clash.any():
                self._block_race(name, shape, elems, clash, other, "written by")
            seen = reader[elems]
            reader[elems] = np.where((seen == -1) | (seen == me), me, -2)
            return
        keys = self._value_keys([(elems, None, True, values, None)], [elems.size])
        if keys is not None and previous is not None:
            old = self._value_keys([(elems, None, True, previous, None)], [elems.size])
            if old is not None:  # silent stores: the element keeps its value whichever block writes
                changed = old != keys
                # A block storing the value another block wrote: its own reads after see that
                # value in any order, as if it had written first.
                again = elems[~changed]
                again = again[writer[again] >= 0]
                writer[again] = me
                elems, keys = elems[changed], keys[changed]
        other = writer[elems]
        clash = (other >= 0) & (other != me)
        if keys is not None:
            clash &= bits[elems] != keys
        if clash.any():
            self._block_race(name, shape, elems, clash, other, "written by")
        seen = reader[elems]
        clash = (seen == -2) | ((seen >= 0) & (seen != me))
        if clash.any():
            self._block_race(name, shape, elems, clash, seen, "read by")
        writer[elems] = me
        if keys is not None:
            bits[elems] = keys

    def _block_race(self, name, shape, elems, clash, other, how):
        k = int(np.flatnonzero(clash)[0])
        them = "another block" if other[k] < 0 else f"block ({self._block_text(other[k])})"
        raise RuntimeError(
            f"data race on {_race_element(name, shape, elems[k], 0, self.aliases)}: {how} {them} and accessed by block "
            f"({self._block_text(self.block)}) "
            f"of the same launch, at least one writing; blocks run in no fixed order and never synchronise")

    def flush(self, where="end of the parallel region"):
        try:
            for name, (shape, lanes, items) in self.records.items():
                self._check(name, shape, lanes, items, where)
            self._check_across_sizes(self.records, where)
        finally:
            self.records = {}
            self.warp_ledger = {}
            self.read_ledger = {}

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
        if not any(type(item) is not _DeferredRead and item[2] for item in items):
            return  # reads only
        items = [item.item() if type(item) is _DeferredRead else item for item in items]
        size = int(np.prod(shape, dtype=np.int64))
        if len(items) == 1 and _distinct(items[0][0], size):
            return  # one access touching each element once: no two lanes meet
        if size <= 8 * sum(item[0].size for item in items) and _lanes_apart(items, size):
            return
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
            if writes.all():  # no read to order (each write of a parallel loop's step is checked alone)
                read_ok = writes
            else:
                span = int(ids.max()) + 1
                if (int(elems.max()) + 1) * span < 1 << 62:  # (element, lane) as one number: a flat sort
                    pairs = np.unique(elems * span + ids, return_inverse=True)[1].reshape(-1)
                else:
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
            raise RuntimeError(
                f"data race on {_race_element(name, shape, elems[k], self.leads.get(name, 0), self.aliases)}: "
                f"lanes ({_lane_text(lanes, int(low[bad[0]]))}) "
                f"and ({_lane_text(lanes, int(high[bad[0]]))}) both access it, at least one writing, with no "
                f"barrier in between (checked at {where})")

    def _check_across_sizes(self, book, where, only=None):
        """Races between views of one memory in different element sizes (a ``float32`` output tile over
        the bytes where ``float16`` input tiles were: ``MergeSharedMemoryAllocations`` reuses its pool):
        their records are kept apart (one root per element size), so each pair of roots with records in
        ``book`` is compared here, in the larger element size (``only``: just the pairs of that root)."""
        groups = {}
        for root, unit in self.root_units.items():
            if root in book:
                groups.setdefault(root.rsplit("@", 1)[0], []).append((unit, root))
        for roots in groups.values():
            if len(roots) < 2 or (only is not None and only not in [root for _, root in roots]):
                continue
            roots.sort()
            for i, small in enumerate(roots):
                for large in roots[i + 1:]:
                    if only is None or only in (small[1], large[1]):
                        self._check_size_pair(book, small, large, where)

    def _check_size_pair(self, book, small, large, where):
        """:meth:`_check_across_sizes` of two roots ``(unit, name)``, ``small`` of the smaller unit: a race
        is a lane writing bytes that another lane touches through the other root (no same-value pardon:
        the two views read the bytes as different values)."""
        (unit_s, name_s), (unit_l, name_l) = small, large
        _, lanes_s, items_s = book[name_s]
        shape_l, lanes_l, items_l = book[name_l]
        if lanes_s != lanes_l or unit_l % unit_s:
            return  # lanes numbered differently: no claim
        sides = []
        for items, ratio in ((items_s, unit_l // unit_s), (items_l, 1)):
            items = [item.item() if type(item) is _DeferredRead else item for item in items]
            if not items:
                return
            sides.append((np.concatenate([np.ravel(item[0]) for item in items]) // ratio,
                          np.concatenate([np.ravel(item[1]) for item in items]),
                          np.concatenate([np.full(np.size(item[0]), bool(item[2])) for item in items])))
        if not (sides[0][2].any() or sides[1][2].any()):
            return
        size = int(max(sides[0][0].max(initial=-1), sides[1][0].max(initial=-1))) + 1
        big, ranges = np.iinfo(np.int64).max, []
        for elems, ids, writes in sides:
            bounds = []
            for pick in (writes, slice(None)):  # the lanes that write each element, then all that touch it
                low, high = np.full(size, big), np.full(size, -1)
                np.minimum.at(low, elems[pick], ids[pick])
                np.maximum.at(high, elems[pick], ids[pick])
                bounds += [low, high]
            ranges.append(bounds)
        for (w_low, w_high, _, _), (_, _, a_low, a_high) in ((ranges[0], ranges[1]), (ranges[1], ranges[0])):
            clash = (w_high >= 0) & (a_high >= 0) & ~((w_low == w_high) & (a_low == w_low) & (a_high == w_low))
            if clash.any():
                e = int(np.flatnonzero(clash)[0])
                writer = int(w_low[e]) if int(a_low[e]) != int(w_low[e]) or int(a_high[e]) != int(w_low[e]) \
                    else int(w_high[e])
                other = int(a_low[e]) if int(a_low[e]) != writer else int(a_high[e])
                raise RuntimeError(
                    f"data race on {_race_element(name_l, shape_l, e, 0, self.aliases)}: lanes "
                    f"({_lane_text(lanes_l, writer)}) and ({_lane_text(lanes_l, other)}) both access it, at "
                    f"least one writing, through views of {unit_s}- and {unit_l}-byte elements, with no barrier "
                    f"in between (checked at {where})")
