"""Diagnostics of a data set: conflicts between rows, the memory its ids need, its feature space."""
