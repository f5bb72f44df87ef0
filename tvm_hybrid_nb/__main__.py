"""``python -m tvm_hybrid_nb``: see :mod:`tvm_hybrid_nb.cli`."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
