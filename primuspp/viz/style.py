"""Colours, names and number formats shared by the HTML pages and the terminal view."""

from __future__ import annotations

KIND_ORDER = ("F", "B", "W", "BW", "FB")
KIND_NAMES = {
    "F": "forward",
    "B": "input grad",
    "W": "weight grad",
    "BW": "full backward",
    "FB": "forward + backward overlapped",
}
KIND_COLORS = {"F": "#4e79a7", "B": "#f28e2b", "W": "#59a14f", "BW": "#e15759", "FB": "#9c6fb6"}
IDLE_COLOR = "#ececec"


_BINARY = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def memory_scale(peak: float, unit: str) -> tuple[float, str]:
    """(divisor, label) to show memory measured in `unit`: bytes become KiB, MiB or GiB chosen by the
    peak (`2.169e+07 bytes` reads `20.69 MiB`); other units (microbatches, GiB) stay as they are."""
    if unit != "bytes":
        return 1.0, unit
    for label, size in _BINARY:
        if peak >= size:
            return float(size), label
    return 1.0, unit


def ms(x: float) -> str:
    """Milliseconds for people: whole numbers bare, else 2 decimals (3 below 100)."""
    if abs(x - round(x)) < 1e-6 * max(1.0, abs(x)):
        return f"{round(x):,}"
    return f"{x:,.2f}" if abs(x) >= 100 else f"{x:,.3f}"


def kind_color(kind: str, chunk: int = 0, vpp: int = 1) -> str:
    """The kind's colour, lighter for later chunks (chunk 0 full, the last chunk 55 % towards white)."""
    base = KIND_COLORS.get(kind, "#888888")
    if chunk <= 0 or vpp <= 1:
        return base
    return mix(base, "#ffffff", 0.55 * min(chunk, vpp - 1) / (vpp - 1))


def mix(color: str, other: str, t: float) -> str:
    a, b = _rgb(color), _rgb(other)
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(a, b, strict=True))


def text_color(background: str) -> str:
    """Black or white, whichever reads better on `background`."""
    r, g, b = _rgb(background)
    return "#000000" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#ffffff"


def _rgb(color: str) -> tuple[int, int, int]:
    c = color.lstrip("#")
    return int(c[0:2], 16), int(c[2:4], 16), int(c[4:6], 16)


_RANK_STOPS = ("#3b4cc0", "#2ca58d", "#e8a93c")


def rank_color(rank: int, pp: int) -> str:
    """Rank colours along a three-stop gradient (memory curves)."""
    if pp <= 1:
        return _RANK_STOPS[0]
    t = 2 * rank / (pp - 1)
    i = min(int(t), 1)
    return mix(_RANK_STOPS[i], _RANK_STOPS[i + 1], t - i)
