"""Pod security: a job's pod templates judged against a cluster's Pod Security Standards level
exactly as the Kubernetes Pod Security admission enforces that level at version `latest`, with
the host privileges the cluster's `policy` allows on top.

The rules follow kubernetes/pod-security-admission `policy/check_*.go` at v0.37.0-alpha.2
(Kubernetes 1.37 in development; it differs from 1.36 only in allowing the sysctls
`net.ipv4.tcp_slow_start_after_idle` and `net.ipv4.tcp_notsent_lowat`). As upstream, every
container check covers containers, initContainers and ephemeralContainers alike, and where a
field exists at pod and container level (seccompProfile, runAsNonRoot, runAsUser,
seLinuxOptions, appArmorProfile, windowsOptions) both are judged, a pod-level
`runAsNonRoot: true` or valid seccompProfile standing for containers that set none.
An allowance lifts its own fields at either level: `hostPorts` a container's hostPort (on
the host network `hostNetwork` covers them, the apiserver making every port the host's there),
`privileged` a privileged container and, at restricted, its privilege escalation (the
apiserver refuses privileged with `allowPrivilegeEscalation: false`), `hostPath` hostPath
volumes; nothing lifts the other checks but a lower level.
The templates are judged as written: a value upstream's typed API could not hold (a
`hostIPC: "yes"`, a securityContext that is not a mapping) counts as refused rather than
missed, as does any value other than those a check allows.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final, Literal

from schemas.cluster import ALLOWANCES, ClusterPolicy, PodSecurityLevel
from schemas.kubeflow import AnyJob
from schemas.pod import Container, ContainerPort, PodSpec, TemplateMeta

RefusingLevel = Literal["baseline", "restricted"]
"""The lowest level that refuses a violation; every level above refuses it too."""

# Check keys in the order a refusal lists them (upstream's order of the standard), each with
# what it refuses, as the refusal says it.
_REFUSES: Final[dict[str, str]] = {
    "securityContext": "a securityContext that is not a mapping is",
    "hostProcess": "Windows hostProcess is",
    "hostNetwork": "hostNetwork is",
    "hostPID": "hostPID is",
    "hostIPC": "hostIPC is",
    "privileged": "privileged containers are",
    "capabilities": "capabilities beyond the baseline set are",
    "hostPath": "hostPath volumes are",
    "hostPorts": "host ports are",
    "appArmor": "AppArmor profiles other than RuntimeDefault and Localhost are",
    "seLinux": "SELinux options other than the container types are",
    "procMount": "procMount other than Default is",
    "seccomp": "seccomp profiles other than RuntimeDefault and Localhost are",
    "sysctls": "unsafe sysctls are",
    "probeHost": "probe and lifecycle hosts are",
    "volumeTypes": "restricted volume types are",
    "allowPrivilegeEscalation": "privilege escalation (allowPrivilegeEscalation not false) is",
    "runAsNonRoot": "running as root (runAsNonRoot not true) is",
    "runAsUser": "runAsUser 0 is",
    "seccompRequired": "containers without a RuntimeDefault or Localhost seccomp profile are",
    "capabilitiesDrop": "containers not dropping ALL capabilities are",
    "capabilitiesAdd": "added capabilities other than NET_BIND_SERVICE are",
}
_ORDER: Final[dict[str, int]] = {check: i for i, check in enumerate(_REFUSES)}

_BASELINE_CAPABILITIES: Final = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
_SAFE_SYSCTLS: Final = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.ip_local_reserved_ports",  # 1.27
        "net.ipv4.tcp_keepalive_time",  # 1.29
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",  # 1.32
        "net.ipv4.tcp_wmem",
        "net.ipv4.tcp_slow_start_after_idle",  # 1.37
        "net.ipv4.tcp_notsent_lowat",
    }
)
_SELINUX_TYPES: Final = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
_PROFILE_TYPES: Final = frozenset({"RuntimeDefault", "Localhost"})
"""The seccomp and AppArmor profile types both levels allow."""
_APPARMOR_ANNOTATION: Final = "container.apparmor.security.beta.kubernetes.io/"
_RESTRICTED_VOLUMES: Final = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
_PROBES: Final = ("livenessProbe", "readinessProbe", "startupProbe")
_CONTAINER_LISTS: Final = ("initContainers", "containers", "ephemeralContainers")


class Violation:
    """One field of a pod template a level refuses (read-only by convention).

    A plain class, not a frozen dataclass: jobs' shape keys hold their violations, and a
    dataclass's generated `__init__`, `__eq__` and `__hash__` run as Python even compiled,
    where hashing a shape key hashed every violation again (a twentieth of a decision)."""

    __slots__ = ("_hash", "allowance", "check", "level", "where")

    def __init__(
        self, check: str, level: RefusingLevel, where: str, allowance: str | None = None
    ) -> None:
        self.check = check
        """A key of `_REFUSES`."""
        self.level: RefusingLevel = level
        self.where = where
        """The field and its value, e.g.
        `Worker: containers[jax].securityContext.capabilities.add[SYS_ADMIN]`."""
        self.allowance = allowance
        """The `--allow` name (a key of `ALLOWANCES`) that lifts it; None when only a lower
        level does."""
        self._hash = hash((check, level, where, allowance))

    def _fields(self) -> tuple[str, str, str, str | None]:
        return (self.check, self.level, self.where, self.allowance)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return isinstance(other, Violation) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return (
            f"Violation(check={self.check!r}, level={self.level!r}, where={self.where!r}, "
            f"allowance={self.allowance!r})"
        )


class PodSecurityNeeds:
    """What a job's pods need of a cluster's pod security, worked out once per job so that
    judging a cluster is a few comparisons (read-only by convention; a plain class for the
    reason `Violation` gives, its hash computed once)."""

    __slots__ = (
        "_hash",
        "baseline_allowances",
        "baseline_ok",
        "restricted_allowances",
        "restricted_ok",
        "violations",
    )

    def __init__(
        self,
        violations: tuple[Violation, ...] = (),
        baseline_allowances: frozenset[str] = frozenset(),
        baseline_ok: bool = True,
        restricted_allowances: frozenset[str] = frozenset(),
        restricted_ok: bool = True,
    ) -> None:
        self.violations = violations
        self.baseline_allowances = baseline_allowances
        """The allowances a baseline cluster needs to take the job, when `baseline_ok`."""
        self.baseline_ok = baseline_ok
        """False when some baseline violation has no allowance that lifts it."""
        self.restricted_allowances = restricted_allowances
        self.restricted_ok = restricted_ok
        self._hash = hash(self._fields())

    def _fields(self) -> tuple[tuple[Violation, ...], frozenset[str], bool, frozenset[str], bool]:
        return (
            self.violations,
            self.baseline_allowances,
            self.baseline_ok,
            self.restricted_allowances,
            self.restricted_ok,
        )

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return isinstance(other, PodSecurityNeeds) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return (
            f"PodSecurityNeeds(violations={self.violations!r}, "
            f"baseline_allowances={self.baseline_allowances!r}, "
            f"baseline_ok={self.baseline_ok!r}, "
            f"restricted_allowances={self.restricted_allowances!r}, "
            f"restricted_ok={self.restricted_ok!r})"
        )


NO_NEEDS: Final = PodSecurityNeeds()


_PLAIN_KEPT = 1024
"""Plain pod templates' needs kept (`_plain_needs`); the memo starts afresh when full."""
_plain_needs: dict[tuple[tuple[str, tuple[str, ...]], ...], PodSecurityNeeds] = {}
"""Needs by `_plain_key`: the needs of a job whose pods set nothing the checks read are the
same for every job of those replica types and container names (the violations name them)."""


