// The dashboard page: one EventSource on events, a frame per tick (see
// package dashboard's Frame), kept for the charts over the last minutes.
"use strict";

const KEEP = 600; // points per series: 2.5 minutes at 4 ticks a second
const OUTCOMES = [
  ["accepted", "#2e9e5b"], ["already", "#6c8ebf"], ["sold_out", "#d08a2c"],
  ["rejected", "#9a6fb0"], ["errors", "#d64545"],
];
const $ = (id) => document.getElementById(id);
const fmt = (n) => (n == null ? "–" : Math.round(n).toLocaleString("en-US"));
const clock = (ms) => (ms == null ? "–" : new Date(ms).toLocaleTimeString("en-GB", {hour12: false}) + "." + String(ms % 1000).padStart(3, "0"));

// The series, aligned on times (seconds, as uPlot wants them).
const hist = {t: [], rates: {}, p50: [], p99: [], acts: {}};
OUTCOMES.forEach(([k]) => (hist.rates[k] = []));
let last = null;        // the latest frame
let selected = null;    // the activity followed
const checked = new Set(); // activities the checker ran on by itself

function push(f) {
  if (hist.t.length && f.t / 1000 <= hist.t[hist.t.length - 1]) return; // a replayed frame
  const n = hist.t.length;
  hist.t.push(f.t / 1000);
  OUTCOMES.forEach(([k]) => hist.rates[k].push(f.rates ? f.rates[k] ?? 0 : null));
  hist.p50.push(f.p50_ms ?? null);
  hist.p99.push(f.p99_ms ?? null);
  const seen = new Set();
  for (const a of f.activities || []) {
    let s = hist.acts[a.id];
    if (!s) {
      s = hist.acts[a.id] = {redis: Array(n).fill(null), db: Array(n).fill(null), backlog: Array(n).fill(null), lag: Array(n).fill(null), pending: Array(n).fill(null)};
    }
    s.redis.push(a.redis_remaining ?? null);
    s.db.push(a.db_remaining);
    s.backlog.push(a.backlog);
    s.lag.push(a.lag);
    s.pending.push(a.pending);
    seen.add(String(a.id));
  }
  for (const [id, s] of Object.entries(hist.acts)) {
    if (!seen.has(id)) Object.values(s).forEach((v) => v.push(null));
  }
  if (hist.t.length > KEEP) {
    const cut = (v) => v.splice(0, v.length - KEEP);
    cut(hist.t); cut(hist.p50); cut(hist.p99);
    Object.values(hist.rates).forEach(cut);
    for (const [id, s] of Object.entries(hist.acts)) {
      Object.values(s).forEach(cut);
      if (s.redis.every((x) => x == null) && s.db.every((x) => x == null)) delete hist.acts[id];
    }
  }
  last = f;
}

// Charts.
function chart(el, series, opts = {}) {
  const o = {
    width: el.clientWidth || 400, height: 190, legend: {live: true},
    cursor: {drag: {x: false, y: false}},
    scales: {x: {time: true}, y: {range: (u, min, max) => [0, Math.max(1, max * 1.08)]}},
    axes: [{stroke: "#8b95a5", grid: {stroke: "#2a3140"}}, {stroke: "#8b95a5", grid: {stroke: "#2a3140"}, size: 60}],
    series: [{}].concat(series.map(([label, stroke, extra]) => Object.assign({label, stroke, width: 2, spanGaps: false}, extra))),
    ...opts,
  };
  return new uPlot(o, [[], ...series.map(() => [])], el);
}
const charts = {
  stock: chart($("chart-stock"), [["Redis", "#4fb3ff"], ["database", "#f2c14e", {dash: [6, 4]}]]),
  rates: chart($("chart-rates"), OUTCOMES.map(([k, c]) => [k.replace("_", " "), c])),
  latency: chart($("chart-latency"), [["p50", "#4fb3ff"], ["p99", "#d64545"]]),
  stream: chart($("chart-stream"), [["backlog", "#f2c14e"], ["lag", "#d64545"], ["pending", "#6c8ebf"]]),
};
window.addEventListener("resize", () => {
  for (const c of Object.values(charts).concat(compareCharts)) c.setSize({width: c.root.parentElement.clientWidth, height: c.height});
});

