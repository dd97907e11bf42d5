// The page: the chats of the key (conversations, docs/web.md), the one shown, its settings, the key.
import { all, call, setApiKey } from "./api.js";
import { CLIENT, Chat, turns } from "./chat.js";
import { el } from "./render.js";
import { chats, latest, leafFor, rootOf } from "./tree.js";

// a chat's settings, kept in its conversations' metadata (strings of at most 512 characters each)
const SETTINGS = ["system", "temperature", "top_p", "max_output_tokens", "truncation", "schema"];
const $ = (id) => document.getElementById(id);
const pick = (metadata) => Object.fromEntries(SETTINGS.filter((k) => metadata && metadata[k])
  .map((k) => [k, metadata[k]]));
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

class Page {
  constructor() {
    this.conversations = [];
    this.current = null;
    this.pending = {}; // the settings of a chat not made yet
    this.controller = null;
    this.chat = new Chat(this);
  }

  members() {
    const root = this.current && rootOf(this.current);
    return this.conversations.filter((c) => rootOf(c) === root);
  }

  async start() {
    $("composer").addEventListener("submit", (e) => { e.preventDefault(); this.send(); });
    $("prompt").addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); this.send(); }
    });
    $("stop").addEventListener("click", () => this.controller && this.controller.abort());
    $("new-chat").addEventListener("click", () => { this.open(null); $("prompt").focus(); });
    $("menu").addEventListener("click", () => {
      this.toggle("menu", $("sidebar"), "open");
      if ($("sidebar").classList.contains("open")) $("new-chat").focus();
    });
    const closeChats = () => {
      if ($("sidebar").classList.contains("open")) this.toggle("menu", $("sidebar"), "open");
      $("menu").focus();
    };
    $("close-chats").addEventListener("click", closeChats);
    $("sidebar").addEventListener("keydown", (e) => { if (e.key === "Escape") closeChats(); });
    $("settings-button").addEventListener("click", () => this.toggle("settings-button", $("settings")));
    $("settings-form").addEventListener("submit", (e) => { e.preventDefault(); this.saveSettings(); });
    $("key-form").addEventListener("submit", (e) => { e.preventDefault(); this.useKey(); });
    window.addEventListener("hashchange", () => {
      if (location.hash.slice(1) !== (this.current && this.current.id)) this.route();
    });
    try {
      await this.refresh();
    } catch (error) {
      if (error.status === 401) return this.askKey("");
      return this.chat.failed(error);
    }
    await this.route();
    this.model();
  }

  toggle(buttonId, panel, className) {
    const button = $(buttonId);
    const open = button.getAttribute("aria-expanded") !== "true";
    button.setAttribute("aria-expanded", String(open));
    if (className) panel.classList.toggle(className, open);
    else panel.hidden = !open;
  }

  askKey(message) {
    $("key-error").textContent = message;
    if (!$("key-dialog").open) $("key-dialog").showModal();
    $("key-input").focus();
  }

  async useKey() {
    setApiKey($("key-input").value.trim());
    try {
      await this.refresh();
    } catch (error) {
      setApiKey(null);
      return this.askKey(error.status === 401 ? "The server refused this key." : error.message);
    }
    $("key-dialog").close();
    $("key-input").value = "";
    await this.route();
    this.model();
  }

  async refresh() {
    this.conversations = (await call("GET", "/v1/conversations?limit=100")).data;
    if (this.current) this.current = this.conversations.find((c) => c.id === this.current.id) || this.current;
    this.sidebar();
  }

  async route() {
    const id = location.hash.slice(1);
    await this.open(this.conversations.find((c) => c.id === id) || null);
  }

  async open(conversation) {
    const ticket = (this.ticket = (this.ticket || 0) + 1); // a later open wins over one still loading
    this.current = conversation;
    history.replaceState(null, "", conversation ? `#${conversation.id}` : location.pathname);
    this.sidebar();
    this.fillSettings();
    const root = conversation && this.conversations.find((c) => c.id === rootOf(conversation));
    $("chat-title").textContent = (root && root.metadata.title) || "New chat";
    $("sidebar").classList.remove("open");
    $("menu").setAttribute("aria-expanded", "false");
    await this.context();
    try {
      await this.chat.load(conversation, () => ticket === this.ticket);
    } catch (error) {
      this.chat.failed(error);
    }
  }

  sidebar() {
    const currentRoot = this.current && rootOf(this.current);
    $("chats").replaceChildren(...chats(this.conversations).map((chat) => {
      const title = chat.title || "Untitled";
      const link = el("a", { href: `#${latest(chat.members).id}`, text: title,
        "aria-current": chat.root === currentRoot ? "page" : null });
      const item = el("li", {}, link,
        el("button", { type: "button", text: "Rename", class: "small", "aria-label": `Rename chat ${title}`,
          onclick: () => this.renaming(item, link, chat) }),
        el("button", { type: "button", text: "Delete", class: "small", "aria-label": `Delete chat ${title}`,
          onclick: () => this.remove(chat) }));
      return item;
    }));
  }

  renaming(item, link, chat) {
    const input = el("input", { type: "text", "aria-label": "Chat title", maxlength: 200 });
    input.value = chat.title;
    input.addEventListener("keydown", async (e) => {
      if (e.key === "Escape") return this.sidebar();
      if (e.key !== "Enter") return;
      const root = chat.members.find((c) => c.id === chat.root);
      try {
        await call("POST", `/v1/conversations/${root.id}`, { metadata: { ...root.metadata, title: input.value } });
        await this.refresh();
        if (this.current && rootOf(this.current) === chat.root) $("chat-title").textContent = input.value;
      } catch (error) {
        this.chat.failed(error);
      }
    });
    link.replaceWith(input);
    input.focus();
  }

  async remove(chat) {
    if (!window.confirm(`Delete the chat “${chat.title || "Untitled"}” and all its versions?`)) return;
    try {
      // branches first: a chat is listed while its root is there
      for (const c of [...chat.members].sort((a, b) => (a.id === chat.root) - (b.id === chat.root))) {
        await call("DELETE", `/v1/conversations/${c.id}`);
      }
    } catch (error) {
      this.chat.failed(error);
    }
    const shown = this.current && rootOf(this.current) === chat.root;
    await this.refresh();
    if (shown) await this.open(null);
  }

  settings() {
    return this.current ? pick(this.current.metadata) : this.pending;
  }

  fillSettings() {
    const values = this.settings();
    for (const key of SETTINGS) $(`set-${key}`).value = values[key] || (key === "truncation" ? "disabled" : "");
    $("settings-status").textContent = "";
  }

  async saveSettings() {
    const values = {};
    for (const key of SETTINGS) if ($(`set-${key}`).value.trim()) values[key] = $(`set-${key}`).value.trim();
    try {
      if (values.schema) JSON.parse(values.schema);
      if (this.current) { // every version of the chat: a branch made later copies them from the one it leaves
        for (const c of this.members()) {
          const metadata = { ...c.metadata };
          for (const key of SETTINGS) delete metadata[key];
          await call("POST", `/v1/conversations/${c.id}`, { metadata: { ...metadata, ...values } });
        }
        await this.refresh();
      } else {
        this.pending = values;
      }
      $("settings-status").textContent = "Saved.";
    } catch (error) {
      $("settings-status").textContent = `Not saved: ${error.message}`;
    }
  }

  // The Responses fields of the chat's settings.
  request() {
    const s = this.settings();
    const body = { truncation: s.truncation || "disabled" };
    if (s.system) body.instructions = s.system;
    for (const key of ["temperature", "top_p", "max_output_tokens"]) if (s[key]) body[key] = Number(s[key]);
    if (s.schema) body.text = { format: { type: "json_schema", name: "answer", schema: JSON.parse(s.schema) } };
    return body;
  }

  // The model, its template and what a turn samples with when the chat's settings leave a field empty
  // (GET /props: the template's bundled settings, the model's, the server's command line).
  async model() {
    try {
      this.props = await call("GET", "/props");
    } catch {
      this.props = null;
    }
    const defaults = (this.props && this.props.default_generation_settings) || {};
    const shown = { temperature: defaults.temperature, top_p: defaults.top_p,
      max_output_tokens: defaults.max_new_tokens };
    for (const [key, value] of Object.entries(shown)) {
      $(`set-${key}`).placeholder = value === undefined || value === null ? "default" : `${value} (default)`;
    }
    this.context();
  }

  // What the session holds against its length, and the model and template (GET /v1/sessions/ID).
  async context() {
    const props = this.props || {};
    let template = props.template || "";
    $("context").textContent = "";
    if (this.current) {
      try {
        const session = await call("GET", `/v1/sessions/${this.current.id.slice(5)}`);
        template = session.template;
        this.unit = session.unit;
        const full = this.settings().truncation === "auto" ? "drops the oldest turns" : "refuses the next turn";
        $("context").textContent = `context ${session.step} / ${session.session_len} ${session.unit}`;
        $("context").title = `context used / the session's length; when full, the chat ${full} (Settings)`;
      } catch {
        $("context").textContent = "";
      }
    }
    const d = props.default_generation_settings || {};
    const sampling = d.temperature === undefined ? "" : ` · bundled sampling: temperature ${d.temperature}, top_p `
      + `${d.top_p}, top_k ${d.top_k}, repetition penalty ${d.repetition_penalty}`;
    $("model-info").textContent = `Model: ${props.model || "?"}${template ? ` · template: ${template}` : ""}`
      + `${d.n_ctx ? ` · context: ${d.n_ctx}` : ""}${sampling}`;
  }

  busy(controller) {
    this.controller = controller;
    $("stop").hidden = !controller;
    $("send").hidden = Boolean(controller);
    if (controller) $("stop").focus();
    else $("prompt").focus();
  }

  // The log is busy from the moment a turn is asked for until it is drawn again from the server.
  working(on) {
    if (on) $("messages").setAttribute("aria-busy", "true");
    else $("messages").removeAttribute("aria-busy");
  }

  async send() {
    const text = $("prompt").value;
    if (!text.trim() || this.controller || $("messages").hasAttribute("aria-busy")) return;
    this.working(true);
    $("prompt").value = "";
    let conversation = this.current;
    try {
      if (!conversation) {
        const metadata = { title: text.trim().slice(0, 80), client: CLIENT, ...this.pending };
        conversation = await call("POST", "/v1/conversations", { metadata });
        this.conversations.unshift({ ...conversation, updated_at: conversation.created_at });
        this.current = conversation;
        history.replaceState(null, "", `#${conversation.id}`);
        $("chat-title").textContent = metadata.title;
        this.sidebar();
      }
      await this.turn(conversation, text, text);
    } catch (error) {
      $("prompt").value = text;
      this.chat.failed(error);
    } finally {
      this.working(false);
    }
  }

  // A new version of turn t: a conversation of its own holding the turns before it (and, to regenerate, the
  // question of turn t), then the turn (docs/web.md, "Branches").
  async branch(t, text) {
    if (this.controller || !this.current || $("messages").hasAttribute("aria-busy")) return;
    if (text !== null && !text.trim()) return; // an edit to nothing asks nothing
    this.working(true);
    const base = this.current;
    const list = turns(this.chat.items);
    const items = list.slice(0, t).flatMap((turn) => [turn.user, ...turn.answer]);
    if (text === null) items.push(list[t].user);
    const metadata = { ...pick(base.metadata), client: CLIENT, root: rootOf(base), parent: base.id, turn: String(t) };
    try {
      const conversation = await call("POST", "/v1/conversations", { items, metadata });
      this.conversations.unshift({ ...conversation, updated_at: conversation.created_at });
      this.current = conversation;
      history.replaceState(null, "", `#${conversation.id}`);
      this.chat.items = items;
      this.chat.draw();
      await this.turn(conversation, text === null ? [] : text, null);
    } catch (error) {
      this.chat.failed(error);
    } finally {
      this.working(false);
    }
  }

  async turn(conversation, input, typed) {
    let request;
    try {
      request = this.request();
    } catch {
      throw new Error("The JSON schema in Settings is not valid JSON.");
    }
    const before = this.chat.items.length + (typeof input === "string" ? 1 : 0);
    const { failure, stopped } = await this.chat.run(conversation, input, request);
    if (stopped) await this.settle(conversation, before + 1);
    await this.refresh();
    this.current = this.conversations.find((c) => c.id === conversation.id) || conversation;
    await this.open(this.current);
    if (failure) {
      if (typed !== null && this.chat.items.length < before) $("prompt").value = typed; // nothing was kept
      this.chat.failed(failure);
    }
  }

  // A stopped turn is saved once the server has seen the connection close: wait (up to 5 s) for its answer,
  // the conversation's `count`-th item.
  async settle(conversation, count) {
    for (let i = 0; i < 50; i += 1) {
      const items = await all(`/v1/conversations/${conversation.id}/items?order=asc`).catch(() => []);
      if (items.length >= count) return;
      await sleep(100);
    }
  }

  showVersion(version, t) {
    if (!this.controller) this.open(leafFor(this.members(), version, t));
  }
}

new Page().start();
