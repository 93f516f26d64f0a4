"""The Kafka ACLs each trainhub component needs, and granting them on a broker.

`role_acls` is the single source: brokers are set up from it and the README's tables are
printed from it (`acl_tables_markdown`), so what is documented is what is granted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Literal

from aiokafka.errors import for_code
from aiokafka.protocol.admin import CreateAclsRequest

from bus.base import BusError
from bus.kafka_settings import KafkaSettings, connect_first_broker
from bus.topics import Topics


class ResourceType(IntEnum):
    """Kafka's wire codes (org.apache.kafka.common.resource.ResourceType)."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4


class PatternType(IntEnum):
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    """Kafka's wire codes (org.apache.kafka.common.acl.AclOperation). READ and WRITE imply
    DESCRIBE, which is all metadata and offset look-ups need."""

    READ = 3
    WRITE = 4
    CREATE = 5
    DESCRIBE = 8


_ALLOW = 3
_ANY_HOST = "*"

Role = Literal["hub", "worker", "producer"]
ROLES: tuple[Role, ...] = ("hub", "worker", "producer")


@dataclass(frozen=True)
class AclRule:
    """Allow one operation on one resource (a literal name or every name with a prefix)."""

    resource_type: ResourceType
    name: str
    operation: Operation
    why: str
    pattern: PatternType = PatternType.LITERAL


def _topic(
    name: str, operation: Operation, why: str, pattern: PatternType = PatternType.LITERAL
) -> AclRule:
    return AclRule(ResourceType.TOPIC, name, operation, why, pattern)


def role_acls(role: Role, topics: Topics, clusters: Sequence[str] = ()) -> list[AclRule]:
    """Exactly what `role` needs with these topics; `clusters` names the clusters a worker
    principal serves (one worker user per cluster keeps each out of the others' work).

    One writer of the truth: a worker writes only its own cluster's reports topic (its
    jobs' statuses, its hand-backs, its heartbeats); the hub checks each record against the
    cluster the topic belongs to and the job's current placement, and passes what it accepts
    on to the status and clusters topics, which only the hub writes and everyone else reads.

    Heartbeats and log answers are read without a consumer group (from the start, by every
    reader), and so is the status topic by producers; the hub's jobs, status and reports
    consumers and the workers' assignment consumers need a group ACL. Topics are created by
    the hub (shared ones at start, a cluster's assignments topic on first placement) and by
    each worker (its own assignments and reports topics); the others find them existing.
    Writing any topic also permits the idempotent producer. Only the hub's user may write
    the runtimes topic (operators run `trainhub runtime apply` as it); workers never read
    it (an assignment carries its TrainJob's runtime) and producers only read it.
    """
    if role == "hub":
        return [
            *(
                _topic(spec.name, Operation.CREATE, "creates it at start")
                for spec in topics.shared_specs()
            ),
            _topic(topics.jobs, Operation.READ, "consumes submissions and requests"),
            AclRule(
                ResourceType.GROUP,
                topics.hub_group,
                Operation.READ,
                "commits its progress on the jobs topic",
            ),
            _topic(
                topics.reports_prefix,
                Operation.READ,
                "follows every cluster's reports (statuses, hand-backs, heartbeats)",
                PatternType.PREFIXED,
            ),
            AclRule(
                ResourceType.GROUP,
                topics.hub_reports_group,
                Operation.READ,
                "commits its progress on the reports topics",
            ),
            _topic(topics.status, Operation.READ, "reads its predecessor's statuses at start"),
            AclRule(
                ResourceType.GROUP,
                topics.hub_status_group,
                Operation.READ,
                "commits its progress on the status topic",
            ),
            _topic(topics.hub_state, Operation.READ, "reads its state at start"),
            _topic(topics.hub_state, Operation.WRITE, "keeps its state, a record per job"),
            _topic(
                topics.runtimes,
                Operation.READ,
                "knows every TrainJob runtime (reads them at start, then follows)",
            ),
            _topic(
                topics.runtimes,
                Operation.WRITE,
                "operators apply and delete runtimes as this user (`trainhub runtime`)",
            ),
            _topic(topics.leader, Operation.READ, "stands by, and watches for a newer leader"),
            _topic(topics.leader, Operation.WRITE, "claims the lead (its epoch)"),
            AclRule(
                ResourceType.GROUP,
                topics.leader_group,
                Operation.READ,
                "the election between standby hubs",
            ),
            _topic(
                topics.status,
                Operation.WRITE,
                "publishes Queued, Assigned, Rejected... and the workers' statuses it accepted",
            ),
            _topic(topics.clusters, Operation.READ, "reads the heartbeats it passed on, at start"),
            _topic(topics.clusters, Operation.WRITE, "passes on the heartbeats it accepted"),
            _topic(topics.dead_letters, Operation.WRITE, "sets aside events it cannot use"),
            _topic(
                topics.dead_letters,
                Operation.READ,
                "at start, to set aside no record twice when it replays status and heartbeats",
            ),
            _topic(
                topics.assignments(""),
                Operation.WRITE,
                "hands out jobs, revocations, suspensions",
                PatternType.PREFIXED,
            ),
            _topic(
                topics.assignments(""),
                Operation.CREATE,
                "creates a cluster's topic on its first placement",
                PatternType.PREFIXED,
            ),
        ]
    if role == "worker":
        rules: list[AclRule] = []
        for cluster in clusters:
            assignments = topics.assignments(cluster)
            reports = topics.reports(cluster)
            rules += [
                _topic(assignments, Operation.CREATE, "creates it at start"),
                _topic(reports, Operation.CREATE, "creates it at start"),
                _topic(
                    reports,
                    Operation.WRITE,
                    "reports its jobs' statuses, hand-backs and its heartbeats (capacity)",
                ),
                _topic(
                    assignments,
                    Operation.READ,
                    "consumes its assignments (replays them after a restart)",
                ),
                AclRule(
                    ResourceType.GROUP,
                    topics.worker_group(cluster),
                    Operation.READ,
                    "commits its progress on its assignments topic",
                ),
            ]
        return [
            *rules,
            _topic(topics.logs, Operation.WRITE, "answers log and pod requests"),
            _topic(topics.dead_letters, Operation.WRITE, "sets aside events it cannot use"),
        ]
    if role == "producer":
        return [
            _topic(topics.jobs, Operation.WRITE, "submits, updates, deletes, suspends, resumes"),
            _topic(topics.status, Operation.READ, "`submit --watch`, `status`, SDK waits"),
            _topic(topics.clusters, Operation.READ, "lists the member clusters (SDK)"),
            _topic(
                topics.runtimes,
                Operation.READ,
                "`get runtimes`, SDK `list_runtimes`; checks a TrainJob's runtime before submit",
            ),
        ]
    raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")


