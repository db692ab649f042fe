"""The NRI front end: cri-resmgr's policies as a plugin of the runtime's Node
Resource Interface (docs/nri.md). ttRPC (`ttrpc.py`) over NRI's multiplexed
socket (`mux.py`); the runtime's state as the engine reads it (`view.py`); the
plugin service (`hooks.py`); the connection's life (`plugin.py`); the command
(`app.py`, `cli.py`)."""
