// The panel of the node clicked in the Cluster table: its state line and its last events
// (GET /cluster/nodes/{name} and its /events, as danlu node show prints them), followed by
// each refresh until it is closed. A node gone from the inventory shows its history with a
// note. Uses api.js, common.js and nodeWhy() of cluster.js.
"use strict";

const NODE_EVENTS = 20;  // the newest of the open node's events shown (as danlu node show)
let shownNode = null;  // the name of the node whose panel is open
let renderedNode = null;  // the name of the node whose values the panel holds now

function nodeEventRow(event) {
  // one event: when, what, by whom ("-": the control plane itself), and the detail
  const row = el("tr");
  row.dataset.event = event.id;
  row.appendChild(el("td", new Date(event.time * 1000).toLocaleString()));
  row.appendChild(el("td", event.kind));
  row.appendChild(el("td", event.actor || "-"));
  row.appendChild(el("td", event.detail || "", "why"));
  return row;
}

async function showNode(name, round) {
  // open the node's panel; round: the generation of the refresh that refreshes the open one
  // (nothing if another node opened, or a newer refresh began, meanwhile)
  const again = round !== undefined;
  const path = "/cluster/nodes/" + encodeURIComponent(name);
  if (!again) {
    shownNode = name;
    session.actionError = "";
    // another node's values never stand for the one clicked: hidden until its own are read
    if (renderedNode !== name) clearNode();
  }
  try {
    // one more than is shown: whether there are older ones than those shown
    const [node, events] = await Promise.all([
      api(path).catch((error) => {
        if (error.status === 404) return null;  // gone from the inventory: its history tells
        throw error;
      }),
      api(path + "/events?tail=true&limit=" + (NODE_EVENTS + 1)),
    ]);
    if (shownNode !== name) return;  // closed, or another node opened, while this was asked
    if (again && round !== session.generation) return;  // the newer refresh shows it
    const shown = events.slice(-NODE_EVENTS).reverse();  // newest first
    const panel = document.getElementById("node-detail");
    document.getElementById("node-title").textContent =
      "node " + name + (node !== null && node.fake ? " (fake)" : "");
    document.getElementById("node-state").textContent = node === null ? "" : nodeWhy(node, true);
    document.getElementById("node-note").textContent = node === null
      ? "not in the inventory now: its history is kept" : "";
    document.getElementById("node-events-title").textContent = shown.length === 0 ? "no events"
      : events.length > NODE_EVENTS ? "the last " + NODE_EVENTS + " events, newest first"
        : "events, newest first";
    replaceRows(document.querySelector("#node-events tbody"), shown.map(nodeEventRow));
    const opened = panel.hidden;
    panel.hidden = false;
    renderedNode = name;
    if (!again && opened) panel.scrollIntoView({ block: "nearest" });  // below a long table
  } catch (error) {
    if (shownNode !== name) return;
    const text = "show node " + name + ": " + error.message;
    if (again) setStatus(text, true);
    else actionFailed(text);  // a click's: kept as an action's
  }
}

function closeNode() {
  shownNode = null;
  document.getElementById("node-detail").hidden = true;
}

async function followShownNode(round) {
  // a refresh's update of the open node's panel (round: that refresh's generation)
  if (shownNode !== null) await showNode(shownNode, round);
}

function clearNode() {
  // forget the panel's node, and hide it: what the next user to sign in on this tab, or the
  // reader of another node's panel, never sees
  renderedNode = null;
  document.getElementById("node-detail").hidden = true;
  document.querySelector("#node-events tbody").replaceChildren();
  for (const id of ["node-title", "node-state", "node-note", "node-events-title"]) {
    document.getElementById(id).textContent = "";
  }
}
