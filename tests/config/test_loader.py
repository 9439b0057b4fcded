import pytest

from primuspp.config.loader import Overrides, load_config, parse_config, run_specs
from primuspp.errors import ConfigError, ScheduleError


def test_packaged_default():
    cfg = load_config(None)
    specs = run_specs(cfg)
    assert cfg.pp == 8 and cfg.micro_batches == 32
    assert {s.algorithm for s in specs} >= {"gpipe", "1f1b", "1f1b-interleaved", "zero-bubble"}
    assert all(s.costs.forward == 1000 for s in specs)


def test_primus_config_is_read_unchanged(primus_data):
    cfg = load_config(primus_data / "pp_simulation.yaml")
    names = [(r.name, r.algorithm) for r in cfg.runs]
    assert ("basic_1f1b", "1f1b") in names and ("v-min", "v-min") in names and ("v-half", "v-half") in names
    assert ("zb-heuristic-mem8", "zero-bubble-heuristic") in names
    heur = next(r for r in cfg.runs if r.name == "zb-heuristic-mem8")
    assert heur.params == {"cost_f": 1000, "cost_b": 1000, "cost_w": 1000, "cost_comm": 10, "max_mem": 8}
    assert cfg.costs.forward == 1000 and cfg.output_dir == "./pp_simulation_result"


@pytest.mark.parametrize(
    "text,match",
    [
        (
            "pp: 8\nruns: [{algorithm: 1f1b, foo: 1}]\n",
            r"unknown key 'runs\[0\]\.foo' \(allowed: algorithm, name",
        ),
        (
            "pp: 8\nbar: 1\nruns: [{algorithm: 1f1b}]\n",
            r"unknown key 'bar' \(allowed: pp, micro_batches, costs",
        ),
        (
            "pp: 8\ncosts: {fwd: 1}\nruns: [{algorithm: 1f1b}]\n",
            r"unknown key 'costs\.fwd' \(allowed: forward",
        ),
        ("pp: eight\nruns: [{algorithm: 1f1b}]\n", r"pp='eight'"),
        ("pp: 8\n", r"missing key 'runs'"),
        ("runs: [{name: x}]\n", r"missing key 'runs\[0\]\.algorithm'"),
        ("pp: [8\n", r"malformed YAML at line 2"),
        ("- 1\n- 2\n", r"expected a mapping"),
        ("schedulers: [{class: a.b.ScheduleNope}]\n", r"unknown Primus scheduler class"),
        (
            "fwd_time: 1\nschedulers: [{class: x.Schedule1F1B, pp: 4}]\n",
            r"unknown key 'pp' \(allowed: name, class",
        ),
        ("fwd_time: 1\nfoo: 2\nschedulers: [{class: x.Schedule1F1B}]\n", r"unknown key 'foo'"),
        (
            "schedulers: [{class: x.ScheduleZBVGreedy, memory_config: tiny}]\n",
            r"memory_config='tiny' \(allowed: half, min\)",
        ),
    ],
)
def test_config_errors_are_one_line(text, match):
    with pytest.raises(ConfigError, match=match) as err:
        parse_config(text, "cfg.yaml")
    assert "\n" not in str(err.value)


def test_overrides():
    cfg = parse_config("pp: 8\nruns: [{algorithm: 1f1b}, {algorithm: interleaved, vpp: 2}]\n", "x")
    specs = run_specs(cfg, Overrides(pp=4, micro_batches=6, vpp=3, costs={"forward": 5.0}))
    assert [(s.name, s.pp, s.vpp, s.micro_batches) for s in specs] == [
        ("1f1b", 4, None, 6),
        ("1f1b-interleaved-v3", 4, 3, 6),
    ]
    assert specs[0].costs.forward == 5.0
    specs = run_specs(cfg, Overrides(algorithms=("zb1p", "zero-bubble")))
    assert [s.name for s in specs] == ["zero-bubble", "zero-bubble-2"]
    with pytest.raises(ScheduleError, match="unknown algorithm"):
        run_specs(cfg, Overrides(algorithms=("nope",)))
    with pytest.raises(ConfigError, match=r"costs\.forward: must be a number >= 0"):
        run_specs(cfg, Overrides(costs={"forward": -1.0}))
