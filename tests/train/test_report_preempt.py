"""Metrics to a local HTTP server and to JSONL; SIGTERM -> checkpoint and exit 75."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from train_helpers import mse_loss, tiny_model, tiny_regression

import danlu.train as dt
from danlu.core.errors import ConfigError
from danlu.train.report import MetricsReporter


def _recording_server(got: list[tuple[str, str, dict[str, Any]]]) -> HTTPServer:
    """A metrics endpoint (in a thread) that keeps every POST as (path, Authorization
    header, body) in ``got`` and answers as the API does (the reporter takes nothing else for
    its records stored)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            got.append((self.path, self.headers.get("Authorization", ""), body))
            reply = json.dumps({"accepted": len(body["metrics"]), "batch_size": None}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_metrics_are_posted_in_batches_with_the_token() -> None:
    got: list[tuple[str, str, dict[str, Any]]] = []
    server = _recording_server(got)
    env = {
        "DANLU_API_URL": f"http://127.0.0.1:{server.server_port}",
        "DANLU_JOB_ID": "42",
        "DANLU_TOKEN": "sekret",
    }
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = tiny_regression(64)
    with dt.init(
        model, opt, global_batch_size=16, dataset_size=64, environ=env, report_interval_s=60
    ) as ctx:
        for b in ctx.batches(data):
            ctx.step(b, mse_loss)
    server.shutdown()
    assert got, "nothing was posted"
    path, auth, _ = got[0]
    assert path == "/api/v1/jobs/42/metrics" and auth == "Bearer sekret"
    records = [r for _, _, b in got for r in b["metrics"]]  # type: ignore[union-attr]
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    for key in ("loss", "lr", "samples_per_s", "step_time_s", "grad_norm", "loss_scale"):
        assert key in records[0]


def _replying_server(answer: dict[str, Any]) -> HTTPServer:
    """A metrics endpoint (in a thread) that answers every POST with ``accepted`` plus the
    current contents of ``answer``."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            reply = json.dumps({"accepted": 1, **answer}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_the_reply_carries_the_schedulers_batch() -> None:
    server = _replying_server({"batch_size": 1024})
    rep = MetricsReporter(url=f"http://127.0.0.1:{server.server_port}/m", interval_s=60)
    assert rep.scheduler_batch is None
    rep.report({"step": 1})
    rep.flush()
    server.shutdown()
    assert rep.scheduler_batch == 1024  # a Rebatch reaches the running job here
    rep._note_reply(b"not json")
    rep._note_reply(b'{"accepted": 1, "batch_size": null}')
    assert rep.scheduler_batch == 1024


def test_a_running_job_adopts_the_schedulers_batch_in_process() -> None:
    """A Rebatch reaches the job in a metrics reply; at the next step boundary its global
    batch changes (same process, no restart) and the LR follows the linear rule."""
    answer: dict[str, Any] = {"batch_size": 16}
    server = _replying_server(answer)
    env = {"DANLU_API_URL": f"http://127.0.0.1:{server.server_port}", "DANLU_JOB_ID": "7"}
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = tiny_regression(4096)
    seen: list[tuple[int, float]] = []
    sizes: list[int] = []
    with dt.init(
        model, opt, global_batch_size=16, dataset_size=len(data), environ=env, report_interval_s=60
    ) as ctx:
        for b in ctx.batches(data):
            ctx.step(b, mse_loss)
            seen.append((ctx.batch.global_batch, ctx.lr.lr))
            sizes.append(len(b[0]))
            if len(seen) == 5:
                ctx.reporter.flush()  # the scheduler still says 16: nothing changes
            if len(seen) == 8:
                answer["batch_size"] = 32  # now the scheduler rebatches the job
                ctx.reporter.flush()
            if len(seen) == 12:
                break
    server.shutdown()
    assert seen[5:8] == [(16, 0.01)] * 3
    assert seen[8] == (32, pytest.approx(0.02))  # at the next step boundary
    assert ctx.batch.global_batch == 32  # adopted in process
    assert ctx.lr.lr == pytest.approx(0.02)  # linear LR scaling from the launch batch
    assert sizes[:9] == [16] * 9 and sizes[9] == 32, sizes  # the data loader follows


def test_the_schedulers_global_batch_replaces_the_scripts() -> None:
    model = tiny_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    env = {"DANLU_GLOBAL_BATCH_SIZE": "64"}
    with dt.init(
        model, opt, global_batch_size=16, micro_batch_size=16, environ=env, metrics_file=False
    ) as ctx:
        assert (ctx.batch.global_batch, ctx.batch.micro, ctx.batch.accumulation) == (64, 16, 4)
        assert ctx.lr.lr == pytest.approx(0.04)  # linear rule from the script's batch of 16
    with pytest.raises(ConfigError, match="DANLU_GLOBAL_BATCH_SIZE"):
        dt.init(model, opt, global_batch_size=16, environ={"DANLU_GLOBAL_BATCH_SIZE": "0"})


def test_records_json_cannot_write_as_they_are_do_not_hold_up_the_rest(tmp_path: Path) -> None:
    """A value a user reports through ``ctx.reporter`` that ``json`` cannot write (a NumPy
    or torch scalar) made every flush fail, and the records after it waited for good.
    Scalars are written as numbers now; a record that still cannot be written is dropped
    alone."""
    posts: list[tuple[str, str, dict[str, Any]]] = []
    server = _recording_server(posts)
    odd: list[dict[str, Any]] = [
        {"step": 1, "acc": np.float32(0.5), "loss": torch.tensor(2.0)},
        {"step": 2, "nested": [float("nan")]},  # JSON has no NaN, and this one is not top-level
        {"step": 3, "loss": np.float64("nan"), "name": Path("run")},
    ]
    rep = MetricsReporter(url=f"http://127.0.0.1:{server.server_port}/m", interval_s=60)
    jsonl = MetricsReporter(path=tmp_path / "m.jsonl")
    for reporter in (rep, jsonl):
        for record in odd:
            reporter.report(record)
        reporter.flush()
        assert (reporter.sent, reporter.dropped, reporter._retry) == (2, 1, [])
    server.shutdown()
    got = [record for _, _, body in posts for record in body["metrics"]]
    written = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    expected = [{"step": 1, "acc": 0.5, "loss": 2.0}, {"step": 3, "loss": None, "name": "run"}]
    assert got == expected and written == expected


def test_network_errors_never_fail_training(tmp_path: Path) -> None:
    rep = MetricsReporter(url="http://127.0.0.1:9/nothing", interval_s=0.01, timeout_s=0.5)
    rep.start()
    rep.report({"step": 1})
    rep.close()
    assert rep.errors >= 1 and rep.sent == 0
    jsonl = MetricsReporter(path=tmp_path / "m.jsonl")
    jsonl.start()
    jsonl.report({"step": 1, "loss": 0.5})
    jsonl.close()
    assert json.loads((tmp_path / "m.jsonl").read_text()) == {"step": 1, "loss": 0.5}


SCRIPT = """
import sys, time, torch, danlu.train as dt
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(10_000, 4)
data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
loss = lambda m, b: torch.nn.functional.mse_loss(m(b[0]), b[1])
with dt.init(model, opt, global_batch_size=8, dataset_size=len(data), metrics_file=False,
             checkpoint_dir=sys.argv[1]) as ctx:
    print("resumed at", ctx.step_num, flush=True)
    for epoch in ctx.epochs(1):
        for b in ctx.batches(data):
            ctx.step(b, loss)
            if ctx.step_num == 3:
                print("ready", flush=True)
            time.sleep(0.01)
"""


def test_sigterm_checkpoints_and_exits_with_the_preemption_code(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2] / "src"))
    argv = [sys.executable, "-c", SCRIPT, str(tmp_path / "ckpt")]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("ready"):
            break
    time.sleep(0.1)
    proc.terminate()
    assert proc.wait(timeout=60) == dt.PREEMPTED_EXIT_CODE == 75
    again = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    assert again.stdout is not None
    first = again.stdout.readline()
    again.terminate()
    again.wait(timeout=60)
    assert first.startswith("resumed at") and int(first.split()[-1]) >= 3
