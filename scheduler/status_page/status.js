// netstorm's status page: polls /status.json every 2 s and draws it (no framework).
// What is drawn carries data- attributes (DC names, links, rates) so that a browser test
// can check the page against the JSON. Every text goes in through textContent.
"use strict";

const POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";
const MAP_W = 560, MAP_H = 420, R = 36;

function el(tag, attrs, text) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4))
                                      : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined) node.setAttribute(k, String(v));
  }
  if (text !== undefined) node.textContent = text;
  return node;
}

function fmt(x, digits) {
  if (x === null || x === undefined) return "–";
  x = Number(x);
  if (Math.abs(x) >= 1000) return String(Math.round(x));
  const text = x.toPrecision(digits || 3);
  return text.includes(".") && !text.includes("e") ? text.replace(/\.?0+$/, "") : text;
}

function duration(s) {
  if (s === null || s === undefined) return "–";
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), sec = s % 60;
  return h ? `${h} h ${m} min` : m ? `${m} min ${sec} s` : `${sec} s`;
}

function drawMap(snap) {
  const svg = document.getElementById("map");
  svg.replaceChildren();
  const defs = el("svg:defs");
  const marker = el("svg:marker", {id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
                                  markerWidth: 11, markerHeight: 11, orient: "auto",
                                  markerUnits: "userSpaceOnUse"});
  marker.append(el("svg:path", {d: "M0,0 L10,5 L0,10 z", fill: "#2563eb"}));
  defs.append(marker);
  svg.append(defs);
  const at = {};
  for (const dc of snap.dcs) at[dc.name] = [40 + dc.x * (MAP_W - 80), 30 + dc.y * (MAP_H - 60)];
  const slow = snap.slowest_dc ? snap.slowest_dc.dc : null;
  for (const link of snap.links) {
    if (!(link.share > 0) || !at[link.src] || !at[link.dst]) continue;
    const [x1, y1] = at[link.src], [x2, y2] = at[link.dst];
    const dx = x2 - x1, dy = y2 - y1, len = Math.hypot(dx, dy) || 1;
    const ux = dx / len, uy = dy / len, off = 8;     // each direction on its own side
    const ox = -uy * off, oy = ux * off;
    const ax = x1 + ux * R + ox, ay = y1 + uy * R + oy;
    const bx = x2 - ux * (R + 3) + ox, by = y2 - uy * (R + 3) + oy;
    const cls = "edge" + (link.stalled ? " stalled" : "");
    svg.append(el("svg:path", {
      class: cls, d: `M${ax.toFixed(1)},${ay.toFixed(1)} L${bx.toFixed(1)},${by.toFixed(1)}`,
      "stroke-width": (1.5 + 4 * Math.min(link.share, 2)).toFixed(2), "marker-end": "url(#arrow)",
      "data-src": link.src, "data-dst": link.dst, "data-share": link.share,
      "data-measured-mbps": link.measured_mbps, "data-planned-mbps": link.planned_mbps}));
    const mx = (ax + bx) / 2 + ox * 1.8, my = (ay + by) / 2 + oy * 1.8;
    svg.append(el("svg:text", {class: "rate", x: mx.toFixed(1), y: (my + 4).toFixed(1),
                               "data-src": link.src, "data-dst": link.dst},
                  link.measured_mbps === null ? `(${fmt(link.planned_mbps)})`
                                              : fmt(link.measured_mbps)));
  }
  for (const dc of snap.dcs) {
    const [x, y] = at[dc.name];
    const g = el("svg:g", {class: "dc" + (dc.name === slow ? " slowest" : ""),
                           "data-dc": dc.name, "data-round": dc.round,
                           "data-workers": dc.workers});
    g.append(el("svg:circle", {cx: x.toFixed(1), cy: y.toFixed(1), r: R}));
    g.append(el("svg:text", {class: "name", x: x.toFixed(1), y: (y - 2).toFixed(1)}, dc.name));
    g.append(el("svg:text", {class: "detail", x: x.toFixed(1), y: (y + 13).toFixed(1)},
                `round ${dc.round}`));
    g.append(el("svg:title", {}, `${dc.name}: round ${dc.round}, ${dc.workers} worker(s), ` +
                                 `${dc.behind} rounds behind the leader on average`));
    svg.append(g);
  }
  const policy = snap.policy;
  document.getElementById("policy").textContent = policy === null ? "no policy yet" :
    `policy v${policy.version} (from round ${policy.start_round}), ${policy.trees.length} ` +
    `tree(s): ` + policy.trees.map(t => `${t.root} ${Math.round(100 * t.share)}%`).join(", ") +
    ". Arrows: measured Mbit/s (planned in brackets before any measurement); width: share.";
}

