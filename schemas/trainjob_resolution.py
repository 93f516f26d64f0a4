"""A TrainJob with its runtime: the replicated jobs upstream's JobSet would run (pod template
and pod count of each, in the runtime's order), the trainer's and initializers' settings and
`podSpecOverrides` applied, and upstream's admission rules that need the runtime."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

from schemas.job_meta import ReplicaSpec
from schemas.quantity import parse_quantity
from schemas.torchtune import (
    TorchTuneLaunch,
    runs_torchtune,
    torchtune_launch,
    torchtune_problems,
)
from schemas.trainer import (
    ANCESTOR_LABEL,
    DATASET_INITIALIZER,
    LAUNCHER,
    MODEL_INITIALIZER,
    NODE,
    TORCH_PROC_WORDS,
    AnyRuntime,
    AssetInitializer,
    ReplicatedJob,
    TrainJobSpec,
)

TORCH_RESERVED_ENV = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
)
JOBSET_RESTART_POLICY = "OnFailure"
"""JobSet's webhook gives a replicated job's pods this policy when the template sets none."""


@dataclass(frozen=True)
class ResolvedTrainJob:
    runtime: str
    policy: Literal["torch", "mpi", "plain"]
    replica_specs: dict[str, ReplicaSpec]
    num_nodes: int
    proc_per_node: str
    """Torch: `auto`, `cpu`, `gpu` or a number, as PET_NPROC_PER_NODE; MPI: the slots."""
    success_targets: tuple[str, ...]
    """The replicated jobs whose completion completes the TrainJob (JobSet's successPolicy)."""
    run_launcher_as_node: bool = False
    ssh_auth_mount_path: str = "/root/.ssh"
    """MPI: where the SSH keys' Secret is mounted in the `node` containers."""
    depends_on: dict[str, tuple[tuple[str, str], ...]] | None = None
    """Per replicated job, the jobs it waits for and the status it waits for each to reach
    (JobSet's `dependsOn`: `Complete`, every pod succeeded; `Ready`, every pod running or
    succeeded) before its pods are created."""
    torchtune: TorchTuneLaunch | None = None
    """Torch, the TrainJob's command `tune run`: what the node's command gets (needs the
    job's name, so the TrainJob adapter writes it)."""


def _upsert(items: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Upstream's `apply.Upsert*`: replace an entry of the same name, else append."""
    merged = list(items)
    for item in new:
        at = next((i for i, old in enumerate(merged) if old.get("name") == item.get("name")), None)
        if at is None:
            merged.append(item)
        else:
            merged[at] = item
    return merged


def _container(pod: dict[str, Any], name: str, init: bool = False) -> dict[str, Any] | None:
    key = "initContainers" if init else "containers"
    return next((c for c in pod.get(key) or [] if c.get("name") == name), None)


def _dump(items: list[Any] | None) -> list[dict[str, Any]]:
    return [i.model_dump(mode="json", exclude_none=True) for i in items or []]


def _torch_procs(spec: TrainJobSpec, default: int | str | None) -> str:
    """Upstream's Torch plugin: the runtime's or TrainJob's numProcPerNode, with `auto` and
    `cpu` turned into a count of CPUs where resourcesPerNode says so."""
    trainer = spec.trainer
    procs = default if default is not None else "auto"
    if trainer is not None and trainer.numProcPerNode is not None:
        procs = trainer.numProcPerNode
    if trainer is None or trainer.resourcesPerNode is None:
        return str(procs)
    resources = trainer.resourcesPerNode.model_dump(mode="json", exclude_none=True)

    def from_cpu(listed: dict[str, Any] | None, use_cpu: bool, fallback: str) -> tuple[str, bool]:
        if listed is None:
            return "1", False
        if use_cpu:
            cpus = int(parse_quantity(str(listed.get("cpu", "0"))))
            return str(max(1, cpus)), True
        return fallback, False

    def wants_cpu(listed: dict[str, Any] | None) -> bool:
        if listed is None:
            return False
        if str(procs) == "auto":
            return not any("gpu" in name.lower() for name in listed)
        return str(procs) == "cpu" and "cpu" in listed

    fallback = {"auto": "auto", "cpu": "1"}.get(str(procs), str(procs))
    if str(procs) not in ("auto", "cpu"):
        return str(procs) if resources else "1"
    value, used = from_cpu(resources.get("limits"), wants_cpu(resources.get("limits")), fallback)
    if not used:
        value, _ = from_cpu(
            resources.get("requests"), wants_cpu(resources.get("requests")), fallback
        )
    return value


def _apply_initializer(pod: dict[str, Any], name: str, settings: AssetInitializer | None) -> None:
    container = _container(pod, name)
    if settings is None or container is None:
        return
    env = _dump(settings.env)
    if settings.storageUri is not None:
        env = [{"name": "STORAGE_URI", "value": settings.storageUri}, *env]
    container["env"] = _upsert(container.get("env") or [], env)
    if settings.secretRef is not None and settings.secretRef.name:
        source = {"secretRef": {"name": settings.secretRef.name}}
        container["envFrom"] = [*(container.get("envFrom") or []), source]


def resolve(
    spec: TrainJobSpec, runtime: AnyRuntime, problems: list[str]
) -> ResolvedTrainJob | None:
    """The TrainJob's replicated jobs under `runtime`; None with `problems` appended where
    upstream's webhook would refuse the pair."""
    ml = runtime.spec.mlPolicy
    jobs = runtime.spec.template.spec.replicatedJobs
    by_name = {j.name: j for j in jobs}
    trainer = spec.trainer
    policy: Literal["torch", "mpi", "plain"] = (
        "torch" if ml is not None and ml.torch else "mpi" if ml is not None and ml.mpi else "plain"
    )
    nodes = (trainer.numNodes if trainer else None) or (ml.numNodes if ml else None) or 1
    ref = f"spec.runtimeRef (runtime {runtime.metadata.name!r})"
    for step, settings in (
        (DATASET_INITIALIZER, spec.initializer and spec.initializer.dataset),
        (MODEL_INITIALIZER, spec.initializer and spec.initializer.model),
    ):
        if settings is None:
            continue
        if step not in by_name:
            problems.append(f"{ref}: must have {step} job when trainJob is configured with it")
        elif step not in {c.name for c in by_name[step].containers()}:
            problems.append(f"{ref}: must have container with name - {step} in the {step} job")
    targeted: set[str] = set()
    for position, override in enumerate(spec.podSpecOverrides or []):
        where = f"spec.podSpecOverrides[{position}]"
        for target in override.targetJobs:
            if target.name in targeted:
                problems.append(f"{where}.targetJobs: duplicate value {target.name!r}")
            targeted.add(target.name)
            job = by_name.get(target.name)
            if job is None:
                problems.append(
                    f"{where}: must not have targetJob that doesn't exist in the runtime job "
                    f"template (got {target.name!r}; the runtime has {sorted(by_name)})"
                )
                continue
            names = {c.name for c in job.containers()}
            for container in [*(override.initContainers or []), *(override.containers or [])]:
                if container.name not in names:
                    problems.append(
                        f"{where}: must not have container that doesn't exist in the runtime "
                        f"job {target.name} (got {container.name!r})"
                    )
                elif container.env and container.name in (
                    DATASET_INITIALIZER,
                    MODEL_INITIALIZER,
                    NODE,
                ):
                    problems.append(
                        f"{where}: must not have envs for the {DATASET_INITIALIZER}, "
                        f"{MODEL_INITIALIZER}, {NODE} containers (got {container.name!r})"
                    )
    procs = "1"
    if policy == "torch" and ml is not None and ml.torch is not None:
        if trainer is not None:
            asked = trainer.numProcPerNode
            if isinstance(asked, str) and asked not in TORCH_PROC_WORDS:
                problems.append(
                    f"spec.trainer.numProcPerNode: must have an int value or "
                    f"{list(TORCH_PROC_WORDS)} (got {asked!r})"
                )
            reserved = sorted({e.name for e in trainer.env or []} & set(TORCH_RESERVED_ENV))
            if reserved:
                problems.append(
                    f"spec.trainer.env: must not have reserved envs, invalid envs configured: "
                    f"{reserved}"
                )
        procs = _torch_procs(spec, ml.torch.numProcPerNode)
        # Upstream checks a torchtune TrainJob only where it sets numProcPerNode (the
        # plugin's Validate returns early otherwise), as the SDK's never do.
        if trainer is not None and trainer.numProcPerNode is not None:
            if runs_torchtune(trainer.command):
                problems += torchtune_problems(spec.runtimeRef.name, trainer.numNodes)
    launcher_as_node = False
    ssh_path = "/root/.ssh"
    if policy == "mpi" and ml is not None and ml.mpi is not None:
        launcher_as_node = bool(ml.mpi.runLauncherAsNode)
        ssh_path = ml.mpi.sshAuthMountPath or ssh_path
        asked = trainer.numProcPerNode if trainer is not None else None
        if asked is not None and not isinstance(asked, int):
            problems.append(
                f"spec.trainer.numProcPerNode: must have an int value for MPI TrainJob "
                f"(got {asked!r})"
            )
        procs = str(asked if isinstance(asked, int) else ml.mpi.numProcPerNode or 1)
        if nodes >= 2 and launcher_as_node and not (LAUNCHER in by_name and NODE in by_name):
            problems.append(
                f"spec.trainer.numNodes: must have 1 when MPI trainingRuntime with enabled "
                f"runLauncherAsNode does not have either launcher and node (got {nodes})"
            )
    depends_on: dict[str, tuple[tuple[str, str], ...]] = {}
    for position, replicated in enumerate(jobs):
        waits = []
        for entry in replicated.dependsOn or []:
            needed, status = entry.get("name"), entry.get("status")
            earlier = {j.name for j in jobs[:position]}
            if needed not in earlier or status not in ("Complete", "Ready"):
                problems.append(
                    f"{ref}: replicatedJobs[{position}].dependsOn: must name an earlier "
                    f"replicated job ({sorted(earlier)}) with status Complete or Ready "
                    f"(got {entry!r})"
                )
                continue
            waits.append((str(needed), str(status)))
        if waits:
            depends_on[replicated.name] = tuple(waits)
    if problems:
        return None
    launch = None
    if policy == "torch" and trainer is not None and runs_torchtune(trainer.command):
        launch = torchtune_launch(spec.runtimeRef.name, nodes, procs, _trainer_command(jobs))
    specs: dict[str, ReplicaSpec] = {}
    for job in jobs:
        template = copy.deepcopy(
            job.template.spec.template.model_dump(mode="json", exclude_none=True)
        )
        pod = template["spec"]
        ancestor = ((job.template.metadata or {}).get("labels") or {}).get(ANCESTOR_LABEL)
        count = job.replicas if job.replicas is not None else 1
        if job.name == NODE:
            count = max(nodes - 1, 1) if policy == "mpi" and launcher_as_node else nodes
        node = _container(pod, NODE)
        if node is not None and trainer is not None and (ancestor == "trainer" or job.name == NODE):
            if ancestor == "trainer":
                for field in ("image", "command", "args"):
                    value = getattr(trainer, field)
                    if value is not None:
                        node[field] = value
                node["env"] = _upsert(node.get("env") or [], _dump(trainer.env))
            if trainer.resourcesPerNode is not None:
                node["resources"] = trainer.resourcesPerNode.model_dump(
                    mode="json", exclude_none=True
                )
        if ancestor in (DATASET_INITIALIZER, MODEL_INITIALIZER):
            # Upstream's JobSet builder: the job its ancestor label marks as an initializer
            # runs one pod, its container of that name gets the TrainJob's settings.
            count = 1
            if spec.initializer is not None:
                settings = (
                    spec.initializer.dataset
                    if ancestor == DATASET_INITIALIZER
                    else spec.initializer.model
                )
                _apply_initializer(pod, ancestor, settings)
        for override in spec.podSpecOverrides or []:
            if job.name in {t.name for t in override.targetJobs}:
                _apply_override(pod, override.model_dump(mode="json", exclude_none=True))
        restart = pod.pop("restartPolicy", None) or JOBSET_RESTART_POLICY
        specs[job.name] = ReplicaSpec.model_validate(
            {"replicas": count, "template": template, "restartPolicy": restart}
        )
    success = runtime.spec.template.spec.successPolicy or {}
    targets = tuple(success.get("targetReplicatedJobs") or ()) or tuple(specs)
    return ResolvedTrainJob(
        runtime=runtime.metadata.name,
        policy=policy,
        replica_specs=specs,
        num_nodes=nodes,
        proc_per_node=procs,
        success_targets=targets,
        run_launcher_as_node=launcher_as_node,
        ssh_auth_mount_path=ssh_path,
        depends_on=depends_on,
        torchtune=launch,
    )


def _trainer_command(jobs: list[ReplicatedJob]) -> list[str]:
    """The runtime's own command of the trainer's `node` container (the torchtune runtimes
    write their paths there)."""
    for job in jobs:
        if ((job.template.metadata or {}).get("labels") or {}).get(ANCESTOR_LABEL) != "trainer":
            continue
        for container in job.template.spec.template.spec.containers:
            if container.name == NODE:
                return list(container.command or [])
    return []


def _apply_override(pod: dict[str, Any], override: dict[str, Any]) -> None:
    if "serviceAccountName" in override:
        pod["serviceAccountName"] = override["serviceAccountName"]
    if override.get("nodeSelector"):
        pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), **override["nodeSelector"]}
    if override.get("tolerations"):
        pod["tolerations"] = [*(pod.get("tolerations") or []), *override["tolerations"]]
    if override.get("volumes"):
        pod["volumes"] = _upsert(pod.get("volumes") or [], override["volumes"])
    if override.get("schedulingGates"):
        pod["schedulingGates"] = _upsert(
            pod.get("schedulingGates") or [], override["schedulingGates"]
        )
    for key, init in (("initContainers", True), ("containers", False)):
        for change in override.get(key) or []:
            container = _container(pod, change["name"], init)
            if container is None:
                continue
            if change.get("env"):
                container["env"] = _upsert(container.get("env") or [], change["env"])
            if change.get("volumeMounts"):
                container["volumeMounts"] = _upsert(
                    container.get("volumeMounts") or [], change["volumeMounts"]
                )
