"""What a job asks of a cluster: one entry per replica type, each pod's requests and constraints.

Node constraints are read here once (nodeSelector, tolerations, required and preferred
nodeAffinity) so placement never walks raw pod dicts; a malformed constraint is kept as the
demand's `problem`, which no node admits, and the job is refused with that text.

A job states wishes about clusters in its annotations, in Kubernetes label-selector syntax
(`key=value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key`, `!key`, comma-joined),
matched against the cluster labels its worker reports:

- `trainhub.io/cluster-selector: "region=eu,tier in (gold,silver)"`: a hard filter; only
  clusters satisfying every requirement qualify.
- `trainhub.io/preferred-cluster-labels: "zone=eu-west-1a,!spot"`: a soft wish, scored by the
  cluster-affinity policy as the share of requirements a cluster satisfies.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from dispatcher.amounts import Amount, compact_all
from dispatcher.pod_policy import PodSecurityNeeds, pod_security_needs
from dispatcher.port_rooms import is_port_resource, port_resource
from schemas.kubeflow import AnyJob
from schemas.names import LABEL_KEY_PATTERN, LABEL_VALUE_PATTERN
from schemas.pod import Toleration

CLUSTER_SELECTOR = "trainhub.io/cluster-selector"
PREFERRED_CLUSTER_LABELS = "trainhub.io/preferred-cluster-labels"

_INT64 = re.compile(r"[+-]?[0-9]{1,19}")
Operator = Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
_OPERATORS: tuple[Operator, ...] = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
# Bounds far above real use; they keep one hostile job from costing every placement pass.
MAX_TERMS = 64
MAX_EXPRESSIONS = 64
MAX_VALUES = 256
MAX_SELECTOR_CHARS = 4096
NODE_NAME_FIELD = "metadata.name"
_POD_SLOT = "pods"


@dataclass(frozen=True)
class LabelRequirement:
    """One Kubernetes selector requirement (`key In (a, b)`, `!key`, `key Gt 3`...)."""

    key: str
    operator: Operator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        # A label that is not a base-10 int64 never matches (Python's int() would also
        # take "1_0" or " 7").
        if value is None or not _INT64.fullmatch(value) or not -(2**63) <= int(value) < 2**63:
            return False
        number, bound = int(value), int(next(iter(self.values)))
        return number > bound if op == "Gt" else number < bound

    def __str__(self) -> str:
        # An empty value (from `key=` or `key!=`) is shown as "", not as an empty set.
        listed = ",".join(v or '""' for v in sorted(self.values))
        return {
            "In": f"{self.key} in ({listed})",
            "NotIn": f"{self.key} notin ({listed})",
            "Exists": self.key,
            "DoesNotExist": f"!{self.key}",
            "Gt": f"{self.key}>{listed}",
            "Lt": f"{self.key}<{listed}",
        }[self.operator]


@dataclass(frozen=True)
class NodeSelectorTerm:
    """`matchExpressions` on node labels and `matchFields` on the node name, all ANDed.
    As in Kubernetes, an empty term matches no node."""

    expressions: tuple[LabelRequirement, ...] = ()
    fields: tuple[LabelRequirement, ...] = ()

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False
        named = {NODE_NAME_FIELD: node_name}
        return all(e.matches(labels) for e in self.expressions) and all(
            f.matches(named) for f in self.fields
        )

    def __str__(self) -> str:
        parts = [str(e) for e in self.expressions]
        parts += [str(f) for f in self.fields]
        return ", ".join(parts) or "<empty term>"


@dataclass(frozen=True)
class PreferredTerm:
    weight: int
    term: NodeSelectorTerm


Needs = tuple[tuple[str, Amount], ...]


class PodDemand:
    """One replica type's pods: how many, what each requests, where they may run.

    A plain class, not a dataclass: one is built per replica type of every job placed, and
    the compiled build constructs a plain class natively, where a dataclass's generated
    `__init__` runs as Python (a tenth of a placement decision). Read-only by convention.
    """

    __slots__ = (
        "admission_key",
        "count",
        "key",
        "needs",
        "node_selector",
        "positive_needs",
        "preferred_terms",
        "problem",
        "replica_type",
        "requests",
        "required_terms",
        "tolerations",
    )

    def __init__(
        self,
        replica_type: str,
        count: int,
        requests: Mapping[str, Amount],
        node_selector: dict[str, str] | None = None,
        tolerations: tuple[Toleration, ...] = (),
        required_terms: tuple[NodeSelectorTerm, ...] = (),
        preferred_terms: tuple[PreferredTerm, ...] = (),
        problem: str | None = None,
    ) -> None:
        self.replica_type = replica_type
        self.count = count
        self.requests = compact_all(requests)
        self.node_selector: dict[str, str] = node_selector or {}
        self.tolerations = tolerations
        self.required_terms = required_terms
        """Required nodeAffinity: a node must match one of them (none given: no requirement)."""
        self.preferred_terms = preferred_terms
        self.problem = problem
        """Why these pods' node constraints are malformed; no node admits such pods."""
        # Derived once: placement reads them for every node of every candidate cluster.
        # List comprehensions, not generators: a profile is built for every job placed.
        without = self.requests
        with_slot = dict(without)
        with_slot[_POD_SLOT] = with_slot.get(_POD_SLOT, 0) + 1
        self.needs: tuple[dict[str, Amount], dict[str, Amount]] = (without, with_slot)
        """What one pod takes on a node that does not / does count `pods`."""
        self.positive_needs: tuple[Needs, Needs] = (
            tuple([(r, a) for r, a in without.items() if a > 0]),
            tuple([(r, a) for r, a in with_slot.items() if a > 0]),
        )
        """`needs` without the zero amounts, which never keep a pod off a node."""
        self.admission_key: tuple[object, ...] = (
            tuple(sorted(self.node_selector.items())) if self.node_selector else (),
            tuple([(t.key, t.operator, t.value, t.effect) for t in tolerations]),
            required_terms,
            problem,
        )
        """Everything that decides which nodes admit these pods, hashable."""
        self.key: tuple[object, ...] = (
            replica_type,
            count,
            tuple(sorted(without.items())),
            self.admission_key,
            preferred_terms,
        )
        """The whole demand, hashable: equal keys place identically."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PodDemand) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"PodDemand({self.replica_type!r}, {self.count}, {self.requests!r})"


def job_demand(job: AnyJob) -> list[PodDemand]:
    demands = []
    for rtype, rspec in job.replica_specs.items():
        count = job.replicas_of(rtype)
        if count == 0:
            continue
        pod = rspec.template.spec
        path = f"spec.{job.REPLICA_FIELD}.{rtype}.template.spec.affinity.nodeAffinity"
        try:
            required, preferred = parse_node_affinity(pod.affinity, path)
            problem = None
        except ValueError as exc:
            required, preferred, problem = (), (), str(exc)
        requests: dict[str, Amount] = dict(pod.total_requests(job.added_init_requests(rtype)))
        for port in job.host_ports(rtype):
            requests[port_resource(port)] = 1
        demands.append(
            PodDemand(
                replica_type=rtype,
                count=count,
                requests=requests,
                node_selector=dict(pod.nodeSelector or {}),
                tolerations=tuple(pod.tolerations or ()),
                required_terms=required,
                preferred_terms=preferred,
                problem=problem,
            )
        )
    return demands


def demanded_ports(demands: Iterable[PodDemand]) -> frozenset[str]:
    """The host-port resources the demands' pods need (dispatcher/port_rooms.py)."""
    return frozenset([r for d in demands for r in d.requests if is_port_resource(r)])


