"""The relay front end: cri-resmgr as a CRI relay between kubelet and the runtime
(`cli.py`: the `cri-resmgr` command line; `app.py`: the relay's wiring)."""
