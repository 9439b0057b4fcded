"""A megatron-core `GPTModel` cut into the virtual stages of any placement.

Megatron builds one `GPTModel` per model chunk and assigns layers with its own (interleaved) rule. Here each
virtual stage of the table is a `GPTModel` of its own: stage 0 holds the embedding (`pre_process`), the last
stage the final norm, output layer and loss (`post_process`), and the transformer layers are cut into
contiguous, balanced groups in stage order. Chunk c of pipeline rank r is the stage the placement puts there
(loop: Megatron's interleaved assignment; V: stage r and stage 2p-1-r).

Weights come from one whole model built under a seed (`whole_model`) and are copied into the stages, so every
placement and the one-process reference start from identical parameters. Every stage config sets
`pipeline_model_parallel_size=1` and its own `num_layers`: the cut is ours, not Megatron's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from primuspp.errors import ConfigError
from primuspp.schedule.placement import Placement


@dataclass(frozen=True)
class GPTSpec:
    """The model: a GPT over a byte vocabulary by default. `settings` are extra TransformerConfig fields."""

    layers: int = 8
    hidden: int = 128
    heads: int = 4
    seq_len: int = 128
    vocab: int = 256
    settings: tuple[tuple[str, Any], ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": "megatron-gpt",
            "layers": self.layers,
            "hidden": self.hidden,
            "heads": self.heads,
            "seq_len": self.seq_len,
            "vocab": self.vocab,
            "settings": dict(self.settings),
        }


def split_layers(layers: int, stages: int) -> list[range]:
    """Contiguous, balanced layer ranges, one per stage (the first ones get one more when it does not
    divide)."""
    if not 1 <= stages <= layers:
        raise ConfigError(
            f"the model has {layers} transformer layers, fewer than the {stages} pipeline stages of this "
            "schedule (every stage needs at least one layer)",
            key="layers",
        )
    base, extra = divmod(layers, stages)
    out, start = [], 0
    for s in range(stages):
        n = base + (1 if s < extra else 0)
        out.append(range(start, start + n))
        start += n
    return out


def transformer_config(spec: GPTSpec, num_layers: int, **extra: Any) -> Any:
    """The TransformerConfig of one stage (or of the whole model): fp32, no dropout, CPU-initialisable."""
    from megatron.core.transformer import TransformerConfig

    kwargs: dict[str, Any] = dict(
        num_layers=num_layers,
        hidden_size=spec.hidden,
        num_attention_heads=spec.heads,
        use_cpu_initialization=True,
        params_dtype=torch.float32,
        pipeline_dtype=torch.float32,
        gradient_accumulation_fusion=False,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        deallocate_pipeline_outputs=True,
    )
    kwargs.update(dict(spec.settings))
    kwargs.update(extra)
    return TransformerConfig(**kwargs)


def _gpt(
    spec: GPTSpec, config: Any, pre: bool, post: bool, vp_stage: int | None = None, pg_collection: Any = None
) -> Any:
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    from primuspp.backends.megatron import moe

    experts = config.num_moe_experts
    layer_spec = moe.layer_spec(experts) if experts else get_gpt_layer_local_spec()
    if config.sequence_parallel:  # torch norms that accept sequence parallelism (tp.py)
        from primuspp.backends.megatron.tp import sequence_parallel_spec

        layer_spec = sequence_parallel_spec(layer_spec, config.num_layers)
    return GPTModel(
        config,
        layer_spec,
        vocab_size=spec.vocab,
        max_sequence_length=spec.seq_len,
        pre_process=pre,
        post_process=post,
        share_embeddings_and_output_weights=False,
        position_embedding_type="learned_absolute",
        vp_stage=vp_stage,
        pg_collection=pg_collection,
    )


def whole_model(spec: GPTSpec, seed: int = 0) -> Any:
    """The whole model on one process, initialised under `seed` (the weights every cut starts from; an MoE
    model holds every expert, whatever the expert parallelism of this process; a TP rank the whole,
    unsharded model: tp.py)."""
    from primuspp.backends.megatron import moe, tp

    groups = moe.whole_groups() if moe.is_moe(spec.settings) else None
    state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        with tp.solo():
            model = _gpt(spec, transformer_config(spec, spec.layers), True, True, pg_collection=groups)
        if moe.is_moe(spec.settings):
            moe.number_layers(model, range(spec.layers), spec.layers)
        return model
    finally:
        torch.random.set_rng_state(state)


_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")
_EXPERT = re.compile(r"\.local_experts\.(\d+)\.")


def _shift_expert(name: str, by: int) -> str:
    match = _EXPERT.search(name)
    if match is None or by == 0:
        return name
    return f"{name[: match.start()]}.local_experts.{int(match.group(1)) + by}.{name[match.end() :]}"


def stage_name(name: str, layers: range, experts: tuple[int, int] = (0, 0)) -> str:
    """Whole-model parameter name of a stage's parameter `name` (its layers are numbered from 0; its MoE
    experts from 0 when `experts` = (first global expert, count) says it holds a slice)."""
    match = _LAYER.match(name)
    if match is None:
        return name
    rest = _shift_expert(name[match.end() :], experts[0])
    return f"decoder.layers.{layers.start + int(match.group(1))}.{rest}"


def stage_state(
    whole: Mapping[str, torch.Tensor],
    layers: range,
    first: bool,
    last: bool,
    experts: tuple[int, int] = (0, 0),
) -> dict:
    """The slice of the whole model's state dict that stage (layers, first, last) holds, renamed; of the
    MoE experts, `experts` = (first, count) ((0, 0): all)."""
    out = {}
    for name, value in whole.items():
        match = _LAYER.match(name)
        if match is not None:
            i = int(match.group(1))
            rest = name[match.end() :]
            expert = _EXPERT.search(rest)
            if expert is not None and experts[1]:
                if not experts[0] <= int(expert.group(1)) < experts[0] + experts[1]:
                    continue
                rest = _shift_expert(rest, -experts[0])
            if i in layers:
                out[f"decoder.layers.{i - layers.start}.{rest}"] = value
        elif first if name.startswith("embedding.") else last:  # final norm, output layer: last stage
            out[name] = value
    return out


def build_stage(
    spec: GPTSpec,
    whole: Mapping[str, torch.Tensor],
    layers: range,
    first: bool,
    last: bool,
    vp_stage: int | None = None,
    experts: tuple[int, int] = (0, 0),
    **config: Any,
) -> Any:
    """One stage's GPTModel, with the whole model's weights for its slice (of the MoE experts: `experts`,
    see `stage_state`; of a TP rank: its piece, tp.py)."""
    from primuspp.backends.megatron import tp

    cfg = transformer_config(spec, len(layers), perform_initialization=False, **config)
    model = _gpt(spec, cfg, first, last, vp_stage)
    if cfg.num_moe_experts:
        from primuspp.backends.megatron import moe

        moe.number_layers(model, layers, spec.layers)
    state = tp.shard(model, stage_state(whole, layers, first, last, experts))
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("_extra_state")]
    if missing or unexpected:
        raise RuntimeError(f"stage weights do not match: missing {missing[:3]}, unexpected {unexpected[:3]}")
    return model


@dataclass(frozen=True)
class Chunk:
    """What model chunk `chunk` of a pipeline rank holds: virtual stage `stage`, transformer layers
    `layers` (whole-model numbering), the embedding when `pre_process`, the output layer and loss when
    `post_process`. Build Megatron's model chunk c with exactly these for the schedule to run it."""

    chunk: int
    stage: int
    layers: range
    pre_process: bool
    post_process: bool


