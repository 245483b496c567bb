"""Interop: rowcall's public gRPC API (rowcall.v1) driven from Python, with stubs that
grpcio-tools generated from proto/ (by run.sh), so the protos are proven a contract that
another language can use without any Rust.

Usage: grpc_interop.py STUBS_DIR ADMIN_KEY GRPC_ADDR_1 GRPC_ADDR_2 GRPC_ADDR_3

Against a 3-node cluster of the real binary: health (grpc.health.v1) and reflection
(grpcio-reflection, v1alpha) on every node; a put through one node read back on another
with the write's index as x-rowcall-min-index; ask; invoke with Struct arguments; confirm
on a third node; a watch that replays a change and then receives a live one; errors as
statuses carrying google.rpc.ErrorInfo with rowcall's code and hint. Exits non-zero on the
first failure.
"""

import hashlib
import json
import sys
import time
import uuid

import grpc
from google.protobuf import json_format, struct_pb2
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from grpc_status import rpc_status

sys.path.insert(0, sys.argv[1])
from rowcall.v1 import api_pb2, api_pb2_grpc, types_pb2  # noqa: E402  (generated)

ADMIN = sys.argv[2]
ADDRS = sys.argv[3:6]
# A failure bound for every call, not a timing claim.
DEADLINE = 20


def check(condition, what):
    if not condition:
        raise SystemExit(f"FAIL: {what}")
    print(f"ok: {what}")


def admin():
    return [("authorization", f"Bearer {ADMIN}")]


def metadata_of(call):
    """Initial and trailing metadata of a finished unary call, as one dict."""
    found = dict(call.initial_metadata() or ())
    found.update(dict(call.trailing_metadata() or ()))
    return found


def error_info(error):
    """The google.rpc.ErrorInfo in a failed call's status details."""
    status = rpc_status.from_call(error)
    check(status is not None, f"{error.code().name} carries grpc-status-details-bin")
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    raise SystemExit("FAIL: no google.rpc.ErrorInfo in the status details")


def health_and_reflection(channel, addr):
    health = health_pb2_grpc.HealthStub(channel)
    # The whole server reports SERVING once the node is ready (a leader, caught up); it
    # may take a moment after start, so wait for it through the standard Watch stream.
    for update in health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=DEADLINE):
        if update.status == health_pb2.HealthCheckResponse.SERVING:
            break
    check(True, f"{addr}: health of the server is SERVING")
    answer = health.Check(
        health_pb2.HealthCheckRequest(service="rowcall.v1.Dispatch"), timeout=DEADLINE
    )
    check(
        answer.status == health_pb2.HealthCheckResponse.SERVING,
        f"{addr}: health of rowcall.v1.Dispatch is SERVING",
    )

    database = ProtoReflectionDescriptorDatabase(channel)
    services = set(database.get_services())
    wanted = {
        f"rowcall.v1.{s}" for s in ("Dispatch", "Directory", "Receipts", "Transparency", "Cluster")
    }
    check(wanted <= services, f"{addr}: reflection lists {sorted(wanted)}")
    check(
        not any(s.startswith("rowcall.raft") for s in services),
        f"{addr}: reflection hides the Raft-internal service",
    )
    # The descriptors resolve through reflection alone, imports (struct.proto) included.
    from google.protobuf.descriptor_pool import DescriptorPool

    pool = DescriptorPool(database)
    invoke = pool.FindMethodByName("rowcall.v1.Dispatch.Invoke")
    check(
        invoke.input_type.fields_by_name["args"].message_type.full_name
        == "google.protobuf.Struct",
        f"{addr}: reflection resolves Dispatch.Invoke's Struct arguments",
    )


