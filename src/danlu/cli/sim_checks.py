"""Bounds and checks of ``danlu sim``'s flags that are refused before any simulation runs,
as clear errors (:class:`ConfigError`, exit 2) naming the flag: the largest cluster and
load it simulates, the plot formats it writes, seed lists without repeats, the failure
settings, flags given without the flag that enables them, and output files that cannot be
written or would replace an input."""

from __future__ import annotations

import math
from collections.abc import Collection
from pathlib import Path

from danlu.core.errors import ConfigError
from danlu.core.units import parse_duration
from danlu.sim.failures import Failures
from danlu.sim.openb import MOST_LOAD
from danlu.sim.plan import MOST_NODES as MOST_NODES  # --nodes and sim plan --max-nodes at most

MOST_GPUS_PER_NODE = 128
"""``--gpus-per-node`` at most (a real node has 8 or 16; its arrays grow with the GPUs)."""
# ``sim pack --load`` at most: the experiment's own bound (danlu.sim.openb.MOST_LOAD)
PLOT_FORMATS = ("png", "svg", "pdf")
"""The file types ``sim run --plot`` writes, by the file name's extension."""


def check_plot(path: Path | None) -> None:
    """Refuse a ``--plot`` file whose extension is not one of :data:`PLOT_FORMATS`, or a
    ``--plot`` where matplotlib cannot be imported (installed without its dependencies, or
    broken), before the simulation runs: matplotlib would fail after it, or add an extension
    itself; without it the run ended in a traceback once it was done."""
    if path is None:
        return
    kind = path.suffix.lower().lstrip(".")
    if kind not in PLOT_FORMATS:
        shown = ", ".join(f".{k}" for k in PLOT_FORMATS)
        got = f"extension .{kind}" if kind else "no extension"
        raise ConfigError(
            f"--plot {path} has {got}; name a file ending in {shown} (e.g. timeline.png)"
        )
    try:
        import matplotlib  # noqa: F401  (the plot's import, made before the run)
    except ImportError as exc:
        raise ConfigError(
            f"--plot needs matplotlib, which cannot be imported here ({exc}); install it "
            "(pip install matplotlib) or leave --plot out"
        ) from None


def check_load(load: float) -> None:
    """``sim pack --load``: finite, above 0 and at most :data:`MOST_LOAD`."""
    if not (load > 0 and load <= MOST_LOAD):  # also refuses NaN
        raise ConfigError(
            f"--load must be a finite number above 0 and at most {MOST_LOAD:g}, e.g. 1.0 "
            f"(got {load})"
        )


def check_distinct_seeds(seeds: list[int]) -> None:
    """Refuse a ``--seeds`` list that names a seed twice (it would be counted twice in the
    mean, as if it were two samples)."""
    seen: set[int] = set()
    for seed in seeds:
        if seed in seen:
            raise ConfigError(f"--seeds: seed {seed} is named twice; name each seed once")
        seen.add(seed)


