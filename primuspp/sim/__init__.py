"""The offline simulator: cost model, event engine, metrics, closed forms.

`simulate` and `SimResult` are the engine's, imported on first use: a run spec or a refusal needs no numpy."""

__all__ = ["SimResult", "simulate"]


def __getattr__(name: str):
    if name in __all__:
        from primuspp.sim import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'primuspp.sim' has no attribute {name!r}")