function drawCharts() {
  const s = hist.acts[selected] || {redis: [], db: [], backlog: [], lag: [], pending: []};
  const t = selected in hist.acts ? hist.t : [];
  charts.stock.setData([t, s.redis, s.db]);
  charts.rates.setData([hist.t, ...OUTCOMES.map(([k]) => hist.rates[k])]);
  charts.latency.setData([hist.t, hist.p50, hist.p99]);
  charts.stream.setData([t, s.backlog, s.lag, s.pending]);
}

// Numbers and tables.
function state(a, now) {
  if (now < a.starts_at) return ["upcoming", "up"];
  if (a.redis_remaining === 0) return ["sold out", "out"];
  if (now >= a.ends_at) return ["ended", "ended"];
  return ["live", "live"];
}

function statesText(a) {
  if (a.states_error) return a.states_error;
  const s = Object.entries(a.states || {}).filter(([, n]) => n > 0);
  return s.length ? s.map(([k, n]) => `${k} ${fmt(n)}`).join(" · ") : "none yet";
}

// drawBuckets shows what is left in each bucket of a sale of several, one
// bar each, as high as its share of the fullest.
function drawBuckets(a) {
  const el = $("buckets");
  const b = a.buckets || [];
  el.hidden = b.length < 2;
  if (el.hidden) return;
  while (el.children.length > b.length) el.lastChild.remove();
  while (el.children.length < b.length) el.append(document.createElement("span"));
  const top = Math.max(1, ...b);
  b.forEach((n, i) => {
    const bar = el.children[i];
    bar.style.height = `${Math.max(2, (100 * n) / top)}%`;
    bar.title = `bucket ${i}: ${fmt(n)} left`;
    bar.className = n === 0 ? "empty" : "";
  });
  el.title = `${b.length} buckets`;
}

// drawQueue shows a sale's waiting room: who waits, who was let through,
// how fast against the room's rate.
function drawQueue(a) {
  const q = a.queue;
  $("queue-card").hidden = !q;
  if (!q) return;
  $("queue-waiting").textContent = fmt(q.waiting);
  const hold = q.hold ? `, hold ${q.hold}` : "";
  $("queue-detail").textContent = `${fmt(q.admitted)} admitted · ${fmt(Math.round(q.admit_rate))}/s of ${fmt(q.rate)}/s${hold}` +
    (q.closed ? " · closed: sold out" : "");
}

