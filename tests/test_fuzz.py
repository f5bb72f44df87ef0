"""The schedule fuzzer: a fixed-seed batch of random schedules must emulate like the native build.

The batch (``BATCH`` cases from seed 0) builds each random compute × schedule, emulates stage 0 and
every stage that changed the IR in exact and fast mode, requires the two to be bit-identical and
both to match the native kernel within the comparison tolerances (integers exactly).
"""
from __future__ import annotations

import numpy as np
import pytest

from tvm_hybrid_nb import fuzz
from tvm_hybrid_nb.fuzz import KINDS, TVM_FINDINGS, check_case, random_case, reduce_case, run_fuzz
from tvm_hybrid_nb.module import HybridModule

BATCH = 120
#: The only refusals (UnsupportedConstructError / InsufficientMemoryError) the batch may meet.
KNOWN_REFUSALS = {"buffer shape expression", "buffer larger than the machine's memory (InsufficientMemoryError)"}
PRIMITIVES = {"split", "reorder", "fuse", "parallel", "vectorize", "unroll", "cache_read", "cache_write",
              "compute_at", "reverse_compute_at", "compute_inline", "decompose_reduction", "rfactor",
              "transform_layout"}


@pytest.fixture(scope="module")
def report():
    return run_fuzz(BATCH, seed=0)


def test_fixed_seed_batch_emulates_like_native(report):
    assert report.cases == BATCH
    assert report.ok, report.summary()


def test_batch_is_a_real_search(report):
    assert set(report.by_kind) == set(KINDS)
    assert PRIMITIVES <= set(report.by_primitive), report.by_primitive
    assert report.steps >= 2 * BATCH
    assert report.stage_runs >= 10 * BATCH  # stage 0 plus the changed stages, two modes each
    assert report.tvm_rejected < BATCH // 5
    assert set(report.unsupported) <= KNOWN_REFUSALS, report.summary()
    for reduced, _original in report.tvm_findings:
        assert reduced.category in TVM_FINDINGS


def test_case_generation_is_deterministic():
    first, again = random_case(17), random_case(17)
    assert first == again
    assert check_case(first).stages_emulated == check_case(again).stages_emulated


def test_an_emulator_bug_is_found_and_reduced(monkeypatch):
    """Inject a fast-mode bug: the fuzzer must report it and reduce the schedule to nothing."""
    original = HybridModule.emulate

    def broken(self, *arrays, stage=0, mode="exact", **kw):
        out = original(self, *arrays, stage=stage, mode=mode, **kw)
        if mode == "fast":
            for arr, spec in zip(arrays, self.params):
                if spec.is_output:
                    arr.reshape(-1)[0] += 1
        return out

    monkeypatch.setattr(HybridModule, "emulate", broken)
    case = next(c for c in map(random_case, range(40, 80)) if len(c.steps) >= 3)
    found = check_case(case)
    assert not found.ok and found.category == "fast_exact_differ", str(found)
    reduced_case, reduced = reduce_case(found.case, found)
    assert reduced.category == "fast_exact_differ"
    assert reduced_case.steps == []
    assert "check_case(FuzzCase(" in reduced_case.reproducer()


def test_a_native_mismatch_is_reported_with_a_reproducer(monkeypatch):
    original = HybridModule.run_native

    def off_by_one(self, *arrays):
        out = original(self, *arrays)
        for arr, spec in zip(arrays, self.params):
            if spec.is_output:
                arr.reshape(-1)[-1] += 1
        return out

    monkeypatch.setattr(HybridModule, "run_native", off_by_one)
    rep = run_fuzz(2, seed=3)
    assert not rep.ok and len(rep.failures) == 2
    text = rep.summary()
    assert "FAILURE" in text and "native_mismatch" in text and "reproducer" in text


def test_command_line_exit_codes(capsys, monkeypatch, tmp_path):
    assert fuzz.main(["--n", "3", "--seed", "5", "--stages", "all"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("3 schedules fuzzed")
    monkeypatch.setattr(HybridModule, "run_native",
                        lambda self, *arrays: [a.__setitem__(..., 7) for a in arrays[-1:]] and arrays[-1])
    assert fuzz.main(["--n", "1", "--seed", "0", "--keep", str(tmp_path), "--no-reduce"]) == 1
    (kept,) = tmp_path.glob("case_0.py")
    assert "FuzzCase(" in kept.read_text()
    assert "FAILURE" in capsys.readouterr().out


def test_generated_integer_divisors_are_never_zero():
    """Zero divisors would kill the process natively (SIGFPE): the fuzzer divides by max(b, 1)."""
    from tvm import te, tirx

    import tvm_hybrid_nb as thn

    a = te.placeholder((6,), "int8", name="A")
    b = te.placeholder((6,), "int8", name="B")
    ops = [op for name, op in fuzz.computes._binary_ops("int8")
           if name in ("truncdiv", "truncmod", "floordiv", "floormod")]
    assert len(ops) == 4
    c = te.compute((4, 6), lambda j, i: tirx.Select(j == 0, ops[0](a[i], b[i]), tirx.Select(
        j == 1, ops[1](a[i], b[i]), tirx.Select(j == 2, ops[2](a[i], b[i]), ops[3](a[i], b[i])))), name="C")
    hm = thn.build([a, b, c])
    x = np.array([-128, -7, -1, 0, 5, 127], np.int8)
    y = np.array([0, 0, -3, 0, -128, 2], np.int8)  # zero and negative divisors become 1
    d = np.maximum(y, 1).astype(np.int64)
    x64 = x.astype(np.int64)
    trunc = np.trunc(x64 / d).astype(np.int64)
    truth = np.stack([trunc, x64 - trunc * d, x64 // d, x64 % d]).astype(np.int8)
    np.testing.assert_array_equal(hm.run_native(x, y, np.zeros((4, 6), np.int8)), truth)
    np.testing.assert_array_equal(hm.emulate(x, y, np.zeros((4, 6), np.int8)), truth)
