import pytest

from primuspp.errors import ScheduleError
from primuspp.schedule.placement import make_placement


def test_loop():
    pl = make_placement("loop", 4, 2)
    assert pl.stage_rank == (0, 1, 2, 3, 0, 1, 2, 3)
    assert pl.stage_chunk == (0, 0, 0, 0, 1, 1, 1, 1)
    assert pl.next_stage[3] == 4 and pl.prev_stage[0] == -1 and pl.cost_share == 0.5


def test_v_turn_is_local():
    pl = make_placement("v", 4, 2)
    assert pl.stage_rank == (0, 1, 2, 3, 3, 2, 1, 0)
    assert pl.stage_rank[3] == pl.stage_rank[4]


def test_bidirectional_routes():
    pl = make_placement("bidirectional", 4, 2)
    assert pl.routes == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert pl.route_of(0) == (0, 1, 2, 3) and pl.route_of(1) == (4, 5, 6, 7)
    assert pl.stage_rank[4] == 3 and pl.model_part[4] == 0 and pl.next_stage[3] == -1
    assert pl.cost_share == 1.0


def test_round_trip_dict():
    pl = make_placement("v", 3, 2)
    assert type(pl).from_dict(pl.to_dict()) == pl


def test_bad_kind():
    with pytest.raises(ScheduleError, match="allowed: linear, loop, v, bidirectional"):
        make_placement("ring", 4, 1)
