"""Emulation runtime: the numpy-only helpers that hybrid scripts call.

Each helper is named for the TIR semantics it implements and is self-contained (it uses only
``np``, ``math`` and the other helpers listed in :data:`HELPER_DEPENDENCIES`), because the code
generator copies the source of the helpers a kernel uses into that kernel's hybrid script: the script
then runs with numpy alone.  Scalars are numpy scalars of their TIR dtype (so integers wrap and
float32 stays float32) or plain Python ints for index arithmetic that the generator proved in range.

The helpers live in one private module per concern (:mod:`._numerics`, :mod:`._memory`,
:mod:`._lanes`, :mod:`._gpu`, :mod:`._sanitizers`, :mod:`._sort`); this package re-exports every one
of them, so ``vars(runtime)`` holds every helper name (the code generator reserves those names and
looks helpers up here).  The modules are private so that their names (``lanes``, ``sort``...) stay free
for kernels and their variables.  No module of the runtime imports TVM.
"""
from __future__ import annotations

import functools
import inspect
import math  # noqa: F401  (used inside helpers copied into scripts)

import numpy as np  # noqa: F401  (used inside helpers copied into scripts)

# The re-exports below are in the order the helpers appear in generated scripts (helper_closure sorts
# by it): the order of the former single-file runtime, so scripts stay byte-identical.  A new helper
# must be re-exported here (tests/test_runtime.py checks it); put it anywhere.
# isort: off
from ._lanes import parallel, vectorized, unrolled
from ._gpu import thread_binding, thread_lanes, barrier, _first_block, _barrier_threads
from ._race_log import _lane_ids, _lane_text, _thread_numbers, _warp_store_ids, _warp_numbers, _warp_bits, _distinct, _lanes_apart, _root_elements, _DeferredRead, _memory_root, _race_element, RaceLog
from ._sanitizers import _direct_access
from ._lanes import last_lane, last_lane_along
from ._sanitizers import (_lane_note, _unwritten_message, access, read_written, read_logged,
                           read_or_taint, mark_written, write_where, host_device_access)
from ._lanes import held_copy, hold_back, lanes_view, parallel_chunks
from ._gpu import (_lane_array, _threads_first, _fold_order, _fold, _allreduce_policy, thread_allreduce, thread_allreduce_values, warp_shuffle,
                   _shuffle_message, warp_activemask, sblock, atomic_add)
from ._numerics import (wrap, _check_divisor, truncdiv, truncmod, floordiv, floormod, shift_count, checked_arith,
                        packed_return, promoted_invert,
                        float_floordiv, float_floormod, _float_to_int32_or_64, _in_int_range, OutOfRangeConversions,
                        OUT_OF_RANGE_CONVERSIONS, _float_to_int, _float_to_int_native, _float_to_float, cast,
                        reinterpret)
from ._lanes import ramp, broadcast, shuffle
from ._numerics import select, minimum, maximum, minimum_ignoring_nan, maximum_ignoring_nan, ordered_ne
from ._memory import _as_dtype, alloc, view
from ._sort import _nan_policy, _sort_axis, _stable_order, argsort_nms, contrib_sort
from ._lanes import vector_lane_index
from ._memory import (strided_span, strided, strided_view, param_storage, flat_view, rows_view, storage_extent, _bounds_error, _in_bounds,
                      _all, _kept, _kept_rows, load, store)
from ._numerics import rsqrt, sigmoid, erf, exp10, _unary_in_dtype, clz, in_double, power_in_double, nan_through, popcount, _c_math, _c_name, libm, libm_float32
from ._numerics import _fixed_point_shift, q_multiply_shift, q_multiply_shift_per_axis
# isort: on

#: Which helpers each helper calls, so a script gets everything it needs (helpers of different
#: modules included: a script is one flat namespace).
HELPER_DEPENDENCIES: dict[str, tuple[str, ...]] = {
    "cast": ("_float_to_int", "_float_to_float"),
    "_float_to_int": ("_float_to_int_native", "_in_int_range"),
    "OutOfRangeConversions": ("_in_int_range",),
    "_float_to_int_native": ("_float_to_int32_or_64",),
    "truncdiv": ("_check_divisor",),
    "truncmod": ("_check_divisor",),
    "floordiv": ("_check_divisor",),
    "floormod": ("_check_divisor",),
    "minimum": ("select",),
    "maximum": ("select",),
    "minimum_ignoring_nan": ("select",),
    "maximum_ignoring_nan": ("select",),
    "load": ("_in_bounds", "_bounds_error", "_all"),
    "_bounds_error": ("_lane_note",),
    "thread_allreduce": ("_threads_first", "_fold", "_allreduce_policy"),
    "thread_allreduce_values": ("_threads_first", "_fold", "_allreduce_policy"),
    "_fold": ("_fold_order",),
    "libm": ("_c_math", "_c_name"),
    "power_in_double": ("libm",),
    "libm_float32": ("_c_math", "_c_name"),
    "_threads_first": ("_lane_array",),
    "RaceLog": ("_lane_text", "_thread_numbers", "_warp_store_ids", "_warp_bits", "_DeferredRead", "_distinct", "_lanes_apart", "_memory_root", "_root_elements",
                "_race_element"),
    "_DeferredRead": ("_lane_ids", "_root_elements"),
    "_warp_bits": ("_warp_numbers",),
    "_warp_numbers": ("_thread_numbers",),
    "_warp_store_ids": ("_thread_numbers",),
    "access": ("_lane_ids", "_direct_access", "_unwritten_message", "_lane_note"),
    "read_written": ("_unwritten_message", "_lane_note"),
    "read_logged": ("read_written",),
    "mark_written": ("RaceLog",),
    "write_where": ("RaceLog",),
    "_unwritten_message": ("RaceLog",),
    "warp_activemask": ("_lane_array",),
    "barrier": ("_lane_array", "_first_block", "_barrier_threads"),
    "_barrier_threads": ("_lane_note",),
    "checked_arith": ("_lane_note", "wrap"),
    "promoted_invert": ("_lane_note",),
    "warp_shuffle": ("_lane_array", "_shuffle_message"),
    "store": ("_in_bounds", "_bounds_error", "_all", "_kept", "_kept_rows"),
    "contrib_sort": ("_stable_order", "_nan_policy", "_sort_axis"),
    "argsort_nms": ("_stable_order", "_nan_policy", "_sort_axis"),
    "nan_through": ("in_double",),
    "view": ("_as_dtype",),
    "strided_view": ("_as_dtype",),
    "flat_view": ("_as_dtype",),
    "rows_view": ("_as_dtype",),
    "q_multiply_shift": ("_fixed_point_shift",),
    "q_multiply_shift_per_axis": ("_fixed_point_shift",),
}

#: Helpers that need ``import math`` in the script.
NEEDS_MATH = frozenset({"erf", "libm", "libm_float32", "power_in_double"})


def helper_closure(names) -> list[str]:
    """``names`` plus every helper they depend on, in the order this package re-exports them."""
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
    # inspect.getsource re-reads and re-tokenizes the helper's module on every call: once per helper.
    return inspect.getsource(globals()[name]).rstrip()
