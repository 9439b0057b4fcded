"""The lazy list views of a simulated timeline behave as the lists they stand for."""

from __future__ import annotations

import gc
import pickle
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from primuspp.trace.columns import CurveColumns, IntervalColumns, LazyList, TransferColumns
from primuspp.trace.timeline import Interval, Transfer


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off for the block (so that no automatic collection hides a cycle)."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_a_lazy_list_is_its_list():
    calls = []
    view = LazyList(3, lambda: calls.append(1) or [1, 2, 3])
    assert len(view) == 3 and bool(view) and not calls  # length and truth build nothing
    assert view == [1, 2, 3] and view == [1, 2, 3] and view == (1, 2, 3)
    assert view[0] == 1 and view[-1] == 3 and view[1:] == [2, 3]
    assert list(view) == [1, 2, 3] and repr(view) == "[1, 2, 3]"
    assert calls == [1]  # built once
    assert pickle.loads(pickle.dumps(view)) == [1, 2, 3]
    assert type(pickle.loads(pickle.dumps(view))) is list
    assert not LazyList(0, list)
    with pytest.raises(TypeError):
        hash(view)


def test_interval_columns_build_intervals():
    view = IntervalColumns(
        ("F", "B", "FB"),  # kind codes
        np.array([0, 2]),
        np.array([0, 1]),
        np.array([1, 1]),
        np.array([0, 0]),
        np.array([0.0, 2.5]),
        np.array([1.5, 4.0]),
        tuple(np.array([x]) for x in (1, 1, 0, 1, 0)),  # row 1: B0.1, chunk 0
    )
    assert view == [Interval("F", 0, 1, 0, 0.0, 1.5), Interval("FB", 1, 1, 0, 2.5, 4.0, ("B", 0, 1, 0))]
    assert all(type(x) is float for iv in view for x in (iv.start, iv.end))
    assert all(type(x) is int for iv in view for x in (iv.microbatch, iv.stage, iv.chunk))


def test_transfer_and_curve_columns():
    one = [np.array([x]) for x in (1, 2, 0, 1, 0, 3.0, 3.5)]
    t = TransferColumns(("F", "B"), *one)
    assert t == [Transfer("B", 2, 0, 1, 0, 3.0, 3.5)]
    curve = CurveColumns(np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    assert len(curve) == 3 and curve == [(0.0, 0.0), (1.0, 1.0), (2.0, 0.0)]
    assert curve[1:] == [(1.0, 1.0), (2.0, 0.0)]


def test_views_are_freed_without_the_cyclic_collector(our_cyclic_garbage):
    """A view holds no reference cycle (no bound method of itself): its columns go with it, built or not,
    even while the collector is paused (as a caller may pause it)."""
    gc.collect()
    with gc_paused():
        for built in (False, True):
            one = [np.array([x]) for x in (1, 2, 0, 1, 0, 3.0, 3.5)]
            views = [
                IntervalColumns(("F",), *(np.array([x]) for x in (0, 0, 1, 0, 0.0, 1.5))),
                TransferColumns(("F", "B"), *one),
                CurveColumns(np.array([1.0]), np.array([1.0])),
            ]
            if built:
                assert [len(view.items()) for view in views] == [1, 1, 2]
            del views, one
            assert our_cyclic_garbage() == []
