// The what-if page: a form bound to a scenario document; every change runs the
// scenario (the server's job replaces this tab's previous one) and shows its summary.
// No library: the page must work offline, and it only edits a mapping and draws tables.
"use strict";

const state = {
  doc: null,          // the scenario document (what a scenario YAML file holds)
  fields: [],         // the form's fields (des.ui.form.fields)
  templates: {},      // a kind's starting mapping, by the path of the mapping it replaces
  gpus: {},           // each catalog GPU's figures a user may override (des.ui.form.gpu_figures)
  carried: {},        // the keys a change of kind keeps, by mapping (des.ui.form.carried)
  owner: sessionStorage.getItem("des-owner") || Math.random().toString(36).slice(2),
  runId: null,        // the newest run job of this tab
  sweepId: null,      // the running sweep job, if any
  last: null,         // the newest finished run: {doc, result}
  lastSweep: null,    // the newest finished sweep: {doc, result, id}
  pins: {A: null, B: null},
  timer: null,
  loaded: null,       // the scenario as opened (the default, a file, a pin): its name, and its document
};
sessionStorage.setItem("des-owner", state.owner);

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") e.textContent = v; else if (v !== null && v !== undefined) e.setAttribute(k, v);
  }
  for (const kid of kids) if (kid !== null && kid !== undefined) e.append(kid);
  return e;
};

// -- the document ----------------------------------------------------------------------

function getPath(obj, path) {
  let cur = obj;
  for (const part of path.split(".")) {
    if (cur === null || typeof cur !== "object" || !(part in cur)) return undefined;
    cur = cur[part];
  }
  return cur;
}

function setPath(obj, path, value) {
  const parts = path.split(".");
  let cur = obj;
  parts.slice(0, -1).forEach((part, i) => {  // a list is walked by index (cluster.pools.0.tp)
    const list = Array.isArray(cur[part]) && /^\d+$/.test(parts[i + 1]);
    if (cur[part] === null || typeof cur[part] !== "object" || (Array.isArray(cur[part]) && !list)) cur[part] = {};
    cur = cur[part];
  });
  const last = parts[parts.length - 1];
  if (value === undefined) delete cur[last]; else cur[last] = value;
}

const clone = (x) => JSON.parse(JSON.stringify(x));
const NUMBER = /^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/;

// A typed value as the CLI's --set would read it: a number where it is one, else the text.
function typed(text) {
  const t = text.trim();
  if (t === "") return undefined;
  return NUMBER.test(t) ? Number(t) : t;
}

// A kind picked: its template replaces the mapping, keeping the values of the template's
// keys the old mapping set, and the keys every kind accepts (des.ui.form.carried).
function switchKind(parentPath, kind) {
  const template = clone(state.templates[parentPath][kind]);
  const old = getPath(state.doc, parentPath) || {};
  for (const key of Object.keys(template)) {
    if (key in old && typeof old[key] !== "object" && !["kind", "process", "dist"].includes(key)) template[key] = old[key];
  }
  for (const key of state.carried[parentPath] || []) if (key in old) template[key] = clone(old[key]);
  setPath(state.doc, parentPath, template);
}

// The deployment picked: its pools replace the old ones, each keeping the first old pool's
// hardware (des.ui.form.carried: its GPU and TP).
function switchPools(path, shape) {
  const pools = clone(state.templates[path][shape]);
  const old = (getPath(state.doc, path) || [])[0] || {};
  for (const pool of pools) for (const key of state.carried[path] || []) if (key in old) pool[key] = clone(old[key]);
  setPath(state.doc, path, pools);
}

// -- the form --------------------------------------------------------------------------

function parentOf(path) { return path.split(".").slice(0, -1).join("."); }

function visible(field) {
  for (const [path, values] of Object.entries(field.when || {})) {
    const v = getPath(state.doc, path);
    if (values.includes("*") ? v === undefined || v === null : !values.includes(v)) return false;
  }
  return true;
}

