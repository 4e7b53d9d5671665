#include "coordinator/dashboard_page.h"

namespace yoke::server {

// Everything the page shows comes from the JSON API and is put in the page
// as text (textContent), never as markup: job names, reasons and log lines
// are the users' words.
const char kDashboardHtml[] = R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Yoke</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1b1f24; background: #f6f7f9; }
  header { background: #1f2a37; color: #fff; padding: 10px 20px; display: flex; gap: 24px; align-items: baseline; }
  header a { color: #cfe3ff; text-decoration: none; }
  header .brand { font-weight: 700; font-size: 18px; color: #fff; }
  main { padding: 16px 20px; }
  table { border-collapse: collapse; width: 100%; background: #fff; }
  th, td { text-align: left; padding: 6px 10px; border-bottom: 1px solid #e3e6ea; vertical-align: top; }
  th { background: #eef1f4; font-weight: 600; }
  .state { font-weight: 600; }
  .SUCCEEDED { color: #1a7f37; } .FAILED { color: #cf222e; } .RUNNING { color: #0969da; }
  .PENDING, .SCHEDULED { color: #9a6700; } .CANCELLED { color: #57606a; }
  .bar { background: #e3e6ea; height: 8px; width: 120px; border-radius: 4px; display: inline-block; }
  .bar > div { background: #0969da; height: 8px; border-radius: 4px; }
  .charts { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; margin: 16px 0; }
  .card { background: #fff; border: 1px solid #e3e6ea; border-radius: 6px; padding: 12px; }
  pre { background: #0d1117; color: #e6edf3; padding: 10px; overflow-x: auto; max-height: 320px; font-size: 12px; }
  .muted { color: #57606a; }
  dl { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 0; }
  dt { color: #57606a; }
</style>
</head>
<body>
<header><span class="brand">Yoke</span><a href="/">Jobs</a><a href="/workers">Workers</a>
<span class="muted" id="updated"></span></header>
<main id="main"><p class="muted">Loading…</p></main>
<script src="/static/chart.min.js"></script>
<script>
"use strict";
const main = document.getElementById("main");
const charts = {};
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}
function stateName(s) { return String(s || "").replace(/^JOB_|^ATTEMPT_/, ""); }
function age(ms) {
  ms = Number(ms || 0);
  if (!ms) return "";
  let s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 90) return Math.round(s) + "s";
  if (s < 5400) return Math.round(s / 60) + "m";
  if (s < 172800) return (s / 3600).toFixed(1) + "h";
  return (s / 86400).toFixed(1) + "d";
}
function when(ms) { ms = Number(ms || 0); return ms ? new Date(ms).toLocaleString() : ""; }
function pct(x) { return (100 * x).toFixed(2) + "%"; }
async function get(path) {
  const r = await fetch(path, {credentials: "same-origin", cache: "no-store"});
  if (!r.ok) throw new Error(path + ": HTTP " + r.status + " " + (await r.text()));
  return r.json();
}
function accuracyOf(j) {
  if (j.result && j.result.testAccuracy !== undefined) return pct(j.result.testAccuracy);
  const h = j.history || [];
  return h.length ? pct(h[h.length - 1].testAccuracy || 0) : "";
}
function progressCell(j) {
  const p = j.progress || {};
  const step = Number(p.step || 0), total = Number(p.totalSteps || 0);
  if (!total) return el("td", {}, "");
  const f = Math.min(1, step / total);
  const bar = el("span", {class: "bar"}, el("div", {style: "width:" + (120 * f) + "px"}));
  return el("td", {}, bar, " " + step + "/" + total);
}
async function jobsView() {
  const data = await get("/api/jobs");
  const rows = (data.jobs || []).map(j => el("tr", {"data-job": j.id},
      el("td", {}, el("a", {href: "/job/" + encodeURIComponent(j.id)}, j.id)),
      el("td", {}, (j.spec && j.spec.name) || ""),
      el("td", {class: "state " + stateName(j.state)}, stateName(j.state)),
      progressCell(j),
      el("td", {}, accuracyOf(j)),
      el("td", {}, age(j.createTimeMs)),
      el("td", {}, j.reason || "")));
  main.replaceChildren(el("h2", {}, "Jobs"),
      el("table", {id: "jobs"}, el("tr", {}, ...["Job", "Name", "State", "Progress", "Test accuracy", "Age", "Reason"].map(h => el("th", {}, h))), ...rows));
  if (!rows.length) main.append(el("p", {class: "muted"}, "No jobs yet: yoke submit JOB.yaml"));
}
function drawChart(id, labels, datasets, xlabel) {
  const canvas = document.getElementById(id);
  const points = datasets.reduce((n, d) => n + d.data.length, 0);
  canvas.setAttribute("data-points", points);
  if (typeof Chart === "undefined") return;
  if (charts[id]) charts[id].destroy();
  charts[id] = new Chart(canvas, {type: "line", data: {labels, datasets},
      options: {animation: false, responsive: true, plugins: {legend: {position: "bottom"}},
                scales: {x: {title: {display: true, text: xlabel}}}}});
}
async function jobView(id) {
  const d = await get("/api/job/" + encodeURIComponent(id));
  const j = d.job;
  const p = j.progress || {};
  const attempts = (j.attempts || []).map(a => el("tr", {},
      el("td", {}, a.number), el("td", {class: "state " + stateName(a.state)}, stateName(a.state)),
      el("td", {}, a.worldSize || ""),
      el("td", {}, (a.assignments || []).map(s => s.workerId + " (ranks " + (s.firstRank || 0) + "–" + ((s.firstRank || 0) + (s.numReplicas || 1) - 1) + ")").join(", ")),
      el("td", {}, when(a.startTimeMs)), el("td", {}, when(a.endTimeMs)), el("td", {}, a.reason || "")));
  const workers = new Set();
  for (const a of j.attempts || []) for (const s of a.assignments || []) workers.add(s.workerId);
  main.replaceChildren(
      el("h2", {}, "Job " + j.id + ((j.spec && j.spec.name) ? " — " + j.spec.name : "")),
      el("div", {class: "card"}, el("dl", {id: "summary"},
          el("dt", {}, "State"), el("dd", {class: "state " + stateName(j.state)}, stateName(j.state)),
          el("dt", {}, "Reason"), el("dd", {}, j.reason || ""),
          el("dt", {}, "Owner"), el("dd", {}, j.owner || ""),
          el("dt", {}, "Progress"), el("dd", {}, p.totalSteps ? ("step " + (p.step || 0) + " of " + p.totalSteps + ", epoch " + (Number(p.epoch || 0) + 1) + " of " + (p.epochs || "?") + ", " + Number(p.samplesPerSecond || 0).toFixed(0) + " samples/s") : ""),
          el("dt", {}, "Step time"), el("dd", {id: "breakdown"}, d.breakdown || ""),
          el("dt", {}, "Test accuracy"), el("dd", {}, accuracyOf(j)),
          el("dt", {}, "Workers"), el("dd", {}, [...workers].join(", ")),
          el("dt", {}, "Submitted"), el("dd", {}, when(j.createTimeMs)))),
      el("div", {class: "charts"},
          el("div", {class: "card"}, el("h3", {}, "Loss"), el("canvas", {id: "loss"})),
          el("div", {class: "card"}, el("h3", {}, "Accuracy"), el("canvas", {id: "accuracy"}))),
      el("h3", {}, "Attempts"),
      el("table", {id: "attempts"}, el("tr", {}, ...["#", "State", "Ranks", "Workers", "Started", "Ended", "Reason"].map(h => el("th", {}, h))), ...attempts),
      el("h3", {}, "Recent logs"),
      el("pre", {id: "logs"}, (d.logs || []).join("\n")));
  const curve = d.curve || [];
  const hist = j.history || [];
  if (curve.length) {
    drawChart("loss", curve.map(c => c.step), [{label: "training loss (logged steps)", data: curve.map(c => c.loss), borderColor: "#0969da", pointRadius: 0}], "step");
    drawChart("accuracy", curve.map(c => c.step), [{label: "training accuracy (logged steps)", data: curve.map(c => c.accuracy), borderColor: "#1a7f37", pointRadius: 0}], "step");
  } else {
    drawChart("loss", hist.map(e => e.epoch), [
        {label: "train loss", data: hist.map(e => e.trainLoss || 0), borderColor: "#0969da"},
        {label: "test loss", data: hist.map(e => e.testLoss || 0), borderColor: "#cf222e"}], "epoch");
    drawChart("accuracy", hist.map(e => e.epoch), [
        {label: "train accuracy", data: hist.map(e => e.trainAccuracy || 0), borderColor: "#1a7f37"},
        {label: "test accuracy", data: hist.map(e => e.testAccuracy || 0), borderColor: "#9a6700"}], "epoch");
  }
  if (typeof Chart === "undefined") main.append(el("p", {class: "muted"}, "Charts need Chart.js (Debian's libjs-chart.js) on the coordinator's machine."));
}
async function workersView() {
  const data = await get("/api/workers");
  const rows = (data.workers || []).map(w => el("tr", {"data-worker": w.id},
      el("td", {}, w.id), el("td", {}, w.hostname || ""), el("td", {}, w.address || ""),
      el("td", {class: "state " + (w.alive ? "SUCCEEDED" : "FAILED")}, w.alive ? "alive" : ("lost: " + (w.reason || ""))),
      el("td", {}, (w.devices || []).length + " (" + (w.freeCpu || 0) + " cpu free)"),
      el("td", {}, (w.running || []).join(", ")),
      el("td", {}, age(w.lastHeartbeatMs))));
  main.replaceChildren(el("h2", {}, "Workers"),
      el("table", {id: "workers"}, el("tr", {}, ...["Worker", "Host", "Address", "State", "Devices", "Running", "Last heartbeat"].map(h => el("th", {}, h))), ...rows));
}
async function refresh() {
  const path = location.pathname;
  try {
    if (path.startsWith("/job/")) await jobView(decodeURIComponent(path.slice(5)));
    else if (path === "/workers") await workersView();
    else await jobsView();
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    document.body.setAttribute("data-ready", "1");
  } catch (e) {
    main.replaceChildren(el("p", {class: "FAILED"}, String(e.message || e)));
  }
}
refresh();
setInterval(refresh, 2000);
</script>
</body>
</html>
)HTML";

}  // namespace yoke::server
