"""Megatron-core backend: the only package that imports megatron (docs/megatron.md).

    from primuspp.backends.megatron import install
    install("zbv")          # before megatron.training is imported
    # ... Megatron-LM's get_forward_backward_func() now runs the zbv table

`install`, `uninstall`, `install_from_args` (Primus' keys `patch_primus_pipeline`, `pp_algorithm`,
`dump_pp_data`) and `check` live in schedule.py; the B/W split of Megatron's linears in split.py; CPU
support in cpu.py. Importing this package does not import megatron; the functions do.
"""

from __future__ import annotations

from typing import Any

from primuspp.errors import ConfigError

INSTALL_HINT = "pip install 'primuspp[train]'"


def require() -> None:
    """Import megatron-core (preload.py), or raise a one-line ConfigError saying how to install it; the ranks
    launched from this process then start with it imported."""
    try:
        from primuspp.backends.megatron import preload
    except ImportError as err:
        raise ConfigError(
            f"the Megatron backend needs megatron-core ({err}); install it with: {INSTALL_HINT}",
            key="backend",
        ) from None
    from primuspp.runtime import launch

    launch.preload(preload.__name__)


def __getattr__(name: str) -> Any:
    """`install`, `uninstall`, `install_from_args`: schedule.py's, imported on first use (after `require`)."""
    if name in ("install", "uninstall", "install_from_args"):
        require()
        from primuspp.backends.megatron import schedule

        return getattr(schedule, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["INSTALL_HINT", "install", "install_from_args", "require", "uninstall"]
