"""termnorm: medical term normalization engine (recall -> rank -> fuse)."""

__version__ = "0.1.0"
