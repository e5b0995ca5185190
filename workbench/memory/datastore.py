"""The kNN-MT datastore of a (version, corpus): its life beside the corpus.

Keys are the version's decoder states at every target position of the corpus' train pairs
(teacher forcing), values the next target token (``core_model.retrieval``). The store is a
faiss index whose entry ids carry (pair id, position, token), so a pair's entries are removed
by one id range and a neighbour names its pair without a side table.

It follows the corpus without a rebuild: every use compares the train pairs' (id, content
hash) with the ones the store holds and adds or removes the difference (a saved correction is
in it for the next translation, a deleted pair is out). It is rebuilt — with the reason — when
the version's files change (another sha256) or its file is missing, unreadable or of another
format; nothing of it is needed to open the app. It lives in ``<data folder>/memory/`` and is
written atomically (one file, renamed into place), so a crash never leaves half a store.
k, λ and T are tuned on the corpus' valid split at build time (``memory.tuning``) and saved
with it. What the
memory did in one translation, step by step (the Inspect page), is ``memory.explanation``.

(Over 450 lines on purpose: the store's file, its entries' ids, its build and tuning and its
sync with the corpus are one life cycle — every one of them reads the same ``Store`` and its
id layout — and apart they would share their private parts.)
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import torch
from sqlalchemy import select

from core_model.artifact import LoadedModel
from core_model.batching import Example, encode_source
from core_model.retrieval import (
    KnnSettings,
    RetrievalMemory,
    median_nearest,
    scaled_settings,
    teacher_forced_entries,
)
from db.tables import Corpus, Pair
from workbench import settings
from workbench.corpus.corpora import CorpusRef
from workbench.errors import WorkbenchError
from workbench.memory.tuning import tune_store
from workbench.messages import N_
from workbench.models.registry import VersionInfo, corpus_of_pair, get_version, load_model_of
from workbench.storage import session_scope
from workbench.team.trash import real_name

STORE_FORMAT = 1
# An entry id: pair id · 2^27 + target position · 2^17 + next token (ids ≥ 0 for faiss).
_TOKEN_BITS, _POSITION_BITS = 17, 10
_PAIR_SHIFT = _TOKEN_BITS + _POSITION_BITS
# Exact search (a flat index) up to this many entries; an inverted-file index with fp16
# vectors beyond (bench/knn_memory.py measures both).
FLAT_MAX_ENTRIES = 200_000
IVF_PROBES = 16
ENCODE_BATCH = 64  # pairs per teacher-forced pass while building
TUNING_PAIRS = 500  # valid pairs that tune k, λ and T


def entry_id(pair_id: int, position: int, token: int) -> int:
    return (pair_id << _PAIR_SHIFT) | (position << _TOKEN_BITS) | token


def pair_of(entry: int) -> int:
    return entry >> _PAIR_SHIFT


def token_of(entries: np.ndarray) -> np.ndarray:
    return np.where(entries >= 0, entries & ((1 << _TOKEN_BITS) - 1), -1)


class FaissStore:
    """``core_model.retrieval.Datastore`` over a faiss index of entry ids."""

    def __init__(self, index: faiss.Index) -> None:
        self.index = index

    @property
    def size(self) -> int:
        return int(self.index.ntotal)

    def neighbours(self, queries: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
        """queries [N, D] -> (squared distances [N, k], entry ids [N, k]; -1 for none)."""
        x = np.ascontiguousarray(queries.detach().cpu().float().numpy())
        if self.size == 0:
            return np.full((len(x), k), np.inf, np.float32), np.full((len(x), k), -1, np.int64)
        distances, ids = self.index.search(x, k)
        return np.where(ids >= 0, distances, np.inf).astype(np.float32), ids

    def search(
        self, queries: torch.Tensor, k: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        distances, ids = self.neighbours(queries, k)
        return torch.from_numpy(distances), torch.from_numpy(token_of(ids)), torch.from_numpy(ids)

    def add(self, keys: torch.Tensor, ids: np.ndarray) -> None:
        if len(ids):
            self.index.add_with_ids(np.ascontiguousarray(keys.float().numpy()), ids)

    def remove_pairs(self, pair_ids: list[int]) -> None:
        for pair_id in pair_ids:
            self.index.remove_ids(
                faiss.IDSelectorRange(pair_id << _PAIR_SHIFT, (pair_id + 1) << _PAIR_SHIFT)
            )


def new_index(dim: int, sample: torch.Tensor) -> faiss.Index:
    """Flat (exact) for a store of up to FLAT_MAX_ENTRIES; else IVF with fp16 vectors,
    ~4·√N lists trained on `sample`, searched IVF_PROBES lists deep."""
    if len(sample) <= FLAT_MAX_ENTRIES:
        return faiss.IndexIDMap2(faiss.IndexFlatL2(dim))
    lists = int(4 * np.sqrt(len(sample)))
    index = faiss.IndexIVFScalarQuantizer(
        faiss.IndexFlatL2(dim), dim, lists, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_L2
    )
    rng = np.random.default_rng(0)
    train = sample.numpy()[rng.choice(len(sample), min(len(sample), 64 * lists), replace=False)]
    index.train(np.ascontiguousarray(train))
    index.nprobe = IVF_PROBES
    return index


@dataclass
class Store:
    """A loaded datastore and what it reflects."""

    version_id: int
    corpus_id: int
    version_sha256: str
    faiss_store: FaissStore
    settings: KnnSettings
    pairs: dict[int, str]  # pair id -> content hash of the train pairs in it
    tuning: dict[str, float] = field(default_factory=dict)
    built_seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def memory(self) -> RetrievalMemory:
        return RetrievalMemory(self.faiss_store, self.settings)

    def describe(self) -> dict[str, Any]:
        """What a page or `--json` shows of the store."""
        s = self.settings
        return {
            "version_id": self.version_id,
            "corpus_id": self.corpus_id,
            "pairs": len(self.pairs),
            "entries": self.faiss_store.size,
            "index": "flat" if isinstance(self.faiss_store.index, faiss.IndexIDMap2) else "ivf",
            "k": s.k,
            "lambda": s.lam,
            "temperature": s.temperature,
            "tuning": self.tuning,
            "built_seconds": self.built_seconds,
        }


def store_path(version_id: int, corpus_id: int) -> Path:
    return settings.memory_dir() / f"v{version_id}-c{corpus_id}.npz"


# ------------------------------------------------------------------------ persistence


def _save(store: Store) -> None:
    """One file, written beside and renamed into place: the old store or the new one."""
    _write(store_path(store.version_id, store.corpus_id), _snapshot(store))


def _snapshot(store: Store) -> dict[str, np.ndarray]:
    """What the file holds, copied: taken under the store's lock, written without it."""
    meta = {
        "format": STORE_FORMAT,
        "version_sha256": store.version_sha256,
        "settings": store.settings.__dict__,
        "tuning": store.tuning,
        "built_seconds": store.built_seconds,
    }
    ids = np.fromiter(store.pairs, dtype=np.int64, count=len(store.pairs))
    return {
        "meta": np.array(json.dumps(meta)),
        "index": faiss.serialize_index(store.faiss_store.index),
        "pair_ids": ids,
        "pair_hashes": np.array([store.pairs[i] for i in ids.tolist()], dtype="U64"),
    }


