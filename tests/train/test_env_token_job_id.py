"""``DANLU_TOKEN`` and ``DANLU_JOB_ID`` with odd values: read so that metrics still arrive, or
refused by name (never sent to another endpoint, never failing every POST silently)."""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.parse

import pytest

from danlu.core.errors import ConfigError
from danlu.train.env import JobEnv
from danlu.train.report import MetricsReporter

API = {"DANLU_API_URL": "http://127.0.0.1:8000", "DANLU_JOB_ID": "j1"}


@pytest.mark.parametrize("raw", ["abc123\n", "abc123\r\n", "  abc123  ", "\tabc123"])
def test_a_token_with_a_line_ending_is_read_without_it(raw: str) -> None:
    env = JobEnv.from_environ({**API, "DANLU_TOKEN": raw})
    assert env.token == "abc123"


@pytest.mark.parametrize("raw", ["", "   ", "\n"])
def test_a_blank_token_is_unset(raw: str) -> None:
    assert JobEnv.from_environ({**API, "DANLU_TOKEN": raw}).token is None


@pytest.mark.parametrize("raw", ["abc\n123", "abc 123", "abc\x00123", "abc\u00e9123"])
def test_a_token_with_a_bad_character_inside_is_refused_by_name_without_showing_it(
    raw: str,
) -> None:
    with pytest.raises(ConfigError, match="DANLU_TOKEN") as caught:
        JobEnv.from_environ({**API, "DANLU_TOKEN": raw})
    assert "abc" not in str(caught.value)  # a secret is never echoed


def test_metrics_arrive_with_a_token_read_with_its_line_ending() -> None:
    """With the raw value http.client refused the header before any byte was sent: every
    flush failed, and no metric ever arrived."""
    seen: list[str | None] = []

    class Api(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(self.headers.get("Authorization"))
            body = json.dumps({"accepted": 1}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = JobEnv.from_environ(
            {
                "DANLU_API_URL": f"http://127.0.0.1:{server.server_port}",
                "DANLU_JOB_ID": "j1",
                "DANLU_TOKEN": "abc123\r\n",
            }
        )
        reporter = MetricsReporter(url=env.metrics_url, token=env.token)
        reporter.report({"step": 1, "loss": 0.5, "time": time.time()})
        reporter.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert seen == ["Bearer abc123"]
    assert reporter.sent == 1 and reporter.errors == 0


@pytest.mark.parametrize("job_id", ["a/../../admin", "j?x=1", "j#frag", "j 1", "j%2F"])
def test_a_job_id_is_one_path_segment_of_the_metrics_url(job_id: str) -> None:
    env = JobEnv.from_environ({**API, "DANLU_JOB_ID": job_id})
    url = env.metrics_url
    assert url is not None
    parts = urllib.parse.urlsplit(url)
    assert parts.query == "" and parts.fragment == ""
    segments = parts.path.split("/")
    assert segments[:4] == ["", "api", "v1", "jobs"] and segments[5:] == ["metrics"]
    assert urllib.parse.unquote(segments[4]) == job_id


def test_a_plain_job_id_is_unchanged_in_the_metrics_url() -> None:
    env = JobEnv.from_environ({**API, "DANLU_JOB_ID": "0a1b2c3d4e5f"})
    assert env.metrics_url == "http://127.0.0.1:8000/api/v1/jobs/0a1b2c3d4e5f/metrics"


@pytest.mark.parametrize("job_id", [".", "..", " .. "])
def test_a_dot_job_id_is_refused_by_name(job_id: str) -> None:
    with pytest.raises(ConfigError, match="DANLU_JOB_ID"):
        JobEnv.from_environ({**API, "DANLU_JOB_ID": job_id})


@pytest.mark.parametrize("job_id", ["0a1b2c3d4e5f\r", " 0a1b2c3d4e5f", "0a1b2c3d4e5f\n "])
def test_blanks_around_a_job_id_are_not_part_of_the_metrics_url(job_id: str) -> None:
    """A ``\\r`` kept from a file read by ``$(cat f)``: the records went to ``...%0D``."""
    env = JobEnv.from_environ({**API, "DANLU_JOB_ID": job_id})
    assert env.job_id == "0a1b2c3d4e5f"
    assert env.metrics_url == "http://127.0.0.1:8000/api/v1/jobs/0a1b2c3d4e5f/metrics"
