// Copies the page's libraries from node_modules into the package (lmchat/serve/static/vendor), with their
// licences: `npm ci && npm run build` here, then commit the copies (docs/web.md).
import { copyFileSync, mkdirSync } from "node:fs";

const out = new URL("../lmchat/serve/static/vendor/", import.meta.url);
mkdirSync(out, { recursive: true });
const files = {
  "marked/lib/marked.esm.js": "marked.esm.js",
  "marked/LICENSE": "marked.LICENSE",
  "dompurify/dist/purify.es.mjs": "purify.es.mjs",
  "dompurify/LICENSE": "dompurify.LICENSE",
  "@highlightjs/cdn-assets/es/highlight.min.js": "highlight.min.js",
  "@highlightjs/cdn-assets/styles/github.css": "hljs-github.css",
  "@highlightjs/cdn-assets/styles/github-dark.css": "hljs-github-dark.css",
  "@highlightjs/cdn-assets/LICENSE": "highlight.LICENSE",
};
for (const [from, to] of Object.entries(files)) {
  copyFileSync(new URL(`node_modules/${from}`, import.meta.url), new URL(to, out));
}
