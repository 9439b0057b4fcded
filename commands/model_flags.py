"""The flags of `--model` and its companions, checked without importing any model code (pydantic,
primuspp.models): a plain `simulate --algo` run reads them too, and should pay only for what it uses."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from primuspp.commands.options import MODEL_OPTIONS, check_positive
from primuspp.errors import ConfigError

if TYPE_CHECKING:
    from primuspp.models.spec import ModelSpec


@dataclass(frozen=True)
class ModelFlags:
    """What `--model` and its companions say (None: not given)."""

    model: str | None = None
    gpu: str | None = None
    tp: int | None = None
    ep: int | None = None
    cp: int | None = None
    gpus: int | None = None
    micro_batch_size: int | None = None
    global_batch_size: int | None = None
    seq_len: int | None = None
    recompute: str | None = None
    layout: str | None = None
    first_layers: int | None = None
    last_layers: int | None = None
    no_sequence_parallel: bool = False
    sp_wgrad: str | None = None
    dtype: str | None = None
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    ffn: int | None = None
    kv_heads: int | None = None
    vocab: int | None = None
    recompute_layers: int | None = None
    main_grads_dtype: str | None = None
    moments_dtype: str | None = None
    no_distributed_optimizer: bool = False
    overlap: str | None = None

    _FLAGS: ClassVar[dict[str, str]] = {
        "gpu": "--gpu",
        "tp": "--tp",
        "ep": "--ep",
        "cp": "--cp",
        "gpus": "--gpus",
        "micro_batch_size": "--micro-batch-size",
        "global_batch_size": "--global-batch-size",
        "seq_len": "--seq-len",
        "recompute": "--recompute",
        "layout": "--layout",
        "first_layers": "--decoder-first-pipeline-num-layers",
        "last_layers": "--decoder-last-pipeline-num-layers",
        "no_sequence_parallel": "--no-sequence-parallel",
        "sp_wgrad": "--sp-wgrad",
        "dtype": "--dtype",
        "layers": "--layers",
        "hidden": "--hidden",
        "heads": "--heads",
        "ffn": "--ffn",
        "kv_heads": "--kv-heads",
        "vocab": "--vocab",
        "recompute_layers": "--recompute-num-layers",
        "main_grads_dtype": "--main-grads-dtype",
        "moments_dtype": "--moments-dtype",
        "no_distributed_optimizer": "--no-distributed-optimizer",
        "overlap": "--overlap",
    }

    def spec(self) -> ModelSpec:
        """The model, with the size flags applied (like `primuspp train`'s)."""
        from primuspp.models.presets import resolve_model

        assert self.model is not None
        spec = resolve_model(self.model)
        sizes = {"layers": self.layers, "hidden": self.hidden, "heads": self.heads, "ffn": self.ffn}
        sizes.update(kv_heads=self.kv_heads, vocab=self.vocab)
        changes: dict[str, Any] = {k: v for k, v in sizes.items() if v is not None}
        for k, v in changes.items():
            check_positive(self._FLAGS[k], v)
        if self.hidden is not None and self.ffn is None:
            changes["ffn"] = spec.ffn * self.hidden // spec.hidden
        if self.seq_len is not None and spec.learned_positions:
            changes["learned_positions"] = self.seq_len  # a position table of the sequence (Megatron's)
        if not changes:
            return spec
        try:
            return spec.with_(**changes)
        except ConfigError as e:
            msg = str(e)
            for k, flag in self._FLAGS.items():
                msg = msg.replace(f"model.{k}=", f"{flag} ")
            raise ConfigError(msg, key=e.key) from None

    def checked(self, abstract: Mapping[str, object]) -> ModelFlags:
        """These flags, checked: without --model its companions are errors, with --model the abstract-cost
        flags in `abstract` (`{"--fwd": value, ...}`) are."""
        self.check_without_model()
        if self.model is not None:
            reject_with_model(abstract)
        return self

    def check_without_model(self) -> None:
        """Without --model, its companions mean nothing: the first one given is an error."""
        if self.model is not None:
            return
        for attr, flag in self._FLAGS.items():
            value = getattr(self, attr)
            if value not in (None, False):
                raise ConfigError(
                    f"{flag} {value}: only with --model (a model's sizes; the simulation costs come from "
                    "--config, --fwd/--bwd/--wgrad/--comm or --costs-from otherwise)",
                    key=flag,
                )


#: a verb's `flags` when it is called without the --model flags (`model_options` gives them)
NO_MODEL = ModelFlags()


def reject_with_model(given: dict[str, object]) -> None:
    """With --model the costs and the memory come from the model: abstract-cost flags are errors."""
    for flag, value in given.items():
        if value is not None:
            raise ConfigError(
                f"{flag} {value}: not with --model (its costs come from the model and the GPU profile; "
                "the memory limit is the GPU's HBM)",
                key=flag,
            )


def model_options(verb: Callable[..., Any]) -> Callable[..., Any]:
    """`verb` with the --model flags (`MODEL_OPTIONS`) after its own parameters, given to it as one
    `flags` argument (a `ModelFlags`, which the verb checks against its abstract-cost flags)."""
    import functools
    import inspect

    own = [p for name, p in inspect.signature(verb, eval_str=True).parameters.items() if name != "flags"]
    keyword = inspect.Parameter.KEYWORD_ONLY
    extra = [
        inspect.Parameter(name, keyword, default=False if a.__origin__ is bool else None, annotation=a)
        for name, a in MODEL_OPTIONS.items()
    ]

    @functools.wraps(verb)
    def run(**given: Any) -> Any:
        return verb(flags=ModelFlags(**{name: given.pop(name) for name in MODEL_OPTIONS}), **given)

    run.__signature__ = inspect.Signature([*own, *extra])  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in (*own, *extra)}
    return run
