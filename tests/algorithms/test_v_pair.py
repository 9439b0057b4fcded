"""The period extension's two short squeezes run with their common prefix once (`v_pair`) give exactly the
orders of two separate squeezes, on both sides of each switch (the derived prefix shared or run whole, the
fast runs or the references)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from primuspp.algorithms import v_family, v_pair, v_period, v_squeeze, vshape
from primuspp.schedule.array_order import ArrayOrder

BLOCKS = tuple(dict.fromkeys((*vshape.CATALOG, *v_family.AUTO_BLOCKS)))


def _columns(order: ArrayOrder) -> tuple[list[int], ...]:
    rows = order.rows
    return (list(order.first), *(np.asarray(rows[k]).tolist() for k in ("kind", "stage", "mb")))


def _same(x, y) -> bool:
    return [n for n, _ in x] == [n for n, _ in y] and all(
        _columns(a) == _columns(b) for (_, a), (_, b) in zip(x, y, strict=True)
    )


def _separate(p, m0, m1, block, cap, variants):
    offs = vshape.offsets(p, block)
    return tuple(vshape._squeezed(p, m, block.name, offs, cap, variants)[1] for m in (m0, m1))


def _caps(p: int, block: vshape.Block) -> list[int]:
    """The caps the V family passes, and a few above the block's own need."""
    own = vshape.estimated_peak(p, block)
    return sorted({2 * p, 2 * ((p + 2) // 2), 2 * ((p + 4) // 3), p + 1, own, own + 3})


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
@pytest.mark.parametrize("p", [2, 3, 5, 8, 13])
def test_pair_equals_two_separate_squeezes(block, p):
    for cap in _caps(p, block):
        for variants in (("derived", "explicit"), (block.squeeze,)):
            m0 = v_period.starts(cap)[0]
            m1 = m0 + v_period.gap(m0)
            got = v_pair.squeezed(p, m0, m1, block.name, vshape.offsets(p, block), cap, variants)
            want = _separate(p, m0, m1, block, cap, variants)
            assert _same(got[0], want[0]) and _same(got[1], want[1]), (block.name, p, cap, variants)


@pytest.mark.parametrize(
    ("block", "p", "cap"), [(vshape.ZB, 24, 48), (vshape.HALF, 20, 22), (vshape.MIN, 22, 18)]
)
def test_pair_at_the_v_family_caps(block, p, cap):
    # zbv, v-half and v-min: caps 2p, 2 ((p + 2) // 2), 2 ((p + 4) // 3) chunks
    m0 = v_period.starts(cap)[0]
    m1 = m0 + v_period.gap(m0)
    got = v_pair.squeezed(p, m0, m1, block.name, vshape.offsets(p, block), cap, (block.squeeze,))
    want = _separate(p, m0, m1, block, cap, (block.squeeze,))
    assert _same(got[0], want[0]) and _same(got[1], want[1])


def _derived_prefix(monkeypatch, margin: int, block=vshape.HALF, p: int = 8) -> tuple[bool, bool]:
    """(whether the derived prefix was shared, whether the orders equal two separate squeezes) with
    `v_pair.MARGIN` at `margin`."""
    monkeypatch.setattr(v_pair, "MARGIN", margin)
    cap = 2 * ((p + 2) // 2)
    m0 = v_period.starts(cap)[0]
    m1 = m0 + v_period.gap(m0)
    adopted = []
    real = v_squeeze.DerivedRun.adopt
    monkeypatch.setattr(v_squeeze.DerivedRun, "adopt", lambda self, *a: adopted.append(1) or real(self, *a))
    got = v_pair.squeezed(p, m0, m1, block.name, vshape.offsets(p, block), cap, (block.squeeze,))
    want = _separate(p, m0, m1, block, cap, (block.squeeze,))
    return bool(adopted), _same(got[0], want[0]) and _same(got[1], want[1])


def test_derived_prefix_shared_where_its_walks_stay_before_the_difference(monkeypatch):
    # half's block at p = 8: the last prefix ops' walks read 3 slots past the first differing one
    assert _derived_prefix(monkeypatch, v_pair.MARGIN) == (True, True)


def test_derived_prefix_run_whole_where_a_walk_reads_past_the_difference(monkeypatch):
    assert _derived_prefix(monkeypatch, 0) == (False, True)


def test_pair_falls_back_where_the_fast_runs_do_not_apply():
    # the cap below the block's own need: no orders for either, as the separate squeezes say
    p, block = 6, vshape.ZB
    cap = vshape.SlotSchedule(p, 20, *vshape.offsets(p, block)).peak() - 1
    got = v_pair.squeezed(p, 20, 27, block.name, vshape.offsets(p, block), cap, (block.squeeze,))
    assert got == ([], [])


def test_explicit_run_in_stretches_equals_one_run():
    p, m, block = 9, 40, vshape.ZB
    cap = 2 * p
    base = vshape.SlotSchedule(p, m, *vshape.offsets(p, block))
    whole, parts = base.copy(), base.copy()
    whole.squeeze_explicit(cap)
    run = v_squeeze.ExplicitRun.start(parts, cap, parts._arrays())
    cuts = [0, run.size // 3, run.size // 2, run.size]
    for lo, hi in pairwise(cuts):
        run.run(lo, hi)
    run.finish(parts)
    assert np.array_equal(whole._arrays()[0], parts._arrays()[0])


def test_first_difference():
    a = np.array([[0, 1, 2, 3], [4, 5, 6, 7]])
    b = np.array([[0, 1, 9, 3, 8], [4, 5, 6, 7, 8]])
    assert v_pair.first_difference(a, b) == 2
    assert v_pair.first_difference(a, a) == 4
