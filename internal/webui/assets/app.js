// Agate's web UI: one page, routed by the URL's hash, reading through the scheduler's queries
// and steering through its commands (POST api/query/<name>, api/command/<name>). Every value
// shown is set as text, never as HTML.
"use strict";

const REFRESH_MS = 2000;
const TOKEN_KEY = "agate-ui-token";
let settings = { namespace: "", writes: "off", commands: [], traceUrl: "" };
let current = null; // the view shown: {refresh: async () => void}

// ---- helpers ---------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function fill(id, ...children) {
  const target = document.getElementById(id);
  if (target) target.replaceChildren(...children.flat());
}

function ago(t) {
  const s = Math.max(0, (Date.now() - new Date(t).getTime()) / 1000);
  return s < 60 ? s.toFixed(1) + " s" : s < 3600 ? Math.round(s / 60) + " min" : Math.round(s / 3600) + " h";
}
function keyOf(k) { return k ? k.group + "." + k.name : ""; }
function badge(text) { return el("span", { class: "badge " + text }, text); }
function time(t) { return t ? new Date(t).toISOString().replace(".000Z", "Z") : "—"; }
function triggerLink(k) { return el("a", { href: "#/trigger/" + encodeURIComponent(k.group) + "/" + encodeURIComponent(k.name) }, keyOf(k)); }
function jobLink(k) { return el("a", { href: "#/job/" + encodeURIComponent(k.group) + "/" + encodeURIComponent(k.name) }, keyOf(k)); }

function status(message, kind) {
  const s = document.getElementById("status");
  s.textContent = message || "";
  s.className = kind || "";
  s.hidden = !message;
}

async function post(path, body, headers) {
  const res = await fetch(path, {
    method: "POST",
    headers: Object.assign({ "Content-Type": "application/json" }, headers || {}),
    body: JSON.stringify(body || {}),
  });
  let reply;
  try { reply = await res.json(); } catch { reply = { ok: false, error: { message: res.status + " " + res.statusText } }; }
  return reply;
}

// query returns a query's result, or throws its error.
async function query(name, body) {
  const reply = await post("api/query/" + name, body);
  if (!reply.ok) throw new Error(errorText(reply.error));
  return reply.result;
}

function errorText(e) {
  if (!e) return "unknown error";
  return (e.code ? e.code + ": " : "") + (e.field ? e.field + ": " : "") + (e.message || "");
}

// command sends one of the UI's commands with the token, and says what happened.
async function command(name, body, done) {
  const token = sessionStorage.getItem(TOKEN_KEY) || "";
  const headers = token ? { Authorization: "Bearer " + token } : {};
  const reply = await post("api/command/" + name, body, headers);
  if (!reply.ok) {
    status(name + " refused: " + errorText(reply.error), "");
    return false;
  }
  status(name + " applied", "info");
  if (done) await done();
  return true;
}

function writable() { return settings.writes === "token"; }

function writeButton(id, label, name, body, after) {
  const title = settings.writes === "read-only" ? "this UI is read-only"
    : settings.writes === "off" ? "write actions are off: the scheduler has no UI token" : label;
  return el("button", {
    id, title, disabled: !writable(), "data-command": name,
    onclick: async (ev) => { ev.preventDefault(); await command(name, body, after); },
  }, label);
}

function traceLink(ev) {
  if (!settings.traceUrl || !ev.traceparent) return "";
  const parts = ev.traceparent.split("-");
  if (parts.length < 3) return "";
  return el("a", { class: "trace-link", href: settings.traceUrl.replace("{traceId}", parts[1]), target: "_blank", rel: "noreferrer" }, "trace");
}

function table(headers, rows, id) {
  return el("table", { id },
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: String(headers.length), class: "muted" }, "none"))));
}

