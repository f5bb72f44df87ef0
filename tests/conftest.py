"""The tests exercise fast mode's lanes on small kernels, on which fast mode would run the exact
plan (its analysis costs more than their serial run: see ``exact_plan_reason``); that decision is
tested on its own, with the switch back on (tests/test_plan.py)."""
import pytest

from tvm_hybrid_nb.codegen import plan


@pytest.fixture(autouse=True)
def _lanes_on_small_kernels(monkeypatch):
    monkeypatch.setattr(plan, "EXACT_PLAN_WHEN_CHEAP", False)
