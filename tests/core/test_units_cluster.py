"""Byte sizes, durations, GPU types, allocations and clusters."""

from __future__ import annotations

import pytest

from danlu.core.cluster import (
    GPU_TYPES,
    MILLI_PER_GPU,
    Allocation,
    Cluster,
    GpuShare,
    GpuType,
    Node,
    gpu_type,
    gpu_type_from_device,
)
from danlu.core.errors import SpecError, UnknownNameError
from danlu.core.units import (
    GiB,
    MiB,
    format_bytes,
    format_duration,
    format_energy,
    parse_bytes,
    parse_duration,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("20GiB", 20 * 1024**3),
        ("20 GiB", 20 * 1024**3),
        ("20gib", 20 * 1024**3),
        ("1.5GB", 1_500_000_000),
        ("512MiB", 512 * 1024**2),
        ("512M", 512_000_000),
        ("1k", 1000),
        ("1Ki", 1024),
        ("0.5KiB", 512),
        ("2TiB", 2 * 1024**4),
        ("3TB", 3 * 1000**4),
        ("7", 7),
        ("7B", 7),
        (" 42 ", 42),
        (1024, 1024),
        (2.0, 2),  # a float that is whole bytes (1.9 is refused: a fraction of a byte)
        (0, 0),
    ],
)
def test_parse_bytes(text: str | int | float, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["lots", "20 parsecs", "GiB", "-5GiB", "1e3", "", "5 G i B"])
def test_parse_bytes_rejects_non_sizes(bad: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_bytes(bad, "resources.gpu_memory")
    assert info.value.field == "resources.gpu_memory"
    assert "20GiB" in str(info.value)  # says how to write one


def test_parse_bytes_rejects_negative_and_bool() -> None:
    with pytest.raises(SpecError, match="negative"):
        parse_bytes(-1, "mem")
    with pytest.raises(SpecError, match="boolean"):
        parse_bytes(True, "mem")


def test_format_bytes() -> None:
    assert format_bytes(80 * GiB) == "80.0GiB"
    assert format_bytes(512) == "512B"
    assert format_bytes(1536 * MiB) == "1.5GiB"
    assert format_bytes(2 * 1024**4) == "2.0TiB"


def test_format_bytes_picks_the_unit_of_the_rounded_value() -> None:
    # 1023.99 KiB prints as 1024.0 at one decimal: that is the next unit's 1.00 (three
    # significant digits: no text of three decimals reads back as those bytes)
    assert format_bytes(1023.99 * 1024) == "1.00MiB"
    assert format_bytes(1023.96 * GiB) == "1.00TiB"
    assert format_bytes(-1023.99 * MiB) == "-1.00GiB"
    assert format_bytes(1023.94 * 1024) == "1023.9KiB"
    assert format_bytes(1023.99) == "1023B"  # whole bytes are not rounded up


@pytest.mark.parametrize(
    ("joules", "text"),
    [
        (950.0, "0.264 Wh"),
        (2.5e6, "694 Wh"),
        (1e9, "278 kWh"),
        (999.6 * 3600, "1 kWh"),  # 999.6 Wh rounds to 1000: printed "1e+03 Wh"
        (999_700 * 3600, "1 MWh"),
        (999.7e6 * 3600, "1000 MWh"),
        (2.5e9 * 3600, "2500 MWh"),
        (-999.6 * 3600, "-1 kWh"),
        (0.0, "0 Wh"),
    ],
)
def test_format_energy_picks_the_unit_of_the_rounded_value(joules: float, text: str) -> None:
    assert format_energy(joules) == text


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("h100", "H100"),
        ("H100", "H100"),
        ("a100-40gb", "A100-40GB"),
        ("A100", "A100-80GB"),
        ("V100M16", "V100-16GB"),
        ("v100m32", "V100-32GB"),
        ("v100", "V100-32GB"),
        ("4090", "RTX4090"),
        ("rtx-4090", "RTX4090"),
    ],
)
def test_gpu_type_names_and_aliases(name: str, canonical: str) -> None:
    assert gpu_type(name) is GPU_TYPES[canonical]


@pytest.mark.parametrize(
    ("device", "gib", "expected"),
    [
        ("NVIDIA H200", 140, "H200"),
        ("NVIDIA H200 NVL", 140, "H200"),
        ("NVIDIA H100 80GB HBM3", 80, "H100"),
        # Grace Hopper: an H100-class GPU with 96 GB, not an H200 (which has 141 GB)
        ("NVIDIA GH200 480GB", 95, "NVIDIA GH200 480GB"),
        ("NVIDIA GH200 144G HBM3e", 143, "NVIDIA GH200 144G HBM3e"),
        # model numbers match whole: an RTX A1000 (8 GB) is not an A100
        ("NVIDIA RTX A1000", 8, "NVIDIA RTX A1000"),
        ("NVIDIA A100 80GB PCIe", 80, "A100-80GB"),
        ("NVIDIA A100-SXM4-40GB", 40, "A100-40GB"),
        ("NVIDIA GeForce RTX 4090", 24, "RTX4090"),
    ],
)
def test_gpu_type_from_device_tells_h200_from_gh200(device: str, gib: int, expected: str) -> None:
    kind = gpu_type_from_device(device, gib * GiB)
    assert (kind.name, kind.memory) == (expected, gib * GiB)


