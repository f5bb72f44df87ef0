"""The race check's quick test (``_lanes_apart``): it may skip the full check only where no element
is touched by two different lanes, one of them writing.  Checked against a brute-force reading of
that rule on random records, and end to end: a statement ``buf[i] = buf[i + 1]`` still races."""
from __future__ import annotations

import numpy as np
import pytest

from tvm_hybrid_nb.runtime import RaceLog, _lanes_apart


def _apart_by_brute_force(items) -> bool:
    lanes_by_element: dict[int, set] = {}
    written = set()
    for elems, ids, write, *_ in items:
        for e, i in zip(np.ravel(elems).tolist(), np.ravel(ids).tolist()):
            lanes_by_element.setdefault(e, set()).add(i)
            if write:
                written.add(e)
    return all(len(lanes_by_element[e]) == 1 for e in written)


@pytest.mark.parametrize("seed", range(200))
def test_lanes_apart_agrees_with_the_rule_on_random_records(seed):
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 40))
    items = []
    for _ in range(int(rng.integers(1, 4))):
        n = int(rng.integers(1, 12))
        elems = rng.integers(0, size, n) if rng.random() < 0.5 else rng.permutation(size)[:n]
        n = elems.size
        ids = rng.integers(0, 6, n) if rng.random() < 0.5 else np.arange(n)
        items.append((elems.astype(np.int64), ids.astype(np.int64), bool(rng.random() < 0.6), None, None))
    assert _lanes_apart(items, size) == _apart_by_brute_force(items)


def _record(log, index, write, values=None, previous=None):
    lanes = ((2, 8, "threadIdx.x"),)
    ids = np.arange(8)
    log.record("buf", (16,), (np.asarray(index),), ids, write, lanes, values=values, statement=True,
               previous=previous)


def test_a_read_of_the_next_lanes_element_and_a_write_of_ones_own_race_in_one_statement():
    log = RaceLog()
    _record(log, np.arange(8) + 1, False)
    with pytest.raises(RuntimeError, match=r"data race on buf\[[1-7]\]"):
        _record(log, np.arange(8), True, values=np.arange(8, dtype=np.float32),
                previous=np.full(8, -1, np.float32))


def test_each_lane_reading_and_writing_its_own_element_passes():
    log = RaceLog()
    _record(log, np.arange(8) * 2, False)
    _record(log, np.arange(8) * 2, True, values=np.arange(8, dtype=np.float32), previous=np.zeros(8, np.float32))
    log.flush()
