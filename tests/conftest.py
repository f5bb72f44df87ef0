"""The tests exercise fast mode's lanes on small kernels, on which fast mode would run the exact
plan (its analysis costs more than their serial run: see ``exact_plan_reason``); that decision is
tested on its own, with the switch back on (tests/test_plan.py).

Collection imports every test module, and with them hundreds of TVMScript functions, each of whose
decorators calls ``inspect.stack()``: collected with the module misses remembered
(:mod:`tvm_hybrid_nb.tvmscript_parsing`), in about a third of the time."""
import pytest

from tvm_hybrid_nb.codegen import cost
from tvm_hybrid_nb.tvmscript_parsing import remembered_module_misses


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session):
    with remembered_module_misses():
        yield


@pytest.fixture(autouse=True)
def _lanes_on_small_kernels(monkeypatch):
    monkeypatch.setattr(cost, "EXACT_PLAN_WHEN_CHEAP", False)
