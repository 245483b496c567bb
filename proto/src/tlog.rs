//! The receipt log as a transparency log: the formats anyone needs to check it without
//! trusting the node that answers.
//!
//! - The tree is RFC 9162's Merkle tree: a leaf's hash is `SHA-256(0x00 || leaf)`, an inner
//!   node's `SHA-256(0x01 || left || right)`, and a tree of `n` leaves splits at the largest
//!   power of two below `n`. Inclusion and consistency proofs are RFC 9162's (§2.1.3, §2.1.4),
//!   which are also those of Go's `golang.org/x/mod/sumdb/tlog`.
//! - A leaf is a receipt's canonical encoding ([`receipt_leaf`]).
//! - A checkpoint is C2SP's tlog-checkpoint (origin, size, base64 root, one per line), signed
//!   as a C2SP signed note with one Ed25519 signature per node ([`sign_note`], [`open_note`]);
//!   keys are written as signed-note verifier keys ([`VerifierKey`]).
//!
//! Everything here is pure: the node builds proofs from its stored hashes, and `rowcall
//! verify` (or any other verifier) checks them with these functions.

use aws_lc_rs::signature::{Ed25519KeyPair, KeyPair as _, UnparsedPublicKey, ED25519};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use sha2::{Digest, Sha256};

/// A SHA-256 hash: a leaf's, a node's or a tree's.
pub type Hash = [u8; 32];

/// The hash of leaf `data` (RFC 9162 §2.1.1).
pub fn leaf_hash(data: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(data);
    h.finalize().into()
}

/// The hash of an inner node over `left` and `right` (RFC 9162 §2.1.1).
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// The hash of the empty tree.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// The largest power of two strictly below `n` (`n` ≥ 2): where a tree of `n` leaves splits.
pub fn split(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1 << (63 - (n - 1).leading_zeros())
}

/// Hash encoded as standard base64, as checkpoints write it.
pub fn encode_hash(hash: &Hash) -> String {
    B64.encode(hash)
}

/// A hash from standard base64.
pub fn decode_hash(text: &str) -> Result<Hash, TlogError> {
    let bytes = B64
        .decode(text.trim())
        .map_err(|_| TlogError::Format(format!("{text:?} is not base64")))?;
    bytes
        .try_into()
        .map_err(|_| TlogError::Format(format!("{text:?} is not a 32-byte hash")))
}

/// Why a proof, a checkpoint or a note did not check out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlogError {
    /// Something is not in the format it claims.
    Format(String),
    /// A proof does not lead to the root it should.
    Proof(String),
    /// A signature is missing, unknown or wrong.
    Signature(String),
}

impl std::fmt::Display for TlogError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Format(m) => write!(f, "malformed: {m}"),
            Self::Proof(m) => write!(f, "proof fails: {m}"),
            Self::Signature(m) => write!(f, "signature: {m}"),
        }
    }
}

impl std::error::Error for TlogError {}

/// Checks that the leaf `leaf` at `index` is in the tree of `size` leaves with `root`
/// (RFC 9162 §2.1.3.2).
pub fn verify_inclusion(
    index: u64,
    size: u64,
    leaf: &Hash,
    proof: &[Hash],
    root: &Hash,
) -> Result<(), TlogError> {
    if index >= size {
        return Err(TlogError::Proof(format!(
            "leaf {index} is not below the tree size {size}"
        )));
    }
    let (mut fn_, mut sn) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if sn == 0 {
            return Err(TlogError::Proof("the proof is too long".into()));
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = node_hash(p, &r);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err(TlogError::Proof("the proof is too short".into()));
    }
    if r != *root {
        return Err(TlogError::Proof(format!(
            "leaf {index} does not lead to the root of tree size {size}"
        )));
    }
    Ok(())
}

