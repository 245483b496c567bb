"""The Python client against a real 3-node cluster: the four calls and the typed errors,
read-your-writes across nodes, the leader killed mid-session with reads and writes going
on, an idempotent retry after a lost answer, an invocation whose answer was lost raising
OutcomeUnknown (and running once), a hedged read past a paused node, a watch resuming on
another node after its node died, and receipts verified against real co-signed checkpoints
with tampering caught.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
import uuid

import grpc
import pytest
from cluster import Cluster
from proxy import LossyProxy

import rowcall
from rowcall import verify as rverify


def followers(cluster: Cluster) -> list[int]:
    leader = cluster.leader()
    return [n.id for n in cluster.nodes if n.id != leader and n.process is not None]


def key(prefix: str) -> str:
    return f"PY_{prefix}_{uuid.uuid4().hex[:8].upper()}"


def static_row(k: str, text: str = "hello", **extra: object) -> dict[str, object]:
    return {
        "key": k,
        "type": "static",
        "auth": "public",
        "category": "PyTest",
        "content": f"# WHAT: {k.lower()} python test row\n\n{text}",
        **extra,
    }


def test_the_four_calls_and_typed_errors_with_code_and_hint(
    cluster: Cluster, admin_key: str
) -> None:
    with rowcall.Client(cluster.grpc_addrs(), credential=admin_key) as client:
        k = key("GREET")
        client.put(static_row(k, "hi from python"))
        best = client.ask(f"{k.lower()} python test row").best
        assert best.key == k
        contract = client.contract(k)
        assert contract["key"] == k and contract["risk"] == "read"
        ran = client.invoke(k)
        assert ran.ok and ran.result == "hi from python"
        confirmed = client.confirm(ran.receipt_id)
        assert confirmed.confirmed and confirmed.key == k

        with pytest.raises(rowcall.NotFound) as nf:
            client.get("PY_NO_SUCH_ROW")
        assert nf.value.code == "not_found" and nf.value.hint
        with pytest.raises(rowcall.InvalidArgument) as bad:
            client.put({"key": "lower-case", "type": "static"})
        assert bad.value.code == "invalid_row" and "key" in str(bad.value)
        with pytest.raises(rowcall.InvalidArgument) as args:
            client.invoke("BASE64_ENCODE", {"text": 3})
        assert args.value.code == "invalid_args" and args.value.violations
        with pytest.raises(rowcall.ArgumentError):
            client.put({"key": k, "type": "static", "colour": "blue"})
        with pytest.raises(rowcall.Conflict):
            client.put(static_row(k, if_version=1))
    with (
        rowcall.Client(cluster.grpc_addrs(), credential="") as anonymous,
        pytest.raises(rowcall.Unauthenticated) as no_key,
    ):
        anonymous.put(static_row(key("ANON")))
    assert no_key.value.code == "unauthorized"


def test_nodes_and_credential_come_from_the_environment(
    cluster: Cluster, admin_key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROWCALL_NODES", ",".join(cluster.grpc_addrs()))
    monkeypatch.setenv("ROWCALL_ADMIN_KEY", admin_key)
    k = key("ENV")
    with rowcall.Client() as client:  # a directory write needs the admin key
        put = client.put(static_row(k))
        assert client.get(k).version == put.index
    monkeypatch.setenv("ROWCALL_ADMIN_KEY", "")
    with rowcall.Client() as anonymous, pytest.raises(rowcall.Unauthenticated):
        anonymous.put(static_row(k))


def test_reads_on_a_follower_see_the_sessions_writes_through_the_leader(
    cluster: Cluster, admin_key: str
) -> None:
    follower = cluster.node(followers(cluster)[0])
    leader = cluster.node(cluster.leader())
    seen: list[rowcall.Attempted] = []
    # Reads go to the first node listed (the follower), writes to the leader once named.
    # Without hedges, and with time for the follower to catch up after its pause: a read
    # that also went to the leader would not show what the follower answers.
    with rowcall.Client(
        [follower.grpc_addr, leader.grpc_addr],
        credential=admin_key,
        on_attempt=seen.append,
        hedge_after=None,
        read_timeout=5.0,
    ) as client:
        client.put(static_row(key("RYW")))  # names the leader: later writes go there first
        for i in range(15):
            k = key(f"RYW{i}")
            # The follower misses the write while it is stopped, so it is behind when the
            # read reaches it: only the session's index makes it wait for the write.
            cluster.pause(follower.id)
            try:
                written = client.put(static_row(k))
            finally:
                cluster.resume(follower.id)
            assert client.get(k).version == written.index
            assert client.ask(f"{k.lower()} python test row").best.key == k
        gets = [a for a in seen if a.method.endswith("/Get") and a.failure is None]
        assert {a.node for a in gets} == {follower.grpc_addr}, "reads left the follower"
        assert all(a.min_index > 0 for a in gets)


def test_the_leader_killed_mid_session_reads_and_writes_go_on(
    cluster: Cluster, admin_key: str
) -> None:
    leader = cluster.leader()
    written: list[str] = []
    failures: list[BaseException] = []
    stop = threading.Event()
    with rowcall.Client(cluster.grpc_addrs(), credential=admin_key) as client:

        def work() -> None:
            while not stop.is_set():
                k = key("FAIL")
                try:
                    client.put(static_row(k))
                    written.append(k)
                    assert client.get(k).key == k
                    client.ask("python test row")
                except BaseException as e:
                    failures.append(e)
                    return

        worker = threading.Thread(target=work)
        worker.start()
        while len(written) < 5:
            time.sleep(0.01)
        cluster.kill(leader)
        before = len(written)
        deadline = time.monotonic() + 30
        while len(written) < before + 10 and time.monotonic() < deadline and not failures:
            time.sleep(0.05)
        stop.set()
        worker.join(timeout=30)
        assert not failures, f"a call failed after the leader was killed: {failures[0]!r}"
        assert len(written) >= before + 10, "writes did not go on after the leader was killed"
        assert cluster.leader() != leader
        for k in written:
            assert client.get(k).key == k
    cluster.launch(leader)
    cluster.wait_ready(leader)


def test_a_write_whose_answer_was_lost_is_retried_and_applied_once(
    cluster: Cluster, admin_key: str
) -> None:
    leader = cluster.node(cluster.leader())
    other = cluster.node(followers(cluster)[0])
    proxy = LossyProxy(("127.0.0.1", leader.grpc))
    try:
        with rowcall.Client(
            [proxy.address, other.grpc_addr],
            credential=admin_key,
            write_timeout=1.5,
            write_hedge_after=None,
        ) as client:
            client.status()  # the connection through the proxy is up; no leader hint yet
            proxy.drop_answers = True
            k = key("ONCE")
            put = client.put(static_row(k))
            assert put.replayed, "the retry was applied again instead of answered from the first"
            row = client.get(k)
            assert row.version == put.rows[0].version
    finally:
        proxy.close()


def test_a_write_stuck_on_a_paused_leader_is_hedged_after_a_few_recent_write_times(
    cluster: Cluster, admin_key: str
) -> None:
    leader = cluster.node(cluster.leader())
    others = [cluster.node(i).grpc_addr for i in followers(cluster)]
    seen: list[rowcall.Attempted] = []
    # The longest wait (60 s) is past the call's deadline (20 s): only a delay drawn from
    # the session's recent writes can send the write on to a follower in time.
    with rowcall.Client(
        [leader.grpc_addr, *others],
        credential=admin_key,
        write_timeout=60,
        write_hedge_after=60,
        deadline=20,
        on_attempt=seen.append,
    ) as client:
        for i in range(16):
            client.put(static_row(key(f"LEARN{i}")))
        seen.clear()
        cluster.pause(leader.id)
        try:
            k = key("PAST_PAUSE")
            written = client.put(static_row(k))
        finally:
            cluster.resume(leader.id)
        assert written.rows[0].created
        answered = [a for a in seen if a.failure is None and a.method.endswith("/Put")]
        assert [a.node for a in answered if a.node != leader.grpc_addr], seen
        assert client.get(k).version == written.rows[0].version
    cluster.leader()  # every node names one leader again before the next test


def test_a_write_goes_to_a_third_node_while_two_attempts_hang(
    cluster: Cluster, admin_key: str
) -> None:
    """The first attempt and the first hedge both hang (as a leader cut off with a follower,
    which forwards to that leader, both do): the write is hedged once more, to a third node,
    instead of waiting for one of the two to fail (here: not before the deadline)."""
    leader = cluster.node(cluster.leader())
    other, live = (cluster.node(i) for i in followers(cluster))
    # Through these two a connection comes up, and then no answer arrives.
    hanging = [LossyProxy(("127.0.0.1", node.grpc)) for node in (leader, other)]
    for proxy in hanging:
        proxy.drop_answers_after_greeting = True
    seen: list[rowcall.Attempted] = []
    try:
        with rowcall.Client(
            [*(proxy.address for proxy in hanging), live.grpc_addr],
            credential=admin_key,
            write_timeout=20,
            write_hedge_after=0.05,
            deadline=20,
            on_attempt=seen.append,
        ) as client:
            written = client.put(static_row(key("THIRD_NODE")))
        assert written.rows[0].created
        # The hanging attempts were cancelled when the third answered: not reported.
        assert [(a.node, a.failure) for a in seen] == [(live.grpc_addr, None)], seen
    finally:
        for proxy in hanging:
            proxy.close()


def test_a_hedged_write_goes_round_again_while_one_attempt_hangs_and_the_rest_refuse(
    cluster: Cluster, admin_key: str
) -> None:
    """The attempt on one node hangs (its answers are lost) and every other node refuses at
    once, as nodes do while they elect: the write is sent round the others again, one per
    hedge delay, and lands once one of them takes it, instead of waiting the hanging attempt
    out until the call's deadline."""
    leader = cluster.node(cluster.leader())
    follower = cluster.node(followers(cluster)[0])
    hanging = LossyProxy(("127.0.0.1", leader.grpc))
    refusing = LossyProxy(("127.0.0.1", follower.grpc))
    seen: list[rowcall.Attempted] = []
    opens = threading.Timer(1.0, lambda: setattr(refusing, "refuse", False))
    try:
        with rowcall.Client(
            [hanging.address, refusing.address],
            credential=admin_key,
            write_timeout=60,
            write_hedge_after=0.05,
            deadline=20,
            on_attempt=seen.append,
        ) as client:
            client.status()  # the connection through the first proxy is up; no leader hint
            hanging.drop_answers = True
            refusing.refuse = True
            opens.start()
            k = key("ROUND_AGAIN")
            written = client.put(static_row(k))
            index = client.session_index
        assert written.rows[0].created
        puts = [a for a in seen if a.method.endswith("/Put")]
        assert [a.node for a in puts if a.failure is None] == [refusing.address], seen
        refused = [a for a in puts if a.node == refusing.address and a.failure is not None]
        assert len(refused) >= 2, "the refusing node was not asked again within the round"
    finally:
        opens.cancel()
        hanging.close()
        refusing.close()
    with rowcall.Client(cluster.grpc_addrs(), credential=admin_key, session_index=index) as check:
        assert check.get(k).version == written.rows[0].version