def total_demand(demands: list[PodDemand]) -> dict[str, Amount]:
    total: dict[str, Amount] = {}
    for demand in demands:
        for name, amount in demand.requests.items():
            total[name] = total.get(name, 0) + amount * demand.count
    return total


_BASE_RESOURCES = ("cpu", "memory")


def scored_resources(demand: Mapping[str, Amount]) -> tuple[str, ...]:
    """cpu, memory and the other resources the job asks for (the allocation scores average
    the free share of each); host ports are not capacity to share."""
    extra = [
        r
        for r, a in demand.items()
        if a > 0 and r not in _BASE_RESOURCES and not is_port_resource(r)
    ]
    return (*_BASE_RESOURCES, *sorted(extra)) if extra else _BASE_RESOURCES


def _size(demand: PodDemand) -> tuple[Amount, ...]:
    return tuple(sorted(demand.requests.values(), reverse=True))


def packing_order(demands: Sequence[PodDemand]) -> list[PodDemand]:
    """Largest pods first: they have the fewest nodes to choose from."""
    if len(demands) < 2:  # most jobs: one replica type, nothing to sort by size
        return list(demands)
    return sorted(demands, key=_size, reverse=True)


class JobProfile:
    """Everything placement needs from a job, read once per decision (a plain class for the
    reason PodDemand gives)."""

    __slots__ = (
        "cluster_selector",
        "demands",
        "key",
        "namespace",
        "ordered",
        "pod_security",
        "ports",
        "preferred_clusters",
        "problem",
        "scored",
        "total",
    )

    def __init__(
        self,
        demands: tuple[PodDemand, ...],
        ordered: tuple[PodDemand, ...],
        total: dict[str, Amount],
        namespace: str,
        cluster_selector: tuple[LabelRequirement, ...],
        preferred_clusters: tuple[LabelRequirement, ...],
        pod_security: PodSecurityNeeds,
        problem: str | None,
        key: tuple[object, ...],
        scored: tuple[tuple[str, float], ...] = (),
        ports: frozenset[str] = frozenset(),
    ) -> None:
        self.demands = demands
        self.ordered = ordered
        """The demands in gang packing order."""
        self.total = total
        self.namespace = namespace
        self.cluster_selector = cluster_selector
        self.preferred_clusters = preferred_clusters
        self.pod_security = pod_security
        """What its pods need of a cluster's pod security (dispatcher/pod_policy.py)."""
        self.problem = problem
        """Why the job cannot be placed anywhere, whatever the clusters (malformed
        constraints)."""
        self.key = key
        """Equal keys are placed identically on equal clusters."""
        self.scored = scored
        """The resources allocation scores look at (`scored_resources` of `total`), each with
        its `total` as a float."""
        self.ports = ports
        """The host-port resources its pods need (dispatcher/port_rooms.py)."""


