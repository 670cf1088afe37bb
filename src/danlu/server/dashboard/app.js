// danlu's dashboard: reads the REST API (/api/v1) with the token its user pastes in, kept in
// this tab's sessionStorage only. Every value from the API is written as text (textContent),
// never as markup: job names, reasons and node names are user input.
//
// This script signs in and out and refreshes the page every REFRESH_MS (not while its tab is
// hidden); the tables and the job's panel are drawn by the scripts index.html loads before it
// (see api.js: classic scripts of this folder that share one global scope, no build step).
"use strict";

const REFRESH_MS = 2000;
const USAGE_EVERY = 15;  // refreshes between two asks for /usage (a week of history): ~30 s
const FEED_EVENTS = 30;
// a token as the server makes it: dl_<prefix>_<secret>, of letters, digits, "_" and "-"
// (secrets.token_urlsafe); anything else, such as a pasted quote or a zero-width space, is
// no token, and fetch() would refuse it in a header before asking the server
const TOKEN_CHARS = /^[A-Za-z0-9_-]+$/;
const NOT_A_TOKEN = "a danlu token holds only letters, digits, '_' and '-': paste it again";
let timer = null;
let retry = null;  // the next try of start() after a passing error (see passing())
let signIns = 0;  // of the newest start() or signOut(): an older start() goes no further
let refreshes = 0;
let refreshing = 0;  // the generation of the newest refresh while it is in flight, else 0
// the pages of all jobs (the filter's "all"), SHOWN_JOBS a page: the before_id cursor of each
// page after the newest, the last one that of the page shown ([]: the newest is shown), and
// the cursor of the page after the one shown (null: none, or not known yet)
let jobPages = [];
let olderJobs = null;

async function loadJobs(unfinished) {
  // the rows of the Jobs table, and a note when they are not all the jobs asked for
  // (older: the cursor of the page after these rows, if any): all jobs a page at a time, or
  // the unfinished ones (loadUnfinished of jobs.js)
  if (unfinished) return loadUnfinished();
  const before = jobPages.length ? jobPages[jobPages.length - 1] : null;
  const cursor = before === null ? "" : "&before_id=" + encodeURIComponent(before);
  const jobs = await api("/jobs?limit=" + (SHOWN_JOBS + 1) + cursor);
  const shown = jobs.slice(0, SHOWN_JOBS);
  const older = jobs.length > SHOWN_JOBS ? shown[shown.length - 1].id : null;
  let note = older === null ? "" : "showing the newest " + SHOWN_JOBS + " jobs";
  if (before !== null) {
    note = "page " + (jobPages.length + 1) + ": the jobs submitted before job " + before +
      (older === null ? " (the oldest)" : "");
  }
  return { jobs: shown, note, older };
}

function showJobPages(unfinished) {
  // Newer and Older, for all jobs when they fill more than one page
  document.getElementById("jobs-pages").hidden = unfinished ||
    (jobPages.length === 0 && olderJobs === null);
  document.getElementById("jobs-newer").disabled = jobPages.length === 0;
  document.getElementById("jobs-older").disabled = olderJobs === null;
}

function turnJobPage(older) {
  // the next page of all jobs (older) or the one before it; the button is off until it shows
  if (older && olderJobs === null) return;
  if (older) jobPages.push(olderJobs);
  else jobPages.pop();
  olderJobs = null;
  showJobPages(false);
  refresh();
}

function filterJobs() {
  jobPages = [];  // another filter: from its first page
  olderJobs = null;
  refresh();
}

function tick() {
  // the timer's refresh: none while the newest is in flight (a slow API is not asked again and
  // again); an action's refresh does not wait, it supersedes the one in flight. None while the
  // tab is hidden (another tab in front, the window minimised): a page nobody reads does not
  // ask the API 200 times a minute; shown again, it refreshes at once (showAgain())
  if (refreshing === 0 && !document.hidden) refresh();
}

function showAgain() {
  // the tab shown again while signed in: what it shows is as old as the time it was hidden
  if (!document.hidden && timer !== null && refreshing === 0) refresh();
}

