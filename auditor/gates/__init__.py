"""Deterministic audit gates: one module per concern, small functions over typed evidence."""
