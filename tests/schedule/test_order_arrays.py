"""`array_order.order_arrays` (fields read with map, parts expanded as arrays) equals its plain loop."""

from __future__ import annotations

import random

import numpy as np
import pytest

from primuspp.algorithms.base import GenerationRequest
from primuspp.algorithms.registry import ALGORITHMS, _resolve_params
from primuspp.schedule.array_order import order_arrays
from primuspp.schedule.costs import CostModel
from primuspp.schedule.nodes import Node, NodeKind
from primuspp.schedule.placement import make_placement
from tests.oracles.order_arrays import order_arrays as order_arrays_reference
from tests.schedule.random_orders import random_order

_K = NodeKind


def assert_same(order) -> None:
    fast, plain = order_arrays(order), order_arrays_reference(order)
    assert fast.keys() == plain.keys()
    assert fast["parts_ok"] == plain["parts_ok"]
    for key in fast.keys() - {"parts_ok"}:
        assert fast[key].dtype == plain[key].dtype, key
        assert np.array_equal(fast[key], plain[key]), key


@pytest.mark.parametrize("name", ["1f1b", "zero-bubble", "dualpipe", "dualpipe-v", "zbv", "v-half"])
def test_registry_orders(name):
    algo = ALGORITHMS[name]
    params = _resolve_params(algo, {})
    for p, m in ((1, 2), (2, 4), (4, 8)):
        if not algo.refuse(p, algo.vpp_default, m, params):
            assert_same(algo.generate(GenerationRequest(p, algo.vpp_default, m, CostModel(), params)))


@pytest.mark.parametrize("seed", range(20))
def test_random_orders_with_fb_and_memory_nodes(seed):
    rng = random.Random(seed)
    kind = rng.choice(["linear", "v", "loop"])
    pp = rng.randint(1, 4)
    placement = make_placement(kind, pp, 1 if kind == "linear" else 2)
    assert_same(random_order(placement, rng.randint(1, 6), rng))


def test_empty_and_malformed_composites():
    assert_same([])
    assert_same([[], []])
    one_part = Node(_K.FB, 0, 0, None, (Node(_K.F, 0, 0),))
    wrong_kind = Node(_K.FB, 0, 1, None, (Node(_K.B, 0, 0), Node(_K.F, 2, 1)))
    no_parts = Node(_K.FB, 0, 1)
    for order in ([[one_part, Node(_K.F, 1, 0)]], [[wrong_kind]], [[no_parts]], [[no_parts], [one_part]]):
        assert_same(order)
        assert order_arrays(order)["parts_ok"] is False