async function refresh() {
  // every refresh asks for all it shows, and only the newest renders: answers come back in
  // any order, and an older one's would put back what a newer one showed had changed
  if (session.me === null) return;  // signed out (an action's refresh ending after it): nothing to ask
  session.generation += 1;
  const mine = session.generation;
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
    if (mine !== session.generation) {  // superseded: the newer refresh renders
      if (usageDue) refreshes = 0;  // and the next one asks for the usage this one dropped
      return;
    }
    renderNodes(nodes);
    renderJobs(jobs.jobs);
    document.getElementById("jobs-note").textContent = jobs.note;
    olderJobs = jobs.older;
    showJobPages(unfinished);
    renderSweeps(sweeps, running);
    renderFeed(feed);
    if (usage !== null) renderUsage(usage);
    renderProjects(projects);
    // shown once it holds this user's view: never an empty or a previous user's one
    const main = document.getElementById("main");
    main.hidden = false;
    if (main.classList.contains("stale")) showVersion();  // the server is back: its version
    main.classList.remove("stale");
    const updated = "updated " + new Date().toLocaleTimeString();
    const failed = session.actionError;
    setStatus(failed ? updated + "; " + failed : updated, failed !== "");
    // the open panels follow their job, sweep and node
    await Promise.all([followShownJob(mine), followShownSweep(mine), followShownNode(mine)]);
  } catch (error) {
    if (usageDue) refreshes = 0;  // the next one asks for the usage this one did not get
    if (mine !== session.generation) return;  // a newer refresh tells how things stand
    if (error.status === 401) {
      signOut("token refused: " + error.message);
    } else {
      // what the tables show is as the last refresh that rendered found it: greyed, so that
      // a reader far below the status line sees that it is not current
      document.getElementById("main").classList.add("stale");
      // an action that failed meanwhile stays said (it failed for the same cause)
      const failed = session.actionError;
      setStatus("cannot refresh: " + error.message + (failed ? "; " + failed : ""), true);
    }
  } finally {
    if (refreshing === mine) refreshing = 0;
  }
}

function showVersion() {
  // the server's version: read as the page loads, at each sign-in, and as the server answers
  // again after a refresh failed (down at load, it was never shown; upgraded and restarted,
  // the one shown was the old one's)
  fetch(API + "/health")
    .then((r) => r.json())
    .then((h) => { document.getElementById("version").textContent = "v" + h.version; })
    .catch(() => {});
}

function showSignedIn(signedIn, waiting) {
  // waiting: a token is kept but the server did not answer for it yet (Sign out still works).
  // #main is shown by the first refresh that renders (refresh()), hidden when signed out
  document.getElementById("login").hidden = signedIn || Boolean(waiting);
  document.getElementById("logout").hidden = !signedIn && !waiting;
  document.getElementById("who").hidden = !signedIn;
  if (!signedIn) document.getElementById("main").hidden = true;
}

function clearView() {
  // forget what the signed-out user saw: the next one to sign in on this tab never sees it
  for (const body of document.querySelectorAll("#main tbody")) body.replaceChildren();
  for (const id of ["who", "summary", "jobs-note", "sweeps-note"]) {
    document.getElementById(id).textContent = "";
  }
  clearDetail();
  clearNode();
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  if (timer !== null) clearInterval(timer);
  if (retry !== null) clearTimeout(retry);
  timer = null;
  retry = null;
  session.me = null;
  session.actionError = "";
  signIns += 1;  // a start() still in flight goes no further
  refreshes = 0;
  jobPages = [];
  olderJobs = null;
  session.generation += 1;  // a refresh still in flight renders nothing
  refreshing = 0;
  showSignedIn(false);
  closeDetail();
  closeSweep();
  closeNode();
  clearView();
  setStatus(message || "signed out", Boolean(message));
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
  session.me = who;
  showVersion();
  document.getElementById("who").textContent = who.name + " (" + who.role + ")";
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
document.addEventListener("visibilitychange", showAgain);
document.getElementById("metric-key").addEventListener("change", (event) => {
  drawMetric(event.target.value);
});
document.getElementById("detail-close").addEventListener("click", closeDetail);
document.getElementById("sweep-close").addEventListener("click", closeSweep);
document.getElementById("node-close").addEventListener("click", closeNode);
document.getElementById("filter").addEventListener("change", filterJobs);
document.getElementById("jobs-older").addEventListener("click", () => turnJobPage(true));
document.getElementById("jobs-newer").addEventListener("click", () => turnJobPage(false));
showVersion();
if (sessionStorage.getItem(TOKEN_KEY)) start();
