// The rowcall operator console. Everything goes through this node's public API with the
// key from session storage in an Authorization header: no cookie, so no request a foreign
// page makes from this browser carries the key (nothing to forge), and the key is gone
// when the tab closes. Untrusted text is set with textContent only, never as HTML.
"use strict";

const KEY = "rowcall-key";
const $ = (id) => document.getElementById(id);
const state = { cursor: null, admin: false, row: null, modes: null };

function key() { return sessionStorage.getItem(KEY); }

function say(text, error) {
  const s = $("status");
  s.textContent = text || "";
  s.className = error ? "error" : "";
}

async function api(path, options) {
  const opts = Object.assign({ headers: {} }, options || {});
  const k = key();
  if (k) opts.headers["Authorization"] = "Bearer " + k;
  if (opts.body && typeof opts.body !== "string") {
    opts.body = JSON.stringify(opts.body);
    opts.headers["Content-Type"] = "application/json";
  }
  opts.credentials = "omit";
  const response = await fetch(path, opts);
  const index = response.headers.get("x-rowcall-index");
  if (index) sessionStorage.setItem("rowcall-min-index", index);
  let body = null;
  try { body = await response.json(); } catch (_) { body = null; }
  if (!response.ok) {
    const e = (body && body.error) || {};
    const err = new Error((e.message || response.statusText) + (e.hint ? " (" + e.hint + ")" : ""));
    err.status = response.status;
    throw err;
  }
  return body;
}

function cell(tr, text) {
  const td = document.createElement("td");
  td.textContent = text === undefined || text === null ? "" : String(text);
  tr.appendChild(td);
  return td;
}

function link(td, text, hash) {
  td.textContent = "";
  const a = document.createElement("a");
  a.href = hash;
  a.textContent = text;
  td.appendChild(a);
}

function show(id) {
  for (const s of document.querySelectorAll("main > section")) s.hidden = s.id !== id;
}

// ---- login ----

async function login(k) {
  sessionStorage.setItem(KEY, k);
  try {
    // Only the admin key reads forensic receipts: a 401/403 there means a read-only view.
    await api("/api/receipts?key=__console_probe__&limit=1");
    state.admin = true;
  } catch (e) {
    if (e.status === 401 || e.status === 403) state.admin = false;
    else { say(e.message, true); return; }
  }
  enter();
}

function enter() {
  const signed = key() !== null;
  $("nav").hidden = false;
  $("who").textContent = !signed ? "anonymous" : state.admin ? "admin" : "read-only";
  document.body.classList.toggle("readonly", !state.admin);
  route();
}

function logout() {
  sessionStorage.clear();
  state.admin = false;
  $("nav").hidden = true;
  location.hash = "";
  show("login");
}

// ---- catalogue ----

function matches(row) {
  const text = $("f-text").value.trim().toLowerCase();
  const type = $("f-type").value, auth = $("f-auth").value, enabled = $("f-enabled").value;
  if (type && row.type !== type) return false;
  if (auth && row.auth !== auth) return false;
  if (enabled && String(row.enabled) !== enabled) return false;
  if (text && !((row.key || "") + " " + (row.content || "") + " " + (row.category || "")).toLowerCase().includes(text)) return false;
  return true;
}

async function listRows(fresh) {
  const body = $("rows").tBodies[0];
  if (fresh) { body.textContent = ""; state.cursor = null; }
  const q = new URLSearchParams({ limit: "100" });
  const category = $("f-category").value.trim();
  if (category) q.set("category", category);
  if (state.cursor) q.set("cursor", state.cursor);
  const min = sessionStorage.getItem("rowcall-min-index");
  if (min) q.set("min_index", min);
  try {
    const page = await api("/api/directory?" + q);
    for (const row of page.rows.filter(matches)) {
      const tr = document.createElement("tr");
      link(cell(tr), row.key, "#row/" + encodeURIComponent(row.key));
      cell(tr, row.type); cell(tr, row.category); cell(tr, row.auth);
      cell(tr, row.enabled ? "yes" : "no"); cell(tr, row.version);
      body.appendChild(tr);
    }
    state.cursor = page.next_cursor || null;
    $("more").hidden = !state.cursor;
    const counts = await api("/api/directory/counts");
    $("counts").textContent = Object.entries(counts).map(([k, v]) => k + ": " + v).join(", ");
    say("");
  } catch (e) { say(e.message, true); }
}

