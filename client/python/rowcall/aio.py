"""``AsyncClient``: rowcall's public gRPC API (``rowcall.v1``) over several nodes, for
asyncio. The session and retry policy live in ``_core``; :class:`rowcall.Client` drives this
same class from a background event loop, so both behave alike.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import grpc.aio

from . import _json
from ._core import INDEX, MIN_INDEX, Attempted, Kind, Node, Options, Session, _Answer, _int
from .errors import ArgumentError, RowcallError
from .v1 import api_pb2, types_pb2

_D = "/rowcall.v1.Dispatch/"
_DIR = "/rowcall.v1.Directory/"
_R = "/rowcall.v1.Receipts/"
_T = "/rowcall.v1.Transparency/"
_C = "/rowcall.v1.Cluster/"


@dataclass(frozen=True)
class Invocation:
    """A finished invocation, with its JSON result decoded."""

    #: Whether the capability succeeded (a failed run is an answer too: it has a receipt).
    ok: bool
    #: The row that ran.
    key: str
    #: What it returned, when ``ok``.
    result: Any
    #: Why it failed, when not ``ok`` (code, message, hint).
    error: types_pb2.ErrorDetail | None
    #: The receipt: ``proof.invocation_id`` is the receipt id.
    proof: api_pb2.Proof
    #: The row changes nothing (``risk: read``): this session hedges its later invocations.
    repeatable: bool

    @classmethod
    def of(cls, r: api_pb2.InvokeResponse) -> Invocation:
        return cls(
            ok=r.ok,
            key=r.key,
            result=_json.from_value(r.result) if r.HasField("result") else None,
            error=r.error if r.HasField("error") else None,
            proof=r.proof,
            repeatable=r.repeatable,
        )

    @property
    def receipt_id(self) -> str:
        """The receipt's id (``inv_...``)."""
        return self.proof.invocation_id


def _nodes_from(nodes: Sequence[str] | str | None) -> list[str]:
    if nodes is None:
        nodes = os.environ.get("ROWCALL_NODES") or "127.0.0.1:9090"
    if isinstance(nodes, str):
        nodes = nodes.split(",")
    return [n.strip() for n in nodes if n.strip()]


def _ca_from(tls_ca: str | os.PathLike[str] | bytes | None) -> bytes | None:
    if tls_ca is None:
        env = os.environ.get("ROWCALL_CA")
        tls_ca = env if env else None
    if tls_ca is None or isinstance(tls_ca, bytes):
        return tls_ca
    try:
        return Path(tls_ca).read_bytes()
    except OSError as e:
        raise ArgumentError(f"cannot read the TLS CA file {os.fspath(tls_ca)!r}: {e}") from e


