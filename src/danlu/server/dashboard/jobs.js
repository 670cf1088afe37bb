// The Jobs table: each job's state, GPUs and where it runs or why it waits, and its owner's
// (or an admin's) hold, release, cancel and rerun; the unfinished jobs it shows. Uses api.js,
// common.js and showJob() of detail.js (once the page runs).
"use strict";

const ACTIVE = ["RUNNING", "PREEMPTING", "RESTARTING"];  // on GPUs, or about to be again
const SHOWN_JOBS = 200;  // rows of the Jobs table
const newestFirst = (a, b) => b.submitted_at - a.submitted_at;
const counting = (n) => n.toLocaleString("en-US");  // 1,050

async function loadUnfinished() {
  // the unfinished jobs of the Jobs table: every job on GPUs (up to API_LIMIT of them) and
  // the pending ones nearest to a start, as near as the API tells (order=queue: highest
  // priority, then oldest), to SHOWN_JOBS rows in all; where they are not all, a note says
  // how many of how many, and how to list them all. Neither list asks for more than it shows
  const [active, pending] = await Promise.all([
    counted("/jobs?" + stateQuery(ACTIVE) + "&limit=" + API_LIMIT + "&count=true"),
    counted("/jobs?state=PENDING&order=queue&limit=" + SHOWN_JOBS + "&count=true"),
  ]);
  const queued = pending.rows.slice(0, Math.max(0, SHOWN_JOBS - active.rows.length));
  const jobs = active.rows.concat(queued).sort(newestFirst);
  const all = jobs.length >= active.count + pending.count;
  const note = all ? "" : unfinishedNote(jobs.length, active, queued.length, pending);
  return { jobs, note, older: null };
}

function unfinishedNote(shown, active, queued, pending) {
  // what the unfinished Jobs table says when it shows only shown of the jobs: of the lists
  // active and pending ({rows, count}: counted of api.js), all of active's rows and the first
  // queued of pending's ("showing 200 of 1,051 unfinished jobs: every running one, and 199 of
  // the 1,050 pending, those of highest priority, oldest first (...)")
  const parts = [];
  const cut = active.rows.length < active.count;
  if (cut) {
    parts.push("the newest " + counting(active.rows.length) + " of " + counting(active.count) +
      " running");
  } else if (active.count > 0) {
    parts.push("every running one");
  }
  if (active.count === 0) {
    parts.push("the pending ones of highest priority, oldest first");
  } else if (queued === 0 && pending.count > 0) {
    parts.push("none of the " + counting(pending.count) + " pending");
  } else if (queued > 0) {
    parts.push(counting(queued) + " of the " + counting(pending.count) +
      " pending, those of highest priority, oldest first");
  }
  const all = cut ? "danlu ls --all lists every job" :
    "danlu ls --all --state PENDING lists every pending one";
  return "showing " + counting(shown) + " of " + counting(active.count + pending.count) +
    " unfinished jobs: " + parts.join(", and ") + " (" + all + ")";
}

// how an end_reason that says no more than the run's exit code starts ("exited 0",
// "failed (exit code 1)", "failed (signal 9)"): the list of cli/top.py's PLAIN_EXITS
const PLAIN_EXITS = ["exited", "failed ("];

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
  if (job.exit_code !== null && job.exit_code !== undefined) {
    // an ended run's end_reason where it says more than the code ("exit 1: out of memory
    // (exit code 1); ..."), as danlu ls says it (cli/top.py's PLAIN_EXITS: not a reason
    // that only restates the exit)
    const told = UNFINISHED.includes(job.state) ? "" : job.end_reason;
    const plain = typeof told !== "string" || !told ||
      PLAIN_EXITS.some((start) => told.startsWith(start));
    return "exit " + job.exit_code + (plain ? "" : ": " + told);
  }
  // the reason of the event that ended it (a server older than the field sends none)
  const ended = needsEndReason(job) ? job.end_reason : undefined;
  if (!ended) return "";
  return job.started_at === null || job.started_at === undefined ? ended + " (before it ran)" : ended;
}

