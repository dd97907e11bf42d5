// Text into the page, inert: a user's text as text, a model's markdown through marked and then DOMPurify
// (no script, no event handler, no javascript: URL, no image: nothing in an answer reaches the network); code
// blocks coloured by highlight.js.
import { marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.mjs";
import hljs from "./vendor/highlight.min.js";

const PURIFY = {
  FORBID_TAGS: ["img", "style", "form", "input", "button", "textarea", "select", "iframe", "video", "audio", "svg"],
  FORBID_ATTR: ["style", "class", "id"],
  ALLOW_DATA_ATTR: false,
};

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer nofollow");
  }
});

export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

// A model's markdown as sanitized DOM, each code block with a copy button.
export function markdown(text) {
  const holder = document.createElement("div");
  holder.className = "markdown";
  const html = marked.parse(text || "", { async: false, gfm: true, breaks: false });
  holder.append(DOMPurify.sanitize(html, { ...PURIFY, RETURN_DOM_FRAGMENT: true }));
  for (const pre of holder.querySelectorAll("pre")) {
    const code = pre.textContent;
    // colours by the language it reads (the fence's name was a class, which the sanitizer removes); it works on
    // the text and escapes it, so nothing the sanitizer removed comes back
    const block = pre.querySelector("code");
    if (block && code.length < 20000) hljs.highlightElement(block);
    const copy = el("button", { type: "button", class: "copy-code", text: "Copy", "aria-label": "Copy code" });
    copy.addEventListener("click", () => copyText(code, copy));
    pre.before(el("div", { class: "code-bar" }, copy));
  }
  return holder;
}

export async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = "Copied";
  } catch {
    button.textContent = "Copy failed";
  }
  setTimeout(() => { button.textContent = "Copy"; }, 1500);
}
