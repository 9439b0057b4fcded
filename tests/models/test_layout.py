"""Layer layouts: Megatron's layout string both ways, first/last stage sizes, the balancer (against brute
force)."""

from __future__ import annotations

import itertools

import pytest

from primuspp.errors import ConfigError
from primuspp.models.layout import balance, emit_layout, even_layout, first_last_layout, parse_layout


def test_parse_megatron_deepseek_example():
    # Megatron's documented DeepSeek-V3 layout (pp 16 x vpp 2) without its MTP stage: 3 + 29 x 2 layers,
    # then an empty stage and the loss stage
    counts = parse_layout("Et*3|(tt|)*29|L", 61, 32)
    assert counts == (3, *(2,) * 29, 0, 0)


@pytest.mark.parametrize("layout", [(4, 4, 4, 4), (1, 7, 7, 1), (3, 0, 5, 4), (12,)])
def test_emit_parse_round_trip(layout):
    text = emit_layout(layout)
    assert parse_layout(text, sum(layout), len(layout)) == layout


def test_emit_form():
    assert emit_layout((3, 4, 1)) == "Et*3|t*4|tL"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("Et*3|t*4|t*4L", "holds 11 transformer layers, the model has 12"),
        ("Et*4|t*4", "names 2 stages, the schedule has 3"),
        ("t*4|Et*4|t*4L", "first stage must start with E"),
        ("Et*4|t*4|t*4", "last stage must end with L"),
        ("Et*4|tLt*3|t*4L", "E only opens the first stage"),
        ("Et*4|t*4|t*3mL", "m .multi-token prediction. is not modelled"),
        # bounded before it is built: 10^9 symbols (and 4 GB) from 20 characters
        ("((t*1000)*1000)*1000", "expands to over 38 symbols"),
        ("Et*" + "9" * 5000 + "L", "unknown symbols"),  # past int()'s digit limit: was a ValueError
    ],
)
def test_bad_layouts(text, match):
    with pytest.raises(ConfigError, match=match) as info:
        parse_layout(text, 12, 3)
    assert info.value.key == "--layout"


def test_even_and_first_last():
    assert even_layout(32, 8) == (4,) * 8
    with pytest.raises(ConfigError, match="32 layers do not divide into 6"):
        even_layout(32, 6)
    assert first_last_layout(32, 4, 6, 6) == (6, 10, 10, 6)
    assert first_last_layout(30, 4, None, 6) == (8, 8, 8, 6)
    # loop placement, vpp 2: part s is chunk s // 4 of rank s % 4
    assert first_last_layout(32, 8, 2, 2, vpp=2) == (1, 7, 7, 1, 1, 7, 7, 1)
    with pytest.raises(ConfigError, match="cannot hold the remaining"):
        first_last_layout(32, 4, 7, 6)


def brute_force(costs, parts, first, last):
    n, best = len(costs), float("inf")
    for cuts in itertools.combinations(range(1, n), parts - 1):
        bounds = (0, *cuts, n)
        loads = [sum(costs[a:b]) for a, b in itertools.pairwise(bounds)]
        loads[0] += first
        loads[-1] += last
        best = min(best, max(loads))
    return best


@pytest.mark.parametrize(
    ("costs", "parts", "first", "last"),
    [
        ([1.0] * 12, 4, 0.0, 0.0),
        ([1.0] * 12, 4, 0.3, 2.5),
        ([1.0] * 3 + [3.0] * 9, 4, 0.1, 1.0),
        ([2.0, 1.0, 5.0, 1.0, 1.0, 3.0, 2.0, 2.0, 1.0], 3, 0.0, 4.0),
    ],
)
def test_balance_is_optimal(costs, parts, first, last):
    counts = balance(costs, parts, first, last)
    assert sum(counts) == len(costs) and len(counts) == parts and min(counts) >= 1
    bounds = [0, *itertools.accumulate(counts)]
    loads = [sum(costs[a:b]) for a, b in itertools.pairwise(bounds)]
    loads[0] += first
    loads[-1] += last
    assert max(loads) == pytest.approx(brute_force(costs, parts, first, last))


def test_balance_spreads_evenly():
    # a heavy head: the last stage takes fewer layers, the rest share them evenly (no 5,5,5,...,1,1 cut)
    counts = balance([1.0] * 32, 8, 0.0, 3.0)
    assert counts[-1] == 1 and max(counts[:-1]) - min(counts[:-1]) <= 1


def test_balance_one_part_and_float_sums():
    # one part holds everything: the bound must survive float summation order
    costs = [0.1 + i * 1e-3 for i in range(32)]
    assert balance(costs, 1, 0.3, 0.7) == (32,)
    assert balance([0.1] * 7, 7, 0.2, 0.3) == (1,) * 7
