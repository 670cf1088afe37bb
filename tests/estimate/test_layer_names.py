"""The tracer's layer summary (what ``family: auto`` is inferred from) names a module by the
``torch.nn`` layer it is: a model's own subclass of a layer (``class MyConv(nn.Conv2d)``) or
a layer under ``spectral_norm`` / ``weight_norm`` (class ``ParametrizedConv2d``, its weight
held in a ``ParametrizationList`` below it) was summarised under that other name and
holding none of its weights, and a CNN or an LSTM read as no family at all."""

from __future__ import annotations

import pytest

from danlu.estimate.family import ModelSummary, infer_family

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn.utils import parametrizations  # noqa: E402

from danlu.estimate.memory.trace_worker import _layers  # noqa: E402


class OwnConv(nn.Conv2d):
    """A model's own convolution class."""


class OwnLSTM(nn.LSTM):
    """A model's own recurrent layer class."""


class Block(nn.Module):
    """A model's own module (no torch layer): keeps its name."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 64, 3)
        self.norm = nn.BatchNorm2d(64)


class Stack(nn.Sequential):
    """A model's own container: keeps its name."""


def _family(model: nn.Module) -> str | None:
    modules, parameters = _layers(model)
    return infer_family(ModelSummary(modules, parameters))


def _cnn(conv: type[nn.Conv2d] = nn.Conv2d, spectral: bool = False) -> nn.Module:
    def layer(cin: int, cout: int) -> nn.Module:
        made = conv(cin, cout, 3)
        return parametrizations.spectral_norm(made) if spectral else made

    return nn.Sequential(layer(3, 64), nn.ReLU(), layer(64, 64), nn.Flatten(), nn.Linear(10, 2))


def test_a_subclassed_convolution_is_a_convolution() -> None:
    modules, parameters = _layers(_cnn(OwnConv))
    assert modules["Conv2d"] == 2 and "OwnConv" not in modules
    assert parameters["Conv2d"] == (3 * 64 * 3 * 3 + 64) + (64 * 64 * 3 * 3 + 64)
    assert _family(_cnn(OwnConv)) == _family(_cnn()) == "cnn-small"


def test_a_spectrally_normalised_convolution_holds_its_weights() -> None:
    model = _cnn(spectral=True)
    modules, parameters = _layers(model)
    assert modules["Conv2d"] == 2 and "ParametrizedConv2d" not in modules
    assert parameters == _layers(_cnn())[1]  # the originals count for their convolutions
    assert sum(parameters.values()) == sum(p.numel() for p in model.parameters())
    assert _family(model) == "cnn-small"


def test_weight_norm_keeps_a_linear_layer_s_parameters() -> None:
    model = nn.Sequential(parametrizations.weight_norm(nn.Linear(16, 32)), nn.Linear(32, 4))
    _, parameters = _layers(model)
    assert parameters == {"Linear": 16 * 32 + 32 + 32 + 32 * 4 + 4}  # g, v and biases


def test_a_subclassed_recurrent_layer_is_an_lstm() -> None:
    assert _family(nn.Sequential(nn.Embedding(10, 4), OwnLSTM(4, 4))) == "lstm"


def test_a_model_s_own_modules_and_containers_keep_their_names() -> None:
    modules, parameters = _layers(Stack(Block(), nn.Linear(2, 2)))
    assert modules == {"Stack": 1, "Block": 1, "Conv2d": 1, "BatchNorm2d": 1, "Linear": 1}
    assert set(parameters) == {"Conv2d", "BatchNorm2d", "Linear"}
