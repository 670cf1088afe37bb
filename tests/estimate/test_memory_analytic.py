"""Analytic transformer memory against the published formulas."""

from __future__ import annotations

import pytest

from danlu.core.errors import SpecError
from danlu.core.spec import MAX_BATCH
from danlu.estimate.memory.analytic import (
    TransformerConfig,
    TransformerMemory,
    activation_bytes_per_layer,
    transformer_memory,
)

GPT2 = TransformerConfig(layers=12, hidden=768, heads=12, seq=1024, vocab=50257)


def test_gpt2_small_parameter_count() -> None:
    assert GPT2.parameters == 124_439_808


def test_korthikanti_activation_terms() -> None:
    sbh = GPT2.seq * GPT2.hidden
    a_s_h = 5 * GPT2.heads * GPT2.seq / GPT2.hidden
    assert activation_bytes_per_layer(GPT2, 1) == pytest.approx(sbh * (34 + a_s_h))
    assert activation_bytes_per_layer(GPT2, 2, recompute="selective") == pytest.approx(2 * 34 * sbh)
    assert activation_bytes_per_layer(GPT2, 1, recompute="full") == pytest.approx(2 * sbh)
    t = 8
    assert activation_bytes_per_layer(GPT2, 1, tensor_parallel=t) == pytest.approx(
        sbh * (10 + 24 / t + a_s_h / t)
    )
    assert activation_bytes_per_layer(
        GPT2, 1, tensor_parallel=t, sequence_parallel=True, recompute="selective"
    ) == pytest.approx(sbh * 34 / t)


@pytest.mark.parametrize(("precision", "act"), [("bf16", 2), ("fp32", 4)])
def test_the_output_layer_scales_with_the_activation_bytes(precision: str, act: int) -> None:
    # two s*h tensors (final LayerNorm input, output projection input) at ``act`` bytes, the
    # logits at ``act`` bytes and their fp32 softmax; fp32 kept the hidden part at 4*s*h
    s, h, v = GPT2.seq, GPT2.hidden, GPT2.vocab
    m = transformer_memory(GPT2, precision=precision)
    layer = activation_bytes_per_layer(GPT2, 1, bytes_per_value=act)
    output = m.activation_bytes_per_sample - GPT2.layers * layer
    assert output == pytest.approx(2 * act * s * h + (act + 4) * s * v, abs=1)
    split = transformer_memory(GPT2, precision=precision, tensor_parallel=4)
    split_layer = activation_bytes_per_layer(GPT2, 1, tensor_parallel=4, bytes_per_value=act)
    split_output = split.activation_bytes_per_sample - GPT2.layers * split_layer
    assert split_output == pytest.approx(output / 4, abs=1)


def test_zero_stages_match_deepspeed_paper_example() -> None:
    # ZeRO paper, Figure 1: 7.5B parameters, N_d = 64, mixed-precision Adam (K = 12)
    cfg = TransformerConfig(layers=1, hidden=8, heads=1, seq=1, vocab=1)
    psi = 7.5e9
    scale = psi / cfg.parameters
    # the figure's 120 / 31.4 / 16.6 / 1.9 GB are these, rounded
    expect = {0: 16 * psi, 1: 4 * psi + 12 * psi / 64, 2: 2 * psi + 14 * psi / 64, 3: 16 * psi / 64}
    assert [round(v / 1e8) / 10 for v in expect.values()] == [120.0, 31.4, 16.6, 1.9]
    for stage, want in expect.items():
        m = transformer_memory(
            cfg, precision="fp16", optimizer="adam", zero_stage=stage, data_parallel=64
        )
        assert m.state_bytes * scale == pytest.approx(want, rel=0.01)