_UNJUDGED_POD_FIELDS: Final = frozenset(
    {
        "activeDeadlineSeconds",
        "automountServiceAccountToken",
        "dnsPolicy",
        "enableServiceLinks",
        "imagePullSecrets",
        "priorityClassName",
        "schedulerName",
        "serviceAccountName",
        "terminationGracePeriodSeconds",
        "topologySpreadConstraints",
    }
)
"""Pod fields outside the schema's own that no check reads (a check reading one must take it
out of here): a template setting only these is still plain (`_plain_key`)."""
_UNJUDGED_CONTAINER_FIELDS: Final = frozenset(
    {"envFrom", "imagePullPolicy", "terminationMessagePolicy", "volumeMounts"}
)
"""The same for a container's fields outside the schema's own."""


def _plain_key(
    job: AnyJob, making: Collection[str] | None
) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
    """Per pod-making replica type, its container names, when no template sets a field a check
    reads: no AppArmor annotation, no pod or container field outside the schema's own but the
    unjudged ones (hostNetwork, securityContext, volumes, probes... are kept there), no init
    container and no container port. None otherwise."""
    key = []
    for rtype, rspec in job.replica_specs.items():
        if not (rtype in making if making is not None else job.replicas_of(rtype) > 0):
            continue
        template = rspec.template
        pod = template.spec
        extra = pod.__pydantic_extra__
        if (extra and not extra.keys() <= _UNJUDGED_POD_FIELDS) or pod.initContainers:
            return None
        annotations = template.metadata.annotations
        if annotations and any(k.startswith(_APPARMOR_ANNOTATION) for k in annotations):
            return None
        names = []
        for container in pod.containers:
            fields = container.__pydantic_extra__
            if container.ports or (fields and not fields.keys() <= _UNJUDGED_CONTAINER_FIELDS):
                return None
            names.append(container.name)
        key.append((rtype, tuple(names)))
    return tuple(key)


