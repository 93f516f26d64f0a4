"""trainhub's initializer program: each STORAGE_URI scheme fetched into the workspace, and
the failures that name the URI (tests serve their own files on 127.0.0.1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.served_files import closed_port_url, serve_files
from workers.initializer.downloading import Retries
from workers.initializer.fetching import fetch
from workers.initializer.huggingface import repo_id
from workers.initializer.storage_uri import (
    PVC_MOUNT_ENV,
    WORKSPACE_ENV,
    StorageUriError,
    parse_storage_uri,
    upstream_initializer,
)

ROOT = Path(__file__).resolve().parents[2]
FAST = Retries(timeout=5, attempts=3, backoff=0)


def _env(workspace: Path, **more: str) -> dict[str, str]:
    return {WORKSPACE_ENV: str(workspace), **more}


def test_the_schemes_parse_as_written() -> None:
    pvc = parse_storage_uri("pvc://team-data/sets/digits")
    assert (pvc.scheme, pvc.claim, pvc.location) == ("pvc", "team-data", "sets/digits")
    assert parse_storage_uri("file:///data/x.csv").location == "/data/x.csv"
    assert parse_storage_uri("/data/x.csv").scheme == "file"
    assert parse_storage_uri("https://h/x.tar.gz").scheme == "http"
    assert parse_storage_uri("hf://tatsu-lab/alpaca").location == "tatsu-lab/alpaca"
    for wrong, words in (
        ("s3://bucket/key", "unsupported scheme 's3'"),
        ("pvc://Bad_Claim/x", "PersistentVolumeClaim name"),
        ("pvc://data/../etc", "inside the claim"),
        ("file://elsewhere/x", "not on host 'elsewhere'"),
        ("hf://", "names no repository"),
    ):
        with pytest.raises(StorageUriError, match=words) as caught:
            parse_storage_uri(wrong)
        assert repr(wrong) in str(caught.value)


def test_upstream_images_are_known_by_name_whatever_the_tag() -> None:
    assert upstream_initializer("ghcr.io/kubeflow/trainer/dataset-initializer") == "dataset"
    assert upstream_initializer("ghcr.io/kubeflow/trainer/model-initializer:v2.0.0") == "model"
    digest = "@sha256:" + "a" * 64
    assert upstream_initializer(f"ghcr.io/kubeflow/trainer/model-initializer{digest}") == "model"
    assert upstream_initializer("ghcr.io/kubeflow/trainer/dataset-initializer-x") is None
    assert upstream_initializer("example/dataset-initializer") is None


def test_a_local_directory_is_copied_into_the_dataset_dir(tmp_path: Path) -> None:
    source = tmp_path / "digits"
    (source / "train").mkdir(parents=True)
    (source / "train" / "part-0.csv").write_text("1,2\n")
    workspace = tmp_path / "ws"
    for uri in (str(source), source.as_uri()):
        assert fetch("dataset", uri, _env(workspace)) == workspace / "dataset"
        assert (workspace / "dataset" / "train" / "part-0.csv").read_text() == "1,2\n"


def test_a_local_file_keeps_its_name_under_the_model_dir(tmp_path: Path) -> None:
    (tmp_path / "weights.safetensors").write_bytes(b"\x00\x01")
    fetch("model", str(tmp_path / "weights.safetensors"), _env(tmp_path / "ws"))
    assert (tmp_path / "ws" / "model" / "weights.safetensors").read_bytes() == b"\x00\x01"


def test_a_missing_path_names_the_uri(tmp_path: Path) -> None:
    with pytest.raises(StorageUriError, match=r"cannot fetch file:///nowhere/x: .* not exist"):
        fetch("dataset", "file:///nowhere/x", _env(tmp_path))


def test_a_pvc_path_is_read_where_the_claim_is_mounted(tmp_path: Path) -> None:
    claim = tmp_path / "claims" / "team-data"
    (claim / "sets" / "digits").mkdir(parents=True)
    (claim / "sets" / "digits" / "x.csv").write_text("pvc")
    env = _env(tmp_path / "ws", **{PVC_MOUNT_ENV: str(claim)})
    fetch("dataset", "pvc://team-data/sets/digits", env)
    assert (tmp_path / "ws" / "dataset" / "x.csv").read_text() == "pvc"
    fetch("model", "pvc://team-data", env)  # the whole claim
    assert (tmp_path / "ws" / "model" / "sets" / "digits" / "x.csv").read_text() == "pvc"


def test_an_http_file_is_downloaded_as_is_after_passing_failures(tmp_path: Path) -> None:
    archive = b"\x1f\x8b not unpacked"
    with serve_files({"/sets/digits.tar.gz": archive}, {"/sets/digits.tar.gz": [503]}) as srv:
        fetch("dataset", f"{srv.url}/sets/digits.tar.gz", _env(tmp_path), FAST)
    assert (tmp_path / "dataset" / "digits.tar.gz").read_bytes() == archive
    assert [path for path, _ in srv.requests] == ["/sets/digits.tar.gz"] * 2
    assert not list((tmp_path / "dataset").glob(".*.part"))


def test_http_failures_name_the_uri_and_stop(tmp_path: Path) -> None:
    with serve_files({}) as srv:
        uri = f"{srv.url}/missing.csv"
        with pytest.raises(StorageUriError, match="HTTP 404") as caught:
            fetch("dataset", uri, _env(tmp_path), FAST)
        assert len(srv.requests) == 1  # a 404 is not retried
    assert f"cannot fetch {uri}" in str(caught.value)
    unreachable = f"{closed_port_url()}/x.csv"
    with pytest.raises(StorageUriError, match=r"after 3 tries") as caught:
        fetch("dataset", unreachable, _env(tmp_path), FAST)
    assert f"cannot fetch {unreachable}" in str(caught.value)


def _hub(kind: str, repo: str, files: dict[str, bytes]) -> dict[str, bytes]:
    plural, prefix = ("datasets", "datasets/") if kind == "dataset" else ("models", "")
    listing = {"siblings": [{"rfilename": name} for name in files]}
    served = {f"/api/{plural}/{repo}/revision/main": json.dumps(listing).encode()}
    for name, body in files.items():
        served[f"/{prefix}{repo}/resolve/main/{name}"] = body
    return served


def test_hf_dataset_is_the_first_two_segments_every_file(tmp_path: Path) -> None:
    files = {"README.md": b"alpaca", "data/train.parquet": b"PAR1"}
    with serve_files(_hub("dataset", "tatsu-lab/alpaca", files)) as srv:
        env = _env(tmp_path, HF_ENDPOINT=srv.url, ACCESS_TOKEN="hf_secret")
        fetch("dataset", "hf://tatsu-lab/alpaca/ignored/part", env, FAST)
    assert (tmp_path / "dataset" / "data" / "train.parquet").read_bytes() == b"PAR1"
    assert (tmp_path / "dataset" / "README.md").read_bytes() == b"alpaca"
    assert {auth for _, auth in srv.requests} == {"Bearer hf_secret"}


def test_hf_model_takes_upstreams_patterns_only(tmp_path: Path) -> None:
    repo = "meta-llama/Llama-3.2-1B-Instruct"
    files = {
        "config.json": b"{}",
        "model.safetensors": b"w",
        "original/tokenizer.model": b"t",
        "pytorch_model.bin": b"skip",
        "flax_model.msgpack": b"skip",
        "README.md": b"skip",
    }
    with serve_files(_hub("model", repo, files)) as srv:
        fetch("model", f"hf://{repo}", _env(tmp_path, HF_ENDPOINT=srv.url), FAST)
    got = sorted(str(p.relative_to(tmp_path / "model")) for p in (tmp_path / "model").rglob("*"))
    assert got == ["config.json", "model.safetensors", "original", "original/tokenizer.model"]
    assert repo_id(parse_storage_uri(f"hf://{repo}"), "model") == repo


def test_hf_without_the_hub_fails_naming_the_uri(tmp_path: Path) -> None:
    with pytest.raises(StorageUriError, match="HF_HUB_OFFLINE is set") as caught:
        fetch("dataset", "hf://tatsu-lab/alpaca", _env(tmp_path, HF_HUB_OFFLINE="1"), FAST)
    assert "cannot fetch hf://tatsu-lab/alpaca" in str(caught.value)
    env = _env(tmp_path, HF_ENDPOINT=closed_port_url())
    with pytest.raises(StorageUriError, match=r"cannot fetch hf://tatsu-lab/alpaca \(http"):
        fetch("dataset", "hf://tatsu-lab/alpaca", env, FAST)
    with pytest.raises(StorageUriError, match="hf://<owner>/<name>"):
        fetch("dataset", "hf://squad", env, FAST)


def test_the_program_exits_1_with_the_reason_last(tmp_path: Path) -> None:
    env = {"STORAGE_URI": "s3://bucket/key", WORKSPACE_ENV: str(tmp_path), "PATH": ""}
    done = subprocess.run(
        [sys.executable, "-m", "workers.initializer", "dataset"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("STORAGE_URI 's3://bucket/key'")
    usage = subprocess.run(
        [sys.executable, "-m", "workers.initializer", "weights"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert usage.returncode == 2 and "dataset|model" in usage.stderr
