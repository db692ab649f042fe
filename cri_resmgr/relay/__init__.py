"""The relay front end: kubelet's CRI calls through the relay socket to the runtime.
`runtime.py` is its adapter of the engine's runtime port (CRI over the relay's own
channel), `verbose.py` reads the runtimes' verbose status JSON for it."""
