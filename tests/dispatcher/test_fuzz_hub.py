"""Bad input never takes the hub down: over a thousand malformed or hostile events, generated
by hypothesis, go into one running system (hub, two sim clusters, in-memory bus) while
valid jobs are submitted in between.

Every bad event must land in the dead-letter topic or give its job a Rejected status with a
reason; events that are merely odd (a status for a job nobody knows, a duplicated
submission) must change nothing; and every valid job must succeed. What each event should
cause is worked out from the contract (the codec and the job schema), not from the hub.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from bus.base import Record
from bus.dead_letters import dead_letter_reason
from bus.memory import MemoryBus
from dispatcher.demand import profile_job
from schemas.cluster import ClusterSnapshot
from schemas.codec import decode_event, encode_event
from schemas.errors import EventDecodeError, JobInvalid
from schemas.events import (
    CloudEvent,
    EventType,
    JobHandedBack,
    JobRef,
    JobStatusUpdate,
    JobSubmitted,
)
from schemas.job_parsing import job_uid_of, parse_job
from schemas.kubeflow import derive_job_uid
from schemas.status import JobPhase
from trainhub.embedded import Embedded, EmbeddedOptions
from trainhub.producer import submit_document
from workers.cluster_spec import parse_cluster_spec

ADVERSARIAL_EVENTS = 1_100
VALID_EVERY = 40
FINISH_WITHIN = 50.0
WORKER = ("spec", "jaxReplicaSpecs", "Worker")
POD = (*WORKER, "template", "spec")
CONTAINER = (*POD, "containers", 0)


def job_document(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "JAXJob",
        "metadata": {
            "name": name,
            "annotations": {"trainhub.io/sim-duration": "0.2s"},
        },
        "spec": {
            "runPolicy": {"managedBy": "trainhub.io/dispatcher"},
            "jaxReplicaSpecs": {
                "Worker": {
                    "replicas": 2,
                    "restartPolicy": "Never",
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "jax",
                                    "image": "example/jax:1",
                                    "command": ["python", "-c", "pass"],
                                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                                }
                            ]
                        }
                    },
                }
            },
        },
    }


# -- what to send -----------------------------------------------------------------------------


@dataclass
class Fuzz:
    """One hostile record; names, ids and keys are filled in when it is sent."""

    kind: str
    topic: str = "jobs"
    event_type: str | None = EventType.JOB_SUBMITTED
    data: Any = None
    """The event data (a job document for submissions), or None with `raw_body`."""
    raw_body: bytes | None = None
    headers: dict[str, bytes | None] = field(default_factory=dict)
    """Header changes to a well-formed envelope (None removes one)."""
    garbage_headers: list[tuple[str, bytes]] | None = None
    """Replaces the envelope's headers entirely."""
    keeps_name: bool = False
    """The document's metadata.name is part of the mutation: do not make it unique."""
    repeat: bool = False
    """Send the previous valid submission again, same event id and key."""


json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
paths = st.sampled_from(
    [
        ("apiVersion",),
        ("kind",),
        ("metadata",),
        ("metadata", "name"),
        ("metadata", "namespace"),
        ("metadata", "uid"),
        ("metadata", "labels"),
        ("spec",),
        ("spec", "runPolicy"),
        ("spec", "runPolicy", "backoffLimit"),
        ("spec", "runPolicy", "managedBy"),
        ("spec", "runPolicy", "suspend"),
        ("spec", "runPolicy", "schedulingPolicy"),
        ("spec", "runPolicy", "schedulingPolicy", "queue"),
        ("spec", "jaxReplicaSpecs"),
        WORKER,
        (*WORKER, "replicas"),
        (*WORKER, "restartPolicy"),
        (*WORKER, "template"),
        POD,
        (*POD, "containers"),
        CONTAINER,
        (*CONTAINER, "name"),
        (*CONTAINER, "image"),
        (*CONTAINER, "command"),
        (*CONTAINER, "env"),
        (*CONTAINER, "ports"),
        (*CONTAINER, "resources"),
        (*CONTAINER, "resources", "requests"),
        (*CONTAINER, "resources", "requests", "cpu"),
        (*CONTAINER, "resources", "requests", "memory"),
        (*POD, "nodeSelector"),
        (*POD, "tolerations"),
        (*POD, "affinity"),
        (*POD, "restartPolicy"),
    ]
)


