// The messages of the conversation shown: its turns from the server, a turn streaming, its versions.
import { all, call, stream } from "./api.js";
import { el, markdown, copyText } from "./render.js";
import { owner, versions } from "./tree.js";

// the metadata the page marks its conversations with (docs/web.md)
export const CLIENT = "lmchat-web";

// What a failure means to the person, and what to do about it.
const ADVICE = {
  context_length_exceeded: "The conversation no longer fits in the model's context. Start a new chat, edit an "
    + "earlier question to branch off before it, or set “When the context is full” to drop old turns.",
  session_busy: "This conversation is still answering another request (maybe in another tab). Wait a moment, "
    + "then send again.",
  request_in_progress: "This conversation is still answering another request. Wait a moment, then send again.",
  over_capacity: "The server is answering as many requests as it can. Try again in a few seconds.",
  invalid_api_key: "The server refused the API key. Reload the page and enter a valid key.",
  string_above_max_length: "The message is longer than the server accepts. Shorten it, or split it in parts.",
  store_unavailable: "The server cannot reach its session store. Try again later; nothing was lost.",
  backend_error: "The model's engine failed. Try again; if it keeps failing, look at the server's log.",
};

export function advice(error) {
  if (error && ADVICE[error.code]) return ADVICE[error.code];
  if (error && error.status === undefined && error.code === undefined) {
    return "The server did not answer. Is lmchat serve still running? Reload the page once it is.";
  }
  return "Check the message and the settings, then send again.";
}

// The items of a conversation as turns: a user message and what answered it.
export function turns(items) {
  const found = [];
  for (const item of items) {
    if (item.type === "message" && item.role === "user") found.push({ user: item, answer: [] });
    else if (found.length) found[found.length - 1].answer.push(item);
  }
  return found;
}

export const textOf = (item) => (item.content || []).map((p) => p.text || "").join("");

function statsText(usage, live, unit) {
  if (!usage && !live) return "";
  const parts = [];
  if (usage) {
    parts.push(`${usage.output_tokens} ${unit || "tokens"}`);
    const details = usage.input_tokens_details || {};
    const from = details.cached_tokens && details.cached_from ? `, ${details.cached_from}` : "";
    parts.push(`prompt ${usage.input_tokens} (${details.cached_tokens || 0} cached${from})`);
  }
  if (live && live.ttft !== null) parts.push(`first token ${(live.ttft / 1000).toFixed(2)} s`);
  if (live && live.rate) parts.push(`${live.rate.toFixed(1)} tok/s`);
  return parts.join(" · ");
}

export class Chat {
  constructor(page) {
    this.page = page; // the app: conversations, the current one, settings, refresh()
    this.box = document.getElementById("messages");
    this.live = new Map(); // "conversation:turn" -> {ttft, rate}: what only the page measured
  }

  // `current()`: whether the page still shows this conversation once its items came
  async load(conversation, current = () => true) {
    const items = conversation ? await all(`/v1/conversations/${conversation.id}/items?order=asc`) : [];
    if (!current()) return;
    this.items = items;
    this.draw();
  }

  draw() {
    this.box.replaceChildren();
    const list = turns(this.items);
    if (!list.length) this.box.append(el("p", { class: "empty", text: "Ask anything to start a conversation." }));
    list.forEach((turn, t) => this.box.append(this.userNode(turn, t), this.answerNode(turn.answer, t)));
    this.box.scrollTop = this.box.scrollHeight;
  }

  userNode(turn, t) {
    const text = textOf(turn.user);
    const body = el("div", { class: "text", text });
    const node = el("article", { class: "message user", "aria-label": `Your message ${t + 1}` }, body);
    const actions = el("div", { class: "actions" });
    actions.append(el("button", { type: "button", text: "Edit", "aria-label": `Edit message ${t + 1}`,
      onclick: () => this.editing(node, body, text, t) }));
    const current = this.page.current;
    if (current) {
      const { list, index } = versions(this.page.members(), current, t);
      if (list.length > 1) {
        const go = (j) => this.page.showVersion(list[j], t);
        actions.append(el("nav", { class: "versions", "aria-label": `Versions of message ${t + 1}` },
          el("button", { type: "button", text: "‹", "aria-label": "Previous version", disabled: index <= 0,
            onclick: () => go(index - 1) }),
          el("span", { text: `${index + 1}/${list.length}`, "aria-live": "polite" }),
          el("button", { type: "button", text: "›", "aria-label": "Next version",
            disabled: index >= list.length - 1, onclick: () => go(index + 1) })));
      }
    }
    node.append(actions);
    return node;
  }

