"""Atomic, verified, incremental and asynchronous checkpoints (local or fsspec storage).

Use with :func:`danlu.train.state.capture_state` / :func:`~danlu.train.state.restore_state`::

    mgr = CheckpointManager("ckpts", every_steps=50, async_save=True)
    found = mgr.load_latest()
    if found:
        restore_state(found[1], model, optimizer)
    ...
    if mgr.should_save(step):
        mgr.save(step, capture_state(model, optimizer, step=step))
"""

from danlu.train.checkpoint.manager import CheckpointInfo, CheckpointManager

__all__ = ["CheckpointInfo", "CheckpointManager"]
