"""The pieces of ``bench/run.py``, one module per concern (``python bench/run.py`` is the entry point).

- :mod:`.cases`: the kernels and schedules measured (CPU rows; GPU rows for the cuda target).
- :mod:`.timing`: timing helpers (best of, autorange, exact mode extrapolated from its progress).
- :mod:`.report`: the targets, number formats, tables, the targets' check and the plot.
- :mod:`.measure`: the measurements (emulation vs native, capture overhead, bisect, GPU rows).
- :mod:`.peer_runs`: timing the peers (numba-cuda's simulator, Triton's interpreter) in
  ``bench/peers.py`` server processes.
- :mod:`.machine`: the machine, git commit and load average recorded with the results.

Each module imports only those above it in this list.
"""
from pathlib import Path

#: bench/ (peers.py, the default output folder) and the repository root.
HERE = Path(__file__).resolve().parent.parent
ROOT = HERE.parent
