"""schedule.json from a compact table's arrays (schedule/formats_fast.py) against the readable writer
(formats.to_json_dict + json.dumps): the same text for every registered algorithm."""

import json

import pytest

from primuspp.algorithms.registry import ALGORITHMS, build_schedule, refusal
from primuspp.schedule.formats import from_json, node_texts, to_json_dict, to_json_text
from primuspp.schedule.formats_fast import ranks_json

#: every registered algorithm at the sizes it accepts (a refused size is no case: CI allows no skips)
CASES = [
    (algorithm, p, m)
    for algorithm in sorted(ALGORITHMS)
    for p, m in ((1, 1), (2, 4), (4, 8), (8, 20))
    if not refusal(algorithm, p, None, m, {})
]


@pytest.mark.parametrize(("algorithm", "p", "m"), CASES)
def test_ranks_json_is_json_dumps_of_the_node_texts(algorithm, p, m):
    table = build_schedule(algorithm, p, None, m)
    fast = ranks_json(table)
    assert fast is not None  # the registry's tables are compact: the fast path is taken
    assert fast == json.dumps(node_texts(table))
    assert to_json_text(table) == to_json_text(table, fast=False) == json.dumps(to_json_dict(table))


@pytest.mark.parametrize(("algorithm", "params"), [("zbv", {"offload": True}), ("dualpipe-v", {})])
def test_composite_and_memory_nodes(algorithm, params):
    table = build_schedule(algorithm, 4, None, 8, **params)
    assert to_json_text(table) == json.dumps(to_json_dict(table))
    assert from_json(to_json_text(table)).ranks == table.ranks


def test_a_table_of_node_tuples_takes_the_readable_path():
    table = from_json(to_json_text(build_schedule("1f1b", 2, None, 3)))
    assert ranks_json(table) is None
    assert to_json_text(table) == json.dumps(to_json_dict(table))
