"""Durable state on disk: an append-only journal with group commit, and checkpoints.

It owns the files: how records are framed, checked and fsync'd (``Journal``,
``read_journal``) and how a checkpoint's tables and metadata are written atomically and
verified (``CheckpointStore``). It does not know what the records mean: the service
(``api.operator_journal``, ``api.recovery``) decides what it logs and how it restores an
operator from it.
Damage other than a torn last record raises ``DamagedStateError`` naming the file.
"""

from stretch.durable.checkpoints import Checkpoint, CheckpointStore
from stretch.durable.journal import Journal, JournalRecords, read_journal

__all__ = ["Checkpoint", "CheckpointStore", "Journal", "JournalRecords", "read_journal"]