// ---- one row ----

async function openRow(k) {
  show("row");
  $("row-title").textContent = k || "New row";
  $("row-contract").textContent = "";
  $("row-receipts").tBodies[0].textContent = "";
  const fields = { key: "", type: "http", target: "", category: "", content: "", auth: "public", risk: "read", enabled: true, args_schema: null, version: "" };
  let row = fields;
  if (k) {
    const min = sessionStorage.getItem("rowcall-min-index") || "0";
    try {
      row = await api("/api/directory/" + encodeURIComponent(k) + "?min_index=" + min);
      const contract = await api("/api/dispatch?key=" + encodeURIComponent(k));
      $("row-contract").textContent = JSON.stringify(contract, null, 2);
    } catch (e) { say(e.message, true); return; }
    if (state.admin) {
      try {
        const r = await api("/api/receipts?limit=20&key=" + encodeURIComponent(k));
        for (const receipt of r.receipts) {
          const tr = document.createElement("tr");
          link(cell(tr), receipt.id, "#receipts/" + encodeURIComponent(receipt.id));
          cell(tr, receipt.started_at); cell(tr, receipt.ok ? "succeeded" : "failed");
          $("row-receipts").tBodies[0].appendChild(tr);
        }
      } catch (e) { say(e.message, true); }
    }
  }
  state.row = row;
  $("e-key").value = row.key || ""; $("e-key").readOnly = !!k;
  $("e-type").value = row.type || "http";
  $("e-target").value = row.target || "";
  $("e-category").value = row.category || "";
  $("e-content").value = row.content || "";
  $("e-auth").value = row.auth || "public";
  $("e-risk").value = row.risk || "read";
  $("e-enabled").checked = row.enabled !== false;
  $("e-schema").value = row.args_schema ? JSON.stringify(row.args_schema, null, 2) : "";
  $("e-version").value = row.version === undefined ? "" : String(row.version);
  $("delete").hidden = !k;
  say("");
}

async function save(event) {
  event.preventDefault();
  const form = $("edit");
  if (!form.reportValidity()) return;
  let schema = null;
  const text = $("e-schema").value.trim();
  if (text) {
    try { schema = JSON.parse(text); } catch (e) { say("Arguments schema is not JSON: " + e.message, true); return; }
    if (typeof schema !== "object" || Array.isArray(schema) || schema === null) { say("Arguments schema must be a JSON object", true); return; }
  }
  const old = state.row || {};
  const body = {
    key: $("e-key").value.trim(), type: $("e-type").value, target: $("e-target").value,
    category: $("e-category").value, content: $("e-content").value, auth: $("e-auth").value,
    risk: $("e-risk").value, enabled: $("e-enabled").checked,
    planner_visible: old.planner_visible !== false, demote: !!old.demote,
  };
  if (old.pins && old.pins.length) body.pins = old.pins;
  if (schema) body.args_schema = schema;
  const version = $("e-version").value;
  // Conditional write: the version this form was loaded at. A new row must not exist yet.
  body.if_version = version === "" ? 0 : Number(version);
  try {
    const answer = await api("/api/directory", { method: "POST", body, headers: { "Idempotency-Key": crypto.randomUUID() } });
    say("Saved " + answer.key + " at version " + answer.version);
    location.hash = "#row/" + encodeURIComponent(answer.key);
    await openRow(answer.key);
    say("Saved " + answer.key + " at version " + answer.version);
  } catch (e) {
    if (e.status === 409) say("Someone else changed this row since you opened it: reload it and edit again. " + e.message, true);
    else say(e.message, true);
  }
}

async function remove() {
  const k = $("e-key").value;
  if (!confirm("Delete " + k + "? Its receipts stay.")) return;
  try {
    await api("/api/directory/" + encodeURIComponent(k) + "?if_version=" + $("e-version").value, { method: "DELETE", headers: { "Idempotency-Key": crypto.randomUUID() } });
    location.hash = "#catalogue";
    say("Deleted " + k);
  } catch (e) { say(e.status === 409 ? "Someone else changed this row since you opened it: " + e.message : e.message, true); }
}

