"""Cost-aware candidates for the linear zero-bubble family (zero-bubble, zb-h2, zero-bubble-heuristic).

A generator's own construction goes in first; the capped list scheduler (`greedy`, which times every
decision with the cost model, comm included) adds its policies' orders under the same memory cap, and the
best few get the W post-pass (`refine.pick_refined`). The construction wins exact ties, so at costs where
it is already the best (F = B = W, no comm for ZB-H1) its table is unchanged. Candidates are built and
scored in that order, and the first one `bounds.Proof` shows unbeatable within the cap is the result at
once (ZB-H1 at F = B = W: no greedy pass runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain

from primuspp.algorithms.base import ComputeOrder
from primuspp.algorithms.search import greedy, score_memo
from primuspp.algorithms.search.bounds import Proof
from primuspp.algorithms.search.portfolio import Score, pick
from primuspp.algorithms.search.refine import pick_refined
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.placement import Placement


def best_of(
    placement: Placement,
    m: int,
    costs: StageCosts,
    built: Iterable[tuple[str, ComputeOrder]],
    cap: float | None,
    objective: str,
    full: bool,
    report: dict,
) -> ComputeOrder:
    """The first of the `built` orders `bounds.Proof` shows unbeatable within `cap` (later ones are not
    built), else the best of them (first wins ties), with a `full` search after the W post-pass of the
    leaders (`refine.pick_refined`)."""
    proof = Proof(placement, m, costs, cap)
    candidates: list[tuple[str, ComputeOrder, Score]] = []
    for name, order in built:
        if proof.scored(candidates, name, order, score_memo.score(placement, m, order, costs)):
            report["candidate"] = name
            return order
    name, order, _ = (pick_refined if full else pick)(placement, m, candidates, costs, cap, objective)
    report["candidate"] = name
    return order


def best_linear(
    placement: Placement,
    m: int,
    costs: StageCosts,
    own: Sequence[tuple[str, ComputeOrder]],
    cap: float | None,
    policies: Sequence[greedy.Policy],
    objective: str,
    full: bool,
    report: dict,
) -> ComputeOrder:
    """`best_of` the generator's own orders `own` and the greedy `policies` at `cap`. `cap` None: the own
    orders' peak is the cap, so no candidate uses more memory than the construction does."""
    if cap is None:  # the own orders' peaks (score_memo keeps them with their timing, scored below)
        cap = max(score_memo.score(placement, m, order, costs).peak for _, order in own)
    if cap + 1e-9 < greedy.least_cap(placement, costs):
        policies = ()
    passes = (
        (f"greedy/{pol.name}", greedy.schedule(placement, m, costs, cap, pol).order) for pol in policies
    )
    return best_of(placement, m, costs, chain(own, passes), cap, objective, full, report)
