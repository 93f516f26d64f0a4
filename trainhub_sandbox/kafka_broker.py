"""Start, stop and restart a throwaway single-node Kafka 4.x broker (KRaft) from Maven jars.

The jars are resolved once into a per-version cache; each broker gets its own work directory,
loopback ports and a fresh cluster, optionally with a SASL_PLAINTEXT SCRAM-SHA-512 listener and
the KRaft StandardAuthorizer (ACLs, nothing allowed without one). `start_nodes` also forms the
nodes of a multi-broker cluster (trainhub_sandbox/kafka_cluster.py).
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import re
import secrets
import shutil
import socket
import struct
import subprocess
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from trainhub_sandbox import processes
from trainhub_sandbox.cache import default_cache_dir
from trainhub_sandbox.errors import SandboxError
from trainhub_sandbox.processes import LOOPBACK, SandboxProcess, free_ports, log_tail, tail

# Package data: the pom Maven resolves the jars from, and the broker's logging settings.
KAFKA_DATA_DIR = Path(__file__).resolve().parent / "data" / "kafka"
KAFKA_POM = KAFKA_DATA_DIR / "pom.xml"
KAFKA_LOG4J_CONFIG = KAFKA_DATA_DIR / "log4j2.properties"

# 3.8.1 and 3.11.0 both run on Maven 3.8.7; pinned so a resolve never depends on plugin lookup.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
SCRAM_MECHANISM = "SCRAM-SHA-512"
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
NODE_ID = 1

_POM_NS = "{http://maven.apache.org/POM/4.0.0}"
_MAVEN_TIMEOUT_S = 900.0
_STOP_TIMEOUT_S = 15.0
_POLL_INTERVAL_S = 0.25
_PROBE_TIMEOUT_S = 2.0
_LOG_TAIL_LINES = 40
_OUTPUT_TAIL_LINES = 40
_SCRAM_ITERATIONS = 8192
# C1 only and the serial collector: on a busy 2-core machine they cut a start from ~15 s to
# ~9 s and leave the cores to the tests; a sandbox broker never runs long enough for C2 to pay.
_FAST_START_JVM_OPTS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Djava.awt.headless=true")
BROKER_MAX_HEAP_MB = 512
"""A lone broker's heap ceiling; the nodes of a cluster get less each (kafka_cluster.py)."""
_BROKER_MIN_HEAP_MB = 128
_TOOL_JVM_OPTS = ("-Xmx256m", *_FAST_START_JVM_OPTS)
_PLAIN_USER = re.compile(r"[A-Za-z0-9._-]+")


@dataclass(frozen=True)
class KafkaBroker:
    """A running sandbox broker and how to reach it."""

    bootstrap: str
    pid: int
    workdir: Path
    log_path: Path
    config_path: Path
    cluster_id: str
    sasl_bootstrap: str | None = None
    scram_username: str | None = None
    """The first SCRAM user; with `authorizer` it is the only super user."""
    scram_password: str | None = field(default=None, repr=False)
    authorizer: bool = False
    """ACLs are enforced: a principal may do only what an ACL allows (ANONYMOUS nothing)."""
    node_id: int = NODE_ID
    max_heap_mb: int = BROKER_MAX_HEAP_MB


# --- jars -------------------------------------------------------------------------------------


def kafka_version(pom: Path = KAFKA_POM) -> str:
    """The Kafka release the sandbox pom pins (its `kafka.version` property)."""
    node = ElementTree.parse(pom).getroot().find(f"{_POM_NS}properties/{_POM_NS}kafka.version")
    if node is None or not (node.text or "").strip():
        raise SandboxError(f"{pom} has no <kafka.version> property")
    return (node.text or "").strip()


