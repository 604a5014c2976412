// swarmnode dashboard: polls /api/state and draws it. Read-only, no libraries, no
// outside requests (the page's Content-Security-Policy allows this origin only).
// Peer-supplied text (peer ids, model names, reasons) is only ever set as textContent.
"use strict";

const POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";
const COLORS = ["#2563eb", "#16a34a", "#d97706", "#9333ea"];

function el(tag, attrs, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4))
                                   : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// A round grid step near ``raw``: 1, 2 or 5 times a power of ten.
function niceStep(raw) {
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  return [1, 2, 5, 10].map((k) => k * mag).find((s) => s >= raw * 0.999);
}

function fmt(x, digits) {
  if (x === null || x === undefined) return "–";
  if (typeof x !== "number") return String(x);
  if (Math.abs(x) >= 1e6) return (x / 1e6).toFixed(1) + "M";
  if (Math.abs(x) >= 1e4) return (x / 1e3).toFixed(1) + "k";
  return x.toFixed(digits === undefined ? (Number.isInteger(x) ? 0 : 2) : digits);
}

function ago(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 90) return Math.round(seconds) + " s ago";
  if (seconds < 5400) return Math.round(seconds / 60) + " min ago";
  return (seconds / 3600).toFixed(1) + " h ago";
}

// A line (or stacked-bar) chart of series [{name, color, points: [[x, y], ...]}].
function chart(svg, series, opts) {
  opts = opts || {};
  svg.replaceChildren();
  const w = svg.clientWidth || 400, h = svg.clientHeight || 190;
  const m = { l: 46, r: 10, t: 30, b: 22 };
  const all = series.flatMap((s) => s.points);
  if (!all.length) {
    svg.append(el("svg:text", { x: w / 2, y: h / 2, "text-anchor": "middle", class: "empty" },
                  opts.empty || "no rounds yet"));
    return;
  }
  const xs = all.map((p) => p[0]);
  let x0 = Math.min(...xs), x1 = Math.max(...xs);
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  let ys = all.map((p) => p[1]);
  if (opts.stacked) {
    const sums = {};
    for (const s of series) for (const [x, y] of s.points) sums[x] = (sums[x] || 0) + y;
    ys = Object.values(sums);
  }
  let y0 = opts.ymin !== undefined ? opts.ymin : Math.min(0, ...ys);
  let y1 = opts.ymax !== undefined ? Math.max(opts.ymax, ...ys) : Math.max(...ys);
  if (y1 <= y0) y1 = y0 + 1;
  const tick = niceStep((y1 - y0) / 4);
  y0 = Math.floor(y0 / tick) * tick;
  y1 = Math.ceil(y1 / tick - 1e-9) * tick;
  const digits = Math.max(0, -Math.floor(Math.log10(tick)));
  if (opts.stacked) { x0 -= 0.5; x1 += 0.5; }  // whole bars at both ends
  const X = (x) => m.l + ((x - x0) / (x1 - x0)) * (w - m.l - m.r);
  const Y = (y) => h - m.b - ((y - y0) / (y1 - y0)) * (h - m.t - m.b);
  for (let v = y0; v <= y1 + tick / 2; v += tick) {  // horizontal grid and y labels
    svg.append(el("svg:line", { x1: m.l, x2: w - m.r, y1: Y(v), y2: Y(v), class: "axis" }));
    svg.append(el("svg:text", { x: m.l - 6, y: Y(v) + 4, "text-anchor": "end" }, fmt(v, digits)));
  }
  const step = Math.max(1, Math.ceil((x1 - x0) / 6));
  for (let x = Math.ceil(x0); x <= x1; x += step) {
    svg.append(el("svg:text", { x: X(x), y: h - 6, "text-anchor": "middle" }, fmt(x, 0)));
  }
  if (opts.stacked) {
    const base = {};
    const bw = Math.max(1, ((w - m.l - m.r) / (x1 - x0 + 1)) * 0.8);
    for (const s of series) {
      for (const [x, y] of s.points) {
        const b = base[x] || 0;
        svg.append(el("svg:rect", { x: X(x) - bw / 2, width: bw, y: Y(b + y),
                                    height: Math.max(0, Y(b) - Y(b + y)), fill: s.color }));
        base[x] = b + y;
      }
    }
  } else {
    for (const s of series) {
      if (!s.points.length) continue;
      const d = s.points.map((p, i) => (i ? "L" : "M") + X(p[0]).toFixed(1) + "," + Y(p[1]).toFixed(1));
      svg.append(el("svg:path", { d: d.join(""), fill: "none", stroke: s.color,
                                  "stroke-width": 1.8, "stroke-linejoin": "round",
                                  "stroke-dasharray": s.dashed ? "5 4" : "none" }));
      if (s.points.length === 1) {
        const [x, y] = s.points[0];
        svg.append(el("svg:circle", { cx: X(x), cy: Y(y), r: 3, fill: s.color }));
      }
    }
  }
  let lx = m.l;  // legend along the top
  for (const s of series) {
    svg.append(el("svg:rect", { x: lx, y: 5, width: 10, height: 10, fill: s.color }));
    const t = el("svg:text", { x: lx + 14, y: 14 }, s.name);
    svg.append(t);
    lx += 24 + 6.5 * s.name.length;
  }
}