// ---- ask ----

// With a model the node ranks by words, by meaning and by both: the three rankings side by
// side show why a row wins. A words-only node has one ranking.
async function ask(event) {
  event.preventDefault();
  const out = $("rankings");
  out.textContent = "";
  try {
    // How the node ranks changes only when it restarts: asked once per page.
    if (!state.modes) {
      const status = await api("/api/cluster");
      state.modes = status.resolver && status.resolver.mode === "hybrid" ? ["lexical", "dense", "fused"] : [""];
    }
    const modes = state.modes;
    $("ask-modes-note").textContent = modes.length > 1
      ? "This node ranks by words and meaning: words alone, meaning alone, and both fused (what agents get)."
      : "This node ranks by words (no model configured).";
    const answers = await Promise.all(modes.map((mode) => {
      const q = new URLSearchParams({ ask: $("ask-text").value, limit: "10" });
      if (mode) q.set("mode", mode);
      return api("/api/dispatch?" + q);
    }));
    answers.forEach((answer, m) => out.appendChild(rankingTable(modes[m] || "ranking", answer)));
    say(answers[answers.length - 1].candidates.length + " candidates");
  } catch (e) { say(e.message, true); }
}

function rankingTable(mode, answer) {
  const figure = document.createElement("figure");
  const caption = document.createElement("figcaption");
  caption.textContent = mode;
  figure.appendChild(caption);
  const table = document.createElement("table");
  const head = table.createTHead().insertRow();
  for (const h of ["#", "Key", "Score", "Why", ""]) {
    const th = document.createElement("th");
    th.textContent = h;
    head.appendChild(th);
  }
  const body = table.createTBody();
  answer.candidates.forEach((c, i) => {
    const tr = body.insertRow();
    cell(tr, i + 1);
    link(cell(tr), c.key, "#row/" + encodeURIComponent(c.key));
    cell(tr, Number(c.score).toFixed(4));
    cell(tr, (c.why || []).join("; "));
    const run = document.createElement("button");
    run.type = "button";
    run.textContent = "Run";
    run.setAttribute("aria-label", "Run " + c.key + " if it only reads");
    run.addEventListener("click", () => runReadOnly(c.key));
    cell(tr).appendChild(run);
  });
  figure.appendChild(table);
  return figure;
}

// Runs a row from the playground only when its risk is `read`: anything that writes is
// run deliberately, from its contract, not by a click beside a ranking.
async function runReadOnly(k) {
  $("run-title").hidden = false;
  const out = $("run-out");
  out.hidden = false;
  out.textContent = "";
  try {
    const contract = await api("/api/dispatch?key=" + encodeURIComponent(k));
    if (contract.risk !== "read") {
      say(k + " is not read-only (risk " + contract.risk + "): open its contract to run it.", true);
      return;
    }
    const answer = await api("/api/dispatch", { method: "POST", body: { key: k } });
    out.textContent = JSON.stringify(answer, null, 2);
    say("Ran " + k + (answer.proof ? ", receipt " + answer.proof.invocation_id : ""));
  } catch (e) { say(e.message, true); }
}

// ---- receipts ----

async function confirmReceipt(id) {
  $("receipt-id").value = id;
  $("verification").hidden = true;
  try {
    const answer = await api("/api/dispatch?confirm=" + encodeURIComponent(id));
    $("receipt-out").textContent = JSON.stringify(answer, null, 2);
    say(answer.confirmed === false ? "Not confirmed" : "Confirmed");
  } catch (e) { $("receipt-out").textContent = ""; say(e.message, true); }
}

// ---- verifying a receipt here, trusting no node (the checks of `rowcall verify`) ----
//
// The leaf names the receipt and hashes to the leaf hash; the RFC 9162 inclusion path leads
// from it to the root of a checkpoint; the checkpoint's signed note says that origin, size
// and root, with valid Ed25519 signatures of a strict majority of the voter keys (pinned in
// this browser, or as the node lists them until pinned); and the log only grew since the
// checkpoint this browser saw last (a consistency proof), never forked. Hashes and
// signatures are WebCrypto's: a secure context (HTTPS, or this machine) is needed.

const WITNESS = "rowcall-witness";

