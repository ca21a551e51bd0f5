"""Data layer: the CSR container, sources, synthetic sets, a worker's row ranges; formats, transforms, hashing, diagnostics below."""
