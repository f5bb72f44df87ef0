"""thn.verify: every kernel of a small Relax model, at every changed pass, on worker processes and Dask."""
from __future__ import annotations

import inspect
import json
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op, spec

from tvm_hybrid_nb.verification import VerifyError, load_report, model_kernels, verify

GELU_KERNEL = "fused_matmul_add_gelu"


class Block(nn.Module):
    """LayerNorm → Linear → GELU → Linear, residual, softmax: six kernels after FuseTIR."""

    def __init__(self, d: int = 16, h: int = 32):
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, h)
        self.fc2 = nn.Linear(h, d)

    def forward(self, x):
        y = self.fc2(op.gelu(self.fc1(self.ln(x))))
        return op.softmax(x + y, axis=-1)


@pytest.fixture(scope="module")
def model():
    mod, _ = Block().export_tvm(spec={"forward": {"x": spec.Tensor((4, 16), "float32")}})
    return mod


def halves_become_quarters():
    """A deliberately wrong custom pass: every float constant 0.5 becomes 0.25."""
    def rewrite(node):
        if isinstance(node, tirx.FloatImm) and node.value == 0.5:
            return tirx.FloatImm(str(node.ty), 0.25)
        return node

    @tirx.transform.prim_func_pass(opt_level=0, name="HalvesBecomeQuarters")
    def wrong(func, mod, ctx):
        return tvm_ffi.structural_map(func, (tirx.FloatImm, rewrite))

    return wrong


def _has_half(func) -> bool:
    found = []
    tvm_ffi.structural_map(func, (tirx.FloatImm, lambda n: found.append(n.value) or n))
    return 0.5 in found


def _without_times(report) -> dict:
    data = report.to_dict()
    for key in ("seconds", "runner", "workers"):
        data.pop(key)
    for kernel in data["kernels"]:
        kernel.pop("seconds")
    return data


def test_a_model_verifies_clean_on_two_workers_exactly_as_serially(model):
    seen = []
    parallel = verify(model, workers=2, progress=lambda done, total, k: seen.append((done, total, k and k.name)))
    kernels = model_kernels(model, tvm.target.Target("llvm"))
    assert [k.name for k in parallel.kernels] == list(kernels) and len(kernels) == 6
    assert parallel.ok and parallel.counts["ok"] == 6, str(parallel)
    assert all(k.stages_checked >= 5 for k in parallel.kernels)
    assert seen[0] == (0, 6, None) and sorted(d for d, _, _ in seen) == list(range(7)) and {t for _, t, _ in seen} == {6}
    serial = verify(model, workers=1)
    assert _without_times(serial) == _without_times(parallel)
    assert parallel.runner == "local" and parallel.workers == 2
    # JSON round trip
    assert _without_times(load_report(parallel.to_json())) == _without_times(parallel)


@pytest.fixture(scope="module")
def wrong_pass_report(model):
    return verify(model, workers=2, passes=[("tirx.FlattenBuffer", halves_become_quarters)])


def test_a_wrong_custom_pass_is_found_in_the_kernels_it_changes_at_that_pass(model, wrong_pass_report, tmp_path):
    report = wrong_pass_report
    kernels = model_kernels(model, tvm.target.Target("llvm"))
    changed = {name for name, func in kernels.items() if _has_half(func)}
    assert changed == {GELU_KERNEL}  # the model's only 0.5 is GELU's
    wrong = {k.name for k in report.kernels if k.outcome == "wrong"}
    assert wrong == changed, str(report)
    gelu = report.kernel(GELU_KERNEL)
    assert gelu.pass_name == "HalvesBecomeQuarters"
    assert "differs from native" in gelu.reason
    assert not report.ok and report.counts == {"ok": 5, "refused": 0, "wrong": 1, "crashed": 0, "timeout": 0}
    assert report.passes == ["HalvesBecomeQuarters after tirx.FlattenBuffer"]
    # The rebuilt kernel has the custom pass as a stage of its own, right after FlattenBuffer.
    hm = report.hybrid_module(GELU_KERNEL)
    names = [s.name for s in hm.stages]
    assert names[names.index("tirx.FlattenBuffer") + 1] == "HalvesBecomeQuarters"
    html = report.to_html(tmp_path / "report.html")
    assert (tmp_path / "report.html").read_text() == html
    assert "HalvesBecomeQuarters" in html and GELU_KERNEL in html and "<script" not in html
    assert json.loads(report.to_json())["counts"]["wrong"] == 1


def crash_or_hang(func):
    """A schedule that kills its process on the softmax kernel and hangs on the transposes."""
    name = str(func.attrs["global_symbol"])
    if name == "softmax":
        os.abort()
    if name.startswith("transpose"):
        time.sleep(120)
    return None


def test_a_crashing_or_hanging_kernel_costs_only_its_own_worker(model):
    start = time.perf_counter()
    report = verify(model, workers=2, schedule=crash_or_hang, timeout=4)
    assert time.perf_counter() - start < 60
    outcomes = {k.name: k.outcome for k in report.kernels}
    assert outcomes == {"layer_norm": "ok", "transpose": "timeout", "transpose1": "timeout", "softmax": "crashed",
                        "fused_matmul1_add1_add2": "ok", GELU_KERNEL: "ok"}, str(report)
    assert "SIGABRT" in report.kernel("softmax").reason
    assert not report.ok


