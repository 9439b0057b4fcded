"""The greedy one-stage loop's skip over a steady phase (`greedy_period`) changes no decision: the pass with
the skip, without it and the general loop (the reference) give the same orders and figures, and the skip
does happen where the costs allow exact sums."""

import itertools

import pytest

from primuspp.algorithms import greedy, greedy_period
from primuspp.schedule.costs import CostModel
from primuspp.schedule.placement import linear

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


def _costs(pp, cost):
    values = {k: (v[:pp] if isinstance(v, tuple) else v) for k, v in cost.items()}
    return CostModel(**values).for_placement(linear(pp))


def _cases():
    sizes = itertools.product((2, 3, 5, 8), (12, 40))
    for (pp, m), cost_i, policy in itertools.product(sizes, range(len(COSTS)), greedy.POLICIES):
        costs = _costs(pp, COSTS[cost_i])
        for cap in sorted({float(pp), float(2 * pp - 1), 2.5}):
            if greedy.least_cap(linear(pp), costs) <= cap + 1e-9:
                yield pp, m, cost_i, cap, policy


@pytest.mark.parametrize("pp,m,cost_i,cap,policy", list(_cases()))
def test_skip_changes_nothing(pp, m, cost_i, cap, policy):
    placement, costs = linear(pp), _costs(pp, COSTS[cost_i])
    skipped = greedy._plan(placement, m, costs, cap, policy)
    plain = greedy._plan(placement, m, costs, cap, policy, skip=False)
    general = greedy._plan(placement, m, costs, cap, policy, general=True)
    assert skipped[:4] == plain[:4] == general[:4]
    assert plain[4] == general[4] == 0 and 0 <= skipped[4] < m


def test_skip_happens():
    """At F = B = W with m = 8p the steady phase of every policy is skipped for more than half the pass."""
    for pp, policy in itertools.product((2, 4, 8), greedy.POLICIES):
        m = 8 * pp
        skipped = greedy._plan(linear(pp), m, _costs(pp, COSTS[0]), float(pp), policy)[4]
        assert skipped > m // 3, (pp, policy.name, skipped)


def test_no_skip_without_exact_sums():
    """A comm of 0.1 (no power of two divides it above eps): nothing skipped, the same decisions."""
    costs = CostModel(forward=1.0, backward=1.0, wgrad=1.0, comm=0.1).for_placement(linear(4))
    plan = greedy._plan(linear(4), 32, costs, 4.0, greedy.POLICIES[2])
    assert plan[4] == 0
    assert plan[:4] == greedy._plan(linear(4), 32, costs, 4.0, greedy.POLICIES[2], general=True)[:4]


def test_quantum():
    assert greedy_period.quantum([1000.0, 500.0, 0.0], 1e-6) == 4.0
    assert greedy_period.quantum([1.5, 0.25], 1e-9) == 0.25
    assert greedy_period.quantum([1.0, 0.1], 1e-9) is None  # 0.1's power of two is far below eps
    assert greedy_period.quantum([1.0, -1.0], 1e-9) is None
    assert greedy_period.quantum([1.0, float("inf")], 1e-9) is None
    assert greedy_period.quantum([0.0], 1e-9) is None
    assert greedy_period.quantum([4.0], 2.0) is None  # eps above a quarter of the quantum
