"""`make bench` (`python -m tests.bench`): the relay against direct containerd
(`relay`), policy decision latency (`policy`) and the webhook (`webhook`).
Each section also runs on its own: `python -m tests.bench.relay`."""
