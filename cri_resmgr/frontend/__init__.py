"""What the two front ends (the relay, `relay/`, and the NRI plugin, `nri/`) share around
the engine: the flags both take and the one step from flags to Settings (`commandline.py`);
the services each starts on one AsyncExitStack, undone in reverse whatever way a run ends
(`services.py`), among them the periodic reconcile (`reconcile.py`); Prometheus metrics
(`metrics.py`), the HTTP endpoint and `-probe` (`health.py`), publishing the node's CPUs
through the agent (`nodeexport.py`, with its client `agent_client.py`), logging
(`logsetup.py`), `-print-config` (`printconfig.py`), systemd's notify protocol
(`sdnotify.py`) and the state directory's lock (`statelock.py`)."""
