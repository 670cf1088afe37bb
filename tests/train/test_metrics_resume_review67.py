"""danlu.train's reporter: metric records a checkpoint covered were lost when the
process died before the reporter shipped them (it ships every ``report_interval_s``), and the
resumed run never sent them again, so the sink had a gap (steps 37-43 of a run resumed at
43). Now each checkpoint seals the records queued so far into requests whose keys it keeps
(a JSONL file is written at once instead), and a resumed run sends the requests its
checkpoint holds again, as they were: the API stores a request it has by its key once, so
the records that did arrive are not stored twice."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch
from train_helpers import SRC, mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.train.context import TrainContext
from danlu.train.report import MetricsReporter

LIMIT = 30.0
"""Seconds a test waits for the server's thread at most (a guard against a hang only)."""
KEY = re.compile(r"[0-9a-f]{32}")


@dataclass
class _Api:
    """A metrics endpoint that keeps keys as the API does (a repeated key stores nothing).
    A record whose step is in ``refuse`` makes it refuse the whole request with a 422 naming
    that record (a rule the client does not know); ``stall`` makes the next request wait for
    ``release`` before it stores (the reporter times out meanwhile). ``stored`` holds the
    steps of the training records stored (a run's record at close that says only a
    checkpoint, without a loss, is counted in the reply but not there)."""

    stored: list[int] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)
    seen: dict[str, int] = field(default_factory=dict)
    refuse: set[int] = field(default_factory=set)
    stall: bool = False
    release: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    base: str = ""
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"{self.base}/api/v1/jobs/j/metrics"

    def start(self) -> None:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                key = self.headers.get("Idempotency-Key")
                status, reply = api._answer(key, json.loads(body)["metrics"])
                data = json.dumps(reply).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the reporter timed out and left
                    pass
                finally:
                    api.done.set()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _answer(self, key: str | None, records: list[dict[str, Any]]) -> tuple[int, dict[str, Any]]:
        self.keys.append(key)
        for i, record in enumerate(records):
            if int(record["step"]) in self.refuse:
                error = {"type": "SpecError", "field": f"metrics.{i}.loss", "message": "no"}
                return 422, {"error": error}
        if self.stall:
            self.stall = False
            assert self.release.wait(LIMIT), "the test never released the request"
        if key is not None and key in self.seen:
            return 200, {"accepted": self.seen[key], "batch_size": None}
        self.stored.extend(int(r["step"]) for r in records if "loss" in r)
        if key is not None:
            self.seen[key] = len(records)
        return 200, {"accepted": len(records), "batch_size": None}

    def close(self) -> None:
        assert self.server is not None
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api() -> Iterator[_Api]:
    server = _Api()
    server.start()
    yield server
    server.close()


def _report(reporter: MetricsReporter, steps: range) -> None:
    for step in steps:
        reporter.report({"step": step, "loss": 1.0 / step})


# ---------------------------------------------------------------- the reporter alone


def test_records_a_checkpoint_sealed_are_sent_after_the_resume(api: _Api) -> None:
    """The reviewer's case: the process died before its thread shipped the records the
    checkpoint covers; the resumed process sends them, before its own."""
    before = MetricsReporter(url=api.url, interval_s=3600)
    _report(before, range(1, 4))
    pending = before.seal()  # the checkpoint of step 3; then SIGKILL: nothing shipped
    after = MetricsReporter(url=api.url, interval_s=3600)
    assert after.resend(pending) == 3
    _report(after, range(4, 6))
    after.flush()
    assert api.stored == [1, 2, 3, 4, 5]
    assert (after.sent, after.errors, after.dropped) == (5, 0, 0)


def test_sealed_records_that_arrived_are_not_stored_again(api: _Api) -> None:
    """The thread shipped the sealed request after the checkpoint was taken, then the process
    died: the resend carries the same key, and the API stores nothing twice."""
    before = MetricsReporter(url=api.url, interval_s=3600)
    _report(before, range(1, 4))
    pending = before.seal()
    before.flush()
    after = MetricsReporter(url=api.url, interval_s=3600)
    after.resend(pending)
    after.flush()
    assert api.stored == [1, 2, 3]
    assert api.keys[0] is not None and KEY.fullmatch(api.keys[0])
    assert api.keys == [api.keys[0]] * 2


