"""Durable run state: run directories, the journal, atomic snapshots, the lock. Knows nothing of formats."""

from __future__ import annotations

from stepline.store._blobs import keep_artifact, keep_blob, link_blob, read_blob
from stepline.store._doctor import Diagnosis, Finding, diagnose, truncate_to_last_good
from stepline.store._files import (
    atomic_write_bytes,
    atomic_write_json,
    fsync_path,
    read_json,
    stale_temp_files,
    state_folder,
    sweep_temp_files,
)
from stepline.store._journal import Durability, Journal, datasync, read_journal
from stepline.store._lock import RunLock, lock_holder
from stepline.store._rundir import (
    DEFAULT_STORAGE_ROOT,
    MANIFEST_COUNTS,
    RUN_FILES,
    RunDir,
    RunStore,
    RunSummary,
    new_run_id,
)
from stepline.store._summary import SUMMARY_FILE, Fingerprint, fingerprint, read_summary, save_summary

__all__ = [
    "DEFAULT_STORAGE_ROOT",
    "MANIFEST_COUNTS",
    "RUN_FILES",
    "SUMMARY_FILE",
    "Diagnosis",
    "Durability",
    "Finding",
    "Fingerprint",
    "Journal",
    "RunDir",
    "RunLock",
    "RunStore",
    "RunSummary",
    "atomic_write_bytes",
    "atomic_write_json",
    "datasync",
    "diagnose",
    "fingerprint",
    "fsync_path",
    "keep_artifact",
    "keep_blob",
    "link_blob",
    "lock_holder",
    "new_run_id",
    "read_blob",
    "read_journal",
    "read_json",
    "read_summary",
    "save_summary",
    "stale_temp_files",
    "state_folder",
    "sweep_temp_files",
    "truncate_to_last_good",
]
