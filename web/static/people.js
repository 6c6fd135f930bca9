// Followers and following: two lists of one user's follows, each read page
// by page through next_cursor with a "More" button; and what the signed-in
// user knows of another: whether they follow, mute or block them.

import { showError, clearError, formatTime, userLink } from './ui.js';

export class FollowList {
  // opts: list (the <ul>), title (its heading), more (the button), end (the
  // text at the end), error (the alert), fetchPage(userId, cursor),
  // titleFor(userId, isMe), emptyFor(userId, isMe), me.
  constructor(opts) {
    Object.assign(this, opts);
    this.userId = null;
    this.cursor = null;
    this.generation = 0;
    this.loading = false;
    this.listening = new AbortController();
    this.more.addEventListener('click', () => this.loadMore(), { signal: this.listening.signal });
  }

  // close stops the list for good (at sign-out), as PostList.close does.
  close() {
    this.closed = true;
    this.generation++;
    this.userId = null;
    this.listening.abort();
  }

  // show lists the follows of userId from the first page.
  show(userId) {
    if (this.closed) return Promise.resolve();
    this.generation++;
    this.userId = String(userId).trim();
    this.cursor = null;
    this.loading = false;
    this.list.replaceChildren();
    this.more.hidden = true;
    this.end.hidden = true;
    return this.loadMore();
  }

  async loadMore() {
    if (this.loading || this.userId === null || this.closed) return;
    this.loading = true;
    const generation = this.generation;
    this.list.setAttribute('aria-busy', 'true');
    try {
      const page = await this.fetchPage(this.userId, this.cursor);
      if (generation !== this.generation) return;
      clearError(this.error);
      // The title names the user once their list is read: an id the API
      // refuses leaves no list to name.
      this.title.textContent = this.titleFor(this.userId, this.userId === this.me);
      for (const f of page.items) this.list.append(this.render(f));
      this.cursor = page.next_cursor;
      this.more.hidden = !this.cursor;
      this.end.hidden = !!this.cursor || this.list.childElementCount > 0;
      this.end.textContent = this.emptyFor(this.userId, this.userId === this.me);
    } catch (err) {
      if (generation === this.generation) showError(this.error, err);
    } finally {
      if (generation === this.generation) {
        this.loading = false;
        this.list.setAttribute('aria-busy', 'false');
      }
    }
  }

  render(follow) {
    const li = document.createElement('li');
    li.dataset.user = String(follow.user_id);
    const who = userLink(follow.user_id, this.me);
    who.classList.add('who');
    const since = document.createElement('time');
    since.dateTime = follow.since;
    since.textContent = 'since ' + formatTime(follow.since);
    li.append(who, ' ', since);
    return li;
  }
}

// How many pages of their own lists (100 a page) the page reads to learn
// whether the signed-in user follows, mutes or blocks someone: past that,
// it does not know, and offers both ways.
const relationPages = 10;

// Relations says whether the signed-in user follows, mutes or blocks
// another user, from their own lists (GET /v1/users/{me}/following,
// /v1/mutes, /v1/blocks), each read afresh when asked: another tab may
// have changed them.
export class Relations {
  // lists: {following, mutes, blocks}, each (cursor, limit) → a page of
  // {user_id, since}.
  constructor(lists) {
    this.lists = lists;
  }

  // of returns {following, muted, blocked} about userId: true or false,
  // or null when the list is longer than the page reads.
  async of(userId) {
    const [following, muted, blocked] = await Promise.all(
      ['following', 'mutes', 'blocks'].map((kind) => this.has(kind, String(userId))),
    );
    return { following, muted, blocked };
  }

  async has(kind, userId) {
    let cursor = null;
    for (let i = 0; i < relationPages; i++) {
      const page = await this.lists[kind](cursor, 100);
      if (page.items.some((r) => String(r.user_id) === userId)) return true;
      cursor = page.next_cursor;
      if (!cursor) return false;
    }
    return null;
  }
}
