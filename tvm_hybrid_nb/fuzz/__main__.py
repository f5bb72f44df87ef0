"""``python -m tvm_hybrid_nb.fuzz``: see :func:`tvm_hybrid_nb.fuzz.main`."""
import sys

from .runner import main

if __name__ == "__main__":
    sys.exit(main())