def test_an_invocation_whose_answer_was_lost_is_outcome_unknown_and_ran_once(
    cluster: Cluster, admin_key: str
) -> None:
    leader = cluster.node(cluster.leader())
    other = cluster.node(followers(cluster)[0])
    k = key("RUN")
    with rowcall.Client(cluster.grpc_addrs(), credential=admin_key) as setup:
        setup.put(static_row(k, risk="write"))
        index = setup.session_index
    proxy = LossyProxy(("127.0.0.1", leader.grpc))
    try:
        with rowcall.Client(
            [proxy.address, other.grpc_addr], credential=admin_key, session_index=index
        ) as client:
            client.status()
            proxy.drop_answers = True
            with pytest.raises(rowcall.OutcomeUnknown) as unknown:
                client.invoke(k)
            assert "receipt" in str(unknown.value)
    finally:
        proxy.close()
    with rowcall.Client(cluster.grpc_addrs(), credential=admin_key) as check:
        deadline = time.monotonic() + 10
        while not check.receipts(k).receipts and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(check.receipts(k).receipts) == 1, "the invocation ran other than once"


def test_an_invocation_whose_connection_broke_after_sending_is_outcome_unknown(
    cluster: Cluster, admin_key: str
) -> None:
    leader = cluster.node(cluster.leader())
    other = cluster.node(followers(cluster)[0])
    k = key("CUT")
    with rowcall.Client(cluster.grpc_addrs(), credential=admin_key) as setup:
        setup.put(static_row(k, risk="write"))
        index = setup.session_index
    proxy = LossyProxy(("127.0.0.1", leader.grpc))
    try:
        # The silence probe would wait 0.5 s: the connection breaks first, so this is the
        # transport failure of a call that was sent (not a refused connection).
        with rowcall.Client(
            [proxy.address, other.grpc_addr], credential=admin_key, session_index=index
        ) as client:
            client.status()
            proxy.drop_answers = True
            proxy.cut_after = 0.2
            with pytest.raises(rowcall.OutcomeUnknown) as unknown:
                client.invoke(k)
            assert unknown.value.last.status == grpc.StatusCode.UNAVAILABLE
            assert unknown.value.node == proxy.address
    finally:
        proxy.close()
    with rowcall.Client(cluster.grpc_addrs(), credential=admin_key) as check:
        # It reached the node: it ran there once and was not sent to the other node.
        deadline = time.monotonic() + 10
        while not check.receipts(k).receipts and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(check.receipts(k).receipts) == 1, "the invocation ran other than once"


