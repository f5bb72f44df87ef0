"""Helpers shared by the tests that walk a module's stages."""
from __future__ import annotations


def device_stages(hm):
    """The stages before MakePackedAPI that the emulator runs and that changed the IR (stage 0 too)."""
    return [s for s in hm.stages[:hm.packed_api_index] if s.emulatable and (s.changed or s.index == 0)]


def built_with_thread_sync_followed_by(func, target, scope, seq_mapper, name):
    """``thn.build(func, target=target)`` with every ``s_tir.ThreadSync(scope)`` followed by a pass
    ``name`` that maps each ``SeqStmt`` through ``seq_mapper`` (a ThreadSync that misses a barrier:
    drop one it placed)."""
    import tvm
    import tvm_ffi
    from tvm import s_tir, tirx

    import tvm_hybrid_nb as thn

    @tirx.transform.prim_func_pass(opt_level=0, name=name)
    def after(f, _mod, _ctx):
        return tvm_ffi.structural_map(f, (tirx.SeqStmt, seq_mapper))

    thread_sync = s_tir.transform.ThreadSync
    s_tir.transform.ThreadSync = lambda sc: (tvm.transform.Sequential([thread_sync(sc), after])
                                             if sc == scope else thread_sync(sc))
    try:
        return thn.build(func, target=target)
    finally:
        s_tir.transform.ThreadSync = thread_sync
