"""Guards against dependency versions known to crash (checked at import, without importing TVM)."""
from __future__ import annotations

from importlib import metadata

#: apache-tvm-ffi versions measured to work with apache-tvm 0.27.0.post1.  0.1.15.x makes
#: ``tvm.ir.save_json`` segfault on any node; 0.1.13 and older do not load.
KNOWN_GOOD_TVM_FFI = ("0.1.14.post1",)


def check_tvm_ffi_version() -> None:
    """Raise ImportError with a one-line fix when the installed apache-tvm-ffi is not known to work."""
    try:
        installed = metadata.version("apache-tvm-ffi")
    except metadata.PackageNotFoundError:
        raise ImportError(
            "tvm_hybrid_nb needs apache-tvm-ffi: pip install 'apache-tvm-ffi==0.1.14.post1'"
        ) from None
    if installed not in KNOWN_GOOD_TVM_FFI:
        raise ImportError(
            f"tvm_hybrid_nb: apache-tvm-ffi {installed} is not known to work (0.1.15.x crashes "
            f"tvm.ir.save_json); fix: pip install 'apache-tvm-ffi==0.1.14.post1'"
        )
