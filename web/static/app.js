// newsfeed's web app: sign in, the home feed (paged as the reader scrolls,
// live from the stream), writing and deleting posts, following and
// unfollowing, followers and following. Every refusal of the API is shown
// with the message of its error body; a 401 anywhere, or the token running
// out, signs out.

import { Api, devToken } from './api.js';
import { storedToken, storeToken, forgetToken, claims } from './session.js';
import { PostList } from './posts.js';
import { FollowList } from './people.js';
import { LiveFeed } from './stream.js';
import { showError, clearError, say, pending, formatTime } from './ui.js';

const $ = (id) => document.getElementById(id);
const dev = document.body.dataset.dev === 'true';
const views = ['feed', 'mine', 'people'];
// setTimeout's longest delay; a token valid for longer is checked by the
// server alone.
const maxTimer = 2 ** 31 - 1;

let session = null;

function boot() {
  $('dev-sign-in').hidden = !dev;
  $('dev-sign-in').addEventListener('submit', onDevSignIn);
  $('token-sign-in').addEventListener('submit', onTokenSignIn);
  $('sign-out').addEventListener('click', () => signOut());
  $('compose-form').addEventListener('submit', onCompose);
  $('follow-form').addEventListener('submit', onFollow);
  $('lists-form').addEventListener('submit', onLists);
  window.addEventListener('hashchange', () => showView(true));

  const token = storedToken();
  if (!token) {
    showSignIn();
    return;
  }
  try {
    signIn(token, { restored: true });
  } catch (err) {
    forgetToken();
    showSignIn(err.message);
  }
}

// --- signing in and out ----------------------------------------------------

async function onDevSignIn(ev) {
  ev.preventDefault();
  const button = ev.submitter || ev.target.querySelector('button');
  await pending(button, async () => {
    try {
      signIn(await devToken($('dev-user').value.trim()));
      $('dev-user').value = '';
    } catch (err) {
      showError($('sign-in-error'), err);
    }
  });
}

function onTokenSignIn(ev) {
  ev.preventDefault();
  try {
    signIn($('token').value.trim());
    $('token').value = '';
  } catch (err) {
    showError($('sign-in-error'), err);
  }
}

// signIn starts a session with token, or throws an Error saying why the
// token cannot be one. The server has the last word: the first request
// it refuses with 401 signs out again. A session restored on load leaves
// the focus where the browser puts it.
function signIn(token, { restored = false } = {}) {
  const c = claims(token);
  if (c.expiresAt <= new Date()) {
    throw new Error(`That token expired on ${formatTime(c.expiresAt.toISOString())}. Get a new one.`);
  }
  storeToken(token);
  const me = c.userId;
  // A refusal ends this session, not one that started since.
  const refused = (err) => {
    if (session === s) signOut(`The server refused the token (${err.message}). Sign in again.`);
  };
  const api = new Api(token, refused);
  const s = { token, me, api };
  session = s;

  s.feed = new PostList({
    list: $('feed'), more: $('feed-more'), end: $('feed-end'), error: $('feed-error'), me,
    fetchPage: (cursor) => api.feed(cursor),
    onDelete: deletePost,
    emptyText: 'Your feed is empty. Follow someone under People, and their posts show here.',
    endText: 'You have reached the end of your feed.',
  });
  s.mine = new PostList({
    list: $('mine'), more: $('mine-more'), end: $('mine-end'), error: $('mine-error'), me,
    fetchPage: (cursor) => api.userPosts(me, cursor),
    onDelete: deletePost,
    emptyText: 'You have not posted anything yet.',
    endText: 'That is all you have posted.',
  });
  s.followers = new FollowList({
    list: $('followers'), title: $('followers-title'), more: $('followers-more'), end: $('followers-end'),
    error: $('lists-error'), me,
    fetchPage: (user, cursor) => api.followers(user, cursor),
    titleFor: (user, isMe) => (isMe ? 'Your followers' : `Followers of user ${user}`),
    emptyFor: (user, isMe) => (isMe ? 'Nobody follows you yet.' : `Nobody follows user ${user}.`),
  });
  s.following = new FollowList({
    list: $('following'), title: $('following-title'), more: $('following-more'), end: $('following-end'),
    error: $('lists-error'), me,
    fetchPage: (user, cursor) => api.following(user, cursor),
    titleFor: (user, isMe) => (isMe ? 'You follow' : `User ${user} follows`),
    emptyFor: (user, isMe) => (isMe ? 'You follow nobody yet.' : `User ${user} follows nobody.`),
  });
  s.live = new LiveFeed({
    token,
    newestId: () => s.feed.newestId,
    onPost: (post) => onLivePost(s, post),
    onRemove: (id) => s.feed.remove(id),
    onState: showLiveState,
    onResumed: () => s.feed.refreshTop(),
    onUnauthorized: refused,
  });
  const left = c.expiresAt - Date.now();
  if (left < maxTimer) {
    s.expiry = setTimeout(
      () => signOut(`Your token expired at ${formatTime(c.expiresAt.toISOString())}. Sign in again.`),
      left,
    );
  }

  $('whoami').textContent = `user ${me}`;
  $('lists-user').value = me;
  clearError($('sign-in-error'));
  $('sign-in').hidden = true;
  $('app').hidden = false;
  $('nav').hidden = false;
  $('session').hidden = false;

  // The stream first, then the page: a post landing in between comes by
  // the stream, and the list shows it once.
  s.live.start();
  s.feed.reset();
  showView(false);
  if (!restored) $('post-body').focus();
}

