"""Dumps: save → load in a fresh process, runnable stage files without TVM, resume, clear errors."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import s_tir, te

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import dump, dump_write
from tvm_hybrid_nb.errors import BuildError, DumpError, UnknownPassError
from tvm_hybrid_nb.signature import ParamSpec, random_arguments

N = 16


def int_matmul():
    """int32 matmul with a split loop: exact, so numpy's ``A @ B`` is bit-exact truth."""
    A = te.placeholder((N, N), "int32", name="A")
    B = te.placeholder((N, N), "int32", name="B")
    k = te.reduce_axis((0, N), "k")
    C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
    i, _, _ = sch.get_loops(sch.get_sblock("C"))
    sch.split(i, [None, 4])
    return sch


def scale(factor: float = 2.0, n: int = 32):
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * factor, name="B")
    return [A, B]


@pytest.fixture(scope="module")
def hm():
    return thn.build(int_matmul())


@pytest.fixture(scope="module")
def saved(hm, tmp_path_factory):
    directory = tmp_path_factory.mktemp("dump") / "matmul"
    hm.save(directory)
    return directory


def stage_file(directory: Path, number: int, suffix: str) -> Path:
    (found,) = [p for p in directory.glob(f"{number:03d}_*{suffix}")
                if suffix != ".py" or not p.name.endswith(".tvmscript.py")]
    return found


def flatten_number(hm) -> int:
    return hm.stage("tirx.FlattenBuffer").number


def numpy_truth(a, b):
    return (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)


