"""Every registered algorithm yields a valid table on every (p, v, m) it admits, or refuses in one line."""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from primuspp.algorithms.registry import ALGORITHMS, build_schedule
from primuspp.errors import ScheduleError
from primuspp.schedule.validation import validate

#: parameters the sweep passes: keep the exact solver's runs short
SWEEP_PARAMS = {"zb-optimal": {"time_limit": 0.2}}


def work_items(table) -> int:
    """Compute passes in a table, an FB node counting as its two parts."""
    return sum(len(node.parts) or 1 for _, node in table.compute_nodes())


@settings(max_examples=300, deadline=None)
@given(
    name=st.sampled_from(sorted(ALGORITHMS)),
    pp=st.integers(1, 8),
    vpp=st.integers(1, 4),
    data=st.data(),
)
def test_valid_or_refused(name, pp, vpp, data):
    m = data.draw(st.integers(1, 4 * pp), label="m")
    algo = ALGORITHMS[name]
    params = SWEEP_PARAMS.get(name, {})
    try:
        table = build_schedule(name, pp, vpp, m, **params)
    except ScheduleError as err:
        message = str(err)
        assert "\n" not in message and message
        assert not algo.vpp_ok(vpp) or algo.refuse(pp, vpp, m, params) is not None
        return
    assert algo.vpp_ok(vpp)
    validate(table)  # build_schedule validates; validating again keeps this test honest
    assert table.pp == pp and table.num_microbatches == m
    visits = sum(len(table.placement.route_of(mb)) for mb in range(m))
    assert work_items(table) >= visits


GRID = {
    "gpipe": [1],
    "1f1b": [1],
    "zero-bubble": [1],
    "zb-h2": [1],
    "zero-bubble-heuristic": [1],
    "1f1b-interleaved": [2, 3, 4],
    "1f1b-interleaved-padded": [2, 3, 4],
    "zbv": [2],
    "v-half": [2],
    "v-min": [2],
    "v-auto": [2],
    "dualpipe": [2],
    "dualpipe-v": [2],
}


@pytest.mark.parametrize("name", sorted(GRID))
@settings(max_examples=20, deadline=None, derandomize=True)
@given(pp=st.integers(2, 8), v_index=st.integers(0, 2), m_index=st.integers(0, 31))
@example(pp=2, v_index=0, m_index=0)  # the grid's corners: p=2 m=1, p=8 m=32 at the largest v
@example(pp=8, v_index=2, m_index=31)
@example(pp=7, v_index=1, m_index=12)  # p that divides nothing, m between p and 2p
def test_small_grid(name, pp, v_index, m_index):
    """The issue's grid: p in 2..8, every v the algorithm takes (interleaved: 2..4), m in 1..4p: a table
    where the algorithm admits the point, a refusal where it does not."""
    vs = GRID[name]
    vpp, m = vs[v_index % len(vs)], 1 + m_index % (4 * pp)
    if ALGORITHMS[name].refuse(pp, vpp, m, {}):
        with pytest.raises(ScheduleError):
            build_schedule(name, pp, vpp, m)
    else:
        build_schedule(name, pp, vpp, m)


def test_grid_covers_every_generator():
    assert set(GRID) | {"zb-optimal"} == set(ALGORITHMS)