def resolve_kafka_classpath(cache_dir: Path | None = None) -> Path:
    """Return the folder of broker jars (use `<folder>/*` as the class path), resolving it once.

    `cache_dir` replaces the sandbox cache root (see `default_cache_dir`); the jars land in
    `<root>/kafka-<version>/lib`. A later call reuses them while the pom is unchanged.
    """
    version_dir = (cache_dir or default_cache_dir()) / f"kafka-{kafka_version()}"
    lib = version_dir / "lib"
    marker = version_dir / "resolved.sha256"
    pom_digest = hashlib.sha256(KAFKA_POM.read_bytes()).hexdigest()
    version_dir.mkdir(parents=True, exist_ok=True)
    # Parallel test sessions share the cache: one resolves, the others wait and reuse it.
    with _file_lock(version_dir / ".lock"):
        if marker.is_file() and marker.read_text().strip() == pom_digest:
            return lib
        marker.unlink(missing_ok=True)
        # Jars of an interrupted or older resolve would otherwise sit on the class path too.
        shutil.rmtree(lib, ignore_errors=True)
        _copy_dependencies(lib)
        marker.write_text(pom_digest + "\n")
    return lib


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _copy_dependencies(lib: Path) -> None:
    command = [
        _executable("mvn", "Maven"),
        "-B",
        "-q",
        "-Dstyle.color=never",
        "-f",
        str(KAFKA_POM),
        f"{DEPENDENCY_PLUGIN}:copy-dependencies",
        f"-DoutputDirectory={lib}",
        "-DincludeScope=runtime",
    ]
    result = _run_tool(command, "resolving the Kafka jars with Maven", _MAVEN_TIMEOUT_S)
    if not any(lib.glob("kafka_2.13-*.jar")):
        raise SandboxError(
            f"Maven finished but {lib} holds no kafka_2.13 jar\n{tail(result, _OUTPUT_TAIL_LINES)}"
        )


