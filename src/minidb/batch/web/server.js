// The Server view: live charts of the minidb server the API is attached to.
//
// Theory of operation
// - While the view is on screen (and the tab visible), it reads `GET /server/stats` every
//   POLL_MS, one request at a time. Each reading is the server's own figures at that moment
//   (INFO and its /metrics, read by the API on the spot; docs/batch-api.md): counters since the
//   server started, gauges, and the round trips of the API's probe. The API keeps no history;
//   the view keeps the last WINDOW_S seconds of readings and turns counters into rates itself
//   (difference over the time between two readings, by the server's clock).
// - Latency: p50/p99 of the server's own request latency histogram (send to the data owner to
//   the replies' write) over the last LATENCY_WINDOW_S seconds: the difference of the
//   cumulative buckets of two readings, interpolated within a bucket as Prometheus's
//   histogram_quantile does. A server without its metrics listener has no histogram; then the
//   view takes the probe round trips (EXISTS through the data owner) of those readings.
// - Charts are uPlot (vendored, /static/vendor/), one per figure. Series are fixed except the
//   commands' kinds: when a new kind shows up, that chart is made again with it.
// - Each chart's element carries its last values in data-* attributes and a readout line in
//   text, so what the chart shows can be read without looking at the canvas.

import { api } from "./api.js";
import { $, bytes } from "./dom.js";

const POLL_MS = 1000;
const WINDOW_S = 120; // seconds of readings the charts show
const LATENCY_WINDOW_S = 30; // seconds of requests (or probe round trips) each p50/p99 is taken over
const MAX_KINDS = 8; // command kinds charted by name; the rest are summed as "other"
const HEIGHT = 170;
const COLOURS = ["#2d6cdf", "#c23b32", "#23884a", "#b7791f", "#7b4bc4", "#0f8b8d", "#d0569a",
                 "#5d6773", "#8a6d3b"];

function quantile(sorted, q) {
  if (!sorted.length) return null;
  const at = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[at];
}

// The q-quantile, in ms, of the requests a latency histogram counted between two readings
// (cumulative [upper bound s, count] pairs, the last bound -1 for +Inf); null if none.
function histogramQuantile(now, before, q) {
  if (!now || !before || !now.length || now.length !== before.length) return null;
  const counts = now.map(([bound, n], i) => [bound, n - before[i][1]]);
  const total = counts[counts.length - 1][1];
  if (total <= 0) return null;
  const target = q * total;
  let lower = 0;
  let below = 0;
  for (const [bound, n] of counts) {
    if (n >= target) {
      if (bound < 0) return lower * 1000; // past the last finite bound: that bound
      const share = n > below ? (target - below) / (n - below) : 1;
      return (lower + (bound - lower) * share) * 1000;
    }
    lower = bound < 0 ? lower : bound;
    below = n;
  }
  return null;
}

function rate(now, before, pick) {
  if (!before) return null;
  const dt = (now.unix_ms - before.unix_ms) / 1000;
  const a = pick(now);
  const b = pick(before);
  if (dt <= 0 || a === null || b === null || a === undefined || b === undefined || a < b) {
    return null; // a restart resets counters: no rate across it
  }
  return (a - b) / dt;
}

// An axis label: short, whatever the magnitude (34k, 1.5k, 36, 0.25), with its unit.
function tick(value, unit) {
  const size = Math.abs(value);
  const text = size >= 10_000 ? `${+(value / 1000).toFixed(0)}k`
    : size >= 1000 ? `${+(value / 1000).toFixed(1)}k`
      : size >= 10 ? `${+value.toFixed(0)}` : `${+value.toFixed(2)}`;
  return `${text}${unit}`;
}

function fixed(value, digits = 1) {
  return value === null || value === undefined ? "–" : value.toFixed(digits);
}