function eventDetails(ev) {
  const d = ev.data || {};
  const bits = [];
  if (d.fireId) bits.push("fire " + d.fireId.slice(0, 8) + "…");
  if (d.scheduledTime) bits.push("scheduled " + time(d.scheduledTime));
  if (d.worker) bits.push("worker " + d.worker);
  if (d.error) bits.push("error: " + (typeof d.error === "string" ? d.error : JSON.stringify(d.error)));
  if (d.instruction) bits.push("instruction " + d.instruction);
  if (d.reason) bits.push(d.reason);
  return bits.join(" · ");
}

function historyTable(events) {
  return table(["time", "event", "details", ""], events.map((ev) =>
    el("tr", { "data-type": ev.type },
      el("td", {}, time(ev.time)),
      el("td", {}, ev.type.replace(/^agate\./, "")),
      el("td", { class: "small" }, eventDetails(ev)),
      el("td", {}, traceLink(ev)))), "history");
}

// ---- views -----------------------------------------------------------------------------------

const states = ["", "WAITING", "ACQUIRED", "BLOCKED", "PAUSED", "PAUSED_BLOCKED", "COMPLETE", "ERROR"];

function triggersView(root) {
  const group = el("input", { id: "f-group", placeholder: "group" });
  const state = el("select", { id: "f-state" }, states.map((s) => el("option", { value: s }, s || "any state")));
  const jobType = el("input", { id: "f-type", placeholder: "job type" });
  const search = el("input", { id: "f-search", placeholder: "search names", type: "search" });
  let items = [], next = "";
  const render = () => {
    const needle = search.value.trim().toLowerCase();
    const shown = items.filter((t) => !needle || keyOf(t).toLowerCase().includes(needle) || keyOf(t.job).toLowerCase().includes(needle));
    fill("list", table(["trigger", "job", "type", "state", "next fire", "previous fire", ""], shown.map((t) =>
      el("tr", { "data-trigger": keyOf(t) },
        el("td", {}, triggerLink(t)), el("td", {}, jobLink(t.job)), el("td", {}, t.job.type),
        el("td", {}, badge(t.state)), el("td", {}, time(t.nextFireTime)), el("td", {}, time(t.previousFireTime)),
        el("td", { class: "actions" }, pauseResume(t, refresh))))),
      next ? el("p", {}, el("button", { onclick: more }, "more")) : "");
  };
  const filter = () => {
    const f = {};
    if (group.value.trim()) f.group = group.value.trim();
    if (state.value) f.state = state.value;
    if (jobType.value.trim()) f.jobType = jobType.value.trim();
    return f;
  };
  async function refresh() {
    // Live updates re-read the pages already loaded, so "more" stays expanded.
    const want = Math.max(items.length, 100);
    const r = await query("list_triggers", Object.assign(filter(), { limit: Math.min(want, 1000) }));
    items = r.triggers; next = r.nextCursor || "";
    render();
  }
  async function more() {
    const r = await query("list_triggers", Object.assign(filter(), { cursor: next }));
    items = items.concat(r.triggers); next = r.nextCursor || "";
    render();
  }
  for (const i of [group, state, jobType]) i.addEventListener("change", () => { items = []; refresh().catch(showError); });
  search.addEventListener("input", render);
  root.append(el("h1", {}, "Triggers"), el("div", { class: "filters" }, group, state, jobType, search), el("div", { id: "list" }));
  return { refresh };
}

function pauseResume(t, after) {
  const key = { group: t.group, name: t.name };
  const paused = t.state === "PAUSED" || t.state === "PAUSED_BLOCKED";
  return paused
    ? writeButton("resume", "resume", "resume_trigger", { trigger: key }, after)
    : writeButton("pause", "pause", "pause_trigger", { trigger: key }, after);
}