def test_a_read_is_hedged_past_a_paused_node(cluster: Cluster) -> None:
    follower = cluster.node(followers(cluster)[0])
    others = [n.grpc_addr for n in cluster.nodes if n.id != follower.id]

    async def run() -> str:
        seen: list[rowcall.Attempted] = []
        # A read timeout beyond the deadline: only the hedge can answer in time.
        async with rowcall.AsyncClient(
            [follower.grpc_addr, *others], read_timeout=30, deadline=5, on_attempt=seen.append
        ) as client:
            await client.counts()
            cluster.pause(follower.id)
            try:
                await client.ask("python test row")
            finally:
                cluster.resume(follower.id)
            return next(a.node for a in seen if a.method.endswith("/Ask") and a.failure is None)

    assert asyncio.run(run()) != follower.grpc_addr


def next_changes(
    watch: rowcall.SyncWatch, prefix: str, count: int, within: float = 20.0
) -> list[str]:
    """The keys of the next ``count`` changes to rows named ``prefix*``; bounded, so a change
    the watch lost fails the test instead of hanging it."""

    def read() -> list[str]:
        keys: list[str] = []
        for event in watch:
            if event.WhichOneof("event") == "change" and event.change.key.startswith(prefix):
                keys.append(event.change.key)
                if len(keys) == count:
                    break
        return keys

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(read)
        try:
            return future.result(timeout=within)
        except concurrent.futures.TimeoutError:
            watch.close()
            pytest.fail(f"fewer than {count} changes of {prefix}* within {within} s")