function buildForm() {
  const form = $("#form");
  form.replaceChildren();
  const groups = {};
  for (const f of state.fields) {
    if (!groups[f.group]) {
      groups[f.group] = el("fieldset", {}, el("legend", {text: f.group}));
      form.append(groups[f.group]);
    }
    const id = "f-" + f.path.replaceAll(".", "-");
    let input;
    if (f.kind === "select") {
      input = el("select", {id});
      for (const o of f.options) {
        input.append(el("option", {value: o, text: o === "" ? String(f.default ?? "(unset)") : (f.labels || {})[o] || o}));
      }
    } else if (f.kind === "check" || f.kind === "toggle" || f.kind === "override") {
      input = el("input", {id, type: "checkbox"});
    } else if (f.kind === "file") {
      input = el("input", {id, type: "file"});
    } else {
      input = el("input", {id, type: "text", inputmode: f.kind === "int" ? "numeric" : "decimal",
                           placeholder: f.default === undefined ? null : String(f.default)});
    }
    input.dataset.path = f.path;
    input.addEventListener("change", () => onField(f, input));
    let box = input;
    if (f.slider) {  // a slider beside the box: the scenario runs as it moves
      const [min, max, step] = f.slider;
      f.range = el("input", {type: "range", min, max, step, "data-slider": f.path});
      f.range.addEventListener("input", () => { input.value = f.range.value; onField(f, input); });
      box = el("div", {class: "with-slider"}, input, f.range);
    }
    const row = el("div", {class: "field", "data-field": f.path}, el("label", {for: id, text: f.label}), box,
                   f.kind === "file" ? el("div", {class: "note"}) : null,
                   el("div", {class: "error", "data-error-for": f.path}));
    groups[f.group].append(row);
    f.row = row; f.input = input;
  }
}

function fillForm() {
  for (const f of state.fields) {
    f.row.hidden = !visible(f);
    const v = getPath(state.doc, f.path);
    if (f.kind === "check") f.input.checked = v === undefined ? f.default !== false : Boolean(v);
    else if (f.kind === "toggle" || f.kind === "override") f.input.checked = v !== undefined && v !== null;
    else if (f.kind === "select" && f.path === "gpu") f.input.value = typeof v === "object" ? v.base : String(v);
    else if (f.kind === "file") f.row.querySelector(".note").textContent = v ? "now: " + String(v).split("/").pop() : "";
    else if (f.kind === "select") f.input.value = v === undefined ? "" : String(v);
    else if (document.activeElement !== f.input) f.input.value = v === undefined ? "" : String(v);
    if (f.range && document.activeElement !== f.range && typeof v === "number") f.range.value = v;
  }
}

async function onField(f, input) {
  const kindKey = ["kind", "process", "dist"].includes(f.path.split(".").pop());
  const parent = parentOf(f.path);
  const gpu = getPath(state.doc, "gpu");
  if (f.path === "gpu" && typeof gpu === "object") {  // another GPU to override: its own figures
    state.doc.gpu = {base: input.value, ...clone(state.gpus[input.value] || {})};
  } else if (f.kind === "override") {
    const name = typeof gpu === "object" ? gpu.base : gpu;
    state.doc.gpu = input.checked ? {base: name, ...clone(state.gpus[name] || {})} : name;
  } else if (f.kind === "select" && f.replaces && (state.templates[f.replaces] || {})[input.value]) {
    switchPools(f.replaces, input.value);
  } else if (f.kind === "select" && kindKey && state.templates[parent] && state.templates[parent][input.value]) {
    switchKind(parent, input.value);
  } else if (f.kind === "select") {
    setPath(state.doc, f.path, input.value === "" ? undefined : input.value);
  } else if (f.kind === "check") {
    setPath(state.doc, f.path, input.checked);
  } else if (f.kind === "toggle") {
    setPath(state.doc, f.path, input.checked ? clone(state.templates[f.path].on) : undefined);
  } else if (f.kind === "file") {
    if (!input.files.length) return;
    const file = input.files[0];
    const r = await fetch("/api/upload?name=" + encodeURIComponent(file.name), {method: "POST", body: file});
    if (!r.ok) {
      const why = await r.json().then((j) => j.detail, () => r.statusText);
      showProblems([{path: f.path, line: `error: ${f.path}: ${file.name} was not uploaded: ${why}`}]);
      setStatus("the upload failed: see the red line", "error");
      return;
    }
    setPath(state.doc, f.path, (await r.json()).path);
  } else {
    setPath(state.doc, f.path, typed(input.value));
  }
  changed();
}