function jobsView(root) {
  const group = el("input", { id: "f-group", placeholder: "group" });
  const jobType = el("input", { id: "f-type", placeholder: "job type" });
  async function refresh() {
    const f = { limit: 500 };
    if (group.value.trim()) f.group = group.value.trim();
    if (jobType.value.trim()) f.type = jobType.value.trim();
    const r = await query("list_jobs", f);
    fill("list", table(["job", "type", "durable", "non-concurrent", "description"], r.jobs.map((j) =>
      el("tr", {}, el("td", {}, jobLink(j)), el("td", {}, j.type), el("td", {}, j.durable ? "yes" : "no"),
        el("td", {}, j.nonconcurrent ? "yes" : "no"), el("td", {}, j.description || "")))));
  }
  for (const i of [group, jobType]) i.addEventListener("change", () => refresh().catch(showError));
  root.append(el("h1", {}, "Jobs"), el("div", { class: "filters" }, group, jobType), el("div", { id: "list" }));
  return { refresh };
}

function schedule(t) {
  for (const kind of ["cron", "simple", "calendarInterval", "dailyTimeInterval"]) {
    if (t[kind]) return kind + " " + JSON.stringify(t[kind]);
  }
  return "";
}

function triggerView(root, group, name, params) {
  const key = { group, name };
  const at = el("input", { id: "explain-at", placeholder: "a time, e.g. 2026-12-25T09:00:00Z (empty: now)", size: "40", value: params.get("at") || "" });
  const explainButton = el("button", { id: "explain", onclick: () => explain().catch(showError) }, "Explain");
  at.addEventListener("keydown", (e) => { if (e.key === "Enter") explain().catch(showError); });
  root.append(
    el("h1", {}, "Trigger ", keyOf(key)),
    el("div", { class: "row", id: "actions" }),
    el("h2", {}, "Trigger"), el("div", { id: "details" }),
    el("h2", {}, "Why didn't it fire?"),
    el("div", { class: "row" }, at, explainButton),
    el("div", { id: "explanation", class: "explain" }, el("span", { class: "muted" }, "…")),
    el("h2", {}, "Next fire times"), el("ol", { id: "next-fires" }),
    el("h2", {}, "History"), el("div", { id: "history-box" }));
  async function explain() {
    const body = { trigger: key };
    if (at.value.trim()) {
      const d = new Date(at.value.trim());
      if (isNaN(d)) { status("not a time: " + at.value, ""); return; }
      body.at = d.toISOString();
    }
    const r = await query("explain", body);
    fill("explanation",
      el("p", { id: "explain-summary" }, r.summary || ""),
      el("ul", { id: "explain-reasons" }, (r.reasons || []).map((x) =>
        el("li", { "data-code": x.code }, badge(x.code), " ", x.message || ""))));
  }
  async function refresh() {
    // Each section on its own: a trigger that is gone (a one-shot that fired) still has a
    // history and an explanation.
    await section("details", async () => {
      let t;
      try {
        t = await query("get_trigger", { trigger: key });
      } catch (e) {
        fill("actions");
        fill("next-fires");
        throw e;
      }
      fill("actions", pauseResume(t, refresh),
        writeButton("trigger-now", "trigger job now", "trigger_job", { job: { group: t.job.group, name: t.job.name } }, refresh));
      fill("details", el("dl", { class: "grid" },
        el("dt", {}, "state"), el("dd", { id: "state" }, badge(t.state)),
        el("dt", {}, "job"), el("dd", {}, jobLink(t.job), " (" + t.job.type + ")"),
        el("dt", {}, "schedule"), el("dd", {}, el("code", {}, schedule(t))),
        el("dt", {}, "calendar"), el("dd", {}, t.calendar || "none"),
        el("dt", {}, "misfire"), el("dd", {}, t.misfire),
        el("dt", {}, "priority"), el("dd", {}, String(t.priority)),
        el("dt", {}, "next fire"), el("dd", {}, time(t.nextFireTime)),
        el("dt", {}, "previous fire"), el("dd", {}, time(t.previousFireTime)),
        el("dt", {}, "times triggered"), el("dd", {}, String(t.timesTriggered))));
      const nf = await query("next_fire_times", { trigger: key, count: 10 });
      fill("next-fires", nf.fireTimes.length ? nf.fireTimes.map((x) => el("li", {}, time(x))) : el("li", { class: "muted" }, "it will not fire again"));
    });
    await section("history-box", async () => {
      const h = await query("history", { trigger: key, limit: 50 });
      fill("history-box", historyTable(h.events));
    });
    // The present is followed live; a time asked for is explained once, and stays as asked.
    if (!at.value.trim() || !explained) {
      explained = true;
      await section("explanation", explain);
    }
  }
  let explained = false;
  return { refresh };
}

