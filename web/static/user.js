// A user's page (#user/ID): their posts and reposts, newest first, and
// what the signed-in user can do about them: follow or unfollow, mute or
// unmute, block or unblock. Whether they follow, mute or block them now is
// read from their own lists; when that is not known (lists longer than the
// page reads), both ways are offered.

import { showError, clearError, say, userName } from './ui.js';

const kinds = ['follow', 'mute', 'block'];
const stateOf = { follow: 'following', mute: 'muted', block: 'blocked' };

export class UserPage {
  // opts: me; relations (Relations); posts (the PostList of the shown
  // user's posts, which reads this.userId); title, actions, note, status,
  // error (elements); buttons {follow, unfollow, mute, unmute, block,
  // unblock}; change(kind, userId, on, button) → Promise<boolean>, which
  // asks the API and, when it agreed, calls changed().
  constructor(opts) {
    Object.assign(this, opts);
    this.userId = null;
    this.state = { following: null, muted: null, blocked: null };
    this.generation = 0;
    this.listening = new AbortController();
    for (const kind of kinds) {
      for (const on of [true, false]) {
        const button = this.buttons[on ? kind : 'un' + kind];
        button.addEventListener('click', () => this.change(kind, this.userId, on, button),
          { signal: this.listening.signal });
      }
    }
  }

  close() {
    this.generation++;
    this.userId = null;
    this.listening.abort();
    this.posts.close();
  }

  // show reads userId's page: where they stand with the signed-in user,
  // then their posts (none to read while the signed-in user blocks them).
  async show(userId) {
    const generation = ++this.generation;
    this.userId = String(userId).trim();
    const isMe = this.userId === this.me;
    this.title.textContent = isMe ? 'Your page' : userName(this.userId, this.me);
    say(this.status, '');
    clearError(this.error);
    this.note.hidden = true;
    this.actions.hidden = true;
    this.posts.clear();
    if (isMe) {
      this.posts.reset();
      return;
    }
    let state = { following: null, muted: null, blocked: null };
    try {
      state = await this.relations.of(this.userId);
    } catch (err) {
      if (generation !== this.generation) return;
      showError(this.error, err);
    }
    if (generation !== this.generation) return;
    this.state = state;
    this.render();
    if (state.blocked !== true) this.posts.reset();
  }

  // changed takes what the API agreed to: the buttons and the note follow,
  // and so do the posts, which a block hides.
  changed(kind, on) {
    const key = stateOf[kind];
    const was = this.state[key];
    this.state[key] = on;
    if (kind === 'block' && on) this.state.following = false; // a block removes the follows
    const focused = Object.values(this.buttons).find((b) => b === document.activeElement);
    this.render();
    // The pressed button hides: the focus goes to the one that undoes it.
    if (focused && focused.hidden) this.buttons[on ? 'un' + kind : kind].focus();
    if (kind === 'block' && on) this.posts.clear();
    if (kind === 'block' && !on && was !== false) this.posts.reset();
  }

  render() {
    const s = this.state;
    this.actions.hidden = false;
    for (const kind of kinds) {
      const on = s[stateOf[kind]];
      this.buttons[kind].hidden = on === true;
      this.buttons['un' + kind].hidden = on === false;
    }
    const name = `user ${this.userId}`;
    let note = '';
    if (s.blocked) note = `You blocked ${name}: neither of you sees the other's posts. Unblock to see them again.`;
    else if (s.muted) note = `You muted ${name}: their posts and reposts stay out of your home feed.`;
    this.note.textContent = note;
    this.note.hidden = !note;
  }
}
