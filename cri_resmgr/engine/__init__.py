"""The engine: what both front ends (the relay, the NRI plugin) hand the runtime's events to.

`core` (the surface the front ends call, in the engine's own forms: a pod record, a
container spec, an id in; the policy's resources or the project's errors out),
`resmgr` (the core under a policy: keep the cache, ask the policy, apply its answer
to the others), `cri` (the relay's adapter: CRI requests decoded into the core's
forms, its decisions written into the forwarded request) with `messages` (the CRI
messages it receives, checked to be the types it reads) and `exits` (crash
detection in kubelet's list and status replies), `cache` (pods and containers,
saved across restarts; `saves` writes it), `classify` (pod and container -> policy Workload),
`enforce` (updates to the other containers), `adopt` (start-up adoption of the
runtime's running containers) and `controller` (builds and swaps them when the
configuration changes). It uses the transport only through `transport.contract`,
and the runtime only through its runtime port (`runtime.RuntimePort`, which each
front end adapts), so it does not know which transport or front end feeds it.

Its surface is the `controller.Controller`: built from `config.EngineSettings`,
a `Feed` (anything with `reconfigure(engine=..., dumper=...)`, which it hands
its core and dumper to: `cri.TransportFeed` for the relay, the NRI hooks), the
runtime port and a dumper factory; then
`apply`/`apply_agent`/`reload_forced`, `stats()` (an immutable
`EngineStats`), `state()` (an immutable `snapshot.EngineState`), `config`,
`policy_name` and `close`. Nothing outside the engine
reads or sets the resource manager, enforcer or dumper it holds.
"""
