"""The notebooks run headless (nbclient) without any error, and are committed without outputs."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
NAMES = ["01_quickstart.ipynb", "02_pass_explorer.ipynb"]


def execute(name: str):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    # kernel "python3" is the interpreter running the tests (ipykernel's native kernel spec).
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()  # raises on any error
    return nb


def stream_text(nb) -> str:
    return "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs
                   if o.output_type == "stream" and o.get("name") == "stdout")


def widget_outputs(nb) -> list:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
            if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]


@pytest.mark.parametrize("name", NAMES)
def test_committed_without_outputs(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{name} has outputs"
    assert "widgets" not in nb.metadata


def test_quickstart_runs():
    nb = execute("01_quickstart.ipynb")
    text = stream_text(nb)
    assert "def main(" in text                       # the hybrid source was printed
    assert "emulation agrees with numpy" in text
    assert "MATCH: stage 0 input" in text and "MISMATCH" not in text
    assert "through the hybrid op matches numpy" in text
    explorer, failed = widget_outputs(nb)
    assert "thn-pass-table" in explorer["data"]["text/html"]  # useful without widget state too
    # The failure view: the name is bound, the failing pass named, the stage before it emulated.
    assert "TVM lowering failed in pass tirx.VectorizeLoop" in text
    assert "lowering FAILED in tirx.VectorizeLoop" in failed["data"]["text/plain"]
    assert "still computes 2 * x" in text


def test_pass_explorer_runs_and_finds_the_broken_pass():
    nb = execute("02_pass_explorer.ipynb")
    text = stream_text(nb)
    assert "+        A_1 = A.view(272)" in text       # the FlattenBuffer diff
    assert "First divergent pass:" in text and "BrokenConstant" in text
    verdicts = dict(re.findall(r"^\d+ (\w+) +(MATCH|MISMATCH) against blur_reference$", text, re.M))
    assert verdicts["FlattenBuffer"] == "MATCH" and verdicts["BrokenConstant"] == "MISMATCH"
    assert "native vs the last emulatable stage: MATCH" in text
    assert len(widget_outputs(nb)) == 2
    diffs = [o["data"]["text/html"] for c in nb.cells if c.cell_type == "code" for o in c.outputs
             if "thn-sbs" in o.get("data", {}).get("text/html", "")]
    assert len(diffs) == 1 and "0 input" in diffs[0] and 'class="diff_' in diffs[0]
    assert "T.func_attr" not in diffs[0]  # attributes hidden
