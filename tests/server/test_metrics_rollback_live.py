"""End to end: danlu.train rolls back in process (a NaN loss, the ``"rollback"`` action) and
its reporter sends to a real server. The replay's records carry ``rollback``, and
``GET /jobs/{id}/metrics`` shows each step once, the replay's, where it showed the first
try's and the replay's records of the steps redone, both within one attempt. An old client
(no field) and a bad value through the API. On SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import httpx
import torch
from helpers import Live, live_server
from sqlalchemy import update

import danlu.train as dt
from danlu.server.db import Database, Job


def _job(live: Live) -> str:
    with live.client() as c:
        body = {"name": "m", "command": ["sleep", "1000"], "resources": {"gpus": 1}}
        response = c.post("/jobs", json=body)
        assert response.status_code == 201, response.text
        job_id = str(response.json()["id"])
    assert live.prepared is not None
    db: Database = live.prepared.app.state.danlu.db
    with db.session() as s:  # as the job's first start left it
        s.execute(update(Job).where(Job.id == job_id).values(attempt=1))
    return job_id


def _get(c: httpx.Client, job_id: str, **params: Any) -> list[dict[str, Any]]:
    response = c.get(f"/jobs/{job_id}/metrics", params=params)
    assert response.status_code == 200, response.text
    return cast(list[dict[str, Any]], response.json())


def _train_with_a_rollback(live: Live, job_id: str, tmp_path: Path) -> None:
    """Checkpoints at steps 3 and 6; a NaN loss at step 5 rolls back to step 3 and step 4 is
    redone (then the NaN again at 5: skipped, as the action does once it rolled back for
    it). Step 4's first record reached the server before the anomaly."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 8, generator=g)
    y = x @ torch.randn(8, 1, generator=g)
    x[4 * 4 + 1, 0] = float("nan")  # the fifth batch: step 5
    data = torch.utils.data.TensorDataset(x, y)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))

    def loss_fn(m: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return torch.nn.functional.mse_loss(m(batch[0]), batch[1])

    environ = {"DANLU_API_URL": live.url, "DANLU_JOB_ID": job_id, "DANLU_TOKEN": live.token}
    with dt.init(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        global_batch_size=4,
        dataset_size=32,
        shuffle=False,
        checkpoint_dir=str(tmp_path / "ckpt"),
        checkpoint_every_steps=3,
        anomaly="rollback",
        report_interval_s=3600,  # only the explicit flush and the close send
        progress=False,
        environ=environ,
    ) as ctx:
        for _ in ctx.epochs(1):
            for batch in ctx.batches(data):
                ctx.step(batch, loss_fn)
                if ctx.step_num == 4 and ctx.rollbacks == 0:
                    ctx.reporter.flush()
                    assert ctx.reporter.sent == 4
        assert ctx.rollbacks == 1
    assert ctx.reporter.errors == 0 and ctx.reporter.dropped == 0


def test_a_rollbacks_replayed_steps_are_listed_once(tmp_path: Path, db_url: str) -> None:
    with live_server(tmp_path, db_url=db_url, start_loops=False) as live, live.client() as c:
        job_id = _job(live)
        _train_with_a_rollback(live, job_id, tmp_path)
        shown = [r for r in _get(c, job_id) if "loss" in r]  # the closing record has none
        assert [r["step"] for r in shown] == list(range(1, 9))
        # the first try's record of step 4 is stored, superseded
        every = [r for r in _get(c, job_id, superseded="true") if "loss" in r]
        kept = [(r["step"], r.get("rollback", 0)) for r in every if not r["superseded"]]
        assert kept == [(1, 0), (2, 0), (3, 0), (4, 1), (5, 1), (6, 1), (7, 1), (8, 1)]
        fourth = [(r.get("rollback"), r["superseded"]) for r in every if r["step"] == 4]
        assert fourth == [(None, True), (1, False)]  # absent before any rollback
        # the cursor mode, by arrival: every record, each saying whether it is superseded
        follow = [r for r in _get(c, job_id, after_id=0) if "loss" in r]
        assert [(r["step"], r["superseded"]) for r in follow][:5] == [
            (1, False),
            (2, False),
            (3, False),
            (4, True),
            (4, False),
        ]
        assert [r["step"] for r in _get(c, job_id, tail="true", limit=2)][-1] == 8
        # step paging agrees with the whole list
        paged = _get(c, job_id, limit=4) + _get(c, job_id, after_step=4, limit=1000)
        assert [r["step"] for r in paged if "loss" in r] == list(range(1, 9))


def test_an_old_client_and_a_bad_rollback_through_the_api(tmp_path: Path, db_url: str) -> None:
    with live_server(tmp_path, db_url=db_url, start_loops=False) as live, live.client() as c:
        job_id = _job(live)
        old = [{"step": s, "loss": float(s)} for s in (1, 2, 2, 3)]  # a step twice: both kept
        assert c.post(f"/jobs/{job_id}/metrics", json={"metrics": old}).status_code == 200
        assert [r["step"] for r in _get(c, job_id)] == [1, 2, 2, 3]
        assert all("rollback" not in r for r in _get(c, job_id, superseded="true"))
        bad = [{"step": 4, "loss": 1.0}, {"step": 5, "loss": 1.0, "rollback": -1}]
        response = c.post(f"/jobs/{job_id}/metrics", json={"metrics": bad})
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["field"] == "metrics.1.rollback"
        assert "rollback generation" in error["message"]
        assert [r["step"] for r in _get(c, job_id)] == [1, 2, 2, 3]
