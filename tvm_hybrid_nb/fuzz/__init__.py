"""Schedule fuzzer: random computes × random schedules, emulated at every stage against the native build.

Each case is a *compute* (made deterministically from a kind and a seed: elementwise expression
trees, reductions, conv-like windows, cast chains and two-block pipelines, over float16/32/64 and
int8/uint8/int32, some with a symbolic size ``n``) and a list of *schedule steps* (split with
dividing and non-dividing factors, reorder, fuse, parallel, vectorize, unroll, cache_read,
cache_write, compute_at, reverse_compute_at, compute_inline, decompose_reduction, rfactor,
transform_layout).  A step that TVM refuses (``ScheduleError``) is skipped, as in TVM's own random
schedule tests.  The case is built with :func:`tvm_hybrid_nb.build`; stage 0 and every stage that
changed the IR (or every stage) before MakePackedAPI is emulated in ``exact`` and ``fast`` mode:
the two must be bit-identical and both must match the native kernel within
:func:`~tvm_hybrid_nb.compare.compare_arrays`' tolerances (integers exactly).

A failing case is reduced (schedule steps dropped one at a time while the same failure remains) and
printed as a reproducer: kind, seed and steps, runnable with :func:`check_case`.

Run ``python -m tvm_hybrid_nb.fuzz --n 500 --seed 7``; exit status 0 when every case passed, 1
otherwise.

One module per concern, each importing only those above it in this list (the package re-exports
the public names):

``computes``
    the random TE computes (:func:`make_compute`, :data:`KINDS`)
``schedules``
    schedule steps as plain data: drawing, applying and replaying them (:func:`schedule_for`)
``cases``
    :class:`FuzzCase`, :class:`CaseResult` and :func:`random_case`
``findings``
    the evidence that a disagreement is TVM's miscompilation, not the emulator's failure
``oracle``
    checking one case against the native kernel (:func:`check_case`, :func:`check_case_within`)
``runner``
    the batch run, reduction of failing cases, :class:`FuzzReport` and the command line (:func:`main`)
"""
from __future__ import annotations

from .cases import TVM_FINDINGS, CaseResult, FuzzCase, random_case
from .computes import KINDS, Compute, make_compute
from .oracle import CaseTimeout, check_case, check_case_within
from .runner import FuzzReport, main, reduce_case, run_fuzz
from .schedules import Step, apply_step, schedule_for

__all__ = ["KINDS", "FuzzCase", "CaseResult", "make_compute", "random_case", "check_case", "reduce_case",
           "run_fuzz", "main"]