def pod_security_needs(job: AnyJob, making: Collection[str] | None = None) -> PodSecurityNeeds:
    """Every field of the pod templates the job makes pods of (a replica type of 0 replicas
    makes none) that a Pod Security Standards level refuses. `making`: the replica types that
    make pods, when the caller has counted them already.

    Most templates set no security field at all: their needs are judged once per replica
    types and container names, and shared (read-only, as every PodSecurityNeeds)."""
    plain = _plain_key(job, making)
    if plain is not None:
        known = _plain_needs.get(plain)
        if known is None:
            if len(_plain_needs) >= _PLAIN_KEPT:
                _plain_needs.clear()
            known = _plain_needs[plain] = _judged_needs(job, making)
        return known
    return _judged_needs(job, making)


def _judged_needs(job: AnyJob, making: Collection[str] | None) -> PodSecurityNeeds:
    found: list[Violation] = []
    for rtype, rspec in job.replica_specs.items():
        makes_pods = rtype in making if making is not None else job.replicas_of(rtype) > 0
        if makes_pods:
            _judge_pod(rtype, rspec.template.metadata, rspec.template.spec, found)
    if not found:
        return NO_NEEDS
    baseline: set[str] = set()
    restricted: set[str] = set()
    baseline_ok = restricted_ok = True
    for violation in found:
        if violation.allowance is None:
            restricted_ok = False
            if violation.level == "baseline":
                baseline_ok = False
        else:
            restricted.add(violation.allowance)
            if violation.level == "baseline":
                baseline.add(violation.allowance)
    return PodSecurityNeeds(
        violations=tuple(found),
        baseline_allowances=frozenset(baseline),
        baseline_ok=baseline_ok,
        restricted_allowances=frozenset(restricted),
        restricted_ok=restricted_ok,
    )


def policy_refusal(needs: PodSecurityNeeds, policy: ClusterPolicy) -> str | None:
    """Why a cluster with `policy` refuses pods with `needs`; None when it takes them."""
    level = policy.podSecurity
    if level == "privileged" or not needs.violations:
        return None
    if level == "baseline":
        ok, allowances = needs.baseline_ok, needs.baseline_allowances
    else:
        ok, allowances = needs.restricted_ok, needs.restricted_allowances
    if ok and all(_allows(policy, name) for name in allowances):
        return None
    return _refusal(needs, policy, level)


def _allows(policy: ClusterPolicy, allowance: str) -> bool:
    if allowance == "privileged":
        return policy.allowPrivileged
    if allowance == "hostPath":
        return policy.allowHostPath
    if allowance == "hostNetwork":
        return policy.allowHostNetwork
    if allowance == "hostPID":
        return policy.allowHostPID
    if allowance == "hostIPC":
        return policy.allowHostIPC
    return allowance == "hostPorts" and policy.allowHostPorts


def _refusal(needs: PodSecurityNeeds, policy: ClusterPolicy, level: PodSecurityLevel) -> str:
    refused: dict[tuple[str, str | None], list[str]] = {}
    for v in needs.violations:
        if v.level == "restricted" and level != "restricted":
            continue
        if v.allowance is not None and _allows(policy, v.allowance):
            continue
        refused.setdefault((v.check, v.allowance), []).append(v.where)
    parts = []
    for (check, allowance), places in sorted(
        refused.items(), key=lambda item: (_ORDER[item[0][0]], item[0][1] or "")
    ):
        shown = ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
        verb = "violates" if len(places) == 1 else "violate"
        switch = "" if allowance is None else f"; policy.{ALLOWANCES[allowance]} is false"
        parts.append(
            f'{_REFUSES[check]} not allowed here ({shown} {verb} PodSecurity "{level}:latest"'
            f"{switch})"
        )
    return "pod security policy: " + "; ".join(parts)


