"""Dumps of a :class:`~tvm_hybrid_nb.module.HybridModule` on disk: save, load and resume the pipeline.

A dump directory holds, for every stage ``NNN`` (the stage number, zero-padded) and pass name ``P``:

``NNN_P.py``
    The stage's hybrid source, standalone: ``python NNN_P.py`` runs the kernel on seeded random
    inputs with numpy alone and prints a checksum of the outputs; importing it gives the kernel
    function.  Stages that cannot be emulated get a file that says why and exits with status 1.
``NNN_P.tvmscript.py``
    The module's TVMScript (edit it and :func:`resume` from it).
``NNN_P.json``
    The module as ``tvm.ir.save_json`` wrote it (exact; :func:`load` and :func:`resume` read it).
``index.json``
    The stages (number, pass name, seconds, changed, emulatable, reason, file names), the target,
    the TVM version and what is needed to rebuild the native kernel.

:func:`save` writes a dump, :func:`load` reads one back into a module that can be browsed and
emulated without recompiling (the native build is made on demand), and :func:`resume` continues
the pipeline from one dumped stage.

Layering: writing (:func:`save`, the runnable files, :func:`check_output_directory`) lives in
:mod:`tvm_hybrid_nb.dump_write`, below :mod:`tvm_hybrid_nb.module`, because ``HybridModule.save``
calls it; this package reads dumps back into :class:`DumpedModule` (a ``HybridModule``), so it sits
above ``module`` and re-exports the writing functions under their usual names.

One module per concern, each importing only those above it in this list (the package re-exports
the public names):

``index``
    reading and checking ``index.json`` (:func:`read_index`), field by field
``stage_json``
    a stage's module JSON: the node-graph check before TVM reads it (:func:`check_node_graph`)
``pipeline``
    finishing the default pipeline from a stage, and making a pass from its name (:func:`resolve_pass`)
``dumped``
    :class:`DumpedModule`, whose native build finishes the dump's pipeline
``loading``
    :func:`load` and :func:`record_compare`
``resuming``
    :func:`resume` from a stage's ``.json`` or ``.tvmscript.py``
"""
from __future__ import annotations

from ..dump_write import (DEFAULT_SYMBOLIC_SIZE, FORMAT, FORMAT_VERSION, INDEX_FILE, check_output_directory,
                          checksum, runnable_source, save, stage_stem, symbolic_sizes)
from .dumped import DumpedModule
from .index import read_index
from .loading import load, record_compare
from .pipeline import resolve_pass
from .resuming import SPLIT_PASS, resume
from .stage_json import MAX_JSON_DEPTH, check_node_graph

__all__ = ["save", "load", "resume", "record_compare", "read_index", "check_output_directory",
           "checksum", "runnable_source", "stage_stem", "symbolic_sizes", "resolve_pass", "DumpedModule",
           "FORMAT", "FORMAT_VERSION", "INDEX_FILE", "DEFAULT_SYMBOLIC_SIZE", "SPLIT_PASS"]