/// Checks that the tree of `old_size` with `old_root` is a prefix of the tree of `new_size`
/// with `new_root` (RFC 9162 §2.1.4.2).
pub fn verify_consistency(
    old_size: u64,
    new_size: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> Result<(), TlogError> {
    if old_size > new_size {
        return Err(TlogError::Proof(format!(
            "tree size {old_size} is larger than {new_size}"
        )));
    }
    if old_size == new_size {
        return if proof.is_empty() && old_root == new_root {
            Ok(())
        } else if old_root != new_root {
            Err(TlogError::Proof(format!(
                "two different roots for tree size {old_size}"
            )))
        } else {
            Err(TlogError::Proof(
                "a proof between equal sizes is empty".into(),
            ))
        };
    }
    if old_size == 0 {
        return if proof.is_empty() {
            Ok(())
        } else {
            Err(TlogError::Proof(
                "a proof from the empty tree is empty".into(),
            ))
        };
    }
    if proof.is_empty() {
        return Err(TlogError::Proof("the proof is empty".into()));
    }
    let mut path: Vec<Hash> = proof.to_vec();
    if old_size.is_power_of_two() {
        path.insert(0, *old_root);
    }
    let Some((first, rest)) = path.split_first() else {
        return Err(TlogError::Proof("the proof is empty".into()));
    };
    let (mut fn_, mut sn) = (old_size - 1, new_size - 1);
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    let (mut fr, mut sr) = (*first, *first);
    for c in rest {
        if sn == 0 {
            return Err(TlogError::Proof("the proof is too long".into()));
        }
        if fn_ & 1 == 1 || fn_ == sn {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err(TlogError::Proof("the proof is too short".into()));
    }
    if fr != *old_root {
        return Err(TlogError::Proof(format!(
            "the proof does not lead to the root of tree size {old_size}"
        )));
    }
    if sr != *new_root {
        return Err(TlogError::Proof(format!(
            "the proof does not lead to the root of tree size {new_size}"
        )));
    }
    Ok(())
}

/// The fields of a receipt that its leaf commits to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceiptLeaf<'a> {
    pub id: &'a str,
    pub key: &'a str,
    pub row_version: u64,
    pub caller: &'a str,
    pub started_at: &'a str,
    pub input_sha256: &'a str,
    pub output_sha256: &'a str,
    pub ok: bool,
    pub error: Option<&'a str>,
}

/// A receipt's canonical encoding, the data of its leaf: one line of JSON with these fields
/// in this order, strings escaped as JSON escapes them, no spaces:
/// `{"v":1,"id":…,"key":…,"row_version":…,"caller":…,"started_at":…,"input_sha256":…,
/// "output_sha256":…,"ok":…,"error":…}` (`error` is `null` when it succeeded).
pub fn receipt_leaf(r: &ReceiptLeaf<'_>) -> Vec<u8> {
    let s = |v: &str| serde_json::Value::from(v).to_string();
    let error = r.error.map_or_else(|| "null".to_owned(), s);
    format!(
        "{{\"v\":1,\"id\":{},\"key\":{},\"row_version\":{},\"caller\":{},\"started_at\":{},\
         \"input_sha256\":{},\"output_sha256\":{},\"ok\":{},\"error\":{}}}",
        s(r.id),
        s(r.key),
        r.row_version,
        s(r.caller),
        s(r.started_at),
        s(r.input_sha256),
        s(r.output_sha256),
        r.ok,
        error
    )
    .into_bytes()
}

/// A checkpoint: the tree of `size` leaves with `root`, of the log named `origin`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    pub origin: String,
    pub size: u64,
    pub root: Hash,
}

impl Checkpoint {
    /// The checkpoint's text, the body that signatures cover (C2SP tlog-checkpoint).
    pub fn body(&self) -> String {
        checkpoint_body(&self.origin, self.size, &encode_hash(&self.root))
    }

    /// Reads a checkpoint's text (extension lines after the third are ignored).
    pub fn parse(body: &str) -> Result<Self, TlogError> {
        let bad = |m: &str| TlogError::Format(format!("checkpoint: {m}"));
        let mut lines = body.split('\n');
        let origin = lines
            .next()
            .filter(|l| !l.is_empty())
            .ok_or_else(|| bad("no origin"))?;
        let size = lines
            .next()
            .and_then(|l| l.parse::<u64>().ok())
            .ok_or_else(|| bad("the second line is not a tree size"))?;
        let root = decode_hash(lines.next().ok_or_else(|| bad("no root"))?)?;
        Ok(Self {
            origin: origin.to_owned(),
            size,
            root,
        })
    }
}

/// A checkpoint's text from its origin, size and base64 root: one line each.
pub fn checkpoint_body(origin: &str, size: u64, root_base64: &str) -> String {
    format!("{origin}\n{size}\n{root_base64}\n")
}

/// The algorithm byte of an Ed25519 key in a signed note.
const ALG_ED25519: u8 = 1;

/// A signed-note verifier key: `name+hash+base64(0x01 || public key)`, where `hash` is the
/// first four bytes of `SHA-256(name || "\n" || 0x01 || public key)` in hex.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifierKey {
    pub name: String,
    pub public: [u8; 32],
}

