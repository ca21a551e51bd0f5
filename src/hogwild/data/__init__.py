"""Data layer: CSR container, svmlight/LIBSVM and RCV1 readers, synthetic sets, splits."""

from hogwild.data.csr import CSRData

__all__ = ["CSRData"]