function actions(job) {
  const cell = el("td");
  if (!mayAct(job.user)) return cell;
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

function act(job, what) {
  return perform(what + " " + job.id, () => {
    if (what === "cancel" || what === "rerun") {
      return api("/jobs/" + encodeURIComponent(job.id) + "/" + what, { method: "POST" });
    }
    const body = JSON.stringify({ held: what === "hold" });
    return api("/jobs/" + encodeURIComponent(job.id), { method: "PATCH", body });
  });
}

function gpusText(job) {
  // as danlu ls: "2", "1 x 10.0GiB", or a share of one GPU as its fraction, "0.25"
  const fraction = ((job.spec || {}).resources || {}).gpu_fraction;
  const share = typeof fraction === "number" && fraction > 0 && fraction < 1;
  const gpus = share ? String(Number(fraction.toPrecision(6))) : (job.gpus ?? "-");
  return job.gpu_memory ? gpus + " x " + bytes(job.gpu_memory) : String(gpus);
}

function notLaunched(job) {
  // a job holding GPUs (RUNNING, PREEMPTING) whose current run the executor has not launched
  // (the API's launched false; a server older than the field sends none): placed, or
  // stopped before its launch, nothing runs, so no output comes
  return (job.state === "RUNNING" || job.state === "PREEMPTING") && job.launched === false;
}

function saysHeld(why) {
  // whether a held job's pending_reason says it is held: the server's "held by alice", or
  // "held" where it does not know who (cli/job_table.py's SAYS_HELD, one rule)
  return /^held(?![A-Za-z0-9_])/.test(why);
}

function namesDependency(why, waitingOn) {
  // whether why names waitingOn as what the job waits for, as the server says it ("waiting
  // for job ID (NAME) to succeed", "... sweep ID ...", "... array ID ...")
  // (cli/job_table.py's names_dependency, one rule)
  const words = why.split(" ");
  return words[0] === "waiting" && words[1] === "for" && words[3] === String(waitingOn);
}

function stateNote(job) {
  // what follows a job's state: " (not launched)" for a run not launched (notLaunched), else
  // " (held)" for a held job, else " (waiting)" for one waiting for a job, sweep or array it
  // depends on (its waiting_on), as danlu ls, show and top say them (cli/job_table.py's
  // state_note, one rule). Not launched wins over held: a held job that holds GPUs is
  // preempted by checkpoint, but one whose run never launched runs nothing to checkpoint,
  // and its why says it is held. Held and waiting are left out where the why beside the
  // state (a PENDING job's pending_reason) says them already ("held by alice", "waiting for
  // job ID (NAME) to succeed"): said once. Notes on an unfinished job only: an ended one
  // keeps its held_at and waiting_on
  if (!UNFINISHED.includes(job.state)) return "";
  if (notLaunched(job)) return " (not launched)";
  const reason = job.state === "PENDING" ? job.pending_reason : null;
  const why = typeof reason === "string" ? reason : "";
  if (job.held_at !== null && job.held_at !== undefined) return saysHeld(why) ? "" : " (held)";
  if (!job.waiting_on) return "";
  return namesDependency(why, job.waiting_on) ? "" : " (waiting)";
}

function renderJobs(jobs) {
  const body = document.querySelector("#jobs tbody");
  const rows = jobs.map((job) => {
    const row = el("tr");
    row.dataset.job = job.id;
    row.appendChild(linkCell(job.id, "show", () => showJob(job.id)));
    row.appendChild(el("td", job.name, "name"));
    row.appendChild(el("td", job.user));
    row.appendChild(el("td", job.project));
    row.appendChild(el("td", job.state + stateNote(job), "state state-" + job.state));
    row.appendChild(el("td", job.priority, "number"));
    row.appendChild(el("td", gpusText(job)));
    row.appendChild(el("td", age(job.submitted_at), "number"));
    row.appendChild(el("td", where(job), "why"));
    row.appendChild(actions(job));
    return row;
  });
  replaceRows(body, rows);
}