function jobView(root, group, name) {
  const key = { group, name };
  root.append(el("h1", {}, "Job ", keyOf(key)), el("div", { class: "row", id: "actions" }),
    el("h2", {}, "Job"), el("div", { id: "details" }),
    el("h2", {}, "Triggers"), el("div", { id: "triggers" }),
    el("h2", {}, "Executing"), el("div", { id: "executing" }),
    el("h2", {}, "History"), el("div", { id: "history-box" }));
  async function refresh() {
    await section("details", async () => {
      let j;
      try {
        j = await query("get_job", { job: key });
      } catch (e) {
        fill("actions");
        fill("triggers");
        throw e;
      }
      fill("actions", writeButton("trigger-now", "trigger now", "trigger_job", { job: key }, refresh));
      fill("details", el("dl", { class: "grid" },
        el("dt", {}, "type"), el("dd", {}, j.type),
        el("dt", {}, "description"), el("dd", {}, j.description || ""),
        el("dt", {}, "durable"), el("dd", {}, j.durable ? "yes" : "no"),
        el("dt", {}, "non-concurrent"), el("dd", {}, j.nonconcurrent ? "yes" : "no"),
        el("dt", {}, "requests recovery"), el("dd", {}, j.requestsRecovery ? "yes" : "no"),
        el("dt", {}, "data"), el("dd", {}, el("pre", {}, JSON.stringify(j.data || {}, null, 2)))));
      fill("triggers", table(["trigger", "state", "next fire"], (j.triggers || []).map((t) =>
        el("tr", {}, el("td", {}, triggerLink(t)), el("td", {}, badge(t.state)), el("td", {}, time(t.nextFireTime))))));
    });
    await section("executing", async () => fill("executing", executingTable((await query("executing", { job: key })).executions)));
    await section("history-box", async () => fill("history-box", historyTable((await query("history", { job: key, limit: 50 })).events)));
  }
  return { refresh };
}

function executingTable(list) {
  return table(["fire", "job", "trigger", "node", "scheduled", "fired", ""], list.map((x) =>
    el("tr", {}, el("td", {}, el("code", {}, x.fireId.slice(0, 8) + "…")), el("td", {}, jobLink(x.job)),
      el("td", {}, triggerLink(x.trigger)), el("td", {}, x.instance), el("td", {}, time(x.scheduledTime)),
      el("td", {}, time(x.firedTime)),
      el("td", {}, writeButton(null, "interrupt", "interrupt_job", { fireId: x.fireId }, null)))), "executing-table");
}