function render() {
  const f = last;
  if (!f) return;
  const acts = f.activities || [];
  const ids = acts.map((a) => String(a.id));
  const wanted = (location.hash.match(/activity=(\d+)/) || [])[1];
  selected = wanted && ids.includes(wanted) ? wanted : ids.includes(selected) ? selected : ids[0] ?? null;
  const a = acts.find((x) => String(x.id) === selected);

  $("viewers").textContent = f.viewers;
  $("updated").textContent = clock(f.t);
  $("accepted-total").textContent = fmt(f.grabs?.accepted ?? 0);
  const rate = f.rates ? Object.values(f.rates).reduce((x, y) => x + y, 0) : 0;
  $("grab-rate").textContent = fmt(rate);
  $("p50").textContent = f.p50_ms == null ? "–" : f.p50_ms.toFixed(2) + " ms";
  $("p99").textContent = f.p99_ms == null ? "–" : f.p99_ms.toFixed(2) + " ms";

  if (a) {
    const [label, cls] = state(a, f.t);
    $("activity-title").textContent = `${a.name} (#${a.id})`;
    $("activity-status").textContent = label;
    $("activity-status").className = "badge " + cls;
    $("activity-window").textContent = `${new Date(a.starts_at).toLocaleString("en-GB")} → ${new Date(a.ends_at).toLocaleTimeString("en-GB")}`;
    $("remaining-redis").textContent = a.redis_remaining == null ? "not loaded" : fmt(a.redis_remaining);
    $("remaining-of").textContent = `of ${fmt(a.stock)}`;
    drawBuckets(a);
    drawQueue(a);
    $("remaining-db").textContent = fmt(a.db_remaining);
    $("backlog").textContent = fmt(a.backlog);
    $("lag").textContent = fmt(a.lag);
    $("sold-out-at").textContent = a.sold_out_at ? clock(a.sold_out_at) : "–";
    $("last-grab").textContent = a.last_grab_at ? "last grab " + clock(a.last_grab_at) : "no grab yet";
    $("states").textContent = "orders by state: " + statesText(a);
    $("check-activity").textContent = `activity #${a.id}`;
    $("admin-sold-out").textContent = a.sold_out_at ? `${clock(a.sold_out_at)} (+${((a.sold_out_at - a.starts_at) / 1000).toFixed(3)}s after the start)` : "not sold out";
    $("admin-last-grab").textContent = a.last_grab_at ? `${clock(a.last_grab_at)}, order ${a.last_order_id}` : "none";
    autoCheck(a, f.t);
  } else {
    $("activity-title").textContent = "No live activity";
    $("activity-status").textContent = "";
    $("states").textContent = "";
    $("queue-card").hidden = true;
  }

  const tbody = $("activities").tBodies[0];
  tbody.replaceChildren(...acts.map((x) => {
    const tr = document.createElement("tr");
    tr.dataset.activity = x.id;
    if (String(x.id) === selected) tr.className = "selected";
    const [label, cls] = state(x, f.t);
    const cells = [x.id, x.name, label, fmt(x.stock), x.redis_remaining == null ? "–" : fmt(x.redis_remaining),
      fmt(x.db_remaining), fmt(x.backlog), statesText(x), x.last_grab_at ? clock(x.last_grab_at) : "–"];
    cells.forEach((c, i) => {
      const td = document.createElement("td");
      td.textContent = c;
      if (i === 2) td.className = "badge " + cls;
      tr.appendChild(td);
    });
    tr.onclick = () => { location.hash = "activity=" + x.id; render(); drawCharts(); };
    return tr;
  }));
  $("errors").hidden = !f.errors;
  $("errors").textContent = (f.errors || []).join("; ");
}

// The stream.
function connect() {
  const es = new EventSource("events");
  const conn = $("conn");
  es.onopen = () => { conn.textContent = "live"; conn.className = "conn live"; };
  es.onerror = () => { conn.textContent = "reconnecting"; conn.className = "conn down"; };
  es.addEventListener("history", (e) => { JSON.parse(e.data).forEach(push); render(); drawCharts(); });
  es.addEventListener("tick", (e) => { push(JSON.parse(e.data)); render(); drawCharts(); });
}

// Admin: the token stays in this tab only.
const tokenKey = "seckill-admin-token";
const token = () => sessionStorage.getItem(tokenKey) || "";
function showToken() { $("token-state").textContent = token() ? "token set for this tab" : "no token: read-only"; }
$("token-form").onsubmit = (e) => {
  e.preventDefault();
  sessionStorage.setItem(tokenKey, $("token").value.trim());
  $("token").value = "";
  showToken();
};

async function api(method, path, body) {
  const r = await fetch(path, {method, headers: {"Authorization": "Bearer " + token(), "Content-Type": "application/json"}, body: body && JSON.stringify(body)});
  const j = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(j.error ? `${j.error.code}: ${j.error.message}` : `HTTP ${r.status}`);
  return j;
}

$("create-form").onsubmit = async (e) => {
  e.preventDefault();
  const d = new FormData(e.target);
  const start = Date.now() + 1000 * Number(d.get("starts_in"));
  const out = $("create-result");
  try {
    const a = await api("POST", "/api/v1/activities", {
      name: d.get("name"), stock: Number(d.get("stock")),
      starts_at: new Date(start).toISOString(), ends_at: new Date(start + 60000 * Number(d.get("lasts"))).toISOString(),
    });
    out.textContent = `created activity #${a.id}, starts ${clock(Date.parse(a.starts_at))}`;
    location.hash = "activity=" + a.id;
  } catch (err) {
    out.textContent = "not created: " + err.message;
  }
};

