"""A model whose attention layers are its own classes (``Attn``, ``SelfAttn``: no
``Attention`` in their names) reads as a transformer when its step calls torch's
``scaled_dot_product_attention``: a hand-written GPT read as no family, and
``training.family: auto`` shared its GPU as the median pair's."""

from __future__ import annotations

from danlu.estimate.family import ModelSummary, infer_family
from danlu.estimate.memory.gpus import get_gpu
from danlu.estimate.memory.predict import replay
from danlu.estimate.memory.trace_result import StepTrace


def _summary(attention_calls: int) -> ModelSummary:
    modules = {"GPT": 1, "Block": 2, "Attn": 2, "Linear": 6, "Embedding": 2, "LayerNorm": 5}
    parameters = {"Linear": 400_000, "Embedding": 130_000, "LayerNorm": 1_280}
    return ModelSummary(modules, parameters, 1e6, attention_calls)


def test_a_step_calling_fused_attention_is_a_transformer() -> None:
    assert infer_family(_summary(attention_calls=4)) == "transformer"


def test_the_same_layers_without_it_are_no_family() -> None:
    assert infer_family(_summary(attention_calls=0)) is None


def test_an_estimate_reads_the_traces_attention_calls() -> None:
    trace = StepTrace(
        batch_size=2,
        events=[(1, 1024), (2, 512), (2, -512)],
        marks={"measure_start": 1, "measure_end": 3},
        peak_logical_bytes=1536,
        step_start_bytes=1024,
        breakdown={},
        modules={"Net": 1, "Attn": 1, "Linear": 2},
        module_parameters={"Linear": 1000},
        attention_calls=2,
    )
    assert replay(trace, get_gpu("h100")).family == "transformer"
    again = StepTrace.from_json(trace.to_json())
    assert again.attention_calls == 2
    # a trace written before the count (a warm worker of an older danlu) reads as none
    old = trace.to_json()
    del old["attention_calls"]
    assert StepTrace.from_json(old).attention_calls == 0
