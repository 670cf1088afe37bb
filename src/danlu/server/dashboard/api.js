// The dashboard's requests to the REST API (/api/v1), each with the token kept in this tab's
// sessionStorage only. The page's scripts are classic scripts that share one global scope,
// loaded in the order of index.html: api.js, common.js, cluster.js, nodes.js, jobs.js,
// tables.js, detail.js, app.js (each uses what the ones before it define; app.js starts the
// page).
"use strict";

const API = "/api/v1";
const TOKEN_KEY = "danlu-token";
const REQUEST_TIMEOUT_MS = 30000;  // the longest one API request may take
const API_LIMIT = 1000;  // the most one list request returns
const COUNT_HEADER = "X-Danlu-Count";  // a list's count=true: how many its filters match
// how far the server's clock is ahead of this machine's (ms; behind: negative), read from the
// Date header of its answers, so that the ages shown are the server's (a job submitted 10 s
// ago is "10s" old, however wrong this machine's clock): 0 until an answer tells, and while
// the two agree within CLOCK_SLACK_MS (the header counts whole seconds)
const CLOCK_SLACK_MS = 2000;
let serverClockAhead = 0;

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
    let response = null;
    try {
      response = await fetch(API + path, { ...init, headers, signal: controller.signal });
    } catch (error) {
      if (controller.signal.aborted) throw error;  // the time limit's: said below
      // the network's: the browser's own words ("Failed to fetch", ...) alone say too little
      throw new Error("no connection to the server (" + error.message + ")");
    }
    noteServerClock(response);
    if (!response.ok) {
      let message = response.status + " " + response.statusText;
      try {
        const body = await response.json();
        if (body && body.error && body.error.message) message = saidWithField(body.error);
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

const stateQuery = (states) => states.map((s) => "state=" + s).join("&");

async function counted(path) {
  // a list's rows and how many rows its filters match, its pages together (path asks for
  // count=true: the COUNT_HEADER), as {rows, count}
  return request(path, undefined, async (response) => {
    const rows = await response.json();
    const count = Number(response.headers.get(COUNT_HEADER));
    return { rows, count: Number.isInteger(count) ? Math.max(count, rows.length) : rows.length };
  });
}

function saidWithField(error) {
  // an error answer's words after the field it names, as danlu's client and cli say them
  // (danlu.client.errors.ApiError): "reason: String should have at most 500 characters",
  // not a message that leaves the reader to guess which value was refused
  const field = typeof error.field === "string" ? error.field : "";
  return (field ? field + ": " : "") + error.message;
}

function noteServerClock(response) {
  // the header's second is [said, said + 1 s): its middle is the nearest guess
  const said = Date.parse(response.headers.get("Date") || "");
  if (Number.isNaN(said)) return;  // none (a proxy that drops it): as it was
  const ahead = said + 500 - Date.now();
  serverClockAhead = Math.abs(ahead) > CLOCK_SLACK_MS ? ahead : 0;
}

function serverNow() {
  // the server's time now, in seconds since the epoch as the API gives times
  return (Date.now() + serverClockAhead) / 1000;
}

function passing(error) {
  // an error a later try may not meet: the network (no status), the server or a proxy in
  // trouble (5xx), a timeout or a rate limit (408, 429); any other answer (401, a job run's
  // token refused with a 403, ...) is the same on every try
  const status = error.status;
  return status === undefined || status >= 500 || status === 408 || status === 429;
}