async function runCheck(id) {
  const st = $("check-state");
  st.textContent = "checking…";
  try {
    const rep = await api("GET", "api/check/" + id);
    const tb = $("check-table").tBodies[0];
    tb.replaceChildren(...rep.results.map((c) => {
      const tr = document.createElement("tr");
      const verdict = c.skipped ? "skipped" : c.held ? "ok" : "FAILED";
      tr.className = c.skipped ? "skipped" : c.held ? "ok" : "failed";
      [c.name, verdict, c.count, c.detail].forEach((v) => { const td = document.createElement("td"); td.textContent = v; tr.appendChild(td); });
      return tr;
    }));
    $("check-table").hidden = false;
    const bad = rep.results.filter((c) => !c.held).length;
    st.textContent = `activity #${id}: ` + (bad ? `${bad} invariant(s) VIOLATED` : "all invariants held") + ` (${clock(Date.now())})`;
  } catch (err) {
    st.textContent = "checker: " + err.message;
  }
}
$("check-run").onclick = () => selected && runCheck(selected);

// After a sale (sold out or ended) whose orders are all written, the
// checker runs once by itself for an admin.
function autoCheck(a, now) {
  if (!token() || checked.has(a.id) || a.backlog > 0) return;
  if (a.redis_remaining === 0 || now >= a.ends_at) {
    checked.add(a.id);
    runCheck(a.id);
  }
}

// The comparison of strategies.
const compareCharts = [];
async function loadCompare() {
  const note = $("compare-note");
  let t;
  try {
    const r = await fetch("api/compare");
    t = await r.json();
    if (!r.ok) { note.textContent = t.error ? t.error.message : `HTTP ${r.status}`; return; }
  } catch (err) {
    note.textContent = "could not load: " + err.message;
    return;
  }
  const rows = t.rows;
  const x = rows.map((_, i) => i);
  const worst = (r, k) => Math.max(...r.rounds.map((x) => x[k]));
  note.textContent = `${new Date(t.started).toLocaleString("en-GB")}: ${t.settings.stock} units, ${t.settings.users} users, ${t.settings.concurrency} connections, ${t.settings.rounds} rounds, database ${t.settings.database}; ${t.machine.cpus} CPUs (load ${t.machine.loadavg || "?"})`;
  $("compare-charts").hidden = false;
  const bars = (el, series) => {
    const c = new uPlot({
      width: el.clientWidth || 400, height: 220, legend: {live: false},
      cursor: {show: false},
      scales: {x: {time: false, range: [-0.5, rows.length - 0.5]}, y: {range: (u, min, max) => [0, Math.max(1, max * 1.1)]}},
      axes: [{stroke: "#8b95a5", grid: {show: false}, splits: () => x, values: () => rows.map((r) => r.strategy + (r.safe_by_design ? "" : " ⚠"))},
        {stroke: "#8b95a5", grid: {stroke: "#2a3140"}, size: 60}],
      series: [{}].concat(series.map(([label, color], i) => ({label, fill: color, stroke: color, points: {show: false},
        // One series: centred bars; two: side by side, left and right of the strategy.
        paths: uPlot.paths.bars({size: [0.7 / series.length, 80], align: series.length === 1 ? 0 : i === 0 ? -1 : 1})}))),
    }, [x, ...series.map((s) => s[2])], el);
    compareCharts.push(c);
  };
  bars($("chart-compare-rps"), [["req/s", "#4fb3ff", rows.map((r) => r.requests_per_sec)]]);
  bars($("chart-compare-bad"), [["oversold", "#d64545", rows.map((r) => worst(r, "oversold"))], ["duplicate buyers", "#d08a2c", rows.map((r) => worst(r, "duplicates"))]]);
}

showToken();
connect();
loadCompare();