def blocked_env(tmp_path: Path) -> dict:
    """An environment whose PYTHONPATH shadows tvm, tvm_ffi and tvm_hybrid_nb with packages that refuse to import."""
    blocker = tmp_path / "blocker"
    for name in ("tvm", "tvm_ffi", "tvm_hybrid_nb"):
        (blocker / name).mkdir(parents=True, exist_ok=True)
        (blocker / name / "__init__.py").write_text(f"raise ImportError('{name} is blocked in this test')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = str(blocker)
    return env


# --------------------------------------------------------------------------------------- save
def test_save_writes_three_files_per_stage_and_an_index(hm, saved):
    index = json.loads((saved / "index.json").read_text())
    assert index["tvm_version"] == tvm.__version__
    assert tvm.target.Target(index["target"]).kind.name == "llvm"
    assert len(index["stages"]) == len(hm.stages)
    for stage, entry in zip(hm.stages, index["stages"]):
        assert entry["index"] == stage.number
        assert entry["name"] == stage.name
        assert entry["changed"] == stage.changed
        assert entry["emulatable"] == stage.emulatable
        assert entry["reason"] == stage.reason
        assert entry["seconds"] == pytest.approx(stage.seconds)
        stem = f"{stage.number:03d}_{stage.name}"
        assert entry["files"] == {"py": stem + ".py", "tvmscript": stem + ".tvmscript.py", "json": stem + ".json"}
        for name in entry["files"].values():
            assert (saved / name).is_file()
    assert sum(e["changed"] for e in index["stages"][1:]) >= 3
    assert any(not e["emulatable"] for e in index["stages"])  # after MakePackedAPI


def test_json_and_tvmscript_files_hold_the_stage_module(hm, saved):
    number = flatten_number(hm)
    mod = tvm.ir.load_json(stage_file(saved, number, ".json").read_text())
    tvm.ir.assert_structural_equal(mod, hm.stages[number].mod)
    parsed = tvm.script.from_source(stage_file(saved, number, ".tvmscript.py").read_text())
    tvm.ir.assert_structural_equal(parsed, hm.stages[number].mod)


def test_saved_py_runs_without_tvm_and_prints_the_numpy_checksum(hm, saved, tmp_path):
    env = blocked_env(tmp_path)
    probe = subprocess.run([sys.executable, "-c", "import tvm"], env=env, capture_output=True, text=True)
    assert probe.returncode != 0 and "blocked" in probe.stderr  # the blocker works
    seed = 7
    a, b, c = random_arguments(hm.params, seed=seed)
    expected = dump.checksum(hm.params, [a, b, numpy_truth(a, b)])
    numbers = [0, flatten_number(hm), hm.packed_api_index - 1]
    for number in numbers:
        path = stage_file(saved, number, ".py")
        run = subprocess.run([sys.executable, path.name, "--seed", str(seed)], cwd=saved, env=env,
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stderr
        assert run.stdout.splitlines() == expected, path.name


def test_saved_py_imports_as_the_kernel_function(hm, saved):
    path = stage_file(saved, flatten_number(hm), ".py")
    spec = importlib.util.spec_from_file_location("flattened_stage", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = np.random.default_rng(3)
    a = rng.integers(-50, 50, (N, N), dtype=np.int32)
    b = rng.integers(-50, 50, (N, N), dtype=np.int32)
    c = np.zeros((N, N), np.int32)
    getattr(module, hm.name)(a, b, c)
    np.testing.assert_array_equal(c, numpy_truth(a, b))


def test_non_emulatable_stage_file_explains_and_exits_1(hm, saved):
    stage = hm.stages[-1]
    assert not stage.emulatable
    path = stage_file(saved, stage.number, ".py")
    assert stage.reason.split()[0] in path.read_text()
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert "cannot be emulated" in run.stderr and "MakePackedAPI" in run.stderr


def test_runner_inputs_follow_random_arguments():
    params = [ParamSpec("a", "float32", (5, "n")), ParamSpec("b", "int8", (7,)), ParamSpec("c", "int32", (6,)),
              ParamSpec("d", "uint8", (4,)), ParamSpec("e", "bool", (9,)), ParamSpec("f", "float16", (3,)),
              ParamSpec("out", "int64", ("n",), is_output=True)]
    ours = dump_write._RUNNER["_thn_random_arguments"](dump_write._param_tuples(params), 11, {"n": 4}, {})
    theirs = random_arguments(params, seed=11, sizes={"n": 4})
    for x, y in zip(ours, theirs):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


def test_non_empty_directory_is_refused_unless_overwrite(hm, tmp_path):
    directory = tmp_path / "d"
    directory.mkdir()
    (directory / "notes.txt").write_text("mine")
    for overwrite in (False, True):  # not a dump: refused either way, the user's file stays
        with pytest.raises(DumpError, match="not empty and is not a tvm_hybrid_nb dump"):
            hm.save(directory, overwrite=overwrite)
    assert [p.name for p in directory.iterdir()] == ["notes.txt"]
    (directory / "notes.txt").unlink()
    hm.save(directory)
    with pytest.raises(DumpError, match="holds a previous dump"):
        hm.save(directory)
    hm.save(directory, overwrite=True)  # a dump and nothing else: replaced
    assert len(json.loads((directory / "index.json").read_text())["stages"]) == len(hm.stages)


# --------------------------------------------------------------------------------------- load
def test_load_in_a_fresh_process_gives_the_same_sources_and_results(hm, saved, tmp_path):
    numbers = [s.number for s in hm.stages if s.emulatable]
    script = textwrap.dedent(f"""
        import json, sys
        import tvm_hybrid_nb as thn
        from tvm_hybrid_nb import dump
        hm = thn.load(sys.argv[1])
        assert hm._native is None  # nothing compiled by loading
        out = {{"sources": {{}}, "emulated": {{}}}}
        for s in hm.stages:
            if s.emulatable:
                out["sources"][s.number] = s.source
                args = hm.random_inputs(seed=5)
                hm.emulate(*args, stage=s.index)
                out["emulated"][s.number] = dump.checksum(hm.params, args)
        args = hm.random_inputs(seed=5)
        hm.run_native(*args)
        out["native"] = dump.checksum(hm.params, args)
        print(json.dumps(out))
    """)
    run = subprocess.run([sys.executable, "-c", script, str(saved)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    assert sorted(int(k) for k in got["sources"]) == numbers
    a, b, c = random_arguments(hm.params, seed=5)
    truth = dump.checksum(hm.params, [a, b, numpy_truth(a, b)])
    assert got["native"] == truth
    for stage in hm.stages:
        if stage.emulatable:
            assert got["sources"][str(stage.number)] == stage.source
            assert got["emulated"][str(stage.number)] == truth


def test_load_keeps_stage_metadata_and_builds_native_on_demand(hm, saved):
    loaded = thn.load(saved)
    assert [s.name for s in loaded.stages] == [s.name for s in hm.stages]
    assert [s.changed for s in loaded.stages] == [s.changed for s in hm.stages]
    assert [s.label for s in loaded.stages] == [s.label for s in hm.stages]
    assert loaded.func_name == hm.func_name and str(loaded.target) == str(hm.target)
    assert loaded._native is None
    a, b, c = loaded.random_inputs(seed=2)
    loaded.run_native(a, b, c)
    np.testing.assert_array_equal(c, numpy_truth(a, b))
    assert loaded.compare(stage=flatten_number(hm), seed=2).ok


def test_last_compare_survives_save_and_load(tmp_path):
    hm = thn.build(scale())
    result = hm.compare(seed=1)
    hm.save(tmp_path / "d")
    loaded = thn.load(tmp_path / "d")
    assert loaded.last_compare is not None
    assert str(loaded.last_compare).splitlines()[1:] == str(result).splitlines()[1:]


# --------------------------------------------------------------------------------------- resume
def test_resume_from_a_middle_stage_continues_the_numbering_and_matches_native(hm, saved):
    k = flatten_number(hm)
    resumed = thn.resume(stage_file(saved, k, ".json"))
    assert resumed.stages[0].number == k and resumed.stages[0].name == "input"
    assert resumed.resumed_from == stage_file(saved, k, ".json").name
    assert [s.number for s in resumed.stages] == list(range(k, len(hm.stages)))
    assert [s.name for s in resumed.stages[1:]] == [s.name for s in hm.stages[k + 1:]]
    assert resumed.stages[1].label == hm.stages[k + 1].label
    for s in resumed.stages[1:]:
        if s.number < hm.packed_api_index:
            tvm.ir.assert_structural_equal(s.mod, hm.stages[s.number].mod)
    args = hm.random_inputs(seed=9)
    ours = [x.copy() for x in args]
    hm.run_native(*args)
    resumed.run_native(*ours)
    np.testing.assert_array_equal(ours[2], args[2])
    np.testing.assert_array_equal(ours[2], numpy_truth(args[0], args[1]))
    assert resumed.compare(stage=1, seed=9).ok


def test_resume_from_an_edited_tvmscript_uses_the_edit(tmp_path):
    hm = thn.build(scale(2.0))
    hm.save(tmp_path / "d")
    number = hm.stage("s_tir.LowerOpaqueBlock").number
    path = stage_file(tmp_path / "d", number, ".tvmscript.py")
    text = path.read_text()
    assert text.count("T.float32(2.0)") == 1
    path.write_text(text.replace("T.float32(2.0)", "T.float32(3.0)"))
    resumed = thn.resume(path)
    a, b = resumed.random_inputs(seed=4)
    resumed.run_native(a, b)
    np.testing.assert_array_equal(b, a * np.float32(3.0))
    assert resumed.compare(stage=0, seed=4).ok  # the emulated edit agrees with the native build


def test_resume_named_passes_then_native_finishes_the_pipeline(hm, saved, tmp_path):
    k = hm.stage("s_tir.LowerOpaqueBlock").number
    resumed = thn.resume(stage_file(saved, k, ".json"), passes=["tirx.FlattenBuffer", "NarrowDataType"])
    assert [s.name for s in resumed.stages] == ["input", "tirx.FlattenBuffer", "tirx.NarrowDataType"]
    assert [s.number for s in resumed.stages] == [k, k + 1, k + 2]
    assert resumed.stages[1].source == hm.stages[k + 1].source
    a, b, c = resumed.random_inputs(seed=6)
    resumed.run_native(a, b, c)
    np.testing.assert_array_equal(c, numpy_truth(a, b))
    # a dump of the resumed module loads back with its numbering and native build
    resumed.save(tmp_path / "r")
    again = thn.load(tmp_path / "r")
    assert [s.label for s in again.stages] == [s.label for s in resumed.stages]
    a, b, c = again.random_inputs(seed=8)
    again.run_native(a, b, c)
    np.testing.assert_array_equal(c, numpy_truth(a, b))


def test_resume_of_a_resumed_dump_skips_all_earlier_passes(hm, saved, tmp_path):
    k = flatten_number(hm)
    first = thn.resume(stage_file(saved, k, ".json"))
    first.save(tmp_path / "r1")
    m = hm.stage("tirx.CommonSubexprElim").number
    second = thn.resume(stage_file(tmp_path / "r1", m, ".json"))
    assert [s.name for s in second.stages[1:]] == [s.name for s in hm.stages[m + 1:]]
    a, b, c = second.random_inputs(seed=1)
    second.run_native(a, b, c)
    np.testing.assert_array_equal(c, numpy_truth(a, b))


def test_resume_refusals(hm, saved, tmp_path):
    split = next(s for s in hm.stages if s.name == dump.SPLIT_PASS)
    with pytest.raises(DumpError, match="host/device split"):
        thn.resume(stage_file(saved, split.number, ".json"))
    with pytest.raises(DumpError, match=r"hybrid Python"):
        thn.resume(stage_file(saved, 3, ".py"))
    with pytest.raises(UnknownPassError, match="unknown pass 'NoSuchPass'"):
        thn.resume(stage_file(saved, 3, ".json"), passes=["NoSuchPass"])
    with pytest.raises(UnknownPassError, match="ambiguous"):
        thn.resume(stage_file(saved, 3, ".json"), passes="StmtSimplify")
    lone = tmp_path / stage_file(saved, 3, ".json").name
    shutil.copy(stage_file(saved, 3, ".json"), lone)
    with pytest.raises(DumpError, match="index.json: missing"):
        thn.resume(lone)
    broken = tmp_path / "005_edited.tvmscript.py"
    shutil.copy(saved / "index.json", tmp_path / "index.json")
    broken.write_text("@I.ir_module\nclass Module:\n    def main(:\n")
    with pytest.raises(DumpError, match="cannot parse the TVMScript") as info:
        thn.resume(broken)
    assert str(broken) in str(info.value) and "\n" not in str(info.value)


def test_resume_reports_a_failing_pass(hm, saved):
    # MakePackedAPI refuses a module that still has block iterators: the error names the pass and file.
    path = stage_file(saved, 3, ".json")
    with pytest.raises(BuildError, match=r"pass tirx.MakePackedAPI failed on 003_.*variables") as info:
        thn.resume(path, passes=["tirx.MakePackedAPI"])
    assert "\n" not in str(info.value)
    with pytest.raises(UnknownPassError, match="bad target"):
        thn.resume(path, passes=["tirx.BindTarget(not-a-target)"])


# --------------------------------------------------------------------------------------- errors
def _corrupt_cases():
    def no_index(d):
        (d / "index.json").unlink()
        return d / "index.json"

    def index_garbage(d):
        (d / "index.json").write_text("{not json")
        return d / "index.json"

    def index_other_format(d):
        (d / "index.json").write_text(json.dumps({"stages": []}))
        return d / "index.json"

    def index_truncated_stages(d):
        index = json.loads((d / "index.json").read_text())
        del index["stages"][3]["files"]
        (d / "index.json").write_text(json.dumps(index))
        return d / "index.json"

    def stage_missing(d):
        path = next(d.glob("007_*.json"))
        path.unlink()
        return path

    def stage_garbage(d):
        path = next(d.glob("007_*.json"))
        path.write_bytes(b"\x00\xffgarbage")
        return path

    def stage_not_tvm(d):
        path = next(d.glob("007_*.json"))
        path.write_text(json.dumps({"hello": 1}))
        return path

    def stage_truncated(d):
        path = next(d.glob("007_*.json"))
        path.write_text(path.read_text()[:200])
        return path

    return [no_index, index_garbage, index_other_format, index_truncated_stages, stage_missing, stage_garbage,
            stage_not_tvm, stage_truncated]


@pytest.mark.parametrize("damage", _corrupt_cases(), ids=lambda f: f.__name__)
def test_missing_or_corrupt_files_give_one_clear_line(saved, tmp_path, damage):
    directory = tmp_path / "copy"
    shutil.copytree(saved, directory)
    bad_file = damage(directory)
    with pytest.raises(DumpError) as info:
        thn.load(directory)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(str(bad_file))


def test_load_of_a_missing_directory(tmp_path):
    with pytest.raises(DumpError, match="no such dump directory"):
        thn.load(tmp_path / "nowhere")


def test_stage_file_of_a_kernel_with_shape_expressions_runs_with_given_sizes(tmp_path):
    from tvm_hybrid_nb.examples import symbolic_window

    example = symbolic_window()
    hm = thn.build(example.obj)
    directory = tmp_path / "window"
    hm.save(directory, sizes={"n": 6, "m": 5})
    index = json.loads((directory / "index.json").read_text())
    assert index["sizes"] == {"n": 6, "m": 5}
    a, c = hm.random_inputs(seed=4, sizes={"n": 9, "m": 3})
    assert a.shape == (11, 5) and c.shape == (9, 3)
    expected = dump.checksum(hm.params, [a, example.reference(a)])
    path = stage_file(directory, 0, ".py")
    run = subprocess.run([sys.executable, path.name, "--seed", "4", "--size", "n=9", "--size", "m=3"],
                         cwd=directory, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == expected