// The scenario as opened (the default, a file, a pin), whose name an edited scenario
// takes with "-edited": a downloaded file (and des run's folder) then says it is not the original.
function opened(doc) { state.loaded = {name: doc.name, doc: clone(doc)}; }

function nameForEdits() {
  if (!state.loaded) return;
  const {name, ...mine} = state.doc;
  const {name: was, ...theirs} = state.loaded.doc;
  const same = JSON.stringify(mine) === JSON.stringify(theirs);
  const base = state.loaded.name || "scenario";
  state.doc.name = same ? state.loaded.name : base + "-edited";
  if (state.doc.name === undefined) delete state.doc.name;
}

function changed() {
  nameForEdits();
  fillForm();
  showYaml();
  clearTimeout(state.timer);
  state.timer = setTimeout(runNow, 250);
}

// -- problems, next to their fields ------------------------------------------------------

// The field a problem at ``path`` belongs by: the field of that path or of a mapping
// holding it; else, for a key the form has no field for (an unknown key in an uploaded
// file), the field that picks the kind of the mapping holding it. None: no such field.
function fieldFor(path) {
  let best = null;
  for (const f of state.fields) {
    if (f.row.hidden) continue;
    if ((path === f.path || path.startsWith(f.path + ".")) && (!best || f.path.length > best.path.length)) best = f;
  }
  if (best) return best;
  for (const f of state.fields) {
    const parent = parentOf(f.path);
    const kindKey = ["kind", "process", "dist"].includes(f.path.split(".").pop());
    if (!f.row.hidden && kindKey && parent && path.startsWith(parent + ".") && (!best || parent.length > parentOf(best.path).length)) best = f;
  }
  return best;
}

function clearProblems() {
  for (const f of state.fields) { f.row.classList.remove("invalid"); f.row.querySelector(".error").textContent = ""; }
  $("#general-errors").replaceChildren();
}

function showProblems(problems) {
  clearProblems();
  for (const p of problems) {
    const f = p.path ? fieldFor(p.path) : null;
    if (f) {
      f.row.classList.add("invalid");
      const box = f.row.querySelector(".error");
      box.textContent = (box.textContent ? box.textContent + "\n" : "") + p.line;
    } else {
      $("#general-errors").append(el("li", {text: p.line}));
    }
  }
}

// -- jobs ------------------------------------------------------------------------------

async function postJSON(url, body) {
  const r = await fetch(url, {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)});
  if (!r.ok) throw new Error(`${url}: ${r.status} ${await r.text()}`);
  return r.json();
}

async function poll(id, onProgress) {
  for (;;) {
    const r = await fetch("/api/jobs/" + id);
    if (!r.ok) throw new Error("job " + id + ": " + r.status);
    const job = await r.json();
    if (["done", "error", "cancelled"].includes(job.state)) return job;
    onProgress(job);
    await new Promise((ok) => setTimeout(ok, 120));
  }
}

// The answer on show is not the form's (the form's scenario has problems, or its run failed).
function stale(yes) { for (const id of ["#summary", "#summary-rows", "#latency"]) $(id).classList.toggle("stale", yes); }

function setStatus(text, st) { const s = $("#status"); s.textContent = text; s.dataset.state = st; }

async function runNow() {
  const doc = clone(state.doc);
  setStatus("checking", "running");
  let sub;
  try { sub = await postJSON("/api/jobs", {kind: "run", doc, owner: state.owner, replace: true}); }
  catch (e) { setStatus(String(e), "error"); return; }
  if (!sub.id) {
    showProblems(sub.problems);
    setStatus("the scenario has problems: see the red lines", "error");
    stale(true);
    return;
  }
  clearProblems();
  state.runId = sub.id;
  $("#run-cancel").disabled = false;
  const bar = $("#run-progress");
  bar.value = 0;
  const job = await poll(sub.id, (j) => {
    if (state.runId !== sub.id) return;
    setStatus("running: " + j.message, "running");
    bar.value = j.progress || 0;
  });
  if (state.runId !== sub.id) return;  // a newer change replaced this run
  $("#run-cancel").disabled = true;
  bar.value = job.state === "done" ? 1 : 0;
  stale(job.state !== "done");
  if (job.state === "done") {
    state.last = {doc, result: job.result, id: sub.id};
    showRun(job.result);
    setStatus(`done: simulated in ${job.result.wall.toFixed(2)} s`, "done");
    $("#summary").dataset.job = sub.id;
  } else if (job.state === "error") {
    showProblems(job.problems);
    setStatus("the run failed: see the red lines", "error");
  } else {
    setStatus("cancelled", "cancelled");
  }
}

