// Small DOM helpers. Every piece of text goes in through text nodes or attributes set one by
// one, never through HTML parsing, so data from the server cannot become markup.

const SVG_NS = "http://www.w3.org/2000/svg";

function fill(node, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      node.addEventListener(name.slice(2), value);
    } else if (name === "dataset") {
      Object.assign(node.dataset, value);
    } else if (name.startsWith("on")) {
      throw new Error(`event handler ${name} must be a function`);
    } else {
      node.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(node, children);
  return node;
}

/** Append children: nodes, strings (as text), arrays of them; null and false are skipped. */
export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** An HTML element: h("p", {class: "x"}, "text", h("b", {}, "bold")). */
export function h(tag, attrs, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

/** An SVG element, like h. */
export function s(tag, attrs, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), attrs, children);
}

/** Replace a node's children. */
export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

/** At most n characters of text, with an ellipsis when cut. */
export function clip(text, n = 120) {
  const flat = String(text).replace(/\s+/g, " ").trim();
  return flat.length > n ? `${flat.slice(0, n - 1)}…` : flat;
}

/** A value as indented JSON (text stays text). */
export function pretty(value) {
  if (typeof value === "string") {
    try {
      return JSON.stringify(JSON.parse(value), null, 2);
    } catch {
      return value;
    }
  }
  return JSON.stringify(value, null, 2);
}

/** A JSON-text value parsed, else null. */
export function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

/** A timestamp (seconds) as a local time of day. */
export function timeOf(seconds) {
  return new Date(seconds * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

/** A timestamp (seconds) as "5 min ago", or a date when older than a day. */
export function ago(seconds) {
  const diff = Date.now() / 1000 - seconds;
  if (diff < 45) return "just now";
  if (diff < 3600) return `${Math.round(diff / 60)} min ago`;
  if (diff < 86400) return `${Math.round(diff / 3600)} h ago`;
  return new Date(seconds * 1000).toLocaleDateString();
}
