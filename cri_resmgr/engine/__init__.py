"""The engine: what the relay does with the calls it intercepts.

`resmgr` (the interceptors: keep the cache, ask the policy, apply its answer),
`cache` (pods and containers, saved across restarts), `classify` (CRI pod and
container -> policy Workload), `enforce` (updates to the other containers),
`adopt` (start-up adoption of the runtime's running containers) and
`controller` (builds and swaps them when the configuration changes), and
`messages` (the CRI messages it receives, checked to be the types it reads).
It uses the transport only through `transport.contract`, and the runtime only
through its runtime port (`runtime.RuntimePort`, which each front end adapts), so
it does not know which transport or front end feeds it.

Its surface is the `controller.Controller`: built from `config.EngineSettings`,
a `Feed` (anything with the contract's `reconfigure`, which it hands its
interceptors and dumper to), the runtime port and a dumper factory; then
`apply`/`apply_agent`/`reload_forced`, `stats()` (an immutable
`EngineStats`), `state()` (an immutable `snapshot.EngineState`), `config`,
`policy_name` and `close`. Nothing outside the engine
reads or sets the resource manager, enforcer or dumper it holds.
"""
