// danlu's dashboard: reads the REST API (/api/v1) with the token its user pastes in, kept in
// this tab's sessionStorage only. Every value from the API is written as text (textContent),
// never as markup: job names, reasons and node names are user input.
"use strict";

const API = "/api/v1";
const TOKEN_KEY = "danlu-token";
const REFRESH_MS = 2000;
const REQUEST_TIMEOUT_MS = 30000;  // the longest one API request may take
const UNFINISHED = ["PENDING", "RUNNING", "PREEMPTING", "RESTARTING"];
const ACTIVE = ["RUNNING", "PREEMPTING", "RESTARTING"];  // on GPUs, or about to be again
const SHOWN_JOBS = 200;  // rows of the Jobs table
const SHOWN_SWEEPS = 20;  // the newest sweeps, besides every RUNNING one
const API_LIMIT = 1000;  // the most one list request returns
const USAGE_EVERY = 15;  // refreshes between two asks for /usage (a week of history): ~30 s
const FEED_EVENTS = 30;
// a token as the server makes it: dl_<prefix>_<secret>, of letters, digits, "_" and "-"
// (secrets.token_urlsafe); anything else, such as a pasted quote or a zero-width space, is
// no token, and fetch() would refuse it in a header before asking the server
const TOKEN_CHARS = /^[A-Za-z0-9_-]+$/;
const NOT_A_TOKEN = "a danlu token holds only letters, digits, '_' and '-': paste it again";
let timer = null;
let retry = null;  // the next try of start() after a passing error (see passing())
let me = null;
let signIns = 0;  // of the newest start() or signOut(): an older start() goes no further
let refreshes = 0;
let generation = 0;  // of the newest refresh(): an older one ending after it renders nothing
let refreshing = 0;  // the generation of the newest refresh while it is in flight, else 0
let shownJob = null;  // the id of the job whose detail panel is open
let shownEnded = false;  // that job had ended when the panel last showed it
// the last action's failure (a Cancel refused, ...): the status line keeps it after each
// refresh until the next action or sign-out, so that a refresh 2 s later does not wipe it
let actionError = "";

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function actionFailed(text) {
  actionError = text;
  setStatus(text, true);
}

function setStatus(text, error) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.className = error ? "error" : "";
}

async function api(path, options) {
  return request(path, options, (response) => response.json());
}

async function request(path, options, read) {
  // the answer to one API request, read by read(response); one not read in full within
  // REQUEST_TIMEOUT_MS is given up with an error (no status: a passing one), so that the page
  // never waits for ever on a server or proxy that holds the connection, saying it is current
  const init = options || {};
  const headers = { Authorization: "Bearer " + sessionStorage.getItem(TOKEN_KEY) };
  if (init.body !== undefined) headers["Content-Type"] = "application/json";
  const controller = new AbortController();
  const timeout = setTimeout(() => controller.abort(), REQUEST_TIMEOUT_MS);
  try {
    const response = await fetch(API + path, { ...init, headers, signal: controller.signal });
    if (!response.ok) {
      let message = response.status + " " + response.statusText;
      try {
        const body = await response.json();
        if (body && body.error && body.error.message) message = body.error.message;
      } catch (_) {
        // not JSON: keep the status line
      }
      const error = new Error(message);
      error.status = response.status;
      throw error;
    }
    return await read(response);
  } catch (error) {
    if (controller.signal.aborted && error.status === undefined) {
      throw new Error("no answer from the server in " + REQUEST_TIMEOUT_MS / 1000 + " s");
    }
    throw error;
  } finally {
    clearTimeout(timeout);
  }
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(n) || 0;
  let i = 0;
  while (value >= 1024 && i < units.length - 1) {
    value /= 1024;
    i += 1;
  }
  return value.toFixed(i ? 1 : 0) + units[i];
}

function age(seconds) {
  const s = Math.max(0, Date.now() / 1000 - seconds);
  if (s < 120) return Math.round(s) + "s";
  if (s < 7200) return Math.round(s / 60) + "m";
  if (s < 172800) return (s / 3600).toFixed(1) + "h";
  return Math.round(s / 86400) + "d";
}

