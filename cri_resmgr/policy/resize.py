"""Re-deciding a placed container whose requests changed (an in-place pod resize).

Every built-in policy is `api.Resizable`: static and static-plus re-place the container
keeping the exclusive CPUs it has where they can, topology-aware places it again and
puts its old member back on a refusal, balloons keeps it in its balloon when that can
take the new size and otherwise goes `by_replacing`: the container is released and
allocated again with its new requests, and when the new size cannot be met, the
policy's state is put back as it was (balloons swaps back a copy of its book taken
before), so nothing moves. A policy that is not Resizable is resized by_replacing with
what the engine knows of its containers: a refusal restores its state from the
assignments it had (`put_back`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from cri_resmgr.policy.api import Assignment, Decision, Policy, Resizable, ResizeError, Workload

__all__ = ["resize", "by_replacing", "putting_back", "put_back", "refusal"]

# A policy's allocate that also says why the placement does not meet the request (None:
# it does); by default any warning of its decision is taken for that.
Place = Callable[[Workload], tuple[Decision, str | None]]

# How a placement warning goes on to say where the container runs instead ("...; running
# it on the shared CPUs", "...; placed best-effort in dedicated[0] (...)"): true of a
# create, not of a refused resize, which runs it nowhere else.
_FALLBACK_CLAUSES = ("running it ", "placed best-effort ")


def resize(policy: Policy, workload: Workload, placed: Callable[[], list[Workload]]) -> Decision:
    """The policy's decision for `workload` (a placed container with new requests).
    `placed()`: every container the policy holds, as it holds them now (the resized
    one with its old workload), asked for only when the policy is not Resizable.
    Raises ResizeError (nothing changed) when the new size cannot be met."""
    if isinstance(policy, Resizable):
        return policy.resize(workload)
    return by_replacing(policy, workload, putting_back(policy, placed()))


def by_replacing(policy: Policy, workload: Workload, undo: Callable[[], None], place: Place | None = None) -> Decision:
    """Release and allocate; on a refusal (or an exception) `undo()` puts the policy's
    state back as it was before this call (`putting_back`, or the policy's own).
    `place`: the policy's allocate with what makes it a refusal (see Place)."""
    place = place or (lambda w: _warned(policy.allocate(w)))
    released = policy.release(workload.key)
    try:
        decision, unmet = place(workload)
    except BaseException:
        undo()
        raise
    if unmet:
        undo()
        raise ResizeError(refusal(unmet))
    others = {**released.others, **decision.others}
    others.pop(workload.key, None)
    return Decision(decision.resources, others)


def _warned(decision: Decision) -> tuple[Decision, str | None]:
    return decision, decision.warning


def putting_back(policy: Policy, placed: list[Workload]) -> Callable[[], None]:
    """An undo for by_replacing that any policy supports: `put_back` with the assignments
    the policy has now."""
    before = dict(policy.assignments())  # its own objects: no copy of what they hold
    return lambda: put_back(policy, placed, before)


def put_back(policy: Policy, placed: list[Workload], before: Mapping[str, Assignment]) -> None:
    """The policy's state as `before` (its assignments) says, `placed` the containers it
    held with their old workloads: for a refused resize after the policy changed things.
    Every assignment was valid a moment ago, so a restore keeps each one as it was (what
    a policy holds beyond its containers' assignments, such as balloons' empty balloons,
    it may rebuild otherwise: balloons puts its own copy back instead)."""
    policy.restore([(w, before.get(w.key)) for w in placed], live=False)


def refusal(warning: str) -> str:
    """A placement's warning as the reason of a refused resize: what could not be given,
    without the clauses that say where the container would have run instead."""
    kept = [part for part in warning.split("; ") if not part.startswith(_FALLBACK_CLAUSES)]
    return "; ".join(kept) or warning
