"""Issue 28.1: one bad pod annotation must not put a container untracked on an exclusive
CPU, block every restart, or kill the reconcile. The whole engine against the CRI double."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from test_engine_fake_runtime import STATIC, besteffort, check_static_invariants

from cri_resmgr import supervise
from cri_resmgr.topology.cpuset import CPUSet
from tests.harness.podspec import ContainerSpec, PodSpec

SHAPE = dict(sockets=1, cores_per_die=4, threads_per_core=2)
TOPOLOGY_AWARE = "policy: {Active: topology-aware, ReservedResources: {CPU: 1}}\n"

BAD_RESOURCES = {
    "requests-a-list": json.dumps({"containers": {"c": {"requests": [1]}}}),
    "3000-deep": "[" * 3000 + "]" * 3000,
    "5000-digit-cpu": json.dumps({"containers": {"c": {"requests": {"cpu": "9" * 5000}}}}),
    "32k-quantity": json.dumps({"containers": {"c": {"requests": {"cpu": "x" * 32_000}}}}),
    "not-json": "{" + "a" * 40_000,
}




def annotated(name: str, cpu: str, annotations: dict[str, str]) -> PodSpec:
    res = {"cpu": cpu, "memory": "64Mi"}
    return PodSpec(name=name, annotations=annotations,
                   containers=[ContainerSpec(name="c", requests=res, limits=res)])


def _ours(caplog, level=logging.WARNING):
    return [r.getMessage() for r in caplog.records if r.name.startswith("cri_resmgr") and r.levelno >= level]


@pytest.mark.parametrize("value", BAD_RESOURCES.values(), ids=BAD_RESOURCES.keys())
def test_a_bad_resources_annotation_falls_back_to_the_cri_resources(engine_factory, caplog, value):
    caplog.set_level(logging.INFO, logger="cri_resmgr")
    e = engine_factory(SHAPE, STATIC)
    shared = e.kubelet.start_pod(besteffort("s"))
    bad = e.kubelet.start_pod(annotated("bad", "2", {"intel.com/resources": value}))
    # Placed by what kubelet's CRI resources say (Guaranteed, 2 CPUs): two exclusive CPUs,
    # tracked, and no longer sharing them with anyone: not forwarded unchanged onto them.
    check_static_invariants(e, {"bad"})
    assert len(CPUSet(e.fake.cpuset(bad.container_ids["c"]))) == 2
    assert CPUSet(e.fake.cpuset(shared.container_ids["c"])).isdisjoint(CPUSet(e.fake.cpuset(bad.container_ids["c"])))
    warnings = _ours(caplog)
    assert len(warnings) == 1 and "default/bad:c: ignoring annotation intel.com/resources" in warnings[0], warnings
    assert len(warnings[0]) < 400
    assert e.ctl.stats().policy_errors == 0


def test_the_relay_restarts_with_bad_annotations_present(engine_factory, caplog):
    """Every start used to exit 1 ("applying policy static failed: cannot convert
    dictionary update sequence ...") for as long as such a pod existed."""
    e = engine_factory(SHAPE, STATIC)
    pods = [e.kubelet.start_pod(annotated(f"bad{i}", "1", {"intel.com/resources": v}))
            for i, v in enumerate(BAD_RESOURCES.values())]
    e.kubelet.start_pod(besteffort("s"))
    check_static_invariants(e, {p.spec.name for p in pods})
    for wipe_state in (False, True):  # restored from the state file; adopted anew
        e.loop.run(e.relay.stop(1))
        e.loop.run(e.ctl.close())
        if wipe_state:
            for f in (e.dir / "state").glob("state.json*"):
                f.unlink()
        caplog.clear()
        e.start_relay(STATIC)
        # Adopted anew, they are placed by the resources their runtime spec holds, which
        # the double does not report: shared then (tests/e2e has the real runtime's).
        check_static_invariants(e, set() if wipe_state else {p.spec.name for p in pods})
        assigned = set(e.ctl.active_policy().assignments())
        assert all(any(k.startswith(p.sandbox_id) for k in assigned) for p in pods)  # all tracked
        assert all(len(line) < 400 for line in _ours(caplog)), _ours(caplog)


def test_a_bad_affinity_annotation_on_topology_aware_is_one_short_warning(engine_factory, caplog):
    caplog.set_level(logging.INFO, logger="cri_resmgr")
    e = engine_factory(SHAPE, TOPOLOGY_AWARE)
    bomb = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{','.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(7))
    for name, value in (("deep", "[" * 5000 + "]" * 5000), ("bomb", bomb), ("deepmap", "{a: " * 3000 + "1" + "}" * 3000)):
        caplog.clear()
        pod = e.kubelet.start_pod(annotated(name, "1", {"cri-resource-manager.intel.com/affinity": value}))
        e.flush()
        assert len(CPUSet(e.fake.cpuset(pod.container_ids["c"]))) == 1  # placed, exclusive, tracked
        warnings = _ours(caplog)
        assert warnings and all(len(w) < 400 for w in warnings), [w[:400] for w in warnings]
        assert any("affinity" in w for w in warnings)
    assert e.ctl.stats().policy_errors == 0


def test_the_periodic_reconcile_survives_and_is_restarted_by_its_supervisor(caplog):
    """The relay's reconcile task used to die on a TypeError without a log line."""
    runs = []

    async def flaky() -> None:
        runs.append(1)
        if len(runs) < 3:
            raise TypeError("cannot convert dictionary update sequence element #0 to a sequence")
        await asyncio.sleep(3600)

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(supervise.supervised("reconcile", flaky, first_pause=0.01))
        while len(runs) < 3:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    caplog.set_level(logging.INFO, logger="cri_resmgr")
    asyncio.run(main())
    errors = _ours(caplog, logging.ERROR)
    assert len(errors) == 2 and all("background task reconcile failed: TypeError: cannot convert" in m for m in errors)


def test_a_one_off_task_that_fails_is_logged(caplog):
    """The engine's own tasks (state saves, updates, the policy timer) and a SIGHUP's reload
    are restarted by what needs them next; their failure is one line, not silence."""
    async def main() -> None:
        async def broken() -> None:
            raise TypeError("x" * 10_000)

        task = supervise.watched(asyncio.get_running_loop().create_task(broken()), "state save")
        await asyncio.wait({task})
        await asyncio.sleep(0)

    caplog.set_level(logging.INFO, logger="cri_resmgr")
    asyncio.run(main())
    errors = _ours(caplog, logging.ERROR)
    assert len(errors) == 1 and errors[0].startswith("background task state save failed: TypeError: xxx")
    assert len(errors[0]) < 400
