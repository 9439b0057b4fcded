"""`greedy.asap_exact` and `greedy.peak_exact`: where a pass says its planned figures are the simulator's
(every policy unless a W started late; an eager pass always), they are, bit for bit (step time and longest
span equal `portfolio.timed_score`'s of the order it emits, the peak `portfolio.order_peak`'s), on linear
placements and on a V, over dyadic costs (comm, per-stage times, a B
that frees half or keeps more than F saved, a W of no time) and random ones; and a search's `score` of such
an order is what a fresh timing gives."""

import itertools

from hypothesis import example, given, settings
from hypothesis import strategies as st

from primuspp.algorithms.search import greedy, portfolio, score_memo
from primuspp.schedule.costs import CostModel
from primuspp.schedule.placement import make_placement

COSTS = (
    dict(forward=1000.0, backward=1000.0, wgrad=1000.0),
    dict(forward=(2.0, 1.0, 3.0, 1.0), backward=2.0, wgrad=1.0, comm=1.0, b_free_fraction=0.5),
    dict(forward=1.5, backward=2.25, wgrad=0.5, comm=0.25, b_free_fraction=-0.25),
    dict(forward=1.0, backward=2.0, wgrad=0.0),
    dict(forward=3.0, backward=(4.0, 1.0, 6.0, 2.0, 5.0, 3.0, 1.0, 2.0), wgrad=(1.0, 2.0, 0.5), comm=2.0),
)


def _placement(kind, pp):
    return make_placement(kind, pp, 2 if kind == "v" else 1)


def _costs(pp, cost, kind):
    values = {k: (tuple((v * pp)[:pp]) if isinstance(v, tuple) else v) for k, v in cost.items()}
    return CostModel(**values).for_placement(_placement(kind, pp))


DYADIC = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 8.0)


@st.composite
def _cases(draw):
    """A placement, m, and one of COSTS or random dyadic costs (per-stage F, B, W; comm; B's freed part)."""
    kind, pp, m = draw(st.sampled_from(("linear", "v"))), draw(st.integers(1, 8)), draw(st.integers(1, 40))
    if draw(st.booleans()):
        return kind, pp, m, _costs(pp, COSTS[draw(st.integers(0, len(COSTS) - 1))], kind)
    stages = st.lists(st.sampled_from(DYADIC), min_size=pp, max_size=pp).map(tuple)
    cost = dict(
        forward=draw(stages),
        backward=draw(stages),
        wgrad=draw(st.lists(st.sampled_from((0.0, 0.5, 1.0, 2.0, 8.0)), min_size=pp, max_size=pp).map(tuple)),
        comm=draw(st.sampled_from((0.0, 0.25, 1.0))),
        b_free_fraction=draw(st.sampled_from((0.0, 0.5, 1.0))),
    )
    return kind, pp, m, CostModel(**cost).for_placement(_placement(kind, pp))


@settings(max_examples=50, deadline=None, derandomize=True)
@given(_cases())
# pinned: the grid this property replaced, at its largest points (each of COSTS once)
@example(("linear", 8, 40, _costs(8, COSTS[0], "linear")))
@example(("linear", 8, 40, _costs(8, COSTS[1], "linear")))
@example(("v", 8, 40, _costs(8, COSTS[2], "v")))
@example(("v", 5, 12, _costs(5, COSTS[3], "v")))
@example(("linear", 3, 4, _costs(3, COSTS[4], "linear")))
@example(("v", 1, 1, _costs(1, COSTS[1], "v")))
def test_timed_plans_are_the_timing(case):
    kind, pp, m, costs = case
    placement = _placement(kind, pp)
    least = greedy.least_cap(placement, costs)
    units = portfolio.memory_units(placement, costs.activation)
    timed = 0
    for cap, policy in itertools.product(sorted({float(pp), 2.0 * pp - 1, 2.5, 1.0}), greedy.POLICIES):
        if cap + 1e-9 < least:
            continue
        plan = greedy.schedule(placement, m, costs, cap, policy)
        if policy.fill == "eager":
            assert plan.timed  # dyadic costs: every sum exact, and an eager pass never starts a W late
        timed += plan.timed
        sc = portfolio.timed_score(placement, m, plan.order, costs, 0.0)
        peak = portfolio.order_peak(plan.order, units, costs.fractions())
        exact_peak = greedy.peak_exact(placement, costs, plan.peak)
        assert exact_peak == (min(costs.fractions()) >= 0)  # dyadic shares and parts
        if exact_peak:
            assert plan.peak == peak, (policy.name, cap)
        if plan.timed:
            assert (plan.makespan, plan.max_span) == (sc.makespan, sc.max_span), (policy.name, cap)
            score_memo.forget()
            greedy.schedule(placement, m, costs, cap, policy)  # notes the figures
            noted = score_memo.score(placement, m, plan.order, costs)
            assert noted == portfolio.Score(sc.makespan, sc.max_span, peak)
        else:  # the planned times are a feasible timing: never before the simulator's
            assert plan.makespan >= sc.makespan
    assert timed  # the eager passes at least


def test_peak_not_taken_where_b_keeps_more():
    """B keeping more than F saved (b_free < 0): the pass counts a microbatch at the most it will hold from
    its F on, never less than the simulator (which adds B's part when B runs), so its peak is not taken."""
    placement = _placement("linear", 4)
    costs = CostModel(forward=1.0, backward=1.0, wgrad=1.0, b_free_fraction=-0.5).for_placement(placement)
    plan = greedy.schedule(placement, 16, costs, 6.0, greedy.POLICIES[0])
    units = portfolio.memory_units(placement, costs.activation)
    assert not greedy.peak_exact(placement, costs, plan.peak)
    assert plan.peak >= portfolio.order_peak(plan.order, units, costs.fractions())


def test_not_timed_without_exact_sums():
    """A comm of 0.1 (no power of two divides it above eps): the figures are not taken as the timing's."""
    placement = _placement("linear", 4)
    costs = CostModel(forward=1.0, backward=1.0, wgrad=1.0, comm=0.1).for_placement(placement)
    assert not greedy.schedule(placement, 16, costs, 4.0, greedy.POLICIES[0]).timed


def test_fit_passes_are_timed_unless_a_w_starts_late():
    """The "fit" and patient passes' figures are taken too where no W started late: at F = B = W every
    policy's are."""
    placement = _placement("linear", 8)
    costs = CostModel(1000.0, 1000.0, 1000.0).for_placement(placement)
    assert all(greedy.schedule(placement, 64, costs, 8.0, pol).timed for pol in greedy.POLICIES)


def test_a_late_w_is_not_the_timing():
    """What the condition excludes happens: an "alt-fit" pass keeps a W back for an input on its way, runs
    it later than it could, and plans a later step time than the simulator's timing of its order (so its
    figures are timed, not taken)."""
    placement = _placement("linear", 4)
    costs = CostModel(
        forward=(2.0, 4.0, 0.5, 4.0),
        backward=(0.5, 1.0, 8.0, 0.25),
        wgrad=(2.0, 8.0, 8.0, 4.0),
        b_free_fraction=0.5,
    ).for_placement(placement)
    plan = greedy.schedule(placement, 6, costs, 4.0, greedy.POLICIES[3])
    assert plan.policy == "alt-fit" and not plan.timed
    sc = portfolio.timed_score(placement, 6, plan.order, costs, 0.0)
    assert (plan.makespan, sc.makespan) == (110.25, 108.75)
