// Each panel of the console: what it shows from its endpoint. Text from
// the server goes in through textContent only.

import { LineChart } from './charts.js';
import { age, count, rate, seconds, when, clockTime } from './format.js';

function node(tag, className, text) {
  const n = document.createElement(tag);
  if (className) n.className = className;
  if (text !== undefined) n.textContent = text;
  return n;
}

function $(id) {
  return document.getElementById(id);
}

// Panel shows one endpoint's answer, or its error in the panel's alert;
// the panel's last good answer stays on screen, marked stale, meanwhile.
export class Panel {
  constructor(sectionId, errorId, render) {
    this.section = $(sectionId);
    this.error = errorId ? $(errorId) : null;
    this.render = render;
  }

  show(data) {
    if (this.error) {
      this.error.hidden = true;
      this.error.textContent = '';
    }
    this.section.classList.remove('stale');
    this.render(data);
    this.section.setAttribute('aria-busy', 'false');
  }

  fail(err) {
    this.section.setAttribute('aria-busy', 'false');
    this.section.classList.add('stale');
    if (!this.error) return;
    if (this.error.textContent !== err.message) this.error.textContent = err.message;
    this.error.hidden = false;
  }
}

export function renderOutbox(o) {
  $('outbox-pending').textContent = count(o.pending);
  $('outbox-in-flight').textContent = count(o.in_flight);
  $('outbox-dead').textContent = count(o.dead);
  $('outbox-dead').closest('div').classList.toggle('alarm', o.dead > 0);
  $('outbox-oldest').textContent = o.pending + o.in_flight > 0 ? age(o.oldest_pending_age_seconds) : 'none';
}

// renderDead lists the dead events, each with its retry button. It draws
// only when the list changed, so that a button is not replaced under a
// pointer on its way to it.
export function deadRenderer(onRetry) {
  let shown = '';
  return (d) => {
    const key = JSON.stringify(d);
    if (key === shown) return;
    shown = key;
    const list = $('dead-events');
    list.replaceChildren(...d.events.map((e) => deadEvent(e, onRetry)));
    $('dead-summary').textContent =
      d.total === 0 ? 'No dead events.' : d.total > d.events.length ? `${d.events.length} of ${count(d.total)} dead events.` : `${count(d.total)} dead event${d.total === 1 ? '' : 's'}.`;
  };
}

function deadEvent(e, onRetry) {
  const li = node('li', 'dead-event');
  li.dataset.id = String(e.id);
  const head = node('div', 'dead-head');
  const title = node('h3', '', `Event ${e.id}`);
  head.append(title, node('span', 'badge', e.type));
  if (e.aggregate) head.append(node('span', 'about', `${e.aggregate.type} ${e.aggregate.id}`));
  const button = node('button', 'retry', 'Retry');
  button.type = 'button';
  button.setAttribute('aria-label', `Retry event ${e.id}`);
  button.addEventListener('click', () => onRetry(e.id, button));
  head.append(button);
  li.append(head);

  const facts = node('dl', 'facts');
  const fact = (name, value) => {
    const div = node('div');
    div.append(node('dt', '', name), node('dd', '', value));
    facts.append(div);
  };
  fact('Attempts', count(e.attempts));
  fact('Failures', count(e.failures));
  fact('Created', when(e.created_at));
  fact('Died', e.died_at ? when(e.died_at) : 'before this was recorded');
  li.append(facts);
  li.append(node('p', 'last-error-label', 'Last error'));
  li.append(node('pre', 'last-error', e.last_error || '(none recorded)'));
  return li;
}

export function renderQueue(q) {
  const body = $('partitions').tBodies[0];
  const rows = q.partitions.map((p) => {
    const tr = node('tr');
    tr.dataset.partition = String(p.partition);
    const cell = (text, cls) => tr.append(node('td', cls, text));
    cell(String(p.partition));
    cell(p.stream, 'mono');
    cell(count(p.length), 'num');
    cell(count(p.pending), 'num pending');
    cell(p.oldest_pending_id ? `${age(p.oldest_pending_age_seconds)} (${p.oldest_pending_id})` : 'none');
    const consumers = node('td', 'consumers');
    if (!p.group_exists) {
      consumers.textContent = 'no consumer group yet';
    } else if (p.consumers.length === 0) {
      consumers.textContent = 'none';
    } else {
      const ul = node('ul');
      for (const c of p.consumers) {
        const li = node('li');
        li.dataset.consumer = c.name;
        li.append(node('span', 'mono', c.name), document.createTextNode(`: ${count(c.pending)}`));
        ul.append(li);
      }
      consumers.append(ul);
    }
    tr.append(consumers);
    cell(count(p.dead_letters), 'num');
    return tr;
  });
  body.replaceChildren(...rows);
}

export function chartsRenderer() {
  const latency = new LineChart($('latency-chart'), { label: 'Delivery latency over time, p50 and p99', format: seconds });
  const fanout = new LineChart($('rate-chart'), { label: 'Feed entries written a second over time', format: rate });
  return (m) => {
    const times = m.samples.map((s) => new Date(s.at));
    const every = count(m.sample_every_seconds);
    if (m.samples.length === 0) {
      const wait = `No samples yet: the first point comes ${every} s after the process started.`;
      $('latency-chart').replaceChildren(node('p', 'hint', wait));
      $('rate-chart').replaceChildren(node('p', 'hint', wait));
      $('latency-now').textContent = '';
      $('rate-now').textContent = '';
      return;
    }
    latency.update(times, [
      { name: 'p50', className: 's1', values: m.samples.map((s) => s.delivery_p50_seconds) },
      { name: 'p99', className: 's2', values: m.samples.map((s) => s.delivery_p99_seconds) },
    ]);
    fanout.update(times, [{ name: 'entries/s', className: 's1', values: m.samples.map((s) => s.fanout_entries_per_second) }]);
    const last = m.samples[m.samples.length - 1];
    const at = clockTime(new Date(last.at));
    $('latency-now').textContent = last.deliveries > 0
      ? `${every} s to ${at}: ${count(last.deliveries)} deliveries, p50 ${seconds(last.delivery_p50_seconds)}, p99 ${seconds(last.delivery_p99_seconds)}.`
      : `${every} s to ${at}: no deliveries.`;
    $('rate-now').textContent = `${every} s to ${at}: ${rate(last.fanout_entries_per_second)} entries/s, ${rate(last.fanout_tickets_per_second)} tickets/s.`;
  };
}

export function renderConfig(c) {
  const rows = c.settings.map((s) => {
    const tr = node('tr');
    tr.dataset.key = s.key;
    tr.append(node('th', 'mono', s.key), node('td', 'mono value', s.value === '' ? '""' : s.value), node('td', 'source', s.source));
    tr.firstChild.scope = 'row';
    return tr;
  });
  $('config').tBodies[0].replaceChildren(...rows);
}
