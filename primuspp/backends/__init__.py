"""Execution backends for the runtime."""