class AsyncClient:
    """A session with a rowcall cluster over gRPC: every call of the public API, retried
    across the nodes as far as that is safe.

    Nodes come from ``nodes`` (a list or a comma-separated string), else ``ROWCALL_NODES``,
    else ``127.0.0.1:9090``; the credential from ``credential``, else ``ROWCALL_ADMIN_KEY``;
    TLS from ``tls_ca`` (a PEM file path or its bytes), else ``ROWCALL_CA``. Timeouts are in
    seconds. Channels open on first use, inside the running event loop.
    """

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
        if credential is None:
            credential = os.environ.get("ROWCALL_ADMIN_KEY") or None
        options = Options(
            credential=credential,
            read_timeout=read_timeout,
            write_timeout=write_timeout,
            invoke_timeout=invoke_timeout,
            deadline=deadline,
            hedge_after=hedge_after,
            write_hedge_after=write_hedge_after,
            silence_limit=silence_limit,
            tls_ca=_ca_from(tls_ca),
            tls_domain=tls_domain or os.environ.get("ROWCALL_TLS_DOMAIN") or None,
        )
        self._session = Session(_nodes_from(nodes), options, session_index, on_attempt)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the nodes' channels."""
        await self._session.close()

    @property
    def session_index(self) -> int:
        """The highest index this session has seen: every call waits until the node
        answering it has applied this much."""
        return self._session.seen

    @property
    def nodes(self) -> list[str]:
        """The nodes' ``host:port``, as listed and as leader hints added them."""
        return [n.authority for n in self._session.nodes]

    async def _unary(
        self, kind: Kind, write_like: bool, method: str, request: Any, response: Any
    ) -> Any:
        attempt = self._session.unary(method, request, response.FromString)
        answer = await self._session.call(kind, write_like, method, attempt)
        return answer.message

    # ---- Dispatch ----

    async def ask(self, ask: str, limit: int = 0, mode: str = "") -> api_pb2.AskResponse:
        """Ranked candidates for a plain-language request (``limit`` 0: the default, 5)."""
        request = api_pb2.AskRequest(ask=ask, limit=limit, mode=mode)
        answer: api_pb2.AskResponse = await self._unary(
            Kind.READ, False, _D + "Ask", request, api_pb2.AskResponse
        )
        return answer

    async def contract(self, key: str) -> dict[str, Any]:
        """A row's contract as JSON: what it does, how to call it, an example, its
        ``args_schema``, auth, risk, troubleshooting."""
        request = api_pb2.ContractRequest(key=key, format="json")
        answer: api_pb2.ContractResponse = await self._unary(
            Kind.READ, False, _D + "Contract", request, api_pb2.ContractResponse
        )
        if answer.WhichOneof("contract") != "json":
            raise RowcallError("the node answered a contract that is not JSON")
        contract = _json.from_struct(answer.json)
        risk = contract.get("risk")
        if isinstance(risk, str):
            self._session.learn_risk(key, risk == "read")
        return contract

    async def contract_markdown(self, key: str) -> str:
        """A row's contract in Markdown, written for models."""
        request = api_pb2.ContractRequest(key=key, format="markdown")
        answer: api_pb2.ContractResponse = await self._unary(
            Kind.READ, False, _D + "Contract", request, api_pb2.ContractResponse
        )
        return answer.markdown

    async def invoke(
        self,
        key: str,
        args: Mapping[str, Any] | None = None,
        *,
        body: str | None = None,
        share: str | None = None,
    ) -> Invocation:
        """Runs a row. An invocation may run the capability, so it is not retried once it may
        have reached a node (:class:`rowcall.OutcomeUnknown` then), except for a row the
        nodes said changes nothing (``risk: read``), which is sent as ``repeatable`` and
        hedged like a read."""
        request = api_pb2.InvokeRequest(key=key)
        if args is not None:
            request.args.CopyFrom(_json.to_struct(args))
        if body is not None:
            request.body = body
        if share is not None:
            request.share = share
        session = self._session
        request.repeatable = key in session.read_only
        kind = Kind.REPEATABLE if request.repeatable else Kind.ONCE
        method = _D + "Invoke"
        try:
            answer: api_pb2.InvokeResponse = await self._unary(
                kind, False, method, request, api_pb2.InvokeResponse
            )
        except RowcallError as e:
            # The row changes something now: refused before it ran, so sent again once.
            if kind is not Kind.REPEATABLE or e.code != "not_repeatable":
                raise
            session.learn_risk(key, False)
            request.repeatable = False
            answer = await self._unary(Kind.ONCE, False, method, request, api_pb2.InvokeResponse)
        invocation = Invocation.of(answer)
        session.learn_risk(key, invocation.repeatable)
        return invocation

    async def confirm(self, receipt_id: str) -> api_pb2.ConfirmResponse:
        """Checks a receipt without a credential; an unknown id is :class:`rowcall.NotFound`."""
        answer: api_pb2.ConfirmResponse = await self._unary(
            Kind.READ,
            False,
            _D + "Confirm",
            api_pb2.ConfirmRequest(id=receipt_id),
            api_pb2.ConfirmResponse,
        )
        return answer

    # ---- Directory ----

    async def get(self, key: str) -> types_pb2.Row:
        """One row (:class:`rowcall.NotFound` for an unknown key)."""
        answer: types_pb2.Row = await self._unary(
            Kind.READ, False, _DIR + "Get", api_pb2.GetRowRequest(key=key), types_pb2.Row
        )
        return answer

    async def list(
        self, category: str = "", cursor: str = "", limit: int = 0
    ) -> api_pb2.ListRowsResponse:
        """A page of rows in key order (``limit`` 0: the default, 100); pass the answer's
        ``next_cursor`` for the next page."""
        request = api_pb2.ListRowsRequest(category=category, cursor=cursor, limit=limit)
        answer: api_pb2.ListRowsResponse = await self._unary(
            Kind.READ, False, _DIR + "List", request, api_pb2.ListRowsResponse
        )
        return answer

    async def rows(self, category: str = "") -> AsyncIterator[types_pb2.Row]:
        """Every row (of a category), following the pages."""
        cursor = ""
        while True:
            page = await self.list(category, cursor)
            for row in page.rows:
                yield row
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    async def put(self, row: Mapping[str, Any] | types_pb2.RowInput) -> api_pb2.PutRowsResponse:
        """Inserts or replaces one row (admin key); a JSON row or a ``RowInput``. Retried
        safely: every attempt carries the same idempotency key, so it is written once."""
        request = api_pb2.PutRowRequest(row=_json.row_input(row))
        answer: api_pb2.PutRowsResponse = await self._unary(
            Kind.WRITE, True, _DIR + "Put", request, api_pb2.PutRowsResponse
        )
        return answer

    async def put_many(
        self, rows: Sequence[Mapping[str, Any] | types_pb2.RowInput]
    ) -> api_pb2.PutRowsResponse:
        """Inserts or replaces rows in one atomic write (admin key): all or none."""
        request = api_pb2.PutManyRequest(rows=[_json.row_input(r) for r in rows])
        answer: api_pb2.PutRowsResponse = await self._unary(
            Kind.WRITE, True, _DIR + "PutMany", request, api_pb2.PutRowsResponse
        )
        return answer

    async def delete(self, key: str, if_version: int | None = None) -> api_pb2.DeleteRowResponse:
        """Deletes a row (admin key), only at ``if_version`` when given. Its receipts stay."""
        request = api_pb2.DeleteRowRequest(key=key)
        if if_version is not None:
            request.if_version = if_version
        answer: api_pb2.DeleteRowResponse = await self._unary(
            Kind.WRITE, True, _DIR + "Delete", request, api_pb2.DeleteRowResponse
        )
        return answer

    async def counts(self) -> types_pb2.Counts:
        """The four counts of the directory."""
        answer: types_pb2.Counts = await self._unary(
            Kind.READ, False, _DIR + "Counts", api_pb2.CountsRequest(), types_pb2.Counts
        )
        return answer

    def watch(self, since: int | None = None) -> Watch:
        """The directory's changes after index ``since`` (live changes only without it), as
        an async iterator that reconnects to another node when its node goes away and
        resumes where it was, with no change missed or repeated. A ``reset`` event means
        changes could not be replayed: list the directory again, then keep reading."""
        return Watch(self._session, since)

    # ---- Receipts ----

    async def receipt(self, receipt_id: str) -> types_pb2.Receipt:
        """One receipt with its stored input and output (admin key)."""
        answer: types_pb2.Receipt = await self._unary(
            Kind.READ,
            False,
            _R + "Get",
            api_pb2.GetReceiptRequest(id=receipt_id),
            types_pb2.Receipt,
        )
        return answer

    async def receipts(self, key: str, limit: int = 0) -> api_pb2.ListReceiptsResponse:
        """The receipts of one row, newest first (admin key; ``limit`` 0: 50)."""
        answer: api_pb2.ListReceiptsResponse = await self._unary(
            Kind.READ,
            False,
            _R + "ListByKey",
            api_pb2.ListReceiptsRequest(key=key, limit=limit),
            api_pb2.ListReceiptsResponse,
        )
        return answer

    # ---- Transparency ----

    async def checkpoint(self) -> api_pb2.SignedCheckpoint:
        """The latest checkpoint of the receipt log a majority of voters signed."""
        answer: api_pb2.SignedCheckpoint = await self._unary(
            Kind.READ,
            False,
            _T + "Checkpoint",
            api_pb2.CheckpointRequest(),
            api_pb2.SignedCheckpoint,
        )
        return answer

    async def prove(self, receipt_id: str, size: int = 0) -> api_pb2.InclusionProof:
        """A receipt's leaf and its inclusion path into the tree of ``size`` leaves (0: the
        latest co-signed checkpoint's, which the answer then carries)."""
        answer: api_pb2.InclusionProof = await self._unary(
            Kind.READ,
            False,
            _T + "Prove",
            api_pb2.ProveRequest(id=receipt_id, size=size),
            api_pb2.InclusionProof,
        )
        return answer

    async def consistency(self, old: int, new: int) -> api_pb2.ConsistencyProof:
        """The proof that the tree of ``old`` leaves is a prefix of the tree of ``new``."""
        request = api_pb2.ConsistencyRequest(to=new)
        setattr(request, "from", old)
        answer: api_pb2.ConsistencyProof = await self._unary(
            Kind.READ, False, _T + "Consistency", request, api_pb2.ConsistencyProof
        )
        return answer

    async def verify(
        self,
        receipt_id: str,
        *,
        receipt: Mapping[str, Any] | None = None,
        keys: Sequence[str] = (),
        trust_node_keys: bool = False,
        state: str | os.PathLike[str] | None = None,
    ) -> Any:
        """Checks a receipt against the receipt log's transparency log, as ``rowcall verify``
        does; see :func:`rowcall.verify.verify_receipt`. Returns a ``Verdict``."""
        from .verify import verify_receipt

        return await verify_receipt(
            self,
            receipt_id,
            receipt=receipt,
            keys=keys,
            trust_node_keys=trust_node_keys,
            state=state,
        )

    # ---- Cluster ----

    async def status(self) -> api_pb2.StatusResponse:
        """One node's view of the cluster (the node that answers first)."""
        answer: api_pb2.StatusResponse = await self._unary(
            Kind.READ, False, _C + "Status", api_pb2.StatusRequest(), api_pb2.StatusResponse
        )
        return answer

    async def join_token(self, ttl_seconds: int = 0) -> api_pb2.JoinTokenResponse:
        """Mints a join token (admin key); never retried once it may have reached a node."""
        answer: api_pb2.JoinTokenResponse = await self._unary(
            Kind.ONCE,
            True,
            _C + "CreateJoinToken",
            api_pb2.CreateJoinTokenRequest(ttl_seconds=ttl_seconds),
            api_pb2.JoinTokenResponse,
        )
        return answer


