"""Search effort of the candidate-based generators (V family, zb-h2, zero-bubble-heuristic).

These generators build several candidate orders and keep the best. Trying every candidate costs time that
grows with the table, so by default (`effort="auto"`) they try all of them up to a size and only their
preferred candidate beyond it; `effort="full"` always tries all, `effort="fast"` never. The branch that ran
is stated in the table's report (`report["effort"]`), so a quality jump across the size switch is visible.

A full search also gives its best few candidates the W post-pass and the local search (`refine`): the best
`REFINE_TOP_SMALL` of them up to `REFINE_SMALL` compute nodes, the best `REFINE_TOP` beyond. Above that size
the report says so (`full (auto: 3072 compute nodes <= 20000; refined: the 2 best, 3 up to 2000 compute
nodes)`).
"""

from __future__ import annotations

from primuspp.algorithms.base import Param

EFFORTS = ("auto", "full", "fast")

#: candidates a full search refines (`refine`): REFINE_TOP_SMALL up to REFINE_SMALL compute nodes, else
#: REFINE_TOP
REFINE_TOP, REFINE_TOP_SMALL, REFINE_SMALL = 2, 3, 2000

EFFORT = Param(
    "effort",
    str,
    "auto",
    "candidate search: full tries every candidate, fast only the preferred one, auto is full up to a size",
    choices=EFFORTS,
)


def full_search(effort: str, compute_nodes: int, limit: int, report: dict) -> bool:
    """Whether to try every candidate; records the branch and the reason in `report["effort"]`."""
    if effort == "full" or (effort == "auto" and compute_nodes <= limit):
        said = "full" if effort == "full" else f"full (auto: {compute_nodes} compute nodes <= {limit})"
        if refine_top(compute_nodes) != REFINE_TOP_SMALL:
            said += f"; refined: the {REFINE_TOP} best, {REFINE_TOP_SMALL} up to {REFINE_SMALL} compute nodes"
        report["effort"] = said
        return True
    report["effort"] = "fast" if effort == "fast" else f"fast (auto: {compute_nodes} compute nodes > {limit})"
    return False


def refine_top(compute_nodes: int) -> int:
    """How many of the best candidates a full search gives the W post-pass and the local search."""
    return REFINE_TOP_SMALL if compute_nodes <= REFINE_SMALL else REFINE_TOP