def _write(path: Path, snapshot: dict[str, np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **snapshot)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _load(info: VersionInfo, corpus_id: int) -> tuple[Store | None, str]:
    """The stored store, or None and why it must be (re)built (a message id)."""
    path = store_path(info.id, corpus_id)
    if not path.is_file():
        return None, N_("no store yet")
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            if meta.get("format") != STORE_FORMAT:
                return None, N_("the store's format changed")
            if meta.get("version_sha256") != info.sha256:
                return None, N_("the version's files changed")
            index = faiss.deserialize_index(data["index"])
            pairs = dict(zip(data["pair_ids"].tolist(), data["pair_hashes"].tolist(), strict=True))
    except (OSError, ValueError, KeyError, RuntimeError):
        return None, N_("the store's file could not be read")
    _match_search_depth(index)
    return Store(
        info.id,
        corpus_id,
        info.sha256,
        FaissStore(index),
        KnnSettings(**meta["settings"]),
        pairs,
        meta.get("tuning", {}),
        meta.get("built_seconds", 0.0),
    ), ""


def _match_search_depth(index: faiss.Index) -> None:
    if isinstance(index, faiss.IndexIVF):
        index.nprobe = IVF_PROBES


# --------------------------------------------------------------------------- building


def _train_pairs(corpus_id: int) -> dict[int, tuple[str, str, str]]:
    with session_scope() as s:
        rows = s.execute(
            select(Pair.id, Pair.source, Pair.target, Pair.content_hash).where(
                Pair.corpus_id == corpus_id, Pair.split == "train"
            )
        ).all()
    return {r.id: (r.source, r.target, r.content_hash) for r in rows}


def _train_hashes(corpus_id: int) -> dict[int, str]:
    with session_scope() as s:
        rows = s.execute(
            select(Pair.id, Pair.content_hash).where(
                Pair.corpus_id == corpus_id, Pair.split == "train"
            )
        ).all()
    return {r.id: r.content_hash for r in rows}


def _encode(loaded: LoadedModel, source: str, target: str) -> Example | None:
    max_len = loaded.model.cfg.max_len
    tgt = loaded.tokenizers.tgt.encode(target)[: max(1, max_len - 1)]
    src = encode_source(loaded.tokenizers, source, max_len)
    return Example(tuple(src), tuple(tgt)) if len(src) > 1 and tgt else None


def _entries(
    loaded: LoadedModel,
    pairs: dict[int, tuple[str, str, str]],
    progress: Callable[[int, int], None] | None = None,
) -> tuple[torch.Tensor, np.ndarray]:
    """keys [M, D] and entry ids [M] of `pairs`, in teacher-forced batches of similar length."""
    encoded = [
        (pid, ex) for pid, (src, tgt, _) in pairs.items() if (ex := _encode(loaded, src, tgt))
    ]
    encoded.sort(key=lambda item: len(item[1].tgt))
    keys: list[torch.Tensor] = []
    ids: list[np.ndarray] = []
    for start in range(0, len(encoded), ENCODE_BATCH):
        batch = encoded[start : start + ENCODE_BATCH]
        entries = teacher_forced_entries(loaded.model, [ex for _, ex in batch])
        pair_ids = np.array([pid for pid, _ in batch], dtype=np.int64)[entries.example.numpy()]
        ids.append(
            (pair_ids << _PAIR_SHIFT)
            | (entries.position.numpy().astype(np.int64) << _TOKEN_BITS)
            | entries.tokens.numpy().astype(np.int64)
        )
        keys.append(entries.keys)
        if progress is not None:
            progress(min(start + ENCODE_BATCH, len(encoded)), len(encoded))
    dim = loaded.model.cfg.d_model
    if not keys:
        return torch.zeros(0, dim), np.zeros(0, np.int64)
    return torch.cat(keys), np.concatenate(ids)


def _valid_pairs(
    loaded: LoadedModel, corpus_id: int
) -> tuple[list[tuple[str, str]], list[Example]]:
    """The valid pairs that tune the store (those the version can encode) and their encoding."""
    with session_scope() as s:
        rows = s.execute(
            select(Pair.source, Pair.target)
            .where(Pair.corpus_id == corpus_id, Pair.split == "valid")
            .order_by(Pair.id)
            .limit(TUNING_PAIRS)
        ).all()
    encoded = [(r, ex) for r in rows if (ex := _encode(loaded, r.source, r.target))]
    return [(r.source, r.target) for r, _ in encoded], [ex for _, ex in encoded]


def build(
    info: VersionInfo, corpus_id: int, progress: Callable[[int, int], None] | None = None
) -> Store:
    """Encode the corpus' train pairs with the version, index them, tune k/λ/T on the valid
    split (``memory.tuning``; defaults scaled to the store's distances without one), and save
    the store."""
    started = time.monotonic()
    loaded = load_model_of(info)
    pairs = _train_pairs(corpus_id)
    keys, ids = _entries(loaded, pairs, progress)
    index = new_index(loaded.model.cfg.d_model, keys)
    faiss_store = FaissStore(index)
    faiss_store.add(keys, ids)
    valid, examples = _valid_pairs(loaded, corpus_id)
    if valid and faiss_store.size:
        knn, tuning = tune_store(loaded, faiss_store, valid, examples)
    else:  # nothing to tune on: the defaults, at the scale of the store's own distances
        knn, tuning = scaled_settings(_self_distance_scale(faiss_store, keys)), {}
    store = Store(
        info.id,
        corpus_id,
        info.sha256,
        faiss_store,
        knn,
        {pid: content for pid, (_, _, content) in pairs.items()},
        tuning,
        time.monotonic() - started,
    )
    _save(store)
    return store


def _self_distance_scale(faiss_store: FaissStore, keys: torch.Tensor) -> float:
    """The median distance from a sample of entries to their nearest other entry."""
    if faiss_store.size < 2:
        return 1.0
    sample = keys[torch.randperm(len(keys), generator=torch.Generator().manual_seed(0))[:2000]]
    distances, _ = faiss_store.neighbours(sample, 2)
    return median_nearest(torch.from_numpy(distances[:, 1]))


def sync(store: Store, loaded: LoadedModel) -> int:
    """Bring the store up to the corpus' train pairs now: remove the entries of pairs gone or
    changed, add those of pairs new or changed. Returns how many pairs moved."""
    current = _train_hashes(store.corpus_id)
    gone = [pid for pid, h in store.pairs.items() if current.get(pid) != h]
    new_ids = [pid for pid, h in current.items() if store.pairs.get(pid) != h]
    if not gone and not new_ids:
        return 0
    store.faiss_store.remove_pairs(gone)
    for pid in gone:
        del store.pairs[pid]
    if new_ids:
        with session_scope() as s:
            rows = s.execute(
                select(Pair.id, Pair.source, Pair.target, Pair.content_hash).where(
                    Pair.id.in_(new_ids)
                )
            ).all()
        added = {r.id: (r.source, r.target, r.content_hash) for r in rows}
        keys, ids = _entries(loaded, added)
        store.faiss_store.add(keys, ids)
        store.pairs.update({pid: content for pid, (_, _, content) in added.items()})
    _save_soon(store)
    return len(gone) + len(new_ids)


# A synced store is written a moment later, not before the translation that synced it: the
# file is a cache of what the database says (a process that dies first leaves an older file,
# which the next one syncs again), and writing a large store takes longer than a translation.
SAVE_DELAY_S = 2.0
_pending: dict[tuple[int, int], threading.Timer] = {}
_pending_lock = threading.Lock()


def _save_soon(store: Store) -> None:
    """Write the store once no sync has come for SAVE_DELAY_S (a translator saving pair after
    pair is not made to wait for the copy each time)."""
    key = (store.version_id, store.corpus_id)
    with _pending_lock:
        if key in _pending:
            _pending[key].cancel()
        timer = threading.Timer(SAVE_DELAY_S, _save_pending, (store,))
        timer.daemon = True
        _pending[key] = timer
    timer.start()


def _save_pending(store: Store) -> None:
    """Copy the store under its lock (a translation waits for the copy only), write it after."""
    with _pending_lock:
        _pending.pop((store.version_id, store.corpus_id), None)
    with store.lock:
        snapshot = _snapshot(store)
    _write(store_path(store.version_id, store.corpus_id), snapshot)


@atexit.register
def _save_pending_at_exit() -> None:
    """A command that synced a store and ends at once (``translate --memory``) writes it."""
    with _pending_lock:
        waiting = list(_pending.values())
    for timer in waiting:
        timer.cancel()
        _save_pending(timer.args[0])


# ---------------------------------------------------------------------- the services

_stores: dict[tuple[int, int], Store] = {}
_stores_lock = threading.Lock()


@dataclass
class BuildProgress:
    """A build running in this process, for a page to poll."""

    done: int = 0
    total: int = 0
    reason: str = ""
    error: str | None = None
    finished: bool = False


_builds: dict[tuple[int, int], BuildProgress] = {}


def memory_corpus(info: VersionInfo, corpus: CorpusRef | None) -> int:
    """The corpus whose pairs are the memory: the one asked for (of the version's language
    pair: ``registry.corpus_of_pair``), else the version's own. A corpus in the trash gives no
    memory, as to the memory matches (``recall``): asked for,
    it is no corpus (``find``); the version's own is refused by name."""
    if corpus is not None:
        return corpus_of_pair(info.id, corpus)
    with session_scope() as s:
        if info.corpus_id is None:
            raise WorkbenchError(
                N_(
                    "Model version {id} was not trained on a corpus here: choose the corpus "
                    "whose pairs the memory should use."
                ),
                id=info.id,
            )
        own = s.get(Corpus, info.corpus_id)
        if own is not None and own.deleted_at is not None:
            raise WorkbenchError(
                N_(
                    "The corpus of model version {id}, {name!r}, is in the trash: it gives no "
                    "memory. Restore it, or choose the corpus whose pairs the memory should use."
                ),
                id=info.id,
                name=real_name(own),
            )
    return info.corpus_id


def open_store(
    version_id: int,
    corpus: CorpusRef | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Store:
    """The version's store over the corpus, up to date with its pairs: loaded (or built, with
    `progress`) once per process, then synced at every call."""
    info = get_version(version_id)
    corpus_id = memory_corpus(info, corpus)
    key = (info.id, corpus_id)
    with _stores_lock:
        store = _stores.get(key)
        if store is not None and store.version_sha256 != info.sha256:
            store = None
        if store is None:
            store, _reason = _load(info, corpus_id)
            if store is None:
                store = build(info, corpus_id, progress)
            _stores[key] = store
    with store.lock:
        sync(store, load_model_of(info))
    return store


def store_state(version_id: int, corpus: CorpusRef | None = None) -> dict[str, Any]:
    """Whether the store is ready, being built (with its progress) or missing (with why)."""
    info = get_version(version_id)
    corpus_id = memory_corpus(info, corpus)
    key = (info.id, corpus_id)
    job = _builds.get(key)
    if job is not None and not job.finished:
        return {"state": "building", "done": job.done, "total": job.total, "reason": job.reason}
    if job is not None and job.error:
        return {"state": "failed", "error": job.error}
    if key in _stores and _stores[key].version_sha256 == info.sha256:
        return {"state": "ready", **_stores[key].describe()}
    store, reason = _load(info, corpus_id)
    if store is None:
        return {"state": "missing", "reason": reason}
    with _stores_lock:
        _stores.setdefault(key, store)
    return {"state": "ready", **store.describe()}


def build_in_background(version_id: int, corpus: CorpusRef | None = None) -> BuildProgress:
    """Start building (or loading) the store in a thread of this process; poll the returned
    progress or ``store_state``."""
    info = get_version(version_id)
    corpus_id = memory_corpus(info, corpus)
    key = (info.id, corpus_id)
    job = _builds.get(key)
    if job is not None and not job.finished:
        return job
    _, reason = _load(info, corpus_id)
    job = _builds[key] = BuildProgress(reason=reason)

    def report(done: int, total: int) -> None:
        job.done, job.total = done, total

    def run() -> None:
        try:
            open_store(info.id, corpus_id, report)
        except Exception as exc:  # a thread has no caller: keep the reason for the page
            job.error = str(exc) or type(exc).__name__
        finally:
            job.finished = True

    threading.Thread(target=run, name=f"memory-build-{info.id}-{corpus_id}", daemon=True).start()
    return job


def retrieval(version_id: int, corpus: CorpusRef | None = None) -> RetrievalMemory:
    """What the decoders take (``core_model.retrieval``): the version's store, up to date."""
    return open_store(version_id, corpus).memory()


def serialized_size(store: Store) -> int:
    """Bytes of the store's index as saved (its memory footprint, about)."""
    return int(faiss.serialize_index(store.faiss_store.index).nbytes)
