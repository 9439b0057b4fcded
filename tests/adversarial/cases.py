"""Every case of the corpus, in one list (ids unique)."""

from __future__ import annotations

from tests.adversarial import (
    cases_config,
    cases_flags,
    cases_misc,
    cases_outputs,
    cases_plan,
    cases_pp_data,
    cases_tables,
    cases_train,
)
from tests.adversarial.harness import Case

CASES: list[Case] = [
    *cases_config.cases,
    *cases_flags.cases,
    *cases_tables.cases,
    *cases_pp_data.cases,
    *cases_outputs.cases,
    *cases_plan.cases,
    *cases_train.cases,
    *cases_misc.cases,
]