def _executable(name: str, what: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise SandboxError(f"{what} ({name}) is not on PATH; the Kafka sandbox needs it")
    return found


def _java() -> str:
    # JAVA_HOME wins over PATH, as in Kafka's own launch scripts.
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    return _executable("java", "Java 17+")


def _run_tool(command: list[str], what: str, timeout: float) -> str:
    try:
        result = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=max(timeout, 1.0),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = exc.output if isinstance(exc.output, str) else ""
        raise SandboxError(
            f"{what} timed out after {timeout:.0f}s\n{tail(output, _OUTPUT_TAIL_LINES)}"
        ) from exc
    if result.returncode != 0:
        raise SandboxError(
            f"{what} failed (exit code {result.returncode}): {' '.join(command[:3])} ...\n"
            f"{tail(result.stdout, _OUTPUT_TAIL_LINES)}"
        )
    return result.stdout


# --- start ------------------------------------------------------------------------------------


def start_kafka(
    workdir: Path,
    *,
    scram_users: dict[str, str] | None = None,
    authorizer: bool = False,
    timeout: float = 90,
) -> KafkaBroker:
    """Format a fresh single-node cluster in `workdir`, start it detached and wait until ready.

    With `scram_users` (name -> password) a SASL_PLAINTEXT SCRAM-SHA-512 listener opens too and
    the users exist from the first moment; the first one is reported as the admin. `authorizer`
    turns on the KRaft StandardAuthorizer with that admin as the only super user and nothing
    allowed to anyone else until an ACL says so (the PLAINTEXT listener stays open for
    probes, but its ANONYMOUS principal may do nothing). `timeout` covers formatting and boot,
    not the one-off jar resolve. On failure the broker is stopped and `SandboxError` carries
    the cause and the tail of its log.
    """
    (broker,) = start_nodes(
        [workdir], scram_users=scram_users, authorizer=authorizer, timeout=timeout
    )
    return broker


def start_nodes(
    workdirs: Sequence[Path],
    *,
    scram_users: dict[str, str] | None = None,
    authorizer: bool = False,
    timeout: float = 90,
    max_heap_mb: int = BROKER_MAX_HEAP_MB,
) -> list[KafkaBroker]:
    """Format and start one cluster of `len(workdirs)` combined broker+controller nodes, node
    ids 1..N, each in its own workdir with its own ports; all N are the (static) controller
    quorum's voters and the storage of each is formatted with the same cluster id. Returns
    once every node lists every node as a live broker (`start_kafka` says the rest)."""
    users = dict(scram_users or {})
    _check_scram_users(users)
    admin = next(iter(users.items()), None)
    if authorizer and (admin is None or not _PLAIN_USER.fullmatch(admin[0])):
        # The admin is also a PLAIN user of the controller listener, named in a JAAS key.
        raise ValueError(
            "an ACL-enforcing broker needs a first SCRAM user (its admin) named with letters, "
            f"digits, '.', '_' or '-' only; got {admin[0] if admin else None!r}"
        )
    lib = resolve_kafka_classpath()
    deadline = time.monotonic() + timeout
    dirs = [workdir.resolve() for workdir in workdirs]
    for workdir in dirs:
        if (workdir / "kraft-data").exists():
            raise SandboxError(
                f"{workdir / 'kraft-data'} already exists; start each broker in a fresh workdir"
            )
    per_node = 3 if users else 2
    all_ports = free_ports(per_node * len(dirs))
    ports = [all_ports[i * per_node : (i + 1) * per_node] for i in range(len(dirs))]
    voters = ",".join(f"{i + 1}@{LOOPBACK}:{p[1]}" for i, p in enumerate(ports))
    cluster_id = _new_cluster_id()
    config_paths = []
    for index, workdir in enumerate(dirs):
        data_dir = workdir / "kraft-data"
        data_dir.mkdir(parents=True)
        config_path = workdir / "server.properties"
        props = _server_properties(
            data_dir, ports[index], node_id=index + 1, voters=voters, nodes=len(dirs)
        )
        if authorizer and admin is not None:
            props.update(_authorizer_properties(*admin))
        _write_properties(config_path, props)
        _format_storage(lib, config_path, cluster_id, users, deadline - time.monotonic())
        config_paths.append(config_path)
    nodes: list[_Node] = []
    try:
        for index, (workdir, config_path) in enumerate(zip(dirs, config_paths, strict=True)):
            log_path = workdir / "kafka.log"
            process = _launch(lib, config_path, log_path, max_heap_mb)
            nodes.append(_Node(process, index + 1, ports[index][0], log_path))
    except BaseException:
        for node in nodes:
            stop_kafka(node.process.pid)
        raise
    _await_ready(nodes, {(node.node_id, node.port) for node in nodes}, deadline, timeout)
    return [
        KafkaBroker(
            bootstrap=f"{LOOPBACK}:{node.port}",
            pid=node.process.pid,
            workdir=workdir,
            log_path=node.log_path,
            config_path=config_path,
            cluster_id=cluster_id,
            sasl_bootstrap=f"{LOOPBACK}:{ports[index][2]}" if users else None,
            scram_username=admin[0] if admin else None,
            scram_password=admin[1] if admin else None,
            authorizer=authorizer,
            node_id=node.node_id,
            max_heap_mb=max_heap_mb,
        )
        for index, (node, workdir, config_path) in enumerate(
            zip(nodes, dirs, config_paths, strict=True)
        )
    ]


def relaunch_kafka(broker: KafkaBroker, *, timeout: float = 90) -> KafkaBroker:
    """Start a stopped sandbox broker again from its own workdir: the same configuration,
    ports, data and cluster id, so clients reconnect to the address they know and find their
    topics, offsets and groups. Returns the broker with its new PID."""
    if _is_our_broker(broker.pid, str(broker.config_path)):
        raise SandboxError(f"Kafka broker PID {broker.pid} is still running; stop it first")
    lib = resolve_kafka_classpath()
    deadline = time.monotonic() + timeout
    port = int(broker.bootstrap.rpartition(":")[2])
    process = _launch(lib, broker.config_path, broker.log_path, broker.max_heap_mb)
    node = _Node(process, broker.node_id, port, broker.log_path)
    _await_ready([node], {(broker.node_id, port)}, deadline, timeout)
    return replace(broker, pid=process.pid)


def restart_kafka(
    broker: KafkaBroker, *, downtime: float = 0.0, kill: bool = False, timeout: float = 90
) -> KafkaBroker:
    """Stop the broker by its PID (SIGTERM with grace, or SIGKILL with `kill`), leave it down
    for `downtime` seconds, and start it again on the same ports and data (`relaunch_kafka`)."""
    stop_kafka(broker, timeout=0 if kill else _STOP_TIMEOUT_S)
    time.sleep(downtime)
    return relaunch_kafka(broker, timeout=timeout)


def _check_scram_users(users: Mapping[str, str]) -> None:
    for name, password in users.items():
        # StorageTool splits --add-scram on commas and has no escape for them.
        if not name or "," in name or '"' in name:
            raise ValueError(f"SCRAM user name {name!r} must be non-empty without ',' or '\"'")
        if not password:
            raise ValueError(f"SCRAM user {name!r} needs a non-empty password")


def _server_properties(
    data_dir: Path,
    ports: list[int],
    *,
    node_id: int = NODE_ID,
    voters: str | None = None,
    nodes: int = 1,
) -> dict[str, str]:
    broker_port, controller_port = ports[0], ports[1]
    # Internal topics replicated on up to three nodes; from three on, a write needs two
    # in-sync copies, so one node may die without losing an acknowledged record.
    replicas = str(min(nodes, 3))
    min_isr = "2" if nodes >= 3 else "1"
    listeners = {"PLAINTEXT": broker_port, "CONTROLLER": controller_port}
    if len(ports) > 2:
        listeners["SASL_PLAINTEXT"] = ports[2]
    advertised = {name: port for name, port in listeners.items() if name != "CONTROLLER"}
    props = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        # A static voter set (every node of the cluster): formatted without --standalone.
        "controller.quorum.voters": voters or f"{node_id}@{LOOPBACK}:{controller_port}",
        "listeners": _listener_list(listeners),
        "advertised.listeners": _listener_list(advertised),
        "listener.security.protocol.map": ",".join(
            f"{name}:{'PLAINTEXT' if name == 'CONTROLLER' else name}" for name in listeners
        ),
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(data_dir),
        "offsets.topic.replication.factor": replicas,
        # A group coordinator per node, so that losing one node moves only some groups.
        "offsets.topic.num.partitions": str(nodes),
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr,
        "share.coordinator.state.topic.num.partitions": "1",
        "default.replication.factor": replicas,
        "min.insync.replicas": min_isr,
        "num.partitions": "1",
        # Tests join groups constantly; the default 3 s delay would slow every one of them.
        "group.initial.rebalance.delay.ms": "0",
        # Topics come from our own topic setup, so a typo fails instead of silently appearing.
        "auto.create.topics.enable": "false",
        # Fewer threads than the defaults: the sandbox shares small machines with the tests.
        "num.network.threads": "2",
        "num.io.threads": "2",
    }
    if "SASL_PLAINTEXT" in listeners:
        props["sasl.enabled.mechanisms"] = SCRAM_MECHANISM
        # The server side needs a login module but no credentials: users live in the metadata.
        props[f"listener.name.sasl_plaintext.{SCRAM_MECHANISM.lower()}.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        )
    return props


def _authorizer_properties(admin: str, password: str) -> dict[str, str]:
    """StandardAuthorizer with `admin` as the only super user.

    Every channel the node opens to itself must then authenticate as that admin: the
    controller listener with PLAIN (KRaft cannot check SCRAM there, its credentials live in
    the very metadata the controller serves) and the inter-broker listener with SCRAM. Left
    on PLAINTEXT they would need ANONYMOUS as a super user, which would make the PLAINTEXT
    client port a back door around every ACL.
    """
    user, secret = _jaas_quote(admin), _jaas_quote(password)
    return {
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": f"User:{admin}",
        "allow.everyone.if.no.acl.found": "false",
        "listener.security.protocol.map": (
            "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
        ),
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f"username={user} password={secret} user_{admin}={secret};"
        ),
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
        f"listener.name.sasl_plaintext.{SCRAM_MECHANISM.lower()}.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f"username={user} password={secret};"
        ),
    }


