"""The harvest's worker process: ``python -m tvm_hybrid_nb.tvm_corpus --worker FD MODE MEMORY_GIB``."""
import sys

from .run import _worker

if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        _worker(int(sys.argv[2]), sys.argv[3], float(sys.argv[4]))
    else:
        sys.exit("usage: python -m tvm_hybrid_nb zoo --tvm-tests PATH (this module's own entry is its worker)")
