// hbidx ops dashboard: polls /v1/ops/summary and draws it. No libraries: the page must work
// on a host with no internet access, from the binary alone.
//
// The API key (when the server requires one) comes from the URL fragment, /dashboard#key=KEY:
// a fragment is never sent to the server, so the key stays out of access logs. It is moved to
// sessionStorage (this tab only) and removed from the address bar, then sent as
// `Authorization: Bearer KEY` on every data request.
"use strict";

const KEY_STORAGE = "hbidx_api_key";
const COLORS = ["#58a6ff", "#f0883e", "#3fb950", "#d2a8ff", "#ff7b72", "#e3b341", "#79c0ff", "#56d4dd", "#db61a2", "#a5d6ff"];
const body = document.body;
let refreshMs = 2000;
let errorCount = 0;

function noteError(message) {
  errorCount += 1;
  body.dataset.errors = String(errorCount);
  console.error("hbidx dashboard: " + message);
}
window.addEventListener("error", (event) => noteError(event.message || "script error"));
window.addEventListener("unhandledrejection", (event) => noteError(String(event.reason)));

function apiKey() {
  const match = /(?:^#|&)key=([^&]+)/.exec(location.hash);
  if (match) {
    try {
      sessionStorage.setItem(KEY_STORAGE, decodeURIComponent(match[1]));
    } catch (_) {
      // Storage can be disabled; the key then only lives in this page.
      return decodeURIComponent(match[1]);
    }
    history.replaceState(null, "", location.pathname + location.search);
  }
  try {
    return sessionStorage.getItem(KEY_STORAGE);
  } catch (_) {
    return null;
  }
}
const KEY = apiKey();

// ---- formatting -------------------------------------------------------------------------

function fmt(value, digits) {
  if (value === null || value === undefined || !isFinite(value)) return "–";
  const abs = Math.abs(value);
  if (abs >= 1e9) return (value / 1e9).toFixed(1) + "G";
  if (abs >= 1e6) return (value / 1e6).toFixed(1) + "M";
  if (abs >= 1e4) return (value / 1e3).toFixed(1) + "k";
  if (abs >= 100) return value.toFixed(0);
  return value.toFixed(digits === undefined ? 2 : digits);
}
function bytes(value) {
  if (!isFinite(value)) return "–";
  if (value >= 1 << 30) return (value / (1 << 30)).toFixed(2) + " GiB";
  if (value >= 1 << 20) return (value / (1 << 20)).toFixed(1) + " MiB";
  if (value >= 1 << 10) return (value / (1 << 10)).toFixed(1) + " KiB";
  return value + " B";
}
function last(values) {
  if (!values) return null;
  for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null) return values[i];
  return null;
}
function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}
// Series of one family ("indexing_rate:user" → family "indexing_rate", subject "user").
function family(series, name) {
  const out = [];
  for (const [key, values] of Object.entries(series)) {
    const at = key.indexOf(":");
    const fam = at < 0 ? key : key.slice(0, at);
    if (fam === name) out.push({ label: at < 0 ? key : key.slice(at + 1), values });
  }
  return out;
}

// ---- charts -----------------------------------------------------------------------------

function niceMax(max) {
  if (!(max > 0)) return 1;
  const power = Math.pow(10, Math.floor(Math.log10(max)));
  for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= max) return step * power;
  return 10 * power;
}

