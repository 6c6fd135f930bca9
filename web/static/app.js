// newsfeed's web app: sign in, the home feed (paged as the reader scrolls,
// live from the stream, new posts held behind a bar while the reader is
// scrolled down), writing, deleting and reposting posts, users' pages
// (their posts; follow, mute, block), followers and following. Every
// refusal of the API is shown with the message of its error body; a 401
// anywhere, or the token running out, signs out.

import { Api, devToken } from './api.js';
import { storedToken, storeToken, forgetToken, claims } from './session.js';
import { PostList, originalOf } from './posts.js';
import { FollowList, Relations } from './people.js';
import { UserPage } from './user.js';
import { LiveFeed } from './stream.js';
import {
  showError, clearError, say, pending, formatTime, refreshTimes, confirmAction, userLink,
} from './ui.js';

const $ = (id) => document.getElementById(id);
const dev = document.body.dataset.dev === 'true';
const maxChars = Number(document.body.dataset.maxChars) || 1000;
const views = ['feed', 'mine', 'people', 'user'];
// setTimeout's longest delay; a token valid for longer is checked by the
// server alone.
const maxTimer = 2 ** 31 - 1;
// How often relative times ("3 min") are brought up to date.
const timesEvery = 20 * 1000;

let session = null;

function boot() {
  $('dev-sign-in').hidden = !dev;
  $('dev-sign-in').addEventListener('submit', onDevSignIn);
  $('token-sign-in').addEventListener('submit', onTokenSignIn);
  $('sign-out').addEventListener('click', () => signOut());
  $('compose-form').addEventListener('submit', onCompose);
  $('post-body').addEventListener('input', showCount);
  $('follow-form').addEventListener('submit', onFollow);
  $('lists-form').addEventListener('submit', onLists);
  window.addEventListener('hashchange', () => showView(true));
  document.addEventListener('click', closeMenus);
  document.addEventListener('keydown', onMenuKey);
  setInterval(() => refreshTimes(), timesEvery);
  showCount();

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

  // What the buttons on a post do, in every list.
  const actions = {
    remove: deletePost,
    repost,
    undoRepost,
    mute: (user, button) => changeRelation('mute', user, true, button),
    block: (user, button) => changeRelation('block', user, true, button),
  };
  s.feed = new PostList({
    list: $('feed'), more: $('feed-more'), end: $('feed-end'), error: $('feed-error'), me, actions,
    newBar: $('feed-new'),
    onWaiting: (n) => announce(n === 1 ? '1 new post above.' : `${n} new posts above.`),
    fetchPage: (cursor) => api.feed(cursor),
    emptyText: 'Your feed is empty. Write a post, or follow someone under People, and posts show here.',
    endText: 'You have reached the end of your feed.',
  });
  s.mine = new PostList({
    list: $('mine'), more: $('mine-more'), end: $('mine-end'), error: $('mine-error'), me, actions,
    fetchPage: (cursor) => api.userPosts(me, cursor),
    emptyText: 'You have not posted anything yet.',
    endText: 'That is all you have posted.',
  });
  s.userPage = new UserPage({
    me,
    relations: new Relations({
      following: (cursor, limit) => api.following(me, cursor, limit),
      mutes: (cursor, limit) => api.mutes(cursor, limit),
      blocks: (cursor, limit) => api.blocks(cursor, limit),
    }),
    posts: new PostList({
      list: $('user-posts'), more: $('user-posts-more'), end: $('user-posts-end'), error: $('user-error'), me, actions,
      fetchPage: (cursor) => api.userPosts(s.userPage.userId, cursor),
      emptyText: 'Nothing posted yet.',
      endText: 'That is all they have posted.',
    }),
    title: $('user-title'), actions: $('user-actions'), note: $('user-note'), status: $('user-status'),
    error: $('user-error'),
    buttons: Object.fromEntries(['follow', 'unfollow', 'mute', 'unmute', 'block', 'unblock'].map((b) => [b, $('user-' + b)])),
    change: (kind, user, on, button) => changeRelation(kind, user, on, button),
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
  for (const list of [session.feed, session.mine, session.userPage, session.followers, session.following]) list.close();
  clearTimeout(session.expiry);
  session = null;
  forgetToken();
  for (const id of ['feed', 'mine', 'user-posts', 'followers', 'following']) $(id).replaceChildren();
  for (const id of ['compose-status', 'follow-status', 'feed-status', 'mine-status', 'user-status']) say($(id), '');
  for (const id of ['compose-error', 'follow-error', 'lists-error', 'feed-error', 'mine-error', 'user-error']) {
    clearError($(id));
  }
  for (const id of ['feed-more', 'mine-more', 'user-posts-more', 'followers-more', 'following-more', 'feed-end',
    'mine-end', 'user-posts-end', 'feed-new', 'user-note']) {
    $(id).hidden = true;
  }
  if ($('confirm').open) $('confirm').close();
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

// route reads the location's hash: #feed (the default), #mine, #people,
// #user/ID.
function route() {
  let hash = location.hash.slice(1);
  try {
    hash = decodeURIComponent(hash);
  } catch {
    // not percent-encoded: as it is
  }
  if (hash.startsWith('user/')) return { name: 'user', userId: hash.slice('user/'.length) };
  return { name: views.includes(hash) && hash !== 'user' ? hash : 'feed' };
}

// showView shows the view the location's hash names; after a click on a
// link, focus goes to its heading.
function showView(moveFocus) {
  if (!session) return;
  const { name, userId } = route();
  for (const v of views) $('view-' + v).hidden = v !== name;
  $('compose').hidden = name === 'people' || name === 'user';
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
  if (name === 'user') session.userPage.show(userId);
  if (moveFocus) $(name + '-title').focus();
}

// placeOf names the elements of the view a button is in, where what it
// did is told.
function placeOf(button) {
  const view = button.closest('.view')?.dataset.view || 'feed';
  const list = { feed: 'feed', mine: 'mine', user: 'user', people: 'feed' }[view];
  return { status: $(list + '-status'), error: $(list + '-error') };
}

function eachList(s, fn) {
  for (const list of [s.feed, s.mine, s.userPage.posts]) fn(list);
}

// --- posts -----------------------------------------------------------------

// showCount counts the post's characters (code points, as the API does)
// against posts.max_chars; over it, the box is marked invalid.
function showCount() {
  const n = [...$('post-body').value].length;
  const el = $('post-count');
  const over = n > maxChars;
  el.textContent = over ? `${n} / ${maxChars}: ${n - maxChars} too many` : `${n} / ${maxChars}`;
  el.dataset.over = String(over);
  $('post-body').setAttribute('aria-invalid', String(over));
}

async function onCompose(ev) {
  ev.preventDefault();
  const button = ev.submitter || ev.target.querySelector('button');
  const field = $('post-body');
  const n = [...field.value].length;
  if (n > maxChars) {
    say($('compose-status'), '');
    showError($('compose-error'), new Error(`Your post is ${n} characters long; the longest is ${maxChars}. ` +
      `Shorten it by ${n - maxChars}.`));
    field.focus();
    return;
  }
  await pending(button, async () => {
    const s = session;
    say($('compose-status'), '');
    try {
      const post = await s.api.createPost(field.value);
      if (session !== s) return; // signed out meanwhile
      clearError($('compose-error'));
      field.value = '';
      showCount();
      say($('compose-status'), 'Posted.');
      // One's own posts are in one's feed from the 201 on: on top, with
      // whatever waited behind the bar.
      s.feed.showWaiting();
      s.feed.insert(post, { live: true });
      s.mine.insert(post, { live: true });
    } catch (err) {
      if (session === s) showError($('compose-error'), err);
    }
  });
}

// deletePost deletes one of the reader's posts, once they confirmed.
async function deletePost(entry, button) {
  const post = originalOf(entry);
  const ok = await confirmAction({
    title: 'Delete this post?',
    text: `“${excerpt(post.body)}” leaves every feed, with every repost of it. This cannot be undone.`,
    confirm: 'Delete',
  });
  if (!ok) return;
  const place = placeOf(button);
  await pending(button, async () => {
    const s = session;
    try {
      await s.api.deletePost(post.id);
      if (session !== s) return;
      eachList(s, (l) => l.removeOriginal(post.id));
      clearError(place.error);
      announce('Your post was deleted.');
    } catch (err) {
      if (session !== s) return;
      // Deleted already (another tab, say): it is gone either way.
      if (err.status === 404) eachList(s, (l) => l.removeOriginal(post.id));
      showError(place.error, err);
    }
  });
}

// repost reposts the post an entry shows. The repost is in the reader's
// feed from then on, where it shows unless the post shows already.
async function repost(entry, button) {
  const post = originalOf(entry);
  const place = placeOf(button);
  await pending(button, async () => {
    const s = session;
    try {
      const r = await s.api.repost(post.id);
      if (session !== s) return;
      clearError(place.error);
      eachList(s, (l) => l.setReposted(post.id, r.id));
      s.feed.insert(r, { live: true });
      s.mine.insert(r, { live: true });
      say(place.status, `You reposted user ${post.author_id}'s post.`);
    } catch (err) {
      if (session === s) showError(place.error, err);
    }
  });
}

// undoRepost deletes one of the reader's reposts, once they confirmed.
async function undoRepost(repostId, button) {
  const ok = await confirmAction({
    title: 'Undo this repost?',
    text: 'Your repost leaves your feed and your followers\' feeds. The post itself stays.',
    confirm: 'Undo repost',
  });
  if (!ok) return;
  const place = placeOf(button);
  await pending(button, async () => {
    const s = session;
    const gone = () => eachList(s, (l) => {
      l.remove(repostId);
      for (const li of l.list.querySelectorAll(`button.repost[data-repost-id="${Number(repostId)}"]`)) {
        l.setReposted(li.closest('li').dataset.original, 0);
      }
    });
    try {
      await s.api.deletePost(repostId);
      if (session !== s) return;
      gone();
      clearError(place.error);
      say(place.status, 'Your repost was undone.');
    } catch (err) {
      if (session !== s) return;
      if (err.status === 404) gone();
      showError(place.error, err);
    }
  });
}

function excerpt(text) {
  return text.length > 80 ? text.slice(0, 80) + '…' : text;
}

function onLivePost(s, entry) {
  // A stream's catch-up also brings older entries the page never read
  // (a followee's history, merged by a follow): shown where they belong,
  // but news only when they go on top.
  const newest = s.feed.newestId;
  const shown = s.feed.arrive(entry);
  if (shown !== 'shown' || Number(entry.id) < newest) return;
  const post = originalOf(entry);
  if (entry.repost_of) {
    announce(`User ${entry.author_id} reposted user ${post.author_id}: ${excerpt(post.body)}`);
  } else {
    announce(`New post from user ${post.author_id}: ${excerpt(post.body)}`);
  }
}

function showLiveState(state, pause) {
  const el = $('live-state');
  el.dataset.state = state;
  if (state === 'down') {
    const when = pause.seconds > 0 ? `retrying in ${pause.seconds} s` : 'retrying now';
    el.textContent = `Live updates paused, ${when}. ${pause.reason}`;
    return;
  }
  el.textContent = { connecting: 'Connecting…', live: 'Live', reconnecting: 'Reconnecting…' }[state];
}

function announce(text) {
  say($('announcer'), text);
}

// --- the menu of a post's authors ----------------------------------------

// closeMenus closes every open menu but the one clicked in.
function closeMenus(ev) {
  for (const menu of document.querySelectorAll('details.menu[open]')) {
    if (!menu.contains(ev.target)) menu.open = false;
  }
}

function onMenuKey(ev) {
  if (ev.key !== 'Escape') return;
  const menu = ev.target.closest?.('details.menu[open]');
  if (!menu) return;
  menu.open = false;
  menu.querySelector('summary').focus();
}

// --- people ----------------------------------------------------------------

const relationText = {
  follow: [(u) => `You follow ${u} now.`, (u) => `You no longer follow ${u}.`],
  mute: [(u) => `You muted ${u}: their posts and reposts stay out of your feed.`, (u) => `You unmuted ${u}.`],
  block: [
    (u) => `You blocked ${u}: neither of you sees the other's posts, and neither follows the other.`,
    (u) => `You unblocked ${u}.`,
  ],
};

// changeRelation follows, mutes or blocks userId (on), or undoes it, and
// tells the reader where they acted (button's view, or the feed). A block
// is confirmed first. It resolves to true when the API agreed.
async function changeRelation(kind, userId, on, button) {
  const s = session;
  const user = String(userId);
  if (kind === 'block' && on) {
    const ok = await confirmAction({
      title: `Block user ${user}?`,
      text: `You stop following each other, neither of you can follow the other, and neither sees the other's ` +
        `posts or reposts. You can unblock them on their page.`,
      confirm: 'Block',
    });
    if (!ok || session !== s) return false;
  }
  const place = button ? placeOf(button) : { status: $('feed-status'), error: $('feed-error') };
  const act = async () => {
    try {
      await s.api[on ? kind : 'un' + kind](user);
    } catch (err) {
      if (session === s) showError(place.error, err);
      return false;
    }
    if (session !== s) return false;
    clearError(place.error);
    tell(place.status, relationText[kind][on ? 0 : 1](`user ${user}`), on && kind !== 'follow' ? user : null);
    relationChanged(s, kind, user, on);
    return true;
  };
  return (await (button ? pending(button, act) : act())) === true;
}

// tell says what was done; after a mute or a block, with a link to the
// user's page, where it is undone.
function tell(el, text, user) {
  el.replaceChildren(text);
  if (user) {
    const link = userLink(user, session.me);
    link.textContent = 'their page';
    el.append(' Undo it on ', link, '.');
  }
}

// relationChanged brings the page in line with a follow, mute or block
// (on) or its undoing.
function relationChanged(s, kind, user, on) {
  if (on && kind !== 'follow') {
    // Hidden at once; where the feed showed a repost of theirs, another
    // repost of the same post may show now.
    s.feed.removeAuthor(user);
    s.feed.refreshTop();
  } else {
    // Their posts come (a follow) or go (an unfollow), or others' reposts
    // of them come back (an unmute, an unblock): read again from the top.
    s.feed.reset();
  }
  if (s.userPage.userId === user) s.userPage.changed(kind, on);
  if ((kind === 'follow' || kind === 'block') && s.peopleShown) showLists(s.following.userId);
}

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
      relationChanged(s, 'follow', user, following);
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