def trainhub_acls(
    topics: Topics, users: Mapping[Role, str], clusters: Sequence[str]
) -> list[tuple[str, AclRule]]:
    """(principal, rule) for a deployment whose roles run as `users` (role -> user name);
    a single worker user serves all of `clusters`."""
    return [
        (f"User:{user}", rule)
        for role, user in users.items()
        for rule in role_acls(role, topics, clusters if role == "worker" else ())
    ]


async def create_acls(settings: KafkaSettings, bindings: Iterable[tuple[str, AclRule]]) -> int:
    """Allow each (principal, rule) on the broker, from any host, connecting as `settings`'
    user (a super user or one allowed to alter the cluster). Existing ACLs are kept;
    creating one twice is harmless. Returns how many were sent."""
    conn = await connect_first_broker(settings)
    sent = 0
    try:
        # aiokafka's admin client has no create_acls; its protocol layer has the request
        # (one ACL per request in its builder), negotiated to the broker's version.
        for principal, rule in bindings:
            request = CreateAclsRequest(
                int(rule.resource_type),
                rule.name,
                int(rule.pattern),
                principal,
                _ANY_HOST,
                int(rule.operation),
                _ALLOW,
            )
            response = await conn.send(request)
            for error_code, error_message in response.creation_responses:
                if error_code != 0:
                    raise BusError(
                        f"Kafka at {settings.bootstrap} refused the ACL {principal} "
                        f"{rule.operation.name} {rule.resource_type.name} {rule.name!r}: "
                        f"{for_code(error_code).__name__} {error_message or ''}".rstrip()
                    )
            sent += 1
    finally:
        conn.close()
    return sent


def acl_tables_markdown(topics: Topics | None = None, cluster: str = "<cluster>") -> str:
    """One Markdown table per role, a row per resource, with `<prefix>` and `<cluster>`
    placeholders."""
    topics = topics or Topics(prefix="<prefix>")
    sections: list[str] = []
    for role in ROLES:
        rows: dict[tuple[ResourceType, str, PatternType], list[AclRule]] = {}
        for rule in role_acls(role, topics, [cluster]):
            rows.setdefault((rule.resource_type, rule.name, rule.pattern), []).append(rule)
        lines = [
            "| resource | name | pattern | operations | why |",
            "|---|---|---|---|---|",
        ]
        for (kind, name, pattern), rules in rows.items():
            cells = [
                kind.name.lower(),
                f"`{name}`",
                pattern.name.lower(),
                ", ".join(r.operation.name for r in rules),
                "; ".join(r.why for r in rules),
            ]
            lines.append(f"| {' | '.join(cells)} |")
        sections.append(f"**{role}**\n\n" + "\n".join(lines))
    return "\n\n".join(sections) + "\n"