// Draws lines over time on a canvas. `lines`: [{label, values, color?}], values aligned to `t`.
function lineChart(name, t, lines, unit, scale) {
  const canvas = document.querySelector(`canvas[data-chart="${name}"]`);
  const legend = canvas.parentElement.querySelector(".legend");
  const k = scale || 1;
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth || 400;
  const height = canvas.clientHeight || 170;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  const g = canvas.getContext("2d");
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.clearRect(0, 0, width, height);
  const left = 46, right = 8, top = 8, bottom = 20;
  const plotW = width - left - right, plotH = height - top - bottom;
  let max = 0, points = 0;
  for (const line of lines) for (const v of line.values) if (v !== null) { max = Math.max(max, v * k); points++; }
  const yMax = niceMax(max);
  // Enough decimals to tell the grid lines apart (12.5, 0.05), and no more.
  const step = yMax / 4;
  let decimals = 0;
  while (decimals < 3 && Math.abs(step * Math.pow(10, decimals) - Math.round(step * Math.pow(10, decimals))) > 1e-9) decimals++;
  g.font = "11px system-ui, sans-serif";
  g.strokeStyle = "#263040"; g.fillStyle = "#8593a3"; g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = top + plotH - (plotH * i) / 4;
    g.beginPath(); g.moveTo(left, y + 0.5); g.lineTo(left + plotW, y + 0.5); g.stroke();
    g.textAlign = "right"; g.textBaseline = "middle";
    g.fillText(fmt(step * i, decimals), left - 6, y);
  }
  const t0 = t.length ? t[0] : 0, t1 = t.length ? t[t.length - 1] : 1;
  const span = Math.max(t1 - t0, 1);
  g.textBaseline = "top";
  g.textAlign = "left"; g.fillText(t.length ? `-${Math.round(span / 1000)}s` : "", left, top + plotH + 5);
  g.textAlign = "right"; g.fillText("now", left + plotW, top + plotH + 5);
  const x = (ms) => left + (plotW * (ms - t0)) / span;
  const y = (v) => top + plotH - (plotH * v * k) / yMax;
  legend.replaceChildren();
  lines.forEach((line, index) => {
    const color = line.color || COLORS[index % COLORS.length];
    g.strokeStyle = color; g.lineWidth = 1.8; g.beginPath();
    let drawing = false;
    line.values.forEach((v, i) => {
      if (v === null) { drawing = false; return; }
      if (drawing) g.lineTo(x(t[i]), y(v)); else g.moveTo(x(t[i]), y(v));
      drawing = true;
    });
    g.stroke();
    const item = el("span");
    const swatch = el("i"); swatch.style.background = color;
    item.append(swatch, line.label);
    item.append(el("b", {}, fmt(last(line.values) === null ? null : last(line.values) * k) + (unit ? " " + unit : "")));
    legend.append(item);
  });
  if (!lines.length) legend.append(el("span", { class: "empty" }, "no series yet"));
  canvas.parentElement.dataset.points = String(points);
  return points;
}