// -- the summary ----------------------------------------------------------------------

const CARDS = [
  ["throughput_rps", "throughput", "req/s"],
  ["output_tokens_per_s", "output tokens", "tok/s"],
  ["ttft_p50", "TTFT p50", "s"],
  ["ttft_p99", "TTFT p99", "s"],
  ["tpot_p50", "TPOT p50", "s"],
  ["tpot_p99", "TPOT p99", "s"],
  ["gpu_busy_fraction", "GPU busy", ""],
  ["stable", "stable", ""],
];
// Cards shown only when the run has them (an SLO set, prices known).
const MORE_CARDS = [
  ["slo_attainment", "SLO met by", ""],
  ["goodput_rps", "goodput", "req/s"],
  ["cost_per_million_tokens", "$ per M output tokens", ""],
];

function fmt(v) {
  if (v === null || v === undefined) return "-";
  if (typeof v === "boolean") return v ? "yes" : "NO";
  if (typeof v === "string") return v;
  if (Number.isInteger(v)) return v.toLocaleString("en-US");
  if (Math.abs(v) >= 100) return v.toLocaleString("en-US", {maximumFractionDigits: 1, minimumFractionDigits: 1});
  return Number(v.toPrecision(4)).toString();
}

function showRun(result) {
  const s = result.summary;
  const cards = $("#summary");
  cards.replaceChildren();
  for (const [key, label, unit] of [...CARDS, ...MORE_CARDS.filter(([k]) => s[k] !== null && s[k] !== undefined)]) {
    const v = s[key];
    const value = el("div", {class: "value" + (v === false ? " bad" : ""), "data-key": key,
                             "data-value": v === null || v === undefined ? "" : String(v), text: fmt(v)});
    cards.append(el("div", {class: "card"}, el("div", {class: "label", text: label + (unit ? ` (${unit})` : "")}), value));
  }
  const rows = $("#summary-rows");
  rows.replaceChildren(...result.rows.map(([k, v]) => el("tr", {}, el("td", {text: k}), el("td", {text: v}))));
  $("#latency").replaceChildren(tableHead(["latency (s)", ...result.latency.columns]),
    ...result.latency.rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {text: c})))));
  $("#warnings").replaceChildren(...result.warnings.map((w) => el("p", {class: "warning", text: "warning: " + w})));
}

function tableHead(cols) { return el("tr", {}, ...cols.map((c) => el("th", {text: c}))); }

// -- pins ------------------------------------------------------------------------------

// B against A for a number both pins have: their ratio ("x1.52"), or "-".
function ratio(a, b) {
  if (typeof a !== "number" || typeof b !== "number") return "";
  if (a === 0) return b === 0 ? "x1" : "-";
  return "x" + Number((b / a).toPrecision(3)).toString();
}

const PIN_ROWS = [
  ["hardware", null], ["scheduler", null], ["workload", null],
  ["throughput_rps", "throughput (req/s)"], ["output_tokens_per_s", "output tok/s"],
  ["ttft_p50", "TTFT p50 (s)"], ["ttft_p99", "TTFT p99 (s)"], ["tpot_p50", "TPOT p50 (s)"],
  ["tpot_p99", "TPOT p99 (s)"], ["e2e_p99", "end-to-end p99 (s)"], ["gpu_busy_fraction", "GPU busy"],
  ["cost_per_million_tokens", "$ per million output tokens"], ["stable", "stable"], ["capacity", "capacity under the SLO"],
];

