"""A native run is refused before it starts when stage 0 cannot be emulated (so the inputs cannot be
checked for out-of-bounds addresses first) and the kernel addresses memory by its inputs' values: relax's
``vision.non_max_suppression`` calls ``tvm.contrib.sort.argsort_nms`` (refused by name) with a box
count taken from an input, and on the zoo's seeded inputs the native kernel read far outside its
buffers: the process died with SIGSEGV, no outcome reported."""
import numpy as np
import pytest
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import zoo
from tvm_hybrid_nb.errors import StageNotEmulatableError


@T.prim_func
def profiled_gather(A: T.Buffer((8,), "float32"), idx: T.Buffer((4,), "int32"), B: T.Buffer((4,), "float32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    T.evaluate(T.start_profile_intrinsic(3))
    for i in range(4):
        B[i] = A[idx[i]]
    T.evaluate(T.end_profile_intrinsic(3))


@T.prim_func
def profiled_copy(A: T.Buffer((8,), "float32"), idx: T.Buffer((4,), "int32"), B: T.Buffer((4,), "float32")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    T.evaluate(T.start_profile_intrinsic(3))
    for i in range(4):
        B[i] = A[i * 2] + T.Cast("float32", idx[i])
    T.evaluate(T.end_profile_intrinsic(3))


def _inputs(at):
    return np.arange(8, dtype=np.float32), np.array(at, np.int32), np.zeros(4, np.float32)


def test_an_index_read_from_an_input_is_not_run_unchecked():
    hm = thn.build(profiled_gather, target="llvm")
    assert not hm.stages[0].emulatable and "profile" in hm.stages[0].reason
    with pytest.raises(StageNotEmulatableError, match=r"native run refused: .*index read from idx"):
        hm.run_native(*_inputs([0, 1, 10**8, 3]))  # natively: a read 400 MB past A


def test_addresses_from_sizes_alone_still_run_natively():
    hm = thn.build(profiled_copy, target="llvm")
    assert not hm.stages[0].emulatable
    a, idx, b = _inputs([5, -1, 7, 2])
    hm.run_native(a, idx, b)
    np.testing.assert_array_equal(b, a[::2] + idx.astype(np.float32))


def test_the_zoo_reports_a_refusal_not_a_dead_process():
    outcome = zoo.check_kernel("t.profiled_gather", profiled_gather, "none", check=True)
    assert outcome.outcome == "refused" and "index read from idx" in outcome.reason, outcome
