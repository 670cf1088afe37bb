"""A user could put terminal control sequences into an admin's CLI output through
the names it chooses: a token's label (``POST /users/NAME/tokens``) and a metric's name
(``POST /jobs/{id}/metrics``) took ESC, line breaks and the like, which ``danlu user tokens``
and ``danlu metrics`` then printed raw (a red screen, a spoofed table row). Both are refused
now with a 422 naming the field and the fix, as job names with them were already; danlu.train's
reporter leaves such a record out by the same check (:mod:`danlu.core.metric_record`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any, cast

import httpx
import pytest
from helpers import Live, live_server

from danlu.core.metric_record import RecordError, check_record
from danlu.core.values import control_character, visible
from danlu.train.report import MetricsReporter

BAD_TEXT: dict[str, str] = {
    # id: text a terminal acts on rather than shows
    "esc-and-newline": "lab\x1b[31m\nel",
    "carriage-return-line-feed": "a\r\nX-Evil: 1",
    "tab": "a\tb",
    "nul": "a\0b",
    "delete": "a\x7fb",
    "bell": "a\x07b",
    "c1-csi": "a\x9b31mb",
    "c1-next-line": "a\x85b",
    "line-separator": "a\u2028b",
    "paragraph-separator": "a\u2029b",
    "bidi-override": "safe\u202etxt.exe",
    "bidi-isolate": "a\u2066b",
}

GOOD_TEXT: dict[str, str] = {
    # id: names people give, which must still be taken
    "plain": "laptop",
    "with-spaces": "my laptop 2",
    "punctuation": "acc@1/top-5 (val)",
    "chinese": "准确率",
    "accented": "précision",
    "emoji": "🚀 run",
    "non-breaking-space": "a\u00a0b",
}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A server whose scheduling loops do not run (metrics are taken from pending jobs)."""
    with live_server(tmp_path_factory.mktemp("live67"), start_loops=False) as server:
        yield server


@pytest.fixture(scope="module")
def mallory(live: Live) -> str:
    """A plain user's token."""
    with live.client() as admin:
        assert admin.post("/users", json={"name": "mallory"}).status_code == 201
        response = admin.post("/users/mallory/tokens", json={"name": "first"})
        assert response.status_code == 201, response.text
        return str(response.json()["token"])


def _post_json(client: httpx.Client, path: str, body: Any) -> httpx.Response:
    """POST ``body`` as JSON written by :func:`json.dumps` (lone surrogates and all)."""
    return client.post(
        path, content=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )


def _job(live: Live, token: str) -> str:
    with live.client(token) as c:
        body = {"name": "m", "command": ["sleep", "1000"], "resources": {"gpus": 1}}
        response = c.post("/jobs", json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["id"])


def _labels(live: Live, token: str) -> list[str]:
    with live.client(token) as c:
        response = c.get("/users/mallory/tokens")
        assert response.status_code == 200, response.text
        return [str(t["name"]) for t in response.json()]


# -- token labels ------------------------------------------------------------------------------


@pytest.mark.parametrize("label", list(BAD_TEXT.values()), ids=list(BAD_TEXT))
def test_a_token_label_with_control_characters_is_refused(
    live: Live, mallory: str, label: str
) -> None:
    before = _labels(live, mallory)
    with live.client(mallory) as c:
        response = _post_json(c, "/users/mallory/tokens", {"name": label})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "SpecError" and error["field"] == "name"
    assert "control characters" in error["message"] and "label" in error["message"]
    assert _labels(live, mallory) == before  # no token issued


@pytest.mark.parametrize("label", list(GOOD_TEXT.values()), ids=list(GOOD_TEXT))
def test_a_token_label_people_write_is_taken(live: Live, mallory: str, label: str) -> None:
    with live.client(mallory) as c:
        response = c.post("/users/mallory/tokens", json={"name": label})
    assert response.status_code == 201, response.text
    assert label in _labels(live, mallory)


