"""Search effort of the candidate-based generators (V family, zb-h2, zero-bubble-heuristic).

These generators build several candidate orders and keep the best. Trying every candidate costs time that
grows with the table, so by default (`effort="auto"`) they try all of them up to a size and only their
preferred candidate beyond it; `effort="full"` always tries all, `effort="fast"` never. The branch that ran
is stated in the table's report (`report["effort"]`), so a quality jump across the size switch is visible.
"""

from __future__ import annotations

from primuspp.algorithms.base import Param

EFFORTS = ("auto", "full", "fast")

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
        report["effort"] = (
            "full" if effort == "full" else f"full (auto: {compute_nodes} compute nodes <= {limit})"
        )
        return True
    report["effort"] = "fast" if effort == "fast" else f"fast (auto: {compute_nodes} compute nodes > {limit})"
    return False
