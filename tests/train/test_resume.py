"""Exact resume: SIGKILL a real training process many times, and corrupt checkpoints.

Both end with parameters bit-identical (``torch.equal`` on every tensor) to an
uninterrupted run of the same script (tests/train/resume_script.py).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "resume_script.py"
SRC = HERE.parents[1] / "src"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), str(HERE), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    return env


def _assert_same(a_path: Path, b_path: Path) -> None:
    a = torch.load(a_path, weights_only=True)
    b = torch.load(b_path, weights_only=True)
    assert a.keys() == b.keys()
    different = [k for k in a if not torch.equal(a[k], b[k])]
    assert not different, f"parameters differ: {different}"


def _read_progress(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (FileNotFoundError, ValueError):
        return -1


class Zygote:
    """``resume_script.py --zygote``: a process that has imported torch and forks runs."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--zygote"],
            env=_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def _ask(self, cmd: dict[str, object]) -> dict[str, int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def run(self, argv: list[str]) -> int:
        return self._ask({"op": "run", "argv": argv})["pid"]

    def wait(self, pid: int) -> int:
        return self._ask({"op": "wait", "pid": pid})["exitcode"]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def test_sigkill_at_random_steps_resumes_bit_identical(tmp_path: Path) -> None:
    """>= 20 SIGKILLs at seeded random steps, resuming each time; then a cold resume."""
    steps, kills = 120, 22
    rng = random.Random(20260421)
    targets = sorted(rng.sample(range(2, steps - 10), kills))
    ckpt, progress = tmp_path / "ckpt", tmp_path / "progress"
    common = [
        "--ckpt",
        str(ckpt),
        "--steps",
        str(steps),
        "--out",
        str(tmp_path / "run.pt"),
        "--every",
        "2",
        "--progress",
        str(progress),
    ]
    zygote = Zygote()
    try:
        ref = zygote.run(
            [
                "--ckpt",
                str(tmp_path / "ref"),
                "--steps",
                str(steps),
                "--every",
                "2",
                "--out",
                str(tmp_path / "ref.pt"),
            ]
        )
        killed_at: list[int] = []
        for target in targets:
            progress.unlink(missing_ok=True)
            pid = zygote.run(common)
            deadline = time.monotonic() + 60
            while _read_progress(progress) < target:
                assert time.monotonic() < deadline, "the run made no progress"
                time.sleep(0.0005)
            os.kill(pid, signal.SIGKILL)
            assert zygote.wait(pid) == -signal.SIGKILL, "the run ended before the kill"
            killed_at.append(_read_progress(progress))
        assert zygote.wait(ref) == 0
    finally:
        zygote.close()
    assert len(killed_at) >= 20 and max(killed_at) < steps
    # The last leg in a cold interpreter, launched as a plain process.
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *common],
        env=_env(),
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert _read_progress(progress) == steps
    _assert_same(tmp_path / "ref.pt", tmp_path / "run.pt")


@pytest.fixture
def in_process() -> Iterator[object]:
    """Import the script's ``main`` and undo its process-wide settings afterwards."""
    sys.path.insert(0, str(HERE))
    threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    try:
        import resume_script

        yield resume_script.main
    finally:
        torch.set_num_threads(threads)
        torch._C._set_deterministic_algorithms(det)
        sys.path.remove(str(HERE))


def _corrupt(ckpt_dir: Path, how: str) -> None:
    newest = sorted(p for p in ckpt_dir.iterdir() if p.name.startswith("ckpt-"))[-1]
    if how == "truncate-tensors":
        f = newest / "tensors.pt"
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    elif how == "flip-byte":
        f = newest / "tensors.pt"
        data = bytearray(f.read_bytes())
        data[len(data) // 2] ^= 0x01
        f.write_bytes(bytes(data))
    elif how == "truncate-manifest":
        f = newest / "MANIFEST.json"
        f.write_bytes(f.read_bytes()[:20])
    elif how == "no-manifest":  # a checkpoint cut off before its manifest was written
        (newest / "MANIFEST.json").unlink()
    elif how == "empty-meta":
        (newest / "meta.json").write_bytes(b"")


@pytest.mark.parametrize(
    "how", ["truncate-tensors", "flip-byte", "truncate-manifest", "no-manifest", "empty-meta"]
)
def test_power_cut_falls_back_and_stays_bit_identical(tmp_path: Path, in_process, how: str) -> None:
    main = in_process
    common = ["--every", "10", "--no-async", "--keep-last", "3"]
    assert (
        main(
            [
                "--ckpt",
                str(tmp_path / "ref"),
                "--steps",
                "80",
                "--out",
                str(tmp_path / "ref.pt"),
                *common,
            ]
        )
        == 0
    )
    ckpt = tmp_path / "ckpt"
    assert (
        main(["--ckpt", str(ckpt), "--steps", "60", "--out", str(tmp_path / "x.pt"), *common]) == 0
    )
    _corrupt(ckpt, how)

    from danlu.train.checkpoint import CheckpointManager

    found = CheckpointManager(str(ckpt)).load_latest()
    assert found is not None and found[0] == 50  # fell back past the corrupt step 60
    assert (
        main(["--ckpt", str(ckpt), "--steps", "80", "--out", str(tmp_path / "run.pt"), *common])
        == 0
    )
    _assert_same(tmp_path / "ref.pt", tmp_path / "run.pt")
