"""The arguments of a run as the kernel gets them: TVM tensors for a native run, aliasing.

:func:`_native_tensor` makes the TVM tensor a native run passes for one parameter (a copy on the
device, a buffer of vectors without its lanes axis, or, for a strided or offset buffer, a DLTensor
over the view's own storage); :func:`_aliased_arguments` finds arguments sharing memory with an
output (each gets its own copy, as TVM's runs do); :data:`_TRAPPING_HELPERS` names the runtime
helpers whose presence in a stage-0 script means the native kernel can trap on some inputs.
"""
from __future__ import annotations

import re

import numpy as np
import tvm

from .dlpack import strided_tensor
from .errors import DeviceUnavailableError
from .runtime import param_storage
from .signature import ParamSpec

#: Helpers of a stage-0 script that mean the native kernel can trap on some inputs.
_TRAPPING_HELPERS = frozenset({"_check_divisor", "load", "store", "access", "argsort_nms"})


def _native_tensor(spec: ParamSpec, value: np.ndarray, dev, keep: list, layout=None):
    """The TVM tensor the native kernel runs on: a copy of ``value`` on ``dev`` (a buffer of vectors
    as a tensor of that dtype); for a strided or
    offset parameter buffer, a DLTensor over the view's own storage (data pointer at the storage,
    ``byte_offset`` the ``elem_offset``, the buffer's strides), which only the CPU can share."""
    if not spec.is_strided:
        if re.search(r"x\d+$", spec.dtype):
            # A buffer of vectors (float32x4), whose array has a last axis of lanes: a tensor of that
            # dtype without the lanes axis.
            tensor = tvm.runtime.empty(value.shape[:-1], spec.dtype, dev)
            tensor.copyfrom(value)
            return tensor
        return tvm.runtime.tensor(value, dev)
    if dev.dlpack_device_type() != 1:
        raise DeviceUnavailableError(f"parameter {spec.name}: a strided or offset buffer runs natively only on "
                                     f"the CPU (TVM copies arrays to a device contiguously)")
    strides, offset = layout
    storage = param_storage(value, offset, strides)
    return strided_tensor(storage, value.shape, strides, offset, keep)


def _aliased_arguments(params: list[ParamSpec], arrays) -> list[int]:
    """Indices of buffer arguments that may share memory with another argument where at least one
    of the two is an output."""
    buffers = [k for k, (p, a) in enumerate(zip(params, arrays)) if p.is_buffer and isinstance(a, np.ndarray)]
    found = set()
    for i, k in enumerate(buffers):
        for m in buffers[i + 1:]:
            if (params[k].is_output or params[m].is_output) and np.may_share_memory(arrays[k], arrays[m]):
                found |= {k, m}
    return sorted(found)
