"""ElasticSampler's seed of any size: the epoch's generator seed, ``seed * 1_000_003 +
epoch``, is taken modulo ``2**64`` (danlu.train.data.epoch_seed), as torch reduces every
seed it accepts. A seed above about 1.8e13 or below about -9.2e12 failed at the first epoch
with a bare overflow error from ``torch.Generator.manual_seed``; every seed that worked
gives the very order it gave."""

from __future__ import annotations

import pytest
import torch

from danlu.train.data import ElasticSampler, epoch_seed

N = 64
WORKING_SEEDS = [0, 1, 7, 42, 2**31 - 1, -1, -42, 9_200_000_000_000, -9_200_000_000_000]
"""Seeds whose generator seed torch took as it was (from -2**63 to 2**64 - 1)."""
LARGE_SEEDS = [18_500_000_000_000, -9_300_000_000_000, 2**63, -(2**63), 10**30, -(10**30)]
"""Seeds whose ``seed * 1_000_003 + epoch`` is outside what torch takes."""


def _as_before(seed: int, epoch: int) -> list[int]:
    """The order the sampler gave before: torch seeded with the product as it is."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(N, generator=generator).tolist()


def _order(seed: int, epoch: int) -> list[int]:
    sampler = ElasticSampler(N, seed=seed)
    sampler.epoch = epoch
    return sampler.permutation()


@pytest.mark.parametrize("seed", WORKING_SEEDS)
@pytest.mark.parametrize("epoch", [0, 1, 5])
def test_a_working_seed_keeps_its_order(seed: int, epoch: int) -> None:
    assert _order(seed, epoch) == _as_before(seed, epoch)


@pytest.mark.parametrize("seed", LARGE_SEEDS)
def test_a_large_seed_gives_an_order_at_every_epoch(seed: int) -> None:
    sampler = ElasticSampler(N, seed=seed)
    first = sampler.permutation()
    assert sorted(first) == list(range(N))
    sampler.epoch = 1
    second = sampler.permutation()
    assert sorted(second) == list(range(N)) and second != first
    assert _order(seed, 0) == first  # the same seed, the same order


def test_a_large_seed_resumes_from_its_state() -> None:
    sampler = ElasticSampler(N, seed=10**30)
    sampler.epoch, sampler.offset = 3, 10
    resumed = ElasticSampler(N, seed=0)
    resumed.load_state_dict(sampler.state_dict())
    assert resumed.seed == 10**30
    assert resumed.permutation() == sampler.permutation()


@pytest.mark.parametrize("seed", WORKING_SEEDS + LARGE_SEEDS)
def test_the_epoch_seed_is_one_torch_takes(seed: int) -> None:
    value = epoch_seed(seed, 2)
    assert 0 <= value < 2**64
    assert torch.Generator().manual_seed(value).initial_seed() == value