def test_optimizers_and_precisions() -> None:
    p = GPT2.parameters
    sgd = transformer_memory(GPT2, precision="fp32", optimizer="sgd")
    assert sgd.state_bytes == 8 * p
    mom = transformer_memory(GPT2, precision="fp32", optimizer="sgd-momentum")
    assert mom.optimizer_bytes == 4 * p
    amp = transformer_memory(GPT2, precision="bf16", optimizer="adamw", master_weights=False)
    assert amp.state_bytes == 16 * p
    m = transformer_memory(GPT2, precision="bf16", recompute="full")
    b = m.max_batch(80 << 30)
    assert b is not None and m.predict(b) <= 80 << 30 < m.predict(b + 1)
    with pytest.raises(SpecError, match="optimizer"):
        transformer_memory(GPT2, optimizer="lbfgs")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"layers": float("nan")}, "layers"),  # NaN passed the >= 1 check: NaN memory
        ({"seq": 2.5}, "seq"),
        ({"vocab": 0}, "vocab"),
        ({"heads": True}, "heads"),
    ],
)
def test_a_config_of_anything_but_positive_integers_names_the_field(
    change: dict[str, object], field: str
) -> None:
    values: dict[str, object] = {"layers": 2, "hidden": 64, "heads": 4, "seq": 128, "vocab": 100}
    with pytest.raises(SpecError) as info:
        TransformerConfig(**{**values, **change})  # type: ignore[arg-type]
    assert info.value.field == field


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("data_parallel", 1.5),
        ("tensor_parallel", 0),
        ("fragmentation", float("nan")),
        ("fragmentation", 0.0),
        ("overhead_bytes", -1),
        ("overhead_bytes", 1.5),
    ],
)
def test_memory_options_out_of_range_name_the_option(option: str, value: object) -> None:
    with pytest.raises(SpecError) as info:
        transformer_memory(GPT2, **{option: value})  # type: ignore[arg-type]
    assert info.value.field == option


@pytest.mark.parametrize(
    ("limit", "margin", "field"),
    [
        (float("nan"), 0, "limit_bytes"),
        (float("inf"), 0, "limit_bytes"),
        (-1, 0, "limit_bytes"),
        ("80e9", 0, "limit_bytes"),
        (80 << 30, float("nan"), "margin_bytes"),
        (80 << 30, -1, "margin_bytes"),
    ],
)
def test_max_batch_refuses_a_limit_that_is_not_a_number_of_bytes(
    limit: object, margin: object, field: str
) -> None:
    # NaN raised ValueError and inf OverflowError from int()
    m = transformer_memory(GPT2)
    with pytest.raises(SpecError, match=field):
        m.max_batch(limit, margin)  # type: ignore[arg-type]
    assert m.max_batch(0) is None  # nothing fits: still an answer, as before


class _CountingMemory(TransformerMemory):
    """Counts predict() calls, and stops a search that would walk batch by batch."""

    calls = 0

    def predict(self, batch_size: int) -> int:
        type(self).calls += 1
        if type(self).calls > 10_000:
            raise RuntimeError("max_batch stepped through more than 10,000 batch sizes")
        return super().predict(batch_size)


@pytest.mark.parametrize("fragmentation", [1.0, 1.13])
def test_max_batch_of_a_huge_limit_is_found_by_bisection(fragmentation: float) -> None:
    # stepping by one from the estimate never ended for 10**30 bytes: predict() rounds to
    # the same float for many consecutive batches there
    base = transformer_memory(GPT2, fragmentation=fragmentation, overhead_bytes=1 << 30)
    m = _CountingMemory(**{f: getattr(base, f) for f in base.__dataclass_fields__})
    for limit in (10**30, 10**15, 80 << 30, 1 << 34):
        _CountingMemory.calls = 0
        b = m.max_batch(limit, 1 << 30)
        assert b is not None
        if b == MAX_BATCH:  # 10**30 bytes hold more than the largest batch predict() takes
            assert limit == 10**30
            assert m.predict(b) <= limit - (1 << 30)
        else:
            assert m.predict(b) <= limit - (1 << 30) < m.predict(b + 1)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"optimizer": None}, "--optimizer"),  # AttributeError on .lower()
        ({"optimizer": 3}, "--optimizer"),
        ({"fragmentation": "1.1"}, "fragmentation"),  # a bare TypeError
        ({"fragmentation": True}, "fragmentation"),
        ({"zero_stage": True}, "zero_stage"),  # read as stage 1
    ],
)
def test_transformer_memory_refuses_options_of_the_wrong_type(
    options: dict[str, object], field: str
) -> None:
    with pytest.raises(SpecError, match=f"^{field}: "):
        transformer_memory(GPT2, **options)  # type: ignore[arg-type]


def test_activation_bytes_refuse_a_zero_tensor_parallel_degree() -> None:
    with pytest.raises(SpecError, match=r"^tensor_parallel: "):
        activation_bytes_per_layer(GPT2, 1, tensor_parallel=0)