def test_a_watch_resumes_on_another_node_after_its_node_died(
    cluster: Cluster, admin_key: str
) -> None:
    victim = cluster.node(followers(cluster)[0])
    others = [n.grpc_addr for n in cluster.nodes if n.id != victim.id]
    seen: list[rowcall.Attempted] = []
    prefix = key("W")
    with rowcall.Client(
        [victim.grpc_addr, *others], credential=admin_key, on_attempt=seen.append
    ) as client:
        client.counts()  # a read: the session now knows the node's index
        start = client.session_index
        first, second, third = (f"{prefix}_{i}" for i in (1, 2, 3))
        watch = client.watch(since=start)
        client.put(static_row(first))
        assert next_changes(watch, prefix, 1) == [first]
        assert [a.node for a in seen if a.method.endswith("/Watch")] == [victim.grpc_addr]
        cluster.kill(victim.id)
        # Written while the watch has no node: it must resume from its last index, not
        # from now, and not deliver `first` again.
        client.put(static_row(second))
        client.put(static_row(third))
        assert next_changes(watch, prefix, 2) == [second, third], (
            "a change was missed or repeated across the failover"
        )
        assert any(
            a.method.endswith("/Watch") and a.node != victim.grpc_addr and a.failure is None
            for a in seen
        ), "the watch did not reopen on another node"
        watch.close()
    cluster.launch(victim.id)
    cluster.wait_ready(victim.id)


