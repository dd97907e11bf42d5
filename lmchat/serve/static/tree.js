// A chat's versions, read from its conversations' metadata (docs/web.md, "Branches").
//
// A chat is a root conversation and its branches. A branch made at turn t (an edited question, a regenerated
// answer) is a conversation of its own whose metadata says `root`, `parent` (the conversation it left) and
// `turn` (t): it holds copies of the parent's turns before t and its own from t on. So the conversation that
// holds turn t of conversation c is c if c's `turn` <= t, else the one holding turn t of c's parent.

export const rootOf = (c) => (c.metadata && c.metadata.root) || c.id;
const turnOf = (c) => Number((c.metadata && c.metadata.turn) || 0);

export function owner(byId, c, t) {
  c = c && (byId.get(c.id) || c); // the listed record of c, whichever copy of it was given
  while (c && turnOf(c) > t) c = byId.get(c.metadata.parent);
  return c || null;
}

// The chats: [{root, title, members, updated_at}], the most recently changed first.
export function chats(conversations) {
  const groups = new Map();
  for (const c of conversations) {
    const root = rootOf(c);
    if (!groups.has(root)) groups.set(root, { root, title: "", members: [], updated_at: 0 });
    const g = groups.get(root);
    g.members.push(c);
    g.updated_at = Math.max(g.updated_at, c.updated_at || c.created_at || 0);
    if (c.id === root) g.title = (c.metadata && c.metadata.title) || "";
  }
  // a branch whose root is gone (deleted by another page) is no chat
  return [...groups.values()].filter((g) => g.members.some((c) => c.id === g.root))
    .sort((a, b) => b.updated_at - a.updated_at);
}

const newer = (a, b) => (b.updated_at || 0) - (a.updated_at || 0) || (b.created_at || 0) - (a.created_at || 0);

// The versions of turn t of conversation x: the conversations holding a turn t after the same turns before t,
// oldest first, and which one x shows.
export function versions(members, x, t) {
  const byId = new Map(members.map((c) => [c.id, c]));
  const before = t > 0 ? owner(byId, x, t - 1) : null;
  const found = [];
  for (const z of members) {
    if (t > 0 && owner(byId, z, t - 1) !== before) continue;
    const v = owner(byId, z, t);
    if (v && !found.includes(v)) found.push(v);
  }
  found.sort((a, b) => (a.created_at - b.created_at) || a.id.localeCompare(b.id));
  return { list: found, index: found.indexOf(owner(byId, x, t)) };
}

// The conversation to show for version v of turn t: the most recently changed one that holds it.
export function leafFor(members, v, t) {
  const byId = new Map(members.map((c) => [c.id, c]));
  return members.filter((z) => owner(byId, z, t) === v).sort(newer)[0] || v;
}

export const latest = (members) => [...members].sort(newer)[0];