function clusterView(root) {
  root.append(el("h1", {}, "Cluster"),
    el("h2", {}, "Scheduler nodes"), el("div", { id: "instances" }),
    el("h2", {}, "Workers"), el("div", { id: "workers" }),
    el("h2", {}, "Job types"), el("p", { class: "muted small" }, "As JetStream sees them: the workers of a type share one consumer."),
    el("div", { id: "job-types" }),
    el("h2", {}, "Executing"), el("div", { id: "executing" }));
  async function refresh() {
    const r = await query("instances", {});
    fill("instances", table(["instance", "last check-in", "check-in age", "interval", "epoch"], r.instances.map((i) =>
      el("tr", {}, el("td", {}, i.instanceId), el("td", {}, time(i.lastCheckin)), el("td", {}, i.sinceCheckin),
        el("td", {}, i.checkinInterval), el("td", {}, String(i.epoch))))));
    const w = await query("workers", {});
    fill("workers", table(["worker", "job types", "in flight", "started", "check-in age"],
      w.workers.map((x) => el("tr", { "data-worker": x.instance }, el("td", {}, x.instance), el("td", {}, x.jobTypes.join(", ")),
        el("td", {}, x.inFlight + " / " + x.concurrency), el("td", {}, time(x.started)), el("td", {}, x.sinceSeen)))));
    fill("job-types", table(["job type", "workers asking now", "runs in flight", "fires waiting", "last fire taken", "age"],
      w.jobTypes.map((x) => el("tr", { "data-job-type": x.jobType }, el("td", {}, x.jobType), el("td", {}, String(x.waiting)),
        el("td", {}, String(x.inFlight)), el("td", {}, String(x.pending)), el("td", {}, time(x.lastDelivered)),
        el("td", {}, x.lastDelivered ? ago(x.lastDelivered) : "—")))));
    const x = await query("executing", {});
    fill("executing", executingTable(x.executions));
  }
  return { refresh };
}

// ---- routing and live updates ----------------------------------------------------------------

// section runs load, showing its failure in the element id instead of the data.
async function section(id, load) {
  try {
    await load();
  } catch (e) {
    fill(id, el("p", { class: "muted" }, String(e && e.message ? e.message : e)));
  }
}

function showError(e) { status(String(e && e.message ? e.message : e), ""); }

async function route() {
  const hash = location.hash.replace(/^#\/?/, "") || "triggers";
  const [path, qs] = hash.split("?");
  const parts = path.split("/").map(decodeURIComponent);
  const params = new URLSearchParams(qs || "");
  const root = el("div");
  let view;
  if (parts[0] === "trigger" && parts.length === 3) view = triggerView(root, parts[1], parts[2], params);
  else if (parts[0] === "job" && parts.length === 3) view = jobView(root, parts[1], parts[2]);
  else if (parts[0] === "jobs") view = jobsView(root);
  else if (parts[0] === "cluster") view = clusterView(root);
  else view = triggersView(root);
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.nav === parts[0] || (parts[0] === "trigger" && a.dataset.nav === "triggers") || (parts[0] === "job" && a.dataset.nav === "jobs"));
  document.getElementById("view").replaceChildren(root);
  current = view;
  status("");
  await refreshNow();
}

let refreshing = false;
async function refreshNow() {
  if (!current || refreshing) return;
  refreshing = true;
  const view = current;
  try {
    await view.refresh();
    if (view === current) document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    showError(e);
  } finally {
    refreshing = false;
  }
}

function writesControl() {
  const box = document.getElementById("writes");
  if (settings.writes === "read-only") { box.replaceChildren(el("span", { class: "badge" }, "read-only")); return; }
  if (settings.writes === "off") { box.replaceChildren(el("span", { class: "badge", title: "the scheduler has no UI token (AGATE_UI_TOKEN)" }, "writes off")); return; }
  const input = el("input", { id: "token", type: "password", placeholder: "token for actions", size: "16", autocomplete: "off" });
  input.value = sessionStorage.getItem(TOKEN_KEY) || "";
  input.addEventListener("change", () => sessionStorage.setItem(TOKEN_KEY, input.value));
  box.replaceChildren(input);
}

async function start() {
  try {
    const res = await fetch("api/config");
    settings = await res.json();
  } catch (e) {
    showError(e);
  }
  document.getElementById("namespace").textContent = settings.namespace;
  writesControl();
  window.addEventListener("hashchange", () => route());
  setInterval(() => {
    if (document.getElementById("live").checked && document.visibilityState === "visible") refreshNow();
  }, REFRESH_MS);
  await route();
}

start();
