// The console's API (/admin/api/…) as the page calls it: the admin token
// goes in the Authorization header of every request (no cookie), and every
// refusal becomes a ConsoleError carrying the message of the error body,
// {"error": {"code", "message"}}, which the page shows as it is.
//
// Reading an error body (refusal) is done alike in web/static/api.js, on
// purpose: each page loads only its own modules, from its own path under
// its own Content-Security-Policy, with no build step, and the dozen lines
// in common are all the two clients share (their paths, tokens, errors and
// messages differ). A fix to one is worth making in the other.

export class ConsoleError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = 'ConsoleError';
    this.status = status; // 0 when the server did not answer
    this.code = code;
  }
}

async function refusal(res) {
  let code = `http_${res.status}`;
  let message = `The server answered ${res.status} ${res.statusText}`.trim() + '.';
  try {
    const body = await res.json();
    if (body && body.error && typeof body.error.message === 'string') {
      code = body.error.code || code;
      message = body.error.message;
    }
  } catch {
    // no error body (a proxy's page, say): the status says it
  }
  return new ConsoleError(res.status, code, message);
}

export class ConsoleApi {
  // token may be empty: an open console (--dev) needs none.
  constructor(token) {
    this.token = token;
  }

  async call(method, path) {
    const headers = {};
    if (this.token) headers.Authorization = 'Bearer ' + this.token;
    let res;
    try {
      res = await fetch('/admin/api/' + path, { method, headers, cache: 'no-store' });
    } catch {
      throw new ConsoleError(0, 'unreachable', 'The process does not answer: it may have stopped. The console tries again.');
    }
    if (!res.ok) throw await refusal(res);
    return res.json();
  }

  overview() { return this.call('GET', 'overview'); }
  outbox() { return this.call('GET', 'outbox'); }
  dead() { return this.call('GET', 'outbox/dead'); }
  retry(id) { return this.call('POST', `outbox/dead/${encodeURIComponent(id)}/retry`); }
  queue() { return this.call('GET', 'queue'); }
  metrics() { return this.call('GET', 'metrics'); }
  config() { return this.call('GET', 'config'); }
}
