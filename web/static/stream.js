// The live part of the home feed: GET /v1/feed/stream, Server-Sent Events.
// `event: post` brings a post that landed in the feed (its id is the event
// id), `event: remove` ({"id": N}) one that left it. EventSource reconnects
// by itself after a dropped connection and sends Last-Event-ID, from which
// the server resumes with no gap; the token goes as access_token, since
// EventSource cannot set headers.
//
// EventSource gives up for good when the server refuses (401, 429, 503 …)
// and does not say why: then the page asks the same URL itself to read the
// status, and tries again later — or, on a 401, signs out. A refusal that
// says when to come back (429 and 503 with Retry-After) is waited out as it
// says; the reader is told in plain words that live updates paused and
// when they resume, never in the server's words, which speak to operators
// (of limits and their configuration keys).

import { errorFrom, ApiError } from './api.js';

const retryMin = 2000;
const retryMax = 60000;

export class LiveFeed {
  // opts: token; newestId() → the newest post id shown (0: none), where a
  // new connection resumes; onPost(post); onRemove(id); onState(state,
  // pause) with state connecting | live | reconnecting | down, and for
  // down pause = {seconds, reason}: the whole seconds until the next try
  // (told again each second) and why, a sentence for the reader;
  // onResumed() after a reconnection, for what a resume cannot bring back
  // (removals while away); onUnauthorized(err).
  constructor(opts) {
    Object.assign(this, opts);
    this.source = null;
    this.timer = 0;
    this.probe = null;
    this.delay = retryMin;
    this.stopped = false;
    this.lastId = 0;
    this.interrupted = false;
  }

  start() {
    this.stopped = false;
    this.connect();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
    clearInterval(this.ticker);
    if (this.probe) this.probe.abort();
    if (this.source) this.source.close();
    this.source = null;
  }

  url() {
    const q = new URLSearchParams({ access_token: this.token });
    const from = Math.max(this.lastId, this.newestId());
    if (from > 0) q.set('last_event_id', String(from));
    return '/v1/feed/stream?' + q.toString();
  }

  connect() {
    if (this.stopped) return;
    clearInterval(this.ticker);
    this.onState(this.interrupted ? 'reconnecting' : 'connecting');
    const source = new EventSource(this.url());
    this.source = source;
    source.addEventListener('open', () => {
      this.delay = retryMin;
      this.onState('live');
      if (this.interrupted) {
        this.interrupted = false;
        this.onResumed();
      }
    });
    source.addEventListener('post', (ev) => {
      const post = parse(ev.data);
      if (!post || post.id === undefined) return;
      this.lastId = Math.max(this.lastId, Number(post.id));
      this.onPost(post);
    });
    source.addEventListener('remove', (ev) => {
      const data = parse(ev.data);
      if (data && data.id !== undefined) this.onRemove(data.id);
    });
    source.addEventListener('error', () => {
      if (this.stopped || source !== this.source) return;
      this.interrupted = true;
      if (source.readyState === EventSource.CONNECTING) {
        this.onState('reconnecting'); // the browser retries by itself
        return;
      }
      source.close(); // refused: find out why
      this.source = null;
      this.diagnose();
    });
  }

  // diagnose asks the stream's URL once, reads the refusal, and plans the
  // next attempt.
  async diagnose() {
    const probe = new AbortController();
    this.probe = probe;
    let err = null;
    let after = null; // ms, from Retry-After
    try {
      const res = await fetch(this.url(), { signal: probe.signal, headers: { Accept: 'text/event-stream' } });
      if (res.ok) {
        probe.abort(); // it would stream: the refusal has passed
      } else {
        after = retryAfter(res.headers.get('Retry-After'));
        err = await errorFrom(res);
      }
    } catch {
      if (this.stopped) return;
      if (!probe.signal.aborted) {
        err = new ApiError(0, 'unreachable', 'The server cannot be reached.');
      }
    } finally {
      if (this.probe === probe) this.probe = null;
    }
    if (this.stopped) return;
    if (err && err.status === 401) {
      this.onUnauthorized(err);
      return;
    }
    let wait = this.delay;
    this.delay = Math.min(this.delay * 2, retryMax);
    if (after !== null && (err.status === 429 || err.status === 503)) wait = after;
    if (err) this.pause(wait, reasonFor(err));
    this.timer = setTimeout(() => this.connect(), wait);
  }

  // pause tells the reader, each second, how long until the next try.
  pause(wait, reason) {
    const until = Date.now() + wait;
    const tell = () => {
      const seconds = Math.max(0, Math.ceil((until - Date.now()) / 1000));
      this.onState('down', { seconds, reason });
      if (seconds === 0) clearInterval(this.ticker);
    };
    clearInterval(this.ticker);
    this.ticker = setInterval(tell, 1000);
    tell();
  }
}

// reasonFor says why the stream was refused, to the reader: the server's
// message for a bad request (it is about the request), plain words for a
// limit or an outage.
function reasonFor(err) {
  switch (err.status) {
    case 0:
      return 'The server cannot be reached.';
    case 429:
      return 'Too many of your tabs or windows are live at once.';
    case 503:
      return 'The server is busy.';
    default:
      return err.message;
  }
}

// retryAfter reads a Retry-After header, in seconds or as a date, as
// milliseconds from now; null when there is none or it does not parse.
export function retryAfter(value) {
  if (!value) return null;
  const v = value.trim();
  if (/^[0-9]+$/.test(v)) return Number(v) * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? null : Math.max(0, at - Date.now());
}

function parse(data) {
  try {
    return JSON.parse(data);
  } catch {
    return null;
  }
}