# -- metric names ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(BAD_TEXT.values()), ids=list(BAD_TEXT))
def test_a_metric_name_with_control_characters_is_refused_naming_the_record(
    live: Live, mallory: str, name: str
) -> None:
    job_id = _job(live, mallory)
    body = {"metrics": [{"step": 1, "loss": 1.0}, {"step": 2, name: 1.0}]}
    with live.client(mallory) as c:
        response = _post_json(c, f"/jobs/{job_id}/metrics", body)
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["type"] == "SpecError" and error["field"] == "metrics.1"
        assert "metric names" in error["message"] and "rename" in error["message"]
        assert c.get(f"/jobs/{job_id}/metrics").json() == []  # the batch is refused whole


@pytest.mark.parametrize("name", list(GOOD_TEXT.values()), ids=list(GOOD_TEXT))
def test_a_metric_name_people_write_is_taken(live: Live, mallory: str, name: str) -> None:
    job_id = _job(live, mallory)
    with live.client(mallory) as c:
        response = c.post(f"/jobs/{job_id}/metrics", json={"metrics": [{"step": 1, name: 0.5}]})
        assert response.status_code == 200, response.text
        [stored] = c.get(f"/jobs/{job_id}/metrics").json()
    assert stored[name] == 0.5


def test_a_string_metric_value_with_control_characters_is_still_taken(
    live: Live, mallory: str
) -> None:
    """Only names are refused: a value may be a sample of generated text, line breaks and
    all (the CLI shows it escaped)."""
    job_id = _job(live, mallory)
    record = {"step": 1, "sample": "line one\nline two\t\x1b[1m"}
    with live.client(mallory) as c:
        response = c.post(f"/jobs/{job_id}/metrics", json={"metrics": [record]})
        assert response.status_code == 200, response.text
        [stored] = c.get(f"/jobs/{job_id}/metrics").json()
    assert stored["sample"] == record["sample"]


def test_the_reporter_leaves_out_the_record_whose_name_the_server_refuses(
    live: Live, mallory: str, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = _job(live, mallory)
    reporter = MetricsReporter(
        url=f"{live.url}/api/v1/jobs/{job_id}/metrics", token=mallory, interval_s=3600
    )
    with caplog.at_level(logging.WARNING, logger="danlu.train"):
        reporter.report({"step": 1, "loss": 1.0})
        reporter.report({"step": 2, "lo\x1b[31mss\nX": 1.0})
        reporter.report({"step": 3, "loss": 0.5})
        reporter.flush()
    assert (reporter.sent, reporter.dropped, reporter.errors) == (2, 1, 0)
    with live.client(mallory) as c:
        stored = cast(list[dict[str, Any]], c.get(f"/jobs/{job_id}/metrics").json())
    assert [m["step"] for m in stored] == [1, 3]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "control characters" in warnings[0], warnings
    assert "\x1b" not in warnings[0]  # the name is quoted escaped, not raw, in the log too


# -- the shared checks -------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(BAD_TEXT.values()), ids=list(BAD_TEXT))
def test_check_record_names_the_record_and_quotes_the_name_escaped(name: str) -> None:
    with pytest.raises(RecordError) as err:
        check_record({"step": 1, name: 1.0}, "metrics.4", 0.0)
    assert err.value.field == "metrics.4"
    assert not any(control_character(c) for c in err.value.message)
    assert not any(control_character(c) for c in err.value.reason)


@pytest.mark.parametrize("text", list(BAD_TEXT.values()), ids=list(BAD_TEXT))
def test_visible_writes_every_control_character_as_an_escape(text: str) -> None:
    shown = visible(text)
    assert control_character(text) is not None and control_character(shown) is None
    assert shown != text and "\\" in shown


@pytest.mark.parametrize("text", list(GOOD_TEXT.values()), ids=list(GOOD_TEXT))
def test_visible_leaves_printable_text_as_it_is(text: str) -> None:
    assert control_character(text) is None and visible(text) == text