function curve(rounds, key, scale) {
  return rounds.map((r) => [r.round, scale ? scale(r, r[key]) : r[key]]);
}

function series(rounds, specs) {
  // Later series are dashed, so one that lies on an earlier one stays visible.
  return specs.map(([name, key, scale], i) => ({ name, color: COLORS[i % COLORS.length],
                                                 dashed: i === 2,
                                                 points: curve(rounds, key, scale) }));
}

function bars(div, counts, bad, empty) {
  div.replaceChildren();
  const rows = Object.entries(counts).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1]);
  if (!rows.length) {
    div.append(el("span", { class: "muted" }, empty));
    return;
  }
  const top = rows[0][1];
  for (const [label, n] of rows.slice(0, 12)) {
    const fill = el("div", { class: bad ? "fill bad" : "fill" });
    fill.style.width = ((100 * n) / top).toFixed(1) + "%";
    const track = el("div", { class: "track" });
    track.append(fill);
    div.append(el("span", { class: "label", title: label }, label), track,
               el("span", { class: "n" }, fmt(n)));
  }
}

function spark(points) {
  const svg = el("svg:svg", { viewBox: "0 0 160 24", preserveAspectRatio: "none" });
  if (points.length < 2) return svg;
  const xs = points.map((p) => p[0]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs) || 1;
  const d = points.map((p, i) => (i ? "L" : "M") + ((160 * (p[0] - x0)) / (x1 - x0 || 1)).toFixed(1)
                                 + "," + (22 - 20 * Math.max(0, Math.min(1, p[1]))).toFixed(1));
  svg.append(el("svg:path", { d: d.join(""), fill: "none", stroke: COLORS[0], "stroke-width": 1.5 }));
  return svg;
}

function short(peer) {
  return peer.length > 16 ? peer.slice(0, 6) + "…" + peer.slice(-6) : peer;
}

function facts(v) {
  const net = v.network || {};
  const items = [["state", v.state]];
  if (v.role === "trainer") {
    items.push(["round", v.max_rounds ? v.round + " / " + v.max_rounds : v.round],
               ["model", v.model]);
  }
  if (v.swarm) items.push(["swarm", v.swarm], ["peers", net.num_peers], ["mesh", net.mesh_size],
                          ["msgs in/out", fmt(net.msgs_in) + " / " + fmt(net.msgs_out)]);
  items.push(["memory", fmt(v.rss_mb, 0) + " MiB"]);
  if (v.role === "trainer") items.push(["checkpoint", ago(v.checkpoint_age_s)]);
  const dl = document.getElementById("facts");
  dl.replaceChildren();
  for (const [k, val] of items) {
    const d = el("div");
    d.append(el("dt", {}, k), el("dd", {}, val === null || val === undefined ? "–" : String(val)));
    dl.append(d);
  }
}

