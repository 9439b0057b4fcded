"""`python -m tests.adversarial.report [-k SUBSTRING] [--item N] [--jobs J]`: run the corpus and print the
count of cases, passed, failed and skipped, a table by issue item, and every failure with its reason and
stderr line."""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.adversarial.cases import CASES
from tests.adversarial.harness import Result, golden, run_case


def _order(item: str) -> tuple[int, str]:
    return (int(item), "") if item.isdigit() else (99, item)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-k", default="", help="only cases whose id contains this")
    ap.add_argument("--item", default=None, help="only cases of this issue item (1..14, own)")
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once (each is one CLI process)")
    args = ap.parse_args(argv)
    chosen = [c for c in CASES if args.k in c.id and (args.item is None or c.item == args.item)]
    golden()
    base = Path(tempfile.mkdtemp(prefix="primuspp-adv-"))
    try:
        with ThreadPoolExecutor(max(1, args.jobs)) as pool:
            results: list[Result] = list(pool.map(lambda c: run_case(c, base / c.id / "case"), chosen))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    by_item: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_item[r.case.item].append(r)
    failed = [r for r in results if not r.passed]
    skipped = [r for r in results if r.skipped]
    print(
        f"cases: {len(results)}  passed: {len(results) - len(failed) - len(skipped)}  "
        f"failed: {len(failed)}  skipped: {len(skipped)}"
    )
    print(f"\n{'item':>5} {'cases':>6} {'failed':>7}")
    for item in sorted(by_item, key=_order):
        rs = by_item[item]
        print(f"{item:>5} {len(rs):>6} {sum(not r.passed for r in rs):>7}")
    if failed:
        print("\nfailures:")
        for r in sorted(failed, key=lambda r: (_order(r.case.item), r.case.id)):
            print(f"- [{r.case.item}] {r.case.id}: {r.reason}")
            if r.stderr_line and r.stderr_line not in r.reason:
                print(f"    stderr: {r.stderr_line[:300]}")
    for r in skipped:
        print(f"- skipped {r.case.id}: {r.skipped}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
