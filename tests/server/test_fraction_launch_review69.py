"""Two ``gpu_fraction`` jobs without ``gpu_memory`` packed on one GPU both start a
process, each capped to its part of the GPU's memory.

The first used to take all the GPU's free memory, the second none: its slot was uncapped
("the whole GPU"), the local executor refused it beside the first run every pass, and the job
stayed RUNNING without a process (billed, no log, no event)."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import live_server, spec, submit, wait_for, wait_state

from danlu.core.cluster import MILLI_PER_GPU
from danlu.core.units import GiB

# Writes the GPU and memory cap it was given to the file named by its argument, then waits
# (so that both runs are alive at once, as in the report) until cancelled.
_REPORT = (
    "import json, os, sys, time\n"
    "keys = ('CUDA_VISIBLE_DEVICES', 'DANLU_GPU_MEMORY_LIMIT')\n"
    "out = {k: os.environ.get(k) for k in keys}\n"
    "open(sys.argv[1] + '.tmp', 'w').write(json.dumps(out))\n"
    "os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
    "time.sleep(600)\n"
)


def test_two_fraction_jobs_on_one_gpu_both_run(tmp_path: Path) -> None:
    reports = {name: tmp_path / f"{name}.json" for name in ("frac1", "frac2")}
    with live_server(tmp_path, fake_gpus="1x24GiB:A10") as live, live.client() as c:
        jobs = []
        for name, report in reports.items():
            body = spec(name, _REPORT, resources={"gpus": 1, "gpu_fraction": 0.4})
            body["command"] = [*body["command"], str(report)]
            jobs.append(submit(c, body))
        for job in jobs:
            wait_state(c, job["id"], "RUNNING")
        # Both processes ran (the second never did: no run, no log).
        wait_for(lambda: all(path.exists() for path in reports.values()), 30)
        cap = 400 * (24 * GiB) // MILLI_PER_GPU
        for path in reports.values():
            seen = json.loads(path.read_text())
            assert seen == {"CUDA_VISIBLE_DEVICES": "0", "DANLU_GPU_MEMORY_LIMIT": str(cap)}
        for job in jobs:
            assert c.post(f"/jobs/{job['id']}/cancel").status_code == 200