// Rows per region as SVG bars (with a tooltip per region).
function hotspotChart(table) {
  const box = el("figure", { class: "panel hotspot", "data-table": table.name });
  box.append(el("figcaption", {}, `${table.name}: rowkey ${table.rowkey}`));
  const report = table.hotspot;
  if (!report) {
    box.append(el("p", { class: "empty" }, "region report not computed yet"));
    box.dataset.regions = "0";
    return box;
  }
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  const W = 560, H = 190, pad = 22;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("preserveAspectRatio", "none");
  const max = Math.max(1, ...report.regions.map((r) => r.rows));
  const mean = report.total / Math.max(1, report.regions.length);
  const barW = (W - pad) / report.regions.length;
  report.regions.forEach((region, i) => {
    const h = ((H - pad) * region.rows) / max;
    const rect = document.createElementNS(ns, "rect");
    rect.setAttribute("x", String(pad + i * barW + 1));
    rect.setAttribute("y", String(H - pad - h));
    rect.setAttribute("width", String(Math.max(1, barW - 2)));
    rect.setAttribute("height", String(h));
    const hot = mean > 0 && region.rows > 1.5 * mean;
    rect.setAttribute("fill", hot ? "#f85149" : "#58a6ff");
    const title = document.createElementNS(ns, "title");
    title.textContent = `region ${i}: [${region.start || "(start)"}, ${region.end || "(end)"}) ${region.rows} rows`;
    rect.append(title);
    svg.append(rect);
  });
  const meanLine = document.createElementNS(ns, "line");
  const my = H - pad - ((H - pad) * mean) / max;
  meanLine.setAttribute("x1", String(pad)); meanLine.setAttribute("x2", String(W));
  meanLine.setAttribute("y1", String(my)); meanLine.setAttribute("y2", String(my));
  meanLine.setAttribute("stroke", "#e3b341"); meanLine.setAttribute("stroke-dasharray", "4 3");
  svg.append(meanLine);
  const label = document.createElementNS(ns, "text");
  label.setAttribute("x", String(pad)); label.setAttribute("y", String(H - 6));
  label.setAttribute("fill", "#8593a3"); label.setAttribute("font-size", "11");
  label.textContent = report.splits;
  svg.append(label);
  box.append(svg);
  const stats = el("div", { class: "stats" });
  stats.append(
    "rows ", el("b", {}, fmt(report.total, 0)),
    report.sampled < report.total ? ` (estimated from ${fmt(report.sampled, 0)} sampled)` : "",
    " · cv ", el("b", {}, report.cv === null ? "–" : report.cv.toFixed(3)),
    " · max/mean ", el("b", {}, report.max_mean_ratio === null ? "–" : report.max_mean_ratio.toFixed(3)),
    " · as of ", el("b", {}, new Date(report.computed_ms).toLocaleTimeString()),
  );
  box.append(stats);
  box.dataset.regions = String(report.regions.length);
  return box;
}

// One part of the memory budget: used / budget, with a bar.
function memoryPart(part) {
  const used = part.used_bytes;
  const ratio = used === null || used === undefined ? null : used / Math.max(1, part.budget_bytes);
  const node = el("div", { class: "memory" + (ratio !== null && ratio >= 0.95 ? " warn" : "") });
  node.dataset.part = part.part;
  const label = el("div", {});
  label.append(el("b", {}, part.part),
    " · " + (ratio === null ? "not counted" : bytes(used)) + " of " + bytes(part.budget_bytes));
  node.append(label);
  const bar = el("div", { class: "bar" });
  const fill = el("div", {});
  fill.style.width = ratio === null ? "0" : Math.min(100, ratio * 100).toFixed(1) + "%";
  bar.append(fill);
  node.append(bar);
  return node;
}

function tile(label, value, level) {
  const node = el("div", { class: "tile" + (level ? " " + level : "") });
  node.append(el("div", { class: "v" }, value), el("div", { class: "k" }, label));
  return node;
}

// ---- refresh ----------------------------------------------------------------------------

