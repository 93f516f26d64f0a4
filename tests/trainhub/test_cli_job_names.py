"""How `status`, `suspend`, `resume` and `delete` read the job they are given."""

from __future__ import annotations

from schemas.kubeflow import derive_job_uid
from trainhub.cli_requests import candidate_uids, qualified


def test_a_bare_name_takes_the_namespace_flag() -> None:
    assert qualified("train", "research") == "research/train"
    assert qualified("team/train", "research") == "team/train"  # given in full
    assert qualified("train", "default") == "train"
    assert derive_job_uid("research", "train") in candidate_uids(qualified("train", "research"))
    uid = derive_job_uid("default", "train")
    assert uid in candidate_uids(uid) and uid in candidate_uids("train")
