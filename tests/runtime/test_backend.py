"""The run summary every backend produces, and the runner's kind -> handler table held to the semantics."""

from __future__ import annotations

import pytest

from primuspp.runtime import runner
from primuspp.runtime.backend import RunSummary, StepSummary, TrainOptions
from primuspp.schedule import semantics as sem
from primuspp.schedule.nodes import NodeKind
from primuspp.trace.timeline import Interval, RankTimeline, Timeline


def _timeline(spans: list[tuple[float, float]]) -> Timeline:
    ranks = [RankTimeline(r, [Interval("F", 0, r, 0, a, b)]) for r, (a, b) in enumerate(spans)]
    return Timeline("t", len(spans), 1, 1, ranks)


def test_step_summary_separates_wall_time_from_the_pipeline_span():
    step = StepSummary.measure(0, _timeline([(0.0, 4.0), (2.0, 10.0)]), wall_ms=25.0, loss=1.5, tokens=100)
    assert step.step_time_ms == 25.0 and step.pipeline_ms == 10.0
    assert step.bubble_rate == pytest.approx(1 - (4 + 8) / 2 / 10)
    assert step.tokens_per_s == pytest.approx(100 / 0.025)
    assert list(step.to_dict()) == [
        "step", "loss", "step_time_ms", "pipeline_ms", "tokens_per_s", "bubble_rate", "peak_activation_bytes"
    ]  # fmt: skip
    bare = StepSummary.measure(0, _timeline([(0.0, 1.0)]), wall_ms=2.0).to_dict()
    assert "loss" not in bare and "tokens_per_s" not in bare


def test_run_summary_aggregates_the_steady_steps():
    steps = [
        StepSummary(0, 100.0, 90.0, 0.5, [10, 20]),  # warm-up: left out of the steady figures
        StepSummary(1, 20.0, 15.0, 0.2, [30, 5]),
        StepSummary(2, 30.0, 25.0, 0.4, [1, 2]),
    ]
    run = RunSummary("emulate", {"algorithm": "1f1b", "pp": 2}, steps, tokens_per_step=50, extra={"x": 1})
    doc = run.to_dict()
    assert doc["backend"] == "emulate" and doc["algorithm"] == "1f1b" and doc["x"] == 1 and "model" not in doc
    assert doc["steady_step_time_ms"] == 25.0 and doc["steady_pipeline_ms"] == 20.0
    assert doc["bubble_rate"] == pytest.approx(0.3)
    assert doc["tokens_per_s"] == pytest.approx(2 * 50 / 0.05)
    assert doc["peak_activation_bytes"] == [30, 20]
    assert doc["step_times_ms"] == [100.0, 20.0, 30.0] and "losses" not in doc
    one = RunSummary("torch", {}, steps[:1])
    assert one.steady_step_time_ms == 100.0 and one.bubble_rate == 0.5


def test_train_options_given():
    opts = TrainOptions({"fwd": None, "verify": False, "data": "x", "megatron_settings": [], "steps": 0})
    assert opts.given("fwd", "verify", "data", "megatron_settings", "steps") == ["data", "steps"]


def test_every_node_kind_has_a_runner_handler():
    runner._check_handlers()  # also run at import
    for kind, row in sem.SEMANTICS.items():
        if row.role == "comm":
            assert row.carries in runner._CARRIES
        elif not row.parts:
            assert kind in runner.HANDLERS


class _Kind:
    name = "RECOMPUTE"


def test_a_node_kind_without_a_handler_fails_loudly(monkeypatch):
    recompute = _Kind()
    monkeypatch.setitem(sem.SEMANTICS, recompute, sem.KindSemantics(recompute, "compute"))  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=r"no handler for node kind.*RECOMPUTE"):
        runner._check_handlers()
    monkeypatch.delitem(sem.SEMANTICS, recompute)
    odd = sem.KindSemantics(NodeKind.SEND_F, "comm", carries="weights")
    monkeypatch.setitem(sem.SEMANTICS, NodeKind.SEND_F, odd)
    with pytest.raises(RuntimeError, match="SEND_F"):
        runner._check_handlers()
