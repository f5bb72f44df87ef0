"""Tensor-core tiles under the sanitizers: a fragment loaded straight from global memory.

Every thread of the warp loads the whole fragment in the emulation, alike, so fast mode keeps one
copy of it and writes it through a view without the thread axis; under ``check=True`` the read of
global memory came back spread over the race record's thread axis (32 values where one was
expected) and the store into the view failed ("could not broadcast") at every stage.  A read now has
the shape it has without the sanitizer.
"""
from __future__ import annotations

import numpy as np
from tvm.script import tirx as T

import tvm_hybrid_nb as thn
from stage_helpers import device_stages


@T.prim_func
def tile_transposed(A: T.Buffer((256,), "float16"), B: T.Buffer((256,), "float16")):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    bx = T.launch_thread("blockIdx.x", 1)
    tx = T.launch_thread("threadIdx.x", 32)
    tile = T.alloc_buffer((256,), "float16", scope="shared")
    acc = T.alloc_buffer((256,), "float16", scope="wmma.accumulator")
    T.tvm_load_matrix_sync(acc.data, 16, 16, 16, 0, T.tvm_access_ptr(T.type_annotation("float16"), A.data, 0, 256, 1),
                           16, "row_major")
    T.tvm_store_matrix_sync(acc.data, 16, 16, 16, 0,
                            T.tvm_access_ptr(T.type_annotation("float16"), tile.data, 0, 256, 2), 16, "col_major")
    for i in range(8):
        B[i * 32 + tx] = tile[i * 32 + tx]  # ThreadSync puts a barrier before this loop


def test_a_tile_read_back_after_its_barrier_is_clean_and_right_at_every_stage():
    a = np.arange(256, dtype=np.float16) / 8
    hm = thn.build(tile_transposed, target="cuda")
    for stage in device_stages(hm):
        for mode in ("exact", "fast"):
            out = hm.emulate(a, np.zeros(256, np.float16), stage=stage.index, mode=mode, check=True)
            np.testing.assert_array_equal(out, a.reshape(16, 16).T.reshape(-1), err_msg=f"{stage.label} {mode}")
