"""A Slurm ``Gres`` or a Ray accelerator that names a GPU model without its size (``a100``)
takes the size of the executor's default type where that is one of the model's sizes: an
A100-40GB cluster configured so (``DANLU_SLURM_GPU_TYPE=A100-40GB``) is no longer planned as
80 GB GPUs, which packed jobs onto memory the GPUs lack."""

from __future__ import annotations

from pathlib import Path

import pytest

from danlu.core.cluster import GPU_TYPES, listed_gpu_type
from danlu.core.errors import UnknownNameError
from danlu.executors.ray_nodes import node_gpu_type
from danlu.executors.slurm import SlurmExecutor
from danlu.executors.slurmctl import SlurmCommands, SlurmNode


@pytest.mark.parametrize(
    ("name", "default", "expected"),
    [
        ("a100", "A100-40GB", "A100-40GB"),
        ("A100", "A100-80GB", "A100-80GB"),
        ("a100", "generic", "A100-80GB"),  # no size given anywhere: the largest, as before
        ("a100", "V100-16GB", "A100-80GB"),  # another model's size says nothing
        ("v100", "V100-16GB", "V100-16GB"),
        ("a100-80", "A100-40GB", "A100-80GB"),  # a size named wins
        ("h100", "A100-40GB", "H100"),
    ],
)
def test_a_listed_model_takes_the_default_types_size(
    name: str, default: str, expected: str
) -> None:
    assert listed_gpu_type(name, GPU_TYPES[default]).name == expected


def test_an_unknown_listed_name_is_refused_as_gpu_type_refuses_it() -> None:
    with pytest.raises(UnknownNameError):
        listed_gpu_type("b999", GPU_TYPES["A100-40GB"])


def test_a_ray_node_naming_only_a100_takes_the_default_size() -> None:
    resources = {"accelerator_type:A100": 1.0}
    assert node_gpu_type(resources, GPU_TYPES["A100-40GB"]).name == "A100-40GB"
    assert node_gpu_type(resources, GPU_TYPES["generic"]).name == "A100-80GB"


def test_a_slurm_gres_a100_node_is_an_a100_40gb_on_such_a_cluster(tmp_path: Path) -> None:
    executor = SlurmExecutor(SlurmCommands({}), tmp_path / "state", gpu_type=GPU_TYPES["A100-40GB"])
    listed = SlurmNode("gpu07", "10.0.0.7", 8, "a100", 64, 512 << 30, "IDLE")
    node = executor._node(listed)
    assert (node.gpus, node.gpu_type.name, node.gpu_type.memory) == (
        8,
        "A100-40GB",
        GPU_TYPES["A100-40GB"].memory,
    )