function bar(used, total) {
  const cell = el("td");
  const outer = el("span", null, "bar");
  const inner = el("span");
  const share = total > 0 ? Math.min(1, used / total) : 0;
  inner.style.width = (share * 100).toFixed(1) + "%";
  outer.appendChild(inner);
  cell.appendChild(outer);
  cell.appendChild(document.createTextNode(bytes(used) + " / " + bytes(total)));
  return cell;
}

function renderNodes(nodes) {
  const body = document.querySelector("#nodes tbody");
  const rows = [];
  let gpus = 0;
  let allocated = 0;
  const states = {};
  for (const node of nodes) {
    const state = node.state || "ready";
    const name = node.name + (node.fake ? " (fake)" : "");  // as danlu nodes and top say it
    states[state] = (states[state] || 0) + 1;
    let why = state !== "ready" && node.cordon_reason ? state + ": " + node.cordon_reason : state;
    if (node.close_at !== null && node.close_at !== undefined) {  // a maintenance window
      const when = new Date(node.close_at * 1000).toLocaleString();
      why += "; " + node.close_action + " at " + when + (node.close_reason ? ": " + node.close_reason : "");
    }
    if (node.gpus.length === 0) {
      // a node with no GPUs (a CPU node of a Slurm partition, one whose GPUs all left the
      // reading): a row of its own all the same, with its state and its admin's actions
      const row = el("tr");
      row.dataset.node = node.name;
      row.appendChild(el("td", name));
      row.appendChild(el("td", why, "node-" + state));
      for (let i = 0; i < 5; i += 1) row.appendChild(el("td", "-"));  // gpu .. jobs
      row.appendChild(nodeActions(node, state));
      rows.push(row);
      continue;
    }
    node.gpus.forEach((gpu, i) => {
      gpus += 1;
      allocated += (gpu.allocated_milli || 0) / 1000;
      const row = el("tr");
      row.dataset.node = node.name;
      row.appendChild(el("td", i === 0 ? name : ""));
      row.appendChild(el("td", i === 0 ? why : "", "node-" + state));
      const gpuState = gpu.state || "ready";
      const gpuWhy = gpuState === "ready" ? "" : " (" + gpuState + (gpu.cordon_reason ? ": " + gpu.cordon_reason : "") + ")";
      row.appendChild(el("td", gpu.index + gpuWhy, gpuState === "ready" ? "number" : "number node-" + gpuState));
      row.appendChild(el("td", gpu.type));
      row.appendChild(bar(gpu.allocated_memory || 0, gpu.memory || 0));
      row.appendChild(el("td", Math.round((gpu.allocated_milli || 0) / 10) + "%", "number"));
      row.appendChild(el("td", (gpu.jobs || []).join(", ") || "-"));
      const cell = i === 0 ? nodeActions(node, state) : el("td");
      gpuAction(cell, node.name, gpu);
      row.appendChild(cell);
      rows.push(row);
    });
  }
  body.replaceChildren(...rows);
  const nodeStates = Object.entries(states).map(([s, n]) => n + " " + s).join(", ");
  document.getElementById("summary").textContent =
    nodes.length + " node(s) (" + nodeStates + "), " + gpus + " GPU(s), " +
    allocated.toFixed(1) + " allocated";
}

function nodeActions(node, state) {
  const cell = el("td");
  if (!me || me.role !== "admin") return cell;
  const add = (label, what) => {
    const button = el("button", label);
    button.type = "button";
    button.dataset.action = what;
    button.addEventListener("click", () => {
      const asked = closeAsked(node, state, what);
      if (asked !== null) nodeAct(node.name, what, undefined, asked);
    });
    cell.appendChild(button);
  };
  if (state === "ready") add("Cordon", "cordon");
  if (state !== "draining") add("Drain", "drain");
  // it also drops a cordon or drain scheduled for the node (a maintenance window)
  const scheduled = node.close_at !== null && node.close_at !== undefined;
  if (state !== "ready" || scheduled) add("Uncordon", "uncordon");
  return cell;
}

function gpuAction(cell, name, gpu) {
  // an admin closes or opens one GPU of the node (the node's other GPUs are left as they are)
  if (!me || me.role !== "admin") return;
  const gpuState = gpu.state || "ready";
  const what = gpuState === "ready" ? "cordon" : "uncordon";
  const button = el("button", (what === "cordon" ? "Close GPU " : "Open GPU ") + gpu.index);
  button.type = "button";
  button.dataset.action = what + "-gpu";
  button.addEventListener("click", () => {
    let asked = {};
    if (what === "cordon") {
      const jobs = (gpu.jobs || []).length;
      const note = jobs ? " Its " + jobs + " job(s) run on; nothing new starts on it." : "";
      asked = askReason("Close GPU " + gpu.index + " of node " + name + " to new work?" + note);
    }
    if (asked !== null) nodeAct(name, what, gpu.index, asked);
  });
  cell.appendChild(button);
}

