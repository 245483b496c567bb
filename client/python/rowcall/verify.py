"""``verify``: checks a receipt against the receipt log's transparency log without trusting
the node that answers, with the same checks (and the same state file) as ``rowcall
verify`` (``client/src/verify.rs``). What the node sends is evidence; what this machine
pinned (voter keys, the log's origin, the last checkpoint it saw) is the trust.

::

  claim (an id, or a receipt) ─┐
  SignedCheckpoint ────────────┼─► checkpoint: note = fields, signed by most pinned keys
  ConsistencyProof ────────────┤   history:    same size ⇒ same root; else the smaller tree is a
  InclusionProof ──────────────┘               prefix of the larger; leaf; inclusion in the root
                                    ▼
                                 Verdict ─► Witness.advance ─► state file (temp + rename)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from . import tlog
from .errors import Rejected, RowcallError
from .tlog import Checkpoint, TlogError, VerifierKey
from .v1 import api_pb2

if TYPE_CHECKING:
    from .aio import AsyncClient


class VerifyError(RowcallError):
    """A receipt did not verify. ``reason`` names the check that failed, as the Rust
    ``VerifyError`` variants do: ``malformed``, ``other_receipt``, ``receipt_edited``,
    ``leaf_hash``, ``inclusion``, ``other_tree``, ``note``, ``bad_signature``,
    ``not_majority``, ``no_keys``, ``bad_key``, ``other_origin``, ``fork``,
    ``missing_consistency``, ``inconsistent``, ``receipt``, ``state_corrupt``,
    ``state_changed``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class NotYetCovered(VerifyError):
    """No co-signed checkpoint covers the receipt yet: the leader starts one about every
    second, so this passes on its own."""

    def __init__(self, receipt_id: str) -> None:
        super().__init__(
            "not_yet_covered",
            f"{receipt_id} is not yet in a co-signed checkpoint: try again in a second",
        )


#: The fields of a receipt its leaf commits to.
_LEAF_FIELDS = (
    "id",
    "key",
    "row_version",
    "caller",
    "started_at",
    "input_sha256",
    "output_sha256",
    "ok",
)


def receipt_leaf_of(receipt: Mapping[str, Any]) -> bytes:
    """The canonical leaf of a receipt given as JSON (as ``rowcall receipts ID --json``
    prints it, or a ``Receipt`` message turned into a dict); other fields are ignored."""
    missing = [f for f in _LEAF_FIELDS if f not in receipt]
    if missing:
        raise VerifyError("receipt", f"not a receipt: no {missing[0]}")
    error = receipt.get("error")
    types_ok = (
        all(
            isinstance(receipt[f], str)
            for f in ("id", "key", "caller", "started_at", "input_sha256", "output_sha256")
        )
        and isinstance(receipt["row_version"], int)
        and not isinstance(receipt["row_version"], bool)
        and isinstance(receipt["ok"], bool)
        and (error is None or isinstance(error, str))
    )
    if not types_ok:
        raise VerifyError("receipt", "not a receipt: a field has the wrong type")
    return tlog.receipt_leaf(
        id=receipt["id"],
        key=receipt["key"],
        row_version=receipt["row_version"],
        caller=receipt["caller"],
        started_at=receipt["started_at"],
        input_sha256=receipt["input_sha256"],
        output_sha256=receipt["output_sha256"],
        ok=receipt["ok"],
        error=error,
    )


@dataclass(frozen=True)
class Keys:
    """The voter keys a checkpoint must carry a majority of signatures of, and where they
    came from: ``given`` (the operator), ``pinned`` (the state), ``node`` (first use)."""

    keys: tuple[VerifierKey, ...]
    source: str


@dataclass(frozen=True)
class Seen:
    checkpoint: Checkpoint
    note: str


