// The operator console's page: sign in with admin.token (kept in this
// tab's sessionStorage only), then every panel read from its own endpoint
// and read again every few seconds. A panel whose dependency is down says
// so; the others go on. A 401 from any endpoint leads back to sign-in.

import { ConsoleApi } from './api.js';
import { clockTime } from './format.js';
import { Panel, chartsRenderer, deadRenderer, renderConfig, renderOutbox, renderQueue } from './panels.js';

const TOKEN_KEY = 'newsfeed-admin-token';
const REFRESH_MS = 5000;

const $ = (id) => document.getElementById(id);

let api = null;
let timer = 0;
let refreshing = null;

const panels = {
  outbox: new Panel('outbox-panel', 'outbox-error', renderOutbox),
  dead: new Panel('dead-panel', 'dead-error', deadRenderer(retry)),
  queue: new Panel('queue-panel', 'queue-error', renderQueue),
  metrics: new Panel('charts-panel', null, chartsRenderer()),
  config: new Panel('config-panel', 'config-error', renderConfig),
};

function showSignIn(message) {
  stopRefreshing();
  api = null;
  sessionStorage.removeItem(TOKEN_KEY);
  $('console').hidden = true;
  $('session').hidden = true;
  $('sign-in').hidden = false;
  $('sign-in-error').hidden = !message;
  $('sign-in-error').textContent = message || '';
  $('token').value = '';
  $('token').focus();
}

function showConsole(overview, token) {
  $('sign-in').hidden = true;
  $('console').hidden = false;
  $('session').hidden = false;
  $('sign-out').hidden = overview.open;
  $('open-badge').hidden = !overview.open;
  $('process').textContent = `${overview.roles.join(' + ')} · ${overview.version}`;
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  refresh();
}

// signIn checks a token (or none, for an open console) with the overview,
// and opens the console when it is accepted.
async function signIn(token) {
  const candidate = new ConsoleApi(token);
  try {
    const overview = await candidate.overview();
    api = candidate;
    showConsole(overview, token);
  } catch (err) {
    if (err.status === 401) {
      // No token yet is no error to show; a refused one is.
      showSignIn(token ? err.message : '');
      return;
    }
    showSignIn(err.message);
  }
}

// refresh reads every panel once; one refresh runs at a time.
function refresh() {
  if (!api) return Promise.resolve();
  if (refreshing) return refreshing;
  clearTimeout(timer);
  const current = api;
  const reads = Object.entries(panels).map(([name, panel]) =>
    current[name]().then((data) => {
      if (api === current) panel.show(data);
    }, (err) => {
      if (api !== current) return;
      if (err.status === 401) throw err;
      panel.fail(err);
    }));
  refreshing = Promise.all(reads).then(() => {
    $('updated').textContent = `Updated at ${clockTime(new Date())}; again every ${REFRESH_MS / 1000} s.`;
  }, (err) => {
    showSignIn(err.message);
  }).finally(() => {
    refreshing = null;
    if (api === current) timer = setTimeout(tick, REFRESH_MS);
  });
  return refreshing;
}

// tick refreshes while the tab is visible; a hidden tab asks nothing and
// catches up when it is shown again.
function tick() {
  if (document.hidden) return;
  refresh();
}

function stopRefreshing() {
  clearTimeout(timer);
  timer = 0;
}

async function retry(id, button) {
  if (!api || button.getAttribute('aria-disabled') === 'true') return;
  button.setAttribute('aria-disabled', 'true');
  const status = $('retry-status');
  status.textContent = `Retrying event ${id}…`;
  try {
    await api.retry(id);
    status.textContent = `Event ${id} is pending again: a dispatcher publishes it next.`;
  } catch (err) {
    if (err.status === 401) {
      showSignIn(err.message);
      return;
    }
    status.textContent = `Event ${id} was not retried: ${err.message}`;
  } finally {
    button.removeAttribute('aria-disabled');
  }
  await refresh();
  // The list was drawn again: the focus goes to what happened.
  status.focus();
}

$('token-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const token = $('token').value.trim();
  if (token) signIn(token);
});
$('sign-out').addEventListener('click', () => showSignIn(''));
$('refresh').addEventListener('click', () => refresh());
document.addEventListener('visibilitychange', () => {
  if (!document.hidden && api && !refreshing) refresh();
});

signIn(sessionStorage.getItem(TOKEN_KEY) || '');
