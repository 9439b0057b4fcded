"""Slow, readable references of the product's fast paths, used only by tests (and bench/)."""
