"""The results table never mixes memory units silently in its peak column."""

from rich.console import Console

from primuspp.commands.render import results_table


def _row(name: str, peak: float, **extra) -> dict:
    base = {"name": name, "algorithm": name, "pp": 4, "vpp": 1, "micro_batches": 8, "step_time": 100.0}
    return {**base, "bubble_rate": 0.1, "steady_bubble_rate": 0.1, "peak_memory": peak, **extra}


def test_peak_memory_carries_its_unit():
    rows = [
        _row("sim", 4.5),
        _row("bytes", 21_685_504, memory_unit="bytes", has_memory_curve=True),
        _row("primus", 131.0, memory_unit="GiB", has_memory_curve=False),
    ]
    console = Console(width=200, record=True)
    console.print(results_table(rows, "t"))
    text = console.export_text()
    lines = {line.split("│")[1].strip(): line for line in text.splitlines() if line.startswith("│")}
    assert " 4.5 " in lines["sim"] and "iB" not in lines["sim"]
    assert "20.7 MiB" in lines["bytes"]
    assert "131 GiB reserved" in lines["primus"]
