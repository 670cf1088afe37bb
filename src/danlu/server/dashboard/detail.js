// The panel of the job clicked: its state and why, energy, metrics chart, events and log,
// followed by each refresh until the job has ended. Uses api.js and common.js.
"use strict";

const LOG_TAIL = 8192;
const METRIC_POINTS = 500;
const JOB_EVENTS = 1000;  // the newest of the open job's events (the most the API gives)
const SVG_NS = "http://www.w3.org/2000/svg";
let metricRecords = [];
let shownJob = null;  // the id of the job whose detail panel is open
let shownEnded = false;  // that job had ended when the panel last showed it
let renderedJob = null;  // the id of the job whose values the panel holds now

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

function priorityButton(job) {
  // the owner's (or an admin's) new priority for an unfinished job, asked for in a prompt
  const button = el("button", "Priority");
  button.type = "button";
  button.dataset.action = "priority";
  button.addEventListener("click", () => {
    const given = window.prompt("New priority of job " + job.id + " (" + job.name + ", now " +
      job.priority + "): a whole number from -1000000 to 1000000", String(job.priority));
    if (given === null) return;
    const label = "priority " + job.id;
    if (!/^\s*-?\d+\s*$/.test(given)) {  // else the API is sent no number and nothing changes
      actionFailed(label + ": a whole number is needed, not '" + given + "'");
      return;
    }
    perform(label, () => api("/jobs/" + encodeURIComponent(job.id), {
      method: "PATCH", body: JSON.stringify({ priority: Number(given) }),
    }));
  });
  return button;
}

function showActions(job) {
  // the job's actions, as its row of the Jobs table has them (a row that may be on no page
  // shown: an older job's, a trial's), and its priority. Rebuilt only when they or the job's
  // state changed: a button replaced between a press and its release takes no click
  const box = document.getElementById("detail-actions");
  const cell = actions(job);
  if (mayAct(job.user) && UNFINISHED.includes(job.state)) cell.appendChild(priorityButton(job));
  const what = (node) => Array.from(node.querySelectorAll("button"), (b) => b.dataset.action).join(" ");
  const shape = job.id + " " + job.state + " " + job.priority + " " + what(cell);
  if (box.dataset.shape === shape) return;
  box.dataset.shape = shape;
  const focused = box.contains(document.activeElement) ? document.activeElement.dataset.action : null;
  box.replaceChildren(...cell.childNodes);
  const like = Array.from(box.querySelectorAll("button")).find((b) => b.dataset.action === focused);
  if (like !== undefined) like.focus({ preventScroll: true });
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

function panelNote(job, reason) {
  // what follows the job's state in its panel, before its why: " (not launched)" for a run
  // not launched (notLaunched of jobs.js) where its reason does not say so already
  // ("RUNNING (not launched): placed on n1:0, launching", but "RUNNING: placed on n1:0, not
  // launched yet: waiting for job X to free n1:0", "PREEMPTING: placed on n1:0, not
  // launched: stopped before its launch, ..." and "RUNNING: not launched: the cluster
  // cannot be ..."); a held job's why says it is held
  const told = typeof reason === "string" && (reason.startsWith("not launched") ||
    (reason.startsWith("placed on ") && reason.includes(", not launched")));
  return notLaunched(job) && !told ? " (not launched)" : "";
}

async function showJob(id, round) {
  // open the job's panel; round: the generation of the refresh that refreshes the open one
  // (nothing if another job opened, or a newer refresh began, meanwhile)
  const again = round !== undefined;
  const path = "/jobs/" + encodeURIComponent(id);
  if (!again) {
    shownJob = id;
    shownEnded = false;
    session.actionError = "";
    // another job's values never stand for the one clicked: hidden until its own are read
    if (renderedJob !== id) clearDetail();
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
    if (again && round !== session.generation) return;  // the newer refresh shows it
    const detail = document.getElementById("detail");
    document.getElementById("detail-title").textContent = job.name + " (" + job.id + ")";
    shownEnded = !UNFINISHED.includes(job.state);  // its last refresh: nothing changes after
    const ended = shownEnded && job.finished_at !== null
      ? " (ended " + new Date(job.finished_at * 1000).toLocaleString() + ")"
      : "";
    document.getElementById("detail-why").textContent =
      job.state + panelNote(job, why.reason) + afterState(job.state, why.reason) + ended;
    document.getElementById("detail-energy").textContent = energyText(job.energy_joules);
    showActions(job);
    renderMetrics(records);
    const rows = events.map((e) => {
      const row = el("tr");
      row.appendChild(el("td", new Date(e.time * 1000).toLocaleString()));
      row.appendChild(el("td", (e.old || "") + " \u2192 " + e.new));
      row.appendChild(el("td", e.old ? reasonAfterState(e.new, e.reason) : e.reason, "why"));
      return row;
    });
    document.querySelector("#events tbody").replaceChildren(...rows);
    setLog(log || "(empty)");
    detail.hidden = false;
    renderedJob = id;
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

function closeDetail() {
  shownJob = null;
  document.getElementById("detail").hidden = true;
}

async function followShownJob(round) {
  // a refresh's update of the open panel (round: that refresh's generation), until its job ended
  if (shownJob !== null && !shownEnded) await showJob(shownJob, round);
}

function clearDetail() {
  // forget the panel's job, and hide it: what the next user to sign in on this tab, or the
  // reader of another job's panel, never sees
  renderedJob = null;
  document.getElementById("detail").hidden = true;
  document.querySelector("#events tbody").replaceChildren();
  const actionsBox = document.getElementById("detail-actions");
  actionsBox.replaceChildren();
  delete actionsBox.dataset.shape;
  for (const id of ["detail-title", "detail-why", "detail-energy", "metric-range", "log"]) {
    document.getElementById(id).textContent = "";
  }
  document.getElementById("metric-key").replaceChildren();
  document.getElementById("metric-chart").replaceChildren();
  document.getElementById("metrics").hidden = true;
  metricRecords = [];
}
