// Rates and latency quantiles from two reads of GET /admin/stats, and a small SVG line
// chart. The gateway's counters are cumulative; a chart point is the difference of two
// reads over the time between them (the node's clock, at_ms), so the browser's clock
// plays no part.

/**
 * The per-second rate of each counter between two reads, or null when the reads cannot
 * be compared (no earlier read, the node restarted, no time passed).
 * @param {{at_ms:number, counters:Record<string,number>}|null} prev
 * @param {{at_ms:number, counters:Record<string,number>}} cur
 * @returns {Record<string, number>|null}
 */
export function rates(prev, cur) {
  if (!prev || !cur || prev.node !== cur.node) return null;
  const dt = (cur.at_ms - prev.at_ms) / 1000;
  if (!(dt > 0)) return null;
  const out = {};
  for (const [k, v] of Object.entries(cur.counters || {})) {
    const d = v - ((prev.counters || {})[k] ?? 0);
    if (d < 0) return null; // a counter went back: a restarted node
    out[k] = d / dt;
  }
  return out;
}

/**
 * The q-quantile (0 < q < 1), in seconds, of the observations made between two reads of
 * a cumulative histogram {count, buckets:[{le, count}]}, interpolated linearly inside the
 * bucket it falls in (as Prometheus' histogram_quantile). Observations above the last
 * finite bucket give that bucket's bound. null when nothing was observed between them.
 */
export function quantile(q, prev, cur) {
  if (!prev || !cur) return null;
  const total = cur.count - prev.count;
  if (!(total > 0)) return null;
  const before = new Map((prev.buckets || []).map((b) => [b.le, b.count]));
  const rank = q * total;
  let lowerLE = 0;
  let lowerCount = 0;
  for (const b of cur.buckets || []) {
    const c = b.count - (before.get(b.le) ?? 0);
    if (c >= rank) {
      const inBucket = c - lowerCount;
      return inBucket > 0 ? lowerLE + ((b.le - lowerLE) * (rank - lowerCount)) / inBucket : b.le;
    }
    lowerLE = b.le;
    lowerCount = c;
  }
  return lowerLE;
}

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

/** A number for a chart label: 3 significant digits, no exponent. */
export function fmt(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "—";
  if (v === 0) return "0";
  const a = Math.abs(v);
  if (a >= 100) return v.toFixed(0);
  if (a >= 10) return v.toFixed(1);
  if (a >= 1) return v.toFixed(2);
  return v.toPrecision(2);
}

/**
 * A line chart of a few series over the last `keep` points, drawn into a <figure> as
 * SVG with a caption naming each series and its latest value. The figure carries
 * data-points (points held) and data-last (JSON of each series' latest value), which
 * is what the browser tests wait on.
 */
export class LineChart {
  /**
   * @param {HTMLElement} figure
   * @param {{title: string, unit: string, series: {key: string, label: string, color: string}[], keep?: number}} opts
   */
  constructor(figure, opts) {
    this.fig = figure;
    this.opts = opts;
    this.keep = opts.keep || 60;
    this.points = []; // {key: value|null}
    this.render();
  }

  clear() {
    this.points = [];
    this.render();
  }

  /** Adds one point: {seriesKey: value or null (no data)}. */
  push(point) {
    this.points.push(point);
    if (this.points.length > this.keep) this.points.shift();
    this.render();
  }

  render() {
    const W = 320;
    const H = 120;
    const P = { l: 38, r: 8, t: 8, b: 16 };
    const { series, title, unit } = this.opts;
    const values = this.points.flatMap((p) => series.map((s) => p[s.key])).filter((v) => typeof v === "number");
    const max = (values.some((v) => v > 0) ? Math.max(...values) : 1) * 1.15;
    const x = (i) => P.l + ((W - P.l - P.r) * i) / Math.max(1, this.keep - 1);
    const y = (v) => H - P.b - ((H - P.t - P.b) * v) / max;
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title });
    for (const f of [0, 0.5, 1]) {
      const v = (max / 1.15) * f;
      root.append(svg("line", { x1: P.l, x2: W - P.r, y1: y(v), y2: y(v), class: "grid" }));
      const t = svg("text", { x: P.l - 4, y: y(v) + 4, class: "axis", "text-anchor": "end" });
      t.textContent = values.length ? fmt(v) : "";
      root.append(t);
    }
    const offset = this.keep - this.points.length;
    for (const s of series) {
      let d = "";
      let pen = false;
      this.points.forEach((p, i) => {
        const v = p[s.key];
        if (typeof v !== "number") {
          pen = false;
          return;
        }
        d += `${pen ? "L" : "M"}${x(i + offset).toFixed(1)},${y(v).toFixed(1)}`;
        pen = true;
      });
      if (d) root.append(svg("path", { d, stroke: s.color, class: "series" }));
      // The latest point as a dot, so a single point shows too.
      let i = this.points.length - 1;
      while (i >= 0 && typeof this.points[i][s.key] !== "number") i--;
      if (i >= 0) root.append(svg("circle", { cx: x(i + offset), cy: y(this.points[i][s.key]), r: 2.6, fill: s.color }));
    }
    const last = {};
    const cap = document.createElement("figcaption");
    const head = document.createElement("strong");
    head.textContent = title;
    cap.append(head);
    for (const s of series) {
      const latest = [...this.points].reverse().find((p) => typeof p[s.key] === "number");
      last[s.key] = latest ? latest[s.key] : null;
      const item = document.createElement("span");
      item.className = "legend";
      item.style.setProperty("--c", s.color);
      item.textContent = `${s.label} ${fmt(last[s.key])}${last[s.key] === null ? "" : ` ${unit}`}`;
      cap.append(item);
    }
    this.fig.dataset.points = String(this.points.length);
    this.fig.dataset.last = JSON.stringify(last);
    this.fig.replaceChildren(cap, root);
  }
}