  editing(node, body, text, t) {
    const box = el("textarea", { "aria-label": `Edit message ${t + 1}`, rows: 3 });
    box.value = text;
    const send = () => this.page.branch(t, box.value);
    const cancel = () => this.draw();
    box.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
      if (e.key === "Escape") cancel();
    });
    body.replaceWith(el("div", { class: "edit" }, box,
      el("button", { type: "button", text: "Send edited", onclick: send }),
      el("button", { type: "button", text: "Cancel", onclick: cancel })));
    node.querySelector(".actions").hidden = true;
    box.focus();
  }

  answerNode(items, t, live) {
    const node = el("article", { class: "message assistant", "aria-label": `Answer ${t + 1}` });
    const content = el("div", { class: "content" });
    for (const item of items) {
      if (item.type === "reasoning") {
        const text = (item.content || []).map((p) => p.text || "").join("")
          || (item.summary || []).map((p) => p.text || "").join("");
        content.append(el("details", { class: "reasoning" }, el("summary", { text: "Reasoning" }),
          el("div", { class: "text", text })));
      } else if (item.type === "function_call") {
        content.append(el("div", { class: "tool-call", role: "note", "aria-label": "Tool call" },
          el("span", { class: "label", text: "Tool call " }), el("code", { text: `${item.name}(${item.arguments})` })));
      } else if (item.type === "function_call_output") {
        content.append(el("div", { class: "tool-result", role: "note", "aria-label": "Tool result" },
          el("span", { class: "label", text: "Tool result " }), el("code", { text: String(item.output) })));
      } else if (item.type === "message") {
        content.append(markdown(textOf(item)));
      }
    }
    const stats = el("p", { class: "stats", "aria-label": "Answer statistics" });
    const actions = el("div", { class: "actions" },
      el("button", { type: "button", text: "Regenerate", "aria-label": `Regenerate answer ${t + 1}`,
        onclick: () => this.page.branch(t, null) }),
      el("button", { type: "button", text: "Copy", "aria-label": `Copy answer ${t + 1}`,
        onclick: (e) => copyText(items.filter((i) => i.type === "message").map(textOf).join("\n"), e.target) }));
    node.append(content, stats, actions);
    if (!live && items.length) this.stats(node, t);
    return node;
  }

  // The answer's usage, from its response (GET /v1/responses/ID: the turn's counts as the server kept them).
  // A stopped or cut answer says so (its items do not: their status is the message's).
  async stats(node, t) {
    const members = this.page.members();
    const byId = new Map(members.map((c) => [c.id, c]));
    const holder = owner(byId, this.page.current, t);
    // only the page's own conversations answer turn t with response t - turn: another client's may hold answers
    // added as items (no response), and asking for a response that is not there would be a 404 in the console
    if (!holder || holder.metadata.client !== CLIENT) return;
    const k = t - Number(holder.metadata.turn || 0);
    const live = this.live.get(`${holder.id}:${t}`);
    try {
      const response = await call("GET", `/v1/responses/resp_${holder.id.slice(5)}_${k}`);
      node.querySelector(".stats").textContent = statsText(response.usage, live, this.page.unit);
      const why = response.incomplete_details && response.incomplete_details.reason;
      const note = response.status === "cancelled" ? "(stopped)"
        : why === "max_output_tokens" ? "(cut: the answer reached Max tokens)" : null;
      if (note) node.querySelector(".content").append(el("p", { class: "note", text: note }));
    } catch {
      node.querySelector(".stats").textContent = statsText(null, live, this.page.unit);
    }
  }

  // Streams a turn of `conversation` into the page: `input` (a text, or [] to answer the queued items).
  async run(conversation, input, request) {
    const t = turns(this.items).length - (Array.isArray(input) ? 1 : 0);
    if (typeof input === "string" && input) {
      this.items.push({ type: "message", role: "user", content: [{ type: "input_text", text: input }] });
      this.box.querySelector(".empty")?.remove();
      this.box.append(this.userNode({ user: this.items[this.items.length - 1] }, t));
    }
    const node = this.answerNode([], t, true);
    node.setAttribute("aria-busy", "true");
    this.box.append(node);
    const content = node.querySelector(".content");
    const controller = new AbortController();
    this.page.busy(controller);
    const started = performance.now();
    let first = null;
    let text = "";
    let reasoning = "";
    let usage = null;
    let failure = null;
    let stopped = false;
    let drawing = false;
    const paint = () => {
      drawing = false;
      const parts = [];
      if (reasoning) parts.push(el("details", { class: "reasoning" }, el("summary", { text: "Reasoning" }),
        el("div", { class: "text", text: reasoning })));
      parts.push(markdown(text));
      content.replaceChildren(...parts);
      this.box.scrollTop = this.box.scrollHeight;
    };
    try {
      await stream({ ...request, conversation: conversation.id, input }, (event) => {
        if (event.type === "response.output_text.delta" || event.type === "response.reasoning_text.delta") {
          if (first === null) first = performance.now();
          if (event.type === "response.output_text.delta") text += event.delta;
          else reasoning += event.delta;
          if (!drawing) { drawing = true; requestAnimationFrame(paint); }
        } else if (event.type === "response.completed" || event.type === "response.incomplete") {
          usage = event.response.usage;
        } else if (event.type === "error") {
          failure = { code: event.code, message: event.message, status: 500 };
        }
      }, controller.signal);
    } catch (error) {
      if (error.name === "AbortError") stopped = true;
      else failure = error;
    } finally {
      this.page.busy(null);
    }
    const seconds = (performance.now() - (first ?? started)) / 1000;
    const rate = usage && first !== null && seconds > 0 ? usage.output_tokens / seconds : null;
    this.live.set(`${conversation.id}:${t}`, { ttft: first === null ? null : first - started, rate });
    return { failure, stopped };
  }

  failed(error) {
    const node = el("div", { class: "message error", role: "alert" },
      el("p", { text: `Error: ${error.message}` }), el("p", { text: advice(error) }));
    this.box.append(node);
    this.box.scrollTop = this.box.scrollHeight;
  }
}
