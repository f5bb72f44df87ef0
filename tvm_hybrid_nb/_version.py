"""The package version, in the lowest layer so that every module can name it (dump files, reports)."""
__version__ = "0.1.0"
