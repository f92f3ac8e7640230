"""Plugin: the SSD tier, a backup tier of the prefix cache (content-addressed chunks and a manifest).

- :mod:`.tier` -- :class:`~.tier.SsdTier`, the backup tier: index, writer thread, metrics;
- :mod:`.store` -- the store: chunk files plus the manifest that names snapshots;
- :mod:`.chunk_format`, :mod:`.chunk_files` -- one chunk on disk (versioned), written durably;
- :mod:`.records`, :mod:`.manifest` -- snapshot records (versioned) in a diskcache database;
- :mod:`.shared` -- the ledger that lets workers share the store: leases, holders, counts, change log;
- :mod:`.index` -- the in-memory prefix index of committed snapshots;
- :mod:`.inspect`, :mod:`.cli` -- ``kvgate cache ls | inspect | diagnose | clear``.

At start a damaged store is moved aside and an empty one opened, an unwritable ``ssd_path``
disables the tier (:func:`kvgate.core.cache.disk_state.open_or_set_aside`); the server starts either way.

Several workers may share one ``ssd_path`` (processes on one host, or hosts on one shared file
system). There is no exclusive lock; the design (:mod:`.store`, :mod:`.shared`):

- **Content addressing.** A chunk key is a hash chain over namespace and tokens, so two workers
  computing one prefix store one file; a record is keyed by its last chunk key, so they also
  share one record.
- **Reference counts.** ``ref:<chunk>`` counts the records naming a chunk, changed in the same
  transaction as the records. A file is deleted only in a transaction that finds its count zero,
  *after* the transaction that dropped the count committed: a crash leaves at worst an
  unreferenced file, never a record naming a missing one.
- **Holders and leases.** Every worker holds a lease (renewed by its writer thread, ended at
  close) and is a holder of the records it committed or restored. Dropping a record (eviction,
  round limit) only removes the worker as holder; the record and its chunks go when no *live*
  holder is left. Eviction considers only records the worker holds alone or whose holders'
  leases expired (a dead worker's records are adopted). So one worker's eviction never removes a
  chunk another live worker's records reference. Damage (a chunk that fails validation) is the
  exception: it drops every record naming the chunk, whoever holds it.
- **Commit order.** A snapshot's missing chunks are written to a unique temporary name, fsynced,
  renamed and their directories fsynced; then one transaction re-checks each chunk file (another
  worker may have deleted one it found unreferenced meanwhile: rewritten, or the commit fails),
  stores the record, counts new references, adds the holder and moves to a new generation.
- **Seeing others' writes.** Each generation logs the snapshot it changed (``log:<gen>``);
  :meth:`SsdStore.refresh` reads the records changed since the generation it last saw.
- **Orphans.** At start, chunk files with no reference and temporary files are deleted, but
  while other workers hold live leases only those older than ``ORPHAN_GRACE`` seconds (a file
  another worker is writing is younger), each checked against its count in a transaction. After a
  failed commit (a full disk: ENOSPC), the chunk files it wrote that nothing references are
  deleted at once, the other orphans as at start, and the eviction rules run, so the next commit
  has the room.
- **Free space.** Eviction keeps the store under ``ssd_bytes`` *and* the file system at least
  ``ssd_min_free_bytes`` free (whatever else fills it), among the records it may evict.

- **Races end in a refusal, never wrong state.** A lookup that raced another worker's drop reads
  a missing chunk, which fails validation like damage: that request computes instead. A queued
  backup that relied on a chunk another worker then evicted fails to commit (a lost backup).

Leases compare wall clocks: hosts sharing a store need synchronised clocks (``LEASE_SECONDS``,
60 s, tolerates small skew). All workers on one path should run one build (a worker drops, at
start, snapshots of another state format). The manifest is SQLite: a shared file system must
give working POSIX byte-range locks (local disks do; check NFS/SMB mounts before sharing).

Settings: ``[cache] ssd_enabled``, ``ssd_path`` (default ``<state dir>/ssd``), ``ssd_bytes`` (the
whole store's bound, shared), ``ssd_min_free_bytes``, ``ssd_worker_id`` (default: unique per process), ``chunk_tokens``,
``prefix_rounds``.
"""

from __future__ import annotations

from kvgate.core.cache.tiers import TierSpec
from kvgate.core.hookspecs import hookimpl


def enabled(config) -> bool:
    return config.cache.ssd_enabled


def build_tier(config, runtime):
    """A :class:`kvgate.plugins.cache_ssd.tier.SsdTier` under ``<state dir>/ssd`` (or cache.ssd_path)."""
    from kvgate.plugins.cache_ssd.tier import SsdTier

    settings = config.cache
    root = config.path_in_state(settings.ssd_path, "ssd")
    return SsdTier(root, settings.chunk_tokens, settings.ssd_bytes, runtime.state_format, settings.prefix_rounds,
                   worker_id=settings.ssd_worker_id, min_free_bytes=settings.ssd_min_free_bytes)


@hookimpl
def register_cache_tiers(register):
    register("ssd", TierSpec(role="backup", build=build_tier, enabled=enabled))