def put(document: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    """Set `path` to `value` where the document (maybe mutated already) still has room."""
    target: Any = document
    for step in path:
        last = step is path[-1]
        if isinstance(target, dict) and isinstance(step, str):
            if last:
                target[step] = value
                return
            target = target.setdefault(step, {})
        elif isinstance(target, list) and isinstance(step, int) and step < len(target):
            if last:
                target[step] = value
                return
            target = target[step]
        else:
            return


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"x": value}
    return value


@st.composite
def job_mutations(draw: st.DrawFn) -> Fuzz:
    document = job_document("placeholder")
    fuzz = Fuzz("job", data=document)
    for _ in range(draw(st.integers(1, 3))):
        choice = draw(st.integers(0, 11))
        if choice <= 2:  # wrong types and odd values anywhere
            path = draw(paths)
            put(document, path, draw(json_values))
            fuzz.keeps_name |= path[:2] == ("metadata", "name") or path == ("metadata",)
        elif choice == 3:  # huge strings
            size = draw(st.sampled_from([300, 70_000, 1_500_000]))
            where = draw(
                st.sampled_from(
                    [("metadata", "name"), (*CONTAINER, "image"), ("metadata", "annotations", "x")]
                )
            )
            put(document, where, draw(st.sampled_from("aZ9-é")) * size)
            fuzz.keeps_name |= where == ("metadata", "name")
        elif choice == 4:  # nesting: deep where fields are open, deeper where they are not
            if draw(st.booleans()):
                put(document, (*POD, "x-extra"), nested(draw(st.integers(1, 150))))
            else:
                put(document, ("spec", "bogus"), nested(draw(st.integers(1, 800))))
        elif choice == 5:  # unknown fields, strict places and open ones
            where = draw(
                st.sampled_from([("spec",), ("spec", "runPolicy"), WORKER, POD, CONTAINER])
            )
            put(document, (*where, draw(st.sampled_from(["bogus", "x", "ünïcode"]))), 1)
        elif choice == 6:  # negative, enormous, fractional and malformed quantities
            quantity = draw(
                st.sampled_from(
                    [
                        "-1",
                        "1e30",
                        "9Ei",
                        "8Ei",
                        "NaN",
                        "1e-10",
                        "1.5.5",
                        "\uff11",  # a full-width digit one
                        3.5,
                        -2,
                        10**30,
                        True,
                    ]
                )
            )
            put(
                document,
                (
                    *CONTAINER,
                    "resources",
                    "requests",
                    draw(st.sampled_from(["cpu", "nvidia.com/gpu"])),
                ),
                quantity,
            )
        elif choice == 7:  # invalid names and namespaces
            name = draw(st.sampled_from(["UPPER", "under_score", "-lead", "a" * 64, "", "ok.dot"]))
            put(document, ("metadata", draw(st.sampled_from(["name", "namespace"]))), name)
            fuzz.keeps_name = True
        elif choice == 8:  # host privileges no cluster allows
            put(document, (*POD, draw(st.sampled_from(["hostNetwork", "hostPID"]))), True)
        elif choice == 9:  # malformed constraints placement must refuse
            put(document, (*POD, "affinity"), {"nodeAffinity": draw(json_values)})
            put(
                document,
                ("metadata", "annotations", "trainhub.io/cluster-selector"),
                draw(st.sampled_from(["region=(eu", "a in ()", "region=eu", "!", "=x"])),
            )
        elif choice == 10:  # someone else's job
            put(document, ("spec", "runPolicy", "managedBy"), draw(st.text(max_size=20)))
        else:  # replicas out of range
            put(document, (*WORKER, "replicas"), draw(st.sampled_from([-3, 10_001, 0, 10**12])))
    return fuzz


@st.composite
def envelopes(draw: st.DrawFn) -> Fuzz:
    """A job submission whose CloudEvents envelope is wrong."""
    change: dict[str, bytes | None] = draw(
        st.sampled_from(
            [
                {"ce_specversion": b"0.3"},
                {"ce_type": b"io.trainhub.job.exploded"},
                {"ce_type": b"com.example.other"},
                {"ce_id": b"i" * 300},
                {"ce_id": None},
                {"ce_source": None},
                {"ce_source": b""},
                {"ce_time": b"yesterday"},
                {"ce_type": b"\xff\xfe"},
                {"content-type": b"\xc3\x28"},
            ]
        )
    )
    return Fuzz("envelope", data=job_document("placeholder"), headers=change)