fn valid_name(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(|c| c.is_whitespace() || c == '+')
}

impl VerifierKey {
    /// The key named `name` for the Ed25519 public key `public`.
    pub fn new(name: &str, public: [u8; 32]) -> Result<Self, TlogError> {
        if !valid_name(name) {
            return Err(TlogError::Format(format!(
                "key name {name:?} is empty or holds a space or '+'"
            )));
        }
        Ok(Self {
            name: name.to_owned(),
            public,
        })
    }

    /// The key's id: the first four bytes of `SHA-256(name || "\n" || 0x01 || key)`.
    pub fn id(&self) -> [u8; 4] {
        let mut h = Sha256::new();
        h.update(self.name.as_bytes());
        h.update(b"\n");
        h.update([ALG_ED25519]);
        h.update(self.public);
        let sum = h.finalize();
        [sum[0], sum[1], sum[2], sum[3]]
    }

    /// Reads `name+hash+base64` and checks its hash.
    pub fn parse(text: &str) -> Result<Self, TlogError> {
        let bad = |m: &str| TlogError::Format(format!("verifier key {text:?}: {m}"));
        let mut parts = text.trim().splitn(3, '+');
        let (Some(name), Some(hash), Some(data)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("not name+hash+key"));
        };
        let data = B64.decode(data).map_err(|_| bad("the key is not base64"))?;
        let (&alg, public) = data.split_first().ok_or_else(|| bad("empty key"))?;
        if alg != ALG_ED25519 {
            return Err(bad("not an Ed25519 key"));
        }
        let public: [u8; 32] = public.try_into().map_err(|_| bad("not 32 bytes"))?;
        let key = Self::new(name, public)?;
        if hash.len() != 8 || hex_lower(&key.id()) != hash.to_ascii_lowercase() {
            return Err(bad("its hash does not match its name and key"));
        }
        Ok(key)
    }

    /// Whether `signature` is this key's over `message`.
    pub fn verifies(&self, message: &[u8], signature: &[u8]) -> bool {
        UnparsedPublicKey::new(&ED25519, &self.public)
            .verify(message, signature)
            .is_ok()
    }
}

impl std::fmt::Display for VerifierKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut data = Vec::with_capacity(33);
        data.push(ALG_ED25519);
        data.extend_from_slice(&self.public);
        write!(
            f,
            "{}+{}+{}",
            self.name,
            hex_lower(&self.id()),
            B64.encode(data)
        )
    }
}

fn hex_lower(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An Ed25519 signing key with its note name.
pub struct SigningKey {
    pub name: String,
    pair: Ed25519KeyPair,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// The key of the 32-byte Ed25519 `seed`, named `name`.
    pub fn from_seed(name: &str, seed: &[u8; 32]) -> Result<Self, TlogError> {
        if !valid_name(name) {
            return Err(TlogError::Format(format!("key name {name:?} is not valid")));
        }
        let pair = Ed25519KeyPair::from_seed_unchecked(seed)
            .map_err(|e| TlogError::Format(format!("Ed25519 seed: {e}")))?;
        Ok(Self {
            name: name.to_owned(),
            pair,
        })
    }

    /// Its public half.
    pub fn public(&self) -> [u8; 32] {
        let mut public = [0u8; 32];
        public.copy_from_slice(self.pair.public_key().as_ref());
        public
    }

    /// Its verifier key.
    pub fn verifier(&self) -> VerifierKey {
        VerifierKey {
            name: self.name.clone(),
            public: self.public(),
        }
    }

    /// The Ed25519 signature of `message`.
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        let mut out = [0u8; 64];
        out.copy_from_slice(self.pair.sign(message).as_ref());
        out
    }
}

/// One signature line of a note: who (name and key id) and the signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteSignature {
    pub name: String,
    pub key_id: [u8; 4],
    pub signature: Vec<u8>,
}

impl NoteSignature {
    /// The signature line: `— name base64(key id || signature)`.
    pub fn line(&self) -> String {
        let mut data = self.key_id.to_vec();
        data.extend_from_slice(&self.signature);
        format!("\u{2014} {} {}\n", self.name, B64.encode(data))
    }
}

/// A note: `body`, a blank line, then the signature lines (C2SP signed-note).
pub fn sign_note(body: &str, signatures: &[NoteSignature]) -> String {
    let mut note = String::with_capacity(body.len() + 1 + signatures.len() * 120);
    note.push_str(body);
    note.push('\n');
    for s in signatures {
        note.push_str(&s.line());
    }
    note
}

