"""Command line: dump / resume / report / emulate, --help, and exit codes scripts can rely on."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import tvm

from tvm_hybrid_nb import cli, dump

SCRIPT = textwrap.dedent("""
    from tvm import te, s_tir
    A = te.placeholder((32,), "int32", name="A")
    B = te.compute((32,), lambda i: A[i] * 3 + 1, name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    sch.split(i, [None, 8])
    schedule = sch
    if __name__ == "__main__":
        raise SystemExit("the main block must not run under dump")
""")


def run_cli(*args: str) -> int:
    return cli.main([str(a) for a in args])


@pytest.fixture(scope="module")
def dumped(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    (root / "kernel.py").write_text(SCRIPT)
    assert run_cli("dump", root / "kernel.py", "--out", root / "out") == cli.EXIT_OK
    return root


def stage_number(directory: Path, name: str) -> int:
    index = json.loads((directory / "index.json").read_text())
    return next(e["index"] for e in index["stages"] if e["name"] == name)


def test_python_m_help_documents_commands_and_exit_codes():
    run = subprocess.run([sys.executable, "-m", "tvm_hybrid_nb", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0
    for word in ("dump", "resume", "report", "emulate", "exit status", "  2  usage error"):
        assert word in run.stdout
    run = subprocess.run([sys.executable, "-m", "tvm_hybrid_nb", "emulate", "/no/such/dump"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == cli.EXIT_USAGE
    assert run.stderr.strip() == "error: /no/such/dump: no such dump directory"


@pytest.mark.parametrize("command", ["dump", "resume", "report", "emulate"])
def test_every_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as info:
        run_cli(command, "--help")
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert f"usage: python -m tvm_hybrid_nb {command}" in out and "exit status" in out
    if command == "dump":
        assert "hybrid_target()" in out and "schedule" in out


def test_no_command_is_a_usage_error(capsys):
    assert run_cli() == cli.EXIT_USAGE
    assert "usage:" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        run_cli("dump")  # missing SCRIPT and --out
    assert info.value.code == cli.EXIT_USAGE


def test_dump_writes_a_loadable_dump_whose_files_run(dumped, capsys):
    out = dumped / "out"
    index = json.loads((out / "index.json").read_text())
    assert index["func_name"] == "main" and len(index["stages"]) >= 50
    run = subprocess.run([sys.executable, next(out.glob("000_*.py")).name, "--seed", "4"], cwd=out,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    a = np.random.default_rng(4).integers(-100, 100, 32, endpoint=True, dtype=np.int32)
    assert run.stdout.splitlines() == dump.checksum(
        [p for p in dump.load(out).params], [a, a * 3 + 1])


def test_dump_hybrid_target_callable_and_script_target(tmp_path, capsys):
    script = tmp_path / "k.py"
    script.write_text(textwrap.dedent("""
        from tvm import te
        target = {"kind": "llvm", "mcpu": "x86-64"}
        def hybrid_target():
            A = te.placeholder((8,), "float32", name="A")
            return [A, te.compute((8,), lambda i: A[i] + 1.0, name="B")]
    """))
    assert run_cli("dump", script, "--out", tmp_path / "d") == cli.EXIT_OK
    assert "dumped" in capsys.readouterr().out
    assert "x86-64" in json.loads((tmp_path / "d" / "index.json").read_text())["target"]


def test_dump_refusals(dumped, tmp_path, capsys):
    assert run_cli("dump", dumped / "kernel.py", "--out", dumped / "out") == cli.EXIT_USAGE
    assert "not empty" in capsys.readouterr().err
    (tmp_path / "none.py").write_text("x = 1\n")
    assert run_cli("dump", tmp_path / "none.py", "--out", tmp_path / "o") == cli.EXIT_USAGE
    assert "defines neither hybrid_target() nor schedule" in capsys.readouterr().err
    (tmp_path / "boom.py").write_text("raise ValueError('boom')\n")
    assert run_cli("dump", tmp_path / "boom.py", "--out", tmp_path / "o") == cli.EXIT_USAGE
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'boom.py'}: the script raised ValueError: boom"
    assert run_cli("dump", tmp_path / "missing.py", "--out", tmp_path / "o") == cli.EXIT_USAGE
    assert not (tmp_path / "o").exists()


def test_emulate_matches_and_records_the_result(dumped, tmp_path, capsys):
    out = tmp_path / "copy"
    shutil.copytree(dumped / "out", out)
    n = stage_number(out, "tirx.FlattenBuffer")
    assert run_cli("emulate", out, "--stage", n, "--seed", 2) == cli.EXIT_OK
    printed = capsys.readouterr().out
    assert printed.startswith(f"MATCH: stage {n} FlattenBuffer") and "0/32 mismatches" in printed
    assert json.loads((out / "index.json").read_text())["last_compare"]["stage"] == f"{n} FlattenBuffer"
    assert run_cli("emulate", out, "--stage", "s_tir.LowerOpaqueBlock") == cli.EXIT_OK


def test_emulate_exit_1_on_mismatch_and_on_a_stage_that_cannot_run(dumped, tmp_path, capsys):
    out = tmp_path / "tampered"
    shutil.copytree(dumped / "out", out)
    n = stage_number(out, "tirx.FlattenBuffer")
    stage_json = next(out.glob(f"{n:03d}_*.json"))
    # the stage now computes A*3+2 while the native build (from stage 0) computes A*3+1
    import tvm_hybrid_nb as thn
    from tvm import s_tir, te
    A = te.placeholder((32,), "int32", name="A")
    B = te.compute((32,), lambda i: A[i] * 3 + 2, name="B")
    other = thn.build(s_tir.Schedule(te.create_prim_func([A, B])))
    stage_json.write_text(tvm.ir.save_json(other.stage("tirx.FlattenBuffer").mod))
    assert run_cli("emulate", out, "--stage", n, "--no-record") == cli.EXIT_MISMATCH
    printed = capsys.readouterr().out
    assert printed.startswith("MISMATCH") and "32/32 mismatches" in printed
    assert json.loads((out / "index.json").read_text())["last_compare"] is None
    last = json.loads((out / "index.json").read_text())["stages"][-1]["index"]
    assert run_cli("emulate", out, "--stage", last) == cli.EXIT_MISMATCH
    assert "cannot be emulated" in capsys.readouterr().err
    assert run_cli("emulate", out, "--stage", 999) == cli.EXIT_USAGE
    assert run_cli("emulate", out, "--stage", "NoSuchPass") == cli.EXIT_USAGE


def test_resume_and_report(dumped, tmp_path, capsys):
    out = dumped / "out"
    k = stage_number(out, "s_tir.LowerOpaqueBlock")
    stage_json = next(out.glob(f"{k:03d}_*.json"))
    assert run_cli("resume", stage_json, "--out", tmp_path / "rest") == cli.EXIT_OK
    assert run_cli("resume", stage_json, "--passes", "tirx.FlattenBuffer,tirx.NarrowDataType(32)",
                   "--out", tmp_path / "two") == cli.EXIT_OK
    printed = capsys.readouterr().out
    assert "ran tirx.FlattenBuffer, tirx.NarrowDataType" in printed
    two = json.loads((tmp_path / "two" / "index.json").read_text())
    assert [e["index"] for e in two["stages"]] == [k, k + 1, k + 2]
    rest = json.loads((tmp_path / "rest" / "index.json").read_text())
    original = json.loads((out / "index.json").read_text())
    assert [e["name"] for e in rest["stages"][1:]] == [e["name"] for e in original["stages"][k + 1:]]
    # the resumed dumps emulate and build natively on their own
    assert run_cli("emulate", tmp_path / "two", "--stage", k + 1) == cli.EXIT_OK
    assert run_cli("emulate", tmp_path / "rest", "--stage", k + 5) == cli.EXIT_OK
    assert run_cli("report", tmp_path / "rest", "-o", tmp_path / "rest.html") == cli.EXIT_OK
    html_text = (tmp_path / "rest.html").read_text()
    assert f'id="stage-{k}"' in html_text and "resumed from" in html_text and "MATCH" in html_text
    assert run_cli("resume", stage_json, "--passes", "Nope", "--out", tmp_path / "x") == cli.EXIT_USAGE
    assert run_cli("resume", stage_json, "--passes", ",", "--out", tmp_path / "x") == cli.EXIT_USAGE
    assert run_cli("report", tmp_path / "nodump", "-o", tmp_path / "x.html") == cli.EXIT_USAGE
    assert not (tmp_path / "x.html").exists()
