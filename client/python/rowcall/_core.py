"""The session and its retry policy: how every call of :class:`rowcall.AsyncClient` reaches
the nodes, the same policy as the Rust client's (``client/src/client.rs``).

::

  call ──► order the nodes ─► attempt on one (deadline per attempt) ──► answer ─► note index, leader
             reads:  the node that answered last, then the others; a second node is asked
                     too when the first is slow (hedge), the first answer wins
             writes: the leader the nodes named, then the others; hedged after a few
                     times the session's recent write latency (at most write_hedge_after),
                     every attempt under one idempotency-key, so the cluster applies it
                     once and an attempt that lands second gets the first's outcome
             invocations: never hedged nor retried once they may have run (OutcomeUnknown),
                     sent first to a node seen alive within the hedge delay; a row the nodes
                     said changes nothing (risk: read) is sent as `repeatable` and hedged
           ◄─ a node-level failure (unreachable, paused, behind, no quorum): next node at
              once; after every node failed, back off (exponential, full jitter) and go
              round again until the call's deadline
           ◄─ an answer (not found, invalid, refused): raised as it is (errors.Rejected)

A node that failed an attempt without answering is *suspect* for ``SUSPECT_FOR`` seconds:
every call tries it after the others. A session remembers the highest index any answer
carried and sends it as ``x-rowcall-min-index`` on every call (read-your-writes).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import grpc
import grpc.aio

from .errors import (
    AddressError,
    NoNodes,
    OutcomeUnknown,
    Rejection,
    RowcallError,
    Unavailable,
    rejected,
)
from .v1 import api_pb2

#: Request metadata: wait until this index is applied.
MIN_INDEX = "x-rowcall-min-index"
#: Response metadata: the node's applied index, or a write's index.
INDEX = "x-rowcall-index"
#: Response metadata: the node answered while cut off from the leader.
STALE = "x-rowcall-stale"
#: Response metadata: the leader the node knows, ``ID=GRPC_ADDR``.
LEADER = "x-rowcall-leader"
#: Request metadata: names a write, so a retry is answered with its first outcome.
IDEMPOTENCY_KEY = "idempotency-key"

#: How long (seconds) a node that failed an attempt is tried after the others.
SUSPECT_FOR = 2.0

#: rowcall's codes that mean "this node cannot serve it now; another may": the call did
#: not take effect, so any call may go to the next node.
NODE_LEVEL = frozenset(
    {
        "behind",
        "no_quorum",
        "no_leader",
        "shutting_down",
        "storage_failed",
        "no_read_index",
        "share_unchecked",
    }
)

#: Most attempts of one write out at once: the first and a hedge after each hedge delay
#: while none answers (the Rust client's ``WRITE_ATTEMPTS_IN_FLIGHT``).
WRITE_ATTEMPTS_IN_FLIGHT = 3

#: Most rows a session remembers as read-only (their invocations hedged).
MAX_READ_ONLY_KNOWN = 10_000

Metadata = Sequence[tuple[str, str | bytes]]
T = TypeVar("T")


class Kind(enum.Enum):
    """How a call may be retried."""

    #: Changes nothing: retried on any node, hedged.
    READ = "read"
    #: A write the nodes deduplicate by its idempotency key: retried and hedged with the
    #: same key, even when its outcome is unknown.
    WRITE = "write"
    #: A cluster change that converges however often it is made, not deduplicated:
    #: retried like a write, never hedged.
    CONVERGES = "converges"
    #: Must not happen twice (an invocation, a removal): retried only when it surely did
    #: not reach a node, or a node refused it before doing anything.
    ONCE = "once"
    #: An invocation of a row that changes nothing, sent as ``repeatable``: as a read.
    REPEATABLE = "repeatable"


@dataclass(frozen=True)
class Options:
    """How a client retries and waits (seconds). The defaults suit a cluster on one network
    and are the Rust client's."""

    #: The credential sent on every call (``authorization: Bearer ...``).
    credential: str | None = None
    #: How long one node may take to answer a read before the next is tried.
    read_timeout: float = 1.0
    #: How long one node may take to answer a write (a node gives a write 5 s to commit).
    write_timeout: float = 6.0
    #: How long an invocation may take (runners may take 10 s, the receipt's commit more).
    invoke_timeout: float = 15.0
    #: How long one call may take in all, retries included.
    deadline: float = 15.0
    #: After how long without an answer a read goes to a second node too (None: never).
    hedge_after: float | None = 0.15
    #: The longest a write waits for an answer before it goes to a second node too (None:
    #: never); sooner once writes were answered: 3 x the p90 of the latest 64, at least 25 ms.
    write_hedge_after: float | None = 0.25
    #: How long an invocation that cannot be sent twice waits on a node that stopped
    #: answering even a cheap read before it ends as OutcomeUnknown (None: the timeout).
    silence_limit: float | None = 0.5
    #: First and largest pause between rounds over every node.
    backoff: float = 0.05
    backoff_max: float = 1.0
    #: PEM of the CA the nodes' certificates must chain to (TLS), and the name to check
    #: them for when it is not each address's host.
    tls_ca: bytes | None = None
    tls_domain: str | None = None


