"""The model family of a traced model (``danlu.estimate.family``): the rules on summaries,
and the tracer's summaries of the zoo's models (traced for real, in a subprocess)."""

from __future__ import annotations

import pytest
from torch import nn

from danlu.core.spec import MODEL_FAMILIES
from danlu.estimate import zoo as zoo_models
from danlu.estimate.family import LARGE_CNN_ACTIVATIONS, ModelSummary, infer_family
from danlu.estimate.memory import TraceRequest, get_gpu
from danlu.estimate.memory.predict import replay, summarize
from danlu.estimate.memory.tracer import trace

MiB = 2**20


def _summary(
    modules: dict[str, int], parameters: dict[str, int], per_sample: float = 0.0
) -> ModelSummary:
    return ModelSummary(modules, parameters, per_sample)


@pytest.mark.parametrize(
    ("summary", "family"),
    [
        # a recurrent layer wins over anything else in the model
        (_summary({"LSTM": 1, "Embedding": 1}, {"LSTM": 10, "Embedding": 1000}), "lstm"),
        (_summary({"GRUCell": 2, "Linear": 1}, {"GRUCell": 10, "Linear": 10}), "lstm"),
        # attention: PyTorch's layers or any module whose class name says so
        (_summary({"TransformerEncoderLayer": 6}, {"Linear": 100}), "transformer"),
        (_summary({"CausalSelfAttention": 12, "Embedding": 1}, {"Embedding": 9000}), "transformer"),
        # a generator's transposed convolutions beside convolutions
        (
            _summary({"Conv2d": 8, "ConvTranspose2d": 2}, {"Conv2d": 900, "ConvTranspose2d": 100}),
            "gan",
        ),
        # convolutions hold most parameters: small or large by the activations of a sample
        (
            _summary({"Conv2d": 20, "Linear": 1}, {"Conv2d": 900, "Linear": 100}, 9 * MiB),
            "cnn-small",
        ),
        (
            _summary(
                {"Conv2d": 20, "Linear": 1}, {"Conv2d": 900, "Linear": 100}, LARGE_CNN_ACTIVATIONS
            ),
            "cnn-large",
        ),
        # a few convolutions in front of a big classifier are not a CNN (ViT's patch stem)
        (_summary({"Conv2d": 1, "Linear": 40}, {"Conv2d": 10, "Linear": 990}), None),
        # embedding tables hold most parameters
        (
            _summary({"Embedding": 2, "Linear": 3}, {"Embedding": 800, "Linear": 200}),
            "recommendation",
        ),
        (_summary({"Embedding": 2, "Linear": 3}, {"Embedding": 400, "Linear": 600}), None),
        # an MLP, and an empty model
        (_summary({"Linear": 3, "ReLU": 2}, {"Linear": 1000}), None),
        (_summary({}, {}), None),
    ],
)
def test_rules(summary: ModelSummary, family: str | None) -> None:
    found = infer_family(summary)
    assert found == family
    assert found is None or found in MODEL_FAMILIES


def test_the_tracer_summarises_the_zoo_s_models() -> None:
    zoo = "danlu.estimate.zoo:"
    traces = {
        name: trace(TraceRequest(zoo + name, (4,)))[0]
        for name in ("resnet_tiny", "gpt2_tiny", "mlp_small")
    }
    cnn = summarize(traces["resnet_tiny"])
    model = zoo_models.resnet_tiny()[0]
    assert cnn.modules["Conv2d"] == sum(isinstance(m, nn.Conv2d) for m in model.modules())
    assert cnn.parameters["Conv2d"] == sum(
        p.numel() for m in model.modules() if isinstance(m, nn.Conv2d) for p in m.parameters()
    )
    assert cnn.modules["ResNet"] == 1
    assert cnn.parameters["Conv2d"] > 0.9 * sum(cnn.parameters.values())
    assert 0 < cnn.activation_bytes_per_sample < LARGE_CNN_ACTIVATIONS
    assert infer_family(cnn) == "cnn-small"
    assert infer_family(summarize(traces["gpt2_tiny"])) == "transformer"
    assert infer_family(summarize(traces["mlp_small"])) is None
    # the memory estimate carries it
    estimate = replay(traces["resnet_tiny"], get_gpu("h100"))
    assert estimate.family == "cnn-small" and estimate.to_json()["family"] == "cnn-small"
