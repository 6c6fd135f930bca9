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

export function formatTime(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? iso : timeFormat.format(d);
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
