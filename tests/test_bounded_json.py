"""bounded.parse_json: JSON nested past the recursion limit fails with a RecursionError
from deep in the parser, and nothing else runs down there: a cyclic collection started by
the parse's allocations would run pending finalizers at that depth, where they fail too
("Exception ignored in ...": once it failed a test of the saved agent configuration)."""

from __future__ import annotations

import gc
import json
import sys

import pytest

from cri_resmgr.bounded import InputError, load_json, parse_json

DEEP = "[" * 200_000 + "]" * 200_000


class _Finalized:
    """Garbage in a cycle whose finalizer calls Python code (as many objects' do)."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        _down(100)  # as deep as a logging call or a socket's close goes


def _down(n: int) -> int:
    return n if n == 0 else _down(n - 1)


def _unraisable_during(parse) -> list[BaseException | None]:
    seen: list[BaseException | None] = []
    hook, thresholds = sys.unraisablehook, gc.get_threshold()
    gc.collect()
    sys.unraisablehook = lambda u: seen.append(u.exc_value)
    gc.disable()  # the garbage waits for a collection...
    try:
        for _ in range(50):
            _Finalized()
        # ...which the parse starts a few lists short of the recursion limit (each level
        # is one list; the frames below this one count against the limit too).
        depth, frame = 0, sys._getframe()
        while frame is not None:
            depth, frame = depth + 1, frame.f_back
        gc.set_threshold(gc.get_count()[0] + sys.getrecursionlimit() - depth - 10, 1, 1)
        gc.enable()
        with pytest.raises(RecursionError):
            parse(DEEP)
        gc.collect()  # the rest, here at a sane depth
    finally:
        gc.set_threshold(*thresholds)
        sys.unraisablehook = hook
    return seen


def test_the_plain_parser_runs_finalizers_at_the_depth_it_failed():
    # What parse_json guards against: the test can tell.
    assert _unraisable_during(json.loads), "json.loads ran no finalizer at depth: the test shows nothing"


def test_parse_json_runs_no_finalizer_down_there():
    assert _unraisable_during(parse_json) == []
    assert gc.isenabled()


def test_load_json_names_the_input_and_leaves_the_collector_on():
    with pytest.raises(InputError, match="the doc: nested deeper than 64 levels"):
        load_json(DEEP, "the doc")
    assert gc.isenabled()
    assert load_json('{"a": [1]}', "the doc") == {"a": [1]}


def test_a_collector_off_before_stays_off():
    gc.disable()
    try:
        assert parse_json("[1]") == [1]
        assert not gc.isenabled()
    finally:
        gc.enable()
