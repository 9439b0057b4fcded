"""The 1F1B rhythm of the Node-list oracle, which the generators' columns are held equal to."""

from tests.oracles.generators import one_f_one_b


def test_one_f_one_b_rhythm():
    f = [f"f{i}" for i in range(5)]
    b = [f"b{i}" for i in range(5)]
    assert one_f_one_b(2, f, b) == ["f0", "f1", "f2", "b0", "f3", "b1", "f4", "b2", "b3", "b4"]
    assert one_f_one_b(9, f, b) == f + b  # warm-up beyond the forwards: GPipe
    assert one_f_one_b(0, f, b) == ["f0", "b0", "f1", "b1", "f2", "b2", "f3", "b3", "f4", "b4"]
    assert one_f_one_b(0, [], []) == []
