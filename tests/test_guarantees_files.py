"""Guarantees about files: a user's file is never deleted or corrupted, every write is atomic, a bad
dump or bad input is one line (exit status 2 on the command line), never a crash or a traceback.

Grouped by category: data loss, dump validation, bad input / one-line errors, hostile file systems.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import te

import tvm_hybrid_nb as thn
from tvm_hybrid_nb import cli, dump, dump_write
from tvm_hybrid_nb.errors import ArgumentShapeError, ArgumentTypeError, DumpError

ROOT = Path(__file__).resolve().parents[1]
TEMP_PREFIX = ".thn-tmp-"

# A kernel over a symbolic length n: B[i] = A[i] * 2 + 1.
SYMBOLIC_SCRIPT = textwrap.dedent("""
    from tvm import te, tirx
    n = tirx.Var("n", "int32")
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    schedule = te.create_prim_func([A, B])
""")
# A kernel with a scalar parameter: B[i] = A[i] * alpha.
SCALAR_SCRIPT = textwrap.dedent("""
    from tvm import te, tirx
    alpha = tirx.Var("alpha", "float32")
    A = te.placeholder((8,), "float32", name="A")
    B = te.compute((8,), lambda i: A[i] * alpha, name="B")
    schedule = te.create_prim_func([A, alpha, B])
""")


def run_cli(*args) -> int:
    return cli.main([str(a) for a in args])


def python(code: str, *args, limit_bytes: int | None = None, cwd=None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (file writes capped at ``limit_bytes``; SIGXFSZ ignored so
    that a write past the cap fails with an OSError instead of killing the process)."""
    prelude = ""
    if limit_bytes is not None:
        prelude = ("import resource, signal\n"
                   "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
                   f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit_bytes}, {limit_bytes}))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", prelude + code, *map(str, args)], capture_output=True,
                          text=True, timeout=240, env=env, cwd=cwd)


CLI_CODE = "import sys\nfrom tvm_hybrid_nb import cli\nsys.exit(cli.main(sys.argv[1:]))\n"


