"""Plots of a simulation (PNG, matplotlib) -- imported only when a plot is asked for."""

from __future__ import annotations

from pathlib import Path

from danlu.core.values import counted
from danlu.sim.metrics import SimResult


def plot_timeline(result: SimResult, path: str | Path) -> Path:
    """Queue length and GPUs in use over time, as one PNG with two panels.

    Raises:
        OSError: the file cannot be written (the figure is closed all the same).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    timeline = result.timeline
    hours = [t / 3600.0 for t in timeline.times]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    try:  # the figure is closed even when it cannot be saved (pyplot keeps it otherwise)
        top.step(hours, timeline.pending, where="post", color="tab:orange", label="pending")
        top.step(hours, timeline.running, where="post", color="tab:blue", label="running")
        top.set_ylabel("jobs")
        top.legend(loc="upper right")
        title = f"{result.workload} - {result.policy} ({counted(result.total_gpus, 'GPU')})"
        top.set_title(title, parse_math=False)  # a name's $...$ is text, not mathtext
        bottom.step(hours, timeline.allocated_gpus, where="post", color="tab:green")
        bottom.axhline(result.total_gpus, color="grey", linestyle="--", linewidth=0.8)
        bottom.set_ylabel("GPUs allocated")
        bottom.set_xlabel("time (hours)")
        bottom.set_ylim(0, result.total_gpus * 1.05)
        fig.tight_layout()
        out = Path(path)
        fig.savefig(out, dpi=110)
    finally:
        plt.close(fig)
    return out