function witness() {
  try { return JSON.parse(localStorage.getItem(WITNESS)) || {}; } catch (_) { return {}; }
}

function fromB64(text) {
  let raw;
  try { raw = atob(String(text).trim()); } catch (_) { throw new Error(JSON.stringify(text) + " is not base64"); }
  return Uint8Array.from(raw, (c) => c.charCodeAt(0));
}

function toB64(bytes) { return btoa(String.fromCharCode(...bytes)); }

function bytesOf(...parts) {
  const list = parts.map((p) => (typeof p === "string" ? new TextEncoder().encode(p) : Uint8Array.from(p)));
  const out = new Uint8Array(list.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of list) { out.set(p, at); at += p.length; }
  return out;
}

function equal(a, b) { return a.length === b.length && a.every((x, i) => x === b[i]); }

async function sha256(bytes) { return new Uint8Array(await crypto.subtle.digest("SHA-256", bytes)); }
function leafHash(data) { return sha256(bytesOf([0], data)); }
function nodeHash(left, right) { return sha256(bytesOf([1], left, right)); }

function hash32(what, text) {
  const h = fromB64(text);
  if (h.length !== 32) throw new Error(what + " is not a 32-byte hash");
  return h;
}

// RFC 9162 §2.1.3.2. Sizes as BigInt: JavaScript's bit operators stop at 32 bits.
async function verifyInclusion(index, size, leaf, path, root) {
  let fn = BigInt(index), sn = BigInt(size) - 1n;
  if (fn > sn) throw new Error("leaf " + index + " is not below the tree size " + size);
  let r = leaf;
  for (const p of path) {
    if (sn === 0n) throw new Error("the inclusion proof is too long");
    if ((fn & 1n) === 1n || fn === sn) {
      r = await nodeHash(p, r);
      if ((fn & 1n) === 0n) while ((fn & 1n) === 0n && fn !== 0n) { fn >>= 1n; sn >>= 1n; }
    } else {
      r = await nodeHash(r, p);
    }
    fn >>= 1n; sn >>= 1n;
  }
  if (sn !== 0n) throw new Error("the inclusion proof is too short");
  if (!equal(r, root)) throw new Error("leaf " + index + " does not lead to the root of tree size " + size);
}

// RFC 9162 §2.1.4.2: the tree of oldSize leaves is a prefix of the tree of newSize.
async function verifyConsistency(oldSize, newSize, oldRoot, newRoot, proof) {
  if (oldSize > newSize) throw new Error("tree size " + oldSize + " is larger than " + newSize);
  if (oldSize === newSize) {
    if (!equal(oldRoot, newRoot)) throw new Error("two different roots for tree size " + oldSize);
    if (proof.length) throw new Error("a proof between equal sizes is empty");
    return;
  }
  if (oldSize === 0) { if (proof.length) throw new Error("a proof from the empty tree is empty"); return; }
  if (!proof.length) throw new Error("the consistency proof is empty");
  const old = BigInt(oldSize);
  const path = (old & (old - 1n)) === 0n ? [oldRoot, ...proof] : proof.slice();
  let fn = old - 1n, sn = BigInt(newSize) - 1n;
  while ((fn & 1n) === 1n) { fn >>= 1n; sn >>= 1n; }
  let fr = path[0], sr = path[0];
  for (const c of path.slice(1)) {
    if (sn === 0n) throw new Error("the consistency proof is too long");
    if ((fn & 1n) === 1n || fn === sn) {
      fr = await nodeHash(c, fr);
      sr = await nodeHash(c, sr);
      if ((fn & 1n) === 0n) while ((fn & 1n) === 0n && fn !== 0n) { fn >>= 1n; sn >>= 1n; }
    } else {
      sr = await nodeHash(sr, c);
    }
    fn >>= 1n; sn >>= 1n;
  }
  if (sn !== 0n) throw new Error("the consistency proof is too short");
  if (!equal(fr, oldRoot)) throw new Error("the proof does not lead to the root of tree size " + oldSize);
  if (!equal(sr, newRoot)) throw new Error("the proof does not lead to the root of tree size " + newSize);
}

