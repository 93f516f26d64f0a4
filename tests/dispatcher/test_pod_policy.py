"""Pod security: each cluster's Pod Security Standards level, checked field by field as the
Kubernetes Pod Security admission checks it, with the cluster's allowances on top."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dispatcher import pod_policy
from dispatcher.placement import plan_placement
from dispatcher.pod_policy import PodSecurityNeeds, pod_security_needs, policy_refusal
from schemas.cluster import ALLOWANCES, ClusterPolicy, ClusterSnapshot, PodSecurityLevel
from schemas.job_parsing import parse_job
from schemas.status import JobPhase
from tests.helpers import cluster, jax_job, node
from trainhub.embedded import Embedded, EmbeddedOptions
from workers.cluster_spec import parse_cluster_spec

RESTRICTED_CONTEXT: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
    "capabilities": {"drop": ["ALL"]},
}
"""A container securityContext every level allows."""
NAMES = {"containers": "jax", "initContainers": "init", "ephemeralContainers": "debug"}
LISTS = list(NAMES)


def _merged(context: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(context)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)  # None here means: not set at all
        else:
            merged[key] = value
    return merged


def document(
    pod: dict[str, Any] | None = None,
    *,
    container: dict[str, Any] | None = None,
    listed: str = "containers",
    annotations: dict[str, str] | None = None,
    clean: bool = True,
) -> dict[str, Any]:
    """A JAXJob whose Worker pods pass `restricted` (with `clean`) but for `pod` (pod spec
    fields; a `securityContext` among them is the pod's) and `container` (fields of a
    container in `listed`; its `securityContext` merged into the restricted one)."""
    doc = jax_job("secure", workers=1)
    template = doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]
    spec = template["spec"]
    main = spec["containers"][0]
    if clean:
        main["securityContext"] = copy.deepcopy(RESTRICTED_CONTEXT)
    if container is not None:
        changes = dict(container)
        target = main
        if listed != "containers":
            target = {"name": NAMES[listed], "image": "example/tool:1"}
            if clean:
                target["securityContext"] = copy.deepcopy(RESTRICTED_CONTEXT)
            spec[listed] = [target]
        context_changes = changes.pop("securityContext", None)
        if context_changes is not None:
            target["securityContext"] = _merged(target.get("securityContext", {}), context_changes)
        target.update(changes)
    spec.update(pod or {})
    if annotations:
        template["metadata"]["annotations"].update(annotations)
    return doc


def needs_of(doc: dict[str, Any]) -> PodSecurityNeeds:
    return pod_security_needs(parse_job(doc))


def refusal(
    needs: PodSecurityNeeds, level: PodSecurityLevel = "baseline", **allowed: bool
) -> str | None:
    return policy_refusal(needs, ClusterPolicy(podSecurity=level, **allowed))


def assert_refused(needs: PodSecurityNeeds, level: PodSecurityLevel, where: str) -> None:
    message = refusal(needs, level)
    assert message is not None, f"{level} took it"
    assert where in message and f'PodSecurity "{level}:latest"' in message, message


# -- baseline, field by field ------------------------------------------------------------------

BASELINE_CONTAINER: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    (
        "privileged",
        {"securityContext": {"privileged": False}},
        {"securityContext": {"privileged": True}},
        "securityContext.privileged=true",
    ),
    (
        "capabilities",
        {"securityContext": {"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}},
        {"securityContext": {"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}},
        "securityContext.capabilities.add[SYS_ADMIN]",
    ),
    (
        "hostProcess",
        {"securityContext": {"windowsOptions": {"hostProcess": False}}},
        {"securityContext": {"windowsOptions": {"hostProcess": True}}},
        "securityContext.windowsOptions.hostProcess=true",
    ),
    (
        "seLinuxOptions.type",
        {"securityContext": {"seLinuxOptions": {"type": "container_engine_t"}}},
        {"securityContext": {"seLinuxOptions": {"type": "spc_t"}}},
        'securityContext.seLinuxOptions.type="spc_t"',
    ),
    (
        "seLinuxOptions.user",
        {"securityContext": {"seLinuxOptions": {"level": "s0:c123,c456"}}},
        {"securityContext": {"seLinuxOptions": {"user": "system_u"}}},
        'securityContext.seLinuxOptions.user="system_u"',
    ),
    (
        "seLinuxOptions.role",
        {"securityContext": {"seLinuxOptions": {"type": "", "role": ""}}},
        {"securityContext": {"seLinuxOptions": {"role": "sysadm_r"}}},
        'securityContext.seLinuxOptions.role="sysadm_r"',
    ),
    (
        "procMount",
        {"securityContext": {"procMount": "Default"}},
        {"securityContext": {"procMount": "Unmasked"}},
        'securityContext.procMount="Unmasked"',
    ),
    (
        "seccompProfile",
        {"securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "p"}}},
        {"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
        'securityContext.seccompProfile.type="Unconfined"',
    ),
    (
        "appArmorProfile",
        {"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}},
        {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}},
        'securityContext.appArmorProfile.type="Unconfined"',
    ),
    (
        "hostPort",
        {"ports": [{"containerPort": 80, "hostPort": 0}]},
        {"ports": [{"containerPort": 80, "hostPort": 8080}]},
        "ports[0].hostPort=8080",
    ),
    (
        "probe host",
        {"livenessProbe": {"httpGet": {"port": 80}}},
        {"livenessProbe": {"httpGet": {"port": 80, "host": "10.0.0.1"}}},
        'livenessProbe.httpGet.host="10.0.0.1"',
    ),
    (
        "probe tcp host",
        {"startupProbe": {"tcpSocket": {"port": 80, "host": ""}}},
        {"readinessProbe": {"tcpSocket": {"port": 80, "host": "node"}}},
        'readinessProbe.tcpSocket.host="node"',
    ),
    (
        "lifecycle host",
        {"lifecycle": {"postStart": {"httpGet": {"port": 80}}}},
        {"lifecycle": {"preStop": {"httpGet": {"port": 80, "host": "metadata.internal"}}}},
        'lifecycle.preStop.httpGet.host="metadata.internal"',
    ),
]


@pytest.mark.parametrize("listed", LISTS)
@pytest.mark.parametrize(
    ("allowed", "refused", "where"),
    [case[1:] for case in BASELINE_CONTAINER],
    ids=[case[0] for case in BASELINE_CONTAINER],
)
def test_baseline_container_fields(
    listed: str, allowed: dict[str, Any], refused: dict[str, Any], where: str
) -> None:
    taken = needs_of(document(container=allowed, listed=listed))
    assert taken.violations == ()
    assert refusal(taken, "baseline") is None and refusal(taken, "restricted") is None
    needs = needs_of(document(container=refused, listed=listed))
    full = f"Worker: {listed}[{NAMES[listed]}].{where}"
    assert [(v.where, v.level) for v in needs.violations] == [(full, "baseline")]
    assert_refused(needs, "baseline", full)
    assert_refused(needs, "restricted", full)
    assert refusal(needs, "privileged") is None


BASELINE_POD: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("hostNetwork", {"hostNetwork": False}, {"hostNetwork": True}, "hostNetwork=true"),
    ("hostPID", {"hostPID": False}, {"hostPID": True}, "hostPID=true"),
    ("hostIPC", {"hostIPC": False}, {"hostIPC": True}, "hostIPC=true"),
    (
        "hostProcess",
        {"securityContext": {"windowsOptions": {"hostProcess": False}}},
        {"securityContext": {"windowsOptions": {"hostProcess": True}}},
        "securityContext.windowsOptions.hostProcess=true",
    ),
    (
        "seLinuxOptions",
        {"securityContext": {"seLinuxOptions": {"type": "container_init_t"}}},
        {"securityContext": {"seLinuxOptions": {"type": "unconfined_t"}}},
        'securityContext.seLinuxOptions.type="unconfined_t"',
    ),
    (
        "seccompProfile",
        {"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}},
        {"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
        'securityContext.seccompProfile.type="Unconfined"',
    ),
    (
        "appArmorProfile",
        {"securityContext": {"appArmorProfile": {"type": "Localhost", "localhostProfile": "p"}}},
        {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}},
        'securityContext.appArmorProfile.type="Unconfined"',
    ),
    (
        "sysctls",
        {
            "securityContext": {
                "sysctls": [
                    {"name": name, "value": "1"}
                    for name in (
                        "kernel.shm_rmid_forced",
                        "net.ipv4.ip_local_reserved_ports",  # 1.27
                        "net.ipv4.tcp_keepalive_probes",  # 1.29
                        "net.ipv4.tcp_rmem",  # 1.32
                        "net.ipv4.tcp_notsent_lowat",  # 1.37
                        "net.ipv4.tcp_slow_start_after_idle",  # 1.37
                    )
                ]
            }
        },
        {"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}]}},
        "securityContext.sysctls[kernel.msgmax]",
    ),
    (
        "hostPath",
        {"volumes": [{"name": "data", "emptyDir": {}}]},
        {"volumes": [{"name": "data", "hostPath": {"path": "/data"}}]},
        "volumes[data].hostPath",
    ),
]


@pytest.mark.parametrize(
    ("allowed", "refused", "where"),
    [case[1:] for case in BASELINE_POD],
    ids=[case[0] for case in BASELINE_POD],
)
def test_baseline_pod_fields(allowed: dict[str, Any], refused: dict[str, Any], where: str) -> None:
    taken = needs_of(document(allowed))
    assert taken.violations == ()
    needs = needs_of(document(refused))
    assert [(v.where, v.level) for v in needs.violations] == [(f"Worker: {where}", "baseline")]
    assert_refused(needs, "baseline", f"Worker: {where}")
    assert_refused(needs, "restricted", f"Worker: {where}")
    assert refusal(needs, "privileged") is None


@pytest.mark.parametrize(
    ("value", "refused"),
    [("", False), ("runtime/default", False), ("localhost/train", False), ("unconfined", True)],
)
def test_baseline_apparmor_annotations(value: str, refused: bool) -> None:
    key = "container.apparmor.security.beta.kubernetes.io/jax"
    needs = needs_of(document(annotations={key: value}))
    where = f'Worker: metadata.annotations[{key}]="{value}"'
    assert [v.where for v in needs.violations] == ([where] if refused else [])
    if refused:
        assert_refused(needs, "baseline", where)


# -- restricted, field by field ----------------------------------------------------------------

RESTRICTED_CONTAINER: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    (
        "allowPrivilegeEscalation",
        {"securityContext": {"allowPrivilegeEscalation": False}},
        {"securityContext": {"allowPrivilegeEscalation": True}},
        "securityContext.allowPrivilegeEscalation=true",
    ),
    (
        "allowPrivilegeEscalation unset",
        {"securityContext": {"allowPrivilegeEscalation": False}},
        {"securityContext": {"allowPrivilegeEscalation": None}},
        "securityContext.allowPrivilegeEscalation (unset)",
    ),
    (
        "runAsNonRoot",
        {"securityContext": {"runAsNonRoot": True}},
        {"securityContext": {"runAsNonRoot": False}},
        "securityContext.runAsNonRoot=false",
    ),
    (
        "runAsNonRoot unset",
        {"securityContext": {"runAsNonRoot": True}},
        {"securityContext": {"runAsNonRoot": None}},
        "securityContext.runAsNonRoot (unset, and not true for the pod)",
    ),
    (
        "runAsUser",
        {"securityContext": {"runAsUser": 1000}},
        {"securityContext": {"runAsUser": 0}},
        "securityContext.runAsUser=0",
    ),
    (
        "seccompProfile unset",
        {"securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "p"}}},
        {"securityContext": {"seccompProfile": None}},
        "securityContext.seccompProfile (unset, and none valid for the pod)",
    ),
    (
        "capabilities.drop",
        {"securityContext": {"capabilities": {"drop": ["NET_RAW", "ALL"]}}},
        {"securityContext": {"capabilities": {"drop": ["NET_RAW"]}}},
        "securityContext.capabilities.drop (without ALL)",
    ),
    (
        "capabilities unset",
        {"securityContext": {"capabilities": {"drop": ["ALL"]}}},
        {"securityContext": {"capabilities": None}},
        "securityContext.capabilities.drop (unset)",
    ),
    (
        "capabilities.add",
        {"securityContext": {"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}},
        {"securityContext": {"capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}},
        "securityContext.capabilities.add[CHOWN]",
    ),
]


@pytest.mark.parametrize("listed", LISTS)
@pytest.mark.parametrize(
    ("allowed", "refused", "where"),
    [case[1:] for case in RESTRICTED_CONTAINER],
    ids=[case[0] for case in RESTRICTED_CONTAINER],
)
def test_restricted_container_fields(
    listed: str, allowed: dict[str, Any], refused: dict[str, Any], where: str
) -> None:
    taken = needs_of(document(container=allowed, listed=listed))
    assert refusal(taken, "restricted") is None
    needs = needs_of(document(container=refused, listed=listed))
    full = f"Worker: {listed}[{NAMES[listed]}].{where}"
    assert [(v.where, v.level) for v in needs.violations] == [(full, "restricted")]
    assert refusal(needs, "baseline") is None  # baseline takes what only restricted refuses
    assert_refused(needs, "restricted", full)


@pytest.mark.parametrize(
    "source",
    [
        {"configMap": {"name": "c"}},
        {"csi": {"driver": "d"}},
        {"downwardAPI": {"items": []}},
        {"emptyDir": {}},
        {"ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
        {"image": {"reference": "example/data:1"}},
        {"persistentVolumeClaim": {"claimName": "c"}},
        {"projected": {"sources": []}},
        {"secret": {"secretName": "s"}},
    ],
    ids=lambda source: next(iter(source)),
)
def test_restricted_allows_these_volume_types(source: dict[str, Any]) -> None:
    needs = needs_of(document({"volumes": [{"name": "data", **source}]}))
    assert needs.violations == ()


@pytest.mark.parametrize(
    ("volume", "where"),
    [
        ({"nfs": {"server": "s", "path": "/"}}, "volumes[data].nfs"),
        ({"gitRepo": {"repository": "r"}}, "volumes[data].gitRepo"),
        ({"awsElasticBlockStore": {"volumeID": "v"}}, "volumes[data].awsElasticBlockStore"),
        ({}, "volumes[data].unknown"),
    ],
)
def test_restricted_refuses_other_volume_types(volume: dict[str, Any], where: str) -> None:
    needs = needs_of(document({"volumes": [{"name": "data", **volume}]}))
    assert refusal(needs, "baseline") is None
    assert_refused(needs, "restricted", f"Worker: {where}")


@pytest.mark.parametrize(
    ("context", "where"),
    [
        ({"runAsNonRoot": False}, "securityContext.runAsNonRoot=false"),
        ({"runAsUser": 0}, "securityContext.runAsUser=0"),
    ],
)
def test_restricted_pod_fields(context: dict[str, Any], where: str) -> None:
    needs = needs_of(document({"securityContext": context}))
    assert [(v.where, v.level) for v in needs.violations] == [(f"Worker: {where}", "restricted")]
    assert refusal(needs, "baseline") is None
    assert_refused(needs, "restricted", f"Worker: {where}")
    taken = needs_of(document({"securityContext": {"runAsNonRoot": True, "runAsUser": 1000}}))
    assert taken.violations == ()


# -- pod level and container level together ----------------------------------------------------


def test_pod_level_run_as_non_root_and_seccomp_stand_for_containers_that_set_none() -> None:
    unset = {"securityContext": {"runAsNonRoot": None, "seccompProfile": None}}
    pod = {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}}
    for listed in LISTS:
        assert needs_of(document(pod, container=unset, listed=listed)).violations == ()
        # Without the pod's, the container's own are missing.
        refused = refusal(needs_of(document(container=unset, listed=listed)), "restricted")
        assert refused is not None and "runAsNonRoot (unset" in refused
        assert "seccompProfile (unset" in refused


def test_a_container_setting_its_own_still_counts_under_a_pod_level_value() -> None:
    pod = {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}}
    own = {"securityContext": {"runAsNonRoot": False, "seccompProfile": {"type": "Unconfined"}}}
    needs = needs_of(document(pod, container=own))
    at = "Worker: containers[jax].securityContext"
    assert sorted((v.where, v.level) for v in needs.violations) == [
        (f"{at}.runAsNonRoot=false", "restricted"),
        (f'{at}.seccompProfile.type="Unconfined"', "baseline"),
    ]
    # A pod-level false is refused even where every container says true.
    assert_refused(
        needs_of(document({"securityContext": {"runAsNonRoot": False}})),
        "restricted",
        "Worker: securityContext.runAsNonRoot=false",
    )
    # An invalid pod-level profile stands for no container.
    needs = needs_of(
        document(
            {"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
            container={"securityContext": {"seccompProfile": None}},
        )
    )
    assert sorted(v.check for v in needs.violations) == ["seccomp", "seccompRequired"]


def test_a_pod_in_its_own_user_namespace_may_run_as_root_and_unmask_proc_at_baseline() -> None:
    root = {"securityContext": {"runAsNonRoot": False, "runAsUser": 0, "procMount": "Unmasked"}}
    needs = needs_of(document({"hostUsers": False}, container=root))
    assert refusal(needs, "baseline") is None
    assert_refused(needs, "restricted", 'containers[jax].securityContext.procMount="Unmasked"')
    assert [v.check for v in needs.violations] == ["procMount"]
    in_host_users = needs_of(document({"hostUsers": True}, container=root))
    assert sorted(v.check for v in in_host_users.violations) == [
        "procMount",
        "runAsNonRoot",
        "runAsUser",
    ]


def test_a_windows_pod_need_not_drop_capabilities_or_set_escalation_and_seccomp() -> None:
    bare = {"securityContext": {"runAsNonRoot": True}}
    needs = needs_of(document({"os": {"name": "windows"}}, container=bare, clean=False))
    assert needs.violations == ()
    needs = needs_of(document({"os": {"name": "linux"}}, container=bare, clean=False))
    assert sorted(v.check for v in needs.violations) == [
        "allowPrivilegeEscalation",
        "capabilitiesDrop",
        "seccompRequired",
    ]


def test_every_replica_type_making_pods_is_judged() -> None:
    doc = document({"hostPID": True}, container={"securityContext": {"privileged": True}})
    worker = doc["spec"].pop("jaxReplicaSpecs")["Worker"]
    worker["template"]["spec"]["containers"][0]["name"] = "pytorch"
    doc.update(apiVersion="kubeflow.org/v1", kind="PyTorchJob")
    doc["spec"]["pytorchReplicaSpecs"] = {"Master": copy.deepcopy(worker), "Worker": worker}
    assert {v.where.split(":")[0] for v in needs_of(doc).violations} == {"Master", "Worker"}
    only_master = pod_security_needs(parse_job(doc), making=["Master"])
    assert {v.where.split(":")[0] for v in only_master.violations} == {"Master"}
    none = document({"hostPID": True}, container={"securityContext": {"privileged": True}})
    none["spec"]["jaxReplicaSpecs"]["Worker"]["replicas"] = 0  # makes no pods
    assert needs_of(none) == PodSecurityNeeds()


@pytest.mark.parametrize(
    ("pod", "where"),
    [
        ({"hostPID": "yes"}, 'Worker: hostPID="yes"'),
        ({"securityContext": True}, "Worker: securityContext=true"),
        ({"securityContext": {"sysctls": {"name": "x"}}}, "Worker: securityContext.sysctls=<dict>"),
    ],
)
def test_values_no_check_can_read_are_refused_not_missed(pod: dict[str, Any], where: str) -> None:
    assert_refused(needs_of(document(pod)), "baseline", where)


def test_a_container_context_no_check_can_read_is_refused() -> None:
    for changes in ({"securityContext": "privileged"}, {"securityContext": {"capabilities": 1}}):
        doc = document(clean=False)
        doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].update(
            changes
        )
        message = refusal(needs_of(doc), "baseline")
        assert message is not None and "Worker: containers[jax].securityContext" in message


# -- the jobs, the allowances on top, the privileged level -----------------------------


def test_host_ipc_is_refused_at_baseline_naming_field_and_level() -> None:
    needs = needs_of(document({"hostIPC": True}, clean=False))
    assert refusal(needs) == (
        "pod security policy: hostIPC is not allowed here (Worker: hostIPC=true violates "
        'PodSecurity "baseline:latest"; policy.allowHostIPC is false)'
    )
    assert refusal(needs, allowHostIPC=True) is None
    assert refusal(needs, "privileged") is None


def test_sys_admin_and_net_admin_with_privilege_escalation_is_refused_at_baseline() -> None:
    context = {
        "capabilities": {"add": ["SYS_ADMIN", "NET_ADMIN"]},
        "allowPrivilegeEscalation": True,
    }
    needs = needs_of(document(container={"securityContext": context}, clean=False))
    at = "Worker: containers[jax].securityContext"
    assert refusal(needs) == (
        "pod security policy: capabilities beyond the baseline set are not allowed here "
        f"({at}.capabilities.add[SYS_ADMIN], {at}.capabilities.add[NET_ADMIN] violate "
        'PodSecurity "baseline:latest")'
    )
    # No allowance lifts them: every host privilege allowed, baseline still refuses.
    everything = ClusterPolicy.allowing(ALLOWANCES)
    assert policy_refusal(needs, everything) is not None
    restricted = refusal(needs, "restricted") or ""
    assert f"{at}.allowPrivilegeEscalation=true" in restricted
    assert 'PodSecurity "restricted:latest"' in restricted
    assert refusal(needs, "privileged") is None


@pytest.mark.parametrize("level", ["baseline", "restricted"])
@pytest.mark.parametrize(
    ("pod", "container", "allowance"),
    [
        ({"hostNetwork": True}, None, "allowHostNetwork"),
        ({"hostPID": True}, None, "allowHostPID"),
        ({"hostIPC": True}, None, "allowHostIPC"),
        ({"volumes": [{"name": "d", "hostPath": {"path": "/d"}}]}, None, "allowHostPath"),
        (None, {"ports": [{"containerPort": 80, "hostPort": 80}]}, "allowHostPorts"),
        (None, {"securityContext": {"privileged": True}}, "allowPrivileged"),
        # On the host network its ports are the host's: the host network's allowance covers them.
        (
            {"hostNetwork": True},
            {"ports": [{"containerPort": 80, "hostPort": 80}]},
            "allowHostNetwork",
        ),
    ],
)
def test_an_allowance_lifts_its_field_at_either_level(
    level: PodSecurityLevel,
    pod: dict[str, Any] | None,
    container: dict[str, Any] | None,
    allowance: str,
) -> None:
    needs = needs_of(document(pod, container=container))
    message = refusal(needs, level)
    assert message is not None and f"policy.{allowance} is false" in message
    assert refusal(needs, level, **{allowance: True}) is None


def test_an_allowance_lifts_nothing_else() -> None:
    sys_admin = {"privileged": True, "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}
    needs = needs_of(document(container={"securityContext": sys_admin}))
    message = refusal(needs, allowPrivileged=True) or ""
    assert "capabilities.add[SYS_ADMIN]" in message and "privileged=true" not in message
    nfs = [{"name": "d", "hostPath": {"path": "/d"}}, {"name": "n", "nfs": {"server": "s"}}]
    needs = needs_of(document({"volumes": nfs}))
    assert refusal(needs, allowHostPath=True) is None
    message = refusal(needs, "restricted", allowHostPath=True) or ""
    assert "Worker: volumes[n].nfs violates" in message and "hostPath" not in message
    ports = needs_of(document(container={"ports": [{"containerPort": 80, "hostPort": 80}]}))
    assert refusal(ports, allowHostNetwork=True) is not None


def test_the_privileged_level_takes_everything() -> None:
    worst = {
        "privileged": True,
        "capabilities": {"add": ["SYS_ADMIN"]},
        "procMount": "Unmasked",
        "seccompProfile": {"type": "Unconfined"},
        "runAsUser": 0,
    }
    doc = document(
        {"hostIPC": True, "hostNetwork": True, "volumes": [{"name": "d", "nfs": {"server": "s"}}]},
        container={"securityContext": worst, "ports": [{"containerPort": 80, "hostPort": 80}]},
    )
    needs = needs_of(doc)
    assert not needs.baseline_ok and not needs.restricted_ok
    assert refusal(needs, "privileged") is None
    assert refusal(needs, "baseline") is not None


def test_a_refusal_lists_at_most_three_places_of_a_kind() -> None:
    adds = ["SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "BPF", "PERFMON"]
    needs = needs_of(document(container={"securityContext": {"capabilities": {"add": adds}}}))
    assert "add[SYS_PTRACE] and 2 more violate" in (refusal(needs) or "")


# -- the cluster's policy ----------------------------------------------------------------------


def test_a_cluster_is_baseline_unless_it_says_otherwise() -> None:
    assert ClusterPolicy().podSecurity == "baseline"
    old = ClusterSnapshot.model_validate({"name": "old", "policy": {"allowHostPID": True}})
    assert old.policy == ClusterPolicy(podSecurity="baseline", allowHostPID=True)
    assert ClusterSnapshot.model_validate({"name": "older"}).policy.podSecurity == "baseline"
    policy = ClusterPolicy.allowing(["hostIPC", "hostPorts"], podSecurity="restricted")
    assert policy == ClusterPolicy(podSecurity="restricted", allowHostIPC=True, allowHostPorts=True)
    with pytest.raises(ValueError, match=r"unknown pod privilege 'hostUsers'.*hostIPC, hostPorts"):
        ClusterPolicy.allowing(["hostUsers"])
    with pytest.raises(ValueError, match="podSecurity"):
        ClusterPolicy.model_validate({"podSecurity": "strict"})


def test_a_baseline_cluster_refuses_the_job_and_a_privileged_level_cluster_takes_it() -> None:
    context = {"capabilities": {"add": ["SYS_ADMIN"]}, "allowPrivilegeEscalation": True}
    job = parse_job(
        document({"hostIPC": True}, container={"securityContext": context}, clean=False)
    )
    strict = cluster("strict", node("a", cpu="8", memory="8Gi"))
    lenient = cluster(
        "lenient", node("a", cpu="8", memory="8Gi"), policy={"podSecurity": "privileged"}
    )
    placement = plan_placement(job, [strict])
    assert placement.chosen is None and placement.never_fits
    reason = placement.decision.clusters[0].reason or ""
    assert "Worker: hostIPC=true violates" in reason
    assert "containers[jax].securityContext.capabilities.add[SYS_ADMIN] violates" in reason
    assert 'PodSecurity "baseline:latest"' in reason
    assert plan_placement(job, [strict, lenient]).chosen == "lenient"
    # Allowing hostIPC is not enough while the capability is asked for.
    allowing = cluster("allowing", node("a", cpu="8", memory="8Gi"), policy={"allowHostIPC": True})
    assert plan_placement(job, [allowing]).never_fits


def test_a_plain_job_places_at_every_level_but_restricted() -> None:
    plain = parse_job(jax_job("plain", workers=1))
    for level, places in (("privileged", True), ("baseline", True), ("restricted", False)):
        snapshot = cluster(level, node("a", cpu="8", memory="8Gi"), policy={"podSecurity": level})
        assert (plan_placement(plain, [snapshot]).chosen == level) is places, level
    hardened = parse_job(document())
    restricted = cluster(
        "r", node("a", cpu="8", memory="8Gi"), policy={"podSecurity": "restricted"}
    )
    assert plan_placement(hardened, [restricted]).chosen == "r"


def test_namespace_allow_list_is_never_fits() -> None:
    job = parse_job(jax_job("ns", workers=1, namespace="team-a"))
    only_b = cluster("only-b", node("a", cpu="8", memory="8Gi"), namespaces=["team-b"])
    placement = plan_placement(job, [only_b])
    assert placement.never_fits
    assert "namespace 'team-a' is not allowed on this cluster" in (
        placement.decision.clusters[0].reason or ""
    )


async def test_the_hub_rejects_a_host_network_job_with_the_policy_reason() -> None:
    options = EmbeddedOptions(
        clusters=[parse_cluster_spec("east:cpu=4,memory=8Gi")],
        backend="sim",
        heartbeat_interval=0.2,
    )
    async with Embedded(options) as system:
        uid = await system.submit(document({"hostNetwork": True}, clean=False))
        ok = await system.submit(jax_job("plain", workers=1))
        final = await system.wait_finished([uid, ok], timeout=20)
    assert final[uid].phase == JobPhase.REJECTED
    assert "east: pod security policy: hostNetwork is not allowed here" in (
        final[uid].message or ""
    )
    assert 'PodSecurity "baseline:latest"' in (final[uid].message or "")
    assert final[ok].phase == JobPhase.SUCCEEDED


# -- plain templates: needs judged once per replica types and container names -------------


def _plain_document(name: str = "plain") -> dict[str, Any]:
    """A job whose pods set no field any check reads (but some no check reads)."""
    doc = jax_job(name, workers=2)
    spec = doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["serviceAccountName"] = "trainer"
    spec["containers"][0]["imagePullPolicy"] = "IfNotPresent"
    return doc


def test_plain_templates_share_the_needs_judged_in_full() -> None:
    first, second = parse_job(_plain_document("a")), parse_job(_plain_document("b"))
    assert pod_policy._plain_key(first, None) == (("Worker", ("jax",)),)
    needs = pod_security_needs(first)
    assert needs == pod_policy._judged_needs(first, None)
    assert sorted(v.check for v in needs.violations) == [
        "allowPrivilegeEscalation",
        "capabilitiesDrop",
        "runAsNonRoot",
        "seccompRequired",
    ]
    assert pod_security_needs(second) is needs  # the same job shape: judged once


def _with_sidecar(doc: dict[str, Any]) -> dict[str, Any]:
    containers = doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    containers.append({"name": "log", "image": "example/log:1"})
    return doc


def _two_types(doc: dict[str, Any]) -> dict[str, Any]:
    worker = doc["spec"].pop("jaxReplicaSpecs")["Worker"]
    doc.update(apiVersion="kubeflow.org/v1", kind="PyTorchJob")
    worker["template"]["spec"]["containers"][0]["name"] = "pytorch"
    master = copy.deepcopy(worker)
    master["replicas"] = 1
    doc["spec"]["pytorchReplicaSpecs"] = {"Master": master, "Worker": worker}
    return doc


def _set(path: str, value: Any) -> Any:
    def change(doc: dict[str, Any]) -> dict[str, Any]:
        target = doc["spec"]["jaxReplicaSpecs"]["Worker"]["template"]
        *parents, last = path.split(".")
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        target[last] = value
        return doc

    return change


@pytest.mark.parametrize(
    ("change", "plain"),
    [
        (_with_sidecar, True),  # the violations name the containers
        (_two_types, True),
        (_set("spec.containers.0.securityContext", RESTRICTED_CONTEXT), False),
        (_set("spec.securityContext", {"runAsNonRoot": True}), False),
        (_set("spec.hostNetwork", True), False),
        (_set("spec.volumes", [{"name": "h", "hostPath": {"path": "/"}}]), False),
        (_set("spec.containers.0.ports", [{"containerPort": 80, "hostPort": 80}]), False),
        (_set("spec.containers.0.livenessProbe", {"httpGet": {"host": "x", "port": 1}}), False),
        (_set("spec.initContainers", [{"name": "init", "image": "example/init:1"}]), False),
        (
            _set(
                "metadata.annotations",
                {"container.apparmor.security.beta.kubernetes.io/jax": "unconfined"},
            ),
            False,
        ),
    ],
)
def test_a_template_unlike_the_plain_one_is_judged_as_itself(change: Any, plain: bool) -> None:
    """After a plain job's needs are kept, a job differing in anything a check reads gets
    its own: kept under its own key when still plain, else judged in full."""
    known = pod_security_needs(parse_job(_plain_document()))
    job = parse_job(change(_plain_document("other")))
    assert (pod_policy._plain_key(job, None) is not None) == plain
    needs = pod_security_needs(job)
    assert needs == pod_policy._judged_needs(job, None)
    assert needs != known


def test_the_replica_types_making_pods_are_part_of_the_plain_key() -> None:
    job = parse_job(_two_types(_plain_document()))
    both, only_master = pod_security_needs(job), pod_security_needs(job, making=["Master"])
    assert {v.where.split(":")[0] for v in both.violations} == {"Master", "Worker"}
    assert {v.where.split(":")[0] for v in only_master.violations} == {"Master"}
    assert only_master == pod_policy._judged_needs(job, ["Master"])