@st.composite
def bodies(draw: st.DrawFn) -> Fuzz:
    """A well-formed envelope around a body that is not a JSON object of the right shape."""
    body = draw(
        st.sampled_from(
            [
                b"",
                b"not json",
                b"[1, 2, 3]",
                b'"a string"',
                b"42",
                b"{",
                b'{"job": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                b'{"job": "nope"}',
                b'{"job": {}, "extra": 1}',
                b"{}",
                b'{"job": {"kind": "MXJob", "metadata": {"name": "mx"}}}',
                b"\xff" * 10,
                b'{"job": '
                + json.dumps({"metadata": {"name": "big"}, "x": "y" * 4_300_000}).encode()
                + b"}",
            ]
        )
    )
    return Fuzz("body", raw_body=body)


@st.composite
def garbage(draw: st.DrawFn) -> Fuzz:
    headers = draw(
        st.lists(
            st.tuples(
                st.sampled_from(
                    ["ce_id", "ce_type", "ce_source", "ce_specversion", "x", "ce_time"]
                ),
                st.binary(max_size=40),
            ),
            max_size=5,
        )
    )
    topic = draw(st.sampled_from(["jobs", "jobs", "status", "clusters"]))
    return Fuzz(
        "garbage", topic=topic, raw_body=draw(st.binary(max_size=200)), garbage_headers=headers
    )


@st.composite
def requests(draw: st.DrawFn) -> Fuzz:
    """Other event types on the jobs topic: unexpected ones, bad references, unknown jobs."""
    event_type = draw(
        st.sampled_from(
            [
                EventType.JOB_DELETED,
                EventType.JOB_SUSPENDED,
                EventType.JOB_RESUMED,
                EventType.JOB_ASSIGNED,
                EventType.JOB_STATUS,
                EventType.CLUSTER_HEARTBEAT,
            ]
        )
    )
    data = draw(
        st.sampled_from([{}, {"uid": ""}, {"uid": "nobody-knows"}, {"uid": 7}, {"uid": "x" * 200}])
    )
    return Fuzz("request", event_type=event_type, data=data)


@st.composite
def statuses(draw: st.DrawFn) -> Fuzz:
    """Garbage, out-of-order and foreign reports on a cluster's reports topic."""
    choice = draw(st.integers(0, 4))
    control = derive_job_uid("default", f"ctl-{draw(st.integers(0, 30))}")
    if choice == 0:
        data: Any = draw(json_values)
        data = data if isinstance(data, dict) else {"value": data}
        return Fuzz("status", topic="status", event_type=EventType.JOB_STATUS, data=data)
    if choice == 1:  # an update from a placement that is not the current one
        update = JobStatusUpdate(
            uid=control,
            phase=draw(st.sampled_from(list(JobPhase))),
            cluster=draw(st.sampled_from(["east", "west", "nowhere"])),
            attempt=draw(st.sampled_from([0, 7, 99])),
            sequence=draw(st.integers(0, 10**6)),
        )
        return Fuzz(
            "status",
            topic="status",
            event_type=EventType.JOB_STATUS,
            data=update.model_dump(mode="json"),
        )
    if choice == 2:  # for jobs nobody submitted
        update = JobStatusUpdate(
            uid=f"ghost-{draw(st.integers(0, 99))}", phase=JobPhase.RUNNING, attempt=1, sequence=3
        )
        return Fuzz(
            "status",
            topic="status",
            event_type=EventType.JOB_STATUS,
            data=update.model_dump(mode="json"),
        )
    if choice == 3:
        data = draw(
            st.sampled_from([{}, {"uid": "u", "cluster": "east", "attempt": 0, "reason": "x"}])
        )
        if draw(st.booleans()):
            data = JobHandedBack(uid="ghost", cluster="east", attempt=3, reason="gone").model_dump()
        return Fuzz("status", topic="status", event_type=EventType.JOB_HANDED_BACK, data=data)
    return Fuzz("status", topic="status", event_type=EventType.JOB_SUBMITTED, data={"job": {}})


