import json

import pytest

from primuspp.algorithms.registry import build_schedule, get_algorithm, load_table
from primuspp.errors import ScheduleError, ValidationError
from primuspp.schedule.formats import to_json


@pytest.mark.parametrize(
    "alias,name",
    [
        ("zb1p", "zero-bubble"),
        ("ZB-H1", "zero-bubble"),
        ("interleaved", "1f1b-interleaved"),
        ("zerobubble", "zero-bubble"),
    ],
)
def test_aliases(alias, name):
    assert get_algorithm(alias).name == name


def test_refusals_are_one_line_and_name_the_key():
    with pytest.raises(ScheduleError, match=r"vpp=2 is not allowed for 1f1b \(allowed: 1\)") as err:
        build_schedule("1f1b", 4, 2, 8)
    assert err.value.key == "vpp"
    with pytest.raises(ScheduleError, match="unknown algorithm 'nope'"):
        build_schedule("nope", 4, None, 8)
    with pytest.raises(ScheduleError, match="unknown parameter 'max_mem'"):
        build_schedule("1f1b", 4, None, 8, max_mem=3)


def test_file_tables(tmp_path):
    table = build_schedule("zero-bubble", 3, None, 5)
    path = tmp_path / "t.json"
    path.write_text(to_json(table))
    assert build_schedule(f"file:{path}") == table
    with pytest.raises(ScheduleError, match="table has pp=3, asked for 4"):
        load_table(path, pp=4)
    data = json.loads(to_json(table))
    data["ranks"][1].remove("RECV_F1.1<0")
    path.write_text(json.dumps(data))
    with pytest.raises(ValidationError, match=r"file:.*t\.json: rank 1: F1\.1 .* runs before RECV_F1\.1<0"):
        build_schedule(f"file:{path}")