def test_a_worker_runs_kernel_after_kernel_and_is_replaced_when_it_crashes_or_hangs(model, tmp_path):
    log = tmp_path / "pids.txt"

    def log_then_crash_or_hang(func):
        """Writes which process built which kernel; kills its process on softmax, hangs on transpose."""
        name = str(func.attrs["global_symbol"])
        with open(log, "a") as f:
            f.write(f"{name} {os.getpid()}\n")
        if name == "softmax":
            os.abort()
        if name == "transpose":
            time.sleep(120)
        return None

    report = verify(model, workers=1, schedule=log_then_crash_or_hang, timeout=4)
    outcomes = {k.name: k.outcome for k in report.kernels}
    assert outcomes == {"layer_norm": "ok", "transpose": "timeout", "transpose1": "ok", "softmax": "crashed",
                        "fused_matmul1_add1_add2": "ok", GELU_KERNEL: "ok"}, str(report)
    pid = dict(line.split() for line in log.read_text().splitlines())
    assert list(pid) == list(outcomes)  # one worker: the kernels in the model's order
    # One process per run of kernels between failures: reused while its jobs succeed, replaced after
    # the job that hung (killed) and after the one that crashed it.
    assert pid["layer_norm"] == pid["transpose"]
    assert pid["transpose1"] == pid["softmax"]
    assert pid["fused_matmul1_add1_add2"] == pid[GELU_KERNEL]
    assert len({pid["layer_norm"], pid["softmax"], pid[GELU_KERNEL], str(os.getpid())}) == 4


def test_the_same_run_on_a_dask_cluster_gives_the_identical_report(model, wrong_pass_report, tmp_path):
    distributed = pytest.importorskip("distributed")
    passes = [("tirx.FlattenBuffer", halves_become_quarters)]
    local = wrong_pass_report
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) \
            as cluster, distributed.Client(cluster) as client:
        remote = verify(model, client=client, passes=passes)
        # The command line reaches the same cluster through --scheduler.
        from tvm_hybrid_nb.cli import main

        script = tmp_path / "wrong.py"
        script.write_text(CLI_SCRIPT + '\npasses = [("tirx.FlattenBuffer", halves_become_quarters)]\n')
        status = main(["verify", str(script), "--scheduler", cluster.scheduler_address,
                       "--json", str(tmp_path / "remote.json")])
    assert remote.runner == "dask" and remote.workers == 2
    assert _without_times(remote) == _without_times(local)
    assert remote.kernel(GELU_KERNEL).outcome == "wrong"
    assert status == 1
    cli_report = load_report((tmp_path / "remote.json").read_text())
    assert cli_report.runner == "dask" and cli_report.counts["wrong"] == 1
    assert cli_report.kernel(GELU_KERNEL).pass_name == "HalvesBecomeQuarters"


def test_bad_settings_are_one_clear_error(model):
    with pytest.raises(VerifyError, match="no pass named 'tirx.NoSuchPass'"):
        verify(model, passes=[("tirx.NoSuchPass", halves_become_quarters)])
    with pytest.raises(VerifyError, match="cannot be sent to worker processes"):
        verify(model, passes=[("tirx.FlattenBuffer", halves_become_quarters())], workers=2)
    with pytest.raises(VerifyError, match="reference must be one of"):
        verify(model, reference="numpy")
    with pytest.raises(VerifyError, match="schedule must be"):
        verify(model, schedule="tuned")
    with pytest.raises(VerifyError, match="cannot verify a int"):
        verify(3)


def test_in_process_runs_take_pass_objects_and_reference_input(model):
    report = verify(model, workers=0, reference="input",
                    passes=[("tirx.FlattenBuffer", halves_become_quarters())])
    assert report.runner == "in-process"
    assert {k.name for k in report.kernels if k.outcome == "wrong"} == {GELU_KERNEL}
    assert report.kernel(GELU_KERNEL).pass_name == "HalvesBecomeQuarters"
    assert "differs from input" in report.kernel(GELU_KERNEL).reason


CLI_SCRIPT = '''
import tvm_ffi
from tvm import tirx
from tvm.relax.frontend import nn
from tvm.relax.frontend.nn import op, spec


class Block(nn.Module):
    def __init__(self):
        self.fc1 = nn.Linear(16, 32)

    def forward(self, x):
        return op.softmax(op.gelu(self.fc1(x)), axis=-1)


mod, _ = Block().export_tvm(spec={"forward": {"x": spec.Tensor((4, 16), "float32")}})


''' + inspect.getsource(halves_become_quarters)  # the script defines the same wrong pass as these tests