@st.composite
def heartbeats(draw: st.DrawFn) -> Fuzz:
    """Heartbeats no registry may accept."""
    data = draw(
        st.sampled_from(
            [
                {"name": "Bad_Name", "nodes": []},
                {"name": "east", "nodes": "none"},
                {"name": "east", "nodes": [{"name": "n", "allocatable": {"cpu": "-4"}}]},
                {"name": "west", "nodes": [{"name": "n", "allocatable": {"cpu": "1e40"}}]},
                {"name": "west", "sequence": -1},
                {"name": "east", "weight": 1000},
                {"name": "east", "policy": {"allowEverything": True}},
                {},
            ]
        )
    )
    event_type = draw(st.sampled_from([EventType.CLUSTER_HEARTBEAT, EventType.JOB_STATUS]))
    return Fuzz("heartbeat", topic="clusters", event_type=event_type, data=data)


KINDS = {
    "job": (36, job_mutations()),
    "envelope": (8, envelopes()),
    "body": (8, bodies()),
    "garbage": (12, garbage()),
    "request": (8, requests()),
    "status": (12, statuses()),
    "heartbeat": (8, heartbeats()),
    "repeat": (8, st.just(Fuzz("repeat", repeat=True))),
}


@st.composite
def adversarial(draw: st.DrawFn) -> Fuzz:
    """One hostile record, of each kind in about its share."""
    kind = draw(st.sampled_from([k for k, (share, _) in KINDS.items() for _ in range(share)]))
    fuzz = draw(KINDS[kind][1])
    return Fuzz("repeat", repeat=True) if fuzz.repeat else fuzz


