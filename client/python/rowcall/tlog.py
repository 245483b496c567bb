"""The receipt log as a transparency log: RFC 9162 Merkle proofs and C2SP signed-note
checkpoints, as ``proto/src/tlog.rs`` defines them. Everything here is pure.

- A leaf's hash is ``SHA-256(0x00 || leaf)``, an inner node's ``SHA-256(0x01 || l || r)``.
- A leaf is a receipt's canonical encoding (:func:`receipt_leaf`).
- A checkpoint is origin, size and base64 root, one per line, signed as a C2SP note with
  one Ed25519 signature per node; keys are signed-note verifier keys
  (``name+hash+base64(0x01 || key)``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

#: The algorithm byte of an Ed25519 key in a signed note.
ALG_ED25519 = 1


class TlogError(Exception):
    """A proof, a checkpoint or a note did not check out. ``kind`` is ``format``,
    ``proof`` or ``signature``."""

    def __init__(self, kind: str, message: str) -> None:
        prefix = {"format": "malformed", "proof": "proof fails", "signature": "signature"}[kind]
        super().__init__(f"{prefix}: {message}")
        self.kind = kind


def leaf_hash(data: bytes) -> bytes:
    """The hash of leaf ``data`` (RFC 9162 §2.1.1)."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The hash of an inner node over ``left`` and ``right``."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def encode_hash(h: bytes) -> str:
    return base64.b64encode(h).decode()