function askReason(question) {
  // the body of a new cordon or drain, with the reason the admin gives (a prompt: the
  // confirmation too; left empty, the default names them), or null when they cancel
  const byWhom = "from the dashboard by " + me.name;
  const given = window.prompt(question + "\nWhy (shown with the node):", byWhom);
  if (given === null) return null;
  return { reason: given.trim() || byWhom };
}

function closeAsked(node, state, what) {
  // what a Cordon or Drain of the node sends, once confirmed (null: not confirmed). A node
  // already closed keeps its reason: none is sent, and the API keeps the one it has
  if (what === "uncordon") return {};
  const jobs = new Set(node.gpus.flatMap((gpu) => gpu.jobs || [])).size;
  const preempted = what === "drain"
    ? " Its " + jobs + " job(s) will be preempted by checkpoint (one that is not preemptible runs to its end)."
    : jobs ? " Its " + jobs + " job(s) run on; nothing new starts on it." : "";
  const question = (what === "drain" ? "Drain" : "Cordon") + " node " + node.name + "?" + preempted;
  if (state === "ready") return askReason(question);
  const kept = node.cordon_reason ? " It stays " + state + ": " + node.cordon_reason + "." : "";
  return window.confirm(question + kept) ? {} : null;
}

async function nodeAct(name, what, gpu, asked) {
  // asked: the body the admin confirmed (a reason for a new close), or nothing
  actionError = "";
  try {
    const body = { ...(asked || {}) };
    if (gpu !== undefined) body.gpu = gpu;
    const options = { method: "POST", body: JSON.stringify(body) };
    await api("/cluster/nodes/" + encodeURIComponent(name) + "/" + what, options);
    await refresh();
  } catch (error) {
    const where = gpu === undefined ? name : name + " GPU " + gpu;
    actionFailed(what + " " + where + ": " + error.message);
  }
}

function needsEndReason(job) {
  // an ended job with no GPUs held and no exit code (cancelled or failed before it ran, or
  // stopped without a run's exit): its "where / why" is its end_reason, as danlu ls says it
  return !UNFINISHED.includes(job.state) && !(job.allocation && job.allocation.length) &&
    (job.exit_code === null || job.exit_code === undefined) && !job.pending_reason;
}

function where(job) {
  if (job.allocation && job.allocation.length) {
    return job.allocation.map((a) => a.node + ":" + a.gpu).join(" ");
  }
  if (job.pending_reason) return job.pending_reason;
  if (job.exit_code !== null && job.exit_code !== undefined) return "exit " + job.exit_code;
  // the reason of the event that ended it (a server older than the field sends none)
  const ended = needsEndReason(job) ? job.end_reason : undefined;
  if (!ended) return "";
  return job.started_at === null || job.started_at === undefined ? ended + " (before it ran)" : ended;
}

function actions(job) {
  const cell = el("td");
  const mine = me && (me.role === "admin" || me.name === job.user);
  if (!mine) return cell;
  const add = (label, what) => {
    const button = el("button", label);
    button.type = "button";
    button.dataset.action = what;
    button.addEventListener("click", () => {
      const sure = what !== "cancel" || window.confirm(
        "Cancel job " + job.id + " (" + job.name + ", " + job.user + ", " + job.state + ")?");
      if (sure) act(job, what);
    });
    cell.appendChild(button);
  };
  if (!UNFINISHED.includes(job.state)) {
    add("Rerun", "rerun");  // a new job with the same spec
    return cell;
  }
  // a running job is held by checkpoint: not one whose spec says it cannot be preempted
  const holdable = job.held_at || job.state !== "RUNNING" || (job.spec || {}).preemptible !== false;
  if (holdable) add(job.held_at ? "Release" : "Hold", job.held_at ? "release" : "hold");
  add("Cancel", "cancel");
  return cell;
}

