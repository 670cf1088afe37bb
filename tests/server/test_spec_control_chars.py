"""A job spec's names, paths and references holding a control character (a terminal's ESC
sequence, a line break, a bidirectional override) are refused at submission with a 422
naming the field: ``workdir``, ``checkpoint_dir``, ``training.model``,
``training.application`` and ``env``'s names were stored as sent and given back to whoever
listed the job, while job names, token labels and metric names with one were refused.
``project``, ``user`` and ``resources.gpu_type`` say so too (they were refused as unknown,
a plain user's ``user`` with a 403). The command and ``env``'s values keep their line breaks
and tabs (a ``python -c`` program), and names without controls are taken as before."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from helpers import Live, live_server

from danlu.core.job_array import array_sweep, parse_array

BAD_TEXT: dict[str, str] = {
    # id: a control character a terminal acts on rather than shows
    "esc": "\x1b[31m",
    "newline": "\n",
    "tab": "\t",
    "c1-csi": "\x9b2J",
    "line-separator": "\u2028",
    "bidi-override": "\u202e",
}

FIELDS: dict[str, tuple[str, dict[str, Any]]] = {
    # id: (the field the error names, the spec's fields holding "{bad}")
    "project": ("project", {"project": "lab{bad}"}),
    "user": ("user", {"user": "alice{bad}"}),
    "gpu_type": ("resources.gpu_type.1", {"resources": {"gpu_type": ["generic", "h100{bad}"]}}),
    "workdir": ("workdir", {"workdir": "/data/{bad}run"}),
    "checkpoint_dir": ("checkpoint_dir", {"checkpoint_dir": "s3://bucket/{bad}run"}),
    "model": ("training.model", {"training": {"model": "torchvision.models:resnet18{bad}"}}),
    "application": ("training.application", {"training": {"application": "resnet{bad}"}}),
    "env-name": ("env", {"env": {"SEED{bad}": "1"}}),
}


def _with(fields: dict[str, Any], bad: str) -> dict[str, Any]:
    """``fields`` with each ``{bad}`` written as ``bad``, in keys and values."""
    return {
        key.replace("{bad}", bad): _with(value, bad)
        if isinstance(value, dict)
        else [item.replace("{bad}", bad) for item in value]
        if isinstance(value, list)
        else value.replace("{bad}", bad)
        for key, value in fields.items()
    }


def _spec(**fields: Any) -> dict[str, Any]:
    return {"name": "text", "command": ["sleep", "1000"], "resources": {"gpus": 1}} | fields


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A server whose scheduling loops do not run (submitted jobs stay PENDING)."""
    with live_server(tmp_path_factory.mktemp("spectext"), start_loops=False) as server:
        yield server


@pytest.fixture(scope="module")
def bob(live: Live) -> str:
    """A plain user's token."""
    with live.client() as admin:
        assert admin.post("/users", json={"name": "bob"}).status_code == 201
        response = admin.post("/users/bob/tokens", json={"name": "first"})
        assert response.status_code == 201, response.text
        return str(response.json()["token"])


def _job_count(client: httpx.Client) -> int:
    response = client.get("/jobs")  # the loops do not run: every job stays PENDING
    assert response.status_code == 200, response.text
    return len(response.json())


@pytest.mark.parametrize("bad", list(BAD_TEXT.values()), ids=list(BAD_TEXT))
@pytest.mark.parametrize("field", list(FIELDS))
def test_control_character_refused_naming_the_field(live: Live, field: str, bad: str) -> None:
    named, fields = FIELDS[field]
    with live.client() as admin:
        before = _job_count(admin)
        response = admin.post("/jobs", json=_spec(**_with(fields, bad)))
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["field"] == named
        assert "control characters" in error["message"]
        assert "without them" in error["message"]
        assert bad not in error["message"]  # the value is quoted escaped, not as it is
        assert _job_count(admin) == before  # nothing stored


def test_plain_user_naming_themselves_with_a_control_character(live: Live, bob: str) -> None:
    """A plain user's ``user`` with an ESC sequence is a 422 naming it (it was a 403 saying
    bob may submit only as himself)."""
    with live.client(bob) as client:
        response = client.post("/jobs", json=_spec(user="bob\x1b[2J"))
        assert response.status_code == 422, response.text
        assert response.json()["error"]["field"] == "user"


@pytest.mark.parametrize(
    "fields",
    [
        {"workdir": "/data/my runs/précision 准确率", "checkpoint_dir": "s3://b/a\u00a0b"},
        {"training": {"application": "resnet-50 (imagenet)", "model": "pkg.mod:make_🚀"}},
        {"env": {"SCRIPT": "line one\nline\ttwo\x1b[0m", "ÉTAPE": "1"}},
        {"command": ["python3", "-c", "import sys\nprint(sys.argv)\t# tab"]},
        {"project": "default", "user": "default", "resources": {"gpu_type": "GENERIC"}},
    ],
    ids=["paths", "training", "env-values", "command", "names"],
)
def test_specs_without_controls_in_names_still_taken(live: Live, fields: dict[str, Any]) -> None:
    with live.client() as admin:
        response = admin.post("/jobs", json=_spec(**fields))
        assert response.status_code == 201, response.text
        stored = admin.get(f"/jobs/{response.json()['id']}").json()["spec"]
        for key, value in fields.items():
            if key in ("env", "command", "workdir", "checkpoint_dir"):
                assert stored[key] == value


def test_job_array_refused_naming_the_trial_field(live: Live) -> None:
    """A job array (a sweep) is admitted by the same checks: its tasks' spec names the field
    under ``trial.``, and no task is queued."""
    task = _spec(workdir="/data/\x1b]0;owned\x07run")
    with live.client() as admin:
        before = _job_count(admin)
        response = admin.post("/sweeps", json=array_sweep(task, parse_array("0-3")))
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["field"] == "trial.workdir"
        assert "control characters" in error["message"]
        assert _job_count(admin) == before
        assert admin.get("/sweeps").json() == []
