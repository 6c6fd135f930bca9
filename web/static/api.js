// The HTTP API as the page calls it: every request carries the bearer token,
// and every refusal becomes an ApiError with the message of the error body
// ({"error": {"code", "message"}}), which the page shows as it is.
//
// Reading an error body (errorFrom) is done alike in admin/static/api.js,
// on purpose: each page loads only its own modules, from its own path under
// its own Content-Security-Policy, with no build step, and the dozen lines
// in common are all the two clients share (their paths, tokens, errors and
// messages differ). A fix to one is worth making in the other.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = 'ApiError';
    this.status = status; // 0: no answer at all
    this.code = code;
  }
}

// errorFrom reads the error body of a refused response. A response without
// one (a proxy's page, say) still gets a message that names the status.
export async function errorFrom(res) {
  let code = 'http_' + res.status;
  let message = `The server answered ${res.status} ${res.statusText}`.trim() + '.';
  try {
    const body = await res.json();
    if (body && body.error && typeof body.error.message === 'string') {
      code = body.error.code || code;
      message = body.error.message;
    }
  } catch {
    // not JSON: keep the status
  }
  return new ApiError(res.status, code, message);
}

const unreachable = () =>
  new ApiError(0, 'unreachable', 'The server cannot be reached. Check the connection and try again.');

export class Api {
  // onUnauthorized is called with the error of any 401: the token expired
  // or is not (or no longer) accepted.
  constructor(token, onUnauthorized) {
    this.token = token;
    this.onUnauthorized = onUnauthorized;
  }

  // call sends one request and returns the decoded body (null for 204).
  async call(method, path, body) {
    const init = { method, headers: { Authorization: 'Bearer ' + this.token } };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch {
      throw unreachable();
    }
    if (!res.ok) {
      const err = await errorFrom(res);
      if (res.status === 401) this.onUnauthorized(err);
      throw err;
    }
    if (res.status === 204) return null;
    return res.json();
  }

  feed(cursor) {
    return this.call('GET', '/v1/feed' + query({ cursor }));
  }
  userPosts(userId, cursor) {
    return this.call('GET', `/v1/users/${seg(userId)}/posts` + query({ cursor }));
  }
  createPost(text) {
    return this.call('POST', '/v1/posts', { body: text });
  }
  deletePost(id) {
    return this.call('DELETE', `/v1/posts/${seg(id)}`);
  }
  follow(userId) {
    return this.call('PUT', `/v1/following/${seg(userId)}`);
  }
  unfollow(userId) {
    return this.call('DELETE', `/v1/following/${seg(userId)}`);
  }
  followers(userId, cursor) {
    return this.call('GET', `/v1/users/${seg(userId)}/followers` + query({ cursor }));
  }
  following(userId, cursor, limit) {
    return this.call('GET', `/v1/users/${seg(userId)}/following` + query({ cursor, limit }));
  }
  // repost reposts post id (of a repost: its original); the answer is the
  // repost, the same one when asked again.
  repost(id) {
    return this.call('POST', `/v1/posts/${seg(id)}/reposts`);
  }
  mute(userId) {
    return this.call('PUT', `/v1/mutes/${seg(userId)}`);
  }
  unmute(userId) {
    return this.call('DELETE', `/v1/mutes/${seg(userId)}`);
  }
  mutes(cursor, limit) {
    return this.call('GET', '/v1/mutes' + query({ cursor, limit }));
  }
  block(userId) {
    return this.call('PUT', `/v1/blocks/${seg(userId)}`);
  }
  unblock(userId) {
    return this.call('DELETE', `/v1/blocks/${seg(userId)}`);
  }
  blocks(cursor, limit) {
    return this.call('GET', '/v1/blocks' + query({ cursor, limit }));
  }
}

// devToken asks a --dev server for a token of any user id.
export async function devToken(userId) {
  let res;
  try {
    res = await fetch('/dev/token', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      // The id goes as typed: a JSON number when it is one, else a string
      // that the server refuses with its own message.
      body: `{"user_id": ${/^[0-9]{1,19}$/.test(userId) ? userId : JSON.stringify(userId)}}`,
    });
  } catch {
    throw unreachable();
  }
  if (!res.ok) throw await errorFrom(res);
  return (await res.json()).token;
}

// seg puts what the user typed into a path segment as it is: the API
// refuses an id that is not one, with a message the page then shows.
function seg(v) {
  return encodeURIComponent(String(v).trim());
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v) q.set(k, v);
  }
  const s = q.toString();
  return s ? '?' + s : '';
}
