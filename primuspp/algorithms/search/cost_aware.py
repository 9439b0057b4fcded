"""Cost-aware candidates for the linear zero-bubble family (zero-bubble, zb-h2, zero-bubble-heuristic).

A generator's own construction goes in first; the capped list scheduler (`greedy`, which times every
decision with the cost model, comm included) adds its policies' orders under the same memory cap, and the
best few get the W post-pass (`refine.pick_refined`). The construction wins exact ties, so at costs where
it is already the best (F = B = W, no comm for ZB-H1) its table is unchanged. Candidates are built and
scored in that order, and the first one `bounds.Proof` shows unbeatable within the cap is the result at
once (ZB-H1 at F = B = W: no greedy pass runs).
"""

from __future__ import annotations

from collections.abc import Sequence

from primuspp.algorithms.base import ComputeOrder
from primuspp.algorithms.search import greedy, score_memo
from primuspp.algorithms.search.bounds import Proof
from primuspp.algorithms.search.portfolio import Score, pick
from primuspp.algorithms.search.refine import pick_refined
from primuspp.schedule.costs import StageCosts
from primuspp.schedule.placement import Placement


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
    """The best of the generator's own orders `own` (first wins ties), the greedy `policies` at `cap` and,
    with a `full` search, the W post-pass of the leaders. `cap` None: the own orders' peak is the cap, so
    no candidate uses more memory than the construction does."""
    if cap is None:  # the own orders' peaks (score_memo keeps them with their timing, scored below)
        cap = max(score_memo.score(placement, m, order, costs).peak for _, order in own)
    proof = Proof(placement, m, costs, cap)
    candidates: list[tuple[str, ComputeOrder, Score]] = []

    def unbeatable(name: str, order: ComputeOrder) -> bool:
        """Score the candidate; whether it is the result already (`Proof.scored`)."""
        return proof.scored(candidates, name, order, score_memo.score(placement, m, order, costs))

    if any(unbeatable(name, order) for name, order in own):
        report["candidate"] = candidates[-1][0]
        return candidates[-1][1]
    least = greedy.least_cap(placement, costs)
    for policy in policies if cap + 1e-9 >= least else ():
        plan = greedy.schedule(placement, m, costs, cap, policy)
        if unbeatable(f"greedy/{policy.name}", plan.order):
            report["candidate"] = candidates[-1][0]
            return candidates[-1][1]
    choose = pick_refined if full else pick
    name, order, _ = choose(placement, m, candidates, costs, cap, objective)
    report["candidate"] = name
    return order