def generate(count: int) -> list[Fuzz]:
    found: list[Fuzz] = []

    @settings(
        max_examples=count,
        database=None,
        derandomize=True,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(adversarial())
    def collect(item: Fuzz) -> None:
        found.append(item)

    while len(found) < count:
        collect()
    return found[:count]


# -- what each record must cause --------------------------------------------------------------


@dataclass
class Sent:
    index: int
    fuzz: Fuzz
    key: bytes
    outcome: str
    """dead-letter | invalid | finished | ignored"""
    uid: str | None = None


def envelope(event_type: str, event_id: str, data: dict[str, Any]) -> list[tuple[str, bytes]]:
    headers, _ = encode_event(CloudEvent(id=event_id, source="fuzz", type=event_type, data=data))
    return headers


def outcome_of(topic: str, headers: list[tuple[str, bytes]], body: bytes) -> tuple[str, str | None]:
    """What the contract says a record must cause (the oracle)."""
    try:
        event = decode_event(headers, body)
    except EventDecodeError:
        return "dead-letter", None
    if topic in ("status", "clusters"):
        # Both go on east's reports topic, as east's worker (or whoever has its credentials).
        model: dict[str, type[BaseModel]] = {
            EventType.JOB_STATUS: JobStatusUpdate,
            EventType.JOB_HANDED_BACK: JobHandedBack,
        }
        if event.type == EventType.CLUSTER_HEARTBEAT:
            try:
                ClusterSnapshot.model_validate(event.data)
            except ValidationError:
                return "dead-letter", None
            raise AssertionError("the generator never sends a valid heartbeat")
        if event.type not in model:
            return "dead-letter", None
        try:
            report = event.data_as(model[event.type])
        except ValidationError:
            return "dead-letter", None
        if getattr(report, "cluster", None) != "east":
            return "dead-letter", None  # speaks for another cluster: forged
        return "ignored", None
    if event.type in (EventType.JOB_DELETED, EventType.JOB_SUSPENDED, EventType.JOB_RESUMED):
        try:
            event.data_as(JobRef)
        except ValidationError:
            return "dead-letter", None
        # The generator's requests name no job it submitted: a request for a job the hub
        # does not know is refused with the reason.
        return "dead-letter", None
    if event.type != EventType.JOB_SUBMITTED:
        return "dead-letter", None
    try:
        document = event.data_as(JobSubmitted).job
    except ValidationError:
        return "dead-letter", None
    try:
        job = parse_job(document)
    except JobInvalid:
        return "invalid", job_uid_of(document)
    except TypeError:
        # parse_job trips over an unhashable `kind` (a list or mapping): the hub still
        # dead-letters the event, without a Rejected status (reported to the hub's owner).
        return "dead-letter", None
    if job.run_policy.managed_by_trainhub and profile_job(job).problem is not None:
        return "invalid", job.uid  # malformed constraints: invalid whatever the clusters
    if job.run_policy.suspend:
        return "ignored", job.uid  # held by the hub until someone resumes it
    return "finished", job.uid


class Trace:
    """Reads what the system wrote: final statuses per job and dead letters per key."""

    def __init__(self, bus: MemoryBus, system: Embedded) -> None:
        self.bus, self.system = bus, system
        self.final: dict[str, JobStatusUpdate] = {}
        self.rejected: dict[str, str] = {}
        self.dead: dict[bytes, str] = {}
        self._seen_status = 0
        self._seen_dead = 0

    def read(self) -> None:
        statuses = self.bus.records(self.system.topics.status)
        for record in statuses[self._seen_status :]:
            update = self._status(record)
            if update is not None and update.phase.finished:
                self.final.setdefault(update.uid, update)
                if update.phase == JobPhase.REJECTED:
                    self.rejected[update.uid] = update.message or ""
        self._seen_status = len(statuses)
        dead = self.bus.records(self.system.topics.dead_letters)
        for record in dead[self._seen_dead :]:
            self.dead[record.key or b""] = dead_letter_reason(record) or ""
        self._seen_dead = len(dead)

    def _status(self, record: Record) -> JobStatusUpdate | None:
        try:
            event = decode_event(record.headers, record.value)
            if event.type != EventType.JOB_STATUS or event.source == "fuzz":
                return None  # forged updates are ours, not the system's
            return event.data_as(JobStatusUpdate)
        except (EventDecodeError, ValidationError):
            return None


def unmet(sent: Sent, trace: Trace, repeats: Counter[bytes]) -> str | None:
    """Why `sent` has not had its effect (yet); None once it has."""
    if sent.outcome == "dead-letter":
        return None if sent.key in trace.dead else "not dead-lettered"
    if sent.outcome == "invalid":
        if sent.key not in trace.dead:
            return "invalid job not dead-lettered"
        encodable = sent.uid is not None and sent.uid.isprintable() and sent.uid.isascii()
        if encodable and not trace.rejected.get(sent.uid or ""):
            return "invalid job has no Rejected status with a reason"
        return None
    if sent.outcome == "finished":
        if sent.key in trace.dead:
            return f"valid job dead-lettered: {trace.dead[sent.key]}"
        final = trace.final.get(sent.uid or "")
        if final is None:
            return "valid job never finished"
        if final.phase == JobPhase.REJECTED and not final.message:
            return "rejected without a reason"
        return None
    return "dead-lettered" if sent.key in trace.dead and not repeats[sent.key] else None


# -- the test ---------------------------------------------------------------------------------


async def test_hub_survives_a_thousand_hostile_events_and_valid_jobs_still_succeed() -> None:
    plan = generate(ADVERSARIAL_EVENTS)
    options = EmbeddedOptions(
        clusters=[
            parse_cluster_spec("east:cpu=4,memory=8Gi,nodes=2"),
            parse_cluster_spec("west:cpu=8,memory=16Gi"),
        ],
        backend="sim",
        heartbeat_interval=0.2,
        sim_time_scale=0.1,
    )
    sent: list[Sent] = []
    controls: list[str] = []
    repeats: Counter[bytes] = Counter()
    last_valid: tuple[bytes, list[tuple[str, bytes]], bytes] | None = None
    async with Embedded(options) as system:
        bus = system.bus
        assert isinstance(bus, MemoryBus)
        topics = {
            "jobs": system.topics.jobs,
            "status": system.topics.reports("east"),
            "clusters": system.topics.reports("east"),
        }
        for index, fuzz in enumerate(plan):
            if index % VALID_EVERY == 0:
                controls.append(
                    await submit_document(bus, system.topics, job_document(f"ctl-{len(controls)}"))
                )
            if fuzz.repeat:
                if last_valid is None:
                    continue
                key, headers, body = last_valid
                await bus.publish(topics["jobs"], body, key=key, headers=tuple(headers))
                repeats[key] += 1
                continue
            key = f"fuzz-{index}".encode()
            data = fuzz.data
            if (
                isinstance(data, dict)
                and fuzz.event_type == EventType.JOB_SUBMITTED
                and fuzz.kind in ("job", "envelope")
            ):
                if not fuzz.keeps_name and isinstance(data.get("metadata"), dict):
                    data["metadata"]["name"] = f"fz{index}"
                data = {"job": data}
            headers = envelope(fuzz.event_type or EventType.JOB_SUBMITTED, f"fuzz-{index}", {})
            for name, value in fuzz.headers.items():
                headers = [(k, v) for k, v in headers if k != name]
                if value is not None:
                    headers.append((name, value))
            if fuzz.garbage_headers is not None:
                headers = list(fuzz.garbage_headers)
            body = fuzz.raw_body if fuzz.raw_body is not None else json.dumps(data).encode()
            outcome, uid = outcome_of(fuzz.topic, headers, body)
            sent.append(Sent(index, fuzz, key, outcome, uid))
            await bus.publish(topics[fuzz.topic], body, key=key, headers=tuple(headers))
            if outcome == "finished":
                last_valid = (key, headers, body)
            if index % 25 == 0:
                await asyncio.sleep(0)
        trace = Trace(bus, system)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FINISH_WITHIN
        while True:
            await asyncio.sleep(0.25)
            trace.read()
            missing = {s.index: why for s in sent if (why := unmet(s, trace, repeats))}
            waiting = [c for c in controls if c not in trace.final]
            crashed = system.hub.crashed
            if (
                (not missing and not waiting)
                or loop.time() > deadline
                or (crashed and crashed.done())
            ):
                break
        hub_crash = system.hub.crashed
        assert hub_crash is None or not hub_crash.done(), f"the hub crashed: {hub_crash.result()!r}"
        for worker in system.workers:
            assert worker.crashed is None or not worker.crashed.done(), f"{worker.cluster} crashed"
        ran_twice = [
            uid
            for uid in {s.uid for s in sent if s.outcome == "finished" and s.uid}
            if sum(1 for w in system.workers if uid in w.runs) > 1
        ]
    kinds = Counter(s.fuzz.kind for s in sent)
    outcomes = Counter(s.outcome for s in sent)
    assert len(sent) + sum(repeats.values()) >= 1_000, (kinds, outcomes)
    unexplained = [
        (s.index, s.fuzz.kind, s.uid, missing[s.index], json.dumps(s.fuzz.data)[:300])
        for s in sent
        if s.index in missing
    ]
    assert not unexplained, unexplained[:10]
    assert not waiting, f"valid jobs that did not finish: {waiting}"
    assert {trace.final[c].phase for c in controls} == {JobPhase.SUCCEEDED}
    assert not ran_twice
    # The mix really is hostile: most records are refused, and some of each kind were sent.
    assert outcomes["dead-letter"] + outcomes["invalid"] > len(sent) / 2, outcomes
    assert set(kinds) >= {"job", "envelope", "body", "garbage", "request", "status", "heartbeat"}


# -- bugs the fuzzing found, each reproduced on its own ---------------------------------------


async def _hub_survives(body: bytes) -> None:
    options = EmbeddedOptions(
        clusters=[parse_cluster_spec("east:cpu=4,memory=8Gi")],
        backend="sim",
        heartbeat_interval=0.2,
    )
    async with Embedded(options) as system:
        headers = envelope(EventType.JOB_SUBMITTED, "bug", {})
        await system.bus.publish(system.topics.jobs, body, key=b"bug", headers=tuple(headers))
        uid = await system.submit(job_document("after-the-bug"))
        try:
            final = await system.wait_finished([uid], timeout=15)
        finally:
            crashed = system.hub.crashed
            assert crashed is None or not crashed.done(), f"the hub crashed: {crashed.result()!r}"
        assert final[uid].phase == JobPhase.SUCCEEDED


async def test_an_integer_of_five_thousand_digits_is_dead_lettered() -> None:
    await _hub_survives(b'{"job": {"metadata": {"name": "big"}, "x": ' + b"9" * 5000 + b"}}")


async def test_a_job_nested_too_deep_to_serialize_is_refused() -> None:
    document = job_document("deep")
    put(document, (*POD, "x-extra"), nested(300))
    await _hub_survives(json.dumps({"job": document}).encode())
