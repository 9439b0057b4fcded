import gc

import pytest

from primuspp.gcpause import gc_paused, without_gc


def test_gc_paused_restores_the_previous_state_when_nested():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_without_gc_reenables_after_an_exception():
    @without_gc
    def boom():
        assert not gc.isenabled()
        raise RuntimeError("x")

    with pytest.raises(RuntimeError):
        boom()
    assert gc.isenabled()


def test_collector_stays_off_when_it_was_off():
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
