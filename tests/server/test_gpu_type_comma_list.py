"""A ``gpu_type`` of several types written as one comma-separated string (``gpu_type:
'A100,H100'``) is refused at admission as one unknown type, with the cluster's types; the
error now also says to write a list when each part is a type danlu or the cluster knows."""

from __future__ import annotations

import pytest

from danlu.core.cluster import Cluster, GpuType, Node, gpu_type
from danlu.core.spec import parse_spec
from danlu.core.units import GiB
from danlu.server.errors import AdmissionError
from danlu.server.services import admission

CLUSTER = Cluster((Node("a", 4, gpu_type("A100-80GB")), Node("h", 4, gpu_type("H100"))))


def _refused(kinds: str, cluster: Cluster = CLUSTER) -> str:
    body = {"name": "a", "command": ["true"], "resources": {"gpus": 1, "gpu_type": kinds}}
    with pytest.raises(AdmissionError) as info:
        admission.canonical_gpu_types(parse_spec(body), cluster)
    assert info.value.field == "resources.gpu_type"
    return str(info.value)


@pytest.mark.parametrize(
    ("kinds", "listed"),
    [
        ("A100,H100", "[A100, H100]"),
        ("a100, h100", "[a100, h100]"),  # blanks around a name: refused by the spec itself
        ("H100,L4", "[H100, L4]"),  # L4 is a type danlu knows, though not here
    ],
)
def test_a_comma_separated_string_of_known_types_says_to_write_a_list(
    kinds: str, listed: str
) -> None:
    said = _refused(kinds)
    assert f"unknown GPU type {kinds!r}; this cluster has A100-80GB, H100" in said
    assert said.endswith(f"; write a list: {listed}")


def test_a_type_only_the_cluster_knows_counts_as_known() -> None:
    cluster = Cluster((Node("x", 2, GpuType("Custom-9", 48 * GiB)), *CLUSTER.nodes))
    assert _refused("Custom-9,H100", cluster).endswith("; write a list: [Custom-9, H100]")


@pytest.mark.parametrize("kinds", ["A100,B300", "A100,,H100", "B300", "A100;H100"])
def test_no_list_hint_unless_each_part_is_a_known_type(kinds: str) -> None:
    said = _refused(kinds)
    assert "write a list" not in said
    assert said.endswith("this cluster has A100-80GB, H100")