def decode_hash(text: str) -> bytes:
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError) as e:
        raise TlogError("format", f"{text!r} is not base64") from e
    if len(raw) != 32:
        raise TlogError("format", f"{text!r} is not a 32-byte hash")
    return raw


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Checks that ``leaf`` at ``index`` is in the tree of ``size`` leaves with ``root``
    (RFC 9162 §2.1.3.2)."""
    if index >= size:
        raise TlogError("proof", f"leaf {index} is not below the tree size {size}")
    fn, sn = index, size - 1
    r = leaf
    for p in proof:
        if sn == 0:
            raise TlogError("proof", "the proof is too long")
        if fn & 1 == 1 or fn == sn:
            r = node_hash(p, r)
            if fn & 1 == 0:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise TlogError("proof", "the proof is too short")
    if r != root:
        raise TlogError("proof", f"leaf {index} does not lead to the root of tree size {size}")


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """Checks that the tree of ``old_size`` is a prefix of the tree of ``new_size``
    (RFC 9162 §2.1.4.2)."""
    if old_size > new_size:
        raise TlogError("proof", f"tree size {old_size} is larger than {new_size}")
    if old_size == new_size:
        if old_root != new_root:
            raise TlogError("proof", f"two different roots for tree size {old_size}")
        if proof:
            raise TlogError("proof", "a proof between equal sizes is empty")
        return
    if old_size == 0:
        if proof:
            raise TlogError("proof", "a proof from the empty tree is empty")
        return
    if not proof:
        raise TlogError("proof", "the proof is empty")
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    first, rest = path[0], path[1:]
    fn, sn = old_size - 1, new_size - 1
    while fn & 1 == 1:
        fn >>= 1
        sn >>= 1
    fr = sr = first
    for c in rest:
        if sn == 0:
            raise TlogError("proof", "the proof is too long")
        if fn & 1 == 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if fn & 1 == 0:
                while fn & 1 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise TlogError("proof", "the proof is too short")
    if fr != old_root:
        raise TlogError("proof", f"the proof does not lead to the root of tree size {old_size}")
    if sr != new_root:
        raise TlogError("proof", f"the proof does not lead to the root of tree size {new_size}")


def _s(text: str) -> str:
    # serde_json's string form: UTF-8 as is, quotes, backslashes and controls escaped.
    return json.dumps(text, ensure_ascii=False)


def receipt_leaf(
    *,
    id: str,
    key: str,
    row_version: int,
    caller: str,
    started_at: str,
    input_sha256: str,
    output_sha256: str,
    ok: bool,
    error: str | None,
) -> bytes:
    """A receipt's canonical encoding, the data of its leaf: one line of JSON with the
    fields in a fixed order, no spaces (``error`` is ``null`` when it succeeded)."""
    err = "null" if error is None else _s(error)
    text = (
        f'{{"v":1,"id":{_s(id)},"key":{_s(key)},"row_version":{row_version},'
        f'"caller":{_s(caller)},"started_at":{_s(started_at)},'
        f'"input_sha256":{_s(input_sha256)},"output_sha256":{_s(output_sha256)},'
        f'"ok":{"true" if ok else "false"},"error":{err}}}'
    )
    return text.encode()


@dataclass(frozen=True)
class Checkpoint:
    """The tree of ``size`` leaves with ``root``, of the log named ``origin``."""

    origin: str
    size: int
    root: bytes

    def body(self) -> str:
        return f"{self.origin}\n{self.size}\n{encode_hash(self.root)}\n"

    @classmethod
    def parse(cls, body: str) -> Checkpoint:
        lines = body.split("\n")
        if not lines or not lines[0]:
            raise TlogError("format", "checkpoint: no origin")
        if len(lines) < 2 or not lines[1].isdigit():
            raise TlogError("format", "checkpoint: the second line is not a tree size")
        if len(lines) < 3:
            raise TlogError("format", "checkpoint: no root")
        return cls(lines[0], int(lines[1]), decode_hash(lines[2]))


def _valid_name(name: str) -> bool:
    return bool(name) and not any(c.isspace() or c == "+" for c in name)


@dataclass(frozen=True)
class VerifierKey:
    """A signed-note verifier key: its name and its Ed25519 public key."""

    name: str
    public: bytes

    def id(self) -> bytes:
        """The key's id: the first four bytes of ``SHA-256(name || "\\n" || 0x01 || key)``."""
        return hashlib.sha256(
            self.name.encode() + b"\n" + bytes([ALG_ED25519]) + self.public
        ).digest()[:4]

    @classmethod
    def parse(cls, text: str) -> VerifierKey:
        """Reads ``name+hash+base64`` and checks its hash."""
        parts = text.strip().split("+", 2)
        if len(parts) != 3:
            raise TlogError("format", f"verifier key {text!r}: not name+hash+key")
        name, hash_hex, data_b64 = parts
        try:
            data = base64.b64decode(data_b64, validate=True)
        except (binascii.Error, ValueError) as e:
            raise TlogError("format", f"verifier key {text!r}: the key is not base64") from e
        if not data:
            raise TlogError("format", f"verifier key {text!r}: empty key")
        if data[0] != ALG_ED25519:
            raise TlogError("format", f"verifier key {text!r}: not an Ed25519 key")
        if len(data) != 33:
            raise TlogError("format", f"verifier key {text!r}: not 32 bytes")
        if not _valid_name(name):
            raise TlogError("format", f"key name {name!r} is empty or holds a space or '+'")
        key = cls(name, data[1:])
        if len(hash_hex) != 8 or key.id().hex() != hash_hex.lower():
            raise TlogError(
                "format", f"verifier key {text!r}: its hash does not match its name and key"
            )
        return key

    def verifies(self, message: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True

    def __str__(self) -> str:
        data = base64.b64encode(bytes([ALG_ED25519]) + self.public).decode()
        return f"{self.name}+{self.id().hex()}+{data}"


@dataclass(frozen=True)
class NoteSignature:
    """One signature line of a note."""

    name: str
    key_id: bytes
    signature: bytes


def open_note(note: str) -> tuple[str, list[NoteSignature]]:
    """Splits a signed note into its body and its signature lines."""
    split = note.rfind("\n\n")
    if split < 0:
        raise TlogError("format", "note: no blank line before the signatures")
    body = note[: split + 1]
    signatures = []
    for line in note[split + 2 :].split("\n"):
        if not line:
            continue
        if not line.startswith("\u2014 "):
            raise TlogError("format", "note: a signature line does not start with an em dash")
        name, sep, data_b64 = line[2:].partition(" ")
        if not sep:
            raise TlogError("format", "note: a signature line has no signature")
        try:
            data = base64.b64decode(data_b64, validate=True)
        except (binascii.Error, ValueError) as e:
            raise TlogError("format", "note: a signature is not base64") from e
        if len(data) < 5:
            raise TlogError("format", "note: a signature is too short")
        signatures.append(NoteSignature(name, data[:4], data[4:]))
    return body, signatures


def verified_signers(note: str, keys: Sequence[VerifierKey]) -> tuple[str, list[VerifierKey]]:
    """The keys among ``keys`` that signed ``note`` (each once), with its body. Signatures
    by other keys are ignored; a bad signature by a listed key is an error."""
    body, signatures = open_note(note)
    signers: list[VerifierKey] = []
    for s in signatures:
        key = next((k for k in keys if k.name == s.name and k.id() == s.key_id), None)
        if key is None:
            continue
        if not key.verifies(body.encode(), s.signature):
            raise TlogError("signature", f"{key.name}'s signature does not verify")
        if key not in signers:
            signers.append(key)
    return body, signers