class Watch:
    """A resumable async iterator of the directory's changes; see :meth:`AsyncClient.watch`.

    Events carry their log index, and all rows of one bulk write share an index, so the
    watch remembers the last index and how many events of it it delivered: it resumes from
    the index before and skips what it already delivered."""

    def __init__(self, session: Session, since: int | None) -> None:
        self._session = session
        self._since = since
        self._last: int | None = None
        self._delivered_at_last = 0
        self._sent_at_last = 0
        self._call: Any = None
        self._done = False

    def _resume_from(self) -> int | None:
        if self._last is not None:
            return self._last - 1 if self._delivered_at_last > 0 and self._last > 0 else self._last
        return self._since

    def _admit(self, event: api_pb2.WatchEvent) -> bool:
        if event.WhichOneof("event") == "reset":
            self._last, self._delivered_at_last, self._sent_at_last = event.index, 0, 0
            return True
        if self._last is not None and event.index < self._last:
            return False
        if self._last is not None and event.index == self._last:
            self._sent_at_last += 1
            if self._sent_at_last <= self._delivered_at_last:
                return False
            self._delivered_at_last += 1
            return True
        self._last, self._delivered_at_last, self._sent_at_last = event.index, 1, 1
        return True

    async def _open(self) -> None:
        since = self._resume_from()
        session = self._session
        request = api_pb2.WatchRequest()
        if since is not None:
            request.since = since

        async def attempt(
            node: Node, metadata: list[tuple[str, str]], timeout: float
        ) -> _Answer[Any]:
            md = [(k, v) for k, v in metadata if k != MIN_INDEX]
            if since is not None:
                md.append((MIN_INDEX, str(max(since, session.seen))))
            # A stream lives on: no deadline on the call, only on its opening.
            call = node.stream(_DIR + "Watch", api_pb2.WatchEvent.FromString)(request, metadata=md)
            try:
                initial = list(await call.initial_metadata() or ())
                if _int(initial, INDEX) is None:
                    # No answer headers: a refusal (trailers only); raise it as the error.
                    await call.read()
                return _Answer(call, initial)
            except BaseException:
                call.cancel()
                raise

        answer = await session.call(Kind.READ, False, _DIR + "Watch", attempt)
        if self._last is None and self._since is None:
            # A live-only watch starts at the index the node had applied.
            self._last = _int(answer.metadata, INDEX)
        self._sent_at_last = 0
        self._call = answer.message

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> api_pb2.WatchEvent:
        while True:
            # Checked on every turn: aclose() from another task ends a read in progress
            # instead of letting it reopen the stream.
            if self._done:
                raise StopAsyncIteration
            if self._call is None:
                try:
                    await self._open()
                except BaseException:
                    self._done = True
                    raise
                continue
            try:
                event = await self._call.read()
            except grpc.aio.AioRpcError:
                event = grpc.aio.EOF
            if event is grpc.aio.EOF:
                # The node went away: read on from another.
                self._call = None
                self._session.preferred += 1
                continue
            if self._admit(event):
                return event  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        """Stops watching."""
        self._done = True
        if self._call is not None:
            self._call.cancel()
            self._call = None

    @property
    def last_index(self) -> int | None:
        """The index of the last event delivered."""
        return self._last
