"""``danlu submit --after ID:`` (``--after "$JOB:$WHEN"`` with WHEN unset) is refused naming
``--after``, exit 2, nothing sent: it was read as ``ID``, waiting for the job to succeed
when another condition was meant. ``ID`` and ``ID:CONDITION`` are taken as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_fake_api import FakeApi, invoke, jobs_app, serve_jobs_commands

SPEC = "name: t\ncommand: [echo, hi]\nresources: {gpus: 1}\n"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    return serve_jobs_commands(monkeypatch)


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(SPEC)
    return path


@pytest.mark.parametrize("item", ["0123ab:", "0123ab: ", ":"])
def test_after_with_an_empty_condition_is_refused(fake: FakeApi, spec: Path, item: str) -> None:
    code, out, err = invoke(jobs_app(), "submit", str(spec), "--after", item)
    assert code == 2 and out == ""
    assert "--after:" in err and "names no condition after ':'" in err, err
    assert fake.requests == []


@pytest.mark.parametrize(
    ("item", "condition"), [("0123ab", "succeeded"), ("0123ab:failed", "failed")]
)
def test_after_with_or_without_a_condition_is_sent(
    fake: FakeApi, spec: Path, item: str, condition: str
) -> None:
    code, _, err = invoke(jobs_app(), "submit", str(spec), "--after", item, "--json")
    assert code == 0, err
    (dependency,) = json.loads(fake.requests[-1].content)["depends_on"]
    assert dependency["job"] == "0123ab"
    assert dependency.get("condition", "succeeded") == condition  # the default left out
