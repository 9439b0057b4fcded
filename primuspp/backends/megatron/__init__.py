"""Megatron-core backend: the only package that imports megatron (docs/megatron.md).

    from primuspp.backends.megatron import install
    install("zbv")          # before megatron.training is imported
    # ... Megatron-LM's get_forward_backward_func() now runs the zbv table

`install`, `uninstall`, `install_from_args` (Primus' keys `patch_primus_pipeline`, `pp_algorithm`,
`dump_pp_data`) and `check` live in schedule.py; the B/W split of Megatron's linears in split.py; CPU
support in cpu.py. Importing this package does not import megatron; the functions do.
"""

from __future__ import annotations

import warnings
from typing import Any

from primuspp.errors import ConfigError

INSTALL_HINT = "pip install 'primuspp[train]'"


def require() -> None:
    """Import megatron-core (quietly: it warns about every optional extension it does not find), or raise a
    one-line ConfigError saying how to install it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import megatron.core.pipeline_parallel  # noqa: F401
    except ImportError as err:
        raise ConfigError(
            f"the Megatron backend needs megatron-core ({err}); install it with: {INSTALL_HINT}",
            key="backend",
        ) from None


def __getattr__(name: str) -> Any:
    """`install`, `uninstall`, `install_from_args`: schedule.py's, imported on first use (after `require`)."""
    if name in ("install", "uninstall", "install_from_args"):
        require()
        from primuspp.backends.megatron import schedule

        return getattr(schedule, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["INSTALL_HINT", "install", "install_from_args", "require", "uninstall"]
