"""Megatron-core backend: the only package that imports megatron."""