function gpusText(job) {
  // as danlu ls: "2", "1 x 10.0GiB", or a share of one GPU as its fraction, "0.25"
  const fraction = ((job.spec || {}).resources || {}).gpu_fraction;
  const share = typeof fraction === "number" && fraction > 0 && fraction < 1;
  const gpus = share ? String(Number(fraction.toPrecision(6))) : (job.gpus ?? "-");
  return job.gpu_memory ? gpus + " x " + bytes(job.gpu_memory) : String(gpus);
}

function renderJobs(jobs) {
  const body = document.querySelector("#jobs tbody");
  const rows = jobs.map((job) => {
    const row = el("tr");
    row.dataset.job = job.id;
    const idCell = el("td");
    const open = el("button", job.id, "link");
    open.type = "button";
    open.dataset.action = "show";
    open.addEventListener("click", () => showJob(job.id));
    idCell.appendChild(open);
    row.appendChild(idCell);
    row.appendChild(el("td", job.name));
    row.appendChild(el("td", job.user));
    row.appendChild(el("td", job.project));
    // notes on an unfinished job only: an ended one keeps its held_at and waiting_on
    const unfinished = UNFINISHED.includes(job.state);
    const note = !unfinished ? "" : job.held_at ? " (held)" : job.waiting_on ? " (waiting)" : "";
    row.appendChild(el("td", job.state + note, "state state-" + job.state));
    row.appendChild(el("td", job.priority, "number"));
    row.appendChild(el("td", gpusText(job)));
    row.appendChild(el("td", age(job.submitted_at), "number"));
    row.appendChild(el("td", where(job)));
    row.appendChild(actions(job));
    return row;
  });
  body.replaceChildren(...rows);
}

function renderSweeps(newest, running) {
  // the newest sweeps, and every RUNNING one however old: its Cancel button stays reachable
  const listed = new Set(newest.map((sweep) => sweep.id));
  // newest first; a stable sort keeps the API's order among equal created_at
  const sweeps = newest.concat(running.filter((sweep) => !listed.has(sweep.id)))
    .sort((a, b) => b.created_at - a.created_at);
  document.getElementById("sweeps-note").textContent = newest.length >= SHOWN_SWEEPS
    ? "the " + SHOWN_SWEEPS + " newest sweeps and every running one (danlu sweep ls lists them all)"
    : "";
  const body = document.querySelector("#sweeps tbody");
  body.replaceChildren(...sweeps.map((sweep) => {
    const row = el("tr");
    row.dataset.sweep = sweep.id;
    row.appendChild(el("td", sweep.id));
    row.appendChild(el("td", sweep.name));
    row.appendChild(el("td", sweep.user));
    row.appendChild(el("td", sweep.reason ? sweep.state + ": " + sweep.reason : sweep.state, "state"));
    row.appendChild(el("td", sweep.submitted + " / " + sweep.total, "number"));
    const objective = sweep.metric === null ? (sweep.array ? "array" : "-") : sweep.metric + " (" + sweep.goal + ")";
    row.appendChild(el("td", objective));
    row.appendChild(el("td", age(sweep.created_at), "number"));
    const cell = el("td");
    const mine = me && (me.role === "admin" || me.name === sweep.user);
    if (mine && sweep.state === "RUNNING") {
      const button = el("button", "Cancel");
      button.type = "button";
      button.dataset.action = "cancel-sweep";
      button.addEventListener("click", () => {
        const question = "Cancel sweep " + sweep.id + " (" + sweep.name + ", " + sweep.user +
          ")? Its unfinished trials are cancelled; finished ones keep their results.";
        if (window.confirm(question)) cancelSweep(sweep.id);
      });
      cell.appendChild(button);
    }
    row.appendChild(cell);
    return row;
  }));
}

async function cancelSweep(id) {
  actionError = "";
  try {
    await api("/sweeps/" + encodeURIComponent(id) + "/cancel", { method: "POST" });
    await refresh();
  } catch (error) {
    actionFailed("cancel sweep " + id + ": " + error.message);
  }
}

