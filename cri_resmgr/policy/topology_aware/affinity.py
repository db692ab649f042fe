"""Affinity and anti-affinity between containers, across pods.

    cri-resource-manager.intel.com/affinity: |
      - scope: {key: namespace, operator: Equals, values: [shop]}   # optional
        match: {key: app, operator: In, values: [db]}
        weight: 10                                                  # optional, default 1
    cri-resource-manager.intel.com/anti-affinity: |
      - match: {key: app, operator: Equals, values: [db]}

Effective-key lookup as for every annotation (`affinity/container.NAME`, `affinity/pod`,
`affinity`); the value may also be a mapping from container name to such a list, or,
the references' short form, from container name to names of other containers of the
same pod (weight 1 each):

    cri-resource-manager.intel.com/affinity: |
      web: [ cache ]
      batch: [ web, cache ]
`scope` and `match` are expressions or lists of expressions (policy/expression.py)
over the OTHER container (name, namespace, pod, labels); scope defaults to the
container's own namespace. Anti-affinity weights count negatively.

A rule counts in both directions: when B is placed, B's rules about A and A's rules
about B both weigh on the pools, so the outcome does not depend on which pod came
first or carried the annotation (nri-plugins issue 65 is affinity that did).
A pool gets the full weight of the containers in it and half the weight of those in
a pool above or below it (they share CPUs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from cri_resmgr.bounded import InputError, clip, load_yaml, short
from cri_resmgr.policy.api import Workload
from cri_resmgr.policy.expression import Expression, ExpressionError, parse_list
from cri_resmgr.policy.topology_aware.memory import AnnotationError
from cri_resmgr.policy.topology_aware.pooltree import Pool

__all__ = ["Rule", "parse_rules", "rule_weight", "pool_scores", "AffinityIndex", "reads_per_container"]

AFFINITY = "affinity"
ANTI_AFFINITY = "anti-affinity"
AFFINITY_DEPTH = 8  # a list of rules of expressions of values: 4
AFFINITY_VALUES = 10_000  # far more than any real annotation holds, aliases counted expanded


@dataclass(frozen=True)
class Rule:
    match: tuple[Expression, ...]
    weight: int
    scope: tuple[Expression, ...] | None = None  # None: the same namespace as the rule's owner

    def applies(self, owner: Workload, other: Workload) -> bool:
        """Whether the rule of `owner` is about `other` (in its scope and matching)."""
        if self.scope is None:
            if other.namespace != owner.namespace:
                return False
        elif not all(e.evaluate(other) for e in self.scope):
            return False
        return all(e.evaluate(other) for e in self.match)


def parse_rules(w: Workload) -> tuple[Rule, ...]:
    """The container's affinity rules (anti-affinity ones with negative weights).
    Raises AnnotationError naming the annotation and field on a malformed one."""
    rules: list[Rule] = []
    for name, sign in ((AFFINITY, 1), (ANTI_AFFINITY, -1)):
        raw = w.annotation(name)
        if raw is None:
            continue
        rules.extend(_parse(raw, name, w, sign))
    return tuple(rules)


def _parse(text: str, name: str, w: Workload, sign: int) -> list[Rule]:
    try:
        data = load_yaml(text, name, max_depth=AFFINITY_DEPTH, max_nodes=AFFINITY_VALUES)
    except InputError as e:  # an alias bomb, 5000-deep nesting: refused before it costs
        raise AnnotationError(str(e)) from None
    except yaml.YAMLError as e:
        raise AnnotationError(f"{name}: not YAML: {clip(' '.join(str(e).split()), 160)}") from None
    if data is None:
        return []
    if isinstance(data, Mapping) and not {"match", "scope", "weight"} & set(map(str, data)):
        data = data.get(w.name)  # {container name: [rules]}
        if data is None:
            return []
        if isinstance(data, Sequence) and not isinstance(data, str) and data and \
                all(isinstance(item, str) for item in data):
            return [_short(data, w, sign)]
    if isinstance(data, Mapping):
        data = [data]
    if not isinstance(data, Sequence) or isinstance(data, str):
        raise AnnotationError(f"{name}: expected a list of {{scope, match, weight}}, got {short(data)}")
    return [_rule(item, f"{name}[{i}]", sign) for i, item in enumerate(data)]


def _rule(item: Any, where: str, sign: int) -> Rule:
    if not isinstance(item, Mapping):
        raise AnnotationError(f"{where}: expected a mapping with scope, match and weight, got {short(item)}")
    unknown = sorted(set(map(str, item)) - {"scope", "match", "weight"})
    if unknown:
        raise AnnotationError(f"{where}.{clip(unknown[0], 60)}: unknown field (known: scope, match, weight)")
    if item.get("match") is None:
        raise AnnotationError(f"{where}.match: missing")
    weight = item.get("weight", 1)
    if isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
        raise AnnotationError(f"{where}.weight: expected a non-negative integer, got {short(weight)}")
    try:
        match = parse_list(item["match"], f"{where}.match")
        scope = parse_list(item["scope"], f"{where}.scope") if item.get("scope") is not None else None
    except ExpressionError as e:
        raise AnnotationError(str(e)) from None
    return Rule(match=match, weight=sign * weight, scope=scope)


def _short(names: Sequence[str], w: Workload, sign: int) -> Rule:
    """`C: [OTHER, ...]`: the other containers of C's own pod, by name, weight 1."""
    scope = (Expression("namespace", "Equals", (w.namespace,)), Expression("pod", "Equals", (w.pod,)))
    return Rule(match=(Expression("name", "In", tuple(names)),), weight=sign, scope=scope)