// A signed-note verifier key, `name+hash+base64(0x01 || Ed25519 public key)`, whose hash
// (the key id) is the first four bytes of SHA-256(name || "\n" || 0x01 || key).
async function parseKey(text) {
  const parts = String(text).trim().split("+");
  if (parts.length < 3) throw new Error("verifier key " + JSON.stringify(text) + " is not name+hash+key");
  const [name, hex] = parts;
  const data = fromB64(parts.slice(2).join("+"));
  if (data.length !== 33 || data[0] !== 1) throw new Error("verifier key " + name + " is not an Ed25519 key");
  const id = (await sha256(bytesOf(name + "\n", data))).slice(0, 4);
  const idHex = Array.from(id, (b) => b.toString(16).padStart(2, "0")).join("");
  if (hex.toLowerCase() !== idHex) throw new Error("verifier key " + name + ": its hash does not match its name and key");
  return { name, id, public: data.slice(1), text: String(text).trim() };
}

// The note's body and signature lines (C2SP signed-note).
function openNote(note) {
  const split = note.lastIndexOf("\n\n");
  if (split < 0) throw new Error("the note has no blank line before its signatures");
  const body = note.slice(0, split + 1);
  const signatures = note.slice(split + 2).split("\n").filter((l) => l !== "").map((line) => {
    if (!line.startsWith("\u2014 ")) throw new Error("a signature line does not start with an em dash");
    const [name, data] = line.slice(2).split(" ");
    const raw = fromB64(data || "");
    if (raw.length < 5) throw new Error("a signature is too short");
    return { name, id: raw.slice(0, 4), signature: raw.slice(4) };
  });
  return { body, signatures };
}

// The keys among `keys` that signed the note; a listed key's bad signature is an error.
async function verifiedSigners(note, keys) {
  const { body, signatures } = openNote(note);
  const signers = [];
  for (const s of signatures) {
    const key = keys.find((k) => k.name === s.name && equal(k.id, s.id));
    if (!key) continue;
    const publicKey = await crypto.subtle.importKey("raw", key.public, { name: "Ed25519" }, false, ["verify"]);
    if (!(await crypto.subtle.verify({ name: "Ed25519" }, publicKey, s.signature, new TextEncoder().encode(body)))) {
      throw new Error(key.name + "'s signature does not verify");
    }
    if (!signers.includes(key)) signers.push(key);
  }
  return { body, signers };
}

