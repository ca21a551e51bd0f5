"""hogwild: sparse linear models trained with HOGWILD! lock-free SGD, locally or over gRPC."""

__version__ = "0.1.0"
