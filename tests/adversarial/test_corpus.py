"""The corpus as pytest cases: one test per adversarial case, plus checks on the corpus itself."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.adversarial.cases import CASES
from tests.adversarial.harness import run_case

VERBS = {"simulate", "dump", "viz", "visualize", "compare", "train", "algorithms"}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case, tmp_path):
    result = run_case(case, tmp_path / "case")
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
