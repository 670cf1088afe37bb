"""Bounds and checks of ``danlu sim``'s flags that are refused before any simulation runs,
as clear errors (:class:`ConfigError`, exit 2) naming the flag: the largest cluster and
load it simulates, the plot formats it writes, and seed lists without repeats."""

from __future__ import annotations

from pathlib import Path

from danlu.core.errors import ConfigError

MOST_NODES = 4096
"""``--nodes`` (and ``sim plan --max-nodes``) at most: a simulated cluster's nodes."""
MOST_GPUS_PER_NODE = 128
"""``--gpus-per-node`` at most (a real node has 8 or 16; its arrays grow with the GPUs)."""
MOST_LOAD = 10.0
"""``sim pack --load`` at most: arrived demand of ten times the capacity (the experiment
packs pods one by one until the demand reaches it, so its time grows with the load; the
allocation ratio stops changing well before, at about 1.0 to 1.5)."""
PLOT_FORMATS = ("png", "svg", "pdf")
"""The file types ``sim run --plot`` writes, by the file name's extension."""


def check_plot(path: Path | None) -> None:
    """Refuse a ``--plot`` file whose extension is not one of :data:`PLOT_FORMATS`, before
    the simulation runs (matplotlib would fail after it, or add an extension itself)."""
    if path is None:
        return
    kind = path.suffix.lower().lstrip(".")
    if kind not in PLOT_FORMATS:
        shown = ", ".join(f".{k}" for k in PLOT_FORMATS)
        got = f"extension .{kind}" if kind else "no extension"
        raise ConfigError(
            f"--plot {path} has {got}; name a file ending in {shown} (e.g. timeline.png)"
        )


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
