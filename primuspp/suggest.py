"""'did you mean ...?' for unknown names (algorithms, presets, formats, choices)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(given: str, names: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The known names closest to `given` (difflib's ratio, best first), at most `n`."""
    names = list(dict.fromkeys(names))
    key = given.strip().lower()
    lowered = {name.lower(): name for name in names}
    return [lowered[m] for m in difflib.get_close_matches(key, list(lowered), n=n, cutoff=cutoff)]


def close_names(given: str, names: Iterable[str], cutoff: float = 0.6) -> str:
    """`" (did you mean a, b?)"` or "" when nothing is close, to follow "unknown X"."""
    close = closest(given, names, cutoff=cutoff)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def did_you_mean(given: str, names: Iterable[str], canonical: dict[str, str] | None = None) -> str:
    """`"; did you mean zbv?"` or "" when nothing is close, to follow "unknown X 'given'". With
    `canonical` (alias -> name), aliases are matched too and their names suggested, each once."""
    names = list(names)
    matches = closest(given, [*names, *(canonical or {})], n=6)
    if canonical:
        matches = [canonical.get(m, m) for m in matches]
    matches = list(dict.fromkeys(matches))[:3]
    return f"; did you mean {' or '.join(matches)}?" if matches else ""