def test_gpu_type_memory() -> None:
    assert gpu_type("H100").memory == 80 * GiB
    assert gpu_type("A100-40GB").memory == 40 * GiB
    assert gpu_type("V100M16").memory == 16 * GiB


def test_unknown_gpu_type_lists_names() -> None:
    with pytest.raises(UnknownNameError) as info:
        gpu_type("B200")
    message = str(info.value)
    assert "'B200'" in message
    for name in GPU_TYPES:
        assert name in message
    assert info.value.valid == sorted(GPU_TYPES)
    assert isinstance(info.value, KeyError)
    assert not message.startswith('"')  # not KeyError's quoted repr


def test_allocation_node_counts_keep_pick_order_per_node_sorts() -> None:
    alloc = Allocation.whole_gpus([(3, 0), (0, 0), (0, 1), (0, 2), (5, 1), (5, 0)])
    assert alloc.node_counts() == (1, 3, 2)  # node 3, then 0, then 5: the order picked
    assert alloc.per_node() == (3, 2, 1)  # descending
    assert alloc.nodes == (0, 3, 5)
    assert alloc.num_gpus == 6
    assert alloc.gpu_milli == 6 * MILLI_PER_GPU


def test_allocation_shares_and_emptiness() -> None:
    empty = Allocation()
    assert not empty and empty.num_gpus == 0 and empty.gpu_milli == 0
    shared = Allocation((GpuShare(0, 1, 250, GiB), GpuShare(0, 1, 250, GiB)))
    assert shared and shared.num_gpus == 1  # two shares of the same GPU
    assert shared.gpu_milli == 500
    assert not shared.shares[0].whole
    assert GpuShare(0, 0).whole
    assert Allocation.whole_gpus([(1, 2)], memory=5).shares == (GpuShare(1, 2, 1000, 5),)


def test_homogeneous_cluster_racks() -> None:
    cluster = Cluster.homogeneous(5, 4, "h100", nodes_per_rack=2)
    assert cluster.total_gpus == 20
    assert [n.rack for n in cluster.nodes] == ["rack-0", "rack-0", "rack-1", "rack-1", "rack-2"]
    assert cluster.racks() == ("rack-0", "rack-1", "rack-2")
    assert all(n.gpu_type is GPU_TYPES["H100"] for n in cluster.nodes)
    assert [cluster.gpu_offset(i) for i in range(5)] == [0, 4, 8, 12, 16]
    assert [n.name for n in cluster.nodes] == [f"node-{i}" for i in range(5)]
    one_rack = Cluster.homogeneous(3, 2)
    assert one_rack.racks() == ("rack-0",)
    assert one_rack.nodes[0].gpu_type is GPU_TYPES["generic"]


def test_cluster_arrays_heterogeneous() -> None:
    small = GpuType("small", 10)
    cluster = Cluster(
        (
            Node("a", 2, gpu_type("T4"), rack="r1"),
            Node("b", 0, rack="r0"),
            Node("c", 3, small, rack="r1"),
        )
    )
    arrays = cluster.arrays
    assert arrays.offsets.tolist() == [0, 2, 2]
    assert arrays.sizes.tolist() == [2, 0, 3]
    assert arrays.gpu_node.tolist() == [0, 0, 2, 2, 2]
    assert arrays.gpu_memory.tolist() == [16 * GiB] * 2 + [10] * 3
    assert arrays.rack_ids.tolist() == [1, 0, 1]  # sorted rack labels r0 < r1
    assert arrays.type_names == ("t4", "generic", "small")
    assert cluster.total_gpus == 5


def test_homogeneous_unknown_gpu_type() -> None:
    with pytest.raises(UnknownNameError):
        Cluster.homogeneous(1, 1, "nope")


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (3600, 3600.0),
        (2.5, 2.5),
        ("3600", 3600.0),
        ("90s", 90.0),
        ("30m", 1800.0),
        ("1h30m", 5400.0),
        ("1H 30M", 5400.0),
        ("1.5h", 5400.0),
        ("2d", 172800.0),
        ("04:00:00", 14400.0),  # Slurm's HH:MM:SS
        ("10:30", 630.0),  # and MM:SS, as Slurm reads it
        ("1-12", 129600.0),  # D-HH
        ("1-12:30", 131400.0),  # D-HH:MM
        ("2-00:00:05", 172805.0),
    ],
)
def test_parse_duration_reads_seconds_units_and_slurm_clock_forms(
    value: int | float | str, seconds: float
) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["", "h", "1y", "1h30", "1:2:3:4", "1-", "5 minutes"])
def test_parse_duration_refuses_what_is_not_a_duration_naming_the_forms(value: str) -> None:
    with pytest.raises(SpecError, match="is not a duration; write seconds") as info:
        parse_duration(value, "time_limit")
    assert info.value.field == "time_limit"


