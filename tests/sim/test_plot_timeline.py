"""The timeline plot of ``danlu sim run --plot``: the workload's name (its file's name) is
shown as written, and the figure is closed even when it cannot be saved."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from danlu.core.cluster import Cluster
from danlu.sched.registry import make_policy
from danlu.sim.config import SimConfig
from danlu.sim.engine import Simulator
from danlu.sim.metrics import SimResult
from danlu.sim.report import plot_timeline
from danlu.sim.workload import load_workload


@pytest.fixture
def pyplot() -> ModuleType:
    """matplotlib's pyplot (the Agg backend, as the plot uses), with no figure open."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.close("all")
    return plt


def _result(tmp_path: Path, name: str) -> SimResult:
    path = tmp_path / f"{name}.csv"
    path.write_text("name,submit_time,gpus,duration\na,0,1,50\nb,30,2,70\n")
    workload = load_workload(path)
    return Simulator(Cluster.homogeneous(1, 4), make_policy("fifo"), workload, SimConfig()).run()


@pytest.mark.parametrize("name", ["costs$\\frac$", "$x^$", "a$b$c"])
def test_a_workload_name_with_dollar_signs_is_plotted_as_text(
    tmp_path: Path, pyplot: ModuleType, name: str
) -> None:
    result = _result(tmp_path, name)
    assert result.workload == name
    out = plot_timeline(result, tmp_path / "timeline.png")
    assert out.read_bytes().startswith(b"\x89PNG")
    assert pyplot.get_fignums() == []


def test_a_plot_that_cannot_be_saved_closes_its_figure(tmp_path: Path, pyplot: ModuleType) -> None:
    result = _result(tmp_path, "plain")
    with pytest.raises(OSError):
        plot_timeline(result, tmp_path / "missing" / "timeline.png")
    assert pyplot.get_fignums() == []
