"""The compact lowered table and its array validator against the plain reference forms."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest

from primuspp.algorithms.base import GenerationRequest
from primuspp.algorithms.registry import ALGORITHMS, _resolve_params
from primuspp.errors import ValidationError
from primuspp.schedule import compact, compact_validation
from primuspp.schedule.compact import LoweredRanks
from primuspp.schedule.costs import CostModel
from primuspp.schedule.lowering import lower_comms
from primuspp.schedule.nodes import Node
from primuspp.schedule.placement import make_placement
from primuspp.schedule.table import ScheduleTable
from primuspp.schedule.validation import validate_walk
from tests.oracles.lowered import from_ranks
from tests.oracles.lowering import lower_comms_reference

SIZES = ((1, 1), (1, 3), (2, 4), (3, 6), (4, 10), (8, 16))
COSTS = CostModel(1000, 1200, 800, comm=10.0)


def registry_orders():
    for name, algo in ALGORITHMS.items():
        if name == "zb-optimal":
            continue
        for v in (v for v in (1, 2, 3) if algo.vpp_ok(v)):
            for p, m in SIZES:
                params = _resolve_params(algo, {})
                if algo.refuse(p, v, m, params):
                    continue
                yield (
                    name,
                    make_placement(algo.placement, p, v),
                    m,
                    algo.generate(GenerationRequest(p, v, m, COSTS, params)),
                )
    # memory nodes (OFFLOAD/RELOAD)
    algo = ALGORITHMS["v-half"]
    params = _resolve_params(algo, {"offload": True})
    order = algo.generate(GenerationRequest(4, 2, 8, COSTS, params))
    yield "v-half+offload", make_placement("v", 4, 2), 8, order


CASES = list(registry_orders())


@pytest.mark.parametrize("name,placement,m,order", CASES, ids=[f"{c[0]}-{c[1].pp}x{c[2]}" for c in CASES])
def test_compact_lowering_equals_reference(name, placement, m, order):
    compact = lower_comms(placement, m, order)
    reference = lower_comms_reference(placement, m, order)
    assert isinstance(compact, LoweredRanks)
    assert tuple(compact) == reference
    assert compact == reference and reference == compact
    table = ScheduleTable(placement, m, compact, name)
    assert table.compute_order() == tuple(tuple(n for n in seq if not n.kind.is_comm) for seq in reference)
    assert table.num_nodes() == sum(len(seq) for seq in reference)
    # the array validator proves every table without memory nodes valid (so the fast path is the one used)
    assert compact_validation.valid(table) == ("offload" not in name)
    validate_walk(table)


def test_lowered_ranks_reads_as_a_tuple():
    _, placement, m, order = next(c for c in CASES if c[0] == "zbv" and c[1].pp == 4)
    ranks = lower_comms(placement, m, order)
    plain = lower_comms_reference(placement, m, order)
    assert ranks[-1] == plain[-1] and ranks[1:3] == plain[1:3] and len(ranks) == len(plain)
    with pytest.raises(IndexError):
        ranks[len(plain)]
    again = pickle.loads(pickle.dumps(ranks))
    assert again == plain and hash(again) == hash(plain)
    assert from_ranks(plain) == plain


def _mutate(rng: random.Random, ranks: list[list[Node]], p: int, m: int) -> None:
    seq = ranks[rng.randrange(p)]
    i = rng.randrange(len(seq))
    op = rng.randrange(6)
    if op == 0 and i + 1 < len(seq):  # swap neighbours (may reorder comm batches: a deadlock)
        seq[i], seq[i + 1] = seq[i + 1], seq[i]
    elif op == 1:
        del seq[i]
    elif op == 2:
        seq.insert(rng.randrange(len(seq)), seq[i])
    elif op == 3:
        n = seq[i]
        seq[i] = Node(n.kind, n.microbatch, n.stage, None if n.peer is None else (n.peer + 1) % p, n.parts)
    elif op == 4:
        n = seq[i]
        seq[i] = Node(n.kind, (n.microbatch + 1) % m, n.stage, n.peer, n.parts)
    else:
        seq.insert(rng.randrange(len(seq)), seq.pop(i))


@pytest.mark.parametrize("name", ["1f1b", "zbv", "dualpipe", "1f1b-interleaved", "zero-bubble"])
def test_array_validator_never_accepts_what_the_walk_refuses(name):
    """Random edits of valid tables (swaps, deletions, copies, wrong peers, moves; hints nudged): whenever
    the array validator says valid, the reference walk agrees; and it does refuse most of them."""
    rng = random.Random(name)
    algo = ALGORITHMS[name]
    v = algo.vpp_default
    refused = 0
    for p, m in ((2, 4), (4, 8)):
        placement = make_placement(algo.placement, p, v)
        order = algo.generate(GenerationRequest(p, v, m, COSTS, _resolve_params(algo, {})))
        lowered = lower_comms(placement, m, order)
        for trial in range(120):
            ranks = [list(seq) for seq in lowered]
            _mutate(rng, ranks, p, m)
            hints = lowered.hints.copy()
            if trial % 5 == 0:
                hints[rng.randrange(len(hints))] += rng.choice((-3.0, 3.0))
            table = ScheduleTable(placement, m, from_ranks(ranks, hints, lowered.hint_first), name)
            if not compact_validation.valid(table):
                refused += 1
                continue
            validate_walk(ScheduleTable(placement, m, tuple(map(tuple, ranks)), name))
    assert refused > 100


def test_validate_names_the_problem_of_a_compact_table():
    """A compact table the arrays refuse goes to the walk, which names the first problem as before."""
    _, placement, m, order = next(c for c in CASES if c[0] == "1f1b" and c[1].pp == 4)
    lowered = lower_comms(placement, m, order)
    ranks = [list(seq) for seq in lowered]
    del ranks[1][0]
    table = ScheduleTable(placement, m, from_ranks(ranks, lowered.hints, lowered.hint_first))
    from primuspp.schedule.validation import validate

    with pytest.raises(ValidationError) as fast:
        validate(table)
    with pytest.raises(ValidationError) as slow:
        validate_walk(ScheduleTable(placement, m, tuple(map(tuple, ranks))))
    assert str(fast.value) == str(slow.value)


@pytest.mark.parametrize(
    "name,placement,m,order", CASES[::7], ids=[f"{c[0]}-{c[1].pp}x{c[2]}" for c in CASES[::7]]
)
def test_text_forms_read_from_the_arrays(name, placement, m, order):
    """to_json / to_text of a compact table write what they write for the plain tuples."""
    from primuspp.schedule.formats import to_json, to_text

    compact = ScheduleTable(placement, m, lower_comms(placement, m, order), name)
    plain = ScheduleTable(placement, m, lower_comms_reference(placement, m, order), name)
    assert to_json(compact) == to_json(plain)
    assert to_text(compact) == to_text(plain)


LARGE_CASES = CASES[::3] + CASES[-1:]  # (the last: memory nodes)


@pytest.mark.parametrize(
    "name,placement,m,order", LARGE_CASES, ids=[f"{c[0]}-{c[1].pp}x{c[2]}" for c in LARGE_CASES]
)
def test_large_table_forms_are_the_small_ones(monkeypatch, name, placement, m, order):
    """From NARROW_FROM elements on, lowering and validation make their arrays int32 (int16 where the values
    fit) and fill them rank by rank: the same table, proven valid the same way (here from the first
    element)."""
    small = lower_comms(placement, m, order)
    monkeypatch.setattr(compact, "NARROW_FROM", 0)
    monkeypatch.setattr(compact_validation, "WIDE_UNTIL", 0)  # (validation's own threshold)
    large = lower_comms(placement, m, order)
    assert large == lower_comms_reference(placement, m, order)
    narrow = ("c_rank", "c_pos", "c_mb", "c_stage", "c_peer", "node_pos")
    assert all(getattr(large, key).itemsize <= 4 for key in narrow) and large.node_pos.dtype == np.int32
    for key in ("c_rank", "c_pos", "c_kind", "c_mb", "c_stage", "c_peer", "node_pos", "first", "hints"):
        assert getattr(large, key).tolist() == getattr(small, key).tolist(), key
    assert large.lengths == small.lengths
    assert compact_validation.valid(ScheduleTable(placement, m, large, name)) == ("offload" not in name)


def test_large_table_forms_read_and_dump_as_the_small_ones(monkeypatch):
    """The narrow columns of a large table (int16 where they fit) read and dump as the int64 ones."""
    from primuspp.schedule.formats import to_json, to_text

    _, placement, m, order = next(c for c in CASES if c[0] == "zbv" and c[1].pp == 8)
    small = ScheduleTable(placement, m, lower_comms(placement, m, order), "zbv")
    monkeypatch.setattr(compact, "NARROW_FROM", 0)
    large = ScheduleTable(placement, m, lower_comms(placement, m, order), "zbv")
    assert large.ranks.c_rank.dtype == np.int16
    assert to_json(large) == to_json(small) and to_text(large) == to_text(small)
    assert [large.ranks.texts(r) for r in range(placement.pp)] == [
        small.ranks.texts(r) for r in range(placement.pp)
    ]
    again = pickle.loads(pickle.dumps(large.ranks))
    assert again == small.ranks and again.c_pos.dtype == large.ranks.c_pos.dtype