def _annotation_selector(
    annotations: Mapping[str, str], name: str, problems: list[str]
) -> tuple[LabelRequirement, ...]:
    text = annotations.get(name)
    if text is None:
        return ()
    try:
        return parse_label_selector(text)
    except ValueError as exc:
        problems.append(f"metadata.annotations[{name}]: {exc}")
        return ()


def profile_job(job: AnyJob) -> JobProfile:
    demands = tuple(job_demand(job))
    annotations = job.metadata.annotations or {}
    problems = [d.problem for d in demands if d.problem is not None]
    if not demands:
        # Placed, such a job would sit Created forever: no pod can ever report success.
        problems.append(
            f"spec.{job.REPLICA_FIELD}: every replica type has 0 replicas, nothing would run"
        )
    selector = _annotation_selector(annotations, CLUSTER_SELECTOR, problems)
    preferred = _annotation_selector(annotations, PREFERRED_CLUSTER_LABELS, problems)
    pod_security = pod_security_needs(job, [d.replica_type for d in demands])
    namespace = job.metadata.namespace
    problem = "; ".join(problems) or None
    total = total_demand(list(demands))
    return JobProfile(
        demands=demands,
        ordered=tuple(packing_order(demands)),
        total=total,
        namespace=namespace,
        cluster_selector=selector,
        preferred_clusters=preferred,
        pod_security=pod_security,
        problem=problem,
        key=(tuple(d.key for d in demands), namespace, selector, preferred, pod_security, problem),
        scored=tuple([(r, float(total.get(r, 0))) for r in scored_resources(total)]),
        ports=demanded_ports(demands),
    )


# -- nodeAffinity ----------------------------------------------------------------------------


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _mapping(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"{path}: must be a mapping (got {_short(value)})")
    return value


def _listed(value: object, path: str, limit: int) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{path}: must be a list (got {_short(value)})")
    if len(value) > limit:
        raise ValueError(f"{path}: at most {limit} entries are accepted (got {len(value)})")
    return value


def parse_node_affinity(
    affinity: Mapping[str, Any] | None, path: str = "affinity.nodeAffinity"
) -> tuple[tuple[NodeSelectorTerm, ...], tuple[PreferredTerm, ...]]:
    """Required terms and preferred terms of a pod's nodeAffinity; ValueError names the field."""
    if not affinity or affinity.get("nodeAffinity") is None:
        return (), ()
    node_affinity = _mapping(affinity["nodeAffinity"], path)
    required: tuple[NodeSelectorTerm, ...] = ()
    raw_required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if raw_required is not None:
        req_path = f"{path}.requiredDuringSchedulingIgnoredDuringExecution"
        terms_path = f"{req_path}.nodeSelectorTerms"
        raw_terms = _listed(
            _mapping(raw_required, req_path).get("nodeSelectorTerms"), terms_path, MAX_TERMS
        )
        if not raw_terms:
            raise ValueError(f"{terms_path}: must have at least one term (got [])")
        required = tuple(_term(t, f"{terms_path}[{i}]") for i, t in enumerate(raw_terms))
    preferred: list[PreferredTerm] = []
    raw_preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")
    if raw_preferred is not None:
        pref_path = f"{path}.preferredDuringSchedulingIgnoredDuringExecution"
        for i, item in enumerate(_listed(raw_preferred, pref_path, MAX_TERMS)):
            item_path = f"{pref_path}[{i}]"
            weight = _mapping(item, item_path).get("weight")
            if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
                raise ValueError(f"{item_path}.weight: must be 1..100 (got {_short(weight)})")
            preferred.append(
                PreferredTerm(weight, _term(item.get("preference"), f"{item_path}.preference"))
            )
    return required, tuple(preferred)


