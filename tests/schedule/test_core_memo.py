"""What a build works out once and reuses (`rows.Rows.memo`), and the whole-table passes that replaced
per-rank or searching ones: each is held equal to the path it replaced, on both sides of every switch."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.schedule import compact_validation, timing_arrays
from primuspp.schedule.array_order import kinds_present
from primuspp.schedule.compact import LoweredRanks, _compute_before
from primuspp.schedule.costs import CostModel, unit_costs
from primuspp.schedule.rows import Rows, memo_of
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.timing import node_times
from primuspp.sim import simulate
from primuspp.trace.metrics import timeline_metrics

EQUAL = CostModel(1000, 1000, 1000)
PER_RANK = CostModel((900.0, 937.25, 974.5, 1011.75), 1500.0, (700.0, 713.0, 726.0, 700.0), comm=55.0)


def _plain(rows: Rows) -> dict:
    """The same columns in a plain dict: nothing is remembered, every fact is worked out afresh."""
    return dict(rows)


def _flat(lists) -> np.ndarray:
    return np.array([t for row in lists for t in row], dtype=np.float64)


def _same_times(a, b) -> None:
    for key in ("starts", "ends", "forward_end", "grad_end"):
        assert np.array_equal(getattr(a, key), getattr(b, key), equal_nan=True), key


def test_rows_remember_beside_their_columns():
    table = build_schedule("1f1b", 4, None, 8, EQUAL)
    rows = table.ranks.rows
    simulate(table, EQUAL)
    assert isinstance(rows, Rows) and any(key[0] == "timing" for key in rows.memo)  # the timing's graph
    assert rows == _plain(rows) and set(rows) == set(_plain(rows))  # the memo is no key
    back = pickle.loads(pickle.dumps(rows))
    assert isinstance(back, Rows) and back.memo == {}  # the memo is never pickled
    assert back.keys() == rows.keys() and all(np.array_equal(back[k], rows[k]) for k in rows)
    assert memo_of(_plain(rows)) == {} and memo_of(_plain(rows)) is not memo_of(_plain(rows))
    assert kinds_present(rows) == np.unique(rows["kind"]).tolist()
    assert kinds_present(rows, "node_kind") == np.unique(rows["node_kind"]).tolist()


@pytest.mark.parametrize("name", ["zero-bubble", "zbv", "dualpipe-v"])
def test_a_remembered_graph_times_as_a_fresh_one(name):
    """A build's second timing (memo hit: the graph kept from lowering's unit-cost run) is the timing of the
    same columns with nothing remembered, and the loop's."""
    table = build_schedule(name, 4, None, 12, PER_RANK)
    pl, order, rows = table.placement, table.compute_order(), table.ranks.rows
    sc = PER_RANK.for_placement(pl)
    assert timing_arrays.solve(pl, 12, order, unit_costs(pl), rows) is not None  # as lowering does
    warm = timing_arrays.solve(pl, 12, order, sc, rows)
    _same_times(warm, timing_arrays.solve(pl, 12, order, sc, _plain(rows)))
    assert np.array_equal(warm.ends, _flat(node_times(pl, 12, order, sc).ends))


def test_large_orders_remember_nothing(monkeypatch):
    monkeypatch.setattr(timing_arrays, "MEMO_MAX_NODES", 0)
    table = build_schedule("zbv", 4, None, 8, EQUAL)
    rows = Rows(table.ranks.rows)  # a fresh memo (a generator may hand out an order it built before)
    sc = EQUAL.for_placement(table.placement)
    got = timing_arrays.solve(table.placement, 8, table.compute_order(), sc, rows)
    assert not any(key[0] in ("timing", "ends") for key in rows.memo)
    _same_times(got, timing_arrays.solve(table.placement, 8, table.compute_order(), sc, _plain(rows)))


def test_receive_slots_count_the_compute_nodes_before():
    """`_compute_before`, whole times or not, distinct on a rank or shared: a plain count."""
    rng = random.Random(3)
    for trial in range(40):
        n_ranks = rng.randint(1, 6)
        whole = trial % 2 == 0
        per_rank = []
        for _ in range(n_ranks):
            k = rng.randint(0, 12)
            if trial % 4 == 0:  # whole and distinct on each rank
                vals = [float(x) for x in sorted(rng.sample(range(31), k))]
            else:
                vals = sorted(rng.randint(0, 30) + (0.0 if whole else rng.random()) for _ in range(k))
            per_rank.append(vals)
        n_compute = np.array([len(v) for v in per_rank], dtype=np.int64)
        cfirst = np.zeros(n_ranks + 1, dtype=np.int64)
        np.cumsum(n_compute, out=cfirst[1:])
        cstarts = np.array([x for v in per_rank for x in v], dtype=np.float64)
        peer = np.array([rng.randrange(n_ranks) for _ in range(25)], dtype=np.int64)
        t = np.array([float(rng.randint(0, 32)) for _ in range(25)], dtype=np.float64)
        got = _compute_before(cstarts, cfirst, t, peer)
        # (and those of the ranks before the peer)
        want = [
            int(cfirst[r]) + sum(1 for x in per_rank[r] if x < tt)
            for r, tt in zip(peer.tolist(), t.tolist(), strict=True)
        ]
        assert got.tolist() == want


def test_metrics_from_the_simulators_columns_are_the_intervals_own():
    for name in ("1f1b", "zbv", "dualpipe"):
        table = build_schedule(name, 4, None, 8, PER_RANK)
        timeline = simulate(table, PER_RANK).timeline
        from_columns = timeline_metrics(timeline)
        for rt in timeline.ranks:
            rt.intervals = list(rt.intervals)
        assert repr(timeline_metrics(timeline)) == repr(from_columns)


def test_positions_that_are_not_a_permutation_go_to_the_reference_walk():
    """The validator reads each comm row's boundary from its position, which needs every rank's positions
    to be 0..length-1, each held once: a table where two nodes share a place is not proven valid here."""
    table = build_schedule("1f1b", 4, None, 8, EQUAL)
    assert compact_validation.valid(table)
    r = table.ranks
    c_pos = r.c_pos.copy()
    c_pos[0] = r.node_pos[r.first[r.c_rank[0]]]  # onto a compute node of its rank
    comm = {
        "rank": r.c_rank,
        "pos": c_pos,
        "kind": r.c_kind,
        "mb": r.c_mb,
        "stage": r.c_stage,
        "peer": r.c_peer,
    }
    bad = LoweredRanks(r.order, r.rows, r.node_pos, r.first, comm, r.hints, r.hint_first, r.lengths)
    assert not compact_validation.valid(ScheduleTable(table.placement, 8, bad, "1f1b", {}))
