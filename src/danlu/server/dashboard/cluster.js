// The Cluster table: the nodes and their GPUs, and an admin's cordon, drain and uncordon of a
// node or of one GPU; a node's name opens its panel (nodes.js). Uses api.js and common.js.
"use strict";

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
    states[state] = (states[state] || 0) + 1;
    const why = nodeWhy(node, false);
    if (node.gpus.length === 0) {
      // a node with no GPUs (a CPU node of a Slurm partition, one whose GPUs all left the
      // reading): a row of its own all the same, with its state and its admin's actions
      const row = el("tr");
      row.dataset.node = node.name;
      row.appendChild(nodeNameCell(node));
      row.appendChild(el("td", why, "why node-" + state));
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
      row.dataset.gpu = gpu.index;
      row.appendChild(i === 0 ? nodeNameCell(node) : el("td", ""));
      row.appendChild(el("td", i === 0 ? why : "", "why node-" + state));
      const gpuState = gpu.state || "ready";
      const gpuWhy = gpuState === "ready" ? "" : " (" + gpuState + (gpu.cordon_reason ? ": " + gpu.cordon_reason : "") + ")";
      row.appendChild(el("td", gpu.index + gpuWhy, gpuState === "ready" ? "number" : "why node-" + gpuState));
      row.appendChild(el("td", gpu.type));
      row.appendChild(bar(gpu.allocated_memory || 0, gpu.memory || 0));
      row.appendChild(el("td", Math.round((gpu.allocated_milli || 0) / 10) + "%", "number"));
      row.appendChild(el("td", gpuJobsText(gpu)));
      const cell = i === 0 ? nodeActions(node, state) : el("td");
      gpuAction(cell, node.name, gpu);
      row.appendChild(cell);
      rows.push(row);
    });
  }
  replaceRows(body, rows);
  const nodeStates = Object.entries(states).map(([s, n]) => n + " " + s).join(", ");
  document.getElementById("summary").textContent =
    nodes.length + " node(s) (" + nodeStates + "), " + gpus + " GPU(s), " +
    allocated.toFixed(1) + " allocated";
}

function nodeNameCell(node) {
  // the node's name (as danlu nodes and top say it: "(fake)" for a node of fake GPUs), a
  // button that opens its panel (showNode() of nodes.js): its state line and history
  const name = node.name + (node.fake ? " (fake)" : "");
  return linkCell(name, "show-node", () => showNode(node.name));
}

function nodeWhy(node, since) {
  // a node's state, and its reason and end when it is closed, and a close scheduled for it
  // (a maintenance window): "cordoned: new DIMMs; until 5/3/2026, 6:00:00 AM"; since: with
  // when it was closed, as danlu node show says it ("cordoned since ...: new DIMMs")
  const state = node.state || "ready";
  const given = (value) => value !== null && value !== undefined;
  const moment = (seconds) => new Date(seconds * 1000).toLocaleString();
  let why = state;
  if (state !== "ready" && since && given(node.cordoned_at)) why += " since " + moment(node.cordoned_at);
  if (state !== "ready" && node.cordon_reason) why += ": " + node.cordon_reason;
  if (state !== "ready" && given(node.open_at)) why += "; until " + moment(node.open_at);  // its end
  if (given(node.close_at)) {  // a maintenance window
    const ends = given(node.close_until) ? " until " + moment(node.close_until) : "";
    why += "; " + node.close_action + " at " + moment(node.close_at) + ends +
      (node.close_reason ? ": " + node.close_reason : "");
  }
  return why;
}

function gpuJobsText(gpu) {
  // the jobs holding a share of the GPU: the ids the signed-in user may see (all of them for
  // an admin), and a count of the other users' jobs there, which the API lists to a user
  // without their ids ("-" only for a GPU that no job holds)
  const parts = (gpu.jobs || []).slice();
  const others = Number(gpu.other_jobs) || 0;
  if (others > 0) parts.push(others + (others === 1 ? " job of another user" : " jobs of other users"));
  return parts.length ? parts.join(", ") : "-";
}

function nodeActions(node, state) {
  const cell = el("td");
  if (!isAdmin()) return cell;
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
  if (!isAdmin()) return;
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
  const byWhom = "from the dashboard by " + session.me.name;
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

function nodeAct(name, what, gpu, asked) {
  // asked: the body the admin confirmed (a reason for a new close), or nothing
  const where = gpu === undefined ? name : name + " GPU " + gpu;
  return perform(what + " " + where, () => {
    const body = { ...(asked || {}) };
    if (gpu !== undefined) body.gpu = gpu;
    const options = { method: "POST", body: JSON.stringify(body) };
    return api("/cluster/nodes/" + encodeURIComponent(name) + "/" + what, options);
  });
}
