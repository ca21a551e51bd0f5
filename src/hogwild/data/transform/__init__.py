"""Transforms of loaded rows: labels, splits, feature renumbering, encodings, class weights."""
