"""FB overlap (overlap.py): dualpipe-v's FB nodes run their forward on the rank's thread and their backward on
a helper thread at the same time, at PP 2 and at TP 2 x PP 2 (the backward's TP all-reduces on the twin TP
group); losses and every gradient equal the one-process reference as without overlap."""

from __future__ import annotations

import pytest

from primuspp.runtime.launch import launch
from tests.megatron.test_pipeline import TOL, differences
from tests.megatron.tp_workers import TPJob, run_tp_jobs

JOBS = {
    4: [TPJob("dualpipe-v", 2, 2, tp=2, m=6, fb_overlap=True)],
    2: [TPJob("dualpipe-v", 2, 2, tp=1, m=6, fb_overlap=True), TPJob("dualpipe-v", 2, 2, tp=1, m=6)],
}


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[TPJob, list[dict]]]:
    out = {}
    for world, jobs in JOBS.items():
        results = launch(run_tp_jobs, world, jobs)
        out.update({job.name: (job, [r[i] for r in results]) for i, job in enumerate(jobs)})
    return out


@pytest.mark.parametrize("name", [j.name for jobs in JOBS.values() for j in jobs])
def test_overlapped_fb_keeps_gradients(runs, name):
    job, per_rank = runs[name]
    lead = [r for r in per_rank if r["tp_rank"] == 0]
    loss, grad, tensors = differences(lead, per_rank[0]["reference"])
    assert tensors == job.steps * 101
    assert loss <= TOL and grad <= TOL, (name, loss, grad)
    calls = sum(r["overlapped"][0] for r in per_rank)
    if job.fb_overlap:  # every FB node of every step ran its backward on the helper thread
        fb_nodes = sum(r["fb_nodes"] for r in lead) * job.tp * job.steps
        assert fb_nodes > 0 and calls == fb_nodes, (calls, fb_nodes)
        assert all(r["overlapped"][1] == ["primuspp-fb-backward"] for r in per_rank if r["overlapped"][0])
    else:
        assert calls == 0


def test_overlap_leaves_bits_unchanged(runs):
    """With and without overlap: the same arithmetic, bit for bit."""
    _, on = runs[TPJob("dualpipe-v", 2, 2, tp=1, m=6, fb_overlap=True).name]
    _, off = runs[TPJob("dualpipe-v", 2, 2, tp=1, m=6).name]
    for a, b in zip(on, off, strict=True):
        assert a["losses"] == b["losses"]
        for ga, gb in zip(a["grads"], b["grads"], strict=True):
            assert all(ga[n].equal(gb[n]) for n in gb)