function renderFeed(events) {
  const body = document.querySelector("#feed tbody");
  body.replaceChildren(...events.slice().reverse().map((e) => {  // newest first
    const row = el("tr");
    row.dataset.event = e.id;
    row.appendChild(el("td", new Date(e.time * 1000).toLocaleTimeString()));
    row.appendChild(el("td", e.job_id));
    row.appendChild(el("td", e.job_name));
    row.appendChild(el("td", e.user + "/" + e.project));
    row.appendChild(el("td", e.old ? e.old + " -> " + e.new : "submitted"));
    row.appendChild(el("td", e.reason || ""));
    return row;
  }));
}

function renderUsage(rows) {
  const body = document.querySelector("#usage tbody");
  body.replaceChildren(...rows.map((r) => {
    const row = el("tr");
    row.appendChild(el("td", r.project));
    row.appendChild(el("td", r.user));
    row.appendChild(el("td", r.gpu_hours.toFixed(2), "number"));
    row.appendChild(el("td", r.gpu_memory_gib_hours.toFixed(1), "number"));
    row.appendChild(el("td", r.jobs, "number"));
    const kwh = r.energy_kwh === null || r.energy_kwh === undefined ? "-" : r.energy_kwh.toFixed(3);
    row.appendChild(el("td", kwh, "number"));
    return row;
  }));
}

function quotaText(project) {
  // a quota on GPUs, on GPU memory, or both (each binds); "-" without one
  const parts = [];
  const given = (value) => value !== null && value !== undefined;
  if (given(project.quota_gpus)) parts.push(String(project.quota_gpus));
  if (given(project.quota_gpu_memory)) parts.push(bytes(project.quota_gpu_memory));
  return parts.length ? parts.join(", ") : "-";
}

function renderProjects(projects) {
  const body = document.querySelector("#projects tbody");
  const gpus = (value) => (value === null || value === undefined ? "-" : value.toFixed(2));
  body.replaceChildren(...projects.map((p) => {
    const row = el("tr");
    row.dataset.project = p.name;
    row.appendChild(el("td", p.name));
    row.appendChild(el("td", p.priority, "number"));
    row.appendChild(el("td", quotaText(p), "number"));
    row.appendChild(el("td", p.share, "number"));
    row.appendChild(el("td", gpus(p.gpus_held), "number"));
    row.appendChild(el("td", gpus(p.recent_gpus), "number"));
    const members = p.members || [];
    row.appendChild(el("td", members.length ? members.join(", ") : "everyone"));
    return row;
  }));
}

const stateQuery = (states) => states.map((s) => "state=" + s).join("&");
const newestFirst = (a, b) => b.submitted_at - a.submitted_at;
// the pending jobs nearest to a start, as near as the API tells: highest priority, then oldest
const queueOrder = (a, b) => b.priority - a.priority || a.submitted_at - b.submitted_at;

async function loadJobs(unfinished) {
  // the rows of the Jobs table, and a note when they are not all the jobs asked for
  if (!unfinished) {
    const jobs = await api("/jobs?limit=" + (SHOWN_JOBS + 1));
    const note = jobs.length > SHOWN_JOBS ? "showing the newest " + SHOWN_JOBS + " jobs" : "";
    return { jobs: jobs.slice(0, SHOWN_JOBS), note };
  }
  // every job on GPUs is listed, however many pending ones were submitted after it
  const [active, pending] = await Promise.all([
    api("/jobs?" + stateQuery(ACTIVE) + "&limit=" + API_LIMIT),
    api("/jobs?" + stateQuery(["PENDING"]) + "&limit=" + API_LIMIT),
  ]);
  const total = active.length + pending.length;
  if (total <= SHOWN_JOBS) return { jobs: active.concat(pending).sort(newestFirst), note: "" };
  const room = Math.max(0, SHOWN_JOBS - active.length);
  // the API lists newest first: reversed, a stable sort keeps the older of equal ones first
  const first = new Set(pending.slice().reverse().sort(queueOrder).slice(0, room).map((j) => j.id));
  const jobs = active.concat(pending.filter((job) => first.has(job.id))).sort(newestFirst);
  const more = active.length === API_LIMIT || pending.length === API_LIMIT ? "more than " : "";
  return {
    jobs,
    note: "showing " + jobs.length + " of " + more + total + " unfinished jobs: every running " +
      "one, and the pending ones of highest priority, oldest first (danlu ls --all lists them all)",
  };
}

function tick() {
  // the timer's refresh: none while the newest is in flight (a slow API is not asked again and
  // again); an action's refresh does not wait, it supersedes the one in flight
  if (refreshing === 0) refresh();
}

