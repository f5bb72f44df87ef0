"""Helpers shared by the tests that walk a module's stages."""
from __future__ import annotations


def device_stages(hm):
    """The stages before MakePackedAPI that the emulator runs and that changed the IR (stage 0 too)."""
    return [s for s in hm.stages[:hm.packed_api_index] if s.emulatable and (s.changed or s.index == 0)]