def main():
    channels = [grpc.insecure_channel(addr) for addr in ADDRS]
    for channel, addr in zip(channels, ADDRS):
        health_and_reflection(channel, addr)
    directory = [api_pb2_grpc.DirectoryStub(c) for c in channels]
    dispatch = [api_pb2_grpc.DispatchStub(c) for c in channels]
    cluster = api_pb2_grpc.ClusterStub(channels[0])

    status = cluster.Status(api_pb2.StatusRequest(), timeout=DEADLINE)
    check(len(status.members) == 3, "Cluster.Status lists 3 members")
    check(sum(m.leader for m in status.members) == 1, "exactly one leader")

    # Put through node 2, named by an idempotency key; a retry with the same key replays.
    row = types_pb2.RowInput(
        key="PY_INTEROP_GREETING",
        type="static",
        auth="public",
        category="Interop",
        content='# WHAT: Greet the Python interop check\n\n{"hello": "python"}\n',
    )
    key = str(uuid.uuid4())
    metadata = admin() + [("idempotency-key", key)]
    put, call = directory[1].Put.with_call(
        api_pb2.PutRowRequest(row=row), metadata=metadata, timeout=DEADLINE
    )
    check(put.rows[0].created and put.index > 0, f"Put through node 2 at index {put.index}")
    check(
        metadata_of(call).get("x-rowcall-index") == str(put.index),
        "the answer's x-rowcall-index is the write's index",
    )
    again = directory[1].Put(api_pb2.PutRowRequest(row=row), metadata=metadata, timeout=DEADLINE)
    check(
        again.replayed and list(again.rows) == list(put.rows),
        "a retry with the same idempotency-key is answered with the first outcome",
    )

    # Read it back on node 3 with the write's index: read-your-writes on any node.
    since = [("x-rowcall-min-index", str(put.index))]
    got = directory[2].Get(
        api_pb2.GetRowRequest(key=row.key), metadata=since, timeout=DEADLINE
    )
    check(
        got.version == put.index and got.category == "Interop",
        "Get on node 3 with x-rowcall-min-index reads the write",
    )

    asked = dispatch[2].Ask(
        api_pb2.AskRequest(ask="greet the python interop check", limit=3),
        metadata=since,
        timeout=DEADLINE,
    )
    check(asked.best.key == row.key, f"Ask finds it as best ({asked.best.key})")

    # Invoke with typed arguments (a google.protobuf.Struct), confirm on another node.
    args = struct_pb2.Struct()
    args.update({"word": "hi", "n": 3, "nested": {"list": [1, "two", None]}})
    ran = dispatch[1].Invoke(
        api_pb2.InvokeRequest(key="ECHO", args=args), metadata=admin(), timeout=DEADLINE
    )
    result = json_format.MessageToDict(ran.result)
    check(
        ran.ok and result == {"echo": {"word": "hi", "n": 3, "nested": {"list": [1, "two", None]}}},
        f"Invoke ECHO returns its Struct arguments: {json.dumps(result)}",
    )
    check(ran.proof.invocation_id.startswith("inv_"), "the invocation has a receipt id")
    if ran.proof.HasField("index"):
        receipt_index = [("x-rowcall-min-index", str(ran.proof.index))]
    else:
        receipt_index = []
    confirmed = dispatch[0].Confirm(
        api_pb2.ConfirmRequest(id=ran.proof.invocation_id),
        metadata=receipt_index,
        timeout=DEADLINE,
    )
    check(
        confirmed.confirmed and confirmed.key == "ECHO" and confirmed.ok,
        "Confirm on node 1 checks the receipt",
    )
    # Its inclusion proof, without a credential, once a co-signed checkpoint covers it (the
    # leader starts one about every second while receipts arrive). Node 3 may not have
    # applied the receipt yet (NOT_FOUND) or may hold no checkpoint covering it yet
    # (FAILED_PRECONDITION): both pass with time.
    transparency = api_pb2_grpc.TransparencyStub(channels[2])
    deadline = time.monotonic() + 20
    not_yet = (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND)
    while True:
        try:
            proof = transparency.Prove(
                api_pb2.ProveRequest(id=ran.proof.invocation_id), timeout=DEADLINE
            )
            break
        except grpc.RpcError as e:
            if e.code() not in not_yet or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    leaf_hash = hashlib.sha256(b"\x00" + proof.leaf.encode()).digest()
    check(
        proof.id == ran.proof.invocation_id
        and proof.leaf_hash == leaf_hash
        and proof.checkpoint.size == proof.tree_size
        and len(proof.checkpoint.signers) * 2 > len(proof.checkpoint.voters),
        f"Transparency.Prove on node 3: leaf {proof.leaf_index} of {proof.tree_size}, "
        f"signed by {len(proof.checkpoint.signers)} of {len(proof.checkpoint.voters)} voters",
    )
    static = dispatch[2].Invoke(api_pb2.InvokeRequest(key=row.key), timeout=DEADLINE)
    check(
        static.ok and json_format.MessageToDict(static.result) == {"hello": "python"},
        "Invoke of the row put from Python returns its payload",
    )

    # Watch on node 3 from before the put: the put is replayed, then a live change arrives.
    watch = directory[2].Watch(api_pb2.WatchRequest(since=put.index - 1), timeout=DEADLINE)
    events = iter(watch)
    first = next(events)
    check(
        first.WhichOneof("event") == "change"
        and first.change.key == row.key
        and first.index == put.index,
        "Watch replays the put at its index",
    )
    live = types_pb2.RowInput(
        key="PY_INTEROP_LIVE", type="static", category="Interop", content="# WHAT: live\n"
    )
    written = directory[0].Put(api_pb2.PutRowRequest(row=live), metadata=admin(), timeout=DEADLINE)
    for event in events:
        if event.WhichOneof("event") == "change" and event.change.key == live.key:
            check(
                event.index == written.index and event.change.op == "put",
                "Watch receives a live put made through node 1",
            )
            break
        check(event.index < written.index, f"an earlier change before the live one ({event.index})")
    watch.cancel()

    # Errors: statuses with rowcall's code and hint in google.rpc.ErrorInfo.
    try:
        directory[0].Get(api_pb2.GetRowRequest(key="NO_SUCH_ROW"), timeout=DEADLINE)
        raise SystemExit("FAIL: an unknown row was found")
    except grpc.RpcError as error:
        info = error_info(error)
        check(
            error.code() == grpc.StatusCode.NOT_FOUND
            and info.reason == "not_found"
            and info.domain == "rowcall"
            and info.metadata["hint"],
            f"an unknown row is NOT_FOUND / not_found, hint: {info.metadata['hint']!r}",
        )
    try:
        directory[0].Put(api_pb2.PutRowRequest(row=live), timeout=DEADLINE)
        raise SystemExit("FAIL: a write without a credential was accepted")
    except grpc.RpcError as error:
        info = error_info(error)
        check(
            error.code() == grpc.StatusCode.UNAUTHENTICATED and info.reason == "unauthorized",
            "a write without a credential is UNAUTHENTICATED / unauthorized",
        )
    bad = types_pb2.RowInput(key="lower-case", type="static", content="# WHAT: x\n")
    try:
        directory[0].Put(api_pb2.PutRowRequest(row=bad), metadata=admin(), timeout=DEADLINE)
        raise SystemExit("FAIL: an invalid key was accepted")
    except grpc.RpcError as error:
        info = error_info(error)
        check(
            error.code() == grpc.StatusCode.INVALID_ARGUMENT and info.reason == "invalid_row",
            "an invalid key is INVALID_ARGUMENT / invalid_row",
        )

    deleted = directory[1].Delete(
        api_pb2.DeleteRowRequest(key=live.key), metadata=admin(), timeout=DEADLINE
    )
    check(deleted.deleted == 1, "Delete through node 2")
    for channel in channels:
        channel.close()
    print("grpc interop: all checks passed")


if __name__ == "__main__":
    main()