async function refresh() {
  // every refresh asks for all it shows, and only the newest renders: answers come back in
  // any order, and an older one's would put back what a newer one showed had changed
  if (me === null) return;  // signed out (an action's refresh ending after it): nothing to ask
  generation += 1;
  const mine = generation;
  refreshing = mine;
  const unfinished = document.getElementById("filter").value === "unfinished";
  const usageDue = refreshes % USAGE_EVERY === 0;  // a week of history: not every 2 s
  // the projects (their GPUs held now) are asked every time: a cheap list, and a stale one
  // would show GPUs held by jobs the Jobs table shows ended
  refreshes += 1;
  try {
    const [nodes, jobs, sweeps, running, feed, usage, projects] = await Promise.all([
      api("/cluster/nodes"), loadJobs(unfinished),
      api("/sweeps?limit=" + SHOWN_SWEEPS),
      api("/sweeps?" + stateQuery(["RUNNING"]) + "&limit=" + API_LIMIT),
      api("/events?tail=true&limit=" + FEED_EVENTS),
      usageDue ? api("/usage") : null, api("/projects"),
    ]);
    if (mine !== generation) {  // superseded: the newer refresh renders
      if (usageDue) refreshes = 0;  // and the next one asks for the usage this one dropped
      return;
    }
    renderNodes(nodes);
    renderJobs(jobs.jobs);
    document.getElementById("jobs-note").textContent = jobs.note;
    renderSweeps(sweeps, running);
    renderFeed(feed);
    if (usage !== null) renderUsage(usage);
    renderProjects(projects);
    // shown once it holds this user's view: never an empty or a previous user's one
    document.getElementById("main").hidden = false;
    const updated = "updated " + new Date().toLocaleTimeString();
    setStatus(actionError ? updated + "; " + actionError : updated, actionError !== "");
    if (shownJob !== null && !shownEnded) await showJob(shownJob, mine);  // it follows the job
  } catch (error) {
    if (usageDue) refreshes = 0;  // the next one asks for the usage this one did not get
    if (mine !== generation) return;  // a newer refresh tells how things stand
    if (error.status === 401) {
      signOut("token refused: " + error.message);
    } else {
      setStatus("cannot refresh: " + error.message, true);
    }
  } finally {
    if (refreshing === mine) refreshing = 0;
  }
}

const LOG_TAIL = 8192;
const METRIC_POINTS = 500;
const JOB_EVENTS = 1000;  // the newest of the open job's events (the most the API gives)
const SVG_NS = "http://www.w3.org/2000/svg";
let metricRecords = [];

function energyText(joules) {
  if (joules === null || joules === undefined) return "energy: not metered";
  const wh = joules / 3600;
  if (wh >= 1e6) return "energy: " + (wh / 1e6).toPrecision(3) + " MWh";
  if (wh >= 1e3) return "energy: " + (wh / 1e3).toPrecision(3) + " kWh";
  return "energy: " + wh.toPrecision(3) + " Wh";
}

function metricKeys(records) {
  const keys = [];
  for (const record of records) {
    for (const [key, value] of Object.entries(record)) {
      if (key === "step" || key === "time" || keys.includes(key)) continue;
      if (typeof value === "number" && Number.isFinite(value)) keys.push(key);
    }
  }
  return keys;
}

