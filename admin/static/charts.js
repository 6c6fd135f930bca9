// Line charts drawn as inline SVG, at the pixel size of their container so
// that their text stays legible from a phone's width up. No library: a few
// lines and labels are all the console needs.

const SVG = 'http://www.w3.org/2000/svg';
const HEIGHT = 180;
const PAD = { left: 56, right: 12, top: 10, bottom: 24 };

function el(name, attrs, text) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

// niceCeiling rounds a maximum up to 1, 2 or 5 times a power of ten, so
// that the axis reads in round numbers.
function niceCeiling(v) {
  if (!(v > 0)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) {
    if (v <= m * p) return m * p;
  }
  return 10 * p;
}

// LineChart draws series of values over the same times into a container
// element, and draws again when the container's width changes.
export class LineChart {
  // label names the chart for assistive technology (the figure's caption
  // says it too); format writes a value of the axis.
  constructor(container, { label, format }) {
    this.container = container;
    this.label = label;
    this.format = format;
    this.data = null;
    this.width = 0;
    new ResizeObserver(() => {
      if (this.container.clientWidth !== this.width) this.draw();
    }).observe(container);
  }

  // update takes times (Date, ascending) and series [{name, className,
  // values (number or null for none, one per time)}] and draws them.
  update(times, series) {
    this.data = { times, series };
    this.draw();
  }

  draw() {
    if (!this.data) return;
    const { times, series } = this.data;
    this.width = this.container.clientWidth;
    const width = Math.max(this.width, 200);
    const svg = el('svg', {
      width, height: HEIGHT, viewBox: `0 0 ${width} ${HEIGHT}`, role: 'img', 'aria-label': this.label,
      class: 'line-chart',
    });
    const plotW = width - PAD.left - PAD.right;
    const plotH = HEIGHT - PAD.top - PAD.bottom;
    const values = series.flatMap((s) => s.values.filter((v) => v !== null && Number.isFinite(v)));
    const top = niceCeiling(Math.max(0, ...values));
    const x = (i) => PAD.left + (times.length > 1 ? (i * plotW) / (times.length - 1) : plotW);
    const y = (v) => PAD.top + plotH - (v / top) * plotH;

    for (const f of [0, 0.5, 1]) {
      const gy = y(top * f);
      svg.append(el('line', { x1: PAD.left, x2: width - PAD.right, y1: gy, y2: gy, class: 'grid' }));
      svg.append(el('text', { x: PAD.left - 6, y: gy + 4, 'text-anchor': 'end', class: 'axis' }, this.format(top * f)));
    }
    if (times.length > 0) {
      const fmt = (d) => d.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
      svg.append(el('text', { x: PAD.left, y: HEIGHT - 6, class: 'axis' }, fmt(times[0])));
      svg.append(el('text', { x: width - PAD.right, y: HEIGHT - 6, 'text-anchor': 'end', class: 'axis' }, fmt(times[times.length - 1])));
    }
    for (const s of series) {
      // A run of points between gaps (null) is one line; a lone point a dot.
      let run = [];
      const flush = () => {
        if (run.length === 1) {
          svg.append(el('circle', { cx: run[0][0], cy: run[0][1], r: 2.5, class: `dot ${s.className}` }));
        } else if (run.length > 1) {
          svg.append(el('polyline', { points: run.map((p) => p.join(',')).join(' '), class: `line ${s.className}` }));
        }
        run = [];
      };
      s.values.forEach((v, i) => {
        if (v === null || !Number.isFinite(v)) {
          flush();
        } else {
          run.push([x(i).toFixed(1), y(v).toFixed(1)]);
        }
      });
      flush();
    }
    this.container.replaceChildren(svg);
    if (series.length > 1) {
      const legend = document.createElement('ul');
      legend.className = 'legend';
      for (const s of series) {
        const li = document.createElement('li');
        li.className = s.className;
        li.textContent = s.name;
        legend.append(li);
      }
      this.container.append(legend);
    }
  }
}
