"""The tracer's layer summary (what ``family: auto`` is inferred from) counted a parameter
two modules share (tied weights: the output layer holding the embedding's table) once per
module: the total grew by it, and a model whose embedding holds most of its parameters
read as holding less than half of them. A shared parameter counts once, for the first
module holding it."""

from __future__ import annotations

from torch import nn

from danlu.estimate.family import ModelSummary, infer_family
from danlu.estimate.memory.trace_worker import _layers


class TiedBagOfWords(nn.Module):
    """An embedding whose table the output layer shares, and a small hidden layer."""

    def __init__(self, vocabulary: int = 1000, width: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocabulary, width)
        self.hidden = nn.Linear(width, width)
        self.out = nn.Linear(width, vocabulary, bias=False)
        self.out.weight = self.embed.weight


def test_a_tied_parameter_counts_once() -> None:
    model = TiedBagOfWords()
    modules, parameters = _layers(model)
    assert sum(parameters.values()) == sum(p.numel() for p in model.parameters())
    assert parameters == {"Embedding": 1000 * 64, "Linear": 64 * 64 + 64}
    assert modules == {"TiedBagOfWords": 1, "Embedding": 1, "Linear": 2}


def test_a_tied_embedding_model_reads_as_its_embedding_share_says() -> None:
    modules, parameters = _layers(TiedBagOfWords())
    assert infer_family(ModelSummary(modules, parameters)) == "recommendation"


def test_untied_layers_are_counted_as_before() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    assert _layers(model)[1] == {"Linear": 2 * (64 + 8)}
