"""megatron-core, imported quietly (it warns about every optional extension it does not find): what `require`
imports, and what the fork server that starts the ranks imports once for them all (runtime/launch.py)."""

import warnings

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import megatron.core.pipeline_parallel  # noqa: F401
    from megatron.core.models.gpt import gpt_layer_specs  # noqa: F401
