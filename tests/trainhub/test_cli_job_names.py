"""How `status`, `suspend`, `resume` and `delete` read the job they are given."""

from __future__ import annotations

from schemas.kubeflow import derive_job_uid
from trainhub.cli import _candidate_uids, _qualified


def test_a_bare_name_takes_the_namespace_flag() -> None:
    assert _qualified("train", "research") == "research/train"
    assert _qualified("team/train", "research") == "team/train"  # given in full
    assert _qualified("train", "default") == "train"
    assert derive_job_uid("research", "train") in _candidate_uids(_qualified("train", "research"))
    uid = derive_job_uid("default", "train")
    assert uid in _candidate_uids(uid) and uid in _candidate_uids("train")
