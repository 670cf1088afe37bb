"""danlu: a GPU-cluster resource manager and training controller for deep learning."""

__version__ = "0.1.0"