async function pin(which) {
  if (!state.last) return;
  const same = state.lastSweep && JSON.stringify(state.lastSweep.doc) === JSON.stringify(state.last.doc);
  const sweep = same ? {...state.lastSweep} : null;
  if (sweep) {  // the figure kept in the page: the server forgets old jobs
    const r = await fetch(`/api/jobs/${sweep.id}/figure.png`);
    if (r.ok) sweep.figure = URL.createObjectURL(await r.blob());
  }
  state.pins[which] = {doc: clone(state.last.doc), result: state.last.result, sweep};
  showPins();
}

// A mapping in a line: "continuous: max_num_seqs 128, prefill {instances 1}".
function settings(m) {
  const words = (x) => (x !== null && typeof x === "object"
    ? "{" + Object.entries(x).map(([k, v]) => `${k} ${words(v)}`).join(", ") + "}" : String(x));
  const {kind, ...rest} = m;
  return `${kind || ""}: ${words(rest).slice(1, -1)}`;
}

// A scheduler mapping with the settings vLLM's defaults filled put first, each marked:
// "max_num_seqs 256 (vLLM default)". Pools filled alike share the marks; pools filled
// differently get theirs after the scheduler's own settings ("vLLM defaults {prefill {...}}").
const DEFAULTED = ["max_num_seqs", "max_num_batched_tokens", "gpu_memory_utilization"];
function resolved(scheduler, filled, pools) {
  const {kind, ...rest} = scheduler;
  const first = filled[0] || {};
  if (filled.every((f) => JSON.stringify(f) === JSON.stringify(first))) {
    const marked = Object.fromEntries(DEFAULTED.concat(Object.keys(first).filter((k) => !DEFAULTED.includes(k)))
      .filter((k) => k in first && !(k in rest)).map((k) => [k, `${first[k]} (vLLM default)`]));
    return {kind, ...marked, ...rest};
  }
  return {kind, ...rest, "vLLM defaults": Object.fromEntries(filled.map((f, i) => [pools[i]?.role || `pool ${i}`, f]))};
}

function pinCell(p, key) {
  if (!p) return "";
  const rows = Object.fromEntries(p.result.rows);
  if (key === "hardware" || key === "workload") return rows[key] || "";
  if (key === "scheduler") {  // the policy, and a split's pools
    const pools = getPath(p.doc, "cluster.pools") || [];
    const split = pools.length > 1 ? "; pools " + pools.map((q) => `${q.role} {instances ${q.instances ?? 1}}`).join(", ") : "";
    return settings(resolved(p.doc.scheduler || {kind: "continuous"}, p.result.engine_defaults || [], pools)) + split;
  }
  if (key === "capacity") return p.sweep ? p.sweep.result.capacity : "(no sweep)";
  return fmt(p.result.summary[key]);
}

function showPins() {
  const cols = [["A", state.pins.A], ["B", state.pins.B]].filter(([, p]) => p);
  const both = cols.length === 2;
  $("#pins-box").hidden = cols.length === 0;
  const table = $("#pins");
  table.replaceChildren(tableHead(["", ...cols.map(([n]) => n), ...(both ? ["B / A"] : [])]));
  for (const [key, label] of PIN_ROWS) {
    const vs = both ? [el("td", {"data-ratio": "", text: ratio(state.pins.A.result.summary[key],
                                                             state.pins.B.result.summary[key])})] : [];
    table.append(el("tr", {"data-row": key}, el("td", {text: label || key}),
      ...cols.map(([n, p]) => el("td", {"data-pin": n, text: pinCell(p, key)})), ...vs));
  }
  table.append(el("tr", {}, el("td", {}), ...cols.map(([n]) => {
    const b = el("button", {text: "Load " + n});
    b.addEventListener("click", () => { state.doc = clone(state.pins[n].doc); opened(state.doc); changed(); });
    return el("td", {}, b);
  })));
  $("#pin-figures").replaceChildren(...cols.filter(([, p]) => p.sweep).map(([n, p]) =>
    el("figure", {}, el("figcaption", {text: n}), el("img", {src: p.sweep.figure || "", alt: n}))));
}

