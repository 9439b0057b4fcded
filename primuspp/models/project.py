"""Project one configuration of a real model on real GPUs: per-part costs from the layer layout, the
schedule simulated with them (time in ms, activation memory in bytes), then the step time, throughput and
each rank's peak memory against HBM.

Every compute node costs the profile's `overhead.compute` beyond its work, every p2p transfer
`overhead.p2p`; a split W node runs its GEMMs at `efficiency.wgrad` of the fused backward's. Schedules are
built under their budgets in F-activation units of a chunk (sail-sg's and Primus' meaning: what W keeps
beyond F's activations is not counted against the budget, so ZB-H2 and the V family do not serialise on
layers where W keeps more) and simulated with the honest bytes; a V-family rank whose activations pass its
budget gets a note saying by how much.

Step time = the simulated pipeline makespan + what the data-parallel gradient reduce-scatter and
parameter all-gather (distributed optimizer; an all-reduce without it) leave exposed + the optimizer step.
With `overlap_grad_reduce` a rank's reduce-scatter starts with its last microbatch's backward and only what
runs past the pipeline's end shows; with `overlap_param_gather` the all-gather runs before and during the
rank's first forward (which it waits for anyway), and only what it takes beyond shows.
A rank's memory = weights + gradients + optimizer state of its parts + the peak of its activation curve
(the schedule's own, from the simulator) + other (p2p buffers, a full-recompute layer, the profile's
reserved bytes).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from primuspp.algorithms.registry import build_schedule, get_algorithm
from primuspp.errors import ConfigError
from primuspp.models.costs import LayerCost, embedding_cost, head_cost, layer_cost, p2p_bytes, p2p_ms
from primuspp.models.hardware import Hardware
from primuspp.models.layout import (
    Layout,
    balance,
    emit_layout,
    ends_layout,
    even_layout,
    first_last_layout,
    parse_layout,
)
from primuspp.models.memory import state_bytes
from primuspp.models.parallel import Parallel, check_parallel
from primuspp.models.spec import ModelSpec
from primuspp.schedule.costs import CostModel
from primuspp.schedule.nodes import NodeKind
from primuspp.schedule.placement import Placement, make_placement
from primuspp.schedule.table import ScheduleTable
from primuspp.sim.engine import SimResult, simulate

#: Adam's step reads and writes about this many bytes per parameter of a rank's optimizer shard.
OPTIMIZER_BYTES_PER_PARAM = 30


@dataclass(frozen=True)
class RankMemory:
    weights: float
    gradients: float
    optimizer: float
    activations: float
    other: float

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.other


@dataclass(frozen=True)
class Projection:
    algorithm: str
    par: Parallel
    layout: Layout
    pipeline_ms: float
    dp_sync_ms: float
    optimizer_ms: float
    bubble_rate: float
    flops_per_gpu: float  # model FLOPs per GPU per step
    per_rank: tuple[RankMemory, ...]
    hbm_bytes: float
    peak_tflops: float
    result: SimResult | None  # the simulated run (timeline, table); None once a sweep has dropped it
    dp_hidden_ms: float = 0.0  # DP communication hidden behind compute (overlap)
    #: TP / EP communication per step on the rank with the most: inside its compute nodes, and hidden
    comm_exposed_ms: float = 0.0
    comm_hidden_ms: float = 0.0
    notes: tuple[str, ...] = ()  # one line each: a budget a rank's honest bytes pass
    offload: bool = False  # built with the V family's `offload` param (chunk-0 activations to host)

    @property
    def label(self) -> str:
        """The algorithm as tables name it: `zbv+offload` when built with offload."""
        return f"{self.algorithm}+offload" if self.offload else self.algorithm

    @property
    def step_time_ms(self) -> float:
        return self.pipeline_ms + self.dp_sync_ms + self.optimizer_ms

    @property
    def tokens_per_s_per_gpu(self) -> float:
        tokens = self.par.global_batch_size * self.par.seq_len
        return tokens / (self.step_time_ms / 1e3) / self.par.gpus

    @property
    def tflops_per_gpu(self) -> float:
        return self.flops_per_gpu / (self.step_time_ms / 1e3) / 1e12

    @property
    def mfu(self) -> float:
        return self.tflops_per_gpu / self.peak_tflops

    @property
    def peak_memory_bytes(self) -> float:
        return max(r.total for r in self.per_rank)

    @property
    def fits(self) -> bool:
        return self.peak_memory_bytes <= self.hbm_bytes

    def record(self) -> dict[str, Any]:
        """The `--json` result record."""
        p = self.par
        return {
            "algorithm": self.algorithm,
            "tp": p.tp,
            "pp": p.pp,
            "vpp": p.vpp,
            "ep": p.ep,
            "cp": p.cp,
            "dp": p.dp,
            "micro_batch_size": p.micro_batch_size,
            "global_batch_size": p.global_batch_size,
            "micro_batches": p.micro_batches,
            "seq_len": p.seq_len,
            "recompute": p.recompute,
            "layout": emit_layout(self.layout),
            "step_time_ms": self.step_time_ms,
            "pipeline_ms": self.pipeline_ms,
            "dp_sync_ms": self.dp_sync_ms,
            "dp_hidden_ms": self.dp_hidden_ms,
            "comm_exposed_ms": self.comm_exposed_ms,
            "comm_hidden_ms": self.comm_hidden_ms,
            "optimizer_ms": self.optimizer_ms,
            "bubble_rate": self.bubble_rate,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "tokens_per_s": self.tokens_per_s_per_gpu * p.gpus,
            "tflops_per_gpu": self.tflops_per_gpu,
            "mfu": self.mfu,
            "peak_memory_bytes": int(self.peak_memory_bytes),
            "hbm_bytes": int(self.hbm_bytes),
            "fits": self.fits,
            "notes": list(self.notes),
            "per_rank": [
                {
                    "rank": r,
                    "peak_activation_bytes": int(m.activations),
                    "weights": int(m.weights),
                    "gradients": int(m.gradients),
                    "optimizer": int(m.optimizer),
                    "activations": int(m.activations),
                    "other": int(m.other),
                    "total": int(m.total),
                }
                for r, m in enumerate(self.per_rank)
            ],
        }


@dataclass(frozen=True)
class PartCosts:
    """Per model part (virtual stage in model order): ms, bytes, parameters (this rank's share)."""

    forward: tuple[float, ...]
    backward: tuple[float, ...]
    wgrad: tuple[float, ...]
    activation: tuple[float, ...]
    b_free: tuple[float, ...]
    flops: tuple[float, ...]
    dense_params: tuple[float, ...]
    expert_params: tuple[float, ...]
    comm: tuple[float, ...]  # of forward (and of backward): exposed communication
    comm_hidden: tuple[float, ...]  # of forward (and of backward): communication hidden behind compute


def layer_kinds(spec: ModelSpec) -> list[bool]:
    return [spec.is_moe_layer(i) for i in range(spec.layers)]


def choose_layout(
    spec: ModelSpec, par: Parallel, hw: Hardware, parts: int, layout: str = "balanced", key: str = "--layout"
) -> Layout:
    """`balanced` (the balancer), `even` (Megatron's default), `even-ends` (the embedding and the head
    counted as a layer each: `primuspp train --backend torch`) or a Megatron layout string."""
    if layout == "even":
        return even_layout(spec.layers, parts, key)
    if layout == "even-ends":
        return ends_layout(spec.layers, parts, key)
    if layout != "balanced":
        return parse_layout(layout, spec.layers, parts, key)
    costs = {moe: layer_cost(spec, moe, par, hw) for moe in set(layer_kinds(spec))}
    per_layer = [_total(costs[moe]) for moe in layer_kinds(spec)]
    return balance(per_layer, parts, _total(embedding_cost(spec, par, hw)), _total(head_cost(spec, par, hw)))


def _total(c: LayerCost) -> float:
    return c.forward + c.backward + c.wgrad


def part_costs(spec: ModelSpec, par: Parallel, hw: Hardware, layout: Layout) -> PartCosts:
    """With `recompute_layers` N, the first N layers of every part recompute (Megatron's block method)."""
    kinds = layer_kinds(spec)
    costs = {(moe, True): layer_cost(spec, moe, par, hw) for moe in set(kinds)}
    plain = replace(par, recompute="none", recompute_layers=None)
    costs.update({(moe, False): layer_cost(spec, moe, plain, hw) for moe in set(kinds)})
    n_re = spec.layers if par.recompute_layers is None else par.recompute_layers
    emb, head = embedding_cost(spec, par, hw), head_cost(spec, par, hw)
    expert_layer = spec.experts * spec.mlp_params(spec.expert_ffn) / (par.tp * par.ep)
    out: dict[str, list[float]] = {k: [] for k in PartCosts.__dataclass_fields__}
    start = 0
    for i, n in enumerate(layout):
        members = [costs[kinds[j], j - start < n_re] for j in range(start, start + n)]
        dense = sum(spec.layer_params(j) for j in range(start, start + n)) / par.tp
        experts = sum(expert_layer for j in range(start, start + n) if kinds[j])
        dense -= experts * par.ep  # the routed experts' share, divided by TP, was in layer_params
        start += n
        if i == 0:
            members.append(emb)
            dense += spec.embedding_params() / par.tp
        if i == len(layout) - 1:
            members.append(head)
            dense += spec.head_params() / par.tp
        act = sum(c.memory.activation for c in members)
        kept = sum(c.memory.w_kept for c in members)
        out["forward"].append(sum(c.forward for c in members))
        out["backward"].append(sum(c.backward for c in members))
        out["wgrad"].append(sum(c.wgrad for c in members))
        out["activation"].append(act)
        out["b_free"].append(1.0 - kept / act if act else 1.0)
        out["flops"].append(sum(c.flops for c in members))
        out["comm"].append(sum(c.comm for c in members))
        out["comm_hidden"].append(sum(c.comm_hidden for c in members))
        out["dense_params"].append(dense)
        out["expert_params"].append(experts)
    return PartCosts(**{k: tuple(v) for k, v in out.items()})


def placement_for(algorithm: str, par: Parallel) -> tuple[Placement, int]:
    """The algorithm's placement at (pp, vpp) and the number of model parts it cuts the layers into."""
    algo = get_algorithm(algorithm)
    placement = make_placement(algo.placement, par.pp, par.vpp)
    return placement, max(placement.model_part) + 1


@dataclass(frozen=True)
class StagePlan:
    """What the simulator needs for one configuration: the per-stage cost model (ms, bytes), the layer
    layout and the per-part costs it came from. `simulate` / `compare` can take `costs` as any CostModel."""

    costs: CostModel  # W split from B: a W node costs its own GEMMs' time and an overhead
    layout: Layout
    parts: PartCosts
    placement: Placement
    fused: CostModel  # for tables without W nodes: BW costs B + the fused W, one overhead


def stage_plan(
    spec: ModelSpec,
    hw: Hardware,
    par: Parallel,
    algorithm: str,
    layout: str | Layout = "balanced",
    first_last: tuple[int | None, int | None] | None = None,
) -> StagePlan:
    """Check `par` against the model and the algorithm, cut the layers, and build the per-stage costs.
    `first_last`: Megatron's `--decoder-first/last-pipeline-num-layers` (linear and interleaved
    placements), instead of `layout`."""
    algo = get_algorithm(algorithm)
    if not algo.vpp_ok(par.vpp):
        raise ConfigError(
            f"--vpp {par.vpp}: not allowed for {algo.name} (allowed: {algo.vpp_rule})", key="--vpp"
        )
    placement, parts = placement_for(algo.name, par)
    check_parallel(spec, par, parts)
    if first_last is not None and first_last != (None, None):
        if placement.kind not in ("linear", "loop"):
            raise ConfigError(
                f"--decoder-first/last-pipeline-num-layers: {algo.name}'s {placement.kind} placement does "
                "not take them (linear and interleaved placements do; use --layout)",
                key="--decoder-first-pipeline-num-layers",
            )
        cut = first_last_layout(spec.layers, parts, first_last[0], first_last[1], par.vpp)
    elif isinstance(layout, tuple):
        cut = layout
    else:
        cut = choose_layout(spec, par, hw, parts, layout)
    pc = part_costs(spec, par, hw, cut)
    stage = [placement.model_part[s] for s in range(placement.num_stages)]

    def per_stage(values: tuple[float, ...]) -> tuple[float, ...]:
        return tuple(values[p] for p in stage)

    o = hw.overhead.compute * 1e3
    # an FB node (dualpipe): each part's communication hides behind the other part's compute
    pairs = [
        (f + b, min(2 * c, f + b - 2 * c)) for f, b, c in zip(pc.forward, pc.backward, pc.comm, strict=True)
    ]
    fb = 1.0 - sum(h for _, h in pairs) / max(sum(t for t, _ in pairs), 1e-12)
    costs = CostModel(
        forward=per_stage(tuple(x + o for x in pc.forward)),
        backward=per_stage(tuple(x + o for x in pc.backward)),
        wgrad=per_stage(tuple(x / hw.efficiency.wgrad + o for x in pc.wgrad)),
        comm=p2p_ms(spec, par, hw) + hw.overhead.p2p * 1e3,
        activation=per_stage(pc.activation),
        b_free_fraction=per_stage(pc.b_free),
        fb_overlap=fb,
        # an OFFLOAD or RELOAD moves one microbatch's activation of the stage over the host link
        offload=per_stage(tuple((hw.host.latency + a / hw.host.bandwidth) * 1e3 for a in pc.activation)),
    )
    return StagePlan(costs, cut, pc, placement, replace(costs, wgrad=per_stage(pc.wgrad)))


def splits_w(table: ScheduleTable) -> bool:
    """Whether the table runs W nodes of its own (else B and W are fused, BW)."""
    return any(n.kind is NodeKind.W for n in table.compute_order()[0])  # every rank runs the same kinds


def project(
    spec: ModelSpec,
    hw: Hardware,
    par: Parallel,
    algorithm: str,
    layout: str | Layout = "balanced",
    params: dict[str, Any] | None = None,
    tables: dict[tuple, ScheduleTable] | None = None,
    first_last: tuple[int | None, int | None] | None = None,
    plan: StagePlan | None = None,
) -> Projection:
    """One configuration, end to end. Raises ConfigError / ScheduleError (one line) when it cannot run.
    `tables` caches the tables of algorithms that do not read costs, by (algorithm, pp, vpp, m, params):
    a sweep then generates each shape once and only re-simulates it. `plan`: `stage_plan`'s result for
    these arguments, when the caller has it already."""
    algo = get_algorithm(algorithm)
    plan = plan or stage_plan(spec, hw, par, algo.name, layout, first_last)
    costs, cut, pc, placement = plan.costs, plan.layout, plan.parts, plan.placement
    m = par.micro_batches
    key = (algo.name, par.pp, par.vpp, m, tuple(sorted((params or {}).items())))
    cached = tables.get(key) if tables is not None and not algo.uses_costs else None
    if cached is None:
        # budgets in F-activation units of a chunk (the reference implementations'): W's growth not counted
        fractions = costs.for_placement(placement).fractions()
        build = replace(costs, b_free_fraction=tuple(max(0.0, f) for f in fractions))
        table = build_schedule(algo.name, par.pp, par.vpp, m, build, **(params or {}))
        cached = (table, splits_w(table))
        if tables is not None and not algo.uses_costs:
            tables[key] = cached
    table, split = cached
    result = simulate(table, costs if split else plan.fused)
    pr = _finish(spec, hw, par, algo.name, cut, pc, placement, result)
    return replace(pr, offload=bool((params or {}).get("offload")))


def other_bytes(spec: ModelSpec, hw: Hardware, par: Parallel) -> float:
    """A rank's memory besides its state and its activation curve: the p2p buffers (send + receive, both
    directions), the profile's reserved bytes, and with full recompute one layer's recomputed activations."""
    extra = 2 * 2 * p2p_bytes(spec, par) + hw.reserved_bytes
    if par.recompute == "full":
        full = Parallel(**{**par.__dict__, "recompute": "none"})
        from primuspp.models.memory import layer_memory

        extra += max(layer_memory(spec, moe, full).activation for moe in set(layer_kinds(spec)))
    return extra


def one_microbatch_peak(
    spec: ModelSpec, hw: Hardware, par: Parallel, plan: StagePlan, offload: bool = False
) -> float:
    """A lower bound of the most loaded rank's peak under any schedule of a linear, loop or V placement:
    its state, its other bytes and one microbatch's activations on all its stages. (A microbatch's B runs
    its stages in reverse model order, so when its F leaves the rank's last stage every stage of the rank
    still holds it.) With `offload` (chunk 0's moved to host between its F and B) only the largest of
    its stages' is certain. 0 for bidirectional placements, whose microbatches visit only some of a rank's
    stages."""
    placement, pc = plan.placement, plan.parts
    if placement.kind not in ("linear", "loop", "v"):
        return 0.0
    other = other_bytes(spec, hw, par)
    worst = 0.0
    for r in range(par.pp):
        parts = [placement.model_part[s] for s in placement.stages_of_rank(r)]
        state = state_bytes(
            sum(pc.dense_params[p] for p in parts), sum(pc.expert_params[p] for p in parts), par
        )
        acts = [pc.activation[p] for p in parts]
        worst = max(worst, state.total + other + (max(acts) if offload else sum(acts)))
    return worst


def _finish(spec, hw, par, name, cut, pc, placement, result) -> Projection:
    extra = other_bytes(spec, hw, par)
    per_rank, syncs, shard = [], [], 0.0
    for r in range(par.pp):
        stages = placement.stages_of_rank(r)
        dense = sum(pc.dense_params[placement.model_part[s]] for s in stages)
        experts = sum(pc.expert_params[placement.model_part[s]] for s in stages)
        state = state_bytes(dense, experts, par)
        peak = result.metrics.per_rank[r].peak_memory
        per_rank.append(RankMemory(state.weights, state.gradients, state.optimizer, peak, extra))
        syncs.append(_dp_sync_ms(dense, experts, par, hw))
        shard = max(shard, dense / par.grad_dp + experts / par.expert_dp)
    if not par.distributed_optimizer:
        shard *= par.grad_dp
    optimizer_ms = shard * OPTIMIZER_BYTES_PER_PARAM / hw.hbm_bandwidth * 1e3
    flops_per_gpu = par.micro_batches * sum(pc.flops) / par.pp
    metrics = result.metrics
    exposed = _dp_exposed_ms(result, syncs, par)
    return Projection(
        name,
        par,
        cut,
        metrics.step_time,
        exposed,
        optimizer_ms,
        metrics.bubble_rate,
        flops_per_gpu,
        tuple(per_rank),
        hw.hbm_bytes,
        hw.peak(par.dtype) / 1e12,
        result,
        max(s[0] + s[1] for s in syncs) - exposed,
        *_rank_comm(par, pc, placement),
        notes=_budget_notes(name, par, pc, placement, result),
    )


def _rank_comm(par: Parallel, pc: PartCosts, placement: Placement) -> tuple[float, float]:
    """(exposed, hidden) TP / EP communication of one step on the rank with the most: F and B each carry
    their part's once per microbatch."""
    best = (0.0, 0.0)
    for r in range(par.pp):
        parts = [placement.model_part[s] for s in placement.stages_of_rank(r)]
        exposed = 2 * par.micro_batches * sum(pc.comm[p] for p in parts)
        hidden = 2 * par.micro_batches * sum(pc.comm_hidden[p] for p in parts)
        best = max(best, (exposed, hidden))
    return best


def _dp_exposed_ms(result: SimResult, syncs: list[tuple[float, float]], par: Parallel) -> float:
    """The DP communication left on the step's critical path. Rank r's gradient reduce-scatter (`syncs[r]`:
    (reduce, gather) ms) starts with the backward of its last microbatch when overlapped, else after the
    pipeline; its parameter all-gather runs from the step's start to its first forward's end when
    overlapped, else after the reduce."""
    end = result.metrics.step_time
    tail = head = 0.0
    last_mb = par.micro_batches - 1
    for r, rank in enumerate(result.timeline.ranks):
        reduce, gather = syncs[r]
        if not par.overlap_param_gather or not par.distributed_optimizer:
            reduce, gather = reduce + gather, 0.0
        if par.overlap_grad_reduce and rank.intervals:
            # the last microbatch's nodes are among a rank's last few (its F comes at most ~2 x its stages
            # x p nodes before the end): scan only those
            tail_nodes = rank.intervals[-(8 * par.pp * par.vpp + 8) :]
            backs = [i.start for i in tail_nodes if i.microbatch == last_mb and i.kind in ("B", "BW")]
            start = min(backs) if backs else rank.intervals[-1].end
            tail = max(tail, start + reduce - end)
        else:
            tail = max(tail, reduce)
        if gather and rank.intervals:
            first = next((i for i in rank.intervals if i.kind == "F"), rank.intervals[0])
            head = max(head, gather - first.end)
    return max(tail, 0.0) + max(head, 0.0)


def _budget_notes(name, par, pc, placement, result) -> tuple[str, ...]:
    """One line when a V schedule's honest activations pass its budget (microbatches of F activations)."""
    from primuspp.algorithms.v.family import BUDGETS  # the V modules load only where a V schedule ran

    if name not in BUDGETS:
        return ()
    budget = BUDGETS[name](par.pp)
    worst = (0.0, 0, 0.0)
    for r in range(par.pp):
        unit = sum(pc.activation[placement.model_part[s]] for s in placement.stages_of_rank(r))
        over = result.metrics.per_rank[r].peak_memory - budget * unit
        worst = max(worst, (over, r, budget * unit))
    over, r, cap = worst
    if over <= 0.005 * cap:
        return ()
    return (
        f"{name}: rank {r}'s activations pass its budget of {budget} microbatches ({cap / 1e9:.1f} GB of F "
        f"activations) by {over / 1e9:.1f} GB (what W keeps: GEMM inputs and output gradients)",
    )


def _dp_sync_ms(dense: float, experts: float, par: Parallel, hw: Hardware) -> tuple[float, float]:
    """(gradient reduce-scatter, parameter all-gather) ms over DP (experts: over expert DP), the gradients
    in their main-grad dtype, the parameters bf16; without the distributed optimizer an all-reduce and
    no gather."""
    g = par.main_grad_bytes

    def one(params: float, group: int, spread: int) -> tuple[float, float]:
        if group <= 1 or params == 0:
            return 0.0, 0.0
        link = hw.link(group, spread)
        bw = link.bandwidth * hw.efficiency.comm
        frac = (group - 1) / group
        lat = (group - 1) * link.latency
        if par.distributed_optimizer:
            return (frac * params * g / bw + lat) * 1e3, (frac * params * 2 / bw + lat) * 1e3
        return (2 * frac * params * g / bw + 2 * lat) * 1e3, 0.0

    d, e = one(dense, par.grad_dp, par.tp), one(experts, par.expert_dp, par.tp * par.ep)
    return d[0] + e[0], d[1] + e[1]
