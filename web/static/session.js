// The signed-in session: the bearer token, kept in sessionStorage (this tab
// only, gone when it closes), and what the page reads from it. The token is
// a JWT whose sub is the user id and exp its expiry; the server checks the
// signature, the page only reads the claims to say who is signed in and to
// sign out when the token runs out.

const key = 'newsfeed.token';

export function storedToken() {
  try {
    return sessionStorage.getItem(key);
  } catch {
    return null; // storage disabled: sign in on every load
  }
}

export function storeToken(token) {
  try {
    sessionStorage.setItem(key, token);
  } catch {
    // storage disabled: the session lasts as long as the page
  }
}

export function forgetToken() {
  try {
    sessionStorage.removeItem(key);
  } catch {
    // nothing stored
  }
}

// claims returns {userId, expiresAt} of a token, or throws an Error that
// says what is wrong with it.
export function claims(token) {
  const parts = token.trim().split('.');
  if (parts.length !== 3) {
    throw new Error('That is not a token: a token has three parts separated by dots.');
  }
  let payload;
  try {
    const b64 = parts[1].replace(/-/g, '+').replace(/_/g, '/');
    payload = JSON.parse(atob(b64 + '='.repeat((4 - (b64.length % 4)) % 4)));
  } catch {
    throw new Error('That is not a token: its claims do not decode.');
  }
  if (typeof payload.sub !== 'string' || !/^[1-9][0-9]*$/.test(payload.sub)) {
    throw new Error('The token does not name a user (its sub is not a user id).');
  }
  if (typeof payload.exp !== 'number') {
    throw new Error('The token has no expiry (exp); the server refuses such tokens.');
  }
  return { userId: payload.sub, expiresAt: new Date(payload.exp * 1000) };
}