function swarmTable(v) {
  const body = document.querySelector("#swarm tbody");
  body.replaceChildren();
  if (!v.peers.length) {
    const td = el("td", { colspan: 8, class: "muted" },
                  v.swarm ? "no peer has sent groups yet" : "this node trains alone (swarm.enabled: false)");
    const tr = el("tr");
    tr.append(td);
    body.append(tr);
    return;
  }
  for (const p of v.peers) {
    const tr = el("tr");
    const last = p.claimed.length ? p.claimed[p.claimed.length - 1] : null;
    const sparkCell = el("td");
    sparkCell.append(spark(p.claimed));
    tr.append(el("td", { class: "mono", title: p.peer }, short(p.peer)),
              el("td", { title: p.model }, p.model || "–"),
              el("td", {}, ago(v.now - p.last_seen)), sparkCell,
              el("td", { class: "num" }, last ? fmt(last[1], 3) + " (r" + last[0] + ")" : "–"),
              el("td", { class: "num" }, fmt(p.groups_accepted)),
              el("td", { class: "num" }, fmt(p.groups_rejected)),
              el("td", { class: "num" }, fmt(p.groups_trained)));
    body.append(tr);
  }
}

function render(v) {
  document.getElementById("name").textContent = v.name;
  document.getElementById("role").textContent = v.role + (v.swarm ? " · swarm " + v.swarm : "");
  document.title = v.name + " · swarmnode";
  facts(v);
  const trainer = v.role === "trainer";
  for (const s of document.querySelectorAll(".trainer")) s.classList.toggle("hidden", !trainer);
  const net = v.network || {};
  const rejected = {};
  for (const [k, n] of Object.entries((v.ingest || {}).ingest_rejected || {})) rejected["group: " + k] = n;
  for (const [k, n] of Object.entries(net.rejected || {})) rejected["message: " + k] = n;
  bars(document.getElementById("rejected"), rejected, true, "nothing rejected");
  if (!trainer) return;
  const r = v.rounds;
  chart(document.getElementById("chart-reward"),
        series(r, [["reward", "reward_mean"], ["accuracy", "accuracy"], ["format", "format_reward"]]),
        { ymin: 0, ymax: 1 });
  chart(document.getElementById("chart-time"),
        series(r, [["generation", "gen_seconds"], ["training", "train_seconds"]]), { stacked: true });
  const perSec = (secs) => (row, n) => (row[secs] > 0 ? n / row[secs] : 0);
  chart(document.getElementById("chart-tokens"),
        series(r, [["generated/s", "tokens_generated", perSec("gen_seconds")],
                   ["trained/s", "tokens_trained", perSec("train_seconds")]]));
  chart(document.getElementById("chart-groups"),
        series(r, [["local", "local_groups"], ["external", "external_groups"],
                   ["skipped", "groups_skipped"]]), { stacked: true });
  chart(document.getElementById("chart-net"),
        series(r, [["queue groups", "queue_groups"], ["peers", "peers"], ["mesh", "mesh"]]));
  bars(document.getElementById("trained"), v.trained_from, false,
       v.swarm ? "no external groups trained on yet" : "this node trains alone");
  swarmTable(v);
}

async function poll() {
  const conn = document.getElementById("conn");
  try {
    const res = await fetch("/api/state", { cache: "no-store" });
    if (!res.ok) throw new Error("HTTP " + res.status);
    render(await res.json());
    conn.textContent = "live · updated " + new Date().toLocaleTimeString();
    conn.classList.remove("bad");
  } catch (err) {
    conn.textContent = "node not answering (" + err.message + "); retrying";
    conn.classList.add("bad");
  }
  setTimeout(poll, POLL_MS);
}

poll();
