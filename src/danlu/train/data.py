"""A resumable, elastic distributed sampler: exactly once per epoch across resizes.

Each epoch is a seeded permutation of ``range(n)``. The sampler's whole state is
``{"epoch", "offset", "seed"}`` where ``offset`` counts the samples of the epoch that have been
*committed* (consumed by finished optimizer steps) over all ranks. The samples not yet seen are
``perm[offset:]``; step ``j`` (counted from the resume point) takes the window of the next
``global_batch`` positions of it (exactly the step's global batch, whether or not it divides by
the world size) and rank ``r`` takes the positions ``≡ r (mod world)`` in that window, so the
ranks' shares differ by at most one sample (the training step weights each rank's loss by its
share: the gradient is the mean over the window). Because every rank takes its share of the
same window, the committed samples are always a prefix of the permutation, whatever the world
size was at each step: when the world size changes, the new workers simply start from the
committed offset and no sample is lost or repeated within the epoch.

At the end of an epoch a window may hold fewer samples than ranks; a rank that gets nothing
receives one padding sample with ``real == 0`` (the training step weights its loss by zero).
With ``drop_last`` an epoch ends instead once fewer samples are left than one step's global
batch; they are skipped (committed unseen), so every step has the whole batch: what a model
with batch normalisation needs (a last batch of one sample fails in training mode, and a
padding sample would move its running statistics).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

import torch

from danlu.core.errors import ConfigError
from danlu.train.checks import flag_argument, whole_argument
from danlu.train.state import stored_count

log = logging.getLogger("danlu.train")


@dataclass(frozen=True)
class LocalBatch:
    """This rank's share of one step: dataset ``indices``, of which the first ``real`` count.

    ``global_real`` is the number of real samples in the step over all ranks.
    """

    indices: list[int]
    real: int
    global_real: int


SEED_MODULUS = 2**64
"""The count of distinct generator seeds: ``torch.Generator.manual_seed`` takes an integer
from ``-2**63`` to ``2**64 - 1`` and seeds with it modulo ``2**64`` (``-1`` as
``2**64 - 1``); past that range it raises a bare ``ValueError`` (an overflow)."""


def epoch_seed(seed: int, epoch: int) -> int:
    """The generator seed of ``epoch``'s permutation for the sampler's ``seed``:
    ``seed * 1_000_003 + epoch`` modulo :data:`SEED_MODULUS`, in ``[0, 2**64)``.

    Torch reduces every seed it accepts the same way, so each seed that worked gives the
    order it gave; a seed above about ``1.8e13`` or below about ``-9.2e12`` (whose product
    left torch's range), which failed at the first epoch, now gives an order too."""
    return (seed * 1_000_003 + epoch) % SEED_MODULUS


class ElasticSampler:
    """Seeded per-epoch permutation, sharded by window; see the module docstring."""

    def __init__(
        self, n: int, *, shuffle: bool = True, seed: int = 0, drop_last: bool = False
    ) -> None:
        """``n``, the dataset size, is an integer >= 1 (not a bool, not ``2.5`` or ``16.0``,
        as :func:`~danlu.train.init`'s ``dataset_size``): a :class:`ConfigError` naming it
        otherwise. A float, even ``16.0``, failed only at the first epoch with a bare
        ``TypeError`` (``torch.randperm``, ``range``); ``True`` was a dataset of one sample.
        ``shuffle`` and ``drop_last`` are True or False (or 0/1; ``"no"`` turned shuffling
        on), ``seed`` an integer of any sign and size (``2.5`` failed at the first epoch;
        see :func:`epoch_seed`): a :class:`ConfigError` naming the argument otherwise."""
        self.n = whole_argument("ElasticSampler's n (the dataset size)", n, 1)
        self.shuffle = flag_argument("ElasticSampler's shuffle", shuffle)
        self.seed = whole_argument("ElasticSampler's seed", seed, None)
        self.drop_last = flag_argument("ElasticSampler's drop_last", drop_last)
        self.epoch = 0
        self.offset = 0
        self._perm: list[int] | None = None
        self._perm_key: tuple[int, int, bool] | None = None  # (seed, epoch, shuffle) of _perm
        self._told_larger = False  # a WARNING said a dataset is larger (check_dataset)
        self._told_skipped = False  # a WARNING said drop_last skips whole epochs

    def permutation(self) -> list[int]:
        """The current epoch's order of sample indices.

        Cached by everything it depends on, so a new ``seed`` (from :meth:`load_state_dict`)
        or ``epoch`` never returns the order computed for the old one.
        """
        key = (self.seed, self.epoch, self.shuffle)
        if self._perm is None or self._perm_key != key:
            if self.shuffle:
                g = torch.Generator().manual_seed(epoch_seed(self.seed, self.epoch))
                self._perm = torch.randperm(self.n, generator=g).tolist()
            else:
                self._perm = list(range(self.n))
            self._perm_key = key
        return self._perm

    @property
    def remaining(self) -> int:
        """Samples of the current epoch not yet committed."""
        return self.n - self.offset

    def window(
        self,
        start: int,
        local_batch: int | None,
        rank: int,
        world_size: int,
        *,
        global_batch: int | None = None,
    ) -> LocalBatch:
        """The share of rank ``rank`` of the window starting ``start`` samples past the offset.

        The window holds ``global_batch`` samples when given (the ranks' shares then differ by
        one where it does not divide by ``world_size``), else ``local_batch * world_size``.
        """
        perm = self.permutation()
        lo = self.offset + start
        hi = min(self.n, lo + _window_size(local_batch, global_batch, world_size))
        mine = perm[lo + rank : hi : world_size]
        real = len(mine)
        if real == 0:  # fewer samples than ranks at the end of the epoch: pad, weight zero
            mine = [perm[lo if lo < self.n else self.n - 1]]
        return LocalBatch(mine, real, hi - lo)

    def batches(
        self,
        local_batch: Callable[[], int] | None = None,
        rank: int = 0,
        world_size: int = 1,
        *,
        follow_commits: bool = False,
        global_batch: Callable[[], int] | None = None,
    ) -> Iterator[LocalBatch]:
        """Yield this rank's batches for the rest of the epoch from the committed offset.

        Each step's window is ``global_batch()`` samples when that is given (what
        :meth:`~danlu.train.context.TrainContext.batches` passes: the ranks' shares differ by
        one where it does not divide by ``world_size``), else ``local_batch() * world_size``;
        give exactly one of them. It is asked before each step, so the batch size may change
        mid-epoch (adaptive batch size). The offset is NOT advanced here: call :meth:`commit`
        when the step is done (or not at all: the iterator keeps its own cursor, at or past the
        committed offset, so it neither skips nor repeats samples either way). With
        ``follow_commits`` every window starts at the committed offset instead (the caller
        commits each batch before asking for the next; a rollback that moves the offset back
        is then followed).
        """
        if (local_batch is None) == (global_batch is None):
            raise ConfigError("ElasticSampler.batches needs one of local_batch or global_batch")
        cursor = self.offset  # absolute position of the next window (without follow_commits)
        while True:
            pos = self.offset if follow_commits else max(cursor, self.offset)
            if pos >= self.n:
                return
            local = local_batch() if local_batch is not None else None
            size = global_batch() if global_batch is not None else None
            window = _window_size(local, size, world_size)
            if self.drop_last and self.n - pos < window:
                if pos == 0:
                    self._say_epoch_skipped(window)
                self.offset = self.n  # the rest of the epoch is skipped, as committed
                return
            lb = self.window(pos - self.offset, local, rank, world_size, global_batch=size)
            cursor = pos + lb.global_real
            yield lb

    def _say_epoch_skipped(self, window: int) -> None:
        """WARN, once, that ``drop_last`` skips a whole epoch: one step's ``window`` holds
        more samples than the dataset, so no step is ever trained (``fit(epochs=3)`` went
        through its epochs without a step, and said nothing)."""
        if self._told_skipped:
            return
        self._told_skipped = True
        log.warning(
            "drop_last=True and one step's global batch (%d samples) is larger than the "
            "dataset (dataset_size=%d): every epoch is skipped whole and no step is trained; "
            "give a global batch of at most %d, or drop_last=False",
            window,
            self.n,
            self.n,
        )

    def check_dataset(self, dataset: Any) -> None:
        """Compare ``len(dataset)`` (when it has one) with the sampler's ``n``, the
        ``dataset_size`` the run was given, before a batch is drawn from it: a smaller
        dataset is a :class:`ConfigError` naming both (the sampler draws indices up to
        ``n - 1``: an ``IndexError`` at the first batch that held one past its end, possibly
        after many steps of an epoch), a larger one a WARNING, once (only its first ``n``
        samples are ever drawn: the rest never trained on, unseen)."""
        try:
            size = len(dataset)
        except TypeError:  # no len(): an index past its end fails as it is read
            return
        if not isinstance(size, int) or size == self.n:
            return
        if size < self.n:
            raise ConfigError(
                f"ctx.batches() got a dataset of {size} samples, but dataset_size={self.n} "
                f"(init's, or fit's len(dataset)): the sampler draws indices up to "
                f"{self.n - 1}, past its end; pass dataset_size=len(dataset)"
            )
        if not self._told_larger:
            self._told_larger = True
            log.warning(
                "ctx.batches() got a dataset of %d samples, but dataset_size=%d: only its "
                "first %d samples are drawn, the other %d never; pass dataset_size=len(dataset) "
                "to train on all of it",
                size,
                self.n,
                self.n,
                size - self.n,
            )

    def commit(self, global_samples: int) -> None:
        """Record that one step consumed ``global_samples`` samples (over all ranks)."""
        self.offset = min(self.n, self.offset + global_samples)

    def next_epoch(self) -> None:
        """Start the following epoch."""
        self.epoch += 1
        self.offset = 0

    @property
    def epoch_done(self) -> bool:
        """True once every sample of the epoch was committed."""
        return self.offset >= self.n

    def state_dict(self) -> dict[str, Any]:
        """The sampler's resumable state (a part of ``data_state``). ``shuffle`` is kept
        for :meth:`resume_problem` to compare (``drop_last`` to be said)."""
        return {
            "epoch": self.epoch,
            "offset": self.offset,
            "seed": self.seed,
            "n": self.n,
            "shuffle": self.shuffle,
            "drop_last": self.drop_last,
        }

    def resume_problem(self, state: Mapping[str, Any]) -> str | None:
        """Why this sampler cannot resume from ``state`` (a :meth:`state_dict`), or None.

        Another dataset size never can (the offset counts samples of the other dataset).
        In the middle of an epoch neither can another ``shuffle`` (another order: the rest
        of the epoch would repeat some samples and skip others); at an epoch's start or end
        the live value holds from then on. Another ``drop_last`` can (it only decides
        whether an epoch's last partial batch is trained: a run that failed on a one-sample
        last batch may resume with ``drop_last=True``). A state written before ``shuffle``
        was kept is not compared on it. A size, epoch or offset that is no whole number (a
        bool, ``2.5``, ``"abc"``, a NaN, a negative one, a size of 0), an epoch or offset
        left out, an offset beyond the dataset, a seed that is no whole number, or a
        ``shuffle`` that is not a bool, is a damaged checkpoint, said naming the field
        (``int()`` read ``true`` as 1 and ``2.5`` as 2, and raised a bare error for
        ``"abc"``; ``bool("False")`` is True): so a resume that asks this before loading
        anything (:func:`~danlu.train.state.check_compatible`) never finds it later."""
        try:
            saved_n = stored_count(state.get("n", self.n), "the sampler state's n", 1)
            epoch, offset, _ = self._position(state)
        except ValueError as exc:
            return f"{exc}: {_DAMAGED}"
        shuffle = state.get("shuffle", self.shuffle)
        if not (isinstance(shuffle, int) and shuffle in (0, 1)):  # a bool is an int
            return f"the sampler state's shuffle {shuffle!r} is not a bool: {_DAMAGED}"
        if saved_n != self.n:
            return (
                f"the dataset differs: dataset_size={saved_n} in the checkpoint, {self.n} now "
                "(its data position counts samples of the other dataset); resume on the same "
                "dataset, or start over with a fresh checkpoint_dir"
            )
        if offset > self.n:  # (as a negative one read samples from the epoch's end)
            return (
                f"the sampler state's offset {offset} is beyond the dataset's {self.n} "
                f"samples: {_DAMAGED}"
            )
        if not 0 < offset < self.n:
            return None
        if bool(shuffle) != self.shuffle:
            return (
                f"the sampler differs: shuffle={bool(shuffle)} in the checkpoint, "
                f"{self.shuffle} now, and the checkpoint is in the middle of epoch "
                f"{epoch} ({offset} of {self.n} samples done): resume "
                f"with shuffle={bool(shuffle)} (another value can take effect from a "
                "checkpoint at an epoch's end), or start over with a fresh checkpoint_dir"
            )
        return None

    def _position(self, state: Mapping[str, Any]) -> tuple[int, int, int]:
        """The ``(epoch, offset, seed)`` of a :meth:`state_dict` (a seed left out: this
        sampler's); ``ValueError`` naming the field that is missing or no whole number."""
        for key in ("epoch", "offset"):
            if key not in state:
                raise ValueError(f"the sampler state has no {key}")
        return (
            stored_count(state["epoch"], "the sampler state's epoch"),
            stored_count(state["offset"], "the sampler state's offset"),
            stored_count(state.get("seed", self.seed), "the sampler state's seed", None),
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` output (possibly written at another world size);
        a :class:`ConfigError` when :meth:`resume_problem` finds one, or for a position no
        run writes (a negative epoch or offset, an offset beyond the dataset, a bool or a
        fraction: it trained on samples of the wrong place unseen; a seed that is no whole
        number: another order). ``shuffle`` and ``drop_last`` stay this sampler's."""
        problem = self.resume_problem(state)
        if problem is not None:
            raise ConfigError(problem)
        self.epoch, self.offset, self.seed = self._position(state)  # checked there


_DAMAGED = (
    "the checkpoint's data position is damaged; resume from another checkpoint, or start over "
    "with a fresh checkpoint_dir"
)


def waiting_position_problem(
    saved: Mapping[str, Any], *, shuffle: bool, seed: int, drop_last: bool
) -> str | None:
    """Why a checkpoint's data position ``saved`` is damaged, or None, for a run whose
    sampler is not built yet (no ``dataset_size``: :meth:`~danlu.train.context.TrainContext.batches`
    builds it from ``len(dataset)``): everything :meth:`ElasticSampler.resume_problem` checks
    but the dataset size, checked against the size the position itself names (an epoch count
    without one, as ``ctx.epochs`` keeps it before a sampler exists, against none). The
    size is compared when the sampler is built."""
    size = saved.get("n", max(1, _whole_or_zero(saved.get("offset"))))
    try:
        probe = ElasticSampler(size, shuffle=shuffle, seed=seed, drop_last=drop_last)
    except ConfigError:
        return f"the sampler state's n {size!r} is no dataset size: {_DAMAGED}"
    return probe.resume_problem(saved)


def _whole_or_zero(value: Any) -> int:
    """``value`` when it is an integer (not a bool) >= 0, else 0 (left to be refused)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def load_data_position(sampler: ElasticSampler | None, saved: Mapping[str, Any] | None) -> None:
    """Resume ``sampler`` (a run's, None without ``dataset_size``) from a checkpoint's
    ``saved`` sampler state (None: written by a run without one). When only one side has a
    sampler a WARNING says what happens: a run with one over a checkpoint without starts
    its data at the beginning of epoch 0; a run without one (no ``dataset_size``, whose
    first step trains on a batch of the script's own loader, not of ``ctx.batches``, before
    ``ctx.batches`` built a sampler) drops the checkpoint's position (it reads its data its
    own way)."""
    if sampler is not None and saved is not None:
        sampler.load_state_dict(dict(saved))
    elif sampler is not None:
        log.warning(
            "the checkpoint holds no data position (the run that wrote it had no "
            "dataset_size): this run's data starts at the beginning of epoch 0"
        )
    elif saved is not None:
        log.warning(
            "the checkpoint's data position (epoch %s, %s samples of it done) is not used: "
            "this run has no dataset_size and trains on batches of its own, not of "
            "ctx.batches(dataset) (take them from ctx.batches, or give the dataset_size the "
            "checkpoint's run had, %s, to resume where it stopped)",
            saved.get("epoch"),
            saved.get("offset"),
            saved.get("n"),
        )


def _window_size(local_batch: int | None, global_batch: int | None, world_size: int) -> int:
    """Samples in one step's window: ``global_batch``, else ``local_batch * world_size``."""
    if global_batch is not None:
        return max(1, global_batch)
    if local_batch is None:
        raise ConfigError("an ElasticSampler window needs local_batch or global_batch")
    return max(1, local_batch) * world_size


def default_collate(samples: list[Any]) -> Any:
    """Stack a list of samples (tensors, numbers, tuples or dicts of them) into a batch."""
    from torch.utils.data import default_collate as _collate

    return _collate(samples)


def fetch(
    dataset: Any, batch: LocalBatch, collate: Callable[[list[Any]], Any] = default_collate
) -> Any:
    """Load ``batch`` from an indexable ``dataset``; a ``TensorDataset`` is sliced directly.

    Only one whose items are ``TensorDataset``'s own (its ``__getitem__`` not overridden):
    any dataset with a ``tensors`` tuple was sliced, so a dataset of the user's that keeps
    its data as ``self.tensors`` and transforms it in ``__getitem__`` (an augmentation, a
    subclass of ``TensorDataset``) trained on the raw tensors, silently."""
    if isinstance(dataset, torch.Tensor):
        return dataset[batch.indices]
    if _plain_tensor_dataset(dataset):
        idx = torch.as_tensor(batch.indices)
        return tuple(t[idx] for t in dataset.tensors)
    return collate([dataset[i] for i in batch.indices])


def _plain_tensor_dataset(dataset: Any) -> bool:
    """Whether ``dataset`` is a ``TensorDataset`` whose items are its tensors' rows as they
    are (``TensorDataset.__getitem__``), which slicing the tensors gives in one go."""
    from torch.utils.data import TensorDataset

    return (
        isinstance(dataset, TensorDataset)
        and type(dataset).__getitem__ is TensorDataset.__getitem__
        and isinstance(dataset.tensors, tuple)
    )


def remapped(data: Mapping[Any, Any], values: dict[Any, Any]) -> Mapping[Any, Any]:
    """``values`` in a mapping of ``data``'s own kind where one can be made: a copy of a
    mutable mapping (an ``OrderedDict``, a ``defaultdict``, a tokenizer's ``BatchEncoding``
    with its attribute access) updated with them; else the plain dict ``values``."""
    if type(data) is not dict and isinstance(data, MutableMapping):
        try:
            copied = copy.copy(data)
            copied.update(values)
        except Exception:  # a mapping that cannot be copied or updated: a plain dict
            return values
        return copied
    return values


def map_tensors(data: Any, change: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """``data`` with ``change`` applied to every tensor in it (tensors nested in tuples,
    named tuples, lists and mappings too, each kept of its kind where it can be; other values
    as they are). How a batch is moved to a device or cut into micro-batches."""
    if isinstance(data, torch.Tensor):
        return change(data)
    if isinstance(data, Mapping):
        return remapped(data, {key: map_tensors(value, change) for key, value in data.items()})
    if isinstance(data, tuple):
        changed = [map_tensors(value, change) for value in data]
        return type(data)(*changed) if hasattr(data, "_fields") else tuple(changed)
    if isinstance(data, list):
        return [map_tensors(value, change) for value in data]
    return data


def to_device(data: Any, device: torch.device) -> Any:
    """``data`` with every tensor in it on ``device`` (:func:`map_tensors`). The batches of
    :meth:`~danlu.train.context.TrainContext.batches` come to the model's device this way."""
    return map_tensors(data, lambda tensor: tensor.to(device))