def test_format_duration_keeps_the_two_largest_units() -> None:
    assert [format_duration(s) for s in (0, 45.4, 60, 5400, 5430, 187200, -3)] == [
        "0s",
        "45s",
        "1m",
        "1h30m",
        "1h30m",
        "2d4h",
        "0s",
    ]


def test_a_time_is_a_delay_from_now_or_an_iso_moment() -> None:
    from datetime import datetime

    from danlu.core.units import parse_time

    now = 1_800_000_000.0
    assert parse_time("+2h", now) == now + 7200
    assert parse_time("90m", now) == now + 5400
    assert parse_time("+01:00:00", now) == now + 3600  # bare, 01:00:00 is a time of day
    assert parse_time("2027-01-01T00:00Z", now) == 1_798_761_600.0
    assert parse_time("2027-01-01T02:00+02:00", now) == 1_798_761_600.0
    naive = datetime(2027, 1, 1, 12, 30).astimezone()  # no offset: local time
    assert parse_time("2027-01-01T12:30", now) == naive.timestamp()
    for bad, needle in (("soon", "is not a time"), ("+-1h", "is not"), ("-5", "0 or more")):
        with pytest.raises(SpecError, match=needle) as caught:
            parse_time(bad, now, "--at")
        assert caught.value.field == "--at"


def test_since_is_a_duration_back_from_now_or_an_iso_moment() -> None:
    from danlu.core.units import parse_since

    now = 1_800_000_000.0
    assert parse_since("1h", now) == now - 3600
    assert parse_since("2d", now) == now - 172_800
    assert parse_since("0", now) == now
    assert parse_since("2027-01-01T00:00Z", now) == 1_798_761_600.0
    for bad, needle in (("yesterday", "is not a time"), ("-5", "0 or more")):
        with pytest.raises(SpecError, match=needle) as caught:
            parse_since(bad, now, "--since")
        assert caught.value.field == "--since"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("8.2GB", 8_200_000_000),  # 8199999999 before: a float product truncated
        ("1.001KB", 1001),
        ("2.01KB", 2010),
        ("0.3GiB", 322_122_547),  # 322122547.2: the fraction of a byte is dropped
        ("1.0005KB", 1000),
        ("4194304TiB", 2**62),  # MAX_BYTES itself
    ],
)
def test_parse_bytes_is_exact_for_decimal_sizes_and_drops_a_fraction_of_a_byte(
    text: str, expected: int
) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("big", ["8388608TiB", "4194304.5TiB", 2**62 + 1, 1e30])
def test_parse_bytes_refuses_a_size_past_max_bytes_naming_the_field(big: str | int) -> None:
    with pytest.raises(SpecError, match=r"too large a size.*4194304TiB") as info:
        parse_bytes(big, "--fake-gpus")
    assert info.value.field == "--fake-gpus"


def _local(*fields: int) -> float:
    from datetime import datetime

    return datetime(*fields).astimezone().timestamp()  # type: ignore[arg-type]


def test_a_clock_time_is_the_next_such_time_of_day_not_a_delay() -> None:
    """``danlu drain NODE --at 02:00`` drained the node two minutes later (``MM:SS``)."""
    from danlu.core.units import parse_time

    now = _local(2027, 1, 1, 12, 0)
    assert parse_time("02:00", now, "--at") == _local(2027, 1, 2, 2, 0)  # tomorrow's
    assert parse_time("23:30", now, "--at") == _local(2027, 1, 1, 23, 30)  # today's
    assert parse_time("14:15:30", now, "--at") == _local(2027, 1, 1, 14, 15, 30)
    assert parse_time("+01:00:00", now, "--at") == now + 3600  # a delay says so with +
    assert parse_time("+1-12", now, "--at") == now + 129_600
    for bad, needle in (
        ("25:00", "not a time of day"),
        ("12:75", "not a time of day"),
        ("+02:00", r"ambiguous .*write \+2m or \+2h"),
    ):
        with pytest.raises(SpecError, match=needle) as caught:
            parse_time(bad, now, "--at")
        assert caught.value.field == "--at"


def test_since_refuses_the_future_and_reads_a_clock_time_as_the_last_one() -> None:
    from danlu.core.units import parse_since

    now = _local(2027, 1, 1, 12, 0)
    assert parse_since("02:00", now) == _local(2027, 1, 1, 2, 0)  # today's, gone by
    assert parse_since("23:30", now) == _local(2026, 12, 31, 23, 30)  # yesterday's
    for future in ("+2h", "2027-01-01T13:00", "2999-01-01T00:00Z"):
        with pytest.raises(SpecError, match="in the future") as caught:
            parse_since(future, now, "--since")
        assert caught.value.field == "--since"
