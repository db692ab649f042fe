"""What the two front ends (the relay, `relay/`, and the NRI plugin, `nri/`) share around
the engine: Prometheus metrics (`metrics.py`), the HTTP endpoint and `-probe`
(`health.py`), publishing the node's CPUs through the agent (`nodeexport.py`, with its
client `agent_client.py`), logging (`logsetup.py`), `-print-config` (`printconfig.py`),
systemd's notify protocol (`sdnotify.py`) and the state directory's lock (`statelock.py`)."""
