"""Real models for planning: shapes and parameter counts (`spec`), presets and Hugging Face configs,
costs and memory per layer. Offline: nothing here imports torch."""

from primuspp.models.presets import PRESETS, preset, resolve_model
from primuspp.models.spec import ModelSpec

__all__ = ["PRESETS", "ModelSpec", "preset", "resolve_model"]
