"""Strided TVM tensors over numpy storage: a DLTensor with a data pointer, strides and a
``byte_offset`` (what a PrimFunc parameter declared with ``strides=`` or ``elem_offset=`` expects).

``tvm.runtime.tensor`` copies an array contiguously, and numpy's own DLPack export puts the data
pointer at the first element with ``byte_offset`` 0, which a buffer with a constant ``elem_offset``
refuses (``MakePackedAPI`` asserts ``byte_offset == elem_offset * itemsize``).  So the DLManagedTensor
is made here, by hand (ctypes), and handed to ``tvm_ffi.from_dlpack``: the tensor shares the numpy
storage, which is written in place."""
from __future__ import annotations

import ctypes

import numpy as np
import tvm_ffi


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32), ("dtype", _DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]
_NO_DELETER = _DELETER(0)
_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}  # kDLInt, kDLUInt, kDLFloat, kDLBool

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class _Producer:
    """A DLPack producer (``__dlpack__``) of one hand-made CPU DLTensor."""

    def __init__(self, managed):
        self.managed = managed

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return _capsule_new(ctypes.addressof(self.managed), b"dltensor", None)


def strided_tensor(storage: np.ndarray, shape, strides, elem_offset: int, keep: list):
    """A CPU tensor of ``shape`` whose element ``idx`` is ``storage[elem_offset + sum(idx * strides)]``
    (``storage`` one-dimensional and contiguous); the data pointer is ``storage``'s, the byte offset
    ``elem_offset * itemsize``.  What the tensor points to is appended to ``keep``: the caller holds
    ``keep`` as long as the tensor is used (the tensor has no deleter and owns nothing)."""
    if storage.ndim != 1 or not storage.flags.c_contiguous:
        raise ValueError("strided_tensor needs one-dimensional contiguous storage")
    if storage.dtype.kind not in _CODES:
        raise ValueError(f"strided_tensor: dtype {storage.dtype} has no DLPack code here")
    ndim = len(shape)
    c_shape = (ctypes.c_int64 * max(ndim, 1))(*[int(d) for d in shape])
    c_strides = (ctypes.c_int64 * max(ndim, 1))(*[int(s) for s in strides])
    managed = _DLManagedTensor()
    managed.dl_tensor = _DLTensor(storage.ctypes.data, _DLDevice(1, 0), ndim,
                                  _DLDataType(_CODES[storage.dtype.kind], storage.dtype.itemsize * 8, 1),
                                  c_shape, c_strides, int(elem_offset) * storage.itemsize)
    managed.manager_ctx = None
    managed.deleter = _NO_DELETER
    keep.extend([storage, c_shape, c_strides, managed])
    return tvm_ffi.from_dlpack(_Producer(managed))

