"""Data layer: CSR container, text and RCV1 readers, caches, CSV encodings, synthetic sets, splits."""
