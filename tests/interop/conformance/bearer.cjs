// Preloaded into the conformance suite (NODE_OPTIONS=--require): adds
// `Authorization: Bearer $CONFORMANCE_BEARER_TOKEN` to every request bound for the origin of
// $CONFORMANCE_SERVER_URL. The suite has no auth option; it sends through Node's fetch and
// undici's `request`, and both go through undici's global dispatcher, so one interceptor
// there covers every scenario without a proxy in between.
'use strict';
const { Agent, setGlobalDispatcher } = require('undici');

const token = process.env.CONFORMANCE_BEARER_TOKEN;
const origin = new URL(process.env.CONFORMANCE_SERVER_URL).origin;
const credential = `Bearer ${token}`;

// Headers arrive as a flat [name, value, …] array, an iterable of pairs, or a plain object.
function withCredential(headers) {
  const flat = [];
  if (Array.isArray(headers)) {
    flat.push(...headers);
  } else if (headers && typeof headers[Symbol.iterator] === 'function') {
    for (const [name, value] of headers) flat.push(name, value);
  } else if (headers) {
    for (const [name, value] of Object.entries(headers)) flat.push(name, value);
  }
  const kept = [];
  for (let i = 0; i < flat.length; i += 2) {
    if (String(flat[i]).toLowerCase() !== 'authorization') kept.push(flat[i], flat[i + 1]);
  }
  return [...kept, 'authorization', credential];
}

if (token) {
  setGlobalDispatcher(
    new Agent().compose((dispatch) => (opts, handler) => {
      const bound = new URL(opts.path, opts.origin).origin === origin;
      return dispatch(bound ? { ...opts, headers: withCredential(opts.headers) } : opts, handler);
    }),
  );
}
