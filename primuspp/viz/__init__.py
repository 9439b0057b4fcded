"""Visualization: interactive HTML timelines, terminal rendering."""
