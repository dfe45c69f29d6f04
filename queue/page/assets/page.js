// The buyer's page of a waiting room (see page.go). It joins (joining again,
// after a reload, gives the same ticket), polls the status as often as the
// server says (retry_after_ms), and grabs with the pass once admitted.
"use strict";

const $ = (id) => document.getElementById(id);
const activity = new URLSearchParams(location.search).get("activity");
let who = {}; // the identity headers
let ticket = "";
let timer = 0;

function headers(extra) {
  return Object.assign({}, who, extra || {});
}

async function call(method, path, extra) {
  const r = await fetch(path, { method, headers: headers(extra) });
  let body = {};
  try { body = await r.json(); } catch (e) { /* an empty or non-JSON answer */ }
  return { status: r.status, body };
}

function fail(body, status) {
  const e = body && body.error;
  $("error").textContent = e ? e.message + " (" + e.code + ")" : "the server answered " + status;
}

async function loadSale() {
  if (!/^[1-9][0-9]*$/.test(activity || "")) {
    $("sale").textContent = "Open this page with ?activity=<the sale's id>.";
    $("join").disabled = true;
    return;
  }
  const r = await call("GET", "/api/v1/activities/" + activity);
  if (r.status !== 200) {
    fail(r.body, r.status);
    $("join").disabled = true;
    return;
  }
  const a = r.body;
  $("title").textContent = a.name;
  const starts = new Date(a.starts_at);
  $("sale").textContent = a.stock + " units, on sale from " + starts.toLocaleString() +
    (a.queue ? "" : " (this sale has no waiting room)");
}

async function join(ev) {
  ev.preventDefault();
  $("error").textContent = "";
  const f = new FormData($("who"));
  const user = String(f.get("user") || "").trim();
  const token = String(f.get("token") || "").trim();
  who = token ? { "Authorization": "Bearer " + token } : { "X-User-ID": user };
  const base = "/api/v1/activities/" + activity + "/queue";
  const c = await call("GET", base + "/challenge");
  if (c.status !== 200) {
    fail(c.body, c.status);
    return;
  }
  let proof = {};
  if (c.body.bits > 0) {
    $("join").disabled = true;
    $("join").textContent = "Working…";
    proof = { "X-Queue-Challenge": c.body.challenge, "X-Queue-Nonce": await solve(c.body.challenge, c.body.bits) };
    $("join").textContent = "Join the queue";
  }
  const r = await call("POST", base, proof);
  if (r.status !== 200) {
    fail(r.body, r.status);
    $("join").disabled = false;
    return;
  }
  ticket = r.body.ticket;
  $("join").disabled = true;
  $("place").hidden = false;
  $("detail").textContent = r.body.drawn ?
    "You joined before the start: at the start, everyone who did is put in a random order." :
    "You are in line, in the order you joined.";
  poll();
}

// solve finds a nonce such that SHA-256 of "<challenge>.<nonce>" starts
// with bits zero bits (the room's proof of work on joining).
async function solve(challenge, bits) {
  const enc = new TextEncoder();
  for (let n = 0; ; n += 64) {
    const batch = [];
    for (let i = n; i < n + 64; i++) {
      batch.push(crypto.subtle.digest("SHA-256", enc.encode(challenge + "." + i)));
    }
    const sums = await Promise.all(batch);
    for (let i = 0; i < sums.length; i++) {
      if (leadingZeros(new Uint8Array(sums[i])) >= bits) {
        return String(n + i);
      }
    }
  }
}

function leadingZeros(b) {
  let z = 0;
  for (const x of b) {
    if (x === 0) {
      z += 8;
      continue;
    }
    return z + Math.clz32(x) - 24;
  }
  return z;
}

async function poll() {
  clearTimeout(timer);
  const r = await call("GET", "/api/v1/activities/" + activity + "/queue", { "X-Queue-Ticket": ticket });
  if (r.status !== 200) {
    fail(r.body, r.status);
    timer = setTimeout(poll, 2000);
    return;
  }
  const s = r.body;
  switch (s.state) {
  case "waiting":
    $("state").textContent = s.ahead === undefined ? "Waiting for the start" : s.ahead + " ahead of you";
    if (s.ahead !== undefined) {
      $("detail").textContent = "about " + Math.ceil(s.wait_ms / 1000) + " s to go";
    }
    break;
  case "admitted":
    $("state").textContent = "Your turn!";
    $("detail").textContent = "Buy before " + new Date(s.pass_expires_at).toLocaleTimeString() + ".";
    $("buy").hidden = false;
    $("buy").dataset.pass = s.pass;
    break;
  case "sold_out":
    $("state").textContent = "Sold out";
    $("detail").textContent = "Every unit is taken.";
    $("buy").hidden = true;
    return; // nothing more to wait for
  case "ended":
    $("state").textContent = "The sale has ended";
    $("detail").textContent = "";
    $("buy").hidden = true;
    return;
  }
  timer = setTimeout(poll, Math.max(s.retry_after_ms, 200));
}

async function buy() {
  $("buy").disabled = true;
  const r = await call("POST", "/api/v1/activities/" + activity + "/grab", { "X-Queue-Pass": $("buy").dataset.pass });
  if (r.status !== 202 && r.status !== 200) {
    fail(r.body, r.status);
    $("buy").disabled = false;
    if (r.body && r.body.error && r.body.error.code === "sold_out") {
      $("buy").hidden = true;
      $("state").textContent = "Sold out";
    }
    return;
  }
  clearTimeout(timer);
  $("buy").hidden = true;
  $("state").textContent = "You got one";
  $("order").hidden = false;
  $("order-id").textContent = r.body.order_id;
  follow(r.body.order_id);
}

async function follow(id) {
  const r = await call("GET", "/api/v1/orders/" + id);
  if (r.status === 200) {
    $("order-state").textContent = r.body.status;
    if (r.body.status !== "pending") {
      return;
    }
  }
  setTimeout(() => follow(id), 500);
}

$("who").addEventListener("submit", join);
$("buy").addEventListener("click", buy);
loadSale();
