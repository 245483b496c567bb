"""``Client``: the blocking form of :class:`rowcall.AsyncClient`. It runs one AsyncClient on
an event loop in a background thread and waits for each call, so both share one
implementation (policy, errors, session) and behave alike.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from ._core import Attempted
from .aio import AsyncClient, Invocation, Watch
from .v1 import api_pb2, types_pb2

T = TypeVar("T")


class Client:
    """A session with a rowcall cluster, blocking. Takes the same arguments as
    :class:`rowcall.AsyncClient`; every method is that class's, waited for."""

    def __init__(
        self,
        nodes: Sequence[str] | str | None = None,
        *,
        credential: str | None = None,
        tls_ca: str | os.PathLike[str] | bytes | None = None,
        tls_domain: str | None = None,
        read_timeout: float = 1.0,
        write_timeout: float = 6.0,
        invoke_timeout: float = 15.0,
        deadline: float = 15.0,
        hedge_after: float | None = 0.15,
        write_hedge_after: float | None = 0.25,
        silence_limit: float | None = 0.5,
        session_index: int = 0,
        on_attempt: Callable[[Attempted], None] | None = None,
    ) -> None:
        self._async = AsyncClient(
            nodes,
            credential=credential,
            tls_ca=tls_ca,
            tls_domain=tls_domain,
            read_timeout=read_timeout,
            write_timeout=write_timeout,
            invoke_timeout=invoke_timeout,
            deadline=deadline,
            hedge_after=hedge_after,
            write_hedge_after=write_hedge_after,
            silence_limit=silence_limit,
            session_index=session_index,
            on_attempt=on_attempt,
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="rowcall-client", daemon=True
        )
        self._thread.start()
        self._closed = False

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if self._closed:
            coroutine.close()
            raise RuntimeError("the client is closed")
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def close(self) -> None:
        """Closes the channels and stops the client's thread."""
        if self._closed:
            return
        self._run(self._async.close())
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def session_index(self) -> int:
        """The highest index this session has seen."""
        return self._async.session_index

    @property
    def nodes(self) -> list[str]:
        """The nodes' ``host:port``."""
        return self._async.nodes

    def ask(self, ask: str, limit: int = 0, mode: str = "") -> api_pb2.AskResponse:
        """Ranked candidates for a plain-language request."""
        return self._run(self._async.ask(ask, limit, mode))

    def contract(self, key: str) -> dict[str, Any]:
        """A row's contract as JSON."""
        return self._run(self._async.contract(key))

    def contract_markdown(self, key: str) -> str:
        """A row's contract in Markdown."""
        return self._run(self._async.contract_markdown(key))

    def invoke(
        self,
        key: str,
        args: Mapping[str, Any] | None = None,
        *,
        body: str | None = None,
        share: str | None = None,
    ) -> Invocation:
        """Runs a row (see :meth:`AsyncClient.invoke`)."""
        return self._run(self._async.invoke(key, args, body=body, share=share))

    def confirm(self, receipt_id: str) -> api_pb2.ConfirmResponse:
        """Checks a receipt without a credential."""
        return self._run(self._async.confirm(receipt_id))

    def get(self, key: str) -> types_pb2.Row:
        """One row."""
        return self._run(self._async.get(key))

    def list(
        self, category: str = "", cursor: str = "", limit: int = 0
    ) -> api_pb2.ListRowsResponse:
        """A page of rows in key order."""
        return self._run(self._async.list(category, cursor, limit))

    def rows(self, category: str = "") -> Iterator[types_pb2.Row]:
        """Every row (of a category), following the pages."""
        cursor = ""
        while True:
            page = self.list(category, cursor)
            yield from page.rows
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def put(self, row: Mapping[str, Any] | types_pb2.RowInput) -> api_pb2.PutRowsResponse:
        """Inserts or replaces one row (admin key), retried safely."""
        return self._run(self._async.put(row))

    def put_many(
        self, rows: Sequence[Mapping[str, Any] | types_pb2.RowInput]
    ) -> api_pb2.PutRowsResponse:
        """Inserts or replaces rows in one atomic write (admin key)."""
        return self._run(self._async.put_many(rows))

    def delete(self, key: str, if_version: int | None = None) -> api_pb2.DeleteRowResponse:
        """Deletes a row (admin key)."""
        return self._run(self._async.delete(key, if_version))

    def counts(self) -> types_pb2.Counts:
        """The four counts of the directory."""
        return self._run(self._async.counts())

    def watch(self, since: int | None = None) -> SyncWatch:
        """The directory's changes as an iterator that resumes on another node after a
        failover (see :meth:`AsyncClient.watch`)."""
        return SyncWatch(self, self._async.watch(since))

    def receipt(self, receipt_id: str) -> types_pb2.Receipt:
        """One receipt with its stored input and output (admin key)."""
        return self._run(self._async.receipt(receipt_id))

    def receipts(self, key: str, limit: int = 0) -> api_pb2.ListReceiptsResponse:
        """The receipts of one row, newest first (admin key)."""
        return self._run(self._async.receipts(key, limit))

    def checkpoint(self) -> api_pb2.SignedCheckpoint:
        """The latest co-signed checkpoint of the receipt log."""
        return self._run(self._async.checkpoint())

    def prove(self, receipt_id: str, size: int = 0) -> api_pb2.InclusionProof:
        """A receipt's inclusion proof."""
        return self._run(self._async.prove(receipt_id, size))

    def consistency(self, old: int, new: int) -> api_pb2.ConsistencyProof:
        """A consistency proof between two tree sizes."""
        return self._run(self._async.consistency(old, new))

    def verify(
        self,
        receipt_id: str,
        *,
        receipt: Mapping[str, Any] | None = None,
        keys: Sequence[str] = (),
        trust_node_keys: bool = False,
        state: str | os.PathLike[str] | None = None,
    ) -> Any:
        """Checks a receipt as ``rowcall verify`` does; returns a ``Verdict``."""
        return self._run(
            self._async.verify(
                receipt_id,
                receipt=receipt,
                keys=keys,
                trust_node_keys=trust_node_keys,
                state=state,
            )
        )

    def status(self) -> api_pb2.StatusResponse:
        """One node's view of the cluster."""
        return self._run(self._async.status())

    def join_token(self, ttl_seconds: int = 0) -> api_pb2.JoinTokenResponse:
        """Mints a join token (admin key)."""
        return self._run(self._async.join_token(ttl_seconds))


class SyncWatch:
    """The blocking iterator of :class:`rowcall.aio.Watch`."""

    def __init__(self, client: Client, watch: Watch) -> None:
        self._client = client
        self._watch = watch

    def __iter__(self) -> SyncWatch:
        return self

    def __next__(self) -> api_pb2.WatchEvent:
        async def step() -> api_pb2.WatchEvent | None:
            try:
                return await self._watch.__anext__()
            except StopAsyncIteration:
                return None

        event = self._client._run(step())
        if event is None:
            raise StopIteration
        return event

    def close(self) -> None:
        """Stops watching."""
        self._client._run(self._watch.aclose())

    @property
    def last_index(self) -> int | None:
        """The index of the last event delivered."""
        return self._watch.last_index
