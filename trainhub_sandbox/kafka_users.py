"""`trainhub sandbox up --acls`: a SCRAM user per role, the ACLs each role needs and nothing
more (bus/kafka_acls.py), and a `--config` file per user, so a deployment's security can be
tried locally as it would run: hub, producers and each cluster's worker as users of their own.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from bus.kafka_acls import Role, create_acls, role_acls
from bus.kafka_settings import KafkaSettings
from bus.topics import Topics


@dataclass(frozen=True)
class RoleUser:
    name: str
    role: Role
    clusters: tuple[str, ...] = ()
    """For a worker: the clusters it serves (one user per cluster)."""


def role_users(clusters: Sequence[str]) -> list[RoleUser]:
    """The hub, the producers, and one worker user per cluster."""
    return [
        RoleUser("hub", "hub"),
        RoleUser("producer", "producer"),
        *(RoleUser(f"worker-{cluster}", "worker", (cluster,)) for cluster in clusters),
    ]


def grant(admin: KafkaSettings, users: Sequence[RoleUser], topics: Topics | None = None) -> int:
    """Allow each user what its role needs, connecting as the broker's super user."""
    topics = topics or Topics()
    bindings = [
        (f"User:{user.name}", rule)
        for user in users
        for rule in role_acls(user.role, topics, user.clusters)
    ]
    return asyncio.run(create_acls(admin, bindings))


def write_configs(
    folder: Path, sasl_bootstrap: str, passwords: dict[str, str], users: Sequence[RoleUser]
) -> dict[str, dict[str, str]]:
    """One `--config` file per user (readable by its owner only); returns, per user, its role
    and file, as `trainhub sandbox status -o json` reports them."""
    folder.mkdir(parents=True, exist_ok=True)
    found: dict[str, dict[str, str]] = {}
    for user in users:
        path = folder / f"{user.name}.yaml"
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            yaml.safe_dump(
                {
                    "bootstrap": sasl_bootstrap,
                    "security_protocol": "SASL_PLAINTEXT",
                    "sasl_username": user.name,
                    "sasl_password": passwords[user.name],
                },
                out,
            )
        entry = {"role": user.role, "config": str(path)}
        if user.clusters:
            entry["cluster"] = user.clusters[0]
        found[user.name] = entry
    return found
