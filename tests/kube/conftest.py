"""Two real member clusters (etcd, kube-apiserver, kube-scheduler, kwok) for the whole test
session, built from Go modules on first use (~12 min, then cached) and stopped at the end."""

from __future__ import annotations

import shutil
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.kube.sandbox_access import worker_backend
from trainhub_sandbox.errors import SandboxError
from trainhub_sandbox.kube_build import build_controller_manager, build_kube_binaries, kube_bin_dir
from trainhub_sandbox.kube_cluster import (
    KubeSandbox,
    KwokNodeGroup,
    MemberCluster,
    MemberClusterPlan,
    start_member_clusters,
    stop_member_clusters,
)
from trainhub_sandbox.scheduler_plugins import build_scheduler_plugins
from trainhub_sandbox.training_operator import build_training_operator
from workers.backends.kube import KubeBackend

_BINARIES = ("etcd", "kube-apiserver", "kube-scheduler", "kwok")
_BUILD_ERROR = pytest.StashKey[SandboxError]()

# east's nodes are small; west's are big enough for gangs east can never hold. west serves
# watches straight from etcd (no watch cache), so that compacting etcd really expires them.
EAST = MemberClusterPlan("east", pools=(KwokNodeGroup(count=2, cpu="4", memory="8Gi"),))
WEST = MemberClusterPlan(
    "west",
    pools=(KwokNodeGroup(count=2, cpu="16", memory="64Gi", labels={"example.com/size": "big"}),),
    apiserver_args=("--watch-cache=false",),
)


def _binaries_cached() -> bool:
    return all((kube_bin_dir() / name).is_file() for name in _BINARIES)


def _missing_go() -> bool:
    return shutil.which("go") is None and not _binaries_cached()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the binaries before any test runs: a first build takes longer than the per-test
    timeout, which would otherwise count it against the first kube test's setup."""
    used = [set(getattr(item, "fixturenames", ())) for item in session.items]
    sandboxes = {"kube_sandbox", "fleet_sandbox", "gang_sandbox", "operator_sandbox"}
    sandboxes |= {"conformance_sandbox", "crd_sandbox"}
    wanted = any(sandboxes & names for names in used)
    gangs = any("gang_sandbox" in names for names in used)
    operators = any(
        names & {"operator_sandbox", "conformance_sandbox", "crd_sandbox"} for names in used
    )
    collectors = any("crd_sandbox" in names for names in used)  # its garbage collector
    if not wanted or session.config.option.collectonly or _missing_go():
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    started = time.monotonic()
    if reporter is not None and not _binaries_cached():
        reporter.write_line("building the Kubernetes sandbox binaries (first time: ~12 min)")
    try:
        build_kube_binaries()
        if gangs:
            build_scheduler_plugins()
        if operators:
            build_training_operator()
        if collectors:
            build_controller_manager()
    except SandboxError as error:
        session.config.stash[_BUILD_ERROR] = error
        return
    if reporter is not None and time.monotonic() - started > 5:
        reporter.write_line(f"sandbox binaries built in {time.monotonic() - started:.0f}s")


@pytest.fixture(scope="session")
def kube_sandbox(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeSandbox]:
    if _missing_go():
        pytest.skip("the Kubernetes sandbox is built with `go`, which is not on PATH")
    build_error = request.config.stash.get(_BUILD_ERROR, None)
    if build_error is not None:
        pytest.fail(f"building the sandbox binaries failed: {build_error}", pytrace=False)
    binaries = build_kube_binaries()  # cached by now: checks the version stamps only
    workdir: Path = tmp_path_factory.mktemp("kube-sandbox")
    sandbox = start_member_clusters([EAST, WEST], workdir, binaries=binaries)
    try:
        yield sandbox
    finally:
        stop_member_clusters(sandbox)


@pytest.fixture
def east(kube_sandbox: KubeSandbox) -> MemberCluster:
    return kube_sandbox.clusters["east"]


@pytest.fixture
def west(kube_sandbox: KubeSandbox) -> MemberCluster:
    return kube_sandbox.clusters["west"]


@pytest.fixture
async def east_backend(east: MemberCluster) -> AsyncIterator[KubeBackend]:
    backend = worker_backend(east)
    await backend.start()
    try:
        yield backend
    finally:
        await backend.close()


# --- three clusters of different capacity, for the multi-cluster tests on Kafka -------------

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"

# small holds little; large has big CPU nodes and one node of A100s (GPUs, but of another
# model than the H100s); h100 has the only H100 nodes, with CPU nodes too small for large's
# biggest pods.
SMALL = MemberClusterPlan("small", pools=(KwokNodeGroup(count=2, cpu="4", memory="8Gi"),))
LARGE = MemberClusterPlan(
    "large",
    pools=(
        KwokNodeGroup(count=2, cpu="16", memory="64Gi"),
        KwokNodeGroup(
            count=1, cpu="8", memory="64Gi", gpus=8, labels={GPU_PRODUCT_LABEL: A100}, name="a100"
        ),
    ),
)
H100_CLUSTER = MemberClusterPlan(
    "h100",
    pools=(
        KwokNodeGroup(
            count=2,
            cpu="8",
            memory="64Gi",
            gpus=4,
            labels={GPU_PRODUCT_LABEL: H100, "nvidia.com/gpu.count": "4"},
            name="gpu",
        ),
    ),
)


@pytest.fixture(scope="session")
def fleet_sandbox(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeSandbox]:
    """small, large and h100: three member clusters started once per session."""
    if _missing_go():
        pytest.skip("the Kubernetes sandbox is built with `go`, which is not on PATH")
    build_error = request.config.stash.get(_BUILD_ERROR, None)
    if build_error is not None:
        pytest.fail(f"building the sandbox binaries failed: {build_error}", pytrace=False)
    binaries = build_kube_binaries()
    workdir: Path = tmp_path_factory.mktemp("kube-fleet")
    sandbox = start_member_clusters([SMALL, LARGE, H100_CLUSTER], workdir, binaries=binaries)
    try:
        yield sandbox
    finally:
        stop_member_clusters(sandbox)
