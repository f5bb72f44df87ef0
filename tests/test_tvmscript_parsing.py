"""``remembered_module_misses``: TVMScript's decorators parse the same functions, and
``inspect.stack()`` says the same, with the module misses remembered; the original is restored.
(How much faster: bench/tvmscript_import.py.)"""
import contextlib
import importlib
import inspect

import tvm_ffi
from tvm.script import tirx as T

from tvm_hybrid_nb.tvmscript_parsing import remembered_module_misses


def _frames():
    return [(f.filename, f.lineno, f.function, f.code_context) for f in inspect.stack()[1:]]


def _scaled_copy(n):
    @T.prim_func
    def copy(A: T.Buffer((n,), "float32"), B: T.Buffer((n,), "float32")):  # n: a closure variable
        for i in range(n):
            B[i] = A[i] * T.float32(2)
    return copy


def test_the_stack_and_the_parsed_functions_are_the_same():
    original = inspect.getmodule
    stacks, funcs = [], []
    for remembered in (False, True, True):
        with remembered_module_misses() if remembered else contextlib.nullcontext():
            stacks.append(_frames())
            funcs.append(_scaled_copy(12))
            if remembered:
                assert inspect.getmodule is not original
        assert inspect.getmodule is original
    assert stacks[0] == stacks[1] == stacks[2]
    assert all(tvm_ffi.structural_equal(funcs[0], f) for f in funcs[1:])
    assert "T.Buffer((12,), " in funcs[0].script()  # the closure variable was resolved


def test_a_pseudo_file_is_answered_as_the_scan_answers_it():
    frame_code = importlib._bootstrap._find_and_load.__code__  # a frozen module's code: no file on disk
    filename = frame_code.co_filename
    assert filename.startswith("<frozen")
    want = inspect.getmodule(frame_code, filename)
    with remembered_module_misses():
        with remembered_module_misses():  # nested: the outer one serves
            assert [inspect.getmodule(frame_code, filename) for _ in range(3)] == [want] * 3
        assert inspect.getmodule(inspect, inspect.__file__) is inspect  # real modules as before
