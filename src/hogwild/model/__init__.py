"""Sparse linear models and the MLP: losses, compiled SGD/delta kernels, evaluation, the in-process
trainer, the saved format."""