@dataclass(frozen=True)
class Attempted:
    """One attempt of a call on one node, as ``on_attempt`` reports it. Attempts a hedge
    cancelled (the other attempt answered first) are not reported."""

    #: The node's ``host:port``.
    node: str
    #: The call's method, e.g. ``/rowcall.v1.Dispatch/Ask``.
    method: str
    #: How long it took to end (seconds).
    elapsed: float
    #: The session index it carried as ``x-rowcall-min-index`` (0: none).
    min_index: int
    #: The index the node stamped on its answer or error (``x-rowcall-index``).
    index: int | None
    #: The node said it answered while cut off from the leader.
    stale: bool
    #: None when the node answered; else its error, the transport's, or the timeout.
    failure: Rejection | None


def _parse_address(address: str, tls: bool) -> tuple[str, bool]:
    """``(host:port, secure)`` of an address ``http://h:p``, ``https://h:p`` or ``h:p``."""
    text = address.strip()
    if "://" in text:
        scheme, rest = text.split("://", 1)
        scheme = scheme.lower()
        if scheme not in ("http", "https"):
            raise AddressError(address, f"unknown scheme {scheme!r}: use http or https")
        secure = scheme == "https"
    else:
        rest, secure = text, tls
    authority = rest.rstrip("/")
    if "/" in authority:
        raise AddressError(address, "a node address is host:port, with no path")
    host, sep, port = authority.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise AddressError(address, "no host:port")
    if secure and not tls:
        raise AddressError(address, "https needs the nodes' CA: pass tls_ca (or set ROWCALL_CA)")
    if tls and not secure:
        raise AddressError(address, "a client with a TLS CA reaches nodes only over https")
    return authority, secure


#: Channel options: find a dead connection (a paused or partitioned node) without waiting
#: for TCP, reconnect quickly to a node that is back, and leave retries to the session.
_CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    ("grpc.keepalive_time_ms", 1000),
    ("grpc.keepalive_timeout_ms", 2000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.enable_retries", 0),
    ("grpc.use_local_subchannel_pool", 1),
]


