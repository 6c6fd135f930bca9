// A list of posts on the page, newest first by id as the API orders them:
// pages read through next_cursor as the reader scrolls (and with a button,
// for keyboards), and live posts inserted where their id puts them. An
// entry is a post or a repost ({"repost_of": the original}); each original
// shows once, as the entry with the lowest id (the first to arrive), as the
// API's feed does: a page and the stream may both bring an entry, and a
// second repost of a post already shown is not shown again. An entry
// removed stays away even if a page read before its removal brings it back
// (until the list is read again from the top).
//
// A list with a "new posts" bar (the home feed) does not move under a
// reader who scrolled down into it: live posts newer than the top wait
// behind the bar ("3 new posts") until the reader asks for them or scrolls
// back to the top.

import { showError, clearError, formatTime, timeElement, userLink } from './ui.js';

// originalOf is the post an entry shows: the entry itself, or what it
// reposts.
export function originalOf(entry) {
  return entry.repost_of || entry;
}

export class PostList {
  // opts: list (the <ol>), more (the load button), end (the text shown at
  // the end), error (the alert), fetchPage(cursor) → {items, next_cursor},
  // me (the signed-in user id, as a string), actions (what the buttons on
  // an entry do: remove(entry, button), repost(entry, button),
  // undoRepost(repostId, button), mute(userId, button), block(userId,
  // button); each one
  // missing leaves its button out), emptyText, endText; newBar (optional:
  // the "new posts" button), onWaiting(count) (optional: live posts began
  // to wait, or more did).
  constructor(opts) {
    Object.assign(this, opts);
    this.actions = this.actions || {};
    this.items = new Map(); // entry id → <li>
    this.byOriginal = new Map(); // original post id → the id of the entry that shows it
    this.removed = new Set();
    this.waiting = new Map(); // entry id → entry, live and held behind the bar
    this.early = []; // live entries that came while the first page loaded
    this.generation = 0; // a reset makes the answers of older requests stale
    this.cursor = null;
    this.done = false;
    this.loading = false;
    // The elements outlive the list (a session after this one uses them):
    // close() lets go of them.
    this.listening = new AbortController();
    const signal = this.listening.signal;
    this.more.addEventListener('click', () => this.loadMore(), { signal });
    if (this.newBar) {
      this.newBar.addEventListener('click', () => this.showWaiting({ scroll: true }), { signal });
      // Back at the top by themselves, the reader sees what waited.
      window.addEventListener('scroll', () => {
        if (this.waiting.size && !this.scrolledInto()) this.showWaiting();
      }, { signal, passive: true });
    }
    // Infinite scroll: the button coming into view loads the next page.
    this.observer = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) this.loadMore();
    }, { rootMargin: '0px 0px 400px 0px' });
    this.observer.observe(this.more);
  }

  // close stops the list for good (at sign-out): answers still on their
  // way are dropped, and the button and the scroll load nothing more.
  close() {
    this.closed = true;
    this.generation++;
    this.listening.abort();
    this.observer.disconnect();
    this.clearWaiting();
  }

  get size() {
    return this.items.size;
  }

  // newestId is the id of the newest entry shown, or 0.
  get newestId() {
    const first = this.list.firstElementChild;
    return first ? Number(first.dataset.id) : 0;
  }

  // oldestId is the id of the oldest entry shown, or 0.
  get oldestId() {
    const last = this.list.lastElementChild;
    return last ? Number(last.dataset.id) : 0;
  }

  // reset empties the list and reads the first page again. The pages read
  // from now on are newer than every removal seen so far, which are
  // forgotten: a post that left the feed may come back (a follow again).
  reset() {
    if (this.closed) return Promise.resolve();
    this.clear();
    this.done = false;
    return this.loadMore();
  }

  // clear empties the list, which reads nothing more until reset.
  clear() {
    this.generation++;
    this.removed.clear();
    this.items.clear();
    this.byOriginal.clear();
    this.clearWaiting();
    this.early = [];
    this.list.replaceChildren();
    this.list.setAttribute('aria-busy', 'false');
    this.cursor = null;
    this.done = true;
    this.refused = false;
    this.loading = false;
    this.more.hidden = true;
    this.end.hidden = true;
    clearError(this.error);
  }

  async loadMore() {
    if (this.loading || this.done || this.closed) return;
    this.loading = true;
    const generation = this.generation;
    this.list.setAttribute('aria-busy', 'true');
    this.more.textContent = 'Loading…';
    this.more.hidden = false;
    try {
      const page = await this.fetchPage(this.cursor);
      if (generation !== this.generation) return;
      clearError(this.error);
      for (const entry of page.items) this.insert(entry);
      this.cursor = page.next_cursor;
      this.done = !page.next_cursor;
      this.loading = false; // the early entries now find their place
      for (const entry of this.early.splice(0)) this.arrive(entry);
    } catch (err) {
      if (generation !== this.generation) return;
      showError(this.error, err);
      // Refused for good (a user's posts hidden by a block, an id that is
      // not one): nothing to load by trying again.
      if (err.status >= 400 && err.status < 500 && err.status !== 429) this.done = this.refused = true;
    } finally {
      if (generation === this.generation) {
        this.loading = false;
        this.list.setAttribute('aria-busy', 'false');
        this.more.textContent = 'Load older posts';
        this.more.hidden = this.done;
        this.end.hidden = !this.done || this.refused;
        this.showEnd();
      }
    }
    // The observer reports changes only: a page that did not fill the
    // screen, or a scroll in the same frame as the page's arrival, leaves
    // the button in view with nothing reported. Observing anew reports
    // where it is now.
    if (generation === this.generation && !this.done && this.error.hidden) {
      this.observer.unobserve(this.more);
      this.observer.observe(this.more);
    }
  }

  showEnd() {
    this.end.textContent = this.items.size ? this.endText : this.emptyText;
  }

  // refreshTop reads the first page again and merges it in: entries missed
  // while the stream was away arrive as live ones do, and shown entries
  // within the page's range that it no longer holds (they left the feed
  // meanwhile, which a resumed stream does not repeat) are removed.
  async refreshTop() {
    if (this.closed) return;
    const generation = this.generation;
    let page;
    try {
      page = await this.fetchPage(null);
    } catch (err) {
      if (generation === this.generation) showError(this.error, err);
      return;
    }
    if (generation !== this.generation || !page.items.length) return;
    const ids = new Set(page.items.map((p) => Number(p.id)));
    const newest = Math.max(...ids);
    // Above the page's newest: arrived after the read. Below its oldest,
    // with more pages: not read now.
    const oldest = page.next_cursor ? Math.min(...ids) : 0;
    for (const id of [...this.items.keys(), ...this.waiting.keys()]) {
      if (id >= oldest && id <= newest && !ids.has(id)) this.remove(id);
    }
    for (const entry of page.items) this.arrive(entry);
  }

  // scrolledInto says whether the reader scrolled down past the top of
  // the list: an entry put on top now would move what they read.
  scrolledInto() {
    return this.list.getBoundingClientRect().top < -1;
  }

  // arrive takes a live entry: shown at once ("shown"), or, newer than
  // the top while the reader is scrolled down, held behind the bar
  // ("waiting"); false when it is not to be shown (shown already, removed,
  // or its original shows through an earlier entry).
  arrive(entry) {
    const id = Number(entry.id);
    if (!this.shows(entry) || this.waiting.has(id)) return false;
    // A stream's catch-up also brings older entries (a followee's history,
    // merged by a follow). Before the first page, where they go is not
    // known yet: they wait for it. Below the oldest entry shown while older
    // pages are still to be read, the pager brings them in their place
    // when the reader gets there.
    if (this.loading && !this.items.size) {
      this.early.push(entry);
      return false;
    }
    if (!this.done && this.items.size && id < this.oldestId) return false;
    if (this.newBar && id > this.newestId && this.scrolledInto()) {
      this.waiting.set(id, entry);
      this.showBar();
      if (this.onWaiting) this.onWaiting(this.waiting.size);
      return 'waiting';
    }
    return this.insert(entry, { live: true }) ? 'shown' : false;
  }

  // showWaiting shows the entries held behind the bar; with scroll, the
  // reader is taken to the top of the list, the focus on its newest entry.
  showWaiting({ scroll = false } = {}) {
    const entries = [...this.waiting.values()];
    this.clearWaiting();
    for (const entry of entries) this.insert(entry, { live: true });
    if (scroll) {
      const heading = document.getElementById(this.list.getAttribute('aria-labelledby'));
      (heading || this.list).scrollIntoView({ block: 'start' });
      focusPost(this.list.firstElementChild);
    }
  }

  clearWaiting() {
    this.waiting.clear();
    this.showBar();
  }

  showBar() {
    if (!this.newBar) return;
    const n = this.waiting.size;
    this.newBar.hidden = n === 0;
    this.newBar.textContent = n === 1 ? '1 new post' : `${n} new posts`;
  }

  // shows says whether entry would be shown if inserted now.
  shows(entry) {
    const id = Number(entry.id);
    if (this.closed || this.items.has(id) || this.removed.has(id)) return false;
    const shown = this.byOriginal.get(Number(originalOf(entry).id));
    return shown === undefined || shown > id;
  }

  // insert shows an entry where its id puts it; it returns false when it is
  // shown already, was removed, or its original shows through an earlier
  // entry. An entry that shows the same original with a higher id gives
  // way (it may come back if this one goes).
  insert(entry, { live = false } = {}) {
    if (!this.shows(entry)) return false;
    const id = Number(entry.id);
    const originalId = Number(originalOf(entry).id);
    const later = this.byOriginal.get(originalId);
    if (later !== undefined) this.drop(later);
    const li = this.render(entry);
    if (live) li.classList.add('fresh');
    let next = this.list.firstElementChild;
    while (next && Number(next.dataset.id) > id) next = next.nextElementSibling;
    this.list.insertBefore(li, next);
    this.items.set(id, li);
    this.byOriginal.set(originalId, id);
    if (this.done) this.showEnd();
    return true;
  }

  // remove takes an entry off the list, for good.
  remove(id) {
    id = Number(id);
    this.removed.add(id);
    if (this.waiting.delete(id)) this.showBar();
    return this.drop(id);
  }

  // removeWhere removes every entry, shown or waiting, for which
  // test(entry's <li> dataset) holds; it returns how many it removed.
  removeWhere(test) {
    let n = 0;
    for (const [id, li] of [...this.items]) {
      if (test(li.dataset) && this.remove(id)) n++;
    }
    for (const [id, entry] of [...this.waiting]) {
      if (test(datasetOf(entry))) this.remove(id);
    }
    return n;
  }

  // removeOriginal removes a post and every repost of it.
  removeOriginal(postId) {
    return this.removeWhere((d) => d.original === String(postId));
  }

  // removeAuthor removes what userId wrote or reposted.
  removeAuthor(userId) {
    const u = String(userId);
    return this.removeWhere((d) => d.author === u || d.originalAuthor === u);
  }

  // drop takes an entry's <li> away, keeping a keyboard user's place.
  drop(id) {
    const li = this.items.get(id);
    if (!li) return false;
    if (li.contains(document.activeElement)) {
      // The next entry, else the list's heading.
      const next = li.nextElementSibling || li.previousElementSibling;
      focusPost(next) || document.getElementById(this.list.getAttribute('aria-labelledby'))?.focus();
    }
    li.remove();
    this.items.delete(id);
    if (this.byOriginal.get(Number(li.dataset.original)) === id) this.byOriginal.delete(Number(li.dataset.original));
    if (this.done) this.showEnd();
    return true;
  }

  // setReposted turns the repost button on the entries showing postId into
  // "Undo repost" of repostId, or back into "Repost" (repostId 0).
  setReposted(postId, repostId) {
    for (const li of this.items.values()) {
      if (li.dataset.original !== String(postId)) continue;
      const button = li.querySelector('button.repost');
      if (button) setRepostButton(button, repostId);
    }
  }

  render(entry) {
    const post = originalOf(entry);
    const isRepost = entry.repost_of !== undefined && entry.repost_of !== null;
    const mine = (id) => String(id) === this.me;
    const li = document.createElement('li');
    Object.assign(li.dataset, datasetOf(entry));
    const article = document.createElement('article');
    article.className = 'post';
    article.tabIndex = -1;
    const headingId = `post-${this.list.id}-${entry.id}`;
    article.setAttribute('aria-labelledby', headingId);

    if (isRepost) {
      const by = document.createElement('p');
      by.className = 'reposted';
      by.append('Reposted by ', mine(entry.author_id) ? 'you' : userLink(entry.author_id, this.me), ' · ',
        timeElement(entry.created_at));
      article.append(by);
    }

    const head = document.createElement('header');
    const author = document.createElement('h3');
    author.id = headingId;
    author.className = 'author';
    author.append(userLink(post.author_id, this.me));
    head.append(author, timeElement(post.created_at));
    const menu = this.menu(entry);
    if (menu) head.append(menu);

    const body = document.createElement('p');
    body.className = 'body';
    body.textContent = post.body;
    article.append(head, body);

    const buttons = document.createElement('div');
    buttons.className = 'actions';
    const when = formatTime(post.created_at);
    if (mine(post.author_id)) {
      if (this.actions.remove) {
        buttons.append(button('Delete', 'delete', `Delete your post from ${when}`,
          (b) => this.actions.remove(entry, b)));
      }
    } else if (isRepost && mine(entry.author_id)) {
      if (this.actions.undoRepost) {
        buttons.append(button('Undo repost', 'undo-repost', `Undo your repost of user ${post.author_id}'s post from ${when}`,
          (b) => this.actions.undoRepost(Number(entry.id), b)));
      }
    } else if (this.actions.repost) {
      const b = button('Repost', 'repost', '', () => {
        if (b.dataset.repostId) this.actions.undoRepost(Number(b.dataset.repostId), b);
        else this.actions.repost(entry, b);
      });
      b.dataset.label = `user ${post.author_id}'s post from ${when}`;
      setRepostButton(b, 0);
      buttons.append(b);
    }
    if (buttons.childElementCount) article.append(buttons);
    li.append(article);
    return li;
  }

  // menu is the small menu of an entry's authors: mute or block them (not
  // oneself). null when there is nobody to mute.
  menu(entry) {
    if (!this.actions.mute && !this.actions.block) return null;
    const users = [...new Set([originalOf(entry).author_id, entry.author_id].map(String))]
      .filter((u) => u !== this.me);
    if (!users.length) return null;
    const details = document.createElement('details');
    details.className = 'menu';
    const summary = document.createElement('summary');
    summary.textContent = '⋯';
    summary.setAttribute('aria-label', `Actions on ${users.map((u) => 'user ' + u).join(' and ')}`);
    const items = document.createElement('div');
    items.className = 'menu-items';
    for (const u of users) {
      for (const [what, act] of [['Mute', this.actions.mute], ['Block', this.actions.block]]) {
        if (!act) continue;
        const b = button(`${what} user ${u}`, what.toLowerCase(), '', () => {
          details.open = false;
          act(u, b);
        });
        b.dataset.user = u;
        items.append(b);
      }
    }
    details.append(summary, items);
    return details;
  }
}

// datasetOf is what an entry's <li> carries in its data attributes.
function datasetOf(entry) {
  const post = originalOf(entry);
  return {
    id: String(entry.id),
    author: String(entry.author_id),
    original: String(post.id),
    originalAuthor: String(post.author_id),
  };
}

function button(text, className, label, onClick) {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = 'secondary ' + className;
  b.textContent = text;
  if (label) b.setAttribute('aria-label', label);
  b.addEventListener('click', () => onClick(b));
  return b;
}

function setRepostButton(b, repostId) {
  if (repostId) {
    b.dataset.repostId = String(repostId);
    b.textContent = 'Undo repost';
    b.setAttribute('aria-label', `Undo your repost of ${b.dataset.label}`);
  } else {
    delete b.dataset.repostId;
    b.textContent = 'Repost';
    b.setAttribute('aria-label', `Repost ${b.dataset.label}`);
  }
}

function focusPost(li) {
  const article = li && li.querySelector('article');
  if (!article) return false;
  article.focus();
  return true;
}
