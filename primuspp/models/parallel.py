"""A parallel configuration of one training step: TP, CP, PP, VPP, EP, DP, batch shape and options, checked
against the model (every violation is one line naming the flag)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from primuspp.errors import ConfigError
from primuspp.models.spec import ModelSpec
from primuspp.schedule.limits import bounded_int

Recompute = Literal["none", "selective", "full"]
RECOMPUTE = ("none", "selective", "full")
SpWgrad = Literal["keep", "regather"]
SP_WGRAD = ("keep", "regather")


@dataclass(frozen=True)
class Parallel:
    """TP x CP x PP x DP GPUs (Megatron's rank order tp, cp, dp, pp: TP groups are consecutive ranks, CP
    groups TP apart, PP neighbours gpus / pp apart). CP splits every sequence into 2 x CP chunks (two per
    rank, load-balanced for the causal mask); its ranks hold the same weights, so gradients are reduced and
    the distributed optimizer sharded over DP x CP. EP is carved out of DP x CP (expert tensor parallel =
    TP, expert data parallel = DP x CP / EP). `vpp` is the number of model chunks per rank (2 for V and
    bidirectional placements)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    vpp: int = 1
    ep: int = 1
    cp: int = 1
    micro_batch_size: int = 1
    global_batch_size: int = 1
    seq_len: int = 4096
    sequence_parallel: bool = True
    recompute: Recompute = "none"
    distributed_optimizer: bool = True
    #: the kernels, from the GPU profile (memory.py): flash attention, fused norms, fused SwiGLU / RoPE
    flash_attention: bool = True
    fused_norm: bool = True
    fused_activation: bool = True
    dtype: str = "bf16"
    #: bytes per activation element: 2 (bf16 training); 4 for fp32 runs such as `primuspp train` on CPU
    dtype_bytes: int = 2
    #: under sequence parallelism, how W of a column-parallel linear gets its all-gathered input:
    #: `regather` it in W (time: one more all-gather; Megatron's own backward re-gathers it too) or `keep`
    #: it from F (memory: the full-sequence input)
    sp_wgrad: SpWgrad = "regather"
    #: full recompute of only the first N layers of every model part (Megatron's --recompute-num-layers,
    #: block method); None: all of them
    recompute_layers: int | None = None
    #: optimizer state (Megatron's precision-aware optimizer): bytes of the main gradient and of each Adam
    #: moment per parameter; the fp32 master copy is always 4 (defaults: 4 + 2 + 4 + 4 + 4 = Megatron's 18)
    main_grad_bytes: int = 4
    moment_bytes: int = 4
    #: communication overlapped with compute (Megatron's recommended settings): DP gradient reduce-scatter
    #: with the backward, parameter all-gather with the forward, TP collectives with the GEMMs; EP's
    #: all-to-all with another microbatch's compute (off by default, as in Megatron)
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    tp_comm_overlap: bool = True
    ep_comm_overlap: bool = False

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def tokens(self) -> int:
        """Tokens of one microbatch on one rank (CP splits the sequence; TP/SP splits are per tensor)."""
        return self.micro_batch_size * self.seq_len // self.cp

    @property
    def micro_batches(self) -> int:
        return self.global_batch_size // (self.micro_batch_size * self.dp)

    @property
    def sp(self) -> bool:
        """Sequence parallel in effect (only with TP > 1)."""
        return self.sequence_parallel and self.tp > 1

    @property
    def expert_dp(self) -> int:
        return self.dp * self.cp // self.ep

    @property
    def grad_dp(self) -> int:
        """The group gradients are reduced and optimizer state sharded over: DP x CP."""
        return self.dp * self.cp


def check_parallel(spec: ModelSpec, par: Parallel, parts: int | None = None) -> None:
    """Raise ConfigError (one line, naming the flag) when `par` cannot run `spec`. `parts`: model parts
    the placement cuts the layers into (pp x vpp, or pp for bidirectional)."""
    for key, value in (
        ("--tp", par.tp),
        ("--pp", par.pp),
        ("--vpp", par.vpp),
        ("--ep", par.ep),
        ("--cp", par.cp),
        ("--micro-batch-size", par.micro_batch_size),
        ("--global-batch-size", par.global_batch_size),
        ("--seq-len", par.seq_len),
    ):
        bounded_int(value, key)
    if par.recompute not in RECOMPUTE:
        raise ConfigError(
            f"--recompute {par.recompute}: expected one of {', '.join(RECOMPUTE)}", key="--recompute"
        )
    if par.recompute_layers is not None and (par.recompute != "full" or par.recompute_layers < 1):
        raise ConfigError(
            f"--recompute-num-layers {par.recompute_layers}: needs --recompute full and N >= 1",
            key="--recompute-num-layers",
        )
    if par.ep_comm_overlap and par.ep <= 1:
        raise ConfigError(
            "--ep-comm-overlap: needs EP > 1 (no all-to-all to overlap)", key="--ep-comm-overlap"
        )
    if spec.heads % par.tp:
        raise ConfigError(
            f"--tp {par.tp}: does not divide the model's {spec.heads} attention heads", key="--tp"
        )
    if not spec.mla and spec.kv_heads % par.tp:
        raise ConfigError(
            f"--tp {par.tp}: does not divide the model's {spec.kv_heads} key/value heads", key="--tp"
        )
    if par.ep > 1 and not spec.moe:
        raise ConfigError(f"--ep {par.ep}: the model has no experts (EP needs a MoE model)", key="--ep")
    if spec.moe and spec.experts % par.ep:
        raise ConfigError(f"--ep {par.ep}: does not divide the model's {spec.experts} experts", key="--ep")
    if par.cp > 1 and par.seq_len % (2 * par.cp):
        raise ConfigError(
            f"--seq-len {par.seq_len}: not divisible by 2 x CP = {2 * par.cp} (context parallelism cuts each "
            "sequence into 2 x CP chunks)",
            key="--seq-len",
        )
    if (par.dp * par.cp) % par.ep:
        what = f"data-parallel size {par.dp}"
        if par.cp > 1:
            what = f"data-parallel x context-parallel size {par.dp} x {par.cp}"
        raise ConfigError(f"--ep {par.ep}: does not divide the {what}", key="--ep")
    if par.global_batch_size % (par.micro_batch_size * par.dp):
        raise ConfigError(
            f"--global-batch-size {par.global_batch_size}: not divisible by micro-batch size x DP "
            f"({par.micro_batch_size} x {par.dp})",
            key="--global-batch-size",
        )
    n = parts if parts is not None else par.pp * par.vpp
    if n > spec.layers:
        raise ConfigError(
            f"--pp {par.pp}: {n} pipeline stages for the model's {spec.layers} layers (each needs one)",
            key="--pp",
        )
