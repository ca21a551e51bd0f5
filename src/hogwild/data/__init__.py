"""Data layer: CSR container, svmlight/LIBSVM and RCV1 readers, synthetic sets, splits."""

from hogwild.data.csr import CSRData
from hogwild.data.rcv1 import read_lyrl2004, read_qrels
from hogwild.data.sources import (
    bundled_names,
    default_test_source,
    describe,
    load_source,
)
from hogwild.data.split import permute, shard, train_val_test_split
from hogwild.data.svmlight import parse_svmlight_buffer, read_svmlight, write_svmlight
from hogwild.data.synthetic import make_rcv1_like, make_regression, make_seed000

__all__ = [
    "CSRData",
    "bundled_names",
    "default_test_source",
    "describe",
    "load_source",
    "make_rcv1_like",
    "make_regression",
    "make_seed000",
    "parse_svmlight_buffer",
    "permute",
    "read_lyrl2004",
    "read_qrels",
    "read_svmlight",
    "shard",
    "train_val_test_split",
    "write_svmlight",
]