// -- the sweep -------------------------------------------------------------------------

async function sweep() {
  const doc = clone(state.doc);
  const fractions = $("#sweep-fractions").value.split(/[\s,]+/).filter(Boolean).map(Number);
  const replications = Number($("#sweep-replications").value);
  const errors = $("#sweep-errors");
  errors.replaceChildren();
  if (fractions.some((f) => !Number.isFinite(f))) {
    errors.append(el("li", {text: "error: fractions: give numbers, separated by commas"}));
    return;
  }
  let sub;
  try { sub = await postJSON("/api/jobs", {kind: "sweep", doc, owner: state.owner, fractions, replications}); }
  catch (e) { errors.append(el("li", {text: "error: " + e.message})); return; }
  if (!sub.id) { sub.problems.forEach((p) => errors.append(el("li", {text: p.line}))); return; }
  state.sweepId = sub.id;
  const bar = $("#sweep-progress");
  bar.hidden = false; bar.value = 0;
  $("#sweep-button").disabled = true; $("#sweep-cancel").disabled = false;
  $("#sweep-status").textContent = "starting";
  const job = await poll(sub.id, (j) => { bar.value = j.progress || 0; $("#sweep-status").textContent = j.message; });
  $("#sweep-button").disabled = false; $("#sweep-cancel").disabled = true;
  state.sweepId = null;
  if (job.state === "done") {
    bar.value = 1;
    state.lastSweep = {doc, result: job.result, id: sub.id};
    showSweep(job.result, sub.id, job.wall);
  } else if (job.state === "error") {
    bar.hidden = true;
    job.problems.forEach((p) => errors.append(el("li", {text: p.line})));
    $("#sweep-status").textContent = "failed";
  } else {
    bar.hidden = true;
    $("#sweep-status").textContent = "cancelled";
  }
}

function showSweep(result, id, wall) {
  $("#sweep-result").hidden = false;
  $("#sweep-status").textContent = `done in ${wall.toFixed(1)} s (${result.replications} replications a point)`;
  const ci = result.ci.map((v) => (v === null ? "open" : v.toFixed(2)));
  $("#sweep-capacity").textContent =
    `capacity under ${result.slo_text}: ${result.capacity} (95 % interval ${ci[0]} to ${ci[1]})` +
    (result.saturation ? `; saturation ${result.saturation.toFixed(2)} req/s` : "");
  $("#sweep-figure").src = `/api/jobs/${id}/figure.png`;
  $("#sweep-png").href = `/api/jobs/${id}/figure.png`;
  $("#sweep-svg").href = `/api/jobs/${id}/figure.svg`;
  const t = $("#sweep-points");
  t.replaceChildren(tableHead(result.points.columns.map((c) => c.replace("workload.arrival.", ""))),
    ...result.points.rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {text: fmt(c)})))));
}

// -- YAML in and out -------------------------------------------------------------------

async function showYaml() {
  const r = await fetch("/api/scenario.yaml", {method: "POST", headers: {"Content-Type": "application/json"},
                                                body: JSON.stringify(state.doc)});
  if (r.ok) $("#yaml-text").value = await r.text();
}

async function loadYaml(body, name) {
  const r = await fetch("/api/parse?name=" + encodeURIComponent(name), {method: "POST", body});
  const out = await r.json();
  if (!out.doc) { showProblems(out.problems); setStatus("the file has problems: see the red lines", "error"); return; }
  state.doc = out.doc;
  opened(state.doc);
  changed();
}

async function downloadYaml() {
  const r = await fetch("/api/scenario.yaml", {method: "POST", headers: {"Content-Type": "application/json"},
                                                body: JSON.stringify(state.doc)});
  const name = (r.headers.get("Content-Disposition") || "").match(/filename="([^"]+)"/);
  const a = el("a", {href: URL.createObjectURL(await r.blob()), download: name ? name[1] : "scenario.yaml"});
  document.body.append(a);
  a.click();
  a.remove();
}

// -- the results browser ---------------------------------------------------------------

