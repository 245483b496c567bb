// The rowcall operator console. Everything goes through this node's public API with the
// key from session storage in an Authorization header: no cookie, so no request a foreign
// page makes from this browser carries the key (nothing to forge), and the key is gone
// when the tab closes. Untrusted text is set with textContent only, never as HTML.
"use strict";

const KEY = "rowcall-key";
const $ = (id) => document.getElementById(id);
const state = { cursor: null, admin: false, row: null };

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

async function ask(event) {
  event.preventDefault();
  const q = new URLSearchParams({ ask: $("ask-text").value, limit: "10" });
  if ($("ask-mode").value) q.set("mode", $("ask-mode").value);
  const body = $("ranking").tBodies[0];
  body.textContent = "";
  try {
    const answer = await api("/api/dispatch?" + q);
    answer.candidates.forEach((c, i) => {
      const tr = document.createElement("tr");
      cell(tr, i + 1);
      link(cell(tr), c.key, "#row/" + encodeURIComponent(c.key));
      cell(tr, Number(c.score).toFixed(4));
      cell(tr, (c.why || []).join("; "));
      body.appendChild(tr);
    });
    say(answer.candidates.length + " candidates");
  } catch (e) { say(e.message, true); }
}

// ---- receipts ----

async function confirmReceipt(id) {
  $("receipt-id").value = id;
  try {
    const answer = await api("/api/dispatch?confirm=" + encodeURIComponent(id));
    $("receipt-out").textContent = JSON.stringify(answer, null, 2);
    say(answer.confirmed === false ? "Not confirmed" : "Confirmed");
  } catch (e) { $("receipt-out").textContent = ""; say(e.message, true); }
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
      body.appendChild(tr);
    }
    say("");
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
  window.addEventListener("hashchange", route);
  if (key() !== null) login(key()); else show("login");
});
