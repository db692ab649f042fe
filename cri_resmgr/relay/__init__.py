"""The relay front end: cri-resmgr as a CRI relay between kubelet and the runtime
(`cli.py`: the `cri-resmgr` command line; `app.py`: the relay's wiring; `runtime.py`:
its adapter of the engine's runtime port, CRI over the relay's own channel;
`verbose.py`: the runtimes' verbose status JSON read for it)."""
