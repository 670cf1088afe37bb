"""The model zoo: factories return (model, make_batch, loss_fn) that train."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from danlu.estimate import zoo  # noqa: E402


@pytest.mark.parametrize("name", ["mlp_small", "resnet_tiny", "gpt2_tiny", "bert_tiny", "vit_tiny"])
def test_small_presets_train_one_step(name: str) -> None:
    model, make_batch, loss_fn = zoo.PRESETS[name]()
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = loss_fn(model, make_batch(2))
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    opt.step()
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_large_presets_have_their_published_sizes() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        gpt2 = zoo.gpt2_124m()[0]
        bert = zoo.bert_base()[0]
        r18 = zoo.resnet18()[0]
    assert sum(p.numel() for p in gpt2.parameters()) == 124_439_808
    assert 105e6 < sum(p.numel() for p in bert.parameters()) < 112e6
    assert 11e6 < sum(p.numel() for p in r18.parameters()) < 11.3e6


def test_checkpointing_flag_is_honoured() -> None:
    model, make_batch, loss_fn = zoo.gpt2_tiny()
    model.checkpointing = True
    loss_fn(model, make_batch(2)).backward()
    assert all(p.grad is not None for p in model.parameters())
