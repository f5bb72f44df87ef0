"""Under ``check=True`` every access of a GPU loop body to memory of one kind keeps its race record
the same way (``log``, ``lanes``, ``statement``, ``region``, ``grid``, the thread naming ``at``):
those keywords are one ``record`` dict assigned at the start of the body, not spelled out in each
call.  A dlight GPU stage of a CTC forward pass reads thousands of elements in one statement; spelled
out, they were half of its script and of its code generation time.  The races and the thread naming
they carry still work."""
import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError
from tvm_hybrid_nb.zoo import cuda_target

TERMS = 16


def _many_reads(race: bool):
    """``b[bx * 32 + tx] = a[...] + a[... + 1] + ... (TERMS reads)``, on 2 blocks of 32 threads;
    with ``race`` the threads of a block pair up on one element of ``b``."""
    @T.prim_func
    def one(a: T.Buffer((64 + TERMS,), "float32"), b: T.Buffer((64,), "float32")):
        T.func_attr({"tirx.is_scheduled": True, "global_symbol": "main"})
        for bx in T.thread_binding(2, thread="blockIdx.x"):
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                b[bx * 32 + tx] = a[bx * 32 + tx]

    store = one.body.body.body
    tx_loop = one.body.body
    a_buf, b_buf = store.value.source, store.buffer
    (index,) = store.value.indices
    value = store.value
    for k in range(1, TERMS):
        value = value + tvm.tirx.BufferLoad(a_buf, [index + k])
    target = [index - tx_loop.loop_var % 2] if race else store.indices
    body = tvm.tirx.For(tx_loop.loop_var, tx_loop.min, tx_loop.extent, tx_loop.kind,
                        tvm.tirx.BufferStore(b_buf, value, target), tx_loop.thread_binding)
    outer = one.body
    return one.with_body(tvm.tirx.For(outer.loop_var, outer.min, outer.extent, outer.kind, body, outer.thread_binding))


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_race_record_keywords_are_assigned_once_per_loop_body(mode):
    hm = thn.build(_many_reads(race=False), target=cuda_target())
    script = hm.stage(0).kernel(mode, check=True).source
    main = script[script.index("def main"):]
    assert main.count("access(a, ") == TERMS
    assert main.count("lanes=") == 1 and main.count("**record") == TERMS + 1  # the reads and the store
    a = np.linspace(-1, 1, 64 + TERMS).astype(np.float32)
    b = np.zeros(64, np.float32)
    hm.emulate(a, b, mode=mode, check=True)
    want = np.zeros(64, np.float32)
    for k in range(TERMS):  # left to right, in float32, as the IR adds
        want = want + a[k:k + 64] if k else a[:64].copy()
    np.testing.assert_array_equal(b, want)


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_a_race_under_shared_record_keywords_names_both_threads(mode):
    hm = thn.build(_many_reads(race=True), target=cuda_target())
    a = np.linspace(-1, 1, 64 + TERMS).astype(np.float32)
    with pytest.raises(EmulationError, match=r"data race on b(_\d+)?\[0\]: lanes \(threadIdx.x=0\) and "
                                             r"\(threadIdx.x=1\) both access it"):
        hm.emulate(a, np.zeros(64, np.float32), mode=mode, check=True)


def _nested_int64_arithmetic(depth: int):
    """``A[0] = ((n * 3 * 3 + 1) * 3 + 2) ...`` (``depth`` levels) over the int64 scalar ``n``: index
    arithmetic as a symbolic pooled extent nests it (``(h - 1) // 2 * 6 + 6`` inside ``min``/``max``)."""
    @T.prim_func
    def base(A: T.Buffer((1,), "int64"), n: T.int64):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        A[0] = n

    store = base.body
    value = base.params[1]
    for k in range(depth):
        value = value * tvm.tirx.const(3, "int64") + tvm.tirx.const(k, "int64")
    return base.with_body(tvm.tirx.BufferStore(store.buffer, value, store.indices))


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_overflow_checks_of_nested_integer_arithmetic_grow_with_it_not_exponentially(mode):
    """Each checked operation is ``exact if lo <= (exact := a op b) <= hi else checked_arith(a, b, ...)``:
    the helper spelled its operands out again, so each level doubled the script (a dlight.cpu group norm
    over a symbolic image: 169 MB, 147 s to generate, 81 s to compile, the zoo killed for memory).
    The operands are held in names where they are evaluated."""
    depth = 16
    hm = thn.build(_nested_int64_arithmetic(depth), target="llvm")
    script = hm.stage(0).kernel(mode, check=True).source
    main = script[script.index("def main"):]
    assert main.count("checked_arith(") == 2 * depth - 1 and len(main) < 40 * depth * 80, len(main)  # "+ 0" folds
    want = 5
    for k in range(depth):
        want = want * 3 + k
    a = np.zeros(1, np.int64)
    hm.emulate(a, 5, mode=mode, check=True)
    assert int(a[0]) == want
    with pytest.raises(EmulationError, match=r"overflow"):
        hm.emulate(np.zeros(1, np.int64), 2 ** 40, mode=mode, check=True)
