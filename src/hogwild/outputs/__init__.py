"""What a run writes or serves besides its model: metrics for Prometheus, TensorBoard scalars."""
