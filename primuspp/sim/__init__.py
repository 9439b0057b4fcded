"""The offline simulator: cost model, event engine, metrics, closed forms."""

from primuspp.sim.engine import SimResult, simulate

__all__ = ["SimResult", "simulate"]
