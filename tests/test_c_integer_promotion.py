"""C targets compute narrow integer shifts and divisions in the promoted ``int`` (15th probe): a
uint8 shifted by 8..31 and int8 ``-128 / -1`` are defined in CUDA C, undefined or a trap in TVM's
llvm code.  And a Select's other arm, which the native code computes too, reads the real memory
under ``check=True`` (it read 0, so a divisor there was a false division by zero)."""
import re

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.errors import EmulationError

CUDA = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})


@T.prim_func
def shift_gpu(a: T.Buffer((8,), "uint8"), s: T.Buffer((8,), "uint8"), o: T.Buffer((8,), "uint8")):
    for i in T.thread_binding(8, thread="threadIdx.x"):
        o[i] = a[i] >> s[i]


@T.prim_func
def shift_cpu(a: T.Buffer((8,), "uint8"), s: T.Buffer((8,), "uint8"), o: T.Buffer((8,), "uint8")):
    for i in range(8):
        o[i] = a[i] >> s[i]


@T.prim_func
def div_gpu(x: T.Buffer((4,), "int8"), o: T.Buffer((4,), "int8"), p: T.Buffer((4,), "int8")):
    for i in T.thread_binding(4, thread="threadIdx.x"):
        o[i] = T.floordiv(x[i], T.int8(-1))
        p[i] = T.truncdiv(x[i], T.int8(-1))


@T.prim_func
def div_cpu(x: T.Buffer((4,), "int8"), o: T.Buffer((4,), "int8"), p: T.Buffer((4,), "int8")):
    for i in range(4):
        o[i] = T.floordiv(x[i], T.int8(-1))
        p[i] = T.truncdiv(x[i], T.int8(-1))


