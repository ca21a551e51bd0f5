"""The deltas summed into the global model, and relayed between workers (star, tree)."""