def _jaas_quote(value: str) -> str:
    # JAAS reads quoted values with java.io.StreamTokenizer, which honours backslash escapes.
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _listener_list(listeners: Mapping[str, int]) -> str:
    return ",".join(f"{name}://{LOOPBACK}:{port}" for name, port in listeners.items())


def _write_properties(path: Path, props: Mapping[str, str]) -> None:
    # Backslash is the only character Java's Properties reader would mangle in our values.
    lines = [f"{key}={value.replace(chr(92), chr(92) * 2)}" for key, value in props.items()]
    # The file may hold the admin's password (JAAS settings): readable by its owner only.
    path.touch(mode=0o600)
    path.write_text("\n".join(lines) + "\n")


def _new_cluster_id() -> str:
    # Kafka's Uuid text form: URL-safe base64 of 16 bytes without padding; like
    # Uuid.randomUuid we skip ids starting with '-', which command lines take for flags.
    while True:
        cluster_id = base64.urlsafe_b64encode(secrets.token_bytes(16)).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _scram_credential(name: str, password: str) -> str:
    # Passing the salted password keeps the clear one off the command line and frees it from
    # StorageTool's comma-splitting; SCRAM's Hi() is PBKDF2 with the hash's own output size.
    salt = secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, _SCRAM_ITERATIONS)
    return (
        f'{SCRAM_MECHANISM}=[name="{name}",iterations={_SCRAM_ITERATIONS},'
        f'salt="{base64.b64encode(salt).decode()}",'
        f'saltedpassword="{base64.b64encode(salted).decode()}"]'
    )


