"""The benchmarks' flags: a bad value is refused by argparse (exit 2, a message naming the
flag and what it accepts, nothing printed on stdout) before any work, not a traceback halfway
through a run; and ``checkpoint_stall.py`` leaves no checkpoints behind in the temp folder.

The Pollux benchmarks' refusals run the scripts as subprocesses (they exit at parsing, before
loading any data); the shared parsers of ``benchmarks/danlu_pollux.py`` are also called
directly. The other refusals run a script's ``main()`` in-process with the first step of its
run stubbed to fail the test (a flag let through would start the whole run), and so does the
cleanup check of ``checkpoint_stall.py`` (no torch to import again in a subprocess)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
POLLUX_SCRIPTS = (
    "artifact_crosscheck",
    "contention",
    "danlu_pollux",
    "jct_bound",
    "optimus_oracle",
    "policy_headroom",
    "pollux_baseline",
    "pollux_jitter",
)
"""The benchmarks that take ``--loads`` and ``--workloads`` of the Pollux workloads."""
KNOB_SCRIPTS = ("artifact_crosscheck", "danlu_pollux", "policy_headroom", "pollux_jitter")
"""The benchmarks whose ``--set KNOB=VALUE`` sets a DanluPolicy knob."""
REQUIRED = {"artifact_crosscheck": ("--artifact", "/nonexistent-artifact")}
"""Flags a script requires, given so that parsing reaches the flag under test."""
TINY_STALL = (
    *("--width", "8", "--depth", "1", "--batch", "2"),
    *("--steps", "2", "--every", "1", "--repeats", "1"),
)
"""The smallest run of ``checkpoint_stall.py`` (two checkpoints: the first is not counted)."""


def run_benchmark(name: str, *flags: str) -> subprocess.CompletedProcess[str]:
    """``benchmarks/<name>.py`` run with ``flags`` (and the flags it requires) from the
    repository root, ``danlu`` importable from ``src``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), *REQUIRED.get(name, ()), *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,  # a guard against a hang, not a measurement
    )


