"""What the results record about the run: the machine, the git commit, the load average."""
from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import numpy as np
import tvm

import tvm_hybrid_nb as thn

from . import ROOT


def machine_info() -> dict:
    model = None
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                model = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=True).stdout.strip()
    except Exception:
        nproc = str(len(os.sched_getaffinity(0)))
    try:
        mem = next(ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal"))
        mem_gib = round(int(mem.split()[1]) / 2 ** 20, 1)
    except Exception:
        mem_gib = None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                                    capture_output=True, text=True).stdout.strip())
    except Exception:
        commit, dirty = None, None
    return {"nproc": nproc, "cpu_model": model, "mem_gib": mem_gib, "platform": platform.platform(),
            "python": platform.python_version(), "numpy": np.__version__, "tvm": tvm.__version__,
            "tvm_hybrid_nb": thn.__version__, "TVM_NUM_THREADS": os.environ.get("TVM_NUM_THREADS"),
            "git_commit": commit, "git_dirty": dirty}


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"
