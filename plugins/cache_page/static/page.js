// The kvgate cache page: polls /v1/cache/overview and renders it. Every server value is written
// with textContent (never as HTML): prompts and almost-hit text are arbitrary client text.
"use strict";

const DATA_URL = "/v1/cache/overview?limit=50";
const POLL_MS = 2000;
const KEY_STORE = "kvgate.apiKey";

const $ = (id) => document.getElementById(id);
let seenIds = new Set();
let firstRender = true;
let timer = null;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) node.append(child);
  return node;
}

function bytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

const count = (n) => (n === null || n === undefined ? "—" : Number(n).toLocaleString("en"));
const seconds = (s) => (s === null || s === undefined ? "—" : s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(2)} s`);
const clock = (t) => new Date(t * 1000).toLocaleTimeString("en-GB");

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").classList.toggle("error", isError);
}

function renderModel(model) {
  const facts = [["model", model.name], ["architecture", model.architecture], ["runtime", model.runtime],
    ["dialect", model.dialect], ["source format", model.source_format], ["weights", model.weights],
    ["dtype", model.dtype], ["device", model.device], ["context", count(model.context)],
    ["block size", count(model.block_size)]];
  $("model").replaceChildren(...facts.map(([name, value]) =>
    el("div", {}, el("dt", { text: name }), el("dd", { text: String(value ?? "—") }))));
}

// widths go through the CSSOM: the page's Content-Security-Policy refuses inline style attributes
function part(cls, percent) {
  const span = el("span", { class: cls });
  span.style.width = `${percent}%`;
  return span;
}

function usedBar(used, capacity) {
  const bar = el("div", { class: "bar", title: capacity ? `${bytes(used)} of ${bytes(capacity)}` : "no capacity set" });
  const share = capacity ? Math.min(100, (100 * (used || 0)) / capacity) : 0;
  bar.append(part("used", share));
  return el("div", { class: "tokens" }, bar, el("span", { text: capacity ? `${share.toFixed(1)}%` : "" }));
}

function renderTiers(tiers) {
  const rows = tiers.map((t) => el("tr", {},
    el("td", { text: t.built ? t.name : `${t.name} (off)` }),
    el("td", {}, usedBar(t.bytes, t.capacity_bytes)),
    el("td", { class: "num", text: bytes(t.bytes) }),
    el("td", { class: "num", text: bytes(t.capacity_bytes) }),
    el("td", { class: "num", text: count(t.entries) }),
    el("td", { class: "num", text: count(t.hits) }),
    el("td", { class: "num", text: count(t.misses) })));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: "7", class: "empty", text: "The prefix cache is off." })));
  $("tiers").tBodies[0].replaceChildren(...rows);
}

function tokenBar(r) {
  const total = Math.max(r.prompt_tokens, 1);
  const bar = el("div", { class: "bar", title: `device ${r.cached_device}, SSD ${r.cached_ssd}, computed ${r.computed}` });
  bar.append(part("device", (100 * r.cached_device) / total), part("ssd", (100 * r.cached_ssd) / total));
  return el("div", { class: "tokens" }, bar, el("span", { text: count(r.prompt_tokens) }));
}

function renderRequests(requests, data) {
  $("request-scope").textContent = data.tenant ? `(tenant ${data.tenant})` : "";
  const rows = requests.map((r) => {
    const row = el("tr", { "data-request-id": String(r.id) },
      el("td", { text: clock(r.time) }), el("td", { text: r.tenant }),
      el("td", { class: `reason-${r.reason}`, text: r.reason }), el("td", {}, tokenBar(r)),
      el("td", { class: "num", text: count(r.cached_device) }), el("td", { class: "num", text: count(r.cached_ssd) }),
      el("td", { class: "num", text: count(r.computed) }), el("td", { class: "num", text: count(r.replayed_tokens) }),
      el("td", { class: "num", text: count(r.completion_tokens) }), el("td", { class: "num", text: seconds(r.ttft_s) }),
      el("td", { class: "num", text: r.tokens_per_s === null ? "—" : r.tokens_per_s.toFixed(1) }));
    if (!firstRender && !seenIds.has(r.id)) row.classList.add("fresh");
    return row;
  });
  seenIds = new Set(requests.map((r) => r.id));
  $("requests").tBodies[0].replaceChildren(...rows);
  $("no-requests").hidden = rows.length > 0;
}

function renderAlmostHits(items) {
  const blocks = items.map((a) => {
    const where = `${clock(a.time)} · ${a.tier} · forked at token ${count(a.fork_index)} of a stored ` +
      `${count(a.stored_tokens)} (${Math.round(100 * a.shared_ratio)}% shared), prompt ${count(a.prompt_tokens)} tokens`;
    const block = el("div", { class: "almost" }, el("div", { class: "where", text: where }));
    if (a.text_redacted) {
      block.append(el("p", { class: "hint", text: "Text hidden: this namespace is shared with other tenants." }));
    } else {
      block.append(el("dl", { class: "fork" },
        el("dt", { text: "before fork" }), el("dd", { text: a.text_before }),
        el("dt", { text: "stored after" }), el("dd", { class: "stored", text: a.stored_after }),
        el("dt", { text: "prompt after" }), el("dd", { class: "prompt", text: a.prompt_after })));
    }
    return block;
  });
  $("almost-hits").replaceChildren(...blocks);
  $("no-almost-hits").hidden = blocks.length > 0;
}

function renderProgress(operations) {
  const rows = operations.map((op) => {
    const share = op.total ? Math.min(100, (100 * op.done) / op.total) : 0;
    const bar = el("div", { class: "bar", title: `${count(op.done)} of ${count(op.total)} ${op.unit}` });
    bar.append(part("used", share));
    return el("div", { class: "operation", "data-operation-kind": op.kind },
      el("div", { class: "where", text: `${op.kind} · ${op.what} · ${seconds(op.elapsed_s)}` }),
      el("div", { class: "tokens" }, bar, el("span", { text: `${count(op.done)} / ${count(op.total)} ${op.unit}` })));
  });
  $("progress").replaceChildren(...rows);
  $("progress-card").hidden = rows.length === 0;
}

function render(data) {
  renderModel(data.model);
  renderProgress(data.progress || []);
  renderTiers(data.tiers);
  renderRequests(data.requests, data);
  renderAlmostHits(data.almost_hits);
  firstRender = false;
  $("content").hidden = false;
  $("key-form").hidden = true;
  document.body.dataset.loaded = "true";
  setStatus(`updated ${new Date().toLocaleTimeString("en-GB")}`);
}

function askForKey(message) {
  $("content").hidden = true;
  $("key-form").hidden = false;
  $("key-error").hidden = !message;
  $("key-error").textContent = message || "";
  setStatus("API key needed", true);
  $("key-input").focus();
}

async function poll() {
  clearTimeout(timer);
  const key = sessionStorage.getItem(KEY_STORE);
  $("forget-key").hidden = !key;
  try {
    const reply = await fetch(DATA_URL, { headers: key ? { Authorization: `Bearer ${key}` } : {}, cache: "no-store" });
    if (reply.status === 401) {
      if (key) sessionStorage.removeItem(KEY_STORE);
      askForKey(key ? "That key was refused." : "");
      return;  // polling resumes when a key is given
    }
    const body = await reply.json();
    if (!reply.ok) throw new Error(body?.error?.message || `HTTP ${reply.status}`);
    render(body);
  } catch (err) {
    setStatus(`cannot update: ${err.message}`, true);
  }
  timer = setTimeout(poll, POLL_MS);
}

function start() {
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = $("key-input").value.trim();
    if (!key) return;
    sessionStorage.setItem(KEY_STORE, key);
    $("key-input").value = "";
    poll();
  });
  $("forget-key").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_STORE);
    poll();
  });
  document.addEventListener("visibilitychange", () => { if (!document.hidden) poll(); });
  poll();
}

start();
