"""The names of a saved model's two files (see model.saved), also read by a runs root's listing."""

MODEL_FILE = "model.npz"
MODEL_META_FILE = "model.json"
