"""A runtime that launches the plugin itself hands it a connected socket
(NRI_PLUGIN_SOCKET, with NRI_PLUGIN_NAME and NRI_PLUGIN_IDX): the real process on
such a socket, and the exit when the runtime closes it."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from tests.nri.plugin_process import PluginProcess
from tests.nri.runtime_double import RuntimeDouble, container, pod


def test_plugin_on_a_handed_over_socket_registers_with_the_given_identity_and_exits_with_it(workdir: Path) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    plugin = PluginProcess(workdir, str(workdir / "unused.sock"), str(workdir / "host"))

    async def main() -> int | None:
        double = RuntimeDouble(plugin.nri_socket)  # not listening: the connection is handed over
        double.pods["p1"] = pod("p1", "burstable")
        double.containers["a1"] = container("a1", "p1", milli_cpu=500)
        plugin.start(env={"NRI_PLUGIN_SOCKET": str(theirs.fileno()), "NRI_PLUGIN_NAME": "handed",
                          "NRI_PLUGIN_IDX": "07"}, pass_fds=(theirs.fileno(),))
        theirs.close()
        try:
            await double._accept(*await asyncio.open_connection(sock=ours))
            session = await double.wait_ready()
            assert session.registered is not None
            assert (session.registered.plugin_name, session.registered.plugin_idx) == ("handed", "07")
            assert double.cpus("a1")
            await double.drop()  # the runtime closes the handed socket: the plugin exits, 0
            assert plugin.proc is not None
            return await asyncio.to_thread(plugin.proc.wait, 30)
        finally:
            await asyncio.to_thread(plugin.stop)
            await double.close()

    try:
        code = asyncio.run(main())
    except BaseException:
        print(plugin.log())
        raise
    assert code == 0
    assert "the runtime closed the connection it handed over: exiting" in plugin.log()


def test_a_bad_index_or_socket_in_the_environment_is_a_usage_error(workdir: Path) -> None:
    for env, word in (({"NRI_PLUGIN_IDX": "7"}, "NRI_PLUGIN_IDX"), ({"NRI_PLUGIN_SOCKET": "x"}, "NRI_PLUGIN_SOCKET")):
        plugin = PluginProcess(workdir / word, str(workdir / "nri.sock"), str(workdir / "host"))
        plugin.start(env=env)
        assert plugin.proc is not None
        assert plugin.proc.wait(60) == 2
        assert word in plugin.log()