class Node:
    """One node: its address and one reused channel (HTTP/2, multiplexed, reconnecting),
    opened on first use inside the running event loop."""

    def __init__(self, address: str, options: Options) -> None:
        self.authority, self.secure = _parse_address(address, options.tls_ca is not None)
        self._options = options
        self._channel: grpc.aio.Channel | None = None
        self._calls: dict[str, Any] = {}

    def channel(self) -> grpc.aio.Channel:
        if self._channel is None:
            opts = list(_CHANNEL_OPTIONS)
            if self.secure:
                if self._options.tls_domain:
                    opts.append(("grpc.ssl_target_name_override", self._options.tls_domain))
                credentials = grpc.ssl_channel_credentials(root_certificates=self._options.tls_ca)
                self._channel = grpc.aio.secure_channel(self.authority, credentials, opts)
            else:
                self._channel = grpc.aio.insecure_channel(self.authority, opts)
        return self._channel

    def unary(self, method: str, response: Callable[[bytes], Any]) -> Any:
        """The (cached) callable of a unary method."""
        call = self._calls.get(method)
        if call is None:
            call = self.channel().unary_unary(
                method,
                request_serializer=_serialize,
                response_deserializer=response,
            )
            self._calls[method] = call
        return call

    def stream(self, method: str, response: Callable[[bytes], Any]) -> Any:
        """The (cached) callable of a server-streaming method."""
        key = "stream:" + method
        call = self._calls.get(key)
        if call is None:
            call = self.channel().unary_stream(
                method, request_serializer=_serialize, response_deserializer=response
            )
            self._calls[key] = call
        return call

    async def close(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            self._calls.clear()
            await channel.close()


def _serialize(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return data


def _text(metadata: Metadata | None, name: str) -> str | None:
    for key, value in metadata or ():
        if key == name:
            return value.decode() if isinstance(value, bytes) else value
    return None


def _int(metadata: Metadata | None, name: str) -> int | None:
    text = _text(metadata, name)
    return int(text) if text is not None and text.isdigit() else None


@dataclass
class _Answer(Generic[T]):
    """A successful attempt: the message and the metadata the node sent with it."""

    message: T
    metadata: list[tuple[str, str | bytes]] = field(default_factory=list)


#: An attempt: given a node, the request's metadata and its timeout, returns the answer or
#: raises grpc.aio.AioRpcError (or asyncio.TimeoutError).
AttemptFn = Callable[[Node, list[tuple[str, str]], float], Awaitable[_Answer[T]]]


class _Verdict(enum.Enum):
    ANSWERED = 1
    REJECTED = 2
    RETRY = 3
    UNKNOWN = 4


def _timed_out() -> Rejection:
    return Rejection(
        grpc.StatusCode.DEADLINE_EXCEEDED, "", "no answer within the attempt's timeout"
    )


class WriteLatencies:
    """When to hedge a write: soon after it has taken longer than this session's writes
    usually take, never later than the configured ceiling (the Rust client's
    ``client/src/hedge.rs``, with its constants).

    A write a healthy cluster answers in 5 ms that has waited 50 ms is not slow because the
    cluster is loaded; it is stuck on a leader that was paused, cut off or lost its answer,
    and sending it through another node (under the same idempotency key) costs one message,
    where waiting out a fixed delay costs the caller that delay at every leader failure::

        delay = clamp(FACTOR x p90(last WINDOW answered writes), FLOOR, ceiling)
                the ceiling until MIN_SAMPLES writes were answered
    """

    #: Answered writes the delay is drawn from.
    WINDOW = 64
    #: Answered writes needed before the delay follows them.
    MIN_SAMPLES = 4
    #: The quantile of those latencies, and the multiple of it after which a write is hedged.
    QUANTILE = 0.9
    FACTOR = 3
    #: Never sooner than this (seconds): below it a hedge would mostly duplicate healthy writes.
    FLOOR = 0.025

    def __init__(self) -> None:
        self.recent: collections.deque[float] = collections.deque(maxlen=self.WINDOW)

    def record(self, latency: float) -> None:
        """A write was answered after ``latency`` seconds."""
        self.recent.append(latency)

    def hedge_after(self, ceiling: float) -> float:
        """How long a write waits for its answer before it is also sent elsewhere."""
        if len(self.recent) < self.MIN_SAMPLES:
            return ceiling
        ordered = sorted(self.recent)
        at = round((len(ordered) - 1) * self.QUANTILE)
        return min(max(ordered[at] * self.FACTOR, min(self.FLOOR, ceiling)), ceiling)


class Session:
    """The nodes, the session's index, the leader hint and the suspects: the state every
    call of one client shares, and the call loop that uses it."""

    def __init__(
        self,
        nodes: Sequence[str],
        options: Options,
        session_index: int = 0,
        on_attempt: Callable[[Attempted], None] | None = None,
    ) -> None:
        if not nodes:
            raise NoNodes()
        self.options = options
        self.nodes = [Node(address, options) for address in nodes]
        self.seen = session_index
        self.preferred = 0
        self.leader: str | None = None
        self.suspects: dict[int, float] = {}
        self.heard: dict[int, float] = {}
        self.read_only: set[str] = set()
        self.write_latencies = WriteLatencies()
        self.on_attempt = on_attempt

    async def close(self) -> None:
        for node in self.nodes:
            await node.close()

    # ---- node order and health ----

    def order(self, write_like: bool) -> list[int]:
        """Which nodes to try, in order: for writes the leader first (added if it was not
        listed), then from the node that answered last, round the list; suspects last."""
        leader_at = self.node_at(self.leader) if write_like and self.leader else None
        count = len(self.nodes)
        start = self.preferred % count
        order = [leader_at] if leader_at is not None else []
        order += [(start + i) % count for i in range(count) if (start + i) % count != leader_at]
        now = time.monotonic()
        # A stable sort: the order above holds within the trusted nodes and the suspects.
        order.sort(key=lambda at: self.suspects.get(at, 0.0) > now)
        return order

    def suspect(self, at: int) -> None:
        self.suspects[at] = time.monotonic() + SUSPECT_FOR

    def trust(self, at: int) -> None:
        self.suspects.pop(at, None)
        self.heard[at] = time.monotonic()

    def node_at(self, authority: str) -> int | None:
        """The position of the node at ``authority``, adding it if a hint named one not listed."""
        for i, node in enumerate(self.nodes):
            if node.authority == authority:
                return i
        try:
            self.nodes.append(Node(authority, self.options))
        except AddressError:
            return None
        return len(self.nodes) - 1

    def observe(self, metadata: Metadata | None) -> None:
        """Notes what an answer (or an error) says: the index seen, the leader."""
        index = _int(metadata, INDEX)
        if index is not None and index > self.seen:
            self.seen = index
        leader = _text(metadata, LEADER)
        if leader and "=" in leader:
            self.leader = leader.split("=", 1)[1]

    def learn_risk(self, key: str, read_only: bool) -> None:
        """Notes whether row ``key`` changes nothing, as a node said."""
        if read_only and len(self.read_only) < MAX_READ_ONLY_KNOWN:
            self.read_only.add(key)
        elif not read_only:
            self.read_only.discard(key)

    def metadata(self, idempotency_key: str | None) -> list[tuple[str, str]]:
        """A request's metadata: the credential, the session index, the idempotency key."""
        out: list[tuple[str, str]] = []
        if self.options.credential:
            out.append(("authorization", f"Bearer {self.options.credential}"))
        if self.seen > 0:
            out.append((MIN_INDEX, str(self.seen)))
        if idempotency_key:
            out.append((IDEMPOTENCY_KEY, idempotency_key))
        return out

    async def answers_within(self, at: int, within: float) -> bool:
        """Whether rowcall on ``at`` answers a cheap read within ``within`` (any answer it
        gives, a refusal included, shows it is running)."""
        node = self.nodes[at]
        call = node.unary("/rowcall.v1.Directory/Counts", _counts_from)
        try:
            await asyncio.wait_for(
                call(api_pb2.CountsRequest(), metadata=self.metadata(None), timeout=within),
                within + 0.05,
            )
            alive = True
        except grpc.aio.AioRpcError as e:
            alive = Rejection.from_status(e.code(), e.details() or "", _trailers(e)).from_rowcall
        except (asyncio.TimeoutError, grpc.RpcError):
            alive = False
        if alive:
            self.trust(at)
        return alive

    async def live_first(self, order: list[int], within: float) -> None:
        """Puts first in ``order`` the first node that answered this session within
        ``within``, or answers a probe within it; a node that does not is suspect. An
        invocation cannot be sent twice, so it goes only to a node just seen alive."""
        for i, at in enumerate(order):
            recent = time.monotonic() - self.heard.get(at, -1e9) <= within
            if recent or await self.answers_within(at, within):
                order[: i + 1] = [at, *order[:i]]
                return
            self.suspect(at)

    def attempt_timeout(self, kind: Kind, write_like: bool) -> float:
        if kind is Kind.READ:
            return self.options.read_timeout
        return self.options.write_timeout if write_like else self.options.invoke_timeout

    # ---- the call loop ----

    def judge(self, kind: Kind, error: BaseException) -> tuple[_Verdict, Rejection]:
        """What a failed attempt means for the call."""
        if isinstance(error, grpc.aio.AioRpcError):
            trailers = _trailers(error)
            self.observe(trailers)
            self.observe(_initial(error))
            rejection = Rejection.from_status(error.code(), error.details() or "", trailers)
        else:
            rejection = _timed_out()
        if rejection.from_rowcall:
            if rejection.code in NODE_LEVEL:
                return _Verdict.RETRY, rejection
            if kind in (Kind.WRITE, Kind.CONVERGES) and rejection.code == "outcome_unknown":
                return _Verdict.RETRY, rejection
            return _Verdict.REJECTED, rejection
        # No answer from rowcall: the transport failed, or the attempt timed out. A call
        # that never reached the node (refused connection) is safe to send elsewhere.
        text = rejection.message.lower()
        never_sent = rejection.status == grpc.StatusCode.UNAVAILABLE and (
            "failed to connect" in text or "connection refused" in text
        )
        if kind is Kind.ONCE and not never_sent:
            return _Verdict.UNKNOWN, rejection
        return _Verdict.RETRY, rejection

    def _report(
        self,
        node: str,
        method: str,
        started: float,
        min_index: int,
        metadata: Metadata | None,
        failure: Rejection | None,
    ) -> None:
        if self.on_attempt is None:
            return
        self.on_attempt(
            Attempted(
                node=node,
                method=method,
                elapsed=time.monotonic() - started,
                min_index=min_index,
                index=_int(metadata, INDEX),
                stale=_text(metadata, STALE) == "true",
                failure=failure,
            )
        )

    async def call(
        self, kind: Kind, write_like: bool, method: str, attempt: AttemptFn[T]
    ) -> _Answer[T]:
        """Makes one call: builds each attempt's metadata (credential, session index,
        idempotency key) and timeout, orders the nodes, hedges, retries what is safe to."""
        opts = self.options
        deadline = time.monotonic() + opts.deadline
        per_attempt = self.attempt_timeout(kind, write_like)
        # One key for every attempt of a write: the cluster applies it at most once.
        idempotency_key = uuid.uuid4().hex if kind in (Kind.WRITE, Kind.CONVERGES) else None
        hedge_delay = {
            Kind.READ: opts.hedge_after,
            Kind.REPEATABLE: opts.hedge_after,
            Kind.WRITE: None
            if opts.write_hedge_after is None
            else self.write_latencies.hedge_after(opts.write_hedge_after),
        }.get(kind)
        # Attempts out at once: a write goes to a third node while two hang (a leader cut
        # off with a follower, which forwards to that leader), as WRITE_ATTEMPTS_IN_FLIGHT.
        in_flight = WRITE_ATTEMPTS_IN_FLIGHT if kind is Kind.WRITE else 2
        silence = opts.silence_limit if kind is Kind.ONCE else None
        backoff = opts.backoff
        attempts = 0
        last: Rejection | None = None
        while True:
            order = self.order(write_like)
            if kind is Kind.ONCE and opts.hedge_after is not None:
                await self.live_first(order, opts.hedge_after)
            upcoming = collections.deque(order)
            pending: dict[asyncio.Task[_Answer[T]], tuple[int, float, int]] = {}
            probe: asyncio.Task[bool] | None = None
            probe_at: float | None = None
            # When the round last sent an attempt (or went round again): a hedge sent after
            # every node has had its turn is timed from here.
            last_sent = time.monotonic()

            def launch() -> bool:
                nonlocal attempts, probe_at, probe, last_sent
                # Called only within this round: the round's nodes and pending set.
                if not upcoming:  # noqa: B023
                    return False
                at = upcoming.popleft()  # noqa: B023
                last_sent = time.monotonic()
                remaining = deadline - time.monotonic()
                timeout = max(min(per_attempt, remaining), 0.001)
                metadata = self.metadata(idempotency_key)
                min_index = self.seen
                task = asyncio.ensure_future(
                    asyncio.wait_for(attempt(self.nodes[at], metadata, timeout), timeout + 0.25)
                )
                pending[task] = (at, time.monotonic(), min_index)  # noqa: B023
                attempts += 1
                if silence is not None:
                    probe_at = time.monotonic() + silence
                    if probe is not None:
                        probe.cancel()
                    probe = None
                return True

            launch()
            try:
                while pending:
                    now = time.monotonic()
                    waits: list[float] = []
                    # Past the deadline nothing more is sent: wait for what is out.
                    if hedge_delay is not None and len(pending) < in_flight and now < deadline:
                        if upcoming:
                            # A hedge delay after the latest attempt went out.
                            waits.append(max(last_sent + hedge_delay - now, 0.0))
                        else:
                            # Going round again waits as long as a new round would.
                            again = max(hedge_delay, backoff)
                            waits.append(max(last_sent + again - now, 0.0))
                    if probe_at is not None and probe is None and len(pending) == 1:
                        waits.append(max(probe_at - now, 0.0))
                    tasks: set[asyncio.Future[Any]] = set(pending)
                    if probe is not None:
                        tasks.add(probe)
                    done, _ = await asyncio.wait(
                        tasks,
                        timeout=min(waits) if waits else None,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    if probe is not None and probe in done:
                        done.discard(probe)
                        alive = probe.result()
                        probe = None
                        if alive:
                            probe_at = time.monotonic() + (silence or 0.0)
                        elif len(pending) == 1 and silence is not None:
                            ((at, _, _),) = pending.values()
                            self.suspect(at)
                            raise OutcomeUnknown(
                                self.nodes[at].authority,
                                Rejection(
                                    grpc.StatusCode.UNAVAILABLE,
                                    "node_silent",
                                    "the node stopped answering while the call was on it "
                                    f"(nothing within {int(silence * 1000)} ms); it may have run",
                                    "look for its receipt once the node is back",
                                ),
                            )
                    if not done:
                        now = time.monotonic()
                        if (
                            probe_at is not None
                            and probe is None
                            and now >= probe_at
                            and len(pending) == 1
                            and silence is not None
                        ):
                            ((at, _, _),) = pending.values()
                            probe = asyncio.ensure_future(self.answers_within(at, silence))
                            continue
                        if hedge_delay is not None and len(pending) < in_flight:
                            if not upcoming:
                                # Every other node has had its turn this round (they
                                # refused at once: an election was under way) while one
                                # attempt hangs: go round them again, one per hedge delay
                                # backed off like a round, rather than wait on the hanging
                                # one until the deadline.
                                out = {at for (at, _, _) in pending.values()}
                                upcoming.extend(a for a in self.order(write_like) if a not in out)
                                backoff = min(backoff * 2, opts.backoff_max)
                                last_sent = now
                            if now < deadline:
                                launch()
                        continue
                    for task in done:
                        at, started, min_index = pending.pop(task)
                        node = self.nodes[at].authority
                        error = task.exception()
                        if error is None:
                            answer: _Answer[T] = task.result()
                            self.observe(answer.metadata)
                            self._report(node, method, started, min_index, answer.metadata, None)
                            if kind is Kind.WRITE:
                                self.write_latencies.record(time.monotonic() - started)
                            self.trust(at)
                            # A hedge answered first: the node it outran was too slow.
                            for slow, _, _ in pending.values():
                                self.suspect(slow)
                            if kind in (Kind.READ, Kind.ONCE, Kind.REPEATABLE):
                                self.preferred = at
                            return answer
                        if not isinstance(error, grpc.aio.AioRpcError | asyncio.TimeoutError):
                            raise error
                        verdict, rejection = self.judge(kind, error)
                        failed_md = (
                            _trailers(error) if isinstance(error, grpc.aio.AioRpcError) else None
                        )
                        self._report(node, method, started, min_index, failed_md, rejection)
                        if verdict is _Verdict.REJECTED:
                            self.trust(at)
                            raise rejected(rejection)
                        if verdict is _Verdict.UNKNOWN:
                            self.suspect(at)
                            raise OutcomeUnknown(node, rejection)
                        self.suspect(at)
                        last = rejection
                    # Fast failover: the next node at once.
                    if not pending and time.monotonic() < deadline:
                        launch()
            finally:
                for task in pending:
                    task.cancel()
                if probe is not None:
                    probe.cancel()
                for task in pending:
                    with contextlib.suppress(BaseException):
                        await task
            # Every node failed this round: back off, with full jitter, and go round again.
            now = time.monotonic()
            if now >= deadline:
                raise Unavailable(
                    attempts,
                    last
                    or Rejection(
                        grpc.StatusCode.DEADLINE_EXCEEDED, "", "the call's deadline passed"
                    ),
                )
            await asyncio.sleep(min(random.uniform(0.0, backoff), deadline - now))
            backoff = min(backoff * 2, opts.backoff_max)

    # ---- attempts ----

    def unary(
        self, method: str, request: Any, response: Callable[[bytes], T], *, extra: Metadata = ()
    ) -> AttemptFn[T]:
        """An attempt of a unary call: the message and the metadata the node answered with."""

        async def attempt(
            node: Node, metadata: list[tuple[str, str]], timeout: float
        ) -> _Answer[T]:
            call = node.unary(method, response)(
                request, metadata=[*metadata, *extra], timeout=timeout
            )
            message: T = await call
            initial = await call.initial_metadata()
            return _Answer(message, list(initial or ()))

        return attempt


def _counts_from(data: bytes) -> Any:
    from .v1 import types_pb2

    return types_pb2.Counts.FromString(data)


def _trailers(error: grpc.aio.AioRpcError) -> list[tuple[str, str | bytes]]:
    return list(error.trailing_metadata() or ())


def _initial(error: grpc.aio.AioRpcError) -> list[tuple[str, str | bytes]]:
    return list(error.initial_metadata() or ())


__all__ = [
    "IDEMPOTENCY_KEY",
    "INDEX",
    "LEADER",
    "MIN_INDEX",
    "STALE",
    "SUSPECT_FOR",
    "Attempted",
    "Kind",
    "Options",
    "RowcallError",
    "Session",
]