def assert_refused(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """An argparse refusal: exit 2, the usage line and every needle on stderr, no output."""
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "usage:" in result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr
    assert result.stdout == ""


def refused_in_process(
    module: ModuleType,
    stub: str,
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> str:
    """``module.main()`` run with ``argv``, its ``stub`` (what it calls once the flags are
    parsed) failing the test: asserts an argparse refusal (exit 2, nothing on stdout) and
    returns what went to stderr. In-process: no interpreter (nor torch) to start."""

    def ran_past_parsing(*_args: object, **_kwargs: object) -> None:
        raise AssertionError(f"{argv} was let through to the run")

    monkeypatch.setattr(module, stub, ran_past_parsing)
    monkeypatch.setattr(sys, "argv", [f"{module.__name__}.py", *argv])
    with pytest.raises(SystemExit) as exited:
        module.main()
    out, err = capsys.readouterr()
    assert exited.value.code == 2, err
    assert out == ""
    assert "usage:" in err
    return err


@pytest.fixture
def load_benchmark(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], ModuleType]:
    """Imports ``benchmarks/<name>.py`` as the module ``name`` for one test (their folder on
    ``sys.path``, as they import each other; both undone after the test)."""

    def load(name: str) -> ModuleType:
        monkeypatch.syspath_prepend(str(BENCHMARKS))
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
        return module

    return load


# --- --loads / --workloads of the Pollux benchmarks ---------------------------------------


def test_loads_are_read_by_value(load_benchmark: Callable[[str], ModuleType]) -> None:
    """``1`` is the 1.0x load (and ``0.50`` the 0.5x one), named as the tables name them."""
    pollux = load_benchmark("danlu_pollux")
    assert pollux.parse_loads("1,0.50,1.5") == ["1.0", "0.5", "1.5"]
    assert pollux.parse_loads(" 1.0 ") == ["1.0"]
    assert pollux.parse_load("1") == "1.0"
    assert pollux.parse_workloads("1,2,3,4") == [1, 2, 3, 4]
    assert pollux.parse_workloads("4, 2") == [4, 2]


@pytest.mark.parametrize(
    "text", ["0.7", "2", "x", "1.0,", ""], ids=["0.7", "2", "x", "comma", "empty"]
)
def test_parse_loads_refuses(load_benchmark: Callable[[str], ModuleType], text: str) -> None:
    pollux = load_benchmark("danlu_pollux")
    with pytest.raises(argparse.ArgumentTypeError, match=r"0\.5, 1\.0, 1\.5"):
        pollux.parse_loads(text)


@pytest.mark.parametrize("text", ["1,", "5", "0", "x", ""], ids=["comma", "5", "0", "x", "empty"])
def test_parse_workloads_refuses(load_benchmark: Callable[[str], ModuleType], text: str) -> None:
    pollux = load_benchmark("danlu_pollux")
    with pytest.raises(argparse.ArgumentTypeError, match="1, 2, 3, 4"):
        pollux.parse_workloads(text)


@pytest.mark.parametrize("name", POLLUX_SCRIPTS)
def test_unknown_load_refused(name: str) -> None:
    """Not a KeyError after the header: an argparse error naming the valid loads."""
    assert_refused(
        run_benchmark(name, "--loads", "0.7", "--workloads", "1"),
        "--loads",
        "0.7",
        "0.5, 1.0, 1.5",
    )


@pytest.mark.parametrize("name", (*POLLUX_SCRIPTS, "failure_cost"))
def test_bad_workloads_refused(name: str) -> None:
    """A trailing comma (or a workload that is not 1-4) is refused with the valid ones."""
    loads = ("--load", "0.5") if name == "failure_cost" else ("--loads", "0.5")
    assert_refused(run_benchmark(name, *loads, "--workloads", ",1"), "--workloads", "1, 2, 3, 4")
    assert_refused(run_benchmark(name, *loads, "--workloads", "5"), "--workloads", "5")


def test_failure_cost_load_refused() -> None:
    assert_refused(run_benchmark("failure_cost", "--load", "0.7"), "--load", "0.5, 1.0, 1.5")


# --- --set KNOB=VALUE ----------------------------------------------------------------------


@pytest.mark.parametrize("name", (*KNOB_SCRIPTS, "server_round"))
def test_unknown_knob_refused(name: str) -> None:
    """Not an AttributeError: the knob named, and the valid ones listed."""
    assert_refused(
        run_benchmark(
            name, "--set", "nosuch=1", *(("--loads", "0.5") if name != "server_round" else ())
        ),
        "--set",
        "nosuch",
        "move_budget",
        "restart_cost",
    )


@pytest.mark.parametrize(
    "setting, needle",
    [
        ("move_budget=abc", "move_budget"),
        ("move_budget=-1", "move_budget"),
        ("move_budget", "KNOB=VALUE"),
        ("lend=maybe", "lend"),
        ("_memo=1", "_memo"),
    ],
    ids=["not-an-int", "out-of-range", "no-value", "not-a-bool", "private"],
)
def test_bad_knob_value_refused(
    load_benchmark: Callable[[str], ModuleType],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    setting: str,
    needle: str,
) -> None:
    """Run in-process, the data loading that follows the parsing stubbed: a value that passes
    the parsing would start the whole run."""
    pollux = load_benchmark("danlu_pollux")
    err = refused_in_process(pollux, "load_profiles", ["--set", setting], monkeypatch, capsys)
    assert "--set" in err and needle in err, err


def test_headroom_restart_cost_knob_refused(
    load_benchmark: Callable[[str], ModuleType],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``policy_headroom.py`` passes ``--restart-cost`` to the policy itself: ``--set
    restart_cost`` would be given twice (a TypeError after the header)."""
    headroom = load_benchmark("policy_headroom")
    err = refused_in_process(
        headroom, "load_profiles", ["--set", "restart_cost=5"], monkeypatch, capsys
    )
    assert "--restart-cost" in err, err


def test_knob_settings_parsed(load_benchmark: Callable[[str], ModuleType]) -> None:
    """Valid settings keep their meaning: each knob's type, booleans by word."""
    pollux = load_benchmark("danlu_pollux")
    parser = argparse.ArgumentParser()
    pollux.add_knob_option(parser)
    args = parser.parse_args(
        [
            *("--set", "move_budget=8", "--set", "hysteresis=0.2", "--set", "lend=false"),
            *("--set", "loan_all=yes", "--set", "placement=first-fit"),
        ]
    )
    assert pollux.knob_settings(parser, args) == {
        "move_budget": 8,
        "hysteresis": 0.2,
        "lend": False,
        "loan_all": True,
        "placement": "first-fit",
    }


# --- the other benchmarks ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, stub, flags, needle",
    [
        ("checkpoint_incremental", "run", ("--every", "0"), "--every"),
        ("checkpoint_incremental", "run", ("--steps", "1", "--every", "1"), "--steps"),
        ("checkpoint_incremental", "run", ("--full-every", "1"), "--full-every"),
        ("checkpoint_stall", "build", ("--every", "0"), "--every"),
        ("checkpoint_stall", "build", ("--steps", "1", "--every", "1"), "--steps"),
        ("checkpoint_stall", "build", ("--repeats", "0"), "--repeats"),
        ("backfill_estimates", "synthetic_workload", ("--nodes", "0"), "--nodes"),
        ("backfill_estimates", "synthetic_workload", ("--gpus-per-node", "0"), "--gpus-per-node"),
    ],
    ids=[
        "incremental-every-0",
        "incremental-one-checkpoint",
        "incremental-full-every-1",
        "stall-every-0",
        "stall-one-checkpoint",
        "stall-repeats-0",
        "backfill-nodes-0",
        "backfill-gpus-per-node-0",
    ],
)
def test_bad_counts_refused(
    load_benchmark: Callable[[str], ModuleType],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    stub: str,
    flags: tuple[str, ...],
    needle: str,
) -> None:
    """A count that would divide by zero, or leave nothing to take a median of, is refused
    before the run (``stub``: the run's first step)."""
    err = refused_in_process(load_benchmark(name), stub, list(flags), monkeypatch, capsys)
    assert needle in err, err


def test_sched_latency_churn_above_running() -> None:
    """Fewer running jobs than ``--churn``: the running ones all finish, no ValueError."""
    result = run_benchmark(
        "sched_latency",
        *("--nodes", "10", "--pending", "100", "--running", "10", "--repeats", "3"),
        *("--first-repeats", "1", "--policies", "fifo"),
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1].startswith("fifo ")


def test_checkpoint_stall_removes_its_checkpoints(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    load_benchmark: Callable[[str], ModuleType],
) -> None:
    """A finished run (the smallest one) leaves nothing in the temp folder."""
    stall = load_benchmark("checkpoint_stall")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["checkpoint_stall.py", *TINY_STALL])
    stall.main()
    assert "stall/sync" in capsys.readouterr().out
    assert list(tmp_path.glob("danlu-stall-*")) == []


