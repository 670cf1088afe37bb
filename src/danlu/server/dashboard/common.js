// What the dashboard's parts share: the signed-in session, the status line, the actions'
// common course, and writing values as text. Every value from the API is written as text
// (textContent), never as markup: job names, reasons and node names are user input.
// Uses refresh() of app.js (once the page runs).
"use strict";

const UNFINISHED = ["PENDING", "RUNNING", "PREEMPTING", "RESTARTING"];

// the signed-in session, read and written by every part of the page
const session = {
  me: null,  // the signed-in user (/users/me), null when signed out
  generation: 0,  // of the newest refresh: an older one ending after it renders nothing
  // the last action's failure (a Cancel refused, ...): the status line keeps it after each
  // refresh until the next action or sign-out, so that a refresh 2 s later does not wipe it
  actionError: "",
};

// the table body a pointer (a mouse button, a finger) was pressed in, not yet released: its
// new rows wait for the next refresh, as a click is a press and a release on one button, and
// a button replaced between the two takes no click. A press held longer than PRESS_MS (its
// release lost outside the window) no longer holds them
const PRESS_MS = 10000;
let pressedIn = null;
let pressedAt = 0;
document.addEventListener("pointerdown", (event) => {
  pressedIn = event.target instanceof Element ? event.target.closest("tbody") : null;
  pressedAt = Date.now();
}, true);
for (const type of ["pointerup", "pointercancel"]) {
  document.addEventListener(type, () => { pressedIn = null; }, true);
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function linkCell(text, action, open) {
  // a table cell holding a button that reads as a link (an id that opens its panel): its
  // data-action names it for the keyboard's focus across refreshes
  const cell = el("td");
  const button = el("button", text, "link");
  button.type = "button";
  button.dataset.action = action;
  button.addEventListener("click", open);
  cell.appendChild(button);
  return cell;
}

function rowKeys(rows) {
  // each row's key: its data-* attributes (a job's id, a node's name and GPU, ...), and how
  // many rows before it had the same ones
  const seen = {};
  return rows.map((row) => {
    const key = JSON.stringify(Object.entries(row.dataset));
    seen[key] = (seen[key] || 0) + 1;
    return key + "#" + seen[key];
  });
}

function replaceRows(body, rows) {
  // a table's rows, all new (none while a pointer is pressed in it, see pressedIn); a button
  // of the old rows that had the focus hands it to its like in the new ones (the same
  // data-action and text in the row of the same key), so that a refresh does not throw a
  // keyboard user back to the top of the page
  if (pressedIn === body && Date.now() - pressedAt < PRESS_MS) return;
  const focused = document.activeElement;
  const old = focused && focused !== body && body.contains(focused) ? focused.closest("tr") : null;
  const key = old === null ? null : rowKeys(Array.from(body.rows))[old.sectionRowIndex];
  body.replaceChildren(...rows);
  if (key === null) return;
  const row = rows[rowKeys(rows).indexOf(key)];
  const like = row === undefined ? undefined : Array.from(row.querySelectorAll("button")).find(
    (button) => button.dataset.action === focused.dataset.action &&
      button.textContent === focused.textContent);
  if (like !== undefined) like.focus({ preventScroll: true });
}

function setStatus(text, error) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.className = error ? "error" : "";
}

function actionFailed(text) {
  session.actionError = text;
  setStatus(text, true);
}

async function perform(label, call) {
  // one action of the user: call() asks the API, then the page is refreshed; a failure is
  // shown, and kept, as "label: why", and the page refreshed as well: an action refused
  // because its job changed meanwhile (cancelled from the cli between the page's refresh and
  // the click) shows the job as it is now at once, not its stale row and buttons
  session.actionError = "";
  try {
    await call();
  } catch (error) {
    actionFailed(label + ": " + error.message);
  }
  await refresh();
}

function isAdmin() {
  return session.me !== null && session.me.role === "admin";
}

function mayAct(owner) {
  // the signed-in user may act on what owner owns: their own, or anyone's as an admin
  return session.me !== null && (session.me.role === "admin" || session.me.name === owner);
}

function afterState(state, reason) {
  // what follows a job's or sweep's state where a line says the state and then its reason,
  // the state said once (as danlu's cli says it, danlu.cli.markup.after_state): ": waiting
  // for 1 GPU(s)"; a reason that begins with the state's word goes on from the state
  // ("cancelled by alice", "running on n1:0", "failed: out of memory"), so the line reads
  // "CANCELLED by alice", "RUNNING on n1:0", "FAILED: out of memory"; "" for no reason
  const text = reason === null || reason === undefined ? "" : String(reason);
  const word = typeof state === "string" ? state.toLowerCase() : "";
  if (!text) return "";
  if (!word || text.slice(0, word.length).toLowerCase() !== word) return ": " + text;
  const rest = text.slice(word.length);
  if (rest.startsWith(":")) return rest.slice(1).trim() ? ": " + rest.slice(1).trimStart() : "";
  if (!rest || " (;,".includes(rest[0])) return rest;
  return ": " + text;  // a longer word: "failedover" says no state
}

