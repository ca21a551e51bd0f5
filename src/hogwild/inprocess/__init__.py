"""Training in this process: the train job, out-of-core streaming."""
