"""The topology-aware policy: a pool tree from the hardware model, containers placed in
the tightest pool that fits (criteria.py), exclusive CPUs from the pool, memory pinned to
the pool's nodes. policy.py is the entry point; see docs/policies.md."""