@T.prim_func
def select_gpu(a: T.Buffer((4,), "int64"), d: T.Buffer((4,), "int64"), o: T.Buffer((4,), "int64")):
    for i in T.thread_binding(4, thread="threadIdx.x"):
        o[i] = T.Select(d[i] < T.int64(0), a[i] // (d[i] * T.int64(-1)), a[i] // d[i])


MODES = [(mode, check) for mode in ("fast", "exact") for check in (False, True)]


@pytest.mark.parametrize("mode,check", MODES)
def test_a_narrow_shift_past_its_width_is_defined_in_cuda_c(mode, check):
    a = np.array([255, 128, 7, 200, 1, 64, 33, 99], "uint8")
    s = np.array([8, 9, 1, 12, 0, 31, 8, 3], "uint8")
    want = ((a.astype(np.int64) >> s.astype(np.int64)) & 0xFF).astype("uint8")  # C: promote, shift, truncate
    out = np.zeros(8, "uint8")
    thn.build(shift_gpu, target=CUDA).emulate(a, s, out, mode=mode, check=check)
    np.testing.assert_array_equal(out, want)


def test_a_narrow_shift_past_its_width_stays_undefined_for_llvm():
    a = np.array([255] * 8, "uint8")
    s = np.array([8, 0, 0, 0, 0, 0, 0, 0], "uint8")
    with pytest.raises(EmulationError, match="shift by 8 of a 8-bit integer"):
        thn.build(shift_cpu).emulate(a, s, np.zeros(8, "uint8"), check=True)


@pytest.mark.parametrize("mode,check", MODES)
def test_int8_min_over_minus_one_wraps_in_cuda_c(mode, check):
    x = np.array([-128, 127, -1, 5], "int8")
    want = (-(x.astype(np.int32))).astype(np.int8)  # C: promote, divide, convert back (-128 stays -128)
    o, p = np.zeros(4, "int8"), np.zeros(4, "int8")
    thn.build(div_gpu, target=CUDA).emulate(x, o, p, mode=mode, check=check)
    np.testing.assert_array_equal(o, want)
    np.testing.assert_array_equal(p, want)


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_int8_min_over_minus_one_still_traps_for_llvm(mode):
    # TVM's llvm code divides with `sdiv i8`: x86 raises SIGFPE on the native run.
    x = np.array([-128, 127, -1, 5], "int8")
    with pytest.raises(EmulationError, match="-128 / -1 does not fit int8"):
        thn.build(div_cpu).emulate(x, np.zeros(4, "int8"), np.zeros(4, "int8"), mode=mode)


@pytest.mark.parametrize("mode,check", MODES)
def test_a_selects_other_arm_divides_by_the_real_memory(mode, check):
    # relax's dynamic strided_slice shape function: Select(stride < 0, n // -stride, n // stride).
    a = np.array([7, -9, 100, -5], "int64")
    d = np.array([3, -4, -7, 2], "int64")  # no zero
    out = np.zeros(4, "int64")
    thn.build(select_gpu, target=CUDA).emulate(a, d, out, mode=mode, check=check)
    np.testing.assert_array_equal(out, np.where(d < 0, a // -d, a // d))
    d[1] = 0  # a zero divisor in either arm is a real division by zero: both arms are computed
    with pytest.raises(EmulationError, match="division by zero"):
        thn.build(select_gpu, target=CUDA).emulate(a, d, out, mode=mode, check=check)


@T.prim_func
def promoted_gpu(a: T.Buffer((8,), "uint8"), b: T.Buffer((8,), "uint8"), o: T.Buffer((8,), "int32"),
                 q: T.Buffer((8,), "uint8"), s: T.Buffer((8,), "uint8")):
    for i in T.thread_binding(8, thread="threadIdx.x"):
        o[i] = T.Cast("int32", a[i] + b[i])          # CUDA: ((int)(a + b)), no wrap in between
        q[i] = (a[i] + b[i]) >> T.uint8(1)            # CUDA: ((a + b) >> 1) in int
        # stored (through an if_then_else's arm): C's truncation equals the TIR's wrap
        s[i] = T.if_then_else(a[i] > T.uint8(0), (a[i] + b[i]) * T.uint8(3) - a[i], b[i])


def _promoted_args(a, b):
    return [a, b, np.zeros(8, "int32"), np.zeros(8, "uint8"), np.zeros(8, "uint8")]


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_narrow_arithmetic_read_unwrapped_by_cuda_c_is_reported_under_check(mode):
    # TVM's CUDA code computes uint8 `a + b` in int (C's integer promotion) and only a store
    # truncates it: where a wider cast or a right shift reads an overflowing sum, the CUDA kernel
    # and its TIR differ (300 against 44).  The TIR's wrap is emulated; check=True says where.
    hm = thn.build(promoted_gpu, target=CUDA)
    a = np.array([200, 1, 2, 3, 4, 5, 6, 7], "uint8")
    b = np.array([100, 1, 1, 1, 1, 1, 1, 1], "uint8")
    args = _promoted_args(a, b)
    hm.emulate(*args, mode=mode)
    wrapped = (a + b).astype(np.uint8)  # numpy wraps, as the TIR does
    np.testing.assert_array_equal(args[2], wrapped.astype(np.int32))
    np.testing.assert_array_equal(args[3], wrapped >> 1)
    with pytest.raises(EmulationError, match=r"uint8 overflow: 200 \+ 100 = 300.*C's integer promotion.*"
                                             r"uses 300 where the TIR wraps it to 44"):
        hm.emulate(*_promoted_args(a, b), mode=mode, check=True)
    # No overflow read unwrapped: clean, and the stored expression may overflow freely.
    small = np.array([100, 1, 2, 3, 4, 5, 6, 7], "uint8")
    args = _promoted_args(small, b)
    hm.emulate(*args, mode=mode, check=True)
    np.testing.assert_array_equal(args[4], ((small.astype(np.int64) + b) * 3 - small).astype(np.uint8))


@T.prim_func
def promoted_cpu(a: T.Buffer((8,), "uint8"), b: T.Buffer((8,), "uint8"), o: T.Buffer((8,), "int32")):
    for i in range(8):
        o[i] = T.Cast("int32", a[i] + b[i])


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_narrow_arithmetic_read_unwrapped_is_no_alarm_for_llvm(mode):
    # TVM's llvm code computes uint8 arithmetic in i8: the wrap is the kernel's own.
    a = np.array([200, 1, 2, 3, 4, 5, 6, 7], "uint8")
    o = np.zeros(8, "int32")
    thn.build(promoted_cpu).emulate(a, a.copy(), o, mode=mode, check=True)
    np.testing.assert_array_equal(o, (a + a).astype(np.int32))


@T.prim_func
def nibble_swap_gpu(x: T.Buffer((8,), "uint8"), o: T.Buffer((8,), "uint8"), p: T.Buffer((8,), "uint8"),
                    w: T.Buffer((8,), "int32")):
    for i in T.thread_binding(8, thread="threadIdx.x"):
        o[i] = T.bitwise_or(T.shift_left(x[i], T.uint8(4)), T.shift_right(x[i], T.uint8(4)))
        p[i] = (x[i] << T.uint8(4)) | (x[i] >> T.uint8(4))
        w[i] = T.Cast("int32", T.shift_left(x[i], T.uint8(4)))  # CUDA: (int)(x << 4), unwrapped


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_bitwise_operations_pass_a_stores_truncation_through(mode):
    # relax's uint8 nibble swap `(x << 4) | (x >> 4)`: C computes it in int, the store truncates, and
    # truncation commutes with `|`: the CUDA kernel and its TIR agree, no alarm (u8_bit_tricks).
    x = np.array([0x12, 0xF0, 0xAB, 0, 1, 0x80, 0x7F, 0xFF], "uint8")
    want = ((x << 4) | (x >> 4)).astype(np.uint8)
    o, p, w = np.zeros(8, "uint8"), np.zeros(8, "uint8"), np.zeros(8, "int32")
    hm = thn.build(nibble_swap_gpu, target=CUDA)
    hm.emulate(x, o, p, w, mode=mode)
    np.testing.assert_array_equal(o, want)
    np.testing.assert_array_equal(p, want)
    with pytest.raises(EmulationError, match=r"uint8 overflow: 18 << 4 = 288.*wraps it to 32"):
        hm.emulate(x, o, p, w, mode=mode, check=True)  # but the widening cast reads x << 4 unwrapped
    small = np.array([0x01, 0x0F, 0x0A, 0, 1, 0x08, 0x07, 0x0F], "uint8")
    hm.emulate(small, o, p, w, mode=mode, check=True)
    np.testing.assert_array_equal(o, ((small << 4) | (small >> 4)).astype(np.uint8))
    np.testing.assert_array_equal(w, (small.astype(np.int32) << 4))


@T.prim_func
def negated_not_gpu(x: T.Buffer((8,), "int8"), acc: T.Buffer((8,), "int8")):
    for i in T.thread_binding(8, thread="threadIdx.x"):
        acc[i] = acc[i] + ~(x[i] * T.int8(-1)) * T.int8(-1)  # -(~(-x)) as relax legalizes it


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_bitwise_not_passes_a_stores_truncation_through(mode):
    # A random integer chain (q14: negative, bitwise_not, negative, summed): C computes
    # -128 * -1 = 128 in int, but `~` and `*` and `+` agree modulo 256, and the int8 store truncates:
    # the CUDA kernel and its TIR agree.  `~x` is its own node (prim.BitwiseNot) in TVM 0.27 and the
    # product under it was reported as read unwrapped.
    x = np.array([-128, 127, -1, 0, 5, -7, 100, -100], "int8")
    acc = np.array([1, -128, 127, 0, 3, 50, -50, 9], "int8")
    want = (acc.astype(np.int64) - x.astype(np.int64) + 1).astype(np.int8)  # -(~(-x)) == 1 - x
    out = acc.copy()
    thn.build(negated_not_gpu, target=CUDA).emulate(x, out, mode=mode, check=True)
    np.testing.assert_array_equal(out, want)


def test_a_checked_operation_keeps_its_dtype_against_a_constant():
    # numpy promotes an int32 array and a Python constant given as a 0-d array to int64; the checked
    # operation's result is the TIR's dtype, as the unchecked operator's is.
    from tvm_hybrid_nb import runtime

    out = runtime.checked_arith(np.array([1, -2], np.int32), 100, "*", "int32")
    assert out.dtype == np.int32 and out.tolist() == [100, -200]
    out = runtime.checked_arith(np.array([1, 2], np.uint8), 100, "+", "uint8", promoted=True)
    assert out.dtype == np.uint8 and out.tolist() == [101, 102]
    with pytest.raises(ValueError, match=r"uint8 overflow: 200 \+ 100 = 300.*wraps it to 44"):
        runtime.checked_arith(np.array([200, 2], np.uint8), 100, "+", "uint8", promoted=True)
    with pytest.raises(ValueError, match=r"int16 overflow: 300 << 8 = 76800"):
        runtime.checked_arith(np.array([300], np.int16), 8, "<<", "int16", promoted=True)


@T.prim_func(s_tir=True)
def abs_difference(a: T.Buffer((T.int64(4),), "int8"), b: T.Buffer((T.int64(4),), "int8"),
                   c: T.Buffer((T.int64(4),), "int8")):
    T.func_attr({"tirx.noalias": True})
    d = T.sblock_alloc_buffer((T.int64(4),), "int8")
    for i in range(T.int64(4)):
        with T.sblock("sub"):
            v = T.axis.spatial(T.int64(4), i)
            d[v] = a[v] - b[v]
    for i in range(T.int64(4)):
        with T.sblock("abs"):
            v = T.axis.spatial(T.int64(4), i)
            c[v] = T.Select(T.int8(0) <= d[v], d[v], T.int8(0) - d[v])


def test_zoo_names_tvm_cuda_code_that_keeps_a_narrow_difference_in_int():
    """relax's int8 ``abs(a - b)`` fused: dlight inlines ``d``, and TVM's CUDA code compares
    ``a - b`` computed in int (``(signed char)0 <= (a_ptr[i] - b_ptr[i])``), where the TIR and TVM's
    llvm build wrap it: a TVM finding, its CUDA source line the evidence (17th probe)."""
    from tvm_hybrid_nb import zoo

    outcome = zoo.check_kernel("promotion.fused_subtract_tir_abs", abs_difference, "dlight-gpu", check=True)
    assert outcome.outcome == "crash" and "read before any store truncates it" in outcome.reason
    evidence = zoo.tvm_finding(outcome)
    assert evidence is not None and "TVM's CUDA code computes int8 `-` in C's int" in evidence
    assert "if ((signed char)0 <= (a_ptr[" in evidence and " - b_ptr[" in evidence
    # The same kernel on a CPU: TVM's llvm build wraps as the TIR does, and the emulation agrees.
    a = np.array([-33, 5, 100, -100], np.int8)
    b = np.array([112, 3, -100, 100], np.int8)
    c = np.zeros(4, np.int8)
    hm = thn.build(abs_difference)
    hm.emulate(a, b, c, check=True)
    native = np.zeros(4, np.int8)
    hm.run_native(a, b, native)
    np.testing.assert_array_equal(c, native)
    np.testing.assert_array_equal(c, np.abs((a.astype(np.int16) - b).astype(np.int8)))


@T.prim_func(s_tir=True)
def int8_row_sum(a: T.Buffer((3, 64), "int8"), s: T.Buffer((3,), "int8")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    for i, k in T.grid(3, 64):
        with T.sblock("s"):
            vi, vk = T.axis.remap("SR", [i, k])
            with T.init():
                s[vi] = T.int8(0)
            s[vi] = s[vi] + a[vi, vk]


def test_a_narrow_cross_thread_sum_wraps_as_tvms_cuda_code_stores_each_partial():
    """relax's int8 sum on dlight's GPU rules: ``tvm_thread_allreduce`` of an int8 ``a + b``.
    LowerThreadAllreduce stores every partial sum into a ``signed char`` (``signed char w_16_0 =
    ...``), so the GPU wraps each as the TIR does: the combiner's overflow is no C-promotion alarm
    (18th probe: a false alarm on the seeded inputs)."""
    from tvm_hybrid_nb import zoo

    for check in (False, True):
        outcome = zoo.check_kernel("promotion.int8_sum", int8_row_sum, "dlight-gpu", check=check, reference=int8_row_sum)
        assert outcome.outcome == "ok", (check, outcome.stage, outcome.reason)
    target, mod = zoo.schedule(int8_row_sum, "dlight-gpu")
    source = "\n".join(m.inspect_source() for m in tvm.tirx.build(mod, target=target).imports)
    assert "signed char w_16_0 = " in source  # each partial in the narrow type
    hm = thn.build(mod, target=target)
    lowered = next(s.index for s in hm.stages if s.name == "s_tir.LowerCrossThreadReduction")
    a = np.random.default_rng(0).integers(60, 128, (3, 64)).astype(np.int8)  # partial sums overflow int8
    wrapped = (a.astype(np.int64).sum(axis=1) + 128) % 256 - 128
    for mode in ("fast", "exact"):
        out = hm.emulate(a, np.zeros(3, np.int8), stage=lowered, mode=mode, check=True)
        np.testing.assert_array_equal(out, wrapped.astype(np.int8))


@T.prim_func
def promoted_casts_gpu(x: T.Buffer((8,), "float32"), y: T.Buffer((8,), "uint8"), o: T.Buffer((8,), "int16")):
    for i in T.thread_binding(8, thread="threadIdx.x"):
        # relax's round trip through float32, then a widening cast (random integer chain q53)
        o[i] = T.Cast("int16", T.Cast("uint8", T.round(x[i] * T.float32(0.5))) + y[i])


@T.prim_func
def stored_casts_gpu(x: T.Buffer((8,), "float32"), y: T.Buffer((8,), "uint8"), o: T.Buffer((8,), "uint8")):
    for i in T.thread_binding(8, thread="threadIdx.x"):
        o[i] = T.Cast("uint8", T.round(x[i] * T.float32(0.5))) + y[i]  # C's truncation is the TIR's wrap


@T.prim_func
def promoted_shift_gpu(x: T.Buffer((8,), "int16"), y: T.Buffer((8,), "int16"), o: T.Buffer((8,), "int32")):
    for i in T.thread_binding(8, thread="threadIdx.x"):
        # a right-shifted uint8 (C types it int) minus a uint8, widened (random integer chain q54)
        o[i] = T.Cast("int32", (T.Cast("uint8", x[i] << T.int16(2)) >> T.uint8(3)) - T.Cast("uint8", y[i]))


@T.prim_func
def promoted_quotient_gpu(x: T.Buffer((8,), "uint8"), y: T.Buffer((8,), "uint8"), o: T.Buffer((8,), "int32")):
    for i in T.thread_binding(8, thread="threadIdx.x"):
        # a uint8 quotient (C types it int) minus a uint8, widened (random integer chain q74)
        o[i] = T.Cast("int32", T.truncdiv(x[i], (y[i] & T.uint8(7)) + T.uint8(2)) - y[i])


def test_the_zoo_quotes_tvms_cuda_source_where_a_sum_of_casts_is_read_unwrapped():
    # The zoo tags such an alarm as TVM's only with TVM's CUDA source showing it: an operand that
    # is an expression cast to the narrow type (`((uchar)rintf(...))`) was not recognised.
    from tvm_hybrid_nb.zoo_undefined import c_promotion_evidence

    x = np.array([96.0, 0, 0, 0, 0, 0, 0, 0], "float32")
    y = np.array([219, 0, 0, 0, 0, 0, 0, 0], "uint8")
    with pytest.raises(EmulationError, match=r"uint8 overflow: 48 \+ 219 = 267") as alarm:
        thn.build(promoted_casts_gpu, target=CUDA).emulate(x, y, np.zeros(8, "int16"), check=True)
    evidence = c_promotion_evidence(tvm.IRModule({"main": promoted_casts_gpu}), CUDA, str(alarm.value))
    assert evidence is not None and "computes uint8 `+` in C's int" in evidence, evidence
    assert re.search(r"\(\(short\)\(\(\(uchar\)nearbyintf\(.*\) \+ y_ptr\[", evidence), evidence
    # The same sum stored into a uint8: no evidence (and no alarm).
    out = np.zeros(8, "uint8")
    thn.build(stored_casts_gpu, target=CUDA).emulate(x, y, out, check=True)
    assert out[0] == (48 + 219) % 256
    assert c_promotion_evidence(tvm.IRModule({"main": stored_casts_gpu}), CUDA, str(alarm.value)) is None
    # A right shift of a uint8 is one in C too (typed int, in the uint8 range): 1 - 30 is -29 there.
    with pytest.raises(EmulationError, match=r"uint8 overflow: 1 - 30 = -29") as alarm:
        thn.build(promoted_shift_gpu, target=CUDA).emulate(
            np.array([2] + [0] * 7, "int16"), np.array([30] + [0] * 7, "int16"), np.zeros(8, "int32"), check=True)
    evidence = c_promotion_evidence(tvm.IRModule({"main": promoted_shift_gpu}), CUDA, str(alarm.value))
    assert evidence is not None and "computes uint8 `-` in C's int" in evidence and ">> (uchar)3)" in evidence
    # So is a quotient of a uint8: 14 / 9 - 1 = 0 fits, 14 / 2 - 8 is -1 in C.
    with pytest.raises(EmulationError, match=r"uint8 overflow: 7 - 8 = -1") as alarm:
        thn.build(promoted_quotient_gpu, target=CUDA).emulate(
            np.array([14] + [0] * 7, "uint8"), np.array([8] + [1] * 7, "uint8"), np.zeros(8, "int32"), check=True)
    evidence = c_promotion_evidence(tvm.IRModule({"main": promoted_quotient_gpu}), CUDA, str(alarm.value))
    assert evidence is not None and "computes uint8 `-` in C's int" in evidence and "(x_ptr[" in evidence


@T.prim_func
def inverted_gpu(a: T.Buffer((8,), "uint8"), o: T.Buffer((8,), "int32"), q: T.Buffer((8,), "uint8"),
                 s: T.Buffer((8,), "uint8")):
    for i in T.thread_binding(8, thread="threadIdx.x"):
        o[i] = T.Cast("int32", ~a[i])                                  # CUDA: ((int)(~a[i])): negative
        q[i] = T.Select(~a[i] > T.uint8(200), T.uint8(1), T.uint8(0))  # CUDA compares the int: never true
        s[i] = ~a[i] ^ T.uint8(15)                                     # stored: C's truncation is the TIR's


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_the_complement_of_an_unsigned_narrow_value_read_by_c_is_reported(mode):
    # TVM's CUDA code prints uint8 ~a as C's ~, which promotes a to int: ~0 is -1 there, 255 in the
    # TIR (and TVM's llvm build), in every lane, whatever the input.  The TIR's value is emulated;
    # check=True says that the GPU kernel differs, and TVM's CUDA source is the zoo's evidence.
    from tvm_hybrid_nb.zoo_undefined import c_promotion_evidence

    a = np.array([0, 1, 2, 50, 55, 100, 254, 255], "uint8")
    args = [a, np.zeros(8, "int32"), np.zeros(8, "uint8"), np.zeros(8, "uint8")]
    hm = thn.build(inverted_gpu, target=CUDA)
    hm.emulate(*args, mode=mode)
    np.testing.assert_array_equal(args[1], 255 - a.astype(np.int32))
    np.testing.assert_array_equal(args[2], (255 - a.astype(np.int32) > 200).astype(np.uint8))
    np.testing.assert_array_equal(args[3], (~a) ^ 15)
    with pytest.raises(EmulationError, match=r"uint8 ~0 = 255 in the TIR.*~0 is -1.*at \(threadIdx.x=0\)") as alarm:
        hm.emulate(*args, mode=mode, check=True)
    evidence = c_promotion_evidence(tvm.IRModule({"main": inverted_gpu}), CUDA, str(alarm.value))
    assert evidence is not None and "computes uint8 `~` in C's int" in evidence and "((int)(~a_ptr[" in evidence


@T.prim_func
def inverted_stored_gpu(a: T.Buffer((8,), "uint8"), s: T.Buffer((8,), "uint8")):
    for i in T.thread_binding(8, thread="threadIdx.x"):
        s[i] = (~a[i] + T.uint8(3)) | a[i]


@pytest.mark.parametrize("mode", ["fast", "exact"])
def test_a_stored_complement_is_no_alarm(mode):
    a = np.arange(0, 256, 32, dtype="uint8")
    s = np.zeros(8, "uint8")
    thn.build(inverted_stored_gpu, target=CUDA).emulate(a, s, mode=mode, check=True)
    np.testing.assert_array_equal(s, ((~a).astype(np.uint8) + np.uint8(3)) | a)


def test_metal_source_is_evidence_too():
    # Metal's C++ promotes as C does; TVM's Metal source spells int8 `char`.
    from tvm_hybrid_nb.zoo_undefined import c_promotion_evidence

    metal = tvm.target.Target("metal")
    a = np.array([0, 1, 2, 50, 55, 100, 254, 255], "uint8")
    args = [a, np.zeros(8, "int32"), np.zeros(8, "uint8"), np.zeros(8, "uint8")]
    with pytest.raises(EmulationError, match=r"uint8 ~0 = 255 in the TIR") as alarm:
        thn.build(inverted_gpu, target=metal).emulate(*args, check=True)
    evidence = c_promotion_evidence(tvm.IRModule({"main": inverted_gpu}), metal, str(alarm.value))
    assert evidence is not None and evidence.startswith("TVM's Metal code computes uint8 `~`"), evidence
    x = np.array([-128, 127, -1, 5, 0, 0, 0, 0], "int8")
    with pytest.raises(EmulationError, match=r"int8 overflow: -128 \* -1 = 128") as alarm:
        thn.build(widened_negation_gpu, target=metal).emulate(x, np.zeros(8, "int32"), check=True)
    evidence = c_promotion_evidence(tvm.IRModule({"main": widened_negation_gpu}), metal, str(alarm.value))
    assert evidence is not None and "computes int8 `*` in C's int" in evidence, evidence


@T.prim_func
def widened_negation_gpu(x: T.Buffer((8,), "int8"), o: T.Buffer((8,), "int32")):
    for i in T.thread_binding(8, thread="threadIdx.x"):
        o[i] = T.Cast("int32", x[i] * T.int8(-1))


@T.prim_func
def abs_negated_gpu(x: T.Buffer((8,), "int8"), o: T.Buffer((8,), "int32")):
    for i in T.thread_binding(8, thread="threadIdx.x"):
        # topi's abs then a negation, widened (random integer chain q326)
        o[i] = T.Cast("int32", T.Select(T.int8(0) <= x[i], x[i], T.int8(0) - x[i]) * T.int8(-1))


@T.prim_func
def min_product_gpu(x: T.Buffer((8,), "uint8"), y: T.Buffer((8,), "uint8"), o: T.Buffer((8,), "int32")):
    for i in T.thread_binding(8, thread="threadIdx.x"):
        o[i] = T.Cast("int32", T.min(x[i], y[i]) * y[i])  # random integer chain q307


def test_a_select_that_loads_is_an_if_then_else_in_tvms_c_code():
    # TVM's RewriteUnsafeSelect makes a Select whose arm loads an if_then_else, which its C printer
    # stores into a `signed char condval`: 0 - -128 is truncated there; the product after it is not.
    from tvm_hybrid_nb.zoo_undefined import c_promotion_evidence

    x = np.array([-128, 5, -3, 0, 0, 0, 0, 0], "int8")
    with pytest.raises(EmulationError, match=r"int8 overflow: -128 \* -1 = 128") as alarm:
        thn.build(abs_negated_gpu, target=CUDA).emulate(x, np.zeros(8, "int32"), check=True)
    evidence = c_promotion_evidence(tvm.IRModule({"main": abs_negated_gpu}), CUDA, str(alarm.value))
    assert evidence is not None and "(condval * (signed char)-1)" in evidence, evidence
    # A min of narrow values is a narrow operand in the CUDA source.
    with pytest.raises(EmulationError, match=r"uint8 overflow: 95 \* 169 = 16055") as alarm:
        thn.build(min_product_gpu, target=CUDA).emulate(
            np.array([95] + [0] * 7, "uint8"), np.array([169] + [0] * 7, "uint8"), np.zeros(8, "int32"), check=True)
    evidence = c_promotion_evidence(tvm.IRModule({"main": min_product_gpu}), CUDA, str(alarm.value))
    assert evidence is not None and "(min(x_ptr[" in evidence, evidence
