import csv
import io

import pytest

from primuspp.algorithms.registry import build_schedule
from primuspp.errors import ValidationError
from primuspp.schedule.formats import from_json, from_text, to_csv, to_json, to_text


@pytest.mark.parametrize(
    "algo,vpp", [("1f1b", None), ("zero-bubble", None), ("1f1b-interleaved", 3), ("gpipe", None)]
)
def test_json_and_text_round_trip_exactly(algo, vpp):
    table = build_schedule(algo, 4, vpp, 7)
    assert from_json(to_json(table)) == table
    again = from_text(to_text(table))
    assert again.ranks == table.ranks and again.placement == table.placement


def test_json_rejects_foreign_documents():
    with pytest.raises(ValidationError, match="not a primuspp schedule"):
        from_json('{"ranks": []}', "x.json")
    with pytest.raises(ValidationError, match="invalid JSON"):
        from_json("{", "x.json")


def test_csv_uses_torch_action_names():
    table = build_schedule("zero-bubble", 2, None, 2)
    rows = list(csv.reader(io.StringIO(to_csv(table))))
    assert rows[0] == ["0F0", "0F1", "0I0", "0W0", "0I1", "0W1"]
    rows = list(csv.reader(io.StringIO(to_csv(build_schedule("1f1b", 2, None, 2)))))
    assert rows[0] == ["0F0", "0F1", "0B0", "0B1"]


@pytest.mark.parametrize("algo,vpp", [("zero-bubble", None), ("1f1b-interleaved", 2)])
def test_csv_loads_in_torch_pipelining(tmp_path, algo, vpp):
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    table = build_schedule(algo, 4, vpp, 8)
    path = tmp_path / "table.csv"
    path.write_text(to_csv(table))
    # _load_csv on a schedule object built without stages: it parses every action and infers the
    # stage-to-rank mapping, raising on anything it does not accept.
    sched = object.__new__(schedules.PipelineScheduleMulti)
    sched.pipeline_order = {}
    sched._num_stages = table.num_stages
    sched.pp_group_size = table.pp
    sched.rank = 0
    sched._n_microbatches = table.num_microbatches
    sched.stage_index_to_group_rank = {}
    sched._stages = []  # no local stages: only the parsing and torch's _validate_schedule run
    schedules.PipelineScheduleMulti._load_csv(sched, str(path))
    assert len(sched.pipeline_order) == table.pp
    assert sched.stage_index_to_group_rank == {
        s: table.placement.stage_rank[s] for s in range(table.num_stages)
    }
    computed = sum(len(v) for v in sched.pipeline_order.values())
    assert computed == sum(1 for _ in table.compute_nodes())