/// Splits a signed note into its body and its signature lines.
pub fn open_note(note: &str) -> Result<(String, Vec<NoteSignature>), TlogError> {
    let bad = |m: &str| TlogError::Format(format!("note: {m}"));
    let split = note
        .rfind("\n\n")
        .ok_or_else(|| bad("no blank line before the signatures"))?;
    let body = &note[..=split];
    let mut signatures = Vec::new();
    for line in note[split + 2..].split_terminator('\n') {
        let rest = line
            .strip_prefix("\u{2014} ")
            .ok_or_else(|| bad("a signature line does not start with an em dash"))?;
        let (name, data) = rest
            .split_once(' ')
            .ok_or_else(|| bad("a signature line has no signature"))?;
        let data = B64
            .decode(data)
            .map_err(|_| bad("a signature is not base64"))?;
        if data.len() < 5 {
            return Err(bad("a signature is too short"));
        }
        signatures.push(NoteSignature {
            name: name.to_owned(),
            key_id: [data[0], data[1], data[2], data[3]],
            signature: data[4..].to_vec(),
        });
    }
    Ok((body.to_owned(), signatures))
}

/// The keys among `keys` that signed `note` (each counted once), with its body. Signatures
/// by keys not in `keys` are ignored; a signature by a listed key that does not verify is an
/// error (a note someone tampered with).
pub fn verified_signers<'k>(
    note: &str,
    keys: &'k [VerifierKey],
) -> Result<(String, Vec<&'k VerifierKey>), TlogError> {
    let (body, signatures) = open_note(note)?;
    let mut signers: Vec<&VerifierKey> = Vec::new();
    for s in &signatures {
        let Some(key) = keys.iter().find(|k| k.name == s.name && k.id() == s.key_id) else {
            continue;
        };
        if !key.verifies(body.as_bytes(), &s.signature) {
            return Err(TlogError::Signature(format!(
                "{}'s signature does not verify",
                key.name
            )));
        }
        if !signers.contains(&key) {
            signers.push(key);
        }
    }
    Ok((body, signers))
}

/// Reference computations over a whole list of leaf hashes (RFC 9162's recursive
/// definitions), for tests and small verifiers.
pub mod reference {
    use super::*;

    /// MTH(D[0:n]).
    pub fn root(leaves: &[Hash]) -> Hash {
        match leaves.len() {
            0 => empty_root(),
            1 => leaves[0],
            n => {
                let k = split(n as u64) as usize;
                node_hash(&root(&leaves[..k]), &root(&leaves[k..]))
            }
        }
    }

    /// PATH(m, D[0:n]).
    pub fn inclusion(m: usize, leaves: &[Hash]) -> Vec<Hash> {
        let n = leaves.len();
        if n <= 1 {
            return Vec::new();
        }
        let k = split(n as u64) as usize;
        if m < k {
            let mut p = inclusion(m, &leaves[..k]);
            p.push(root(&leaves[k..]));
            p
        } else {
            let mut p = inclusion(m - k, &leaves[k..]);
            p.push(root(&leaves[..k]));
            p
        }
    }

