// A list of posts on the page, newest first by id as the API orders them:
// pages read through next_cursor as the reader scrolls (and with a button,
// for keyboards), and live posts inserted where their id puts them. A post
// is shown once, however often it arrives (a page and the stream may both
// bring it), and a post removed stays away even if a page read before its
// removal brings it back (until the list is read again from the top).

import { showError, clearError, formatTime } from './ui.js';

export class PostList {
  // opts: list (the <ol>), more (the load button), end (the text shown at
  // the end), error (the alert), fetchPage(cursor) → {items, next_cursor},
  // me (the signed-in user id, as a string), onDelete(post, button),
  // emptyText, endText.
  constructor(opts) {
    Object.assign(this, opts);
    this.items = new Map(); // post id → <li>
    this.removed = new Set();
    this.generation = 0; // a reset makes the answers of older requests stale
    this.cursor = null;
    this.done = false;
    this.loading = false;
    // The elements outlive the list (a session after this one uses them):
    // close() lets go of them.
    this.listening = new AbortController();
    this.more.addEventListener('click', () => this.loadMore(), { signal: this.listening.signal });
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
  }

  get size() {
    return this.items.size;
  }

  // newestId is the id of the newest post shown, or 0.
  get newestId() {
    const first = this.list.firstElementChild;
    return first ? Number(first.dataset.id) : 0;
  }

  // reset empties the list and reads the first page again. The pages read
  // from now on are newer than every removal seen so far, which are
  // forgotten: a post that left the feed may come back (a follow again).
  reset() {
    if (this.closed) return Promise.resolve();
    this.generation++;
    this.removed.clear();
    this.items.clear();
    this.list.replaceChildren();
    this.cursor = null;
    this.done = false;
    this.loading = false;
    this.end.hidden = true;
    clearError(this.error);
    return this.loadMore();
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
      for (const post of page.items) this.insert(post);
      this.cursor = page.next_cursor;
      this.done = !page.next_cursor;
    } catch (err) {
      if (generation !== this.generation) return;
      showError(this.error, err);
    } finally {
      if (generation === this.generation) {
        this.loading = false;
        this.list.setAttribute('aria-busy', 'false');
        this.more.textContent = 'Load older posts';
        this.more.hidden = this.done;
        this.end.hidden = !this.done;
        this.end.textContent = this.items.size ? this.endText : this.emptyText;
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

  // refreshTop reads the first page again and merges it in: posts missed
  // while the stream was away are inserted, and shown posts within the
  // page's range that it no longer holds (they left the feed meanwhile,
  // which a resumed stream does not repeat) are removed.
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
    for (const id of [...this.items.keys()]) {
      if (id >= oldest && id <= newest && !ids.has(id)) this.remove(id);
    }
    for (const post of page.items) this.insert(post);
  }

  // insert shows a post where its id puts it; it returns false when the
  // post is shown already or was removed.
  insert(post, { live = false } = {}) {
    const id = Number(post.id);
    if (this.closed || this.items.has(id) || this.removed.has(id)) return false;
    const li = this.render(post);
    if (live) li.classList.add('fresh');
    let next = this.list.firstElementChild;
    while (next && Number(next.dataset.id) > id) next = next.nextElementSibling;
    this.list.insertBefore(li, next);
    this.items.set(id, li);
    if (this.done) this.end.textContent = this.endText;
    return true;
  }

  // remove takes a post off the list, for good.
  remove(id) {
    id = Number(id);
    this.removed.add(id);
    const li = this.items.get(id);
    if (!li) return false;
    if (li.contains(document.activeElement)) {
      // Keep the keyboard user's place: the next post, else the list's heading.
      const next = li.nextElementSibling || li.previousElementSibling;
      focusPost(next) || document.getElementById(this.list.getAttribute('aria-labelledby'))?.focus();
    }
    li.remove();
    this.items.delete(id);
    if (this.done && !this.items.size) this.end.textContent = this.emptyText;
    return true;
  }

  render(post) {
    const li = document.createElement('li');
    li.dataset.id = String(post.id);
    li.dataset.author = String(post.author_id);
    const article = document.createElement('article');
    article.className = 'post';
    article.tabIndex = -1;
    const headingId = `post-${this.list.id}-${post.id}`;
    article.setAttribute('aria-labelledby', headingId);

    const head = document.createElement('header');
    const author = document.createElement('h3');
    author.id = headingId;
    author.className = 'author';
    author.textContent = String(post.author_id) === this.me ? `You (user ${post.author_id})` : `User ${post.author_id}`;
    const time = document.createElement('time');
    time.dateTime = post.created_at;
    time.textContent = formatTime(post.created_at);
    head.append(author, time);

    const body = document.createElement('p');
    body.className = 'body';
    body.textContent = post.body;
    article.append(head, body);

    if (String(post.author_id) === this.me && this.onDelete) {
      const del = document.createElement('button');
      del.type = 'button';
      del.className = 'secondary delete';
      del.textContent = 'Delete';
      del.setAttribute('aria-label', `Delete your post from ${formatTime(post.created_at)}`);
      del.addEventListener('click', () => this.onDelete(post, del));
      article.append(del);
    }
    li.append(article);
    return li;
  }
}

function focusPost(li) {
  const article = li && li.querySelector('article');
  if (!article) return false;
  article.focus();
  return true;
}