async function listResults() {
  const out = await (await fetch("/api/results")).json();
  $("#results-root").textContent = out.root;
  const list = $("#results-list");
  list.replaceChildren();
  if (!out.entries.length) list.append(el("li", {text: "no des run, sweep or plan folders here"}));
  for (const e of out.entries) {
    const li = el("li", {"data-path": e.path}, el("span", {class: "kind", text: e.kind}), e.path);
    li.addEventListener("click", () => { list.querySelectorAll("li").forEach((x) => x.classList.remove("active"));
                                         li.classList.add("active"); viewResult(e.path); });
    list.append(li);
  }
}

async function viewResult(path) {
  const box = $("#results-view");
  const r = await fetch("/api/results/view?path=" + encodeURIComponent(path));
  if (!r.ok) { box.replaceChildren(el("p", {class: "errors", text: (await r.json()).detail})); return; }
  const v = await r.json();
  box.replaceChildren(el("h2", {text: `${v.kind}: ${v.path}`}));
  const q = encodeURIComponent(path);
  if (v.kind === "sweep") {
    box.append(el("img", {src: `/api/results/figure.png?path=${q}`, alt: "latency against load",
                          onerror: "this.remove()"}),
               el("p", {class: "downloads"}, el("a", {href: `/api/results/figure.png?path=${q}`, download: "", text: "PNG"}),
                  " · ", el("a", {href: `/api/results/figure.svg?path=${q}`, download: "", text: "SVG"})));
  }
  for (const f of v.figures) {
    const src = "/api/results/file?path=" + encodeURIComponent(f);
    box.append(el("figure", {}, el("img", {src, alt: f}), el("figcaption", {}, el("a", {href: src, download: "", text: f}))));
  }
  for (const t of v.tables) {
    const more = t.total > t.rows.length ? ` (first ${t.rows.length} of ${t.total})` : "";
    const grid = el("table", {class: "grid", "data-table": t.title}, tableHead(t.columns), ...t.rows.map((row) =>
      el("tr", {}, ...row.map((c) => el("td", {text: fmt(c ?? null)})))));
    if (t.folded) box.append(el("details", {}, el("summary", {text: t.title + more}), grid));
    else box.append(el("h2", {text: t.title + more}), grid);
  }
  for (const t of v.texts) box.append(el("details", {}, el("summary", {text: t.title}), el("pre", {text: t.text})));
}

// -- wiring ----------------------------------------------------------------------------

function show(view) {
  for (const b of document.querySelectorAll(".tab")) b.classList.toggle("active", b.dataset.view === view);
  $("#view-whatif").hidden = view !== "whatif";
  $("#view-results").hidden = view !== "results";
  if (view === "results") listResults();
}

async function start() {
  const spec = await (await fetch("/api/form")).json();
  state.fields = spec.fields; state.templates = spec.templates; state.doc = spec.doc; state.gpus = spec.gpus;
  state.carried = spec.carried;
  state.default = clone(spec.doc);
  opened(state.default);
  history.replaceState(null, "", "/");  // the token is in a cookie now: not left in the address bar
  buildForm();
  for (const b of document.querySelectorAll(".tab")) b.addEventListener("click", () => show(b.dataset.view));
  $("#download-yaml").addEventListener("click", downloadYaml);
  $("#reset").addEventListener("click", () => { state.doc = clone(state.default); opened(state.doc); changed(); });
  $("#open-yaml").addEventListener("change", (e) => {
    const file = e.target.files[0];
    if (file) loadYaml(file, file.name);
    e.target.value = "";
  });
  $("#yaml-apply").addEventListener("click", () => loadYaml($("#yaml-text").value, "the YAML box"));
  $("#run-cancel").addEventListener("click", () => state.runId && fetch(`/api/jobs/${state.runId}/cancel`, {method: "POST"}));
  $("#pin-a").addEventListener("click", () => pin("A"));
  $("#pin-b").addEventListener("click", () => pin("B"));
  $("#sweep-button").addEventListener("click", sweep);
  $("#sweep-cancel").addEventListener("click", () => state.sweepId && fetch(`/api/jobs/${state.sweepId}/cancel`, {method: "POST"}));
  $("#results-refresh").addEventListener("click", listResults);
  fillForm();
  showYaml();
  runNow();
}

start();
