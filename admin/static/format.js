// How the console writes numbers, ages, durations and times.

const whole = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
const oneDecimal = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });
const clock = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
const dateTime = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });

export function count(n) {
  return whole.format(n);
}

// rate writes a per-second figure: whole above 10, one decimal below.
export function rate(n) {
  return n >= 10 ? whole.format(n) : oneDecimal.format(n);
}

// seconds writes a latency: ms below a second, s above.
export function seconds(s) {
  if (s === null || s === undefined) return '–';
  if (s < 1) return `${whole.format(s * 1000)} ms`;
  return `${oneDecimal.format(s)} s`;
}

// age writes how long ago, coarsely: 12 s, 4 min, 3 h, 2 d.
export function age(s) {
  if (s === null || s === undefined) return '–';
  if (s < 60) return `${whole.format(s)} s`;
  if (s < 3600) return `${oneDecimal.format(s / 60)} min`;
  if (s < 86400) return `${oneDecimal.format(s / 3600)} h`;
  return `${oneDecimal.format(s / 86400)} d`;
}

export function clockTime(date) {
  return clock.format(date);
}

export function when(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : dateTime.format(d);
}
