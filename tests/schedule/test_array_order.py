"""ArrayOrder: the generators' column orders equal the Node orders they stand for, element by element, and
a build reads them without creating a compute Node."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest

from primuspp.algorithms.base import GenerationRequest
from primuspp.algorithms.classic import gpipe, one_f_one_b
from primuspp.algorithms.dualpipe import dualpipe
from primuspp.algorithms.registry import ALGORITHMS, build_schedule, get_algorithm
from primuspp.algorithms.search import portfolio
from primuspp.algorithms.v.blocks import ZB, ZB_TIGHT, offsets
from primuspp.algorithms.v.grid import SlotSchedule
from primuspp.algorithms.zero_bubble import zero_bubble
from primuspp.schedule.array_order import ArrayOrder, rank_lengths
from primuspp.schedule.costs import CostModel
from primuspp.schedule.lowering import ARRAY_MIN_NODES, lower_comms
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import make_placement, v_shape
from primuspp.sim import simulate
from tests.oracles import generators
from tests.oracles.lowering import lower_comms_reference
from tests.oracles.order_arrays import order_arrays as order_arrays_reference
from tests.schedule.random_orders import random_order

SIZES = [(1, 2), (2, 4), (3, 7), (4, 8), (5, 12), (8, 16)]
REFERENCES = {
    "gpipe": generators.gpipe,
    "1f1b": generators.one_f_one_b_order,
    "dualpipe": generators.dualpipe,
    "dualpipe-v": generators.dualpipe_v,
}
ARRAY_GENERATORS = {
    "gpipe": gpipe.generate,
    "1f1b": one_f_one_b.generate,
    "zero-bubble": zero_bubble.generate,
    "dualpipe": dualpipe.generate_dualpipe,
    "dualpipe-v": dualpipe.generate_dualpipe_v,
}


def assert_equal_orders(array: ArrayOrder, nodes) -> None:
    """Element by element, rank lengths included, without relying on ArrayOrder.__eq__."""
    assert isinstance(array, ArrayOrder)
    assert len(array) == len(nodes)
    assert array.lengths() == [len(seq) for seq in nodes]
    for r, seq in enumerate(nodes):
        got = array[r]
        assert type(got) is tuple and len(got) == len(seq)
        for a, b in zip(got, seq, strict=True):
            assert type(a) is Node and a == b and a.parts == b.parts and a.peer == b.peer


def _request(name: str, p: int, m: int) -> GenerationRequest | None:
    algo = get_algorithm(name)
    v = algo.vpp_default
    if algo.refuse(p, v, m, {}):
        return None
    return GenerationRequest(p, v, m, CostModel(), {})


#: every (generator, size) the generator accepts (dualpipe refuses odd p and m < 2p: those are not cases)
CASES = [(name, p, m) for name in sorted(ARRAY_GENERATORS) for p, m in SIZES if _request(name, p, m)]


def test_every_array_generator_has_cases():
    assert {name for name, _, _ in CASES} == set(ARRAY_GENERATORS)


@pytest.mark.parametrize("name,p,m", CASES)
def test_array_generators_equal_their_node_references(name, p, m):
    req = _request(name, p, m)
    reference = REFERENCES.get(name, generators.zero_bubble)
    assert_equal_orders(ARRAY_GENERATORS[name](req), reference(req))


def _slot_order_reference(sched: SlotSchedule) -> list[list[Node]]:
    """The slot schedule's order as Nodes, read from its codes one op at a time."""
    kinds = (NodeKind.F, NodeKind.B, NodeKind.W)
    out = []
    for row in sched.occ.tolist():
        seq = []
        for op in row:
            if op >= 0:
                key = op // 3
                seq.append(Node(kinds[op % 3], key // sched.n, key % sched.n))
        out.append(seq)
    return out


@pytest.mark.parametrize("p,m", [(2, 4), (3, 6), (4, 9), (6, 12)])
def test_slot_schedule_order_equals_its_codes(p, m):
    for block in (ZB, ZB_TIGHT):
        sched = SlotSchedule(p, m, *offsets(p, block))
        sched.squeeze_derived(sched.peak())
        assert_equal_orders(sched.order(), _slot_order_reference(sched))


@pytest.mark.parametrize("name", sorted(set(ALGORITHMS) - {"zb-optimal"}))
def test_every_registered_algorithm_builds_the_same_table_from_either_order(name):
    """Whatever a generator returns (columns or Nodes), lowering it gives the reference lowering of its Node
    form."""
    algo = get_algorithm(name)
    for p, m in ((2, 4), (4, 8), (4, 16)):
        if algo.refuse(p, algo.vpp_default, m, {}):
            continue
        table = build_schedule(name, p, None, m, CostModel(1000, 1000, 1000))
        order = table.ranks.order
        nodes = [list(seq) for seq in order]
        assert lower_comms(table.placement, m, ArrayOrder.from_nodes(nodes)) == lower_comms_reference(
            table.placement, m, nodes
        )


COLUMN_BUILDS = ["gpipe", "1f1b", "1f1b-interleaved", "dualpipe", "dualpipe-v", "zbv", "v-min"]


@pytest.mark.parametrize("name", COLUMN_BUILDS)
def test_a_large_build_and_simulation_create_no_compute_node(name):
    """Above `lowering.ARRAY_MIN_NODES` the build (generate, lower, validate) and the simulation read the
    columns alone (below it the lists of the loop are quicker, and they build the Nodes)."""
    algo = get_algorithm(name)
    params = {"effort": "fast"} if any(p.name == "effort" for p in algo.params) else {}
    table = build_schedule(name, 8, None, 320, CostModel(1000, 1000, 1000), **params)
    simulate(table, CostModel(1000, 1000, 1000))
    order = table.ranks.order
    assert isinstance(order, ArrayOrder)
    assert order._cache == [None] * len(order)
    assert order.num_nodes() >= ARRAY_MIN_NODES


@pytest.mark.parametrize("seed", range(8))
def test_from_nodes_round_trip_with_fb_and_memory_nodes(seed):
    rng = random.Random(seed)
    kind = rng.choice(["linear", "v", "loop"])
    p = rng.randint(1, 4)
    pl = make_placement(kind, p, 1 if kind == "linear" else 2)
    m = rng.randint(1, 6)
    nodes = random_order(pl, m, rng)
    array = ArrayOrder.from_nodes(nodes)
    ref = order_arrays_reference(nodes)
    for key in ("node_kind", "kind", "mb", "stage", "rank", "index", "part"):
        assert np.array_equal(array.rows[key], ref[key]), key
    fresh = ArrayOrder(array.rows, array.first)  # nothing cached: rebuilt from the columns
    assert_equal_orders(fresh, nodes)
    again = pickle.loads(pickle.dumps(fresh))
    assert again == nodes and hash(again) == hash(tuple(tuple(seq) for seq in nodes))
    assert rank_lengths(again) == [len(seq) for seq in nodes]
    assert fresh[-1] == tuple(nodes[-1]) and fresh[0:2] == tuple(tuple(s) for s in nodes[0:2])
    rows = ArrayOrder.from_rows(
        ref["node_kind"], ref["kind"], ref["mb"], ref["stage"], ref["part"], [len(s) for s in nodes]
    )
    assert_equal_orders(rows, nodes)


def test_malformed_columns_are_refused():
    fb = NodeKind.FB
    with pytest.raises(ValueError):  # a composite kind is not a simple node
        ArrayOrder.from_flat([list(NodeKind).index(fb)], [0], [0], [1])
    with pytest.raises(ValueError):  # an FB without its backward part
        ArrayOrder.from_nodes([[Node(fb, 0, 0, None, (Node(NodeKind.F, 0, 0),))]])
    with pytest.raises(ValueError):  # lengths that do not cover the columns
        ArrayOrder.from_flat([0, 0], [0, 1], [0, 0], [1])


@pytest.mark.parametrize("b_free", [0.5, 0.0, 1.0, (0.2, 0.9, 0.5, 0.4, 0.7, 0.1, 0.3, 0.6)])
def test_scoring_columns_equals_scoring_nodes(b_free):
    p, m = 4, 10
    placement = v_shape(p)
    costs = CostModel(1000, 1100, 700, comm=30).for_placement(placement)
    for block in (ZB, ZB_TIGHT):
        array = SlotSchedule(p, m, *offsets(p, block)).order()
        nodes = [list(seq) for seq in ArrayOrder(array.rows, array.first)]
        assert portfolio.score(placement, m, array, costs, b_free) == portfolio.score(
            placement, m, nodes, costs, b_free
        )
        assert array._cache == [None] * p  # scored as columns