def test_the_command_line_writes_the_report_and_exits_1_when_a_kernel_is_wrong(tmp_path, capsys):
    from tvm_hybrid_nb.cli import main

    clean = tmp_path / "clean.py"
    clean.write_text(CLI_SCRIPT)
    wrong = tmp_path / "wrong.py"
    wrong.write_text(CLI_SCRIPT + '\npasses = [("tirx.FlattenBuffer", halves_become_quarters)]\n')
    assert main(["verify", str(clean), "--out", str(tmp_path / "clean.html"), "--workers", "2"]) == 0
    assert "OK: 3 kernels (3 ok)" in capsys.readouterr().out
    status = main(["verify", str(wrong), "--out", str(tmp_path / "wrong.html"), "--workers", "2",
                   "--json", str(tmp_path / "wrong.json")])
    out = capsys.readouterr()
    assert status == 1, out
    assert "fused_matmul_add_gelu: wrong at HalvesBecomeQuarters" in out.out
    assert "verify: 100%" in out.err  # the tqdm bar
    data = json.loads((tmp_path / "wrong.json").read_text())
    assert data["counts"]["wrong"] == 1 and data["ok"] is False
    assert "HalvesBecomeQuarters" in (tmp_path / "wrong.html").read_text()
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    assert main(["verify", str(empty)]) == 2
    assert "defines neither verify_target() nor mod" in capsys.readouterr().err


def test_the_magic_shows_the_table_and_a_row_opens_the_kernels_explorer(model):
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output
    from ipywidgets.widgets.widget import _instances as widget_instances

    from tvm_hybrid_nb.ui import Explorer, VerifyView

    shell = InteractiveShell.instance()
    assert shell.run_cell("%load_ext tvm_hybrid_nb").success
    kernels = model_kernels(model, tvm.target.Target("llvm"))
    # A list of PrimFuncs is a model too (named by their global_symbol).
    shell.user_ns["block"] = [kernels[n].with_attr("global_symbol", n) for n in ("transpose", GELU_KERNEL)]
    shell.user_ns["wrong_passes"] = [("tirx.FlattenBuffer", halves_become_quarters)]
    with capture_output() as cap:
        result = shell.run_cell("%hybrid_verify block --workers 2 --passes wrong_passes")
    assert result.success, result.error_in_exec
    views = [widget_instances[o.data["application/vnd.jupyter.widget-view+json"]["model_id"]]
             for o in cap.outputs if "application/vnd.jupyter.widget-view+json" in o.data]
    assert len(views) == 1 and isinstance(views[0], VerifyView)
    view = views[0]
    assert view.progress.value == view.progress.max == 2
    assert "FAILED: 2 kernels (1 ok, 1 wrong)" in view.status.value
    report = shell.user_ns["verify_report"]
    assert report.kernel(GELU_KERNEL).pass_name == "HalvesBecomeQuarters"
    assert len(view.table.children) == 3  # header + one row per kernel
    view.buttons[GELU_KERNEL].click()
    explorer = view.detail.children[-1]
    assert isinstance(explorer, Explorer) and explorer.hm.func_name == GELU_KERNEL
    assert "HalvesBecomeQuarters" in [s.name for s in explorer.hm.stages]
    with capture_output() as cap:
        bad = shell.run_cell("%hybrid_verify block --passes '[(\"tirx.Nope\", None)]'")
    assert not bad.success and "no pass named 'tirx.Nope'" in str(bad.error_in_exec)


def test_the_notebook_verifies_the_block_then_names_the_wrong_pass():
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient

    path = Path(__file__).resolve().parent.parent / "notebooks" / "03_verify_a_model.ipynb"
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:  # committed without outputs
        assert cell.cell_type != "code" or (cell.outputs == [] and cell.execution_count is None)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                   if o.output_type == "stream" and o.get("name") == "stdout")
    assert re.search(r"^OK: \d+ kernels \(\d+ ok\)", text, re.M), text
    broken = re.findall(r"^broken kernel (\S+): first divergent pass (\S+)$", text, re.M)
    assert broken and all("gelu" in name and pass_name == "HalvesBecomeQuarters" for name, pass_name in broken), text
    assert "['tirx.FlattenBuffer', 'HalvesBecomeQuarters']" in text
    widgets = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
               if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert len(widgets) == 1  # the %hybrid_verify table


def test_symbolic_sizes_come_from_sizes_and_every_stage_can_be_emulated():
    class Scale(nn.Module):
        def forward(self, x):
            return op.softmax(x * 2.0, axis=-1)

    mod, _ = Scale().export_tvm(spec={"forward": {"x": spec.Tensor(("n", 8), "float32")}})
    refused = verify(mod, workers=0)
    assert {k.outcome for k in refused.kernels} == {"refused"}, str(refused)
    assert all("symbolic size n" in k.reason for k in refused.kernels)
    assert refused.ok  # refused means "not checked", not "wrong"
    changed = verify(mod, workers=0, sizes={"n": 5})
    assert changed.ok and {k.outcome for k in changed.kernels} == {"ok"}, str(changed)
    every = verify(mod, workers=0, sizes={"n": 5}, stages="all")
    assert every.ok
    for a, b in zip(changed.kernels, every.kernels):
        assert b.stages_checked > a.stages_checked
