"""GPU profiles: peak FLOP/s, HBM, links and efficiency factors, from packaged YAML or a user's file.

Packaged profiles live in `configs/hardware/<name>.yaml` (the datasheet sources are stated in each file);
`--gpu` takes a profile name or the path of a YAML file of the same schema.
"""

from __future__ import annotations

import bisect
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from primuspp.config.schema import parse_model
from primuspp.errors import ConfigError
from primuspp.inputs import first_value, parse_yaml, read_text
from primuspp.suggest import close_names

#: A hardware profile is a few lines; anything over 1 MiB is not one.
MAX_PROFILE_BYTES = 1024 * 1024
PACKAGE = "primuspp.configs.hardware"
GIB = 2**30


def gib(size: float) -> str:
    """Bytes as GiB, the unit every table and page shows memory in (profiles state decimal bytes)."""
    return f"{size / GIB:.3g}" if size < GIB else f"{size / GIB:.1f}"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Link(_Strict):
    """One kind of link, per GPU and per direction: bytes/s and the latency of one message (s)."""

    bandwidth: float = Field(gt=0, allow_inf_nan=False)
    latency: float = Field(ge=0, allow_inf_nan=False)


class Efficiency(_Strict):
    """Fractions of peak reached. `gemm`: [[min GEMM FLOPs, fraction], ...] ascending (a GEMM's fraction is
    that of the largest threshold it reaches); `attention`: the attention core (softmax(QK^T)V);
    `comm`: of link bandwidth in collectives and p2p. `grouped_gemm`: MoE experts' grouped GEMMs (and
    their permutation) relative to a dense GEMM of the same size; `wgrad`: a weight-gradient GEMM run on
    its own (a split W node) relative to the same GEMM inside the fused backward."""

    gemm: tuple[tuple[float, float], ...] = ((0.0, 0.5),)
    attention: float = Field(default=0.4, gt=0, le=1)
    comm: float = Field(default=0.7, gt=0, le=1)
    grouped_gemm: float = Field(default=1.0, gt=0, le=1)
    wgrad: float = Field(default=1.0, gt=0, le=1)

    @field_validator("gemm")
    @classmethod
    def _ascending(cls, value: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
        if not value:
            raise ValueError("needs at least one [min FLOPs, fraction] pair")
        sizes = [s for s, _ in value]
        if sizes != sorted(sizes) or sizes[0] != 0:
            raise ValueError("thresholds must ascend from 0")
        if any(not 0 < f <= 1 for _, f in value):
            raise ValueError("fractions must be in (0, 1]")
        return value

    def gemm_fraction(self, flops: float) -> float:
        sizes = [s for s, _ in self.gemm]
        return self.gemm[max(bisect.bisect_right(sizes, flops) - 1, 0)][1]


class Overhead(_Strict):
    """Seconds every operation costs beyond its work: a compute node's launch and synchronisation
    (`compute`), a p2p send/receive's (`p2p`)."""

    compute: float = Field(default=0.0, ge=0, le=1, allow_inf_nan=False)
    p2p: float = Field(default=0.0, ge=0, le=1, allow_inf_nan=False)


class Hardware(_Strict):
    """One GPU and its node. Bytes are decimal (GB = 1e9) as datasheets state them; shown in GiB (`gib`)."""

    name: str
    peak_flops: dict[str, float]
    hbm_bytes: float = Field(gt=0, allow_inf_nan=False)
    hbm_bandwidth: float = Field(gt=0, allow_inf_nan=False)
    gpus_per_node: int = Field(ge=1)
    intra_node: Link
    inter_node: Link
    #: the GPU's link to host memory, one direction (what an OFFLOAD or RELOAD moves over); by default PCIe
    #: Gen5 x16's 64 GB/s
    host: Link = Link(bandwidth=64.0e9, latency=10.0e-6)
    reserved_bytes: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    efficiency: Efficiency = Efficiency()
    overhead: Overhead = Overhead()
    #: where `efficiency` and `overhead` come from: "guess", or "calibrated from <runs>"
    source: str = "guess"
    #: the kernels a layer runs, which decide what it saves for its backward (memory.py): `flash` attention
    #: keeps no s x s scores; `unfused` (megatron-core's local spec, e.g. on CPU) keeps them and GQA's K/V
    #: repeated to every head. `norm` / `activation`: `fused` (TE norms, fused SwiGLU and RoPE) or
    #: `unfused` (torch ops: RMSNorm's fp32 intermediates, SwiGLU's SiLU output, RoPE's cos/sin)
    attention: Literal["flash", "unfused"] = "flash"
    norm: Literal["fused", "unfused"] = "fused"
    activation: Literal["fused", "unfused"] = "fused"

    @field_validator("peak_flops")
    @classmethod
    def _has_bf16(cls, value: dict[str, float]) -> dict[str, float]:
        if "bf16" not in value:
            raise ValueError("needs a bf16 entry")
        if any(not (0 < v < float("inf")) for v in value.values()):
            raise ValueError("values must be finite and > 0")
        return value

    def peak(self, dtype: str = "bf16") -> float:
        if dtype not in self.peak_flops:
            raise ConfigError(
                f"--dtype {dtype}: {self.name} has no peak for it (has: {', '.join(self.peak_flops)})",
                key="--dtype",
            )
        return self.peak_flops[dtype]

    def kernels(self) -> dict[str, bool]:
        """The `Parallel` fields the profile's kernels set."""
        return {
            "flash_attention": self.attention == "flash",
            "fused_norm": self.norm == "fused",
            "fused_activation": self.activation == "fused",
        }

    def link(self, group: int, spread: int = 1) -> Link:
        """The link a group of `group` GPUs, consecutive ranks `spread` apart, communicates over."""
        return self.intra_node if group * spread <= self.gpus_per_node else self.inter_node


def profile_names() -> list[str]:
    root = resources.files(PACKAGE)
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


def parse_hardware(text: str, source: str, key: str = "--gpu") -> Hardware:
    """A profile from YAML text, read under primuspp.inputs' bounds; no field takes true/false."""
    data = parse_yaml(text, source, key)
    bad = first_value(data, lambda v: isinstance(v, bool))
    if bad is not None:
        raise ConfigError(f"{source}: {bad[0]}={bad[1]}: expected a number, not true/false", key=bad[0])
    return parse_model(Hardware, data, source)


def load_hardware(value: str, key: str = "--gpu") -> Hardware:
    """A packaged profile by name (case-insensitive), or a YAML file path."""
    name = value.lower()
    if name in profile_names():
        text = resources.files(PACKAGE).joinpath(f"{name}.yaml").read_text()
        return parse_hardware(text, f"<packaged {name}.yaml>")
    path = Path(value)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return parse_hardware(read_text(path, key, MAX_PROFILE_BYTES), f"{key} {path}", key)
    raise ConfigError(
        f"{key} {value}: unknown GPU profile{close_names(value, profile_names())}; profiles: "
        f"{', '.join(profile_names())}, or a YAML file path",
        key=key,
    )
