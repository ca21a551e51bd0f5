"""Data formats: svmlight text (read, written, streamed, cached), RCV1's files, CSV, Parquet and Arrow tables."""