def chunk_layout(placement: Placement, rank: int, num_layers: int) -> list[Chunk]:
    """This rank's chunks, in chunk order, for `placement` (layers cut with `split_layers`)."""
    if placement.kind == "bidirectional":
        raise ConfigError("the Megatron backend does not run the bidirectional placement", key="algo")
    cuts = split_layers(num_layers, placement.num_stages)
    stages = sorted(placement.stages_of_rank(rank), key=lambda s: placement.stage_chunk[s])
    return [
        Chunk(placement.stage_chunk[s], s, cuts[s], placement.prev_stage[s] < 0, placement.next_stage[s] < 0)
        for s in stages
    ]


def rank_chunks(
    spec: GPTSpec, placement: Placement, rank: int, seed: int = 0, **config: Any
) -> tuple[list[Any], list[range]]:
    """This rank's model chunks (index = chunk) and each chunk's layer range, for `placement`. An MoE
    model's chunks hold this expert-parallel rank's experts (their (first, count) in `moe.EXPERTS_ATTR`)."""
    from primuspp.backends.megatron import moe

    layout = chunk_layout(placement, rank, spec.layers)
    whole = whole_model(spec, seed).state_dict()
    multi = len(layout) > 1
    experts = moe.local_experts(spec.settings)
    if experts[1]:
        config = {"expert_model_parallel_size": moe.expert_parallel()[0], **config}
    chunks = []
    for c in layout:
        vp = c.chunk if multi else None
        chunk = build_stage(spec, whole, c.layers, c.pre_process, c.post_process, vp, experts, **config)
        setattr(chunk, moe.EXPERTS_ATTR, experts)
        chunks.append(chunk)
    return chunks, [c.layers for c in layout]


def causal_mask(seq_len: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Megatron's attention mask for causal attention: [1, 1, S, S] bool, True where attention is masked
    (an explicit mask: a None mask makes Megatron allocate one on CUDA)."""
    return torch.ones(1, 1, seq_len, seq_len, dtype=torch.bool, device=device).triu(1)


def loss_func(output_tensor: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Mean per-token loss of a microbatch (Megatron divides it by the number of microbatches)."""
    loss = output_tensor.float().mean()
    return loss, {"lm loss": loss.detach().clone()}


def forward_step(data_iterator: Any, model: Any) -> tuple[torch.Tensor, Any]:
    """Megatron's forward-step convention: the first stage reads the tokens, the last the labels (one
    `next()` per microbatch on chunks that hold either); returns (output, loss function)."""
    from megatron.core.utils import get_attr_wrapped_model

    pre = get_attr_wrapped_model(model, "pre_process")
    post = get_attr_wrapped_model(model, "post_process")
    tokens = labels = positions = None
    device = next(model.parameters()).device
    if pre or post:
        tokens, labels = next(data_iterator)
        tokens, labels = tokens.to(device), labels.to(device)
        positions = torch.arange(tokens.shape[1], device=device).unsqueeze(0).expand_as(tokens)
    # the sequence length: of the tokens, or of the received hidden states ([sequence, batch, hidden])
    seq = tokens.shape[1] if pre else get_attr_wrapped_model(model, "decoder").input_tensor.shape[0]
    config = get_attr_wrapped_model(model, "config")
    if not pre and config.sequence_parallel:  # the received piece is this TP rank's share of the sequence
        seq *= config.tensor_model_parallel_size
    output = model(
        tokens if pre else None,
        positions if pre else None,
        causal_mask(seq, device),
        labels=labels if post else None,
    )
    return output, loss_func
