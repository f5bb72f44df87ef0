"""Verify a whole model: every kernel, every changed pass, against a reference, on all cores or a cluster.

:func:`verify` lowers a Relax ``IRModule`` the way TVM's backends do (``LegalizeOps`` … ``FuseTIR``),
takes every PrimFunc, and turns each into an independent **job**: the PrimFunc as TVM JSON
(``tvm.ir.save_json``) plus the settings, with a user's schedule and custom passes serialised by
cloudpickle (by value for code defined in a notebook or script).  A job builds its kernel with the
capture (schedule applied, custom passes inserted as stages of their own), emulates every changed
stage before MakePackedAPI on seeded inputs, compares with the reference and, for a wrong kernel,
names the first divergent pass.  The result is a plain dict, so jobs move between processes and
machines without pickling TVM objects.

Where jobs run:

* default: ``workers`` worker processes forked from a ``forkserver`` that has already imported TVM
  (a fork costs milliseconds), each running one job at a time and reused for the next, so that a
  process's cold first build and emulation are paid once per worker, not once per kernel.  A job
  that crashes (a segfault, an abort) takes only its own worker down and is reported as
  ``"crashed"``; one that runs past ``timeout`` is killed with its worker and reported as
  ``"timeout"``; either way a fresh worker takes the jobs still pending;
* ``client=dask.distributed.Client(...)``: the same job function mapped over the cluster
  (``client.map``); a job that kills its Dask worker surfaces as ``KilledWorker`` → ``"crashed"``;
* ``workers=0``: in this process, one job after another (no isolation; for debugging and for custom
  passes given as ``tvm.transform.Pass`` objects, which cannot be shipped).

No IPython, no widgets: :mod:`tvm_hybrid_nb.verify_report` renders the report, the magic and the
command line show it.

One module per concern, each importing only those above it in this list (the package re-exports
the public names):

``settings``
    the settings' vocabulary (references, stage selections, default time limit) and :class:`VerifyError`
``kernels``
    a model's kernels, schedules, custom passes in TVM's pipeline, and :func:`build_kernel`
``results``
    :class:`KernelResult`, :class:`VerifyReport` and :func:`load_report`: plain data, JSON, HTML
``jobs``
    one job as plain data (:func:`make_job`) and running it anywhere (:func:`run_job`)
``local``
    the local worker pool forked from a forkserver (:func:`run_local`)
``cluster``
    the Dask path (:func:`run_dask`)
``entry``
    :func:`verify`: settings checked, jobs made, a runner chosen, the report assembled
"""
from __future__ import annotations

from .cluster import run_dask
from .entry import default_workers, p_name, verify
from .jobs import make_job, run_job
from .kernels import (PIPELINE_NAME, apply_schedule, build_kernel, dlight_rules, lower_model, model_kernels,
                      pipeline_pass_names, register_pipeline)
from .local import FORKSERVER_PRELOAD, run_local
from .results import FAILING_OUTCOMES, OUTCOMES, KernelResult, VerifyReport, load_report
from .settings import DEFAULT_TIMEOUT, REFERENCES, STAGE_SELECTIONS, VerifyError

__all__ = [
    "DEFAULT_TIMEOUT", "FAILING_OUTCOMES", "FORKSERVER_PRELOAD", "KernelResult", "OUTCOMES", "PIPELINE_NAME",
    "REFERENCES", "STAGE_SELECTIONS", "VerifyError", "VerifyReport", "apply_schedule", "build_kernel",
    "default_workers", "dlight_rules", "load_report", "lower_model", "make_job", "model_kernels", "p_name",
    "pipeline_pass_names", "register_pipeline", "run_dask", "run_job", "run_local", "verify",
]