@dataclass(frozen=True)
class Witness:
    """What a verifier remembers between runs: the keys it pinned and the largest
    checkpoint it verified (whose origin is the log it pinned)."""

    keys: tuple[VerifierKey, ...] = ()
    seen: Seen | None = None

    def origin(self) -> str | None:
        return self.seen.checkpoint.origin if self.seen else None

    def consistency_needed(self, size: int) -> tuple[int, int] | None:
        if self.seen is None:
            return None
        old = self.seen.checkpoint.size
        small, large = min(old, size), max(old, size)
        return (small, large) if small != large and small != 0 else None

    def advance(self, verdict: Verdict, keys: Keys) -> Witness:
        seen = self.seen
        if seen is None or seen.checkpoint.size <= verdict.checkpoint.size:
            seen = Seen(verdict.checkpoint, verdict.note)
        return Witness(keys.keys, seen)

    def to_json(self) -> str:
        checkpoint = None
        if self.seen is not None:
            c = self.seen.checkpoint
            checkpoint = {
                "origin": c.origin,
                "size": c.size,
                "root": tlog.encode_hash(c.root),
                "note": self.seen.note,
            }
        return (
            json.dumps({"keys": [str(k) for k in self.keys], "checkpoint": checkpoint}, indent=2)
            + "\n"
        )

    @classmethod
    def from_json(cls, text: str) -> Witness:
        data = json.loads(text)
        keys = tuple(VerifierKey.parse(k) for k in data.get("keys") or [])
        c = data.get("checkpoint")
        if c is None:
            return cls(keys, None)
        checkpoint = Checkpoint(c["origin"], int(c["size"]), tlog.decode_hash(c["root"]))
        body, _ = tlog.open_note(c["note"])
        if Checkpoint.parse(body) != checkpoint:
            raise ValueError("the checkpoint's note says another size or root")
        return cls(keys, Seen(checkpoint, c["note"]))

    @classmethod
    def load(cls, path: Path) -> Witness:
        """The state in ``path``; a missing file is a first use (nothing pinned)."""
        try:
            text = path.read_text()
        except FileNotFoundError:
            return cls()
        try:
            return cls.from_json(text)
        except (ValueError, KeyError, TypeError, TlogError) as e:
            raise VerifyError(
                "state_corrupt", f"state file {path} is corrupt: {e} (move it away to start over)"
            ) from e

    def save(self, path: Path, loaded: Witness) -> None:
        """Writes this state in place of ``loaded`` (temp file, fsync, rename); refuses when
        another run changed the file meanwhile."""
        now = Witness.load(path)
        if now == self:
            return
        if now != loaded:
            raise VerifyError(
                "state_changed",
                f"state file {path} changed while verifying (another verify?): run again",
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.parent / f".{path.name}.{os.getpid()}.tmp"
        try:
            with open(temp, "w") as f:
                f.write(self.to_json())
                f.flush()
                os.fsync(f.fileno())
            os.replace(temp, path)
        except OSError:
            temp.unlink(missing_ok=True)
            raise


def default_state_path() -> Path | None:
    """``$XDG_STATE_HOME/rowcall/verify.json``, else ``~/.local/state/rowcall/verify.json``
    (the Rust CLI's default, so both share what they pinned)."""
    env = os.environ.get("ROWCALL_VERIFY_STATE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "rowcall" / "verify.json"
    home = os.environ.get("HOME")
    return Path(home) / ".local" / "state" / "rowcall" / "verify.json" if home else None


def choose_keys(
    given: Sequence[VerifierKey], witness: Witness, node: api_pb2.SignedCheckpoint | None
) -> Keys:
    """The keys given, else those pinned, else (trust on first use) the node's keys of the
    checkpoint's voters. Pinned keys win over the node's: a node cannot swap them."""

    def dedup(keys: Sequence[VerifierKey]) -> tuple[VerifierKey, ...]:
        return tuple(dict.fromkeys(keys))

    if given:
        return Keys(dedup(given), "given")
    if witness.keys:
        return Keys(witness.keys, "pinned")
    if node is None:
        raise VerifyError(
            "no_keys",
            "no voter keys pinned: pass keys=[...] (from the operator), "
            "or trust_node_keys=True to pin the node's on first use",
        )
    voters = {f"{node.origin}/node{v}" for v in node.voters}
    keys = []
    for text in node.keys:
        try:
            key = VerifierKey.parse(text)
        except TlogError as e:
            raise VerifyError(
                "malformed", f"the node's answer is malformed: the node's keys: {e}"
            ) from e
        if key.name in voters:
            keys.append(key)
    if not keys:
        raise VerifyError("no_keys", "no voter keys pinned, and the node lists none of its voters'")
    return Keys(dedup(keys), "node")


@dataclass(frozen=True)
class Verdict:
    """What was proved."""

    id: str
    #: ``receipt`` (the receipt given encodes to the leaf), ``id`` (the leaf names the id),
    #: ``hash_only`` (the body was dropped by retention: only its hash is proved).
    leaf: str
    body_dropped: bool
    leaf_index: int
    checkpoint: Checkpoint
    note: str
    signers: tuple[str, ...]
    pinned: int
    keys_from: str
    #: ``first``, ``same``, ``extends`` or ``behind``, and the size seen before.
    history: str
    history_size: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        text = f"verified {self.id}: "
        if self.leaf == "receipt":
            text += "the receipt given is "
        text += f"leaf {self.leaf_index} of {self.checkpoint.size}"
        if self.leaf == "hash_only":
            text += (
                f" (body dropped by retention: its hash is proved, that it is {self.id}'s "
                "is the node's word)"
            )
        elif self.body_dropped:
            text += " (body dropped by retention)"
        text += (
            f" in the checkpoint co-signed by {len(self.signers)} of {self.pinned} pinned "
            f"voters ({self.checkpoint.origin}), "
        )
        text += {
            "first": "the first checkpoint seen (remembered from now on)",
            "same": "the same checkpoint as seen before",
            "extends": f"consistent with the checkpoint of size {self.history_size} seen before",
            "behind": f"a prefix of the larger checkpoint of size {self.history_size} "
            "seen before (kept)",
        }[self.history]
        if self.keys_from == "node":
            text += "; voter keys taken from the node on first use and pinned"
        return text


@dataclass(frozen=True)
class Evidence:
    """What the nodes answered."""

    checkpoint: api_pb2.SignedCheckpoint
    proof: api_pb2.InclusionProof
    consistency: api_pb2.ConsistencyProof | None = None


def _hash(what: str, raw: bytes) -> bytes:
    if len(raw) != 32:
        raise VerifyError(
            "malformed", f"the node's answer is malformed: {what} is {len(raw)} bytes, not 32"
        )
    return bytes(raw)


def _check_checkpoint(
    signed: api_pb2.SignedCheckpoint, witness: Witness, keys: Keys
) -> tuple[Checkpoint, tuple[str, ...]]:
    claimed = Checkpoint(signed.origin, signed.size, _hash("the checkpoint's root", signed.root))
    pinned = witness.origin()
    if pinned is not None and pinned != claimed.origin:
        raise VerifyError(
            "other_origin",
            f"the checkpoint is of the log {claimed.origin!r}, not the pinned {pinned!r}",
        )
    if not keys.keys:
        raise VerifyError("no_keys", "no voter keys pinned")
    try:
        body, signers = tlog.verified_signers(signed.note, keys.keys)
    except TlogError as e:
        if e.kind == "signature":
            raise VerifyError(
                "bad_signature", f"BAD SIGNATURE on the checkpoint of size {signed.size}: {e}"
            ) from e
        raise VerifyError("note", f"the checkpoint's note does not hold: {e}") from e
    try:
        read = Checkpoint.parse(body)
    except TlogError as e:
        raise VerifyError("note", f"the checkpoint's note does not hold: {e}") from e
    if read != claimed:
        raise VerifyError(
            "note",
            f"the checkpoint's note does not hold: it signs {read.origin} size {read.size} root "
            f"{tlog.encode_hash(read.root)}, the answer says {claimed.origin} size "
            f"{claimed.size} root {tlog.encode_hash(claimed.root)}",
        )
    # A strict majority: two disjoint sets of signers cannot both have one.
    if len(signers) * 2 <= len(keys.keys):
        raise VerifyError(
            "not_majority",
            f"the checkpoint of size {read.size} is signed by {len(signers)} of "
            f"{len(keys.keys)} pinned voter keys: not a majority",
        )
    return read, tuple(k.name for k in signers)


def _check_history(
    witness: Witness, new: Checkpoint, consistency: api_pb2.ConsistencyProof | None
) -> tuple[str, int | None]:
    if witness.seen is None:
        return "first", None
    old = witness.seen.checkpoint
    if old.size == new.size:
        if old.root == new.root:
            return "same", new.size
        raise VerifyError("fork", f"FORK: two roots for size {new.size}")
    small, large = (old, new) if old.size < new.size else (new, old)
    if consistency is not None:
        if (getattr(consistency, "from"), consistency.to) != (small.size, large.size):
            raise VerifyError(
                "malformed",
                f"the node's answer is malformed: a consistency proof from "
                f"{getattr(consistency, 'from')} to {consistency.to} where {small.size} to "
                f"{large.size} was asked",
            )
        path = [_hash("a consistency path hash", h) for h in consistency.path]
    elif small.size == 0:
        path = []
    else:
        raise VerifyError(
            "missing_consistency",
            f"no consistency proof between the tree sizes {small.size} and {large.size}",
        )
    try:
        tlog.verify_consistency(small.size, large.size, small.root, large.root, path)
    except TlogError as e:
        # When the path holds from the root the node gives for the smaller size, and that
        # root is not the co-signed one, the larger co-signed tree grew from another tree.
        theirs = bytes(consistency.from_root) if consistency is not None else b""
        if len(theirs) == 32 and theirs != small.root:
            try:
                tlog.verify_consistency(small.size, large.size, theirs, large.root, path)
            except TlogError:
                pass
            else:
                raise VerifyError("fork", f"FORK: two roots for size {small.size}") from e
        raise VerifyError(
            "inconsistent",
            f"INCONSISTENT: the tree of size {small.size} is not a prefix of the tree of size "
            f"{large.size}: {e}",
        ) from e
    return ("extends", old.size) if old.size < new.size else ("behind", old.size)


def _check_leaf(
    receipt_id: str, receipt: Mapping[str, Any] | None, proof: api_pb2.InclusionProof
) -> str:
    if proof.id != receipt_id:
        raise VerifyError("other_receipt", f"the proof is for {proof.id}, not {receipt_id}")
    leaf_hash = _hash("the leaf hash", proof.leaf_hash)
    edited = VerifyError(
        "receipt_edited",
        f"the receipt given for {receipt_id} differs from the leaf the log holds for it (edited?)",
    )
    if not proof.leaf:
        if not proof.body_dropped:
            raise VerifyError(
                "malformed",
                "the node's answer is malformed: no leaf, and retention did not drop its body",
            )
        if receipt is None:
            return "hash_only"
        if tlog.leaf_hash(receipt_leaf_of(receipt)) == leaf_hash:
            return "receipt"
        raise edited
    if tlog.leaf_hash(proof.leaf.encode()) != leaf_hash:
        raise VerifyError(
            "leaf_hash", f"leaf {proof.leaf_index} does not hash to the proof's leaf hash"
        )
    if receipt is not None:
        if receipt_leaf_of(receipt) == proof.leaf.encode():
            return "receipt"
        raise edited
    try:
        leaf = json.loads(proof.leaf)
    except ValueError as e:
        raise VerifyError(
            "malformed", f"the node's answer is malformed: the leaf is not JSON: {e}"
        ) from e
    named = leaf.get("id") if isinstance(leaf, dict) else None
    if named != receipt_id:
        raise VerifyError("other_receipt", f"the proof is for {named or 'no id'}, not {receipt_id}")
    return "id"


def verify(
    receipt_id: str,
    evidence: Evidence,
    witness: Witness,
    keys: Keys,
    receipt: Mapping[str, Any] | None = None,
) -> Verdict:
    """Judges ``evidence`` for a receipt, trusting only ``keys`` and what ``witness``
    remembers (pure: no network, no files)."""
    checkpoint, signers = _check_checkpoint(evidence.checkpoint, witness, keys)
    history, history_size = _check_history(witness, checkpoint, evidence.consistency)
    proof = evidence.proof
    leaf = _check_leaf(receipt_id, receipt, proof)
    if proof.tree_size != checkpoint.size or bytes(proof.root) != checkpoint.root:
        raise VerifyError(
            "other_tree",
            f"the proof is against the tree of size {proof.tree_size}, the checkpoint is of size "
            f"{checkpoint.size} or has another root",
        )
    path = [_hash("an inclusion path hash", h) for h in proof.path]
    try:
        tlog.verify_inclusion(
            proof.leaf_index,
            checkpoint.size,
            _hash("the leaf hash", proof.leaf_hash),
            path,
            checkpoint.root,
        )
    except TlogError as e:
        raise VerifyError(
            "inclusion",
            f"the inclusion proof of leaf {proof.leaf_index} in the tree of size "
            f"{checkpoint.size} fails: {e}",
        ) from e
    return Verdict(
        id=receipt_id,
        leaf=leaf,
        body_dropped=proof.body_dropped,
        leaf_index=proof.leaf_index,
        checkpoint=checkpoint,
        note=evidence.checkpoint.note,
        signers=signers,
        pinned=len(keys.keys),
        keys_from=keys.source,
        history=history,
        history_size=history_size,
    )


async def verify_receipt(
    client: AsyncClient,
    receipt_id: str,
    *,
    receipt: Mapping[str, Any] | None = None,
    keys: Sequence[str] = (),
    trust_node_keys: bool = False,
    state: str | os.PathLike[str] | None = None,
) -> Verdict:
    """Fetches a receipt's proof, its co-signed checkpoint and (when the state remembers
    another size) a consistency proof, judges them with :func:`verify`, then remembers the
    checkpoint in the state file. ``receipt`` (its JSON) proves the log holds exactly it;
    ``keys`` are voter verifier keys from the operator; ``trust_node_keys`` pins the node's
    voters' keys when nothing is pinned. Raises :class:`VerifyError` (or
    :class:`NotYetCovered`)."""
    if receipt is not None and receipt.get("id") != receipt_id:
        raise VerifyError("receipt", f"the receipt given is {receipt.get('id')}, not {receipt_id}")
    path = Path(state) if state is not None else default_state_path()
    if path is None:
        raise VerifyError("state", "no home directory for the state file: pass state=PATH")
    witness = Witness.load(path)
    try:
        given = [VerifierKey.parse(k) for k in keys]
    except TlogError as e:
        raise VerifyError("bad_key", str(e)) from e

    def not_yet(e: Rejected) -> VerifyError | Rejected:
        return NotYetCovered(receipt_id) if e.status == grpc.StatusCode.FAILED_PRECONDITION else e

    try:
        proof = await client.prove(receipt_id, 0)
        if proof.HasField("checkpoint"):
            checkpoint = proof.checkpoint
        else:
            checkpoint = await client.checkpoint()
            if checkpoint.size != proof.tree_size:
                proof = await client.prove(receipt_id, checkpoint.size)
    except Rejected as e:
        raise not_yet(e) from e
    chosen = choose_keys(given, witness, checkpoint if trust_node_keys else None)
    needed = witness.consistency_needed(checkpoint.size)
    consistency = await client.consistency(*needed) if needed else None
    verdict = verify(receipt_id, Evidence(checkpoint, proof, consistency), witness, chosen, receipt)
    witness.advance(verdict, chosen).save(path, witness)
    return verdict