// Verifies receipt `id`; returns what was checked, or throws at the first check that fails.
async function verifyReceipt(id) {
  if (!window.crypto || !crypto.subtle) {
    throw new Error("verifying needs a secure context (HTTPS, or a node on this machine): use `rowcall verify " + id + "`");
  }
  const steps = [];
  const proof = await api("/api/receipts/proof?id=" + encodeURIComponent(id));
  const checkpoint = proof.checkpoint || await api("/api/receipts/checkpoint");
  // The leaf: this receipt's, hashing to the leaf hash.
  if (proof.id !== id) throw new Error("the proof is for " + proof.id + ", not " + id);
  const leafH = hash32("the leaf hash", proof.leaf_hash);
  if (proof.leaf) {
    if (!equal(await leafHash(new TextEncoder().encode(proof.leaf)), leafH)) throw new Error("leaf " + proof.leaf_index + " does not hash to its leaf hash");
    let named;
    try { named = JSON.parse(proof.leaf).id; } catch (_) { throw new Error("the leaf is not JSON"); }
    if (named !== id) throw new Error("the leaf is receipt " + named + ", not " + id);
    steps.push("the leaf is receipt " + id + " and hashes to its leaf hash");
  } else if (proof.body_dropped) {
    steps.push("retention dropped the receipt's body; its leaf hash stays");
  } else {
    throw new Error("no leaf, and retention did not drop its body");
  }
  const root = hash32("the root", proof.root);
  await verifyInclusion(proof.leaf_index, proof.tree_size, leafH, proof.path.map((h) => hash32("a path hash", h)), root);
  steps.push("its inclusion path leads from leaf " + proof.leaf_index + " to the root of tree size " + proof.tree_size);
  if (checkpoint.size !== proof.tree_size || checkpoint.root !== proof.root) {
    throw new Error("the proof is against tree size " + proof.tree_size + ", the checkpoint is of size " + checkpoint.size);
  }
  // The checkpoint: its note says what its fields say, signed by a majority of the keys.
  const seen = witness();
  if (seen.origin && seen.origin !== checkpoint.origin) throw new Error("the checkpoint is of " + checkpoint.origin + ", this browser pinned " + seen.origin);
  let keys, from;
  if (seen.keys && seen.keys.length) {
    keys = await Promise.all(seen.keys.map(parseKey));
    from = "pinned in this browser";
  } else {
    // Node keys are named "<origin>/node<ID>": only the voters' count.
    const voters = checkpoint.voters.map((v) => checkpoint.origin + "/node" + v);
    keys = (await Promise.all(checkpoint.keys.map(parseKey))).filter((k) => voters.includes(k.name));
    from = "as this node lists them (pin them to trust no node)";
  }
  if (!keys.length) throw new Error("no voter keys to check the checkpoint against");
  const { body, signers } = await verifiedSigners(checkpoint.note, keys);
  if (body !== checkpoint.origin + "\n" + checkpoint.size + "\n" + checkpoint.root + "\n") {
    throw new Error("the checkpoint's note signs something else than its fields say");
  }
  if (signers.length * 2 <= keys.length) {
    throw new Error("the checkpoint of size " + checkpoint.size + " is signed by " + signers.length + " of " + keys.length + " voter keys: not a majority");
  }
  steps.push("the checkpoint (" + checkpoint.origin + ", size " + checkpoint.size + ") is signed by " + signers.length + " of " + keys.length + " voter keys");
  // History: the log only grew since the checkpoint this browser saw last.
  const last = seen.seen;
  if (last && last.origin === checkpoint.origin) {
    if (last.size === checkpoint.size) {
      if (last.root !== checkpoint.root) throw new Error("two co-signed roots for tree size " + last.size + ": the log forked");
      steps.push("it is the checkpoint this browser saw before");
    } else {
      const [small, large] = last.size < checkpoint.size ? [last, checkpoint] : [checkpoint, last];
      const c = await api("/api/receipts/consistency?from=" + small.size + "&to=" + large.size);
      await verifyConsistency(small.size, large.size, hash32("a root", small.root), hash32("a root", large.root), c.path.map((h) => hash32("a consistency hash", h)));
      steps.push("the log of size " + large.size + " extends the checkpoint of size " + small.size + (small === last ? " this browser saw before" : ""));
    }
  } else {
    steps.push("the first checkpoint this browser sees of " + checkpoint.origin);
  }
  if (!last || checkpoint.size >= last.size) {
    seen.seen = { origin: checkpoint.origin, size: checkpoint.size, root: checkpoint.root };
  }
  localStorage.setItem(WITNESS, JSON.stringify(seen));
  return { steps, keys, signers, from, pinned: !!(seen.keys && seen.keys.length), checkpoint };
}

async function verifyShown() {
  const id = $("receipt-id").value.trim();
  if (!id) return;
  const steps = $("verify-steps"), signersBody = $("signers").tBodies[0];
  steps.textContent = "";
  signersBody.textContent = "";
  $("verification").hidden = false;
  $("pin-keys").hidden = true;
  try {
    const report = await verifyReceipt(id);
    for (const step of report.steps) {
      const li = document.createElement("li");
      li.textContent = "\u2713 " + step;
      steps.appendChild(li);
    }
    for (const k of report.keys) {
      const tr = signersBody.insertRow();
      cell(tr, k.name);
      cell(tr, report.signers.includes(k) ? "yes" : "no");
    }
    $("keys-origin").textContent = "Voter keys " + report.from + ".";
    state.nodeKeys = report.pinned ? null : report.keys.map((k) => k.text);
    state.origin = report.checkpoint.origin;
    $("pin-keys").hidden = report.pinned;
    $("unpin-keys").hidden = !report.pinned;
    say("Verified " + id + " in this browser");
  } catch (e) {
    const li = document.createElement("li");
    li.textContent = "\u2717 " + e.message;
    steps.appendChild(li);
    say("Not verified: " + e.message, true);
  }
}

