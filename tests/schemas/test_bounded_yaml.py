"""YAML alias bombs are refused while the text is read, before any object is built."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from schemas.bounded_yaml import MAX_ALIAS_EXPANSION, AliasBomb, load_all_bounded
from schemas.errors import JobInvalid
from schemas.job_parsing import load_documents


def billion_laughs(levels: int = 9) -> str:
    """The classic: nine "lol"s, each level nine aliases of the one before (9^levels)."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_is_refused_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(AliasBomb, match=f"aliases expand to more than {MAX_ALIAS_EXPANSION}"):
        load_all_bounded(billion_laughs())
    assert time.monotonic() - started < 1.0


def test_one_long_string_repeated_is_refused_as_well() -> None:
    # Few aliases, each of a long scalar: small text, large JSON once sent.
    text = f"s: &s {'x' * 100_000}\nlist: [{', '.join(['*s'] * 11)}]\n"
    with pytest.raises(AliasBomb):
        load_all_bounded(text)
    assert load_all_bounded(f"s: &s {'x' * 100_000}\nlist: [*s, *s]\n")[0]["list"][1][:3] == "xxx"


def test_a_cycle_is_refused_not_followed() -> None:
    with pytest.raises(AliasBomb, match=r"alias \*loop inside its own anchor"):
        load_all_bounded("a: &loop [1, [*loop]]\n")


def test_ordinary_anchors_load_as_safe_load_loads_them() -> None:
    text = textwrap.dedent(
        """\
        env: &env [{name: A, value: "1"}, {name: B, value: "2"}]
        master: {env: *env}
        worker: {env: *env}
        ---
        second: &s {x: 1}
        again: *s
        """
    )
    assert load_all_bounded(text) == list(yaml.safe_load_all(text))
    # The count starts again with each document: a stream of many modest ones is fine.
    many = "---\n".join(f"v: &v {'y' * 1000}\nw: [{', '.join(['*v'] * 900)}]\n" for _ in range(3))
    assert len(load_all_bounded(many)) == 3


def test_load_documents_names_the_file() -> None:
    with pytest.raises(JobInvalid, match=r"bomb.yaml: not valid YAML or JSON: aliases expand"):
        load_documents(billion_laughs(), "bomb.yaml")


def test_refused_without_time_or_memory_in_a_fresh_process(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(billion_laughs())
    script = textwrap.dedent(
        f"""
        import resource, sys, time
        from schemas.job_parsing import load_documents
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.monotonic()
        try:
            load_documents(open({str(bomb)!r}).read(), "bomb.yaml")
        except Exception as exc:
            print(type(exc).__name__)
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        print(time.monotonic() - started, grown)
        """
    )
    root = Path(__file__).parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=root, timeout=60
    )
    assert done.returncode == 0, done.stderr
    name, measured = done.stdout.splitlines()
    seconds, grown_kib = measured.split()
    assert name == "JobInvalid"
    assert float(seconds) < 1.0
    assert int(grown_kib) < 50 * 1024  # ru_maxrss is in KiB on Linux
