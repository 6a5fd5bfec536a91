"""``TetherSaver``: LangGraph's checkpoint saver on tether's SQLite or Postgres store."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Generator, Iterator, Sequence
from typing import Any, Final, TypeAlias, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from ... import serde as _tether_serde
from ...errors import ConcurrentWriteError, ConfigurationError, SerializationError
from ...store import encoding
from ...store.base import Checkpointer
from . import _plans, _rows
from ._backend import Backend, Plan, backend_for
from ._state import Encoder, ThreadHead
from .serde import TetherSerializer

__all__ = ["TetherSaver"]

T = TypeVar("T")
# An operation of the saver: yields (op, plan, write) for a backend to run, gets the result.
Steps: TypeAlias = Generator[tuple[str, Plan[Any], bool], Any, T]

HEAD_CACHE_THREADS: Final = 256
PUT_ATTEMPTS: Final = 8


class TetherSaver(BaseCheckpointSaver[int]):
    """LangGraph's ``BaseCheckpointSaver`` on tether's store, sync and async.

    Swap it in for ``SqliteSaver``/``PostgresSaver``; graph code and ``thread_id`` stay the
    same::

        saver = TetherSaver.from_url("sqlite:///app.db")   # or postgresql://...
        graph = builder.compile(checkpointer=saver)

    What it stores (docs/langgraph.md): each checkpoint as what changed since the thread's
    previous one (an appended message list stores only the new messages; unchanged channels and
    versions are not stored again), Zstandard-compressed past 512 bytes as tether compresses
    run state, with a full snapshot whenever replaying the changes would cost about twice it,
    so loading the latest checkpoint reads a bounded number of rows. Values are JSON through
    :class:`~tether.integrations.langgraph.TetherSerializer`; nothing is pickled and a pickled
    payload is never loaded.

    Implements LangGraph's base capabilities (``put``, ``put_writes``, ``get_tuple``,
    ``list``, ``delete_thread``) and the optional ``delete_for_runs``, ``copy_thread`` and
    ``prune``, each with its async twin; LangGraph's conformance suite passes on both
    backends (``tests/integrations/langgraph/test_conformance.py``).

    Args:
        store: a :class:`~tether.SQLiteCheckpointer` or :class:`~tether.PostgresCheckpointer`;
            the saver's tables live beside tether's runs (schema version 5) and it uses the
            store's connections.
        serde: a LangGraph serializer; default :class:`TetherSerializer` (JSON first). Another
            serializer's values are stored as it encodes them (appends are then not detected).

    Raises:
        ConfigurationError: ``store`` is not one of tether's SQL stores.

    Errors from the store are tether's :class:`~tether.errors.StoreError` subclasses
    (docs/storage.md, "Errors"); a value neither JSON nor the serializer can hold raises
    :class:`~tether.errors.SerializationError` naming its channel, before anything is stored.
    """

    def __init__(self, store: Checkpointer, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde or TetherSerializer())
        self.store = store
        self._b: Backend = backend_for(store)
        self._encoder = Encoder(self.serde)
        # Payloads are compressed as the store compresses run state (None: never).
        self._compress: int | None = getattr(
            store, "compress_state_min_bytes", encoding.COMPRESS_MIN_BYTES
        )
        self._heads: OrderedDict[tuple[str, str], ThreadHead] = OrderedDict()
        self._lock = threading.Lock()
        self._owned = False

    @classmethod
    def from_url(cls, url: str | None = None, **options: Any) -> TetherSaver:
        """A saver on the store a URL names (``sqlite:///app.db``, ``postgresql://...``), as
        :func:`tether.connect` opens it; the saver closes it in :meth:`close`.

        Args:
            url: as for :func:`tether.connect` (default ``TETHER_DATABASE_URL``).
            **options: ``serde=`` for the saver; the rest go to the store's constructor.

        Raises:
            ConfigurationError: an unknown URL scheme, or Postgres without its extra.
        """
        from ...connect import connect

        serde = options.pop("serde", None)
        saver = cls(connect(url, **options), serde=serde)
        saver._owned = True
        return saver

    def __repr__(self) -> str:
        return f"TetherSaver({self.store!r})"

    def close(self) -> None:
        """Close the store when the saver opened it (:meth:`from_url`)."""
        if self._owned:
            self.store.close()

    def __enter__(self) -> TetherSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- running operations -----------------------------------------------------------------
    def _sync(self, steps: Steps[T]) -> T:
        try:
            req = next(steps)
            while True:
                try:
                    result = self._b.run(req[0], req[1], write=req[2])
                except BaseException as exc:
                    req = steps.throw(exc)
                    continue
                req = steps.send(result)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        finally:
            steps.close()

    async def _async(self, steps: Steps[T]) -> T:
        try:
            req = next(steps)
            while True:
                try:
                    result = await self._b.arun(req[0], req[1], write=req[2])
                except BaseException as exc:
                    req = steps.throw(exc)
                    continue
                req = steps.send(result)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        finally:
            steps.close()

    def _drop_heads(self, thread_ids: Sequence[str] | set[str]) -> None:
        wanted = set(thread_ids)
        with self._lock:
            for key in [k for k in self._heads if k[0] in wanted]:
                del self._heads[key]

    # --- put --------------------------------------------------------------------------------
    def _put_steps(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> Steps[RunnableConfig]:
        conf = config["configurable"]
        key = (str(conf["thread_id"]), str(conf.get("checkpoint_ns", "")))
        parent_id = conf.get("checkpoint_id")
        meta = get_serializable_checkpoint_metadata(config, metadata)
        meta_bytes = _tether_serde.dumps(dict(meta), "metadata")
        run_id = meta.get("run_id")
        for _ in range(PUT_ATTEMPTS):
            with self._lock:
                head = self._heads.get(key)
            if head is None:
                found = yield "head", _plans.newest_by_seq(self._b, key), False
                if found is not None:
                    row, _kind, raw = found
                    head = ThreadHead(encoding.head_from_raw(row.seq, row.base_seq, raw, 0))
            kind, payload, new_head = self._encoder.encode(dict(checkpoint), head)
            prev_seq = head.codec.seq if head is not None else None
            encoded = (
                kind,
                encoding.compress_state(payload, self._compress),
                new_head.codec.seq,
                new_head.codec.base_seq,
                prev_seq,
            )
            stored = yield (
                "put",
                _plans.put(
                    self._b,
                    key,
                    checkpoint["id"],
                    parent_id,
                    encoded,
                    meta_bytes,
                    None if run_id is None else str(run_id),
                ),
                True,
            )
            with self._lock:
                if stored:
                    self._heads[key] = new_head
                    self._heads.move_to_end(key)
                    while len(self._heads) > HEAD_CACHE_THREADS:
                        self._heads.popitem(last=False)
                    return {
                        "configurable": {
                            "thread_id": key[0],
                            "checkpoint_ns": key[1],
                            "checkpoint_id": checkpoint["id"],
                        }
                    }
                self._heads.pop(key, None)
        raise ConcurrentWriteError(
            f"thread {key[0]!r}: another writer kept moving the thread on; checkpoint "
            f"{checkpoint['id']!r} was not stored after {PUT_ATTEMPTS} attempts"
        )

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint as the thread namespace's next row (see the class docstring).

        Returns:
            ``{"configurable": {"thread_id", "checkpoint_ns", "checkpoint_id"}}``.

        Raises:
            SerializationError: a value that cannot be stored (nothing is written).
            ConcurrentWriteError: other writers kept advancing the thread (8 attempts).
            StoreError: the store failed.
        """
        return self._sync(self._put_steps(config, checkpoint, metadata))

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async :meth:`put`."""
        return await self._async(self._put_steps(config, checkpoint, metadata))

    # --- writes -----------------------------------------------------------------------------
    def _writes_plan(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Steps[None]:
        conf = config["configurable"]
        key = (str(conf["thread_id"]), str(conf.get("checkpoint_ns", "")), conf["checkpoint_id"])
        rows = []
        for idx, (channel, value) in enumerate(writes):
            try:
                type_, payload = self.serde.dumps_typed(value)
            except SerializationError as exc:  # its path names a place inside the value only
                raise SerializationError(
                    f"channel {channel!r} (written by task {task_id}): {exc}",
                    path=exc.path,
                    type_name=exc.type_name,
                ) from None
            packed = encoding.compress_state(payload, self._compress)
            if packed is not payload:
                type_ += _plans.COMPRESSED_SUFFIX
            rows.append(
                (task_id, WRITES_IDX_MAP.get(channel, idx), channel, type_, packed, task_path)
            )
        replace = all(w[0] in WRITES_IDX_MAP for w in writes)
        yield "put_writes", _plans.put_writes(self._b, key, rows, replace), True

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes for the checkpoint ``config`` names.

        Raises:
            SerializationError: a value that cannot be stored (nothing is written).
            StoreError: the store failed.
        """
        self._sync(self._writes_plan(config, writes, task_id, task_path))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async :meth:`put_writes`."""
        await self._async(self._writes_plan(config, writes, task_id, task_path))

    # --- reads ------------------------------------------------------------------------------
    def _get_steps(self, config: RunnableConfig) -> Steps[CheckpointTuple | None]:
        conf = config["configurable"]
        key = (str(conf["thread_id"]), str(conf.get("checkpoint_ns", "")))
        loaded = yield "get_tuple", _plans.get(self._b, key, get_checkpoint_id(config)), False
        return None if loaded is None else _rows.tuple_of(self._encoder, loaded)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (the thread namespace's newest without a
        ``checkpoint_id``), with its pending writes in LangGraph's order, or ``None``.

        Raises:
            CorruptRecordError: a stored value cannot be read back (or is a pickle).
            StoreError: the store failed.
        """
        return self._sync(self._get_steps(config))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async :meth:`get_tuple`."""
        return await self._async(self._get_steps(config))

    def _list_steps(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Steps[list[CheckpointTuple]]:
        conf = (config or {}).get("configurable") or {}
        thread_id = conf.get("thread_id")
        ns = conf.get("checkpoint_ns")
        before_id = get_checkpoint_id(before) if before else None
        rows = yield (
            "list",
            _plans.candidates(
                self._b,
                None if thread_id is None else str(thread_id),
                ns,
                conf.get("checkpoint_id"),
                before_id,
            ),
            False,
        )
        chosen = []
        for row in rows:
            if filter:
                meta = _rows.metadata_of(row)
                if not all(meta.get(k) == v for k, v in filter.items()):
                    continue
            chosen.append(row)
            if limit is not None and len(chosen) >= limit:
                break
        if not chosen:
            return []
        loaded = yield "list", _plans.load_states(self._b, chosen), False
        return [_rows.tuple_of(self._encoder, x) for x in loaded]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by id): of a thread (and namespace, when ``config``
        names one), or of every thread for ``config=None``; ``filter`` keeps those whose
        metadata has every given key equal, ``before`` those older than its checkpoint.

        Raises:
            CorruptRecordError, StoreError: as :meth:`get_tuple`.
        """
        yield from self._sync(self._list_steps(config, filter, before, limit))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async :meth:`list`."""
        for item in await self._async(self._list_steps(config, filter, before, limit)):
            yield item

    # --- deleting and copying ---------------------------------------------------------------
    def _delete_steps(self, thread_id: str) -> Steps[None]:
        yield "delete_thread", _plans.delete_thread(self._b, str(thread_id)), True
        self._drop_heads([str(thread_id)])

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of the thread (all namespaces)."""
        self._sync(self._delete_steps(thread_id))

    async def adelete_thread(self, thread_id: str) -> None:
        """Async :meth:`delete_thread`."""
        await self._async(self._delete_steps(thread_id))

    def _delete_runs_steps(self, run_ids: Sequence[str]) -> Steps[None]:
        if not run_ids:
            return
        plan = _plans.delete_for_runs(self._b, [str(r) for r in run_ids], self._compress)
        touched = yield "delete_for_runs", plan, True
        self._drop_heads(touched)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata names one of these
        ``run_id`` s; the thread's other checkpoints stay readable."""
        self._sync(self._delete_runs_steps(run_ids))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async :meth:`delete_for_runs`."""
        await self._async(self._delete_runs_steps(run_ids))

    def _copy_steps(self, source: str, target: str) -> Steps[None]:
        copied = yield "copy_thread", _plans.copy_thread(self._b, str(source), str(target)), True
        if not copied:
            raise ConfigurationError(
                f"copy_thread: thread {target!r} already has checkpoints; delete it first or "
                "copy to a new thread id"
            )

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread to a new thread id.

        Raises:
            ConfigurationError: the target thread already has checkpoints (nothing copied).
        """
        self._sync(self._copy_steps(source_thread_id, target_thread_id))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async :meth:`copy_thread`."""
        await self._async(self._copy_steps(source_thread_id, target_thread_id))

    def _prune_steps(self, thread_ids: Sequence[str], strategy: str) -> Steps[None]:
        if strategy not in ("keep_latest", "delete"):
            raise ConfigurationError(
                f"prune strategy must be 'keep_latest' or 'delete', got {strategy!r}"
            )
        for thread_id in thread_ids:
            if strategy == "delete":
                plan = _plans.delete_thread(self._b, str(thread_id))
            else:
                plan = _plans.prune_keep_latest(self._b, str(thread_id), self._compress)
            yield "prune", plan, True
        self._drop_heads([str(t) for t in thread_ids])

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep each namespace's newest checkpoint (and its writes) of
        these threads; ``"delete"``: delete the threads.

        Raises:
            ConfigurationError: an unknown strategy.
        """
        self._sync(self._prune_steps(thread_ids, strategy))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async :meth:`prune`."""
        await self._async(self._prune_steps(thread_ids, strategy))
