"""docs/api.md read as a client author reads it, against a real server."""

from __future__ import annotations

from pathlib import Path

from helpers import live_server, spec


def test_patch_of_an_ended_job_answers_its_end_reason(tmp_path: Path) -> None:
    """docs/api.md: ``end_reason`` is null only for a job that has not ended; ``PATCH``
    answers the Job, so an ended job's answer carries why it ended, as ``GET`` does."""
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live,
        live.client() as c,
    ):
        job = c.post("/jobs", json=spec("ended", "pass")).json()
        cancelled = c.post(f"/jobs/{job['id']}/cancel")
        assert cancelled.status_code == 200, cancelled.text
        assert c.get(f"/jobs/{job['id']}").json()["end_reason"] == "cancelled by admin"
        answer = c.patch(f"/jobs/{job['id']}", json={})
        assert answer.status_code == 200, answer.text
        assert answer.json()["state"] == "CANCELLED"
        assert answer.json()["end_reason"] == "cancelled by admin"
        released = c.patch(f"/jobs/{job['id']}", json={"held": False})  # nothing to release
        assert released.status_code == 409 and "is CANCELLED" in released.text, released.text


def test_a_checkpoint_step_written_as_a_float_is_not_dropped_without_a_word(
    tmp_path: Path,
) -> None:
    """docs/api.md: a Job's ``checkpoint_step`` is the largest ``checkpoint_step`` its
    metric records carried; ``7.0`` (JSON has one number type) is either that step or a 422
    naming the field, never a record accepted whose checkpoint the job then does not know;
    a number that is no step (7.5, -1) is a 422 naming the field."""
    with (
        live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live,
        live.client() as c,
    ):
        job = c.post("/jobs", json=spec("ckpt", "pass")).json()
        url = f"/jobs/{job['id']}/metrics"
        assert c.post(url, json={"metrics": [{"step": 1, "checkpoint_step": 5}]}).status_code == 200
        assert c.get(f"/jobs/{job['id']}").json()["checkpoint_step"] == 5
        answer = c.post(url, json={"metrics": [{"step": 10, "checkpoint_step": 7.0}]})
        assert answer.status_code == 200, answer.text
        assert c.get(f"/jobs/{job['id']}").json()["checkpoint_step"] == 7
        stored = c.get(url, params={"tail": "true", "limit": 1}).json()
        assert stored[-1]["checkpoint_step"] == 7 and type(stored[-1]["checkpoint_step"]) is int
        for bad in (7.5, -1.0, -3):
            refused = c.post(url, json={"metrics": [{"step": 11, "checkpoint_step": bad}]})
            assert refused.status_code == 422, (bad, refused.text)
            assert refused.json()["error"]["field"] == "metrics.0.checkpoint_step"
            assert "whole number" in refused.json()["error"]["message"]
        assert c.get(f"/jobs/{job['id']}").json()["checkpoint_step"] == 7
