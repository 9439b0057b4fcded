"""`plan --html`: the Pareto front of memory vs throughput, above the winner's timeline; renders in a
browser without errors."""

from __future__ import annotations

from primuspp.commands.app import main
from primuspp.models import PRESETS
from primuspp.models.hardware import load_hardware
from primuspp.models.parallel import Parallel
from primuspp.models.plan import candidates, evaluate
from primuspp.models.plan_html import pareto
from tests.viz.browser import page_status


def test_pareto_front():
    spec, hw = PRESETS["llama2-7b"], load_hardware("mi300x")
    base = Parallel(global_batch_size=32, seq_len=4096)
    fits = evaluate(spec, hw, candidates(spec, hw, 8, base, tps=[1], pps=[8], micro_batch_sizes=[1])).fits
    front = pareto(fits)
    assert front and len(front) < len(fits)
    for p in fits:  # nothing off the front beats a front point on both axes
        for f in front:
            assert not (
                p.peak_memory_bytes < f.peak_memory_bytes and p.tokens_per_s_per_gpu > f.tokens_per_s_per_gpu
            )
    best = max(fits, key=lambda p: p.tokens_per_s_per_gpu)
    assert best in front


def test_plan_html_page(tmp_path, capsys):
    page = tmp_path / "plan.html"
    args = ["plan", "--model", "llama2-7b", "--gpu", "mi300x", "--gpus", "8", "--tp", "1", "--pp", "8"]
    args += ["--micro-batch-size", "1", "--global-batch-size", "16", "-a", "1f1b", "-a", "zbv"]
    assert main([*args, "--html", str(page)]) == 0
    assert "wrote" in capsys.readouterr().err
    text = page.read_text()
    assert 'id="plot-pareto"' in text and "Pareto front (fits)" in text
    # the winner's memory is bytes, shown in GiB like the scatter (it was labelled microbatches)
    assert "activation<br>(GiB)" in text and "most loaded rank (GiB)" in text and "(microbatches)" not in text
    status = page_status(page)
    assert status["errors"] == [] and len(status["sections"]) == 1
    assert status["sections"][0]["label"].startswith("#1 zbv")