function reasonAfterState(state, reason) {
  // the reason of a change into state in a column of its own beside the state's (an events
  // table): afterState's words without their ": " ("by alice" beside CANCELLED); a
  // parenthesis that went on from the state's word is unwrapped ("exit code 1; out of
  // restarts (1 of 1)" beside FAILED for "failed (exit code 1); ..."), else the reason is
  // said whole (danlu.cli.markup.reason_after_state, one rule)
  const said = afterState(state, reason);
  const rest = said.startsWith(": ") ? said.slice(2) : said.trimStart();
  if (rest.startsWith("(") && !said.startsWith(": ")) {
    const closed = rest.indexOf(")");
    if (closed > 0 && !rest.slice(1, closed).includes("(")) {
      return (rest.slice(1, closed) + rest.slice(closed + 1)).trim();
    }
    return String(reason);
  }
  return rest;
}

const BINARY_UNITS = [["KiB", 1024], ["MiB", 1024 ** 2], ["GiB", 1024 ** 3], ["TiB", 1024 ** 4]];
const MAX_BYTES = 2 ** 62;  // the largest size the server accepts (danlu.core.units.MAX_BYTES)

function bytes(n) {
  // a byte count as the server and the cli show it (danlu.core.units.format_bytes, one rule):
  // the fewest decimals, one to three, that are the size exactly ("1.25TiB" for 1280GiB,
  // "80.0GiB"), else three significant digits with at least one decimal ("1.04GiB",
  // "79.2GiB", "123.4GiB"); the unit chosen by the number as printed (never "1024.0KiB")
  const size = n === null || n === undefined ? 0 : Number(n);
  if (Number.isNaN(size)) return "nan";
  if (!Number.isFinite(size)) return size > 0 ? "inf" : "-inf";
  if (Math.abs(size) < 1024) return Math.trunc(size) + "B";
  if (Math.abs(size) > MAX_BYTES) return threeDigits(size / 1024 ** 4) + "TiB";
  const sign = size < 0 ? "-" : "";
  const exact = Number.isInteger(size) ? BigInt(Math.abs(size)) : null;
  for (const [unit, scale] of BINARY_UNITS) {
    const shown = shownInUnit(Math.abs(size) / scale, scale, exact);
    if (unit === "TiB" || Number(shown) < 1024) return sign + shown + unit;
  }
  return "";  // unreachable: TiB is the last unit
}

function shownInUnit(value, scale, exact) {
  // value (in units of scale bytes) as bytes() shows it: the fewest decimals, one to three,
  // whose number of units is exact bytes to the byte, else three significant digits
  if (exact !== null) {
    for (const decimals of [1, 2, 3]) {
      const shown = value.toFixed(decimals);
      // shown x scale == exact, in whole numbers: (shown without its point) x scale == exact x 10^d
      if (BigInt(shown.replace(".", "")) * BigInt(scale) === exact * 10n ** BigInt(decimals)) {
        return shown;
      }
    }
  }
  return Number(value.toFixed(2)) < 10 ? value.toFixed(2) : value.toFixed(1);
}

function threeDigits(value) {
  // Python's "%.3g" of a number past a thousand: "9.09e+295", "4.19e+06", "5e+06"
  const [mantissa, exponent] = value.toExponential(2).split("e");
  const digits = exponent.replace(/^[+-]/, "");
  const trimmed = mantissa.includes(".") ? mantissa.replace(/\.?0+$/, "") : mantissa;
  return trimmed + "e" + exponent[0] + (digits.length < 2 ? "0" : "") + digits;
}

function age(seconds) {
  // how long ago the moment seconds (an API time) was, by the server's clock (see serverNow())
  // (a moment ahead of it, its clock stepped back, is "0s"); the unit is chosen by the number
  // as shown, so that 119.6 s is "2m", not "120s", and 47.99 h "2d", not "48.0h"
  const s = Math.max(0, serverNow() - seconds);
  if (Math.round(s) < 120) return Math.round(s) + "s";
  if (Math.round(s / 60) < 120) return Math.round(s / 60) + "m";
  if (Number((s / 3600).toFixed(1)) < 48) return (s / 3600).toFixed(1) + "h";
  return Math.round(s / 86400) + "d";
}
