"""The TIR in TVM's own Python tests, harvested from a local TVM checkout and emulated at every stage.

``python -m tvm_hybrid_nb zoo --tvm-tests PATH/TO/tvm/tests/python`` walks the ``.py`` files under
PATH, finds every ``@T.prim_func`` definition with :mod:`ast` (at module level, in a class body, or
nested in a test function) and, without importing the test module, rebuilds it: the imports and
simple assignments of the scopes around it run in a fresh namespace, then the function's own source
goes through ``tvm.script.parse``.  Each function is built for llvm and run natively on seeded inputs
(the reference), then every changed stage before MakePackedAPI is emulated in fast mode and compared
(:func:`tvm_hybrid_nb.zoo.emulate_stages`).

Functions this TVM cannot construct (TVMScript newer than the installed TVM, or a name only the test
defines at run time) are counted as "not built here"; functions TVM itself cannot build or run for
llvm (GPU kernels, packed-API internals, inputs that trap) as "no native reference"; structural duplicates
once.  Each function runs in a worker process with a time limit and an address-space limit, so a hang
or a crash costs only that function.  TVM's sources are read where the user has them; nothing of them
is shipped with this package.
"""
from __future__ import annotations

from .check import DEFAULT_FLOAT, DEFAULT_SIZE, NOT_TESTED, TESTED, check_function, no_reference_category
from .cli import add_arguments, cli_main
from .harvest import HarvestedFunc, construct, harvest
from .run import CorpusReport, run_corpus

__all__ = ["DEFAULT_FLOAT", "DEFAULT_SIZE", "NOT_TESTED", "TESTED", "CorpusReport", "HarvestedFunc", "add_arguments",
           "check_function", "cli_main", "construct", "harvest", "no_reference_category", "run_corpus"]