# -- judging one pod template ------------------------------------------------------------------


def _extra(model: PodSpec | Container) -> Mapping[str, Any]:
    # What `model_extra` returns, read directly: that property runs as Python, once per
    # container of every job placed.
    return model.__pydantic_extra__ or {}


def _asks(value: object) -> bool:
    """Set to anything but false: what a boolean the levels refuse when true counts as."""
    return value is not None and value is not False


def _shown(value: object) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return '"' + (value if len(value) <= 64 else value[:61] + "...") + '"'
    if isinstance(value, int):
        return str(value)
    return f"<{type(value).__name__}>"


def _label(item: object, index: int) -> str:
    name = item.get("name") if isinstance(item, dict) else None
    return name if isinstance(name, str) and 0 < len(name) <= 63 else str(index)


_NOTHING: Final[dict[str, Any]] = {}


def _mapping(value: object) -> Mapping[str, Any]:
    # The fields come as the JSON and YAML parsers make them, dicts and lists; checking for
    # dict rather than Mapping spares an ABC check per field.
    return value if isinstance(value, dict) else _NOTHING


class _Pod:
    """The fields of one pod template the checks read, and where found violations go."""

    __slots__ = ("found", "host_network", "rtype", "user_namespace", "windows")

    def __init__(self, rtype: str, spec: Mapping[str, Any], found: list[Violation]) -> None:
        self.rtype = rtype
        self.found = found
        self.host_network = _asks(spec.get("hostNetwork"))
        self.user_namespace = spec.get("hostUsers") is False
        """`hostUsers: false`: upstream relaxes procMount, runAsNonRoot and runAsUser."""
        self.windows = _mapping(spec.get("os")).get("name") == "windows"
        """Upstream exempts Windows pods from the restricted allowPrivilegeEscalation,
        capabilities and seccomp checks."""

    def refuse(
        self, check: str, level: RefusingLevel, where: str, allowance: str | None = None
    ) -> None:
        self.found.append(Violation(check, level, f"{self.rtype}: {where}", allowance))


def _judge_pod(rtype: str, meta: TemplateMeta, pod: PodSpec, found: list[Violation]) -> None:
    spec = _extra(pod)
    judged = _Pod(rtype, spec, found)
    for field_name in ("hostNetwork", "hostPID", "hostIPC"):
        value = spec.get(field_name)
        if _asks(value):
            judged.refuse(field_name, "baseline", f"{field_name}={_shown(value)}", field_name)
    raw_context = spec.get("securityContext")
    context = _mapping(raw_context)
    if raw_context is not None and not isinstance(raw_context, dict):
        # No check can read it (and the apiserver refuses it): only a privileged cluster
        # takes it.
        judged.refuse("securityContext", "baseline", f"securityContext={_shown(raw_context)}")
    if context:
        _judge_shared_context(judged, "securityContext", context)
    pod_non_root = context.get("runAsNonRoot")
    if pod_non_root is not None and pod_non_root is not True and not judged.user_namespace:
        judged.refuse(
            "runAsNonRoot", "restricted", f"securityContext.runAsNonRoot={_shown(pod_non_root)}"
        )
    pod_seccomp = context.get("seccompProfile")
    pod_seccomp_valid = _mapping(pod_seccomp).get("type") in _PROFILE_TYPES
    sysctls = context.get("sysctls")
    if isinstance(sysctls, list):
        for i, sysctl in enumerate(sysctls):
            name = _mapping(sysctl).get("name")
            if name not in _SAFE_SYSCTLS:
                label = name if isinstance(name, str) and name else str(i)
                judged.refuse("sysctls", "baseline", f"securityContext.sysctls[{label}]")
    elif sysctls is not None:
        judged.refuse("sysctls", "baseline", f"securityContext.sysctls={_shown(sysctls)}")
    _judge_volumes(judged, spec.get("volumes"))
    for key, value in (meta.annotations or {}).items():
        if (
            key.startswith(_APPARMOR_ANNOTATION)
            and value
            and value != "runtime/default"
            and not value.startswith("localhost/")
        ):
            where = f"metadata.annotations[{key}]={_shown(value)}"
            judged.refuse("appArmor", "baseline", where)
    for list_name in _CONTAINER_LISTS:
        if list_name == "containers":
            listed: object = pod.containers
        elif list_name == "initContainers":
            listed = pod.initContainers
        else:
            listed = spec.get(list_name)
        if listed is None:
            continue
        for i, container in enumerate(listed if isinstance(listed, list) else [listed]):
            if isinstance(container, Container):
                fields: Mapping[str, Any] = _extra(container)
                where = f"{list_name}[{container.name}]"
                ports: object = container.ports
            else:
                fields = _mapping(container)
                where = f"{list_name}[{_label(container, i)}]"
                ports = fields.get("ports")
            _judge_container(judged, where, fields, ports, pod_non_root is True, pod_seccomp_valid)


