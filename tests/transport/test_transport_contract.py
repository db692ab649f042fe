"""Both transports keep the one contract the controller relies on: the same
start/stop/wait/reconfigure, and reconfigure's "keep" default."""

from __future__ import annotations

import inspect

import pytest

from cri_resmgr.transport.contract import UNCHANGED, Transport
from cri_resmgr.transport.framerelay.relay import FrameRelay
from cri_resmgr.transport.grpcrelay import GrpcRelay
from cri_resmgr.transport.methods import MethodTable

METHODS = ("start", "stop", "wait", "reconfigure")


def _params(function) -> list[tuple[str, inspect._ParameterKind, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


def _transports():
    methods = MethodTable()
    return [GrpcRelay("/tmp/crirm-unused.sock", None, None, methods),
            FrameRelay("/tmp/crirm-unused.sock", "/tmp/crirm-unused-rt.sock", methods)]


@pytest.mark.parametrize("cls", [GrpcRelay, FrameRelay])
@pytest.mark.parametrize("name", METHODS)
def test_transport_methods_have_the_protocols_signature(cls, name):
    ours, theirs = getattr(cls, name), getattr(Transport, name)
    assert _params(ours) == _params(theirs)
    assert inspect.iscoroutinefunction(ours) == inspect.iscoroutinefunction(theirs)


@pytest.mark.parametrize("relay", _transports(), ids=lambda r: type(r).__name__)
def test_reconfigure_keeps_what_it_is_not_given_and_can_clear_the_dumper(relay):
    table, dumper = {"CreateContainer": object()}, object()
    relay.reconfigure(interceptors=table, dumper=dumper)
    relay.reconfigure(interceptors={})
    assert relay._dumper is dumper
    relay.reconfigure(dumper=None)
    assert relay._dumper is None and relay._interceptors == {}
    relay.reconfigure(interceptors=table)
    assert relay._interceptors is table and relay._dumper is None
    relay.reconfigure(interceptors=UNCHANGED, dumper=UNCHANGED)
    assert relay._interceptors is table