def _format_storage(
    lib: Path, config_path: Path, cluster_id: str, users: Mapping[str, str], timeout: float
) -> None:
    command = [
        _java(),
        *_TOOL_JVM_OPTS,
        f"-Dlog4j2.configurationFile={KAFKA_LOG4J_CONFIG.as_uri()}",
        "-cp",
        f"{lib}/*",
        "kafka.tools.StorageTool",
        "format",
        "--cluster-id",
        cluster_id,
        "--config",
        str(config_path),
    ]
    for name, password in users.items():
        command += ["--add-scram", _scram_credential(name, password)]
    _run_tool(command, "formatting the Kafka storage (kafka.tools.StorageTool)", timeout)


def _launch(lib: Path, config_path: Path, log_path: Path, max_heap_mb: int) -> SandboxProcess:
    command = [
        _java(),
        f"-Xms{min(_BROKER_MIN_HEAP_MB, max_heap_mb)}m",
        f"-Xmx{max_heap_mb}m",
        *_FAST_START_JVM_OPTS,
        f"-Dlog4j2.configurationFile={KAFKA_LOG4J_CONFIG.as_uri()}",
        "-cp",
        f"{lib}/*",
        "kafka.Kafka",
        str(config_path),
    ]
    return processes.spawn("kafka", command, log_path, cwd=config_path.parent)


@dataclass(frozen=True)
class _Node:
    process: SandboxProcess
    node_id: int
    port: int
    log_path: Path


def _await_ready(
    nodes: Sequence[_Node], expected: set[tuple[int, int]], deadline: float, timeout: float
) -> None:
    """Until every node lists every (node id, port) of `expected` as a live broker; on
    failure (a node exited, or the deadline passed) every node is stopped."""
    waiting = list(nodes)
    try:
        while waiting:
            for node in list(waiting):
                returncode = processes.exit_code(node.process)
                if returncode is not None:
                    raise _NodeFailed(
                        node, f"Kafka exited with code {returncode} before it was ready"
                    )
                if expected <= _metadata_brokers_at(node.port):
                    waiting.remove(node)
            if not waiting:
                return
            if time.monotonic() >= deadline:
                raise _NodeFailed(
                    waiting[0],
                    f"Kafka did not answer a metadata request on {LOOPBACK}:{waiting[0].port} "
                    f"listing brokers {sorted(node_id for node_id, _ in expected)} "
                    f"within {timeout:.0f}s",
                )
            time.sleep(_POLL_INTERVAL_S)
    except BaseException as exc:
        for node in nodes:
            stop_kafka(node.process.pid)
        if isinstance(exc, _NodeFailed):
            raise SandboxError(f"{exc}\n{log_tail(exc.node.log_path, _LOG_TAIL_LINES)}") from exc
        raise