export function createServerView(session) {
  const view = {
    visible: false,
    readings: [], // the last WINDOW_S seconds of /server/stats, oldest first
    charts: new Map(), // id -> {plot, series: [labels], key}
    timer: null,
    polling: false,
  };

  function target(id) {
    return $(`chart-${id}`).querySelector(".plot");
  }

  // The chart `id` with these series labels, made (again) when they change.
  function chart(id, labels, unit) {
    const key = labels.join("\u0000");
    const found = view.charts.get(id);
    if (found && found.key === key) return found;
    if (found) found.plot.destroy();
    const box = target(id);
    const width = Math.max(260, box.clientWidth || 400);
    const plot = new globalThis.uPlot({
      width, height: HEIGHT,
      // Every figure here is a count, a rate, a size or a time: its axis starts at 0.
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1] } },
      legend: { live: false },
      cursor: { drag: { x: false, y: false } },
      axes: [{}, { size: 64, values: (u, ticks) => ticks.map((v) => tick(v, unit)) }],
      series: [{}, ...labels.map((label, i) => ({
        label, stroke: COLOURS[i % COLOURS.length], fill: `${COLOURS[i % COLOURS.length]}14`,
        width: 1.6, points: { show: false },
      }))],
    }, [[], ...labels.map(() => [])], box);
    const made = { plot, key, labels };
    view.charts.set(id, made);
    return made;
  }

  function draw(id, labels, unit, columns) {
    const xs = view.readings.map((r) => r.unix_ms / 1000);
    chart(id, labels, unit).plot.setData([xs, ...columns]);
    $(`chart-${id}`).dataset.points = String(xs.length);
  }

  function readout(id, text, data = {}) {
    const box = $(`chart-${id}`);
    box.querySelector(".readout").textContent = text;
    for (const [name, value] of Object.entries(data)) box.dataset[name] = String(value);
  }

  // The command kinds that ran in the window, busiest first.
  function kinds() {
    const first = view.readings[0].commands;
    const last = view.readings[view.readings.length - 1].commands;
    return Object.keys(last).map((k) => [k, (last[k] || 0) - (first[k] || 0)])
      .filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1]).map(([k]) => k);
  }

  function render() {
    const rs = view.readings;
    const last = rs[rs.length - 1];
    const prev = (i) => (i > 0 ? rs[i - 1] : null);

    // Commands per second: the total, and by kind (the MAX_KINDS busiest by name).
    const moved = kinds();
    const named = moved.slice(0, MAX_KINDS).sort();
    const total = rs.map((r, i) => rate(r, prev(i), (x) => x.commands_total));
    const columns = named.map((k) => rs.map((r, i) => rate(r, prev(i), (x) => x.commands[k] ?? 0)));
    const other = rs.map((r, i) => {
      const all = rate(r, prev(i), (x) => Object.values(x.commands).reduce((a, b) => a + b, 0));
      if (all === null) return null;
      const namedSum = named.reduce((sum, k) => sum + (rate(r, prev(i), (x) => x.commands[k] ?? 0)
                                                        ?? 0), 0);
      return Math.max(0, all - namedSum);
    });
    const showOther = moved.length > named.length;
    draw("commands", ["total", ...named, ...(showOther ? ["other"] : [])], "",
         [total, ...columns, ...(showOther ? [other] : [])]);
    readout("commands", `${last.commands_total.toLocaleString("en")} commands since start · `
            + `${fixed(total[total.length - 1], 0)}/s now`,
            { total: last.commands_total, rate: total[total.length - 1] ?? "" });

    // Latency: p50 and p99 over the last LATENCY_WINDOW_S seconds, from the server's histogram
    // (or, without one, from the probe's round trips).
    const histogram = last.latency !== null && last.latency !== undefined;
    const p50 = [];
    const p99 = [];
    rs.forEach((r) => {
      const since = r.unix_ms - LATENCY_WINDOW_S * 1000;
      const window = rs.filter((x) => x.unix_ms > since && x.unix_ms <= r.unix_ms);
      if (histogram) {
        const base = rs.filter((x) => x.unix_ms <= since).pop() ?? rs[0];
        const from = base === r ? null : base.latency;
        p50.push(histogramQuantile(r.latency, from, 0.5));
        p99.push(histogramQuantile(r.latency, from, 0.99));
        return;
      }
      const trips = window.flatMap((x) => x.probe_ms).sort((a, b) => a - b);
      p50.push(quantile(trips, 0.5));
      p99.push(quantile(trips, 0.99));
    });
    draw("latency", ["p50", "p99"], " ms", [p50, p99]);
    const source = histogram ? "the server's requests" : "probe round trips";
    readout("latency", `p50 ${fixed(p50[p50.length - 1], 2)} ms · p99 `
            + `${fixed(p99[p99.length - 1], 2)} ms (${source}, last ${LATENCY_WINDOW_S} s)`,
            { p50: p50[p50.length - 1] ?? "", p99: p99[p99.length - 1] ?? "" });

    draw("connections", ["connections"], "", [rs.map((r) => r.connections)]);
    readout("connections", `${last.connections} open`, { value: last.connections });

    const appends = rs.map((r, i) => rate(r, prev(i), (x) => x.wal_appends));
    const syncs = rs.map((r, i) => rate(r, prev(i), (x) => x.wal_syncs));
    draw("wal", ["appends/s", "syncs/s"], "", [appends, syncs]);
    readout("wal", last.wal_appends === null
      ? "not known: the API was started without --minidb-metrics"
      : `${fixed(appends[appends.length - 1], 0)} appends/s · `
        + `${fixed(syncs[syncs.length - 1], 0)} syncs/s`,
            { appends: last.wal_appends ?? "", syncs: last.wal_syncs ?? "" });

    draw("memory", ["RSS"], " MiB", [rs.map((r) => r.memory_bytes / 1048576)]);
    readout("memory", `${bytes(last.memory_bytes)} resident`, { value: last.memory_bytes });

    const lagging = rs.some((r) => r.replication);
    $("chart-replication").hidden = !lagging;
    if (lagging) {
      draw("replication", ["lag"], " s", [rs.map((r) => (r.replication
                                                         ? r.replication.lag_seconds : null))]);
      const rep = last.replication;
      readout("replication", rep ? `${rep.role}: ${fixed(rep.lag_seconds, 2)} s behind, `
              + `${rep.lag_records} records` : "no longer shipping or following",
              { value: rep ? rep.lag_seconds : "" });
    }
    $("server-uptime").textContent = `up ${Math.floor(last.uptime_s / 60)} min · ${last.keys} keys`;
  }

  async function poll() {
    clearTimeout(view.timer);
    if (!view.visible || view.polling) return;
    view.polling = true;
    try {
      const reading = await api("GET", "/server/stats");
      const since = reading.unix_ms - WINDOW_S * 1000;
      view.readings = [...view.readings.filter((r) => r.unix_ms > since
                                                && r.unix_ms < reading.unix_ms), reading];
      $("server-error").textContent = "";
      render();
    } catch (err) {
      if (session.handleAuth(err)) return;
      $("server-error").textContent = err.message;
    } finally {
      view.polling = false;
      if (view.visible) view.timer = setTimeout(poll, document.hidden ? 5 * POLL_MS : POLL_MS);
    }
  }

  function resize() {
    for (const [id, made] of view.charts) {
      made.plot.setSize({ width: Math.max(260, target(id).clientWidth || 400), height: HEIGHT });
    }
  }

  function start() {
    window.addEventListener("resize", resize);
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden && view.visible) poll();
    });
  }

  function show() {
    view.visible = true;
    poll();
    requestAnimationFrame(resize);
  }

  function hide() {
    view.visible = false;
    clearTimeout(view.timer);
  }

  function reset() {
    hide();
    view.readings = [];
    for (const made of view.charts.values()) made.plot.destroy();
    view.charts.clear();
  }

  return { start, show, hide, reset };
}