def test_checkpoint_stall_removes_them_on_interrupt(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    load_benchmark: Callable[[str], ModuleType],
) -> None:
    """A run stopped halfway (Ctrl-C in a training run) removes its folder too."""
    stall = load_benchmark("checkpoint_stall")
    trained: list[str] = []
    folders: list[Path] = []
    real_train = stall.train

    def interrupted(*args: object) -> object:
        if trained:  # the second run (the first one with checkpoints) is interrupted
            folders.extend(tmp_path.glob("danlu-stall-*"))
            raise KeyboardInterrupt
        trained.append("plain")
        return real_train(*args)

    monkeypatch.setattr(stall, "train", interrupted)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["checkpoint_stall.py", *TINY_STALL])
    with pytest.raises(KeyboardInterrupt):
        stall.main()
    assert trained == ["plain"]
    assert len(folders) == 1  # the run had its folder in the temp folder
    assert list(tmp_path.glob("danlu-stall-*")) == []


@pytest.mark.parametrize("policy", ["priority", "danlu"])
@pytest.mark.parametrize("shared", [0.0, 0.3], ids=["whole", "shared"])
def test_sched_latency_draining_never_over_allocates(
    load_benchmark: Callable[[str], ModuleType], policy: str, shared: float
) -> None:
    """``--preempting``: what a plan places on GPUs its own victims still drain waits (the
    server defers it), so no GPU ever holds more than its compute or memory between rounds
    (it did: the next round's policy then raised PlacementError on the view)."""
    import random

    from danlu.sched import make_policy

    bench = load_benchmark("sched_latency")
    view = bench.build_view(6, 8, 120, 30, shared=shared)
    rng = random.Random(3)
    draining: set[str] = set()
    scheduler = make_policy(policy)
    preempted = 0
    for _ in range(12):
        plan = scheduler.schedule(view)
        preempted += len(plan.preempts)
        view = bench.apply_plan(view, plan, 5, rng, draining, shared)
        milli: dict[tuple[int, int], int] = {}
        memory: dict[tuple[int, int], int] = {}
        for job in view.running:
            for s in job.allocation.shares:
                milli[(s.node, s.gpu)] = milli.get((s.node, s.gpu), 0) + s.milli
                memory[(s.node, s.gpu)] = memory.get((s.node, s.gpu), 0) + s.memory
        over = [
            (n, g)
            for (n, g), m in milli.items()
            if m > 1000 or memory[(n, g)] > view.cluster.nodes[n].gpu_type.memory
        ]
        assert not over, over
    assert preempted > 0  # the case under test happened