def _judge_shared_context(judged: _Pod, where: str, context: Mapping[str, Any]) -> None:
    """The checks that read a securityContext's fields the same at pod and container level:
    Windows hostProcess, SELinux options, seccomp and AppArmor profile types (baseline), and
    runAsUser 0 (restricted)."""
    host_process = _mapping(context.get("windowsOptions")).get("hostProcess")
    if _asks(host_process):
        where_host = f"{where}.windowsOptions.hostProcess={_shown(host_process)}"
        judged.refuse("hostProcess", "baseline", where_host)
    selinux = context.get("seLinuxOptions")
    if selinux is not None:
        options = _mapping(selinux)
        if not isinstance(selinux, dict):
            judged.refuse("seLinux", "baseline", f"{where}.seLinuxOptions={_shown(selinux)}")
        selinux_type = options.get("type", "")
        if selinux_type is not None and selinux_type not in _SELINUX_TYPES:
            where_type = f"{where}.seLinuxOptions.type={_shown(selinux_type)}"
            judged.refuse("seLinux", "baseline", where_type)
        for part in ("user", "role"):
            value = options.get(part)
            if value is not None and value != "":
                where_part = f"{where}.seLinuxOptions.{part}={_shown(value)}"
                judged.refuse("seLinux", "baseline", where_part)
    for field_name, check in (("seccompProfile", "seccomp"), ("appArmorProfile", "appArmor")):
        profile = context.get(field_name)
        if profile is not None:
            profile_type = _mapping(profile).get("type")
            if profile_type not in _PROFILE_TYPES:
                where_profile = f"{where}.{field_name}.type={_shown(profile_type)}"
                judged.refuse(check, "baseline", where_profile)
    user = context.get("runAsUser")
    if (
        user is not None
        and not judged.user_namespace
        and (not isinstance(user, int) or isinstance(user, bool) or user == 0)
    ):
        judged.refuse("runAsUser", "restricted", f"{where}.runAsUser={_shown(user)}")


def _judge_volumes(judged: _Pod, volumes: object) -> None:
    if not isinstance(volumes, list):
        return
    for i, volume in enumerate(volumes):
        fields = _mapping(volume)
        where = f"volumes[{_label(volume, i)}]"
        if _asks(fields.get("hostPath")):
            judged.refuse("hostPath", "baseline", f"{where}.hostPath", "hostPath")
            continue
        if any(fields.get(source) is not None for source in _RESTRICTED_VOLUMES):
            continue
        kinds = [k for k, v in fields.items() if k != "name" and v is not None]
        judged.refuse("volumeTypes", "restricted", f"{where}.{kinds[0] if kinds else 'unknown'}")


