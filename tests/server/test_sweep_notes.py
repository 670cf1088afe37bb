"""``POST /sweeps`` tells, as ``POST /jobs`` does, when ``gpu_memory: auto`` could not be
estimated (whole GPUs used, and why): in every trial's pending reason, the first trials' and
those submitted later, and in the sweep's ``notes``. It told nothing: the trials waited as
if their memory were known."""

from __future__ import annotations

from pathlib import Path

from helpers import live_server, spec, submit

from danlu.server.services import sweeps

WHOLE = "gpu_memory: auto without training.model: using whole GPUs"


def _auto(name: str) -> dict[str, object]:
    return spec(name, "pass", resources={"gpus": 1, "gpu_memory": "auto"})


def test_a_sweep_tells_its_trials_that_the_estimate_was_not_possible(tmp_path: Path) -> None:
    with live_server(tmp_path, fake_gpus="1x80GiB", start_loops=False) as live:
        client = live.client()
        job = submit(client, _auto("alone"))
        assert job["pending_reason"] == f"waiting for the next scheduling round ({WHOLE})"
        body = {
            "name": "lr",
            "trial": _auto("trial"),
            "parameters": {"lr": {"values": [0.1, 0.01, 0.001]}},
            "metric": {"name": "loss"},
            "method": "grid",
            "parallel": 2,
        }
        sweep = client.post("/sweeps", json=body)
        assert sweep.status_code == 201, sweep.text
        assert sweep.json()["notes"] == [WHOLE]
        trials = [t["job_id"] for t in sweep.json()["trials"]]
        for trial in trials:
            shown = client.get(f"/jobs/{trial}").json()
            assert shown["pending_reason"] == job["pending_reason"]
        assert client.get(f"/sweeps/{sweep.json()['id']}").json()["notes"] == [WHOLE]
        client.post(f"/jobs/{trials[0]}/cancel").raise_for_status()
        with live.prepared.app.state.danlu.db.session() as s:  # type: ignore[union-attr]
            _, later = sweeps.advance(s, sweep.json()["id"])
        assert len(later) == 1  # the third trial, submitted by the reconcile loop's pass
        assert client.get(f"/jobs/{later[0]}").json()["pending_reason"] == job["pending_reason"]


def test_an_explicit_gpu_memory_tells_nothing() -> None:
    from danlu.core.spec import parse_spec
    from danlu.server.routes.estimation import Estimate, submission_notes

    explicit = parse_spec(spec("t", "pass", resources={"gpus": 1, "gpu_memory": 2**30}))
    assert submission_notes(explicit, Estimate(2**30)) == []
    auto = parse_spec(_auto("t"))
    assert submission_notes(auto, Estimate(None, WHOLE)) == [WHOLE]
