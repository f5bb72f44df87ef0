"""The offset sets of the must-write walk (privatisation's proof, ``codegen.mustwrite``): sums of
two sets and "every element read is one written" agree with numpy's set operations."""
from __future__ import annotations

import numpy as np
import pytest

from tvm_hybrid_nb.codegen.mustwrite import _progression, _sums


@pytest.mark.parametrize("seed", range(40))
def test_the_sums_of_two_offset_sets_are_numpys_distinct_sums(seed):
    rng = np.random.default_rng(seed)

    def some_set():
        kind = rng.integers(4)
        if kind == 0:  # a run
            lo = int(rng.integers(-20, 20))
            return np.arange(lo, lo + int(rng.integers(1, 12)), dtype=np.int64)
        if kind == 1:  # a loop's progression, either sign
            return _progression(int(rng.integers(-9, 10)), int(rng.integers(-3, 3)), int(rng.integers(1, 9)))
        return np.unique(rng.integers(-30, 30, size=int(rng.integers(0, 10)))).astype(np.int64)

    a, b = some_set(), some_set()
    want = np.unique((a[:, None] + b[None, :]).ravel()) if a.size and b.size else np.zeros(0, np.int64)
    np.testing.assert_array_equal(_sums(a, b), want)


def test_a_progression_is_sorted_distinct_whatever_its_sign():
    np.testing.assert_array_equal(_progression(-3, 1, 4), [-12, -9, -6, -3])
    np.testing.assert_array_equal(_progression(0, 5, 4), [0])
    np.testing.assert_array_equal(_progression(2, -1, 3), [-2, 0, 2])