class _NodeFailed(Exception):
    def __init__(self, node: _Node, message: str) -> None:
        super().__init__(message)
        self.node = node


# --- readiness probe: a real Metadata request over the Kafka wire protocol -------------------

_API_METADATA = 3
_API_VERSIONS = 18
# Versions 1-8 share the non-flexible encoding parsed below.
_METADATA_VERSIONS = range(1, 9)


def _metadata_brokers_at(port: int) -> set[tuple[int, int]]:
    """The (node id, port) of each live broker the node at `port` lists in a Metadata
    response (empty while it does not answer): a broker lists itself once it serves
    clients."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=_PROBE_TIMEOUT_S) as sock:
            version = _pick_metadata_version(_request(sock, _API_VERSIONS, 0, b""))
            if version is None:
                return set()
            body = struct.pack(">i", 0)  # an empty topic list: brokers only
            if version >= 4:
                body += b"\x00"  # allow_auto_topic_creation
            if version >= 8:
                body += b"\x00\x00"  # include cluster/topic authorized operations
            return _metadata_brokers(_request(sock, _API_METADATA, version, body), version)
    except (OSError, EOFError, struct.error):
        return set()


def _request(sock: socket.socket, api_key: int, version: int, body: bytes) -> bytes:
    client_id = b"trainhub-sandbox"
    header = struct.pack(">hhih", api_key, version, 1, len(client_id)) + client_id
    sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
    return _recv_exactly(sock, size)[4:]  # drop the correlation id


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise EOFError("connection closed mid-response")
        chunks += chunk
    return bytes(chunks)


def _pick_metadata_version(api_versions: bytes) -> int | None:
    error_code, count = struct.unpack_from(">hi", api_versions, 0)
    if error_code != 0:
        return None
    for index in range(count):
        api_key, low, high = struct.unpack_from(">hhh", api_versions, 6 + 6 * index)
        if api_key == _API_METADATA:
            usable = [v for v in _METADATA_VERSIONS if low <= v <= high]
            return usable[0] if usable else None
    return None


def _metadata_brokers(response: bytes, version: int) -> set[tuple[int, int]]:
    offset = 4 if version >= 3 else 0  # throttle_time_ms
    (count,) = struct.unpack_from(">i", response, offset)
    offset += 4
    brokers: set[tuple[int, int]] = set()
    for _ in range(count):
        node_id, host_len = struct.unpack_from(">ih", response, offset)
        offset += 6 + host_len
        port, rack_len = struct.unpack_from(">ih", response, offset)
        offset += 6 + max(rack_len, 0)
        brokers.add((node_id, port))
    return brokers


# --- stop -------------------------------------------------------------------------------------


def stop_kafka(broker_or_pid: KafkaBroker | int, *, timeout: float = _STOP_TIMEOUT_S) -> None:
    """Stop a sandbox broker by its PID: SIGTERM, up to `timeout` s of grace, then SIGKILL
    (`timeout=0`: SIGKILL at once, as a crash would).

    A PID whose command line shows it is no longer our broker (it exited and the number was
    reused) is left alone: the broker is already gone.
    """
    if isinstance(broker_or_pid, KafkaBroker):
        pid, expected = broker_or_pid.pid, str(broker_or_pid.config_path)
    else:
        pid, expected = broker_or_pid, "kafka.Kafka"
    if not _is_our_broker(pid, expected):
        return
    processes.stop(pid, grace=timeout, name="Kafka broker")


def _is_our_broker(pid: int, expected: str) -> bool:
    """Whether `pid` runs and is still the broker its command line names."""
    return processes.is_running(pid) and processes.command_line_has(pid, expected)