def assert_one_line(text: str, *fragments: str) -> None:
    text = text.strip()
    assert len(text.splitlines()) == 1, text
    assert "Traceback" not in text, text
    for fragment in fragments:
        assert fragment in text, text


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` with its bytes (to prove nothing changed)."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def no_leftovers(parent: Path) -> bool:
    return not [p for p in parent.iterdir() if p.name.startswith(TEMP_PREFIX)]


@pytest.fixture(scope="module")
def scripts(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("scripts")
    (root / "symbolic.py").write_text(SYMBOLIC_SCRIPT)
    (root / "scalar.py").write_text(SCALAR_SCRIPT)
    return root


@pytest.fixture(scope="module")
def hm(scripts):
    obj, _ = cli.load_script_target(scripts / "symbolic.py")
    return thn.build(obj)


@pytest.fixture(scope="module")
def pristine(hm, tmp_path_factory) -> Path:
    """A dump of the symbolic kernel; tests copy it before changing anything."""
    return hm.save(tmp_path_factory.mktemp("pristine") / "dump")


@pytest.fixture
def dumped(pristine, tmp_path) -> Path:
    target = tmp_path / "dump"
    shutil.copytree(pristine, target)
    return target


def edit_index(directory: Path, change) -> None:
    index = json.loads((directory / "index.json").read_text())
    change(index)
    (directory / "index.json").write_text(json.dumps(index))


# =========================================================================================== data loss
USER_FILES = {"index.json": '{"my": "own index"}', "2024_analysis.py": "print('mine')\n",
              "001_intro.json": '{"chapter": 1}'}


def user_directory(parent: Path) -> Path:
    directory = parent / "mine"
    directory.mkdir()
    for name, text in USER_FILES.items():
        (directory / name).write_text(text)
    return directory


@pytest.fixture(scope="module")
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    sh = InteractiveShell.instance()
    assert sh.run_cell("%load_ext tvm_hybrid_nb\n" + SYMBOLIC_SCRIPT.replace("schedule =", "func =")).success
    return sh


def run_magic(shell, source: str):
    from IPython.utils.capture import capture_output

    with capture_output() as cap:
        result = shell.run_cell(source)
    return result, cap


@pytest.mark.parametrize("overwrite", ["", " --overwrite"])
def test_magic_dump_never_empties_a_directory_of_user_files(shell, tmp_path, overwrite):
    directory = user_directory(tmp_path)
    result, cap = run_magic(shell, f"%%hybrid_build kept --no-widget --dump {directory}{overwrite}\nfunc\n")
    assert not result.success
    assert_one_line(cap.stderr, "UsageError", "not a tvm_hybrid_nb dump")
    assert {p.name: p.read_text() for p in directory.iterdir()} == USER_FILES


def test_magic_overwrite_replaces_only_a_dump(shell, tmp_path):
    directory = tmp_path / "stages"
    result, cap = run_magic(shell, f"%%hybrid_build m --no-widget --dump {directory}\nfunc\n")
    assert result.success, cap.stderr
    result, cap = run_magic(shell, f"%%hybrid_build m --no-widget --dump {directory}\nfunc\n")
    assert_one_line(cap.stderr, "UsageError", "previous dump", "--overwrite")
    result, cap = run_magic(shell, f"%%hybrid_build m --no-widget --dump {directory} --overwrite\nfunc\n")
    assert result.success, cap.stderr
    assert thn.load(directory).func_name == shell.user_ns["m"].func_name
    (directory / "notes.txt").write_text("mine")  # a dump plus a user's file: never replaced
    before = snapshot(directory)
    result, cap = run_magic(shell, f"%%hybrid_build m --no-widget --dump {directory} --overwrite\nfunc\n")
    assert_one_line(cap.stderr, "UsageError", "notes.txt")
    assert snapshot(directory) == before


@pytest.mark.parametrize("extra", ["notes.txt", "sub/deep.txt", "000_mine.json"])
def test_overwrite_refuses_a_dump_holding_user_files_api_and_cli(hm, dumped, scripts, extra, capsys):
    (dumped / extra).parent.mkdir(exist_ok=True)
    (dumped / extra).write_text("mine")
    before = snapshot(dumped)
    with pytest.raises(DumpError, match="not part of its dump"):
        hm.save(dumped, overwrite=True)
    capsys.readouterr()
    assert run_cli("dump", scripts / "symbolic.py", "--out", dumped, "--overwrite") == cli.EXIT_USAGE
    assert_one_line(capsys.readouterr().err, "not part of its dump")
    assert snapshot(dumped) == before
    assert no_leftovers(dumped.parent)


def test_overwrite_refuses_a_directory_whose_index_is_not_ours(hm, tmp_path):
    directory = user_directory(tmp_path)
    with pytest.raises(DumpError, match="not a tvm_hybrid_nb dump"):
        hm.save(directory, overwrite=True)
    assert {p.name: p.read_text() for p in directory.iterdir()} == USER_FILES


def test_emulate_rewriting_the_index_under_a_file_size_cap_keeps_the_old_index(dumped):
    before = (dumped / "index.json").read_bytes()
    assert len(before) > 3000
    run = python(CLI_CODE, "emulate", dumped, limit_bytes=3000)
    assert run.returncode == cli.EXIT_USAGE, run.stderr
    assert_one_line(run.stderr, "index.json", "cannot write")
    assert (dumped / "index.json").read_bytes() == before
    assert no_leftovers(dumped)
    thn.load(dumped)


def test_record_compare_failure_leaves_the_old_index(dumped, monkeypatch):
    before = (dumped / "index.json").read_bytes()
    hm = thn.load(dumped)
    result = hm.compare(sizes={"n": 8})

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(DumpError, match="No space|no space"):
        dump.record_compare(dumped, result)
    monkeypatch.undo()
    assert (dumped / "index.json").read_bytes() == before
    assert no_leftovers(dumped)


def test_dump_overwrite_under_a_file_size_cap_keeps_the_old_dump(dumped, scripts):
    before = snapshot(dumped)
    run = python(CLI_CODE, "dump", scripts / "symbolic.py", "--out", dumped, "--overwrite", limit_bytes=3000)
    assert run.returncode == cli.EXIT_USAGE, run.stderr
    assert_one_line(run.stderr, "cannot write")
    assert snapshot(dumped) == before
    assert no_leftovers(dumped.parent)
    thn.load(dumped)


def test_interrupted_overwrite_keeps_the_old_dump(hm, dumped, monkeypatch):
    before = snapshot(dumped)
    calls = []
    real = tvm.ir.save_json

    def interrupted(node):
        calls.append(node)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(node)

    monkeypatch.setattr(tvm.ir, "save_json", interrupted)
    with pytest.raises(KeyboardInterrupt):
        hm.save(dumped, overwrite=True)
    assert snapshot(dumped) == before
    assert no_leftovers(dumped.parent)


def test_a_failed_first_dump_leaves_no_directory(hm, tmp_path, monkeypatch):
    def broken(node):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tvm.ir, "save_json", broken)
    with pytest.raises(DumpError, match="[Nn]o space left"):
        hm.save(tmp_path / "new")
    assert not (tmp_path / "new").exists() and no_leftovers(tmp_path)


def test_report_is_written_atomically(dumped, tmp_path, monkeypatch):
    out = tmp_path / "report.html"
    out.write_text("an earlier report")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    hm = thn.load(dumped)
    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(DumpError, match="report.html"):
        thn.report(hm, out)
    monkeypatch.undo()
    assert out.read_text() == "an earlier report"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(TEMP_PREFIX)] == []


# ===================================================================================== dump validation
LOAD_CODE = textwrap.dedent("""
    import sys
    import tvm_hybrid_nb as thn
    from tvm_hybrid_nb.errors import DumpError
    try:
        thn.load(sys.argv[1])
    except DumpError as exc:
        print(exc)
        sys.exit(7)
    print("loaded")
""")


def first_stage_json(directory: Path) -> Path:
    index = json.loads((directory / "index.json").read_text())
    return directory / index["stages"][0]["files"]["json"]


def _self_reference(graph):
    node = next(i for i, n in enumerate(graph["nodes"]) if n["type"] == "prim.Mul")
    graph["nodes"][node]["data"]["a"] = node


def _cycle_of_two(graph):
    arrays = [i for i, n in enumerate(graph["nodes"]) if n["type"] == "ffi.Array" and n["data"]]
    a, b = arrays[0], arrays[1]
    graph["nodes"][a]["data"][0] = b
    graph["nodes"][b]["data"][0] = a


def _index_out_of_range(graph):
    node = next(i for i, n in enumerate(graph["nodes"]) if n["type"] == "prim.Mul")
    graph["nodes"][node]["data"]["b"] = len(graph["nodes"]) + 10


def _negative_root(graph):
    graph["root_index"] = -1


def _unknown_type(graph):
    node = next(i for i, n in enumerate(graph["nodes"]) if n["type"] == "prim.Mul")
    graph["nodes"][node]["type"] = "prim.NoSuchNode"


def _null_operand(graph):  # TVM loads it, and its passes then crash on the null operand
    node = next(i for i, n in enumerate(graph["nodes"]) if n["type"] == "prim.Mul")
    graph["nodes"][node]["data"]["a"] = next(i for i, n in enumerate(graph["nodes"]) if n["type"] == "None")


def _deep_chain(graph):
    start = len(graph["nodes"])
    graph["nodes"].append({"type": "ffi.Array", "data": []})
    for i in range(1, 5000):
        graph["nodes"].append({"type": "ffi.Array", "data": [start + i - 1]})
    graph["root_index"] = len(graph["nodes"]) - 1


@pytest.mark.parametrize("damage, fragment", [
    (_self_reference, "cycle"), (_cycle_of_two, "cycle"), (_index_out_of_range, "refers to node"),
    (_negative_root, "root_index"), (_unknown_type, "prim.NoSuchNode"), (_deep_chain, "deeper than"),
    (_null_operand, "null 'a'"),
], ids=["self", "two-cycle", "out-of-range", "root", "unknown-type", "deep", "null-operand"])
def test_a_damaged_stage_json_is_one_line_not_a_crash(dumped, damage, fragment):
    path = first_stage_json(dumped)
    graph = json.loads(path.read_text())
    damage(graph)
    path.write_text(json.dumps(graph))
    run = python(LOAD_CODE, dumped)
    assert run.returncode == 7, (run.returncode, run.stderr[-2000:])  # -11 would be the segfault
    assert_one_line(run.stdout, path.name, fragment)


def test_the_graph_check_accepts_every_real_stage(hm):
    for stage in hm.stages:
        dump.check_node_graph(json.loads(tvm.ir.save_json(stage.mod)), Path("x.json"))


@pytest.mark.parametrize("text", ["", "{\"root_index\": 0", "\x00\x01garbage", "[1, 2, 3]",
                                  '{"root_index": 0, "nodes": [{"type": "ffi.Array", "data": [1]}]}'])
def test_truncated_or_garbage_stage_files_are_one_line(dumped, text, capsys):
    first_stage_json(dumped).write_text(text)
    assert run_cli("emulate", dumped, "--no-record") == cli.EXIT_USAGE
    assert_one_line(capsys.readouterr().err, "corrupt")


def _set_stage(i, key, value):
    def change(index):
        index["stages"][i][key] = value
    return change


def _set_param(i, key, value):
    def change(index):
        index["params"][i][key] = value
    return change


@pytest.mark.parametrize("change, field", [
    (lambda ix: ix.update(name="a b"), "'name'"),
    (lambda ix: ix.update(last_compare={"x": 1}), "last_compare"),
    (_set_stage(3, "seconds", "fast"), "stages[3].seconds"),
    (_set_param(0, "dtype", "float64"), "params[0].dtype"),
    (_set_param(0, "dtype", "not_a_dtype"), "params[0].dtype"),
    (_set_param(1, "name", "x y"), "params[1].name"),
    (_set_param(0, "shape", ["n +"]), "params[0].shape"),
    (lambda ix: ix.update(sizes={"n": "big"}), "'sizes'"),
    (lambda ix: ix.update(sizes={"m": 4}), "'sizes'"),
    (lambda ix: ix.update(func_name="nope"), "'func_name'"),
    (_set_param(0, "shape", [1]), "params[0].shape"),
    (_set_param(1, "is_output", False), "params[1].is_output"),
    (lambda ix: ix.update(first_index="0"), "first_index"),
    (lambda ix: ix.update(build_seconds=[1]), "build_seconds"),
    (_set_stage(0, "files", {"json": "../outside.json", "py": "a.py", "tvmscript": "a.tvmscript.py"}),
     "stages[0].files"),
    (_set_stage(0, "files", {"json": "/etc/passwd"}), "stages[0].files"),
], ids=["name", "last_compare", "seconds", "dtype", "bad-dtype", "param-name", "shape", "sizes",
        "unknown-size", "func_name", "fixed-shape", "is_output", "first_index", "build_seconds", "path-escape", "absolute-path"])
def test_a_hand_edited_index_is_one_line_naming_the_field(dumped, tmp_path, change, field, capsys):
    shutil.copy(first_stage_json(dumped), dumped.parent / "outside.json")
    edit_index(dumped, change)
    for args in (("emulate", dumped, "--no-record"), ("report", dumped, "-o", tmp_path / "r.html")):
        assert run_cli(*args) == cli.EXIT_USAGE
        assert_one_line(capsys.readouterr().err, "index.json", field)
    with pytest.raises(DumpError, match="corrupt"):
        thn.load(dumped)


# ======================================================================== bad input / one-line errors
def test_emulate_refuses_an_unknown_size_name_and_lists_the_known(dumped, capsys):
    assert run_cli("emulate", dumped, "--size", "N=5", "--no-record") == cli.EXIT_USAGE
    assert_one_line(capsys.readouterr().err, "'N'", "n")
    assert run_cli("emulate", dumped, "--size", "n=5", "--no-record") == cli.EXIT_OK


@pytest.mark.parametrize("args, fragment", [
    (["emulate", "{d}", "--seed", "x"], "--seed"), (["emulate", "{d}", "--size", "n=x"], "n=x"),
    (["emulate", "{d}", "--size", "n=-1"], "n=-1"), (["emulate", "{d}", "--seed", "-5"], "seed"), (["dump"], "required"), (["nosuch"], "nosuch"),
])
def test_command_line_usage_errors_are_one_line(pristine, args, fragment):
    run = python(CLI_CODE, *[a.format(d=pristine) for a in args])
    assert run.returncode == cli.EXIT_USAGE
    assert_one_line(run.stderr, fragment)


def test_random_inputs_refuse_an_unknown_size_name(hm):
    with pytest.raises(ArgumentShapeError, match=r"unknown size 'N'.*sizes are n"):
        hm.random_inputs(sizes={"N": 5})
    with pytest.raises(ArgumentShapeError, match="unknown size 'N'"):
        hm.compare(sizes={"n": 4, "N": 5})
    for value in (2.5, -1, True, "5"):
        with pytest.raises(ArgumentShapeError, match="non-negative integer"):
            hm.random_inputs(sizes={"n": value})
    assert hm.random_inputs(sizes={"n": 5})[0].shape == (5,)
    assert hm.random_inputs(sizes={"n": np.int64(3)})[0].shape == (3,)


def test_save_refuses_an_unknown_size_name(hm, tmp_path):
    with pytest.raises(ArgumentShapeError, match="unknown size 'N'"):
        hm.save(tmp_path / "d", sizes={"N": 5})
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("args, fragments", [
    (["--size", "N=5"], ["N", "n"]),
    (["--size", "n=abc"], ["n=abc", "integer"]),
    (["--size", "n"], ["NAME=VALUE"]),
    (["--set", "x=1"], ["x", "no scalar"]),
    (["--seed", "x"], ["--seed", "invalid int"]),
    (["--size", "n=-3"], ["n=-3", "non-negative"]),
    (["--seed", "-1"], ["--seed -1", "non-negative"]),
])
def test_the_dumped_py_file_gives_one_line_for_bad_options(pristine, args, fragments):
    py = pristine / json.loads((pristine / "index.json").read_text())["stages"][0]["files"]["py"]
    run = subprocess.run([sys.executable, str(py), *args], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert_one_line(run.stderr, *fragments)
    ok = subprocess.run([sys.executable, str(py), "--size", "n=5"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and "B float32[5]" in ok.stdout, ok.stderr


def small_kernel(dtype: str):
    A = te.placeholder((16,), dtype, name="A")
    B = te.compute((16,), lambda i: A[i] + A[i], name="B")
    return thn.build(te.create_prim_func([A, B]))


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_random_inputs_for_ml_dtypes_floats_are_valid_values(dtype):
    import ml_dtypes

    hm = small_kernel(dtype)
    a, b = hm.random_inputs(seed=3)
    assert a.dtype == np.dtype(getattr(ml_dtypes, dtype)) and b.dtype == a.dtype
    wide = a.astype(np.float64)
    assert np.isfinite(wide).all() and (np.abs(wide) <= 1).all() and len(np.unique(wide)) > 4
    assert not b.astype(np.float64).any()
    np.testing.assert_array_equal(hm.random_inputs(seed=3)[0].astype(np.float64), wide)  # seeded
    hm(a, b)  # the emulation accepts them
    np.testing.assert_array_equal(b.astype(np.float64), (a.astype(np.float32) * 2).astype(a.dtype).astype(np.float64))


@pytest.mark.parametrize("dtype, low, high", [("int4", -8, 7), ("uint4", 0, 15)])
def test_int4_random_inputs_cover_the_range_and_run_native_says_why_not(dtype, low, high):
    hm = small_kernel(dtype)
    a, b = hm.random_inputs(seed=1)
    values = a.astype(np.int64)
    assert values.min() >= low and values.max() <= high and len(np.unique(values)) > 4
    with pytest.raises(ArgumentTypeError, match=f"parameter A: {dtype} arrays cannot be passed to the native"):
        hm.run_native(a, b)
    with pytest.raises(ArgumentTypeError, match="reference="):
        hm.compare(a, b)


@pytest.fixture
def immutable_dir(tmp_path):
    directory = tmp_path / "locked"
    directory.mkdir()
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not available here (root ignores permission bits)")
    else:
        directory.chmod(0o555)
    yield directory
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(directory)], capture_output=True)
    directory.chmod(0o755)


def test_an_unwritable_output_directory_is_one_line(hm, scripts, immutable_dir, capsys):
    with pytest.raises(DumpError, match="locked"):
        hm.save(immutable_dir)
    assert run_cli("dump", scripts / "symbolic.py", "--out", immutable_dir / "sub") == cli.EXIT_USAGE
    assert_one_line(capsys.readouterr().err, "locked")
    assert list(immutable_dir.iterdir()) == []


def test_output_paths_through_a_file_and_a_report_into_a_directory(dumped, scripts, tmp_path, capsys):
    (tmp_path / "afile").write_text("mine")
    assert run_cli("dump", scripts / "symbolic.py", "--out", tmp_path / "afile" / "sub") == cli.EXIT_USAGE
    assert_one_line(capsys.readouterr().err, "afile", "not a directory")
    assert run_cli("dump", scripts / "symbolic.py", "--out", tmp_path / "afile") == cli.EXIT_USAGE
    assert_one_line(capsys.readouterr().err, "not a directory")
    assert (tmp_path / "afile").read_text() == "mine"
    (tmp_path / "reports").mkdir()
    assert run_cli("report", dumped, "-o", tmp_path / "reports") == cli.EXIT_USAGE
    assert_one_line(capsys.readouterr().err, "is a directory")
    assert list((tmp_path / "reports").iterdir()) == []


def test_a_scalar_parameter_gets_a_real_option(scripts, tmp_path, capsys):
    out = tmp_path / "scalar"
    assert run_cli("dump", scripts / "scalar.py", "--out", out) == cli.EXIT_OK
    capsys.readouterr()
    assert run_cli("emulate", out, "--no-record") == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert_one_line(err, "alpha", "--scalar alpha=")
    assert "--inputs" not in err
    assert run_cli("emulate", out, "--scalar", "alpha=2.5", "--no-record") == cli.EXIT_OK
    assert "MATCH" in capsys.readouterr().out
    assert run_cli("emulate", out, "--scalar", "beta=1", "--no-record") == cli.EXIT_USAGE
    assert_one_line(capsys.readouterr().err, "beta", "alpha")
    assert run_cli("emulate", out, "--scalar", "alpha=fast", "--no-record") == cli.EXIT_USAGE
    assert_one_line(capsys.readouterr().err, "alpha=fast", "float32")
    hm = thn.load(out)
    with pytest.raises(ArgumentTypeError) as info:
        hm.random_inputs()
    assert "--inputs" not in str(info.value) and "alpha" in str(info.value)


# ============================================================================ hostile file systems
def test_a_symlinked_stage_file_pointing_outside_is_never_written_through(hm, dumped, tmp_path):
    outside = tmp_path / "precious.json"
    outside.write_text("precious")
    stage = first_stage_json(dumped)
    stage.unlink()
    stage.symlink_to(outside)
    with pytest.raises(DumpError, match="not part of its dump"):
        hm.save(dumped, overwrite=True)
    assert outside.read_text() == "precious" and stage.is_symlink()


def test_a_symlinked_index_is_replaced_not_followed(dumped, tmp_path):
    outside = tmp_path / "outside_index.json"
    shutil.move(dumped / "index.json", outside)
    (dumped / "index.json").symlink_to(outside)
    before = outside.read_bytes()
    assert run_cli("emulate", dumped) == cli.EXIT_OK  # records the comparison
    assert outside.read_bytes() == before  # the link was replaced, its target left alone
    assert not (dumped / "index.json").is_symlink()
    assert json.loads((dumped / "index.json").read_text())["last_compare"]["stage"]


def test_an_output_directory_that_is_a_symlink_writes_where_it_points(hm, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    hm.save(link)
    hm.save(link, overwrite=True)
    assert link.is_symlink() and (real / "index.json").is_file()
    assert thn.load(link).func_name == hm.func_name
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "missing")
    with pytest.raises(DumpError, match="symlink"):
        hm.save(dangling)
    assert not (tmp_path / "missing").exists()


def test_a_dump_directory_that_is_a_file(hm, tmp_path, capsys):
    path = tmp_path / "dump"
    path.write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(DumpError, match="not a directory"):
            hm.save(path, overwrite=overwrite)
    assert path.read_text() == "mine"
    assert run_cli("emulate", path) == cli.EXIT_USAGE
    assert_one_line(capsys.readouterr().err, "is a file", "dump directory")


def test_unicode_paths(hm, tmp_path, capsys):
    directory = tmp_path / "dämp ü 核" / "ſtages"
    hm.save(directory)
    assert run_cli("emulate", directory, "--size", "n=7") == cli.EXIT_OK
    assert run_cli("report", directory, "-o", directory.parent / "rëport.html") == cli.EXIT_OK
    assert thn.load(directory).last_compare.ok


def save_from_threads(hm, directory: Path, threads: int = 3, **kwargs) -> list[BaseException]:
    """``hm.save(directory, **kwargs)`` from ``threads`` threads at once; the DumpErrors they raised."""
    errors: list[BaseException] = []

    def write():
        try:
            hm.save(directory, **kwargs)
        except DumpError as exc:
            errors.append(exc)

    started = [threading.Thread(target=write) for _ in range(threads)]
    for t in started:
        t.start()
    for t in started:
        t.join()
    return errors


def test_concurrent_writers_of_one_new_directory(hm, tmp_path):
    target = tmp_path / "shared"
    errors = save_from_threads(hm, target)
    assert len(errors) <= 2 and all(isinstance(e, DumpError) for e in errors)
    assert len(thn.load(target).stages) == len(hm.stages)
    assert no_leftovers(tmp_path)


def test_concurrent_overwrites_leave_one_complete_dump(hm, dumped):
    errors = save_from_threads(hm, dumped, overwrite=True)
    assert all(isinstance(e, DumpError) for e in errors) and len(errors) < 3
    loaded = thn.load(dumped)
    assert len(loaded.stages) == len(hm.stages)
    index = json.loads((dumped / "index.json").read_text())
    listed = {"index.json"} | {f for e in index["stages"] for f in e["files"].values()}
    assert {p.name for p in dumped.iterdir()} == listed
    assert no_leftovers(dumped.parent)


def test_a_pycache_left_by_importing_a_stage_file_does_not_block_overwrite(hm, dumped):
    import importlib.util

    py = dumped / json.loads((dumped / "index.json").read_text())["stages"][0]["files"]["py"]
    spec = importlib.util.spec_from_file_location("stage0", py)
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    if not (dumped / "__pycache__").is_dir():  # bytecode caching off (PYTHONDONTWRITEBYTECODE): as it would
        (dumped / "__pycache__").mkdir()
        (dumped / "__pycache__" / f"{py.stem}.cpython-311.pyc").write_bytes(b"\0")
    hm.save(dumped, overwrite=True)
    assert not (dumped / "__pycache__").exists()


def test_an_index_edited_to_claim_a_user_file_claims_nothing(hm, dumped):
    (dumped / "notes.txt").write_text("mine")
    edit_index(dumped, _set_stage(0, "files", {"py": "000_input.py", "tvmscript": "000_input.tvmscript.py",
                                               "json": "notes.txt"}))
    (dumped / "000_input.json").unlink()
    with pytest.raises(DumpError, match="files that a dump does not write"):
        hm.save(dumped, overwrite=True)
    assert (dumped / "notes.txt").read_text() == "mine"


def test_the_current_directory_as_output(hm, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    hm.save(".")  # an empty current directory: filled in place, the process stays in it
    assert Path(os.getcwd()) == work.resolve() and (work / "index.json").is_file()
    before = snapshot(work)
    with pytest.raises(DumpError, match="current working directory"):
        hm.save(".", overwrite=True)
    assert snapshot(work) == before and os.path.samefile(os.getcwd(), work)


def test_an_index_that_changes_while_emulating_is_not_overwritten(hm, dumped, monkeypatch):
    result = thn.load(dumped).compare(sizes={"n": 4})
    real = dump.read_index

    def read_then_replaced(directory):
        index = real(directory)
        hm.save(dumped, overwrite=True)  # another process writes a new dump meanwhile
        return index

    monkeypatch.setattr(dump.loading, "read_index", read_then_replaced)  # where record_compare looks it up
    with pytest.raises(DumpError, match="changed while"):
        dump.record_compare(dumped, result)
    monkeypatch.undo()
    assert json.loads((dumped / "index.json").read_text())["last_compare"] is None
    assert no_leftovers(dumped)


@pytest.mark.parametrize("name", ["a\0b", "x" * 300])
def test_impossible_path_names_are_one_line(hm, tmp_path, name, capsys):
    with pytest.raises(DumpError):
        hm.save(tmp_path / name)
    assert run_cli("emulate", tmp_path / name.replace("\0", "")) == cli.EXIT_USAGE
    assert_one_line(capsys.readouterr().err)


def test_deeply_nested_json_is_one_line(dumped, capsys):
    first_stage_json(dumped).write_text("[" * 100000 + "]" * 100000)
    assert run_cli("emulate", dumped, "--no-record") == cli.EXIT_USAGE
    assert_one_line(capsys.readouterr().err, "corrupt")
    (dumped / "index.json").write_text("[" * 100000 + "]" * 100000)
    assert run_cli("emulate", dumped, "--no-record") == cli.EXIT_USAGE
    assert_one_line(capsys.readouterr().err, "corrupt")


def test_concurrent_emulates_each_record_a_comparison(dumped):
    runs = [subprocess.Popen([sys.executable, "-c", CLI_CODE, "emulate", str(dumped), "--seed", str(seed)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)}) for seed in range(3)]
    for run in runs:
        out, err = run.communicate(timeout=240)
        assert run.returncode == cli.EXIT_OK, err
    assert thn.load(dumped).last_compare.ok
    assert no_leftovers(dumped)


def test_a_user_file_named_like_a_temp_file_blocks_overwrite(hm, dumped):
    (dumped / f"{TEMP_PREFIX}mine.txt").write_text("mine")
    with pytest.raises(DumpError, match="not part of its dump"):
        hm.save(dumped, overwrite=True)
    assert (dumped / f"{TEMP_PREFIX}mine.txt").read_text() == "mine"


def test_a_file_added_to_the_old_dump_during_the_swap_survives(hm, dumped, monkeypatch):
    real = dump_write._exchange

    def exchange_after_a_user_write(a, b):
        (b / "late.txt").write_text("mine")  # the user saves a note just as the new dump is swapped in
        return real(a, b)

    monkeypatch.setattr(dump_write, "_exchange", exchange_after_a_user_write)
    with pytest.warns(UserWarning, match="kept"):
        hm.save(dumped, overwrite=True)
    kept = [p for p in dumped.parent.rglob("late.txt")]
    assert len(kept) == 1 and kept[0].read_text() == "mine"
    assert thn.load(dumped).func_name == hm.func_name


def test_an_empty_directory_in_an_unwritable_parent_is_filled_in_place(hm, tmp_path):
    parent = tmp_path / "parent"
    (parent / "out").mkdir(parents=True)
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(parent)], capture_output=True).returncode != 0:
            pytest.skip("chattr +i is not available here (root ignores permission bits)")
    else:
        parent.chmod(0o555)
    try:
        hm.save(parent / "out")
        assert len(thn.load(parent / "out").stages) == len(hm.stages)
        assert no_leftovers(parent / "out")
        with pytest.raises(DumpError, match="cannot write the dump"):  # a swap needs the parent
            hm.save(parent / "out", overwrite=True)
        assert len(thn.load(parent / "out").stages) == len(hm.stages)
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(parent)], capture_output=True)
        parent.chmod(0o755)


def test_magic_overwrite_without_dump_is_a_usage_error(shell):
    result, cap = run_magic(shell, "%%hybrid_build m --no-widget --overwrite\nfunc\n")
    assert not result.success
    assert_one_line(cap.stderr, "UsageError", "--overwrite goes with --dump")


def test_a_report_into_a_pipe_is_written_through_not_replaced(dumped, tmp_path):
    import stat as stat_module

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(pipe.read_bytes()))
    reader.start()
    try:
        assert run_cli("report", dumped, "-o", pipe) == cli.EXIT_OK
    finally:
        if reader.is_alive():  # unblock the reader if nothing was written
            try:  # non-blocking: the reader may have just finished, and a blocking open would wait forever
                os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        reader.join(timeout=60)
    assert stat_module.S_ISFIFO(os.lstat(pipe).st_mode)
    assert received and received[0].startswith(b"<!DOCTYPE html")
