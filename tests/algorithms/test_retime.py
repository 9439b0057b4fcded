"""Re-timing after a one-rank change gives exactly the full timing's floats."""

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from primuspp.algorithms.search.retime import retime
from primuspp.errors import ValidationError
from primuspp.schedule.costs import CostModel
from primuspp.schedule.placement import make_placement
from primuspp.schedule.timing import node_times
from tests.algorithms.test_bounds import random_order


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(["linear", "v", "bidirectional"]),
    pp=st.integers(1, 5),
    m=st.integers(1, 10),
    fwd=st.lists(st.floats(0.0, 5.0), min_size=12, max_size=12),
    wgrad=st.floats(0.0, 3.0),
    comm=st.sampled_from([0.0, 0.3, 2.0]),
    seed=st.integers(0, 10**6),
)
def test_retime_equals_a_full_timing(kind, pp, m, fwd, wgrad, comm, seed):
    if kind == "bidirectional" and pp % 2:
        pp += 1
    placement = make_placement(kind, pp, 2 if kind == "v" else 1)
    n = placement.num_stages
    costs = CostModel(forward=tuple(fwd[:n]), backward=tuple(reversed(fwd[:n])), wgrad=wgrad, comm=comm)
    costs = costs.for_placement(placement)
    rng = random.Random(seed)
    order = random_order(placement, m, rng, fused=False)
    old = node_times(placement, m, order, costs)
    for _ in range(5):  # move one node of one rank earlier, as the local search does
        r = rng.randrange(len(order))
        if len(order[r]) < 2:
            continue
        i = rng.randrange(1, len(order[r]))
        j = rng.randrange(0, i)
        seq = order[r]
        trial = [*order[:r], [*seq[:j], seq[i], *seq[j:i], *seq[i + 1 :]], *order[r + 1 :]]
        try:
            full = node_times(placement, m, trial, costs)
        except ValidationError:
            try:
                retime(placement, trial, costs, old, r, j)
            except ValidationError:
                continue
            raise AssertionError("retime ran an order the full timing refuses") from None
        got = retime(placement, trial, costs, old, r, j)
        assert (got.starts, got.ends, got.forward_end, got.grad_end) == (
            full.starts,
            full.ends,
            full.forward_end,
            full.grad_end,
        )
