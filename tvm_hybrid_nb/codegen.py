"""placeholder"""
from .errors import UnsupportedConstructError
def generate_kernel(func, name, stage=None):
    raise UnsupportedConstructError("codegen", "not written yet", stage)