function render(data) {
  const t = data.t || [];
  const s = data.series || {};
  refreshMs = Math.max(1000, (data.interval_seconds || 2) * 1000);
  document.getElementById("meta").textContent =
    `v${data.version} · ${data.tables.length} table(s) · window ${data.window_seconds}s · ${t.length} points` +
    (data.metrics_enabled ? "" : " · metrics recorder not installed") +
    (data.cluster
      ? ` · shard ${data.cluster.shard} replica ${data.cluster.replica} · replicas ready ` +
        data.cluster.shards.map(([ready, all], i) => `s${i} ${ready}/${all}`).join(" ")
      : "");

  const sum = (fam) => family(s, fam).reduce((acc, line) => acc + (last(line.values) || 0), 0);
  const maxOf = (fam) => family(s, fam).reduce((acc, line) => Math.max(acc, last(line.values) || 0), 0);
  const breakers = family(s, "breaker");
  const worstBreaker = breakers.reduce((acc, line) => Math.max(acc, last(line.values) || 0), 0);
  const tiles = document.getElementById("tiles");
  tiles.replaceChildren(
    tile("requests / s", fmt(last(s.qps))),
    tile("lookup p50", fmt(last(s.lookup_p50_ms)) + " ms"),
    tile("lookup p99", fmt(last(s.lookup_p99_ms)) + " ms"),
    tile("indexed events / s", fmt(sum("indexing_rate"))),
    tile("max partition lag", fmt(maxOf("lag"), 0), maxOf("lag") > 10000 ? "warn" : ""),
    tile("index size", bytes(data.tables.reduce((acc, tb) => acc + tb.index_bytes, 0))),
    tile("live rows", fmt(data.tables.reduce((acc, tb) => acc + tb.rows, 0), 0)),
    tile("dead letters", fmt(sum("dead_letters"), 0), sum("dead_letters") > 0 ? "warn" : ""),
    tile("store errors / s", fmt(sum("store_errors_per_s")), sum("store_errors_per_s") > 0 ? "bad" : ""),
    tile("store breaker", breakers.length ? ["closed", "half-open", "open"][worstBreaker] || String(worstBreaker) : "n/a",
      worstBreaker >= 2 ? "bad" : worstBreaker >= 1 ? "warn" : ""),
  );

  const nonNull = (values) => values || t.map(() => null);
  lineChart("qps", t, [
    { label: "all", values: nonNull(s.qps) },
    { label: "lookups", values: nonNull(s.lookup_qps) },
    { label: "5xx", values: nonNull(s.errors_per_s), color: "#f85149" },
  ], "/s");
  lineChart("latency", t, [
    { label: "p50", values: nonNull(s.lookup_p50_ms) },
    { label: "p99", values: nonNull(s.lookup_p99_ms) },
  ], "ms");
  lineChart("indexing", t, family(s, "indexing_rate"), "/s");
  lineChart("lag", t, family(s, "lag"), "");
  lineChart("size", t, family(s, "index_bytes"), "MB", 1 / (1 << 20));
  lineChart("commit", t, family(s, "commit_p99_ms"), "ms");
  lineChart("deadletters", t, family(s, "dead_letters"), "");
  lineChart("store", t, family(s, "store_p99_ms"), "ms");
  lineChart("storeerrors", t, [
    ...family(s, "store_calls_per_s").map((l) => ({ label: l.label + " calls", values: l.values })),
    ...family(s, "store_errors_per_s").map((l) => ({ label: l.label + " errors", values: l.values, color: "#f85149" })),
    ...breakers.map((l) => ({ label: l.label + " breaker (0 closed, 2 open)", values: l.values, color: "#e3b341" })),
  ], "");

  document.getElementById("memory").replaceChildren(...(data.memory || []).map(memoryPart));

  const hotspots = document.getElementById("hotspots");
  hotspots.replaceChildren(...data.tables.map(hotspotChart));
}

async function refresh() {
  const state = document.getElementById("state");
  const notice = document.getElementById("notice");
  try {
    const headers = { Accept: "application/json" };
    if (KEY) headers.Authorization = "Bearer " + KEY;
    const response = await fetch("/v1/ops/summary", { headers, cache: "no-store" });
    if (response.status === 401 || response.status === 403) {
      notice.hidden = false;
      notice.textContent = KEY
        ? "The API key was refused (" + response.status + "). Open /dashboard#key=KEY with a key that may read ops data."
        : "This server needs an API key: open /dashboard#key=YOUR_KEY (the key stays in this tab).";
      throw new Error("summary answered " + response.status);
    }
    if (!response.ok) throw new Error("summary answered " + response.status);
    const data = await response.json();
    render(data);
    notice.hidden = true;
    state.textContent = "live · " + new Date().toLocaleTimeString();
    state.className = "pill ok";
    body.dataset.status = "ok";
    body.dataset.refreshes = String(Number(body.dataset.refreshes) + 1);
  } catch (error) {
    state.textContent = "error";
    state.className = "pill error";
    body.dataset.status = "error";
    noteError(error.message || String(error));
  } finally {
    setTimeout(refresh, refreshMs);
  }
}

refresh();