def rule_weight(subject: Workload, rules: tuple[Rule, ...], other: Workload, other_rules: tuple[Rule, ...]) -> int:
    """What `other` weighs for `subject`: subject's rules about it plus its rules about subject."""
    total = 0
    for rule in rules:
        if rule.applies(subject, other):
            total += rule.weight
    for rule in other_rules:
        if rule.applies(other, subject):
            total += rule.weight
    return total


def pool_scores(weights: Iterable[tuple[Pool, int]], pools: Iterable[Pool]) -> dict[str, float]:
    """Pool name -> affinity score, from (pool of another container, its weight) pairs."""
    by_pool: dict[Pool, int] = {}
    for pool, weight in weights:
        if weight:
            by_pool[pool] = by_pool.get(pool, 0) + weight
    scores: dict[str, float] = {}
    if not by_pool:
        return scores
    for pool in pools:
        score = 0.0
        for where, weight in by_pool.items():
            if where is pool:
                score += weight
            elif pool.related(where):
                score += weight / 2
        scores[pool.name] = score
    return scores


# Keys that tell containers of one pod or one name apart: a rule reading them is
# evaluated container by container; any other rule once per profile.
_PER_CONTAINER_KEYS = frozenset({"name", "pod", "pod/name"})


def _profile(w: Workload) -> tuple[str, str, frozenset[tuple[str, str]]]:
    return (w.namespace, w.qos.value, frozenset(w.labels.items()))


def reads_per_container(rules: tuple[Rule, ...]) -> bool:
    for rule in rules:
        for e in (*rule.match, *(rule.scope or ())):
            if e.key in _PER_CONTAINER_KEYS:
                return True
    return False


class AffinityIndex:
    """The placed containers grouped so that affinity costs per distinct profile
    (namespace, QoS class, labels) and per distinct rule set, not per container:
    replicas of one deployment share both."""

    def __init__(self) -> None:
        # profile -> pool -> (count, a representative workload)
        self._profiles: dict[tuple[str, str, frozenset[tuple[str, str]]], dict[Pool, list[Any]]] = {}
        # (rules, owner namespace) -> pool -> [count, an owner]: a rule reads only the
        # other container and its owner's namespace, so owners group by those two.
        self._rules: dict[tuple[tuple[Rule, ...], str], dict[Pool, list[Any]]] = {}

    def add(self, w: Workload, rules: tuple[Rule, ...], pool: Pool, sign: int) -> None:
        self._count(self._profiles, _profile(w), pool, w, sign)
        if rules:
            self._count(self._rules, (rules, w.namespace), pool, w, sign)

    @staticmethod
    def _count(index: dict[Any, dict[Pool, list[Any]]], key: Any, pool: Pool, w: Workload, sign: int) -> None:
        pools = index.setdefault(key, {})
        entry = pools.setdefault(pool, [0, w])
        entry[0] += sign
        if entry[0] <= 0:
            del pools[pool]
            if not pools:
                del index[key]

    def weights(self, subject: Workload, rules: tuple[Rule, ...]) -> list[tuple[Pool, int]]:
        """(pool, weight) of what is placed, for `subject` with `rules`; a rule reading
        name or pod needs the caller's per-container scan (`reads_per_container`)."""
        out: list[tuple[Pool, int]] = []
        if rules:
            for pools in self._profiles.values():
                for pool, (count, other) in pools.items():
                    weight = sum(r.weight for r in rules if r.applies(subject, other))
                    if weight:
                        out.append((pool, weight * count))
        for (owner_rules, _), pools in self._rules.items():
            for pool, (count, owner) in pools.items():
                weight = sum(r.weight for r in owner_rules if r.applies(owner, subject))
                if weight:
                    out.append((pool, weight * count))
        return out
