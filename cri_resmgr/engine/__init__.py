"""The engine: what the relay does with the calls it intercepts.

`resmgr` (the interceptors: keep the cache, ask the policy, apply its answer),
`cache` (pods and containers, saved across restarts), `classify` (CRI pod and
container -> policy Workload), `enforce` (updates to the other containers),
`adopt` (start-up adoption of the runtime's running containers) and
`controller` (builds and swaps them when the configuration changes). It uses
the transport only through `transport.contract` and the runtime channel
(`transport.upstream`), so it does not know which transport feeds it.
"""
