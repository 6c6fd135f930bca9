// Small helpers every part of the page uses to tell the reader something.

// showError puts an error's message in an alert element (role="alert",
// so that screen readers say it at once).
export function showError(el, err) {
  el.textContent = err && err.message ? err.message : String(err);
  el.hidden = false;
}

export function clearError(el) {
  el.textContent = '';
  el.hidden = true;
}

// say writes a status line (role="status": read out politely).
export function say(el, text) {
  el.textContent = text;
}

const timeFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' });

// formatTime is the exact time, as the reader's locale writes it.
export function formatTime(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : timeFormat.format(d);
}

const dateFormat = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium' });
const minute = 60 * 1000;
const hour = 60 * minute;
const day = 24 * hour;

// relativeTime says how long ago iso was, as a feed does: "now", "3 min",
// "2 h", "5 d"; past a month, the date. A time ahead of the reader's clock
// (the server's clock runs a little ahead) is "now".
export function relativeTime(iso, now = Date.now()) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  const ago = now - d.getTime();
  if (ago < minute) return 'now';
  if (ago < hour) return `${Math.floor(ago / minute)} min`;
  if (ago < day) return `${Math.floor(ago / hour)} h`;
  if (ago < 30 * day) return `${Math.floor(ago / day)} d`;
  return dateFormat.format(d);
}

// timeElement is a <time> that shows how long ago iso was, with the exact
// time as its title (shown on hover) and in its accessible name.
// refreshTimes keeps it current.
export function timeElement(iso) {
  const el = document.createElement('time');
  el.dateTime = iso;
  el.className = 'ago';
  el.title = formatTime(iso);
  el.textContent = relativeTime(iso);
  return el;
}

// refreshTimes rewrites every relative time on the page: "now" becomes
// "1 min" without a reload.
export function refreshTimes(root = document) {
  const now = Date.now();
  for (const el of root.querySelectorAll('time.ago')) {
    const text = relativeTime(el.dateTime, now);
    if (el.textContent !== text) el.textContent = text;
  }
}

// userName is how the page names a user: users are only ids here.
export function userName(userId, me) {
  return String(userId) === String(me) ? `You (user ${userId})` : `User ${userId}`;
}

// userLink is a user's name, opening their page.
export function userLink(userId, me) {
  const a = document.createElement('a');
  a.href = `#user/${userId}`;
  a.className = 'user';
  a.textContent = userName(userId, me);
  return a;
}

// confirmAction asks the reader to confirm something that cannot be undone,
// in the page's dialog (a modal <dialog>: the focus stays in it, Escape
// cancels). It resolves to true when confirmed.
export function confirmAction({ title, text, confirm }) {
  const dialog = document.getElementById('confirm');
  if (dialog.open) return Promise.resolve(false); // one question at a time
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  const yes = document.getElementById('confirm-yes');
  const no = document.getElementById('confirm-no');
  yes.textContent = confirm;
  return new Promise((resolve) => {
    const done = new AbortController();
    const answer = (ok) => {
      done.abort();
      if (dialog.open) dialog.close();
      resolve(ok);
    };
    yes.addEventListener('click', () => answer(true), { signal: done.signal });
    no.addEventListener('click', () => answer(false), { signal: done.signal });
    // Escape, or the dialog closed any other way.
    dialog.addEventListener('close', () => answer(false), { signal: done.signal });
    dialog.showModal();
    no.focus(); // the safe choice first
  });
}

// pending runs a button's request once at a time: a second press while it
// runs does nothing. The button is marked aria-disabled, not disabled, so
// that it keeps the keyboard focus.
export async function pending(button, fn) {
  if (button.getAttribute('aria-disabled') === 'true') return undefined;
  button.setAttribute('aria-disabled', 'true');
  try {
    return await fn();
  } finally {
    button.removeAttribute('aria-disabled');
  }
}
