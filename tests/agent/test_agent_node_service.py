"""The relay's AgentClient against the agent's Agent service, which acts on the fake cluster."""

from __future__ import annotations

import asyncio
import logging
import os

import grpc
import pytest

from cri_resmgr.frontend.agent_client import AgentClient, AgentError, AgentUnavailableError

TAINT = {"key": "cri-resmgr/busy", "value": "yes", "effect": "NoSchedule"}


@pytest.fixture
def served(kubeapi, make_agent):
    """An agent for node1 (API server has node1), its AgentClient, and a runner for coroutines."""
    kubeapi.put_node("node1", {"existing": "label"})
    agent = make_agent()
    agent_client = AgentClient(agent.options.agent_socket, timeout=10)
    loop = asyncio.new_event_loop()
    yield agent, agent_client, loop.run_until_complete
    loop.run_until_complete(agent_client.close())
    loop.close()


def node(api) -> dict:
    return api.get_object("nodes", "", "node1")


def test_socket_permissions(served):
    agent, _, _ = served
    assert os.stat(agent.options.agent_socket).st_mode & 0o777 == 0o600


def test_get_node(served, kubeapi):
    _, client, run = served
    got = run(client.get_node())
    assert got["metadata"]["name"] == "node1" and got["metadata"]["labels"] == {"existing": "label"}
    assert got["metadata"]["resourceVersion"] == node(kubeapi)["metadata"]["resourceVersion"]


def test_patch_labels_and_annotations(served, kubeapi):
    _, client, run = served
    reply = run(client.patch_node(set_labels={"a": "1"}, remove_labels=["existing"],
                                  set_annotations={"note": "x"}))
    assert reply["metadata"]["labels"] == {"a": "1"}
    assert node(kubeapi)["metadata"]["annotations"] == {"note": "x"}
    run(client.patch_node(remove_annotations=["note"], remove_labels=["not-there"]))
    assert node(kubeapi)["metadata"].get("annotations") == {}


def test_taints_are_added_replaced_and_removed(served, kubeapi):
    _, client, run = served
    run(client.patch_node(set_taints=[TAINT, {"key": "other", "effect": "NoExecute"}]))
    assert node(kubeapi)["spec"]["taints"] == [
        {"key": "cri-resmgr/busy", "value": "yes", "effect": "NoSchedule"}, {"key": "other", "effect": "NoExecute"}]
    run(client.patch_node(set_taints=[dict(TAINT, value="no")]))  # same key and effect: replaced
    assert [t.get("value") for t in node(kubeapi)["spec"]["taints"]] == [None, "no"]
    run(client.patch_node(remove_taints=[{"key": "cri-resmgr/busy"}]))
    assert node(kubeapi)["spec"]["taints"] == [{"key": "other", "effect": "NoExecute"}]


def test_taints_survive_a_concurrent_writer(served, kubeapi, monkeypatch):
    """Taints are read-modify-write: a write in between causes a 409 and a retry, not a lost update."""
    _, client, run = served
    from cri_resmgr_agent import node_ops
    calls = []
    original = node_ops.NodeOps.get_node

    def racing_get(self):
        body = original(self)
        if not calls:
            calls.append(1)
            kubeapi.set_node_labels("node1", {"raced": "yes"})  # someone else writes meanwhile
        return body

    monkeypatch.setattr(node_ops.NodeOps, "get_node", racing_get)
    run(client.patch_node(set_taints=[TAINT]))
    after = node(kubeapi)
    assert after["spec"]["taints"] == [TAINT] and after["metadata"]["labels"] == {"raced": "yes"}
    assert kubeapi.count_requests("patch", "/nodes/node1") == 2  # the conflicting one, then the retry


def test_update_capacity(served, kubeapi):
    _, client, run = served
    reply = run(client.update_node_capacity({"example.com/widgets": "4"}))
    assert reply["status"]["capacity"]["example.com/widgets"] == "4"
    assert reply["status"]["capacity"]["cpu"] == "2"
    run(client.update_node_capacity(remove_capacity=["example.com/widgets"]))
    assert "example.com/widgets" not in node(kubeapi)["status"]["capacity"]


@pytest.mark.parametrize("call, needle", [
    (lambda c: c.patch_node(set_taints=[{"key": "k", "effect": "Sometimes"}]), "'Sometimes'"),
    (lambda c: c.patch_node(set_labels={"a": "1"}, remove_labels=["a"]), "label 'a' is both set and removed"),
    (lambda c: c.update_node_capacity({"cpu": "8"}), "'cpu' is not an extended resource"),
    (lambda c: c.update_node_capacity({"example.com/x": ""}), "no quantity given for resource 'example.com/x'"),
])
def test_bad_requests_are_invalid_argument_naming_the_input(served, kubeapi, call, needle):
    _, client, run = served
    with pytest.raises(AgentError) as err:
        run(call(client))
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT and needle in str(err.value)
    assert not isinstance(err.value, AgentUnavailableError)


def test_api_server_errors_reach_the_relay(served, kubeapi):
    _, client, run = served
    with pytest.raises(AgentError) as err:
        run(client.patch_node(set_labels={"bad": "value with spaces"}))
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "API server answered 422" in str(err.value) and "value with spaces" in str(err.value)
    kubeapi.down()
    with pytest.raises(AgentError) as err:
        run(client.get_node())
    assert err.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "API server unreachable" in str(err.value)
    assert not isinstance(err.value, AgentUnavailableError)


def test_no_agent_is_one_quiet_debug_line(sockdir, caplog):
    caplog.set_level(logging.DEBUG, logger="cri_resmgr.agent_client")
    client = AgentClient(os.path.join(sockdir, "absent.sock"))

    async def calls():
        for _ in range(3):
            with pytest.raises(AgentUnavailableError) as err:
                await client.get_node()
            assert "no agent socket" in str(err.value)
        await client.close()

    asyncio.run(calls())
    records = [r for r in caplog.records if r.name == "cri_resmgr.agent_client"]
    assert [r.levelno for r in records] == [logging.DEBUG]


def test_dead_socket_is_unavailable_and_agent_coming_back_is_found(served, sockdir, caplog):
    agent, _, run = served
    caplog.set_level(logging.DEBUG, logger="cri_resmgr.agent_client")
    dead = os.path.join(sockdir, "dead.sock")
    import socket
    s = socket.socket(socket.AF_UNIX)
    s.bind(dead)
    s.close()  # a socket file nobody listens on, as a crashed agent leaves
    client = AgentClient(dead, timeout=5)
    for _ in range(2):
        with pytest.raises(AgentUnavailableError):
            run(client.get_node())
    os.unlink(dead)
    os.symlink(agent.options.agent_socket, dead)  # the agent is back on that path
    assert run(client.get_node())["metadata"]["name"] == "node1"
    run(client.close())
    levels = [r.levelname for r in caplog.records if r.name == "cri_resmgr.agent_client"]
    assert levels == ["DEBUG", "INFO"]


def test_a_second_agent_on_a_live_socket_is_refused_and_the_first_keeps_it(served, make_agent):
    """Issue 29: the agent's socket code, like the relay's Config service, unlinked whatever was
    at its path, so a second agent took the first one's socket over (and removed it on exit)."""
    from cri_resmgr.unixsocket import SocketError

    first, client, run = served
    second = make_agent(start=False, agent_socket=first.options.agent_socket)
    with pytest.raises(SocketError, match="agent socket .* is in use"):
        second.start()
    second.stop()
    assert os.path.exists(first.options.agent_socket)
    assert run(client.get_node())["metadata"]["name"] == "node1"