def _term(raw: object, path: str) -> NodeSelectorTerm:
    term = _mapping(raw, path)
    expressions = tuple(
        _requirement(e, f"{path}.matchExpressions[{i}]", fields=False)
        for i, e in enumerate(
            _listed(term.get("matchExpressions") or [], f"{path}.matchExpressions", MAX_EXPRESSIONS)
        )
    )
    fields = tuple(
        _requirement(e, f"{path}.matchFields[{i}]", fields=True)
        for i, e in enumerate(
            _listed(term.get("matchFields") or [], f"{path}.matchFields", MAX_EXPRESSIONS)
        )
    )
    return NodeSelectorTerm(expressions, fields)


def _requirement(raw: object, path: str, *, fields: bool) -> LabelRequirement:
    item = _mapping(raw, path)
    key, operator = item.get("key"), item.get("operator")
    if not isinstance(key, str) or not key or len(key) > 317:
        raise ValueError(f"{path}.key: must be a label key (got {_short(key)})")
    if fields and key != NODE_NAME_FIELD:
        raise ValueError(f"{path}.key: only {NODE_NAME_FIELD!r} is supported (got {key!r})")
    allowed = ("In", "NotIn") if fields else _OPERATORS
    if operator not in allowed:
        raise ValueError(
            f"{path}.operator: must be one of {', '.join(allowed)} (got {_short(operator)})"
        )
    values = _listed(item.get("values") or [], f"{path}.values", MAX_VALUES)
    if not all(isinstance(v, str) for v in values):
        raise ValueError(f"{path}.values: must be strings (got {_short(values)})")
    if operator in ("In", "NotIn") and not values:
        raise ValueError(f"{path}.values: must not be empty for operator {operator}")
    if operator in ("Exists", "DoesNotExist") and values:
        raise ValueError(
            f"{path}.values: must be empty for operator {operator} (got {_short(values)})"
        )
    if operator in ("Gt", "Lt"):
        if len(values) != 1 or not re.fullmatch(r"[+-]?\d{1,18}", values[0]):
            raise ValueError(
                f"{path}.values: operator {operator} takes one integer (got {_short(values)})"
            )
    return LabelRequirement(key, operator, frozenset(values))


# -- cluster label selectors (job annotations) -----------------------------------------------

_KEY = LABEL_KEY_PATTERN
_VALUE = LABEL_VALUE_PATTERN
_EQUALITY = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})\s*$")
_SET = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)\s*$")
_EXISTS = re.compile(rf"^\s*(?P<not>!?)\s*(?P<key>{_KEY})\s*$")
_VALUE_ONLY = re.compile(rf"^{_VALUE}$")


def parse_label_selector(text: str) -> tuple[LabelRequirement, ...]:
    """Kubernetes label-selector syntax: `region=eu,tier!=bronze,zone in (a,b),!spot,gpu`."""
    if len(text) > MAX_SELECTOR_CHARS:
        raise ValueError(f"selector is longer than {MAX_SELECTOR_CHARS} characters")
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    if not text.strip():
        return ()
    return tuple(_selector_requirement(part) for part in parts)


def _selector_requirement(part: str) -> LabelRequirement:
    if match := _EQUALITY.match(part):
        op: Operator = "NotIn" if match["op"] == "!=" else "In"
        return LabelRequirement(match["key"], op, frozenset([match["value"]]))
    if match := _SET.match(part):
        values = [v.strip() for v in match["values"].split(",")]
        if not values or not all(v and _VALUE_ONLY.match(v) for v in values):
            raise ValueError(f"{part.strip()!r}: values must be label values")
        return LabelRequirement(
            match["key"], "In" if match["op"] == "in" else "NotIn", frozenset(values)
        )
    if match := _EXISTS.match(part):
        return LabelRequirement(match["key"], "DoesNotExist" if match["not"] else "Exists")
    raise ValueError(
        f"{_short(part.strip())} is not a requirement (use key=value, key!=value, "
        "key in (a,b), key notin (a,b), key or !key)"
    )
