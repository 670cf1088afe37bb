"""Listing and loading checkpoints: the reading half of
:class:`~danlu.train.checkpoint.manager.CheckpointManager` (which adds saving, retention and
the resume's choice, :meth:`~danlu.train.checkpoint.manager.CheckpointManager.load_latest`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import torch

from danlu.core.errors import DataError
from danlu.train.checkpoint import codec
from danlu.train.checkpoint.fields import CheckpointInfo, damaged
from danlu.train.checkpoint.layout import decode_layout
from danlu.train.checkpoint.manifest import FORMAT, MANIFEST, META, parse_manifest
from danlu.train.checkpoint.manifest import FORMAT_FAMILY as _FORMAT_FAMILY
from danlu.train.checkpoint.manifest import OWN_NAME as _OWN_NAME
from danlu.train.checkpoint.manifest import PREFIX as _PREFIX
from danlu.train.checkpoint.reading import load_parts, verify_file
from danlu.train.checkpoint.runs import TornCheckpoint, torn_checkpoint
from danlu.train.checkpoint.sharded import (
    METADATA,
    SKELETON,
    agree,
    distributed_world,
    load_sharded,
)
from danlu.train.checkpoint.storage import LocalStorage, Storage

log = logging.getLogger(__name__)


class _OtherFormatError(DataError):
    """A manifest in another version of the format (``format``), which this danlu cannot
    read: not a damaged checkpoint, and not one to fall back past or remove."""

    def __init__(self, found: str, message: str) -> None:
        super().__init__(message)
        self.format = found


class _NotInThisMode(DataError):
    """A checkpoint this manager cannot read in its mode (a sharded one without
    ``sharded=True``, or away from a filesystem): not damaged, so neither marked invalid
    nor removed by retention (another manager, in its mode, loads it)."""


class CheckpointReader:
    """Lists, reads and verifies the checkpoints under :attr:`storage`; the state below is
    set up by :class:`~danlu.train.checkpoint.manager.CheckpointManager`'s constructor."""

    storage: Storage
    sharded: bool
    run_id: str | None
    loaded: str | None
    _infos: dict[str, CheckpointInfo]
    _invalid: set[str]
    _other: dict[str, str]
    _unread: set[str]
    _torn: list[TornCheckpoint]
    _runs: set[str]

    def list_checkpoints(self) -> list[CheckpointInfo]:
        """Checkpoints that have a readable manifest, oldest first (not verified); those in
        another version of the format are kept in ``_other`` as this listing found them."""
        out = []
        self._other, self._torn = {}, []
        unread, self._unread = self._unread, set()
        for name in self.storage.list_dirs():
            if not name.startswith(_PREFIX):
                continue
            info = self._infos.get(name)
            if info is None:
                try:
                    info = self._read_manifest(name)
                except _OtherFormatError as exc:
                    self._other[name] = exc.format
                    continue
                except (OSError, DataError) as exc:
                    if damaged(exc):
                        if _OWN_NAME.fullmatch(name):  # retention removes only these names
                            self._torn.append(torn_checkpoint(name, self._meta_bytes(name)))
                    else:  # kept: it may read again (said once)
                        if name not in unread:
                            log.warning("cannot read the manifest of %s: %s", name, exc)
                        self._unread.add(name)
                    continue
                self._infos[name] = info
            out.append(info)
        out.sort(key=lambda i: (i.step, i.created_ns))
        return out

    def _read_manifest(self, name: str) -> CheckpointInfo:
        where = self.storage.join(name, MANIFEST)
        try:
            m = json.loads(self.storage.read(where))
        except ValueError as exc:
            raise DataError(f"{where}: malformed manifest: {exc}") from exc
        named = m.get("format") if isinstance(m, dict) else None
        if isinstance(named, str) and named.startswith(_FORMAT_FAMILY) and named != FORMAT:
            raise _OtherFormatError(named, f"{where}: format {named}, not {FORMAT}")
        return parse_manifest(m, name, where)

    def _meta_bytes(self, name: str) -> bytes | None:
        """The ``meta.json`` of checkpoint ``name`` (its first file, written before its
        tensors or shards and its manifest), unverified; None when it cannot be read."""
        try:
            return self.storage.read(self.storage.join(name, META))
        except OSError:
            return None

    def _verify_file(self, info: CheckpointInfo, fname: str) -> None:
        """Verify a sharded checkpoint's file (:func:`verify_file`)."""
        verify_file(self.storage, info, fname)

    def load(self, name: str) -> tuple[int, dict[str, Any]]:
        """Load and verify the checkpoint ``name``; raises DataError when it is invalid."""
        try:
            info = self._infos.get(name) or self._read_manifest(name)
        except FileNotFoundError as exc:
            raise DataError(f"{self.storage.join(name)}: no manifest") from exc
        if info.kind == "sharded":
            if not self._readable_here(info):
                raise _NotInThisMode(
                    f"{self.storage.join(name)}: a sharded checkpoint; only a "
                    "CheckpointManager(sharded=True) on a filesystem directory loads it"
                )
            failure: OSError | DataError | None = None
            try:
                for fname in (METADATA, SKELETON):
                    if fname not in info.files:
                        raise DataError(f"{self.storage.join(name, fname)}: not in the manifest")
                for fname in info.files:
                    self._verify_file(info, fname)
            except (OSError, DataError) as exc:
                failure = exc
            if distributed_world()[1] > 1:  # every rank falls back together, or none does
                agree(failure, f"verifying {self.storage.join(name)}", DataError)
            elif failure is not None:
                raise failure
            return info.step, load_sharded(self.storage.join(name), files=set(info.files))
        meta, stored = load_parts(self.storage, info)
        base: dict[str, torch.Tensor] | None = None
        if info.kind == "incremental":
            if info.base is None:
                raise DataError(f"{self.storage.join(name)}: incremental without a base")
            if info.base == name or info.base not in self.storage.list_dirs():
                raise DataError(f"{self.storage.join(name)}: base {info.base!r} is gone")
            try:
                base_info = self._read_manifest(info.base)
            except FileNotFoundError as exc:
                raise DataError(f"{self.storage.join(info.base)}: base is gone") from exc
            if base_info.kind != "full":
                raise DataError(f"{self.storage.join(info.base)}: base is not full")
            _, base = load_parts(self.storage, base_info)
        tensors = decode_layout(meta, stored, base, self.storage.join(name))
        return info.step, codec.decode(meta["skeleton"], tensors)

    def load_chosen(self, name: str) -> tuple[int, dict[str, Any]]:
        """Load the checkpoint ``name`` that another rank's :meth:`load_latest` chose, as
        that does (its run becomes this manager's); raises as :meth:`load` does."""
        found = self.load(name)
        self._invalid.discard(name)
        self.join_run((self._infos.get(name) or self._read_manifest(name)).run)
        self.loaded = name
        return found

    def join_run(self, run: str | None) -> None:
        """Make ``run`` this manager's: its saves carry it (when it is a run's id), and
        :meth:`load_latest` counts its checkpoints as this run's own. A distributed job's
        ranks that write none join the writer's (danlu.train shares it), so that every
        rank falls back alike. None (a checkpoint written before runs were recorded, which
        any run may fall back to) changes nothing."""
        if run is None:
            return
        if self.run_id is None:
            self.run_id = run
        self._runs.add(run)

    def _readable_here(self, info: CheckpointInfo) -> bool:
        """Whether this manager can read ``info`` in its mode: a sharded checkpoint only
        with ``sharded=True`` on a filesystem directory."""
        return info.kind != "sharded" or (self.sharded and isinstance(self.storage, LocalStorage))