function pinKeys() {
  if (!state.nodeKeys) return;
  const seen = witness();
  seen.keys = state.nodeKeys;
  seen.origin = state.origin;
  localStorage.setItem(WITNESS, JSON.stringify(seen));
  $("pin-keys").hidden = true;
  $("unpin-keys").hidden = false;
  $("keys-origin").textContent = "Voter keys pinned in this browser: later checkpoints must carry their signatures.";
}

function unpinKeys() {
  localStorage.removeItem(WITNESS);
  $("unpin-keys").hidden = true;
  $("keys-origin").textContent = "Pinned keys and the remembered checkpoint forgotten.";
}

// ---- import ----

async function importMcp(event) {
  event.preventDefault();
  if (!$("import-form").reportValidity()) return;
  const body = { url: $("i-url").value.trim() };
  if ($("i-prefix").value.trim()) body.prefix = $("i-prefix").value.trim();
  if ($("i-category").value.trim()) body.category = $("i-category").value.trim();
  const out = $("import-out");
  try {
    say("Importing from " + body.url + "...");
    const report = await api("/api/directory/import-mcp", { method: "POST", body, headers: { "Idempotency-Key": crypto.randomUUID() } });
    out.hidden = false;
    out.textContent = JSON.stringify(report, null, 2);
    say("Imported " + report.tools + " tools: " + report.added.length + " added, " + report.changed.length + " changed, " + report.removed.length + " disabled");
    listRows(true);
  } catch (e) { say(e.message, true); }
}

// ---- cluster ----

async function cluster() {
  const body = $("members").tBodies[0];
  body.textContent = "";
  try {
    const s = await api("/api/cluster");
    $("cluster-summary").textContent = "This node " + s.node_id + " (" + s.role + "), leader " +
      (s.leader === null ? "none" : s.leader) + ", term " + s.term + ", applied " + s.last_applied;
    const lag = s.follower_lag || {};
    const unanswered = s.unanswered_appends || {};
    for (const m of s.members) {
      const tr = document.createElement("tr");
      cell(tr, m.id);
      cell(tr, m.leader ? "leader" : m.voter ? "voter" : "learner");
      cell(tr, m.http_addr || "");
      cell(tr, m.id === s.node_id ? s.last_applied : "");
      cell(tr, lag[m.id] === undefined ? "" : lag[m.id]);
      // As the leader sees it: appends left unanswered (cut off or slow), or entries the
      // member has not matched yet (down, or catching up).
      cell(tr, m.id === s.node_id ? "this node" : unanswered[m.id] ? "missing (" + unanswered[m.id] + " appends unanswered)"
        : lag[m.id] > 0 ? "behind by " + lag[m.id] + " (down or catching up)" : lag[m.id] === 0 ? "caught up" : "");
      cell(tr, ranking(s, m.id));
      body.appendChild(tr);
    }
    say("");
  } catch (e) { say(e.message, true); }
  charts();
}

// How a member ranks asks: this node's setup, and for the others whether they rank alike.
function ranking(status, id) {
  const r = status.resolver || {};
  const setup = (mode, model, learn) => mode + (model ? " (" + model + ")" : "") + (learn ? ", learns" : "");
  if (id === status.node_id) return setup(r.mode, r.model && r.model.name + ", " + r.model.weights + " weights", r.learn);
  const other = (r.members_ranking_otherwise || {})[id];
  return other ? "otherwise: " + JSON.stringify(other) : "as this node";
}

// ---- charts of this node's activity ----

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attributes, parent) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attributes)) e.setAttribute(k, String(v));
  if (parent) parent.appendChild(e);
  return e;
}