    /// PROOF(m, D[0:n]).
    pub fn consistency(m: usize, leaves: &[Hash]) -> Vec<Hash> {
        fn sub(m: usize, leaves: &[Hash], whole: bool) -> Vec<Hash> {
            let n = leaves.len();
            if m == n {
                return if whole {
                    Vec::new()
                } else {
                    vec![root(leaves)]
                };
            }
            let k = split(n as u64) as usize;
            if m <= k {
                let mut p = sub(m, &leaves[..k], whole);
                p.push(root(&leaves[k..]));
                p
            } else {
                let mut p = sub(m - k, &leaves[k..], false);
                p.push(root(&leaves[..k]));
                p
            }
        }
        if m == 0 || m == leaves.len() {
            return Vec::new();
        }
        sub(m, leaves, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaves(n: usize) -> Vec<Hash> {
        (0..n)
            .map(|i| leaf_hash(format!("leaf {i}").as_bytes()))
            .collect()
    }

    #[test]
    fn rfc_roots_of_small_trees() {
        // The empty tree and a one-leaf tree, as RFC 9162 defines them.
        assert_eq!(
            hex_lower(&empty_root()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let l = leaves(3);
        assert_eq!(reference::root(&l[..1]), l[0]);
        assert_eq!(
            reference::root(&l),
            node_hash(&node_hash(&l[0], &l[1]), &l[2])
        );
    }

    #[test]
    fn every_inclusion_proof_verifies_and_a_changed_one_does_not() {
        let all = leaves(40);
        for n in 1..=all.len() {
            let root = reference::root(&all[..n]);
            for m in 0..n {
                let proof = reference::inclusion(m, &all[..n]);
                verify_inclusion(m as u64, n as u64, &all[m], &proof, &root).unwrap();
                // Another leaf, another index or a cut proof fails.
                let other = all[(m + 1) % all.len()];
                assert!(verify_inclusion(m as u64, n as u64, &other, &proof, &root).is_err());
                if n > 1 {
                    let wrong = (m + 1) % n;
                    assert!(
                        verify_inclusion(wrong as u64, n as u64, &all[m], &proof, &root).is_err()
                    );
                    assert!(verify_inclusion(
                        m as u64,
                        n as u64,
                        &all[m],
                        &proof[..proof.len() - 1],
                        &root
                    )
                    .is_err());
                }
            }
        }
    }

    #[test]
    fn every_consistency_proof_verifies_and_a_fork_does_not() {
        let all = leaves(40);
        let mut forked = all.clone();
        forked[5] = leaf_hash(b"another leaf 5");
        for n in 1..=all.len() {
            let new_root = reference::root(&all[..n]);
            for m in 1..=n {
                let old_root = reference::root(&all[..m]);
                let proof = reference::consistency(m, &all[..n]);
                verify_consistency(m as u64, n as u64, &old_root, &new_root, &proof).unwrap();
                if m > 5 {
                    let forked_root = reference::root(&forked[..m]);
                    assert!(verify_consistency(
                        m as u64,
                        n as u64,
                        &forked_root,
                        &new_root,
                        &proof
                    )
                    .is_err());
                }
            }
        }
    }

    #[test]
    fn checkpoints_and_notes_round_trip_and_tampering_is_seen() {
        let key = SigningKey::from_seed("rowcall/test/node1", &[7; 32]).unwrap();
        let other = SigningKey::from_seed("rowcall/test/node2", &[8; 32]).unwrap();
        let checkpoint = Checkpoint {
            origin: "rowcall/test".into(),
            size: 12,
            root: leaf_hash(b"x"),
        };
        let body = checkpoint.body();
        assert_eq!(Checkpoint::parse(&body).unwrap(), checkpoint);
        let sign = |k: &SigningKey| NoteSignature {
            name: k.name.clone(),
            key_id: k.verifier().id(),
            signature: k.sign(body.as_bytes()).to_vec(),
        };
        let note = sign_note(&body, &[sign(&key), sign(&other)]);
        let keys = [key.verifier(), other.verifier()];
        let (read, signers) = verified_signers(&note, &keys).unwrap();
        assert_eq!(read, body);
        assert_eq!(signers.len(), 2);
        // Only the keys asked about count.
        assert_eq!(verified_signers(&note, &keys[..1]).unwrap().1.len(), 1);
        // An edited size breaks the signatures.
        let edited = note.replacen("\n12\n", "\n13\n", 1);
        assert!(matches!(
            verified_signers(&edited, &keys),
            Err(TlogError::Signature(_))
        ));
        // Keys print and parse in the signed-note form.
        let printed = key.verifier().to_string();
        assert!(printed.starts_with("rowcall/test/node1+"), "{printed}");
        assert_eq!(VerifierKey::parse(&printed).unwrap(), key.verifier());
        let mangled = printed.replacen("node1", "node3", 1);
        assert!(VerifierKey::parse(&mangled).is_err());
    }

    #[test]
    fn a_leaf_is_one_line_of_json_in_a_fixed_order() {
        let leaf = receipt_leaf(&ReceiptLeaf {
            id: "inv_0000000001",
            key: "ECHO",
            row_version: 3,
            caller: "public",
            started_at: "2026-12-01T00:00:00.000Z",
            input_sha256: "ab",
            output_sha256: "cd",
            ok: false,
            error: Some("it said \"no\""),
        });
        let text = String::from_utf8(leaf).unwrap();
        assert_eq!(
            text,
            "{\"v\":1,\"id\":\"inv_0000000001\",\"key\":\"ECHO\",\"row_version\":3,\
             \"caller\":\"public\",\"started_at\":\"2026-12-01T00:00:00.000Z\",\
             \"input_sha256\":\"ab\",\"output_sha256\":\"cd\",\"ok\":false,\
             \"error\":\"it said \\\"no\\\"\"}"
        );
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["error"], "it said \"no\"");
    }
}