def test_sealed_records_are_not_merged_with_later_ones(api: _Api) -> None:
    """Records reported after a checkpoint go in a request of their own: merged with the
    sealed ones, they would be another request, and a resend of the sealed one would store
    its records twice."""
    reporter = MetricsReporter(url=api.url, interval_s=3600)
    _report(reporter, range(1, 4))
    pending = reporter.seal()
    _report(reporter, range(4, 6))
    reporter.flush()
    assert [item["key"] for item in pending] == [api.keys[0]]
    assert len(api.keys) == 2 and api.keys[1] != api.keys[0]
    assert api.stored == [1, 2, 3, 4, 5]


def test_only_the_requests_not_yet_shipped_are_sealed(api: _Api) -> None:
    reporter = MetricsReporter(url=api.url, interval_s=3600)
    _report(reporter, range(1, 3))
    reporter.flush()
    _report(reporter, range(3, 5))
    pending = reporter.seal()
    assert [[json.loads(line)["step"] for line in item["lines"]] for item in pending] == [[3, 4]]
    assert reporter.seal() == pending  # nothing new: the same request, not a second one


def test_a_timed_out_request_a_checkpoint_holds_is_stored_once(api: _Api) -> None:
    """A request in doubt (it timed out, the server stored it) is sealed as it is: the
    resumed process sends it with its key and the API answers it as a repeat."""
    before = MetricsReporter(url=api.url, interval_s=3600, timeout_s=0.5)
    _report(before, range(1, 4))
    api.stall = True
    before.flush()
    api.release.set()
    assert api.done.wait(LIMIT)
    pending = before.seal()
    after = MetricsReporter(url=api.url, interval_s=3600)
    after.resend(pending)
    after.flush()
    assert api.stored == [1, 2, 3]
    assert api.keys == [api.keys[0]] * 2


def test_a_request_cut_down_by_a_refusal_keeps_its_key_on_the_resend(api: _Api) -> None:
    """The server refused record 2 of a sealed request: the rest went under a new key. The
    resumed process's copy of the request is refused the same way and its rest gets the
    same new key (derived from the old one and the record left out): stored once."""
    api.refuse = {2}
    before = MetricsReporter(url=api.url, interval_s=3600)
    _report(before, range(1, 4))
    pending = before.seal()
    before.flush()
    after = MetricsReporter(url=api.url, interval_s=3600)
    after.resend(pending)
    after.flush()
    assert api.stored == [1, 3]
    refused, rest, refused_again, rest_again = api.keys
    assert (refused_again, rest_again) == (refused, rest) and rest != refused


def test_a_checkpoint_writes_a_jsonl_files_records_at_once(tmp_path: Path) -> None:
    """A local file has no keys to tell a resend from a repeat: the records are written when
    the checkpoint is taken (a local append), and nothing is left to resend."""
    path = tmp_path / "metrics.jsonl"
    reporter = MetricsReporter(path=path, interval_s=3600)
    _report(reporter, range(1, 4))
    assert reporter.seal() == []
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3]


@pytest.mark.parametrize(
    "pending",
    [
        pytest.param(None, id="none"),
        pytest.param("junk", id="not-a-list"),
        pytest.param([{"key": 3, "lines": ["{}"]}], id="bad-key"),
        pytest.param([{"key": "k", "lines": ["not json"]}], id="bad-line"),
    ],
)
def test_a_checkpoints_unreadable_pending_requests_are_skipped(api: _Api, pending: Any) -> None:
    reporter = MetricsReporter(url=api.url, interval_s=3600)
    assert reporter.resend(pending) == 0
    reporter.flush()
    assert api.keys == []


# ---------------------------------------------------------------- a training run


CKPT_EVERY = 2
CRASH_AT = 7
"""The first run dies after this step: the newest checkpoint is of step 6 and the record of
step 7 is lost with it (the resumed run trains step 7 again and reports it)."""
LAST = 10


