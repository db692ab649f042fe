"""A generated workload: pods come and go, seeded, until N containers were created.

The mix is the one `make bench` used for the policies: best-effort, burstable,
fractional and integer Guaranteed containers (about one in eight exclusive),
some burstable ones over a whole CPU, a few in kube-system, some pods with two
containers or an init container. The live containers hover around `target`
(default: half the CPUs); a deleted pod goes through the calls kubelet makes.
With `resizes` (a fraction of the steps), live containers are resized in place
as kubelet forwards it, within their QoS class: Guaranteed ones to another whole
or fractional size, Burstable ones to another request.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from cri_resmgr.simulate.calls import Call
from cri_resmgr.simulate.podcalls import (
    Container,
    Ids,
    Pod,
    Resize,
    Started,
    delete_calls,
    qos_class,
    resize_call,
    start_calls,
)

__all__ = ["churn_calls", "iter_churn_calls", "resize_step"]

MIB = 1 << 20


def churn_calls(containers: int, seed: int, target: int, resizes: float = 0.0) -> list[Call]:
    """Calls that create `containers` containers, deleting pods as they go; what is alive
    at the end stays (the final allocation shows it). `resizes`: the fraction of steps
    that resize a live container (0: none, and the same calls as before there were any)."""
    return list(iter_churn_calls(containers, seed, target, resizes))


def iter_churn_calls(containers: int, seed: int, target: int, resizes: float = 0.0) -> Iterator[Call]:
    """churn_calls, made as they are asked for: the memory a long churn takes is that
    of the containers alive, not of every call it makes."""
    rng = random.Random(seed)
    resize_rng = random.Random(seed + 1)  # its own stream: the rest of the churn stays as it was
    ids = Ids()
    live: list[Started] = []
    live_containers = created = n = 0
    target = max(target, 4)
    while created < containers:
        if resizes and live and resize_rng.random() < resizes:
            i = resize_rng.randrange(len(live))
            step = resize_step(resize_rng, live[i].pod)
            if step is not None:
                call, live[i] = resize_call(live[i], step, f"churn: resize {step}")
                yield call
            continue
        if live and (live_containers >= target or rng.random() < 0.25):
            gone = live.pop(rng.randrange(len(live)))
            live_containers -= len(gone.pod.containers)
            yield from delete_calls(gone, f"churn: delete {gone.pod}")
            continue
        n += 1
        pod = _pod(rng, n, min(containers - created, 2))
        new, started = start_calls(pod, ids, f"churn: pod {pod}")
        yield from new
        live.append(started)
        live_containers += len(pod.containers)
        created += len(pod.containers) + len(pod.init_containers)


def _pod(rng: random.Random, n: int, room: int) -> Pod:
    system = rng.random() < 0.02
    count = 2 if room >= 2 and rng.random() < 0.1 else 1
    roll = rng.random()
    containers = tuple(_container(rng, f"c{i}", roll) for i in range(count))
    init = (Container("init", {"cpu": 100}, {"cpu": 100, "memory": 32 * MIB}),) \
        if room - count >= 1 and rng.random() < 0.05 else ()
    return Pod(name=f"churn-{n:05d}", namespace="kube-system" if system else f"ns{n % 7}", uid=f"uid-{n:05d}",
               containers=containers, init_containers=init, labels={"app": f"app{n % 11}"})


def _container(rng: random.Random, name: str, roll: float) -> Container:
    mem = rng.choice([64, 128, 256, 512]) * MIB
    if roll < 0.40:
        return Container(name)
    if roll < 0.75:
        return Container(name, {"cpu": rng.choice([100, 250, 500]), "memory": mem})
    if roll < 0.875:
        cpu = rng.choice([200, 500, 750])
        return Container(name, {"cpu": cpu, "memory": mem}, {"cpu": cpu, "memory": mem})
    if roll < 0.95:
        cpu = 1000 * rng.choice([1, 1, 2, 4])
        return Container(name, {"cpu": cpu, "memory": mem}, {"cpu": cpu, "memory": mem})
    return Container(name, {"cpu": rng.choice([1500, 2500]), "memory": mem})


def resize_step(rng: random.Random, pod: Pod) -> Resize | None:
    """A new size for one of the pod's containers, keeping the pod's QoS class."""
    c = rng.choice(pod.containers)
    qos = qos_class(pod)
    if qos == "BestEffort":
        return None
    if qos == "Guaranteed":
        cpu = rng.choice([200, 500, 750, 1000, 1000, 2000, 3000, 4000])
        requests = {**c.requests, "cpu": cpu}
        limits = {**c.limits, "cpu": cpu}
    else:
        if "cpu" not in c.requests and "cpu" not in c.limits:
            return None
        cpu = rng.choice([100, 250, 500, 1500, 2500])
        requests, limits = {**c.requests, "cpu": cpu}, dict(c.limits)
        if "cpu" in limits:
            limits["cpu"] = max(limits["cpu"], cpu)
    step = Resize(pod.name, pod.namespace, c.name, requests, limits)
    return step if qos_class(step.applied(pod)) == qos else None
