"""Hybrid code generation: a TIR PrimFunc at any stage before MakePackedAPI → readable numpy Python.

The package has one room per concern; :class:`~.generator.HybridCodegen` is assembled from them:

========================  ==============================================================
``names``                 small data: values, buffer records, lane axes, the namer, ast builders
``analysis``              analyses of TIR (independence, lane axes, access counts), no Python ast
``sharing``               what lanes may share (written alike) or must privatise (written before read)
``guards``                the values a loop's guard lets through
``generator``             the generator: signature, dispatch by node kind, the script's text
``exprs``                 expression semantics (arithmetic, division, casts, intrinsics)
``memory``                loads, stores, bounds, subscripts
``buffers``               allocations, declarations, views
``control``               loops, while, branches, blocks
``lanes``                 fast mode's array lanes, parallel chunks, strided views
``gpu``                   threads in lockstep, barriers, allreduce, launches
``tensorcore``            WMMA intrinsics rewritten (TIR to TIR) into the loads and stores they mean
``sanitize``              instrumentation for ``check=True``
``pyast``                 post-processing of the generated Python ``ast``
========================  ==============================================================
"""
from .generator import HybridCodegen, generate_kernel, kernel_signature, program_text
from .names import GeneratedKernel, Value, ascii_identifier

__all__ = ["GeneratedKernel", "HybridCodegen", "Value", "ascii_identifier", "generate_kernel", "kernel_signature", "program_text"]