def _train(
    ckpt: Path,
    environ: dict[str, str],
    *,
    until: int,
    flush_at: int | None = None,
    crash: bool = False,
    async_checkpoint: bool = False,
    monkeypatch: pytest.MonkeyPatch | None = None,
) -> TrainContext:
    """Train to step ``until`` (resuming from ``ckpt``), the reporter shipping only when told
    (``flush_at``); ``crash``: the process dies there, its reporter's queue unshipped."""
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = tiny_regression(8).tensors
    ctx = dt.init(
        model,
        opt,
        global_batch_size=8,
        checkpoint_dir=str(ckpt),
        checkpoint_every_steps=CKPT_EVERY,
        async_checkpoint=async_checkpoint,
        report_interval_s=3600,
        environ=environ,
    )
    while ctx.step_num < until:
        ctx.step((x, y), mse_loss)
        if ctx.step_num == flush_at:
            ctx.reporter.flush()
    if crash:  # nothing ships from here on, as after a SIGKILL
        assert monkeypatch is not None
        monkeypatch.setattr(ctx.reporter, "flush", lambda: None)
    ctx.close()
    return ctx


RUNS = [
    pytest.param(None, False, id="never-shipped"),
    pytest.param(3, False, id="shipped-to-step-3"),
    pytest.param(6, False, id="shipped-to-step-6"),
    pytest.param(None, True, id="never-shipped-async"),
    pytest.param(5, True, id="shipped-to-step-5-async"),
]


@pytest.mark.parametrize(("flush_at", "async_checkpoint"), RUNS)
def test_the_api_gets_every_step_once_across_a_crash(
    tmp_path: Path,
    api: _Api,
    monkeypatch: pytest.MonkeyPatch,
    flush_at: int | None,
    async_checkpoint: bool,
) -> None:
    environ = {"DANLU_API_URL": api.base, "DANLU_JOB_ID": "j", "DANLU_TOKEN": "t"}
    ckpt = tmp_path / "ck"
    first = _train(
        ckpt,
        environ,
        until=CRASH_AT,
        flush_at=flush_at,
        crash=True,
        async_checkpoint=async_checkpoint,
        monkeypatch=monkeypatch,
    )
    assert api.stored == list(range(1, (flush_at or 0) + 1))
    monkeypatch.undo()
    second = _train(ckpt, environ, until=LAST, async_checkpoint=async_checkpoint)
    assert first.step_num == CRASH_AT and second.step_num == LAST
    assert sorted(api.stored) == list(range(1, LAST + 1)), api.stored


@pytest.mark.parametrize(("flush_at", "async_checkpoint"), RUNS)
def test_the_jsonl_file_gets_every_step_once_across_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flush_at: int | None, async_checkpoint: bool
) -> None:
    ckpt = tmp_path / "ck"
    _train(
        ckpt,
        {},
        until=CRASH_AT,
        flush_at=flush_at,
        crash=True,
        async_checkpoint=async_checkpoint,
        monkeypatch=monkeypatch,
    )
    monkeypatch.undo()
    _train(ckpt, {}, until=LAST, async_checkpoint=async_checkpoint)
    records = [json.loads(line) for line in (ckpt / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == list(range(1, LAST + 1))
    assert records[-1] == {"step": LAST, "time": records[-1]["time"], "checkpoint_step": LAST}


KILLED_RUN = """
import os, signal, sys, torch, danlu.train as dt
sys.path.insert(0, sys.argv[2])
from train_helpers import mse_loss, tiny_model, tiny_regression
model = tiny_model()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = tiny_regression(8).tensors
ctx = dt.init(model, opt, global_batch_size=8, checkpoint_dir=sys.argv[1], environ={},
              checkpoint_every_steps=1, keep_last=2, async_checkpoint=True,
              report_interval_s=3600)
while ctx.step_num < 6:
    ctx.step((x, y), mse_loss)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
def test_a_sigkilled_run_leaves_no_gap_in_the_jsonl_file(tmp_path: Path) -> None:
    """The reviewer's run, killed for real: asynchronous checkpoints of every step, the
    reporter never shipped on its own; the resumed run continues the file without a gap."""
    ckpt = tmp_path / "ck"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(SRC))
    here = str(Path(__file__).resolve().parent)
    done = subprocess.run(
        [sys.executable, "-c", KILLED_RUN, str(ckpt), here],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    resumed = _train(ckpt, {}, until=LAST)
    lines = (ckpt / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line)["step"] for line in lines]
    # resumed from step 5 or 6 (the save of step 6 may not have been committed)
    assert resumed.step_num == LAST
    assert steps[:5] == [1, 2, 3, 4, 5], steps
    assert steps == sorted(steps) and set(steps) == set(range(1, LAST + 1)), steps