def test_the_directory_calls_and_an_async_watch_of_a_bulk_write(
    cluster: Cluster, admin_key: str
) -> None:
    prefix = key("BULK")
    keys = [f"{prefix}_{i}" for i in range(4)]

    async def run() -> None:
        async with rowcall.AsyncClient(cluster.grpc_addrs(), credential=admin_key) as client:
            await client.counts()
            watch = client.watch(since=client.session_index)
            put = await client.put_many([static_row(k, f"row {k}") for k in keys])
            # One write: every row at one index, all four delivered (rows of one index are
            # told apart by how many of it were delivered).
            assert [o.key for o in put.rows] == keys
            assert len({o.version for o in put.rows}) == 1
            page = await client.list(category="PyTest", limit=1000)
            assert set(keys) <= {r.key for r in page.rows}
            listed = [r.key async for r in client.rows("PyTest") if r.key.startswith(prefix)]
            assert listed == sorted(keys)
            gone = await client.delete(keys[0], if_version=put.rows[0].version)
            assert gone.index > put.index
            with pytest.raises(rowcall.NotFound):
                await client.get(keys[0])
            with pytest.raises(rowcall.Conflict):
                await client.delete(keys[1], if_version=put.rows[1].version + 100)
            changes: list[tuple[str, str]] = []

            async def collect() -> None:
                async for event in watch:
                    if event.WhichOneof("event") == "change" and event.change.key.startswith(
                        prefix
                    ):
                        changes.append((event.change.op, event.change.key))
                        if len(changes) == 5:
                            return

            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(collect(), 20)
            await watch.aclose()
            assert changes == [("put", k) for k in keys] + [("delete", keys[0])]

    asyncio.run(run())


def test_verify_against_a_real_checkpoint_and_tampering_is_caught(
    cluster: Cluster, admin_key: str, tmp_path: object
) -> None:
    state = f"{tmp_path}/verify.json"
    with rowcall.Client(cluster.grpc_addrs(), credential=admin_key) as client:
        ran = client.invoke("ECHO", {"python": True})
        with pytest.raises(rowcall.VerifyError) as no_keys:
            client.verify(ran.receipt_id, state=state)
        assert no_keys.value.reason in ("no_keys", "not_yet_covered")
        verdict = None
        deadline = time.monotonic() + 20
        while verdict is None:
            try:
                verdict = client.verify(ran.receipt_id, trust_node_keys=True, state=state)
            except rowcall.NotYetCovered:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert verdict.leaf == "id" and len(verdict.signers) * 2 > verdict.pinned
        assert verdict.pinned == 3 and verdict.history == "first"
        # The next run checks with the pinned keys, consistent with the checkpoint seen.
        later = client.invoke("ECHO", {"again": 1})
        while True:
            try:
                again = client.verify(later.receipt_id, state=state)
                break
            except rowcall.NotYetCovered:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        assert again.keys_from == "pinned" and again.history in ("same", "extends")
        # The receipt as stored verifies as exactly this receipt; an edited one does not.
        stored = client.receipt(ran.receipt_id)
        receipt = {
            f: getattr(stored, f)
            for f in (
                "id",
                "key",
                "row_version",
                "caller",
                "started_at",
                "input_sha256",
                "output_sha256",
                "ok",
            )
        }
        receipt["error"] = stored.error if stored.HasField("error") else None
        assert client.verify(ran.receipt_id, receipt=receipt, state=state).leaf == "receipt"
        with pytest.raises(rowcall.VerifyError) as edited:
            client.verify(
                ran.receipt_id, receipt={**receipt, "caller": "someone-else"}, state=state
            )
        assert edited.value.reason == "receipt_edited"
        # A checkpoint whose note was changed fails its signatures.
        proof = client.prove(ran.receipt_id)
        witness = rverify.Witness()
        keys = rverify.choose_keys([], witness, proof.checkpoint)
        forged = type(proof.checkpoint)()
        forged.CopyFrom(proof.checkpoint)
        size = proof.checkpoint.size
        forged.note = forged.note.replace(f"\n{size}\n", f"\n{size + 1}\n", 1)
        forged.size = size + 1
        with pytest.raises(rowcall.VerifyError) as bad:
            rverify.verify(ran.receipt_id, rverify.Evidence(forged, proof), witness, keys)
        assert bad.value.reason == "bad_signature"
        # An inclusion proof with one hash of its path changed does not reach the root.
        assert proof.path, "a tree of one leaf has no path to tamper with"
        bent = type(proof)()
        bent.CopyFrom(proof)
        bent.path[0] = bytes(b ^ 0xFF for b in bent.path[0])
        with pytest.raises(rowcall.VerifyError) as off_path:
            rverify.verify(ran.receipt_id, rverify.Evidence(proof.checkpoint, bent), witness, keys)
        assert off_path.value.reason == "inclusion"