// signOut ends the session; message, if any, says why on the sign-in form.
function signOut(message) {
  if (!session) return;
  session.live.stop();
  for (const list of [session.feed, session.mine, session.followers, session.following]) list.close();
  clearTimeout(session.expiry);
  session = null;
  forgetToken();
  for (const id of ['feed', 'mine', 'followers', 'following']) $(id).replaceChildren();
  for (const id of ['compose-status', 'follow-status']) say($(id), '');
  for (const id of ['compose-error', 'follow-error', 'lists-error', 'feed-error', 'mine-error']) clearError($(id));
  for (const id of ['feed-more', 'mine-more', 'followers-more', 'following-more', 'feed-end', 'mine-end']) {
    $(id).hidden = true;
  }
  showSignIn(message);
}

function showSignIn(message) {
  $('app').hidden = true;
  $('nav').hidden = true;
  $('session').hidden = true;
  $('sign-in').hidden = false;
  if (message) showError($('sign-in-error'), new Error(message));
  (dev ? $('dev-user') : $('token')).focus();
}

// --- views -----------------------------------------------------------------

// showView shows the view the location's hash names (the feed by default);
// after a click on the navigation, focus goes to its heading.
function showView(moveFocus) {
  if (!session) return;
  const name = views.includes(location.hash.slice(1)) ? location.hash.slice(1) : 'feed';
  for (const v of views) $('view-' + v).hidden = v !== name;
  $('compose').hidden = name === 'people';
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.dataset.view === name) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (name === 'mine' && !session.mineShown) {
    session.mineShown = true;
    session.mine.reset();
  }
  if (name === 'people' && !session.peopleShown) {
    session.peopleShown = true;
    showLists(session.me);
  }
  if (moveFocus) $(name + '-title').focus();
}

// --- posts -----------------------------------------------------------------

async function onCompose(ev) {
  ev.preventDefault();
  const button = ev.submitter || ev.target.querySelector('button');
  const field = $('post-body');
  await pending(button, async () => {
    const s = session;
    say($('compose-status'), '');
    try {
      const post = await s.api.createPost(field.value);
      if (session !== s) return; // signed out meanwhile
      clearError($('compose-error'));
      field.value = '';
      say($('compose-status'), 'Posted.');
      s.mine.insert(post, { live: true });
    } catch (err) {
      if (session === s) showError($('compose-error'), err);
    }
  });
}

async function deletePost(post, button) {
  await pending(button, async () => {
    const s = session;
    try {
      await s.api.deletePost(post.id);
      if (session !== s) return;
      s.mine.remove(post.id);
      s.feed.remove(post.id);
      announce('Your post was deleted.');
    } catch (err) {
      if (session !== s) return;
      // Deleted already (another tab, say): it is gone either way.
      if (err.status === 404) {
        s.mine.remove(post.id);
        s.feed.remove(post.id);
      }
      const inMine = button.closest('#mine');
      showError($(inMine ? 'mine-error' : 'feed-error'), err);
    }
  });
}

function onLivePost(s, post) {
  if (s.feed.insert(post, { live: true })) {
    const text = post.body.length > 80 ? post.body.slice(0, 80) + '…' : post.body;
    announce(`New post from user ${post.author_id}: ${text}`);
  }
}

function showLiveState(state, message) {
  const el = $('live-state');
  el.dataset.state = state;
  el.textContent = {
    connecting: 'Connecting…',
    live: 'Live',
    reconnecting: 'Reconnecting…',
    down: 'Live updates paused: ' + (message || 'trying again soon.'),
  }[state];
}

function announce(text) {
  say($('announcer'), text);
}

// --- people ----------------------------------------------------------------

async function onFollow(ev) {
  ev.preventDefault();
  const button = ev.submitter || $('follow');
  const user = $('follow-user').value.trim();
  const following = button.value !== 'unfollow';
  await pending(button, async () => {
    const s = session;
    say($('follow-status'), '');
    try {
      await (following ? s.api.follow(user) : s.api.unfollow(user));
      if (session !== s) return;
      clearError($('follow-error'));
      say($('follow-status'), following ? `You follow user ${user} now.` : `You no longer follow user ${user}.`);
      // The feed changes under the reader: its followee's recent posts come
      // in, or their posts leave. Read it again from the top.
      s.feed.reset();
      if (s.following.userId === s.me || s.following.userId === user) showLists(s.following.userId);
    } catch (err) {
      if (session === s) showError($('follow-error'), err);
    }
  });
}

function onLists(ev) {
  ev.preventDefault();
  showLists($('lists-user').value.trim());
}

function showLists(user) {
  clearError($('lists-error'));
  session.followers.show(user);
  session.following.show(user);
}

boot();
