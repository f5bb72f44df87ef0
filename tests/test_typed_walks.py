"""Walks of TIR that call Python only on the node types they look at (``walk_typed``).

A Python callback on every node of ``tvm_ffi.structural_walk`` cost most of the code generation's
walks (about 0.6 us a node); the analyses now name the types they inspect and the walk through the
rest stays in C++.  These tests hold the typed walks to what a walk visiting every node finds.
"""
from __future__ import annotations

import pytest
import tvm
import tvm_ffi
from tvm.script import tirx as T

from tvm_hybrid_nb.codegen.analysis import _has_threads, _thread_extents, node_classes, walk_typed
from tvm_hybrid_nb.codegen.cost import _operations
from tvm_hybrid_nb.codegen.names import _dtype, _is_int


@T.prim_func(s_tir=True)
def gpu_rows(A: T.Buffer((4, 32), "float32"), idx: T.Buffer((4,), "int32"), B: T.Buffer((4, 32), "float32")):
    T.func_attr({"tirx.is_scheduled": True})
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            with T.sblock("row"):
                B[bx, tx] = T.exp(A[idx[bx] % 4, tx] * T.float32(2)) + T.Cast("float32", bx * 32 + tx)


@T.prim_func(s_tir=True)
def host_loop(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
    for i in range(8):
        with T.sblock("copy"):
            B[i] = T.max(A[i], T.float32(0)) - A[7 - i]


def _every_node_operations(expr) -> tuple[int, int]:
    """The count as the walk over every node made it: expression nodes but names and constants,
    integer and boolean arithmetic a quarter, no buffer's shape."""
    quarters, nodes = [0], [0]

    def visit(node):
        if isinstance(node, tvm.ir.expr.Expr):
            if not isinstance(node, (tvm.ir.expr.Constant, tvm.ir.expr.Var)):
                nodes[0] += 1
                dtype = _dtype(node)
                index = (_is_int(dtype) or dtype == "bool") and not isinstance(
                    node, (tvm.ir.expr.Call, tvm.tirx.Cast))
                quarters[0] += 1 if index else 4
            return False
        return not isinstance(node, tvm_ffi.Array)

    tvm_ffi.structural_walk(expr, visit, order="pre")
    return quarters[0] // 4, nodes[0]


def _stores(func) -> list:
    found = []
    tvm_ffi.structural_walk(func.body, lambda n: found.append(n) if isinstance(n, tvm.tirx.BufferStore) else None)
    return found


@pytest.mark.parametrize("func", [gpu_rows, host_loop], ids=["gpu_rows", "host_loop"])
def test_operation_counts_match_a_walk_of_every_node(func):
    stores = _stores(func)
    assert stores
    for store in stores:
        for expr in [store.value, *store.indices]:
            assert _operations(expr) == _every_node_operations(expr)


def test_a_load_counts_its_index_but_not_its_buffers_shape():
    n, i = tvm.tirx.Var("n", "int32"), tvm.tirx.Var("i", "int32")
    buf = tvm.tirx.decl_buffer((n * 4 + 1, n - 1), "float32", name="X")
    load = buf[i + 1, i]
    # Two nodes (the load, its index add): a float operation and a quarter for the index arithmetic.
    assert _operations(load) == _every_node_operations(load) == (1, 2)


def test_thread_facts_from_typed_walks():
    assert _has_threads(gpu_rows.body)
    assert not _has_threads(host_loop.body)
    assert _thread_extents(gpu_rows.body) == {"blockIdx.x": 4, "threadIdx.x": 32}
    assert _thread_extents(host_loop.body) == {}


def test_typed_walk_sees_only_its_types_and_unknown_keys_are_named():
    seen = []
    walk_typed(gpu_rows.body, ("ir.Call", "tirx.For"), lambda n: seen.append(type(n).__name__))
    assert sorted(set(seen)) == ["Call", "For"]
    assert seen.count("For") == 2
    with pytest.raises(KeyError, match="tirx.NoSuchNode"):
        node_classes("tirx.NoSuchNode")
