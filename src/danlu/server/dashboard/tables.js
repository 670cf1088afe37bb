// The Sweeps, Recent events, Projects and Usage tables, and the cancel of a sweep. Uses api.js
// and common.js.
"use strict";

const SHOWN_SWEEPS = 20;  // the newest sweeps, besides every RUNNING one

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
  replaceRows(body, sweeps.map((sweep) => {
    const row = el("tr");
    row.dataset.sweep = sweep.id;
    row.appendChild(linkCell(sweep.id, "show-sweep", () => showSweep(sweep.id)));
    row.appendChild(el("td", sweep.name, "name"));
    row.appendChild(el("td", sweep.user));
    row.appendChild(el("td", sweep.state + afterState(sweep.state, sweep.reason), "state why"));
    row.appendChild(el("td", sweep.submitted + " / " + sweep.total, "number"));
    const objective = sweep.metric === null ? (sweep.array ? "array" : "-") : sweep.metric + " (" + sweep.goal + ")";
    row.appendChild(el("td", objective));
    row.appendChild(el("td", age(sweep.created_at), "number"));
    const cell = el("td");
    if (mayAct(sweep.user) && sweep.state === "RUNNING") {
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

function cancelSweep(id) {
  return perform("cancel sweep " + id, () =>
    api("/sweeps/" + encodeURIComponent(id) + "/cancel", { method: "POST" }));
}

// the sweep (or job array) clicked: its trials, the best one, followed until it has ended
let shownSweep = null;
let shownSweepEnded = false;

function metricText(value) {
  // a trial's best value as danlu sweep show says it (6 significant digits)
  return typeof value === "number" ? String(Number(value.toPrecision(6))) : "-";
}

function parametersText(parameters) {
  // as danlu sweep show says them: a fraction to 4 significant digits, a string as it is
  const text = (value) => typeof value === "string" ? value
    : typeof value === "number" && !Number.isInteger(value) ? String(Number(value.toPrecision(4)))
      : JSON.stringify(value);
  return Object.entries(parameters || {}).map(([key, value]) => key + "=" + text(value)).join(", ");
}

async function showSweep(id, round) {
  // open the sweep's panel (round: as showJob's, the refresh that follows the open one)
  const again = round !== undefined;
  if (!again) {
    shownSweep = id;
    shownSweepEnded = false;
    session.actionError = "";
  }
  try {
    const sweep = await api("/sweeps/" + encodeURIComponent(id));
    if (shownSweep !== id || (again && round !== session.generation)) return;
    // its last refresh: the sweep ended and so did its trials (a cancel's end theirs later)
    shownSweepEnded = sweep.state !== "RUNNING" &&
      (sweep.trials || []).every((trial) => !UNFINISHED.includes(trial.state));
    const unit = sweep.array ? "tasks" : "trials";
    document.getElementById("sweep-title").textContent = (sweep.array ? "array " : "sweep ") +
      sweep.name + " (" + sweep.id + "): " + sweep.state + afterState(sweep.state, sweep.reason) +
      "; " + sweep.submitted + " of " + sweep.total + " " + unit + " submitted";
    const best = sweep.best;
    document.getElementById("sweep-best").textContent = sweep.metric === null ? ""
      : best ? "best: trial " + best.trial + " (job " + best.job_id + "), " + sweep.metric + " " +
        metricText(best.best)
      : "best: none yet (no trial has reported " + sweep.metric + ")";
    document.getElementById("trials-metric").textContent = sweep.metric === null ? "best" : sweep.metric;
    document.getElementById("trials-unit").textContent = sweep.array ? "task" : "trial";  // as the cli
    replaceRows(document.querySelector("#trials tbody"), (sweep.trials || []).map((trial) => {
      const row = el("tr");
      row.dataset.trial = trial.trial;
      row.appendChild(el("td", trial.trial, "number"));
      row.appendChild(linkCell(trial.job_id, "show", () => showJob(trial.job_id)));
      const stopped = trial.stopped_early ? " (stopped early)" : "";
      row.appendChild(el("td", trial.state + stopped, "state state-" + trial.state));
      row.appendChild(el("td", parametersText(trial.parameters), "why"));
      row.appendChild(el("td", metricText(trial.best), "number"));
      row.appendChild(el("td", trial.step === null || trial.step === undefined ? "-" : trial.step, "number"));
      if (best && best.trial === trial.trial) row.className = "best";
      return row;
    }));
    document.getElementById("sweep-detail").hidden = false;
  } catch (error) {
    if (shownSweep !== id) return;
    const text = "show sweep " + id + ": " + error.message;
    if (again) setStatus(text, true);
    else actionFailed(text);
  }
}

function closeSweep() {
  // close the sweep's panel and forget what it showed
  shownSweep = null;
  document.getElementById("sweep-detail").hidden = true;
  for (const id of ["sweep-title", "sweep-best"]) document.getElementById(id).textContent = "";
  document.querySelector("#trials tbody").replaceChildren();
}

async function followShownSweep(round) {
  // a refresh's update of the open sweep's panel, until the sweep has ended
  if (shownSweep !== null && !shownSweepEnded) await showSweep(shownSweep, round);
}

function timeOf(seconds) {
  // the time of day of a moment of today; of another day, its date and time
  const moment = new Date(seconds * 1000);
  const today = moment.toDateString() === new Date().toDateString();
  return today ? moment.toLocaleTimeString() : moment.toLocaleString();
}

function renderFeed(events) {
  const body = document.querySelector("#feed tbody");
  body.replaceChildren(...events.slice().reverse().map((e) => {  // newest first
    const row = el("tr");
    row.dataset.event = e.id;
    row.appendChild(el("td", timeOf(e.time)));
    row.appendChild(el("td", e.job_id));
    row.appendChild(el("td", e.job_name, "name"));
    row.appendChild(el("td", e.user + "/" + e.project));
    row.appendChild(el("td", e.old ? e.old + " -> " + e.new : "submitted"));
    row.appendChild(el("td", e.old ? reasonAfterState(e.new, e.reason) : e.reason || "", "why"));
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
