"""A batch is traced the same in whatever container ``make_batch`` returns it: a tuple
``(x, y)``, a dict ``{"input_ids": x, "labels": y}``, nested lists and dicts, or a mapping
that is no dict (a ``UserDict``, as a tokenizer's ``BatchEncoding`` is). The last was a leaf
to torch's pytrees: its tensors were not counted as the batch's, and their bytes moved from
the breakdown's activations to its temporaries."""

from __future__ import annotations

import sys
import textwrap
from collections import UserDict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from danlu.core.errors import SpecError
from danlu.estimate.memory.trace_result import StepTrace, TraceRequest

torch = pytest.importorskip("torch")

MODULE = "batch_container_models"
FACTORIES = textwrap.dedent(
    """
    from collections import UserDict

    import torch
    from torch import nn

    VOCAB, SEQ = 50, 16


    class Encoding(UserDict):
        '''A mapping that is no dict, as a tokenizer's BatchEncoding.'''


    def _tensors(b, device="cpu"):
        ids = torch.randint(0, VOCAB, (b, SEQ), device=device)
        return ids, torch.randint(0, VOCAB, (b, SEQ), device=device)


    def _loss(model, ids, labels):
        logits = model(ids)
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))


    def _entry(make_batch, read, model_device="cpu"):
        with torch.device(model_device):
            model = nn.Sequential(nn.Embedding(VOCAB, 32), nn.Linear(32, VOCAB))
        return model, make_batch, lambda m, batch: _loss(m, *read(batch))


    def as_tuple():
        return _entry(lambda b: _tensors(b), lambda batch: batch)


    def as_dict():
        def make_batch(b):
            ids, labels = _tensors(b)
            return {"input_ids": ids, "labels": labels}

        return _entry(make_batch, lambda batch: (batch["input_ids"], batch["labels"]))


    def as_nested():
        def make_batch(b):
            ids, labels = _tensors(b)
            return {"inputs": [{"input_ids": ids}], "labels": (labels,)}

        return _entry(
            make_batch, lambda batch: (batch["inputs"][0]["input_ids"], batch["labels"][0])
        )


    def as_encoding():
        def make_batch(b):
            ids, labels = _tensors(b)
            return Encoding(input_ids=ids, labels=labels)

        return _entry(make_batch, lambda batch: (batch["input_ids"], batch["labels"]))


    def encoding_on_meta():
        def make_batch(b):
            ids, labels = _tensors(b, "meta")
            return Encoding(input_ids=ids, labels=labels)

        return _entry(make_batch, lambda batch: (batch["input_ids"], batch["labels"]))
    """
)
BATCH = 4


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The factories' module, in a folder of its own (removed from ``sys.path`` after)."""
    folder = tmp_path_factory.mktemp("batch_containers")
    (folder / f"{MODULE}.py").write_text(FACTORIES)
    yield folder
    while str(folder) in sys.path:
        sys.path.remove(str(folder))
    sys.modules.pop(MODULE, None)


Tracer = Callable[[TraceRequest], list[StepTrace]]


def _trace(tracer: Tracer, models_dir: Path, factory: str) -> StepTrace:
    req = TraceRequest(f"{MODULE}:{factory}", (BATCH,), sys_path=(str(models_dir),))
    return tracer(req)[0]


@pytest.mark.parametrize("factory", ["as_dict", "as_nested", "as_encoding"])
def test_a_batch_in_any_container_is_estimated_as_the_tuple_batch(
    models_dir: Path, trace_in_process: Tracer, factory: str
) -> None:
    """The same tensors give the same peak and the same breakdown: the labels' and the
    inputs' bytes are the batch's (activations) in every form."""
    want = _trace(trace_in_process, models_dir, "as_tuple")
    got = _trace(trace_in_process, models_dir, factory)
    assert got.peak_logical_bytes == want.peak_logical_bytes
    assert got.step_start_bytes == want.step_start_bytes
    assert got.breakdown == want.breakdown
    assert got.breakdown["activations"] >= 2 * BATCH * 16 * 8  # both int64 tensors


def test_storages_are_found_in_mappings_that_are_no_dict() -> None:
    from danlu.estimate.memory.steps import storages

    x, y, z = torch.zeros(2), torch.ones(3), torch.ones(4)
    inner: UserDict[str, object] = UserDict(labels=[y], note="text")
    batch = {"a": inner, "b": (x, 7), "c": UserDict(deep=UserDict(z=z))}
    inner["self"] = inner  # a mapping holding itself is walked once
    found = [s.data_ptr() for s in storages(batch)]
    assert sorted(found) == sorted(t.untyped_storage().data_ptr() for t in (x, y, z))


def test_a_mapping_batch_on_meta_beside_a_cpu_model_is_a_model_ref_error(
    models_dir: Path, trace_in_process: Tracer
) -> None:
    """The meta-device check reads the batch's tensors in such a mapping too (it saw none
    and let the step fail inside torch with a device mismatch naming neither)."""
    with pytest.raises(SpecError) as caught:
        _trace(trace_in_process, models_dir, "encoding_on_meta")
    assert caught.value.field == "MODEL_REF"
    assert "make_batch's tensors" in caught.value.message
