"""The greedy loop's skip over a steady phase (`greedy_period`) changes no decision: the pass with the skip
and without it give the same orders and figures, on a linear placement and on a V, and the skip does happen
where the costs allow exact sums."""

import itertools

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from primuspp.algorithms.search import greedy, greedy_period
from primuspp.schedule.costs import CostModel
from primuspp.schedule.placement import linear, make_placement

#: dyadic costs (every sum exact), so the skip may run: F = B = W, per-stage costs with comm and a B that
#: frees half (or keeps more than F saved), and a W of no time
COSTS = (
    dict(forward=1000.0, backward=1000.0, wgrad=1000.0),
    dict(
        forward=(2.0, 1.0, 3.0, 1.0, 2.0, 2.0, 1.0, 3.0),
        backward=2.0,
        wgrad=1.0,
        comm=1.0,
        b_free_fraction=0.5,
    ),
    dict(forward=1.5, backward=2.25, wgrad=0.5, comm=0.25, b_free_fraction=-0.25),
    dict(forward=1.0, backward=2.0, wgrad=0.0),  # W takes no time: a rank decides again at the same time
)


def _placement(kind, pp):
    return make_placement(kind, pp, 2 if kind == "v" else 1)


def _costs(pp, cost, kind="linear"):
    values = {k: (v[:pp] if isinstance(v, tuple) else v) for k, v in cost.items()}  # per rank
    return CostModel(**values).for_placement(_placement(kind, pp))


@settings(max_examples=80, deadline=None, derandomize=True)
@given(
    kind=st.sampled_from(("linear", "v")),
    pp=st.sampled_from((2, 3, 5, 8)),
    m=st.sampled_from((12, 40)),
    cost_i=st.integers(0, len(COSTS) - 1),
    cap=st.sampled_from(("pp", "2pp-1", 2.5)),
    policy=st.sampled_from(greedy.POLICIES),
)
def test_skip_changes_nothing(kind, pp, m, cost_i, cap, policy):
    placement, costs = _placement(kind, pp), _costs(pp, COSTS[cost_i], kind)
    cap = {"pp": float(pp), "2pp-1": float(2 * pp - 1)}.get(cap, cap)
    assume(greedy.least_cap(placement, costs) <= cap + 1e-9)
    skipped = greedy._plan(placement, m, costs, cap, policy)
    plain = greedy._plan(placement, m, costs, cap, policy, skip=False)
    assert skipped[:4] == plain[:4]
    assert plain[4] == 0 and 0 <= skipped[4] < m


def test_skip_changes_nothing_pinned():
    """Pinned: every policy at F = B = W on 8 ranks, linear and V, at 1F1B's memory."""
    for kind, policy in itertools.product(("linear", "v"), greedy.POLICIES):
        placement, costs = _placement(kind, 8), _costs(8, COSTS[0], kind)
        skipped = greedy._plan(placement, 40, costs, 8.0, policy)
        assert skipped[:4] == greedy._plan(placement, 40, costs, 8.0, policy, skip=False)[:4]


def test_skip_happens():
    """At F = B = W with m = 8p the steady phase of every policy is skipped for more than a quarter of the
    pass (on a linear placement mostly more than half), on a linear placement and on a V."""
    for kind, pp, policy in itertools.product(("linear", "v"), (2, 4, 8), greedy.POLICIES):
        m, placement, costs = 8 * pp, _placement(kind, pp), _costs(pp, COSTS[0], kind)
        skipped = greedy._plan(placement, m, costs, float(pp), policy)[4]
        assert skipped > m // 4, (kind, pp, policy.name, skipped)


def test_no_skip_without_exact_sums():
    """A comm of 0.1 (no power of two divides it above eps): nothing skipped, the same decisions."""
    costs = CostModel(forward=1.0, backward=1.0, wgrad=1.0, comm=0.1).for_placement(linear(4))
    plan = greedy._plan(linear(4), 32, costs, 4.0, greedy.POLICIES[2])
    assert plan[4] == 0
    assert plan[:4] == greedy._plan(linear(4), 32, costs, 4.0, greedy.POLICIES[2], skip=False)[:4]


def test_quantum():
    assert greedy_period.quantum([1000.0, 500.0, 0.0], 1e-6) == 4.0
    assert greedy_period.quantum([1.5, 0.25], 1e-9) == 0.25
    assert greedy_period.quantum([1.0, 0.1], 1e-9) is None  # 0.1's power of two is far below eps
    assert greedy_period.quantum([1.0, -1.0], 1e-9) is None
    assert greedy_period.quantum([1.0, float("inf")], 1e-9) is None
    assert greedy_period.quantum([0.0], 1e-9) is None
    assert greedy_period.quantum([4.0], 2.0) is None  # eps above a quarter of the quantum
