"""CheckpointManager: atomic, verified, incremental and asynchronous checkpoints.

Layout under ``directory``: one sub-directory per checkpoint, ``ckpt-<step:012d>-<id>``,
holding ``tensors.pt`` (a flat ``{key: tensor}`` map, loaded with ``weights_only=True``),
``meta.json`` (the JSON skeleton of the state and how each tensor is stored) and, written
LAST, ``MANIFEST.json`` (kind, base, step, metrics and the SHA-256 and size of every file).
A directory without a manifest, or whose files do not match it, is never loaded.

An incremental checkpoint stores only what differs from the last *full* checkpoint (its
``base``): unchanged tensors are references, changed ones a compressed element-wise delta
(:mod:`danlu.train.checkpoint.delta`: exact on the bits) or the whole tensor, whichever is
smaller. Every ``full_every``-th checkpoint is full, so a restore
reads at most two checkpoints.

Listing, reading and verifying are :class:`~danlu.train.checkpoint.loading.CheckpointReader`'s
(:mod:`danlu.train.checkpoint.loading`); saving, retention and the resume's choice
(:meth:`CheckpointManager.load_latest`) are here.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal

import torch

from danlu.core.errors import ConfigError, DataError
from danlu.train.checkpoint import codec
from danlu.train.checkpoint.fields import CheckpointInfo as CheckpointInfo  # re-exported
from danlu.train.checkpoint.fields import damaged, manifest_metrics, no_space, not_writable
from danlu.train.checkpoint.layout import encode_layout
from danlu.train.checkpoint.loading import CheckpointReader
from danlu.train.checkpoint.manifest import FORMAT as FORMAT  # re-exported
from danlu.train.checkpoint.manifest import MANIFEST as MANIFEST  # re-exported
from danlu.train.checkpoint.manifest import META as META  # re-exported
from danlu.train.checkpoint.manifest import OWN_NAME as _OWN_NAME
from danlu.train.checkpoint.manifest import PREFIX as _PREFIX
from danlu.train.checkpoint.manifest import TENSORS as TENSORS  # re-exported
from danlu.train.checkpoint.manifest import manifest_json
from danlu.train.checkpoint.retention import kept_names
from danlu.train.checkpoint.runs import (
    TornCheckpoint,
    next_time_ns,
    of_runs,
    resuming_runs,
)
from danlu.train.checkpoint.sharded import (
    agree,
    distributed_world,
    save_sharded,
)
from danlu.train.checkpoint.snapshot import HostSnapshot
from danlu.train.checkpoint.storage import (
    LocalStorage,
    Storage,
    file_digest,
    open_storage,
    sha256,
)
from danlu.train.checks import (
    flag_argument,
    normalised_best_mode,
    positive_argument,
    whole_argument,
)
from danlu.train.state import CapturedState, IncompatibleCheckpointError

log = logging.getLogger(__name__)


class CheckpointManager(CheckpointReader):
    """Saves and loads training states under ``directory`` (a path or an fsspec URL).

    Args:
        directory: local path, ``file://`` URL, or fsspec URL such as ``s3://bucket/prefix``.
        keep_last: keep the newest N checkpoints (>= 1).
        keep_best: also keep the best K by ``best_metric`` (0 disables).
        best_metric: the key of ``metrics`` (passed to :meth:`save`) ranking checkpoints.
        mode: ``"min"`` or ``"max"`` (in any case): which values of ``best_metric`` are
            better.
        incremental: store deltas against the last full checkpoint (keeps that full
            checkpoint's tensors in host memory to compare against).
        full_every: every N-th checkpoint is full (so at most N-1 deltas per base).
        async_save: persist in a background thread, at most one save in flight; the
            training waits only for the snapshot to host memory, and with
            ``capture_state(copy=False)`` not even for that (see :meth:`save`).
        storage_options: passed to fsspec for URLs (e.g. ``{"client_kwargs": ...}``).
        every_steps: :meth:`should_save` is true on steps divisible by this.
        every_seconds: :meth:`should_save` is true when this long (``time.monotonic``
            seconds) has passed since the last save.
        sharded: with a process group of more than one rank, :meth:`save` is COLLECTIVE:
            every rank calls it and writes its own shards through
            ``torch.distributed.checkpoint`` (for sharded state such as FSDP). Off (the
            default), a single process writes the directory: with DDP's replicated state,
            let rank 0 own it and call :meth:`save` there only.

    The counts are integers (not bools, not ``1.5``), ``every_seconds`` a positive finite
    number and the switches True or False (or 0/1): anything else is a
    :class:`~danlu.core.errors.ConfigError` naming the argument.
    """

    def __init__(
        self,
        directory: str,
        *,
        keep_last: int = 3,
        keep_best: int = 1,
        best_metric: str | None = None,
        mode: str = "min",
        incremental: bool = False,
        full_every: int = 10,
        async_save: bool = False,
        storage_options: dict[str, Any] | None = None,
        every_steps: int | None = None,
        every_seconds: float | None = None,
        sharded: bool = False,
    ) -> None:
        # counts are integers (a keep_last of 1.5 raised a bare TypeError in the retention of
        # the first save, after its commit; every_steps=2.5 saved on steps 5, 10, ...), a
        # period a positive finite number (a NaN never saved), switches bools ("no" is true)
        keep_last = whole_argument("keep_last", keep_last, 1)
        keep_best = whole_argument("keep_best", keep_best, 0)
        mode = normalised_best_mode(mode, "mode")
        full_every = whole_argument("full_every", full_every, 1)
        if every_steps is not None:
            every_steps = whole_argument("every_steps", every_steps, 1)
        if every_seconds is not None:
            every_seconds = positive_argument("every_seconds", every_seconds)
        incremental = flag_argument("incremental", incremental)
        async_save = flag_argument("async_save", async_save)
        sharded = flag_argument("sharded", sharded)
        self.directory = directory
        self.sharded = sharded
        self.keep_last, self.keep_best = keep_last, keep_best
        self.best_metric, self.mode = best_metric, mode
        self.incremental, self.full_every = incremental, full_every
        self.async_save = async_save
        self.every_steps, self.every_seconds = every_steps, every_seconds
        self.storage: Storage = open_storage(directory, storage_options)
        self._infos: dict[str, CheckpointInfo] = {}
        self._invalid: set[str] = set()
        """Checkpoints :meth:`load_latest` skipped as invalid: retention does not keep them."""
        self._other: dict[str, str] = {}
        """Checkpoints in another version of the format (a newer danlu's), with it, as the
        last :meth:`list_checkpoints` found them: neither loaded nor removed."""
        self._unread: set[str] = set()
        """Checkpoints whose manifest the last :meth:`list_checkpoints` could not read for a
        passing reason (an ``EIO``, a permission: not :func:`damaged`): not removed by
        retention (a restart's first save deleted such a checkpoint, however new)."""
        self._torn: list[TornCheckpoint] = []
        """The checkpoints whose manifest the last :meth:`list_checkpoints` found damaged
        (torn, malformed, missing), with the run and start their ``meta.json`` names."""
        self.run_id: str | None = None
        """The run this manager's saves belong to, written in their manifests (``run``): the
        run of the checkpoint :meth:`load_latest` resumed from, so that a run keeps one id
        through its restarts, else a new one at the first save. :meth:`load_latest` falls
        back only within it (see there)."""
        self.loaded: str | None = None
        """The name of the checkpoint :meth:`load_latest` (or :meth:`load_chosen`) returned
        last; None before one, and after a :meth:`load_latest` that found none."""
        self._runs: set[str] = set()
        """The runs whose checkpoints are this run's own: :attr:`run_id` and the run of the
        checkpoint resumed from."""
        self._base: tuple[str, dict[str, torch.Tensor]] | None = None
        self._since_full = 0
        self._snap = HostSnapshot()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._last_step: int | None = None
        self._last_time = time.monotonic()
        self._committed_step: int | None = None
        self._closed = False
        self.last_snapshot_s = 0.0
        """Seconds the last :meth:`save` blocked its caller (snapshot, plus persisting
        when synchronous); see also :attr:`snapshot_wait_s`."""

    # -- when -----------------------------------------------------------------------------
    def should_save(self, step: int, now: float | None = None) -> bool:
        """True when ``step`` is due by ``every_steps`` or ``every_seconds``.

        ``now`` is ``time.monotonic()`` seconds (taken when omitted). A step already saved
        is never due again. With neither policy set, nothing is ever due.
        """
        if step == self._last_step:
            return False
        if self.every_steps is not None and step % self.every_steps == 0:
            return True
        if self.every_seconds is not None:
            now = time.monotonic() if now is None else now
            return now - self._last_time >= self.every_seconds
        return False

    def note_saved(self, step: int) -> None:
        """Count the periodic policy from a save of ``step`` made elsewhere (the writer rank
        of a distributed job), as :meth:`save` does from its own."""
        self._last_step, self._last_time = int(step), time.monotonic()

    @property
    def committed_step(self) -> int | None:
        """The step of the checkpoint this manager committed last (its manifest written: it
        is complete and loads), None before its first. An asynchronous save's once its
        background write has finished; read from any thread (danlu.train reports it as
        the metric records' ``checkpoint_step``). A sharded save's on rank 0, which commits."""
        return self._committed_step

    # -- save -----------------------------------------------------------------------------
    def save(
        self, step: int, state: dict[str, Any], metrics: dict[str, float] | None = None
    ) -> None:
        """Checkpoint ``state`` (from :func:`~danlu.train.state.capture_state`) at ``step``.

        With ``async_save`` the state is persisted by a background thread; at most one save
        is in flight (a save still in flight is waited for first). What this call waits for
        depends on the state (see :mod:`danlu.train.checkpoint.snapshot`):

        * ``capture_state(...)`` (copies): nothing more; the copies are taken over as they
          are and must not be mutated after.
        * ``capture_state(..., copy=False)`` with an optimizer, on CPU: nothing more; the
          live parameters and optimizer state are copied into reused host buffers by the
          background thread while training goes on, and that optimizer's next ``step()``
          waits until the copy is done. Until then change them only through
          ``optimizer.step()`` (or call :meth:`wait_snapshot` first).
        * anything else (a plain dict of live tensors, CUDA tensors): the live tensors are
          copied into reused host buffers before this returns.

        Errors of a background save are raised by the next call to :meth:`save`,
        :meth:`wait` or :meth:`close`. ``metrics`` are checked first
        (:func:`manifest_metrics`).
        """
        if self._closed:
            raise ConfigError("save() on a closed CheckpointManager")
        t0 = time.perf_counter()
        metrics = manifest_metrics(metrics)  # before anything is written
        self.wait()
        if self.run_id is None:
            self.join_run(uuid.uuid4().hex)
        if self.sharded and distributed_world()[1] > 1:
            self._save_sharded(int(step), state, metrics)
            self.note_saved(step)
            self.last_snapshot_s = time.perf_counter() - t0
            return
        skeleton, tensors = codec.encode(state)
        owned = isinstance(state, CapturedState) and state.owned
        guards = tuple(state.guards) if isinstance(state, CapturedState) else ()
        copy: Callable[[], None] | None = None
        if not owned:
            if not self.async_save:
                tensors = {k: t.detach().cpu() for k, t in tensors.items()}
            elif guards and HostSnapshot.deferrable(tensors):
                tensors, copy = self._snap.start_deferred(tensors, guards)
            else:
                tensors = self._snap.copy_now(tensors)
        job = (int(step), skeleton, tensors, metrics, owned)
        self.note_saved(step)
        if self.async_save:
            self._thread = threading.Thread(
                target=self._run, args=(copy, *job), name="danlu-checkpoint", daemon=True
            )
            try:
                self._thread.start()
            except BaseException:
                self._thread = None
                if copy is not None:  # never leave the optimizer hook waiting
                    copy()
                raise
            self.last_snapshot_s = time.perf_counter() - t0
        else:
            self._persist(*job)
            self.last_snapshot_s = time.perf_counter() - t0

    def _save_sharded(self, step: int, state: dict[str, Any], metrics: dict[str, float]) -> None:
        """Collective save through DCP (synchronous); rank 0 writes the manifest last."""
        if not isinstance(self.storage, LocalStorage):
            raise ConfigError(
                "sharded (world size > 1) checkpoints need a local or shared filesystem "
                "directory, not an object-store URL"
            )
        dist = torch.distributed
        started = None
        if dist.get_rank() == 0:  # rank 0 alone: what fails here must not leave the rest waiting
            try:  # in the broadcast; a listing refused here fails the commit's, on every rank
                started = self._next_time_ns()
            except OSError:
                started = time.time_ns()
        names = [f"{_PREFIX}{step:012d}-{uuid.uuid4().hex[:8]}", self.run_id, started]
        dist.broadcast_object_list(names, src=0)  # one directory name (and run) for all ranks
        name, self.run_id = str(names[0]), str(names[1])  # rank 0's run on every rank
        self._runs.add(self.run_id)
        # its meta.json, written before any shard, names only its run and start (see runs)
        meta = json.dumps({"format": FORMAT, "run": self.run_id, "started_ns": names[2]})
        try:
            written = save_sharded(state, self.storage.join(name), (META, meta.encode()))
            failure = None
            if dist.get_rank() == 0:
                failure = self._commit_shards(name, step, written, metrics)
            agree(failure, f"checkpoint of step {step}")
        except BaseException as exc:
            # Every rank removes the directory (rmtree tolerates the others doing the same).
            self._drop_unfinished(name, step, exc)
            raise
        failure = None
        if dist.get_rank() == 0:
            try:
                self._retain(name)
            except Exception as exc:  # the checkpoint is committed: it stays
                failure = exc
        # raised on every rank (a rank 0 failing here left the others in a barrier until
        # the process group's timeout)
        agree(failure, f"removing old checkpoints after the checkpoint of step {step}")

    def _commit_shards(
        self, name: str, step: int, written: list[str], metrics: dict[str, float]
    ) -> BaseException | None:
        """Rank 0's part of a sharded save: checksum the files every rank wrote and commit
        the manifest. Returns what failed (for every rank to raise), None when it did not."""
        try:
            files = {}
            for fname in written:  # hashed in chunks: a rank's shards may not fit in memory
                size, digest = file_digest(self.storage.join(name, fname))
                files[fname] = {"size": size, "sha256": digest}
            self._commit(name, step, "sharded", None, metrics, files)
        except BaseException as exc:
            return exc
        return None

    def _commit(
        self,
        name: str,
        step: int,
        kind: Literal["full", "incremental", "sharded"],
        base: str | None,
        metrics: dict[str, float],
        files: dict[str, dict[str, Any]],
    ) -> None:
        """Write the manifest of checkpoint ``name``, whose files are written: its commit.

        Its ``created_ns``, the commit order that retention and :meth:`load_latest` go by, is
        the wall clock's but past every checkpoint's in the directory
        (:func:`~danlu.train.checkpoint.runs.next_time_ns`): a node whose clock is behind the
        one that wrote them (or a clock stepped back) still commits after them. Ordered by
        the bare clock, its newer checkpoints were the "oldest": retention deleted them as
        they were written and a restart resumed from the other node's."""
        info = CheckpointInfo(
            name=name,
            step=step,
            kind=kind,
            base=base,
            created_ns=self._next_time_ns(),
            metrics=metrics,
            files=files,
            run=self.run_id,
        )
        self._write_manifest(info)
        self._committed_step = step

    def _next_time_ns(self) -> int:
        """The time a save starting or committing now records (see :func:`next_time_ns`)."""
        return next_time_ns(self.list_checkpoints(), self._torn, time.time_ns())

    def _write_manifest(self, info: CheckpointInfo) -> None:
        # No directory fsync before the manifest: a file lost by a power cut is caught by
        # the manifest's checksums, so the manifest alone is the commit record.
        self.storage.write(self.storage.join(info.name, MANIFEST), manifest_json(info))
        self.storage.sync_dir(self.storage.join(info.name))
        self.storage.sync_dir(self.storage.root)
        self._infos[info.name] = info

    def _run(self, copy: Callable[[], None] | None, *job: Any) -> None:
        try:
            if copy is not None:
                copy()
            self._persist(*job)
        except BaseException as exc:  # re-raised in the caller's thread by wait()
            self._error = exc

    def _persist(
        self,
        step: int,
        skeleton: Any,
        tensors: dict[str, torch.Tensor],
        metrics: dict[str, float],
        owned: bool,
    ) -> None:
        use_delta = (
            self.incremental and self._base is not None and self._since_full < self.full_every - 1
        )
        base_name: str | None = None
        base: dict[str, torch.Tensor] | None = None
        if use_delta:
            assert self._base is not None
            base_name, base = self._base
        stored, layout = encode_layout(tensors, base)
        name = f"{_PREFIX}{step:012d}-{uuid.uuid4().hex[:8]}"
        meta: dict[str, Any] = {
            "format": FORMAT,
            "skeleton": skeleton,
            "layout": layout,
            "run": self.run_id,
            "started_ns": self._next_time_ns(),  # orders it if it is torn (see runs)
        }
        blobs = {  # meta.json first: a save that dies writing the tensors still names its run
            META: json.dumps(meta).encode(),
            TENSORS: codec.tensors_to_bytes(stored),
        }
        try:
            self.storage.makedirs(self.storage.join(name))
            files = {}
            for fname, data in blobs.items():
                self.storage.write(self.storage.join(name, fname), data)
                files[fname] = {"size": len(data), "sha256": sha256(data)}
            kind: Literal["incremental", "full"] = "incremental" if use_delta else "full"
            self._commit(name, step, kind, base_name, metrics, files)
        except BaseException as exc:
            self._drop_unfinished(name, step, exc)
            raise
        if use_delta:
            self._since_full += 1
        elif self.incremental:
            kept = tensors if owned else {k: t.clone() for k, t in tensors.items()}
            self._base, self._since_full = (name, kept), 0
        self._retain(name)

    def _drop_unfinished(self, name: str, step: int, exc: BaseException) -> None:
        """Remove the directory of a save that did not finish (``exc`` says why).

        On a full disk its part would otherwise keep every later save from fitting; the
        error then gets a note saying where the space went; a directory that refuses writes
        (read-only, no permission), a note naming it and the fix. A save that failed after its
        manifest was written (the sync after it, a sharded save's last collective) is
        committed, complete and loads: it is kept, and the error says so (it was removed,
        on every rank of a sharded save: a complete checkpoint lost).
        """
        if self._manifest_written(name):
            exc.add_note(
                f"checkpoint {self.storage.join(name)} of step {step} was committed (its "
                "manifest written) before this failure: it is kept"
            )
            return
        self.storage.remove_dir(name)
        self._infos.pop(name, None)
        if no_space(exc):
            held = len(self.list_checkpoints())
            exc.add_note(
                f"checkpoint of step {step} not saved: no space left in "
                f"{self.storage.root}, where the {held} checkpoint(s) kept stay "
                f"(keep_last={self.keep_last}); free space there or keep fewer"
            )
        elif (refused := not_writable(exc)) is not None:
            exc.add_note(
                f"checkpoint of step {step} not saved: {self.storage.root} cannot be written "
                f"({refused.strerror}); give checkpoint_dir (DANLU_CHECKPOINT_DIR) a directory "
                "this job can write, or make this one writable"
            )

    def _manifest_written(self, name: str) -> bool:
        """Whether the manifest of checkpoint ``name`` is there and reads: it is committed."""
        try:
            self._read_manifest(name)
        except (OSError, DataError):
            return False
        return True

    # -- retention ------------------------------------------------------------------------
    def _retain(self, committed: str) -> None:
        """Remove the checkpoints retention does not keep, after ``committed`` was written
        (:func:`~danlu.train.checkpoint.retention.kept_names` says which: ``keep_last`` by
        commit order, ``keep_best`` of each run, and the bases those need). Checkpoints
        :meth:`load_latest` found invalid count for neither ``keep_last`` nor
        ``keep_best``. A checkpoint in another version of the format (a newer danlu wrote
        it) is never removed: it is not this version's to judge, and a downgrade deleted
        it. Nor is one this manager cannot read in its mode (a sharded one without
        ``sharded=True``: such a manager marked it invalid, and retention deleted it); it
        counts for neither ``keep_last`` nor ``keep_best``. Nor is one whose manifest could
        not be read for a passing reason (an ``EIO``, a permission: ``_unread``).
        """
        infos = self.list_checkpoints()
        unreadable = {i.name for i in infos if not self._readable_here(i)}
        keep = kept_names(
            infos,
            committed,
            skipped=self._invalid | unreadable,
            keep_last=self.keep_last,
            keep_best=self.keep_best,
            best_metric=self.best_metric,
            mode=self.mode,
            next_base=None if self._base is None else self._base[0],
        )
        for name in self.storage.list_dirs():
            if _OWN_NAME.fullmatch(name) and name not in keep:
                if name in self._other or name in unreadable or name in self._unread:
                    # not ours to judge, or not read this time
                    continue
                self.storage.remove_dir(name)
                self._infos.pop(name, None)
                self._invalid.discard(name)

    # -- load -------------------------------------------------------------------------------
    def load_latest(self) -> tuple[int, dict[str, Any]] | None:
        """The newest checkpoint whose manifest and checksums verify, as ``(step, state)``.

        Newest by commit order (the manifest's ``created_ns``), as retention keeps them: a
        run that started afresh over an older run's directory, or went on after a fallback
        past a checkpoint it could not read then, resumes from what it wrote last, not from
        the older run's higher step. Invalid or partial checkpoints are skipped with a
        warning, falling back to older ones **of the same run** (the manifest's ``run``):
        this manager's own (:attr:`run_id`, the run it resumed from), else, before it saved
        or loaded any, the run of the newest checkpoint, torn (its ``meta.json`` names it)
        or complete (:func:`~danlu.train.checkpoint.runs.resuming_runs`; one written before
        runs were recorded, without ``run``, is of any run, as before: the fallback goes to
        any). Another run's checkpoints are not a fallback (before, a
        damaged newest checkpoint of a run started with ``resume=False`` over an older
        run's directory, or a rollback, resumed the older run's weights and data
        position): with none of the run's left, a WARNING says so and the answer is None
        (start afresh). A checkpoint it cannot read in its
        mode (a sharded one without ``sharded=True``) is skipped with a warning, but not
        marked invalid: retention does not remove it. The run of the checkpoint loaded
        becomes this manager's (:meth:`join_run`). None when there is no valid checkpoint.

        Raises:
            IncompatibleCheckpointError: the directory holds a checkpoint in another version
                of the format (a newer danlu's), which falling back past would lose.
        """
        self.wait()
        self.loaded = None
        infos = self.list_checkpoints()
        if self._other:
            name, other = min(self._other.items())
            raise IncompatibleCheckpointError(
                f"{self.storage.join(name)} is a checkpoint in format {other}, which this "
                f"danlu cannot read (it reads {FORMAT}): a newer danlu wrote it. Resume "
                "with that danlu, or move the checkpoint out of the directory to resume "
                "from the older ones (they are not a fallback chosen silently: the run "
                "would lose the newer one's progress)"
            )
        newest = sorted(infos, key=lambda i: (i.created_ns, i.step, i.name), reverse=True)
        unreadable = [i for i in newest if not self._readable_here(i)]
        if unreadable:
            log.warning(
                "skipping %d sharded checkpoint(s) in %s (the newest %s): only a "
                "CheckpointManager(sharded=True) on a filesystem directory loads them; they "
                "are kept",
                len(unreadable),
                self.storage.root,
                unreadable[0].name,
            )
        readable = [i for i in newest if self._readable_here(i)]
        # the run of the newest checkpoint, torn (its meta.json names it) or complete: a new
        # run's only checkpoint, torn, made the resume take an older run's instead
        runs: set[str | None] = set(self._runs)
        runs = runs or resuming_runs(self._torn, readable[0] if readable else None)
        mine, others = of_runs(readable, runs)
        for info in mine:
            try:
                found = self.load(info.name)
            except (OSError, DataError) as exc:
                log.warning("skipping invalid checkpoint %s: %s", info.name, exc)
                if damaged(exc):  # not a passing read error: retention keeps that one
                    self._invalid.add(info.name)
                continue
            self._invalid.discard(info.name)
            self.join_run(info.run)
            self.loaded = info.name
            return found
        if others:
            log.warning(
                "no valid checkpoint of this run in %s: the %d checkpoint(s) of other runs "
                "there (the newest of step %d) are not loaded in its place (another run's "
                "weights and data position); starting afresh",
                self.storage.root,
                len(others),
                others[0].step,
            )
        return None

    # -- lifecycle ------------------------------------------------------------------------
    @property
    def snapshot_wait_s(self) -> float:
        """Seconds optimizer steps have waited for deferred snapshots (cumulative): with
        :attr:`last_snapshot_s`, the time training was stalled by async checkpoints."""
        return self._snap.wait_s

    @property
    def snapshot_pending(self) -> bool:
        """True while the deferred host copy of the save in flight is not done."""
        return self._snap.pending

    def wait_snapshot(self) -> None:
        """Block until the deferred host copy of the save in flight is done (its
        persisting may go on): after this the live tensors may be changed freely."""
        self._snap.wait()

    def wait(self) -> None:
        """Block until the save in flight (if any) is persisted; re-raise its error."""
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._snap.wait()
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def close(self) -> None:
        """Wait for the save in flight and release host buffers."""
        try:
            self.wait()
        finally:
            self._closed = True
            self._snap.close()
            self._base = None

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