// One line chart: `series` are [label, values, colour]; null values leave a gap.
function chart(title, unit, series, seconds) {
  const figure = document.createElement("figure");
  figure.className = "chart";
  const caption = document.createElement("figcaption");
  const latest = series.map(([label, values]) => {
    const v = values[values.length - 1];
    return label + " " + (v === null ? "-" : v.toFixed(v < 10 ? 2 : 0));
  }).join(", ");
  caption.textContent = title + " (" + unit + "; now: " + latest + ")";
  figure.appendChild(caption);
  const [w, h, pad] = [360, 90, 4];
  const max = Math.max(1e-9, ...series.flatMap(([, values]) => values.filter((v) => v !== null)));
  const root = svg("svg", { viewBox: "0 0 " + w + " " + (h + 16), role: "img", "aria-label": title + ", " + unit + ", last " + seconds + " seconds; now: " + latest });
  svg("line", { x1: 0, y1: h, x2: w, y2: h, stroke: "#999" }, root);
  const top = svg("text", { x: 2, y: 11, fill: "#555", "font-size": 11 }, root);
  top.textContent = max.toFixed(max < 10 ? 2 : 0) + " " + unit;
  const left = svg("text", { x: 2, y: h + 13, fill: "#555", "font-size": 11 }, root);
  left.textContent = "-" + (seconds >= 60 ? Math.round(seconds / 60) + " min" : seconds + " s");
  const right = svg("text", { x: w - 2, y: h + 13, fill: "#555", "font-size": 11, "text-anchor": "end" }, root);
  right.textContent = "now";
  for (const [, values, colour] of series) {
    const step = values.length > 1 ? w / (values.length - 1) : w;
    let run = [];
    const flush = () => {
      if (run.length) svg("polyline", { points: run.join(" "), fill: "none", stroke: colour, "stroke-width": 1.5 }, root);
      run = [];
    };
    values.forEach((v, i) => {
      if (v === null) { flush(); return; }
      run.push((i * step).toFixed(1) + "," + (h - pad - (v / max) * (h - 2 * pad)).toFixed(1));
    });
    flush();
  }
  figure.appendChild(root);
  return figure;
}

async function charts() {
  const box = $("charts");
  try {
    const a = await api("/api/cluster/activity");
    const rate = (n) => n / a.interval_s;
    const seconds = a.intervals.length * a.interval_s;
    const pick = (f) => a.intervals.map(f);
    box.textContent = "";
    box.appendChild(chart("Asks", "per second", [["asks", pick((i) => rate(i.asks)), "#1f6feb"]], seconds));
    box.appendChild(chart("Invocations", "per second", [["invocations", pick((i) => rate(i.invocations)), "#2da44e"]], seconds));
    box.appendChild(chart("Replicated writes", "per second", [["writes", pick((i) => rate(i.writes)), "#8250df"]], seconds));
    box.appendChild(chart("Write latency", "ms", [["mean", pick((i) => i.write_ms_mean), "#bf8700"], ["max", pick((i) => i.write_ms_max), "#cf222e"]], seconds));
  } catch (e) { say(e.message, true); }
}

// ---- routing ----

function route() {
  if ($("nav").hidden) { show("login"); return; }
  const [page, arg] = location.hash.replace(/^#/, "").split("/");
  const value = arg ? decodeURIComponent(arg) : "";
  switch (page) {
    case "row": openRow(value); break;
    case "new": openRow(""); break;
    case "ask": show("ask"); break;
    case "receipts": show("receipts"); if (value) confirmReceipt(value); break;
    case "cluster": show("cluster"); cluster(); break;
    default: show("catalogue"); listRows(true);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (e) => { e.preventDefault(); login($("login-key").value); $("login-key").value = ""; });
  $("anonymous").addEventListener("click", () => { sessionStorage.removeItem(KEY); state.admin = false; enter(); });
  $("logout").addEventListener("click", logout);
  $("filter").addEventListener("submit", (e) => { e.preventDefault(); listRows(true); });
  $("more").addEventListener("click", () => listRows(false));
  $("new-row").addEventListener("click", () => { location.hash = "#new"; });
  $("edit").addEventListener("submit", save);
  $("delete").addEventListener("click", remove);
  $("ask-form").addEventListener("submit", ask);
  $("receipt-form").addEventListener("submit", (e) => { e.preventDefault(); location.hash = "#receipts/" + encodeURIComponent($("receipt-id").value.trim()); });
  $("cluster-refresh").addEventListener("click", cluster);
  $("verify").addEventListener("click", verifyShown);
  $("pin-keys").addEventListener("click", pinKeys);
  $("unpin-keys").addEventListener("click", unpinKeys);
  $("import-form").addEventListener("submit", importMcp);
  // The charts follow the node while the cluster page is open.
  setInterval(() => { if (!$("cluster").hidden) charts(); }, 5000);
  window.addEventListener("hashchange", route);
  if (key() !== null) login(key()); else show("login");
});
