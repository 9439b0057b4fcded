"""The corpus as pytest cases: one test per adversarial case, plus checks on the corpus itself."""

from __future__ import annotations

import os
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.adversarial import forkserver
from tests.adversarial.cases import CASES
from tests.adversarial.harness import Result, cli_env, golden, run_case

VERBS = {"simulate", "dump", "viz", "visualize", "compare", "train", "algorithms", "plan"}


#: cases run at once (each is one CLI process in its own directory, forked from `forkserver`)
JOBS = int(os.environ.get("PRIMUSPP_CORPUS_JOBS", "3"))


@pytest.fixture(scope="session")
def corpus(request, tmp_path_factory) -> dict[str, Result]:
    """Every selected case, run JOBS at a time (the corpus is ~540 CLI processes): id -> result."""
    selected = [
        item.callspec.params["case"]
        for item in request.session.items
        if item.originalname == "test_case" and hasattr(item, "callspec")
    ]
    base = tmp_path_factory.mktemp("corpus")
    if not forkserver.fresh():  # the servers are started before any case's time limit runs
        for preload in {(), *(c.preload for c in selected)}:
            forkserver.server(cli_env(), preload)
    try:
        golden()  # once, before the cases share it
        with ThreadPoolExecutor(max(1, JOBS)) as pool:
            results = list(pool.map(lambda c: run_case(c, base / c.id / "case"), selected))
    finally:
        forkserver.stop()
    return {r.case.id: r for r in results}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case, corpus):
    result = corpus[case.id]
    if result.skipped:
        pytest.skip(result.skipped)
    if not result.passed:
        pytest.fail(f"[issue 11 item {case.item}] {case.id}: {result.reason}", pytrace=False)


def test_corpus_is_complete():
    ids = Counter(c.id for c in CASES)
    assert not [i for i, n in ids.items() if n > 1], "duplicate case ids"
    assert len(CASES) >= 150
    assert {c.verb for c in CASES} >= VERBS
    assert {c.item for c in CASES} >= {str(i) for i in range(1, 15)}
