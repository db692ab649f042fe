"""Re-deciding a placed container whose requests changed (an in-place pod resize).

A policy that can do it in place says so (`api.Resizable`: static and static-plus keep
the exclusive CPUs the container has where they can). Any other policy is resized by
releasing the container and allocating it again with its new requests; when the new
size cannot be met, the policy's whole state is restored from the assignments it had,
so nothing moves. That path costs a restore only when a resize is refused.
"""

from __future__ import annotations

from collections.abc import Callable

from cri_resmgr.policy.api import Assignment, Decision, Policy, Resizable, ResizeError, Workload

__all__ = ["resize"]


def resize(policy: Policy, workload: Workload,
           placed: Callable[[], list[tuple[Workload, Assignment | None]]]) -> Decision:
    """The policy's decision for `workload` (a placed container with new requests).
    `placed()`: every container the policy holds, as it holds them now (the resized
    one with its old workload), for putting everything back on a refusal; asked for
    before anything changes, and only by policies that are not Resizable. Raises
    ResizeError (nothing changed) when the new size cannot be met."""
    if isinstance(policy, Resizable):
        return policy.resize(workload)
    items = placed()
    before = dict(policy.assignments())
    released = policy.release(workload.key)
    try:
        decision = policy.allocate(workload)
    except BaseException:
        _put_back(policy, items, before)
        raise
    if decision.warning:
        _put_back(policy, items, before)
        raise ResizeError(decision.warning)
    others = {**released.others, **decision.others}
    others.pop(workload.key, None)
    return Decision(decision.resources, others)


def _put_back(policy: Policy, placed: list[tuple[Workload, Assignment | None]],
              before: dict[str, Assignment]) -> None:
    # Every assignment was valid a moment ago, so a restore keeps each one as it was.
    policy.restore([(w, before.get(w.key)) for w, _ in placed], live=False)