function drawMetric(key) {
  const svg = document.getElementById("metric-chart");
  const points = metricRecords.filter((r) => typeof r[key] === "number" && Number.isFinite(r[key]));
  svg.replaceChildren();
  const range = document.getElementById("metric-range");
  if (points.length === 0) {
    range.textContent = "";
    return;
  }
  const width = Number(svg.getAttribute("width"));
  const height = Number(svg.getAttribute("height"));
  const pad = 6;
  const steps = points.map((r) => r.step);
  const values = points.map((r) => r[key]);
  const [x0, x1] = [Math.min(...steps), Math.max(...steps)];
  const [y0, y1] = [Math.min(...values), Math.max(...values)];
  const x = (step) => pad + (x1 > x0 ? (step - x0) / (x1 - x0) : 0.5) * (width - 2 * pad);
  const y = (value) => height - pad - (y1 > y0 ? (value - y0) / (y1 - y0) : 0.5) * (height - 2 * pad);
  const line = document.createElementNS(SVG_NS, "polyline");
  line.setAttribute("points", points.map((r) => x(r.step) + "," + y(r[key])).join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", "#3b7ddd");
  line.setAttribute("stroke-width", "1.5");
  svg.appendChild(line);
  const last = points[points.length - 1];
  // the API gave the newest METRIC_POINTS records: their min and max are not the run's
  const cut = metricRecords.length >= METRIC_POINTS ? ", last " + METRIC_POINTS + " records" : "";
  range.textContent = key + " " + last[key].toPrecision(4) + " at step " + last.step +
    " (min " + y0.toPrecision(4) + ", max " + y1.toPrecision(4) + ", steps " + x0 + "-" + x1 + cut + ")";
}

function renderMetrics(records) {
  metricRecords = records;
  const keys = metricKeys(records);
  const section = document.getElementById("metrics");
  section.hidden = keys.length === 0;
  const select = document.getElementById("metric-key");
  const chosen = keys.includes(select.value) ? select.value : keys.includes("loss") ? "loss" : keys[0];
  const listed = Array.from(select.options, (option) => option.value);
  if (listed.join("\n") !== keys.join("\n")) {  // as they were: an open list stays open
    select.replaceChildren(...keys.map((key) => {
      // the exact key as its value: without one an option's value is its text with blanks
      // collapsed and trimmed, and "train  loss" would match no record's key
      const option = el("option", key);
      option.value = key;
      return option;
    }));
  }
  if (chosen !== undefined) {
    select.value = chosen;
    drawMetric(chosen);
  }
}

function setLog(text) {
  // new output keeps the reader's place: a reader at the end follows it, one above stays
  const pre = document.getElementById("log");
  if (pre.textContent === text) return;
  const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 2;
  const top = pre.scrollTop;
  pre.textContent = text;
  pre.scrollTop = atEnd ? pre.scrollHeight : top;
}

async function showJob(id, round) {
  // open the job's panel; round: the generation of the refresh that refreshes the open one
  // (nothing if another job opened, or a newer refresh began, meanwhile)
  const again = round !== undefined;
  const path = "/jobs/" + encodeURIComponent(id);
  if (!again) {
    shownJob = id;
    shownEnded = false;
    actionError = "";
  }
  try {
    const [job, events, why, records] = await Promise.all([
      api(path), api(path + "/events?tail=true&limit=" + JOB_EVENTS), api(path + "/why"),
      api(path + "/metrics?tail=true&limit=" + METRIC_POINTS),
    ]);
    let log = "";
    try {
      log = await request(path + "/logs?tail=" + LOG_TAIL, undefined, (r) => r.text());
    } catch (error) {
      log = "(log: " + error.message + ")";
    }
    if (shownJob !== id) return;  // closed, or another job opened, while this was asked
    if (again && round !== generation) return;  // the newer refresh shows it
    const detail = document.getElementById("detail");
    document.getElementById("detail-title").textContent = job.name + " (" + job.id + ")";
    shownEnded = !UNFINISHED.includes(job.state);  // its last refresh: nothing changes after
    const ended = shownEnded && job.finished_at !== null
      ? " (ended " + new Date(job.finished_at * 1000).toLocaleString() + ")"
      : "";
    document.getElementById("detail-why").textContent = job.state + ": " + why.reason + ended;
    document.getElementById("detail-energy").textContent = energyText(job.energy_joules);
    renderMetrics(records);
    const rows = events.map((e) => {
      const row = el("tr");
      row.appendChild(el("td", new Date(e.time * 1000).toLocaleString()));
      row.appendChild(el("td", (e.old || "") + " \u2192 " + e.new));
      row.appendChild(el("td", e.reason));
      return row;
    });
    document.querySelector("#events tbody").replaceChildren(...rows);
    setLog(log || "(empty)");
    detail.hidden = false;
    const pre = document.getElementById("log");
    if (!again) {
      pre.scrollTop = pre.scrollHeight;  // a new panel opens at the log's end
      detail.scrollIntoView();  // it is below every table: brought to the clicker
    }
  } catch (error) {
    if (shownJob !== id) return;
    const text = "show " + id + ": " + error.message;
    if (again) setStatus(text, true);
    else actionFailed(text);  // a click's: kept as an action's
  }
}

async function act(job, what) {
  actionError = "";
  try {
    if (what === "cancel" || what === "rerun") {
      await api("/jobs/" + encodeURIComponent(job.id) + "/" + what, { method: "POST" });
    } else {
      const body = JSON.stringify({ held: what === "hold" });
      await api("/jobs/" + encodeURIComponent(job.id), { method: "PATCH", body });
    }
    await refresh();
  } catch (error) {
    actionFailed(what + " " + job.id + ": " + error.message);
  }
}

function showSignedIn(signedIn, waiting) {
  // waiting: a token is kept but the server did not answer for it yet (Sign out still works).
  // #main is shown by the first refresh that renders (refresh()), hidden when signed out
  document.getElementById("login").hidden = signedIn || Boolean(waiting);
  document.getElementById("logout").hidden = !signedIn && !waiting;
  document.getElementById("who").hidden = !signedIn;
  if (!signedIn) document.getElementById("main").hidden = true;
}

function closeDetail() {
  shownJob = null;
  document.getElementById("detail").hidden = true;
}

function clearView() {
  // forget what the signed-out user saw: the next one to sign in on this tab never sees it
  for (const body of document.querySelectorAll("#main tbody")) body.replaceChildren();
  for (const id of ["who", "summary", "jobs-note", "sweeps-note", "detail-title", "detail-why",
    "detail-energy", "metric-range", "log"]) {
    document.getElementById(id).textContent = "";
  }
  document.getElementById("metric-key").replaceChildren();
  document.getElementById("metric-chart").replaceChildren();
  document.getElementById("metrics").hidden = true;
  metricRecords = [];
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  if (timer !== null) clearInterval(timer);
  if (retry !== null) clearTimeout(retry);
  timer = null;
  retry = null;
  me = null;
  actionError = "";
  signIns += 1;  // a start() still in flight goes no further
  refreshes = 0;
  generation += 1;  // a refresh still in flight renders nothing
  refreshing = 0;
  showSignedIn(false);
  closeDetail();
  clearView();
  setStatus(message || "signed out", Boolean(message));
}

function passing(error) {
  // an error a later try may not meet: the network (no status), the server or a proxy in
  // trouble (5xx), a timeout or a rate limit (408, 429); any other answer (401, a job run's
  // token refused with a 403, ...) is the same on every try
  const status = error.status;
  return status === undefined || status >= 500 || status === 408 || status === 429;
}

async function start() {
  retry = null;
  signIns += 1;
  const mine = signIns;  // a sign-out (or a newer start) meanwhile: this one goes no further
  if (!TOKEN_CHARS.test(sessionStorage.getItem(TOKEN_KEY) || "")) {  // never sent: forgotten
    signOut("token not valid: " + NOT_A_TOKEN);
    return;
  }
  let who = null;
  try {
    who = await api("/users/me");
  } catch (error) {
    if (mine !== signIns) return;
    if (!passing(error)) {  // a 401, a 403, ...: the same on every try, so the token is forgotten
      signOut("token refused: " + error.message);
    } else if (sessionStorage.getItem(TOKEN_KEY)) {  // a passing error: try again, as refresh() does
      showSignedIn(false, true);
      setStatus("cannot sign in: " + error.message + "; retrying", true);
      if (retry === null) retry = setTimeout(start, REFRESH_MS);
    }
    return;
  }
  if (mine !== signIns) return;
  me = who;
  document.getElementById("who").textContent = me.name + " (" + me.role + ")";
  showSignedIn(true);
  await refresh();
  if (mine !== signIns) return;  // signed out during the first refresh: no timer
  if (timer === null) timer = setInterval(tick, REFRESH_MS);
}

document.getElementById("login").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("token");
  sessionStorage.setItem(TOKEN_KEY, input.value.trim());
  input.value = "";
  if (retry !== null) clearTimeout(retry);
  start();
});
document.getElementById("logout").addEventListener("click", () => signOut());
document.getElementById("metric-key").addEventListener("change", (event) => {
  drawMetric(event.target.value);
});
document.getElementById("detail-close").addEventListener("click", closeDetail);
document.getElementById("filter").addEventListener("change", refresh);
fetch(API + "/health")
  .then((r) => r.json())
  .then((h) => { document.getElementById("version").textContent = "v" + h.version; })
  .catch(() => {});
if (sessionStorage.getItem(TOKEN_KEY)) start();
