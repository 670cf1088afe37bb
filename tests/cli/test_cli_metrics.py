"""``danlu metrics``' formatting: which metrics become columns, and how values read."""

from __future__ import annotations

from danlu.cli.metrics import cell, line, metric_keys


def test_columns_are_the_numeric_metrics_first_reported() -> None:
    records = [
        {"step": 1, "time": 5.0, "loss": 2.0, "phase": "warm-up", "done": True},
        {"step": 2, "time": 6.0, "lr": 0.1, "loss": 1.0, "grad_sqr": None},
    ]
    assert metric_keys(records) == ["loss", "lr"]
    assert metric_keys(records, most=1) == ["loss"]
    many = [{"step": 1, **{f"m{i}": float(i) for i in range(12)}}]
    assert len(metric_keys(many)) == 8


def test_values_read_as_short_numbers() -> None:
    assert cell(None) == "-" and cell(3) == "3" and cell(4.0) == "4"
    assert cell(0.123456) == "0.1235" and cell(1.5e-7) == "1.5e-07" and cell(float("nan")) == "nan"
    assert cell(True) == "True" and cell("x") == "x"
    assert line({"step": 7, "time": 0, "loss": 0.5, "lr": 1e-3}, ["loss", "lr", "acc"]) == (
        "step 7  -  loss 0.5  lr 0.001"
    )