ENABLED_BY: dict[str, tuple[str, ...]] = {
    "node_repair": ("node_mtbf",),
    "gpu_repair": ("gpu_mtbf",),
    "checkpoint_every": ("node_mtbf", "gpu_mtbf"),
    "failure_seed": ("node_mtbf", "gpu_mtbf"),
    "interference_gpu": ("interference",),
}
"""The options (by parameter name) that change nothing without one of these others: the
failure settings without failures, the GPU of Gavel's file without the file."""
_ENABLER_EXAMPLES = {
    "node_mtbf": "--node-mtbf 30d",
    "gpu_mtbf": "--gpu-mtbf 365d",
    "interference": "--interference ../shared/data/gavel/physical_cluster_throughputs.json",
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_traces(traces: Path, given: Collection[str]) -> None:
    """Refuse a ``--traces`` the user gave (``given``: :func:`given_options`) that is not a
    folder: a workload without Pollux measurements ignored it, so a mistyped path ran as if
    it had been read. (The default is checked where a Pollux workload needs it.)"""
    if "traces" in given and not traces.is_dir():
        what = "is not a folder" if traces.exists() else "does not exist"
        raise ConfigError(
            f"--traces {traces} {what}: point it at a folder of per-application "
            "measurements in the Pollux format (e.g. ../shared/data/pollux/traces)"
        )


def check_list_file(path: Path, flag: str, example: str) -> None:
    """Refuse a ``sim pack --pods``/``--nodes`` path that is a folder or does not exist,
    naming the flag and a file to give (the reader's own error named neither, only an
    errno). Anything else is left to the reader (a pipe is read; ``/dev/zero`` refused)."""
    if path.is_dir() or not path.exists():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise ConfigError(f"{flag} {path} {what}; give the CSV file, e.g. {example}")


def check_enabled(given: Collection[str]) -> None:
    """Refuse an option of :data:`ENABLED_BY` given without any of the options that enable
    it (``--node-repair 4h`` without ``--node-mtbf``: no node fails, so it changed nothing
    and looked as if it had)."""
    for name, enablers in ENABLED_BY.items():
        if name in given and not any(enabler in given for enabler in enablers):
            needed = " or ".join(_flag(enabler) for enabler in enablers)
            example = " or ".join(_ENABLER_EXAMPLES[enabler] for enabler in enablers)
            raise ConfigError(
                f"{_flag(name)} changes nothing without {needed}, which it goes with: add "
                f"{example}, or leave {_flag(name)} out"
            )


SYNTHETIC_ONLY = ("jobs", "seed")
"""The options (by parameter name) that shape the built-in synthetic workload, and so change
nothing with ``--workload``."""


def check_synthetic(given: Collection[str]) -> None:
    """Refuse an option of :data:`SYNTHETIC_ONLY` given with ``--workload`` (``given``:
    :func:`given_options`): the file's jobs are simulated, so ``--jobs 5000`` or ``--seed 7``
    was read as nothing while the results looked as if they had been."""
    if "workload" not in given:
        return
    for name in SYNTHETIC_ONLY:
        if name in given:
            raise ConfigError(
                f"{_flag(name)} shapes the built-in synthetic workload and changes nothing "
                f"with --workload, whose jobs are simulated: leave out {_flag(name)} (or "
                "--workload, for the synthetic one)"
            )


def _positive_duration(flag: str, text: str) -> float:
    seconds = parse_duration(text, flag)
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(
            f"{flag} must be a duration above 0 and finite, e.g. 30d, 2h or 30m; got {text!r}"
        )
    return seconds


def failure_settings(
    nodes: tuple[str | None, str],
    gpus: tuple[str | None, str],
    checkpoint_every: str,
    seed: int,
) -> tuple[Failures | None, Failures | None]:
    """The nodes' and the GPUs' failures: ``(--node-mtbf, --node-repair)`` and
    ``(--gpu-mtbf, --gpu-repair)``, with ``--checkpoint-every`` and ``--failure-seed``
    (None for a unit without its MTBF). Every duration is parsed and must be above 0, with
    its MTBF or without (:func:`check_enabled` refuses one given without it)."""
    every = _positive_duration("--checkpoint-every", checkpoint_every)
    out: list[Failures | None] = []
    for unit, (mtbf, repair) in (("node", nodes), ("gpu", gpus)):
        repair_seconds = _positive_duration(f"--{unit}-repair", repair)
        if mtbf is None:
            out.append(None)
        else:
            mean = _positive_duration(f"--{unit}-mtbf", mtbf)
            out.append(Failures(mean, repair_seconds, every, seed))
    return out[0], out[1]


def check_output(path: Path | None, flag: str) -> None:
    """Refuse an output path that cannot be written before any work is done, so a long
    simulation does not end in an error that loses its results."""
    if path is None:
        return
    if str(path) == "-":  # not standard output: the tables are printed there
        raise ConfigError(
            f"{flag} -: give a file name ({flag} writes a file, here one named '-'; the "
            "tables go to standard output)"
        )
    if path.is_dir():
        raise ConfigError(f"{flag} {path} is a folder; give a file name, e.g. {path / 'out'}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path}: folder {parent} does not exist; create it first")


def check_distinct(outputs: dict[str, Path | None], inputs: dict[str, Path | None]) -> None:
    """Refuse an output path (by its flag) that resolves to an input file or to another
    output, so that writing the results cannot replace what was read or each other."""
    taken: dict[Path, str] = {}
    for flag, path in inputs.items():
        if path is not None:
            taken.setdefault(path.expanduser().resolve(), flag)
    for flag, path in outputs.items():
        if path is None:
            continue
        where = path.expanduser().resolve()
        if where in taken:
            raise ConfigError(
                f"{flag} {path} is the file of {taken[where]}; write the results elsewhere"
            )
        taken[where] = flag