function drawChart(snap) {
  const svg = document.getElementById("chart");
  svg.replaceChildren();
  const W = 420, H = 180, L = 44, B = 24, T = 10, Rm = 10;
  const hist = snap.rounds.history, bound = snap.rounds.bound_s;
  svg.setAttribute("data-points", hist.length);
  svg.setAttribute("data-bound-s", bound === null ? "" : bound);
  svg.append(el("svg:line", {class: "axis", x1: L, y1: H - B, x2: W - Rm, y2: H - B}));
  svg.append(el("svg:line", {class: "axis", x1: L, y1: T, x2: L, y2: H - B}));
  if (!hist.length) {
    svg.append(el("svg:text", {x: L + 10, y: H / 2}, "no completed rounds yet"));
    return;
  }
  const r0 = hist[0][0], r1 = Math.max(hist[hist.length - 1][0], r0 + 1);
  const ymax = Math.max(1e-9, 1.15 * Math.max(bound || 0, ...hist.map(p => p[1])));
  const sx = r => L + (r - r0) / (r1 - r0) * (W - L - Rm);
  const sy = v => H - B - v / ymax * (H - B - T);
  svg.append(el("svg:polyline", {class: "series",
    points: hist.map(p => `${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(" ")}));
  if (bound === null) {
    svg.append(el("svg:text", {x: W - Rm - 4, y: T + 8, "text-anchor": "end"},
                  "cut bound unknown: no model size reported yet"));
  } else {
    svg.append(el("svg:line", {class: "bound", x1: L, x2: W - Rm,
                               y1: sy(bound).toFixed(1), y2: sy(bound).toFixed(1)}));
    svg.append(el("svg:text", {x: W - Rm - 4, y: (sy(bound) - 4).toFixed(1),
                               "text-anchor": "end"}, `cut bound ${fmt(bound)} s`));
  }
  svg.append(el("svg:text", {x: L - 4, y: T + 8, "text-anchor": "end"}, fmt(ymax, 2)));
  svg.append(el("svg:text", {x: L - 4, y: H - B, "text-anchor": "end"}, "0"));
  svg.append(el("svg:text", {x: L, y: H - 6}, `round ${r0}`));
  svg.append(el("svg:text", {x: W - Rm, y: H - 6, "text-anchor": "end"},
                `round ${hist[hist.length - 1][0]} · s per round`));
}

function drawPanels(snap) {
  const p = snap.progress, r = snap.rounds;
  const rows = [
    ["rounds", `${p.rounds}` + (r.rate_per_s ? ` (${fmt(r.rate_per_s)}/s)` : "")],
    ["steps", p.steps === null ? "–" :
      `${p.steps}` + (p.total_steps ? ` of ${p.total_steps}` : "")],
    ["samples", p.samples === null ? "–" : String(p.samples)],
    ["ETA", p.eta_s === null ? (p.total_steps ? "–" : "total steps not declared")
                             : duration(p.eta_s)],
    ["round time", r.round_s === null ? "–" : `${fmt(r.round_s)} s` +
      (r.ratio === null ? "" : ` = ${fmt(r.ratio)}× the bound ${fmt(r.bound_s)} s`)],
    ["WAN", snap.wan_mb_per_s === null ? "–" : `${fmt(snap.wan_mb_per_s)} MB/s`],
    ["slowest DC", snap.slowest_dc === null ? "none: every DC keeps pace"
                                            : `${snap.slowest_dc.dc} (${snap.slowest_dc.why})`],
    ["workers", `${snap.workers.finished} of ${snap.workers.total} finished`],
  ];
  const dl = document.getElementById("progress");
  dl.replaceChildren();
  for (const [k, v] of rows) dl.append(el("dt", {}, k), el("dd", {"data-field": k}, v));
  document.getElementById("progress-bar").style.width =
    `${Math.round(100 * (p.fraction || 0))}%`;
  const events = document.getElementById("events");
  events.replaceChildren();
  for (const e of snap.events.slice().reverse()) {
    const li = el("li", {class: e.kind, "data-kind": e.kind});
    li.append(el("span", {class: "kind"}, e.kind), ` at ${fmt(e.t, 4)} s: ${e.text}`);
    events.append(li);
  }
  if (!snap.events.length) events.append(el("li", {}, "none yet"));
  const body = document.getElementById("links");
  body.replaceChildren();
  for (const l of snap.links) {
    const tr = el("tr", {class: "link", "data-src": l.src, "data-dst": l.dst,
                         "data-measured-mbps": l.measured_mbps,
                         "data-planned-mbps": l.planned_mbps});
    tr.append(el("td", {}, `${l.src} → ${l.dst}`), el("td", {class: "num"}, fmt(l.measured_mbps)),
              el("td", {class: "num"}, fmt(l.planned_mbps)),
              el("td", {class: "num"}, l.share ? `${Math.round(100 * l.share)}%` : "–"),
              el("td", {class: "num"}, l.measured_age_s === null ? "–" : `${l.measured_age_s} s`),
              el("td", {}, l.stalled ? "stalled" : ""));
    body.append(tr);
  }
}

function draw(snap) {
  const main = document.getElementById("status");
  main.dataset.state = snap.state;
  main.dataset.policyVersion = snap.policy ? snap.policy.version : "";
  main.dataset.latestRound = snap.rounds.latest;
  const state = document.getElementById("state");
  state.textContent = snap.state;
  state.className = "state " + snap.state.split(" ")[0];
  document.getElementById("summary").textContent =
    `${snap.dcs.length} DCs · sync ${snap.sync} · round ${snap.rounds.latest}`;
  document.getElementById("updated").textContent =
    `up ${duration(snap.uptime_s)} · updated ${new Date().toLocaleTimeString()}`;
  drawMap(snap);
  drawChart(snap);
  drawPanels(snap);
}

async function poll() {
  try {
    const reply = await fetch("status.json", {cache: "no-store"});
    if (!reply.ok) throw new Error(`HTTP ${reply.status}`);
    draw(await reply.json());
  } catch (err) {
    const state = document.getElementById("state");
    state.textContent = `scheduler unreachable (${err.message}); retrying`;
    state.className = "state unreachable";
    document.getElementById("status").dataset.state = "unreachable";
  }
  setTimeout(poll, POLL_MS);
}

poll();