def _judge_container(
    judged: _Pod,
    where: str,
    fields: Mapping[str, Any],
    ports: object,
    pod_non_root: bool,
    pod_seccomp_valid: bool,
) -> None:
    raw_context = fields.get("securityContext")
    context = _mapping(raw_context)
    at = f"{where}.securityContext"
    privileged = False
    if raw_context is not None:  # most containers set none
        if not isinstance(raw_context, dict):
            judged.refuse("securityContext", "baseline", f"{at}={_shown(raw_context)}")
        privileged = _asks(context.get("privileged"))
        if privileged:
            where_privileged = f"{at}.privileged={_shown(context.get('privileged'))}"
            judged.refuse("privileged", "baseline", where_privileged, "privileged")
        _judge_shared_context(judged, at, context)
        proc_mount = context.get("procMount")
        if proc_mount is not None and proc_mount != "Default":
            # Baseline lets a pod in its own user namespace unmask /proc; restricted never.
            level: RefusingLevel = "restricted" if judged.user_namespace else "baseline"
            judged.refuse("procMount", level, f"{at}.procMount={_shown(proc_mount)}")
    _judge_capabilities(judged, at, context.get("capabilities"))
    _judge_ports(judged, where, ports)
    _judge_probe_hosts(judged, where, fields)
    escalation = context.get("allowPrivilegeEscalation")
    if escalation is not False and not judged.windows:
        # The apiserver refuses privileged with allowPrivilegeEscalation false: a cluster
        # allowing privileged containers takes their escalation with them.
        shown = " (unset)" if escalation is None else f"={_shown(escalation)}"
        where_escalation = f"{at}.allowPrivilegeEscalation{shown}"
        allowance = "privileged" if privileged else None
        judged.refuse("allowPrivilegeEscalation", "restricted", where_escalation, allowance)
    non_root = context.get("runAsNonRoot")
    if not judged.user_namespace:
        if non_root is None and not pod_non_root:
            where_root = f"{at}.runAsNonRoot (unset, and not true for the pod)"
            judged.refuse("runAsNonRoot", "restricted", where_root)
        elif non_root is not None and non_root is not True:
            judged.refuse("runAsNonRoot", "restricted", f"{at}.runAsNonRoot={_shown(non_root)}")
    if context.get("seccompProfile") is None and not pod_seccomp_valid and not judged.windows:
        where_seccomp = f"{at}.seccompProfile (unset, and none valid for the pod)"
        judged.refuse("seccompRequired", "restricted", where_seccomp)


def _judge_capabilities(judged: _Pod, at: str, capabilities: object) -> None:
    fields = _mapping(capabilities)
    if capabilities is not None and not isinstance(capabilities, dict):
        judged.refuse("capabilities", "baseline", f"{at}.capabilities={_shown(capabilities)}")
    added = fields.get("add")
    if isinstance(added, list):
        for i, capability in enumerate(added):
            label = capability if isinstance(capability, str) and capability else str(i)
            where = f"{at}.capabilities.add[{label}]"
            # A Windows pod is spared the restricted check, not the baseline one: the
            # apiserver refuses capabilities on Windows pods anyway.
            if capability not in _BASELINE_CAPABILITIES:
                judged.refuse("capabilities", "baseline", where)
            elif capability != "NET_BIND_SERVICE" and not judged.windows:
                judged.refuse("capabilitiesAdd", "restricted", where)
    elif added is not None:
        judged.refuse("capabilities", "baseline", f"{at}.capabilities.add={_shown(added)}")
    dropped = fields.get("drop")
    if judged.windows or (isinstance(dropped, list) and "ALL" in dropped):
        return
    if dropped is None:
        shown = " (unset)"
    elif isinstance(dropped, list):
        shown = " (without ALL)"
    else:
        shown = f"={_shown(dropped)}"
    judged.refuse("capabilitiesDrop", "restricted", f"{at}.capabilities.drop{shown}")


def _judge_ports(judged: _Pod, where: str, ports: object) -> None:
    if not isinstance(ports, list):
        return
    # On the host network the apiserver makes every container port a host port: there the
    # host network's allowance covers them, written or not.
    allowance = "hostNetwork" if judged.host_network else "hostPorts"
    for i, port in enumerate(ports):
        if isinstance(port, ContainerPort):
            host_port: object = port.hostPort
        else:
            host_port = _mapping(port).get("hostPort")
        if host_port is not None and host_port != 0:
            where_port = f"{where}.ports[{i}].hostPort={_shown(host_port)}"
            judged.refuse("hostPorts", "baseline", where_port, allowance)


def _judge_probe_hosts(judged: _Pod, where: str, fields: Mapping[str, Any]) -> None:
    for probe in _PROBES:
        handler = fields.get(probe)
        if handler is not None:
            _judge_handler_host(judged, f"{where}.{probe}", handler)
    lifecycle = fields.get("lifecycle")
    if lifecycle is not None:
        for hook in ("postStart", "preStop"):
            handler = _mapping(lifecycle).get(hook)
            if handler is not None:
                _judge_handler_host(judged, f"{where}.lifecycle.{hook}", handler)


def _judge_handler_host(judged: _Pod, where: str, handler: object) -> None:
    for action in ("httpGet", "tcpSocket"):
        host = _mapping(_mapping(handler).get(action)).get("host")
        if host is not None and host != "":
            judged.refuse("probeHost", "baseline", f"{where}.{action}.host={_shown(host)}")
