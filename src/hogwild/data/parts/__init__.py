"""A data set cut into parts its workers read themselves: byte ranges of text, a plan from a sample, Parquet row groups."""
