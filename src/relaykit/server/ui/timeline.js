// The timeline: a session's events by turn (invocation), each turn a tree of run paths.
// An event whose run path is [triage, orders] sits under the node "orders" inside "triage",
// so transfers read as nesting: triage hands over to orders, orders back to triage
// ([triage, orders, triage]), and so on.

import { clip, h, replace, timeOf } from "./dom.js";
import { KIND_LABELS, hasDelta, kindOf, summary } from "./events.js";

/**
 * The turns of the events, in order: {id, events, root}. A node is {name, path, items}, an
 * item either {event} or {node}. A node's child is found again only among the children made
 * since the node's own last event, so a run path that comes back after another event (a
 * resumed invocation, say) opens a new branch and the tree keeps the order of events.
 */
export function buildTurns(events) {
  const turns = [];
  const byId = new Map();
  for (const event of events) {
    let turn = byId.get(event.invocation_id);
    if (!turn) {
      turn = { id: event.invocation_id, events: [], root: newNode(null, []) };
      byId.set(event.invocation_id, turn);
      turns.push(turn);
    }
    turn.events.push(event);
    place(turn.root, event.run_path, event);
  }
  return turns;
}

function newNode(name, path) {
  return { name, path, items: [], open: new Map() };
}

function place(node, rest, event) {
  if (!rest.length) {
    node.items.push({ event });
    node.open = new Map();
    return;
  }
  let child = node.open.get(rest[0]);
  if (!child) {
    child = newNode(rest[0], [...node.path, rest[0]]);
    node.open.set(rest[0], child);
    node.items.push({ node: child });
  }
  place(child, rest.slice(1), event);
}

/** The timeline's view: render(events, selectedId) redraws it; onSelect(event) on a click. */
export class Timeline {
  constructor(container, onSelect) {
    this.container = container;
    this.onSelect = onSelect;
    this.collapsed = new Set(); // keys of the nodes the user folded
  }

  render(events, selectedId) {
    const box = this.container;
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    if (!events.length) {
      replace(box, h("p", { class: "empty" }, "No events yet: send a message."));
      return;
    }
    const turns = buildTurns(events);
    replace(
      box,
      turns.map((turn, n) => this.turn(turn, n + 1, selectedId)),
    );
    if (atBottom) box.scrollTop = box.scrollHeight;
  }

  turn(turn, number, selectedId) {
    const first = turn.events.find((e) => e.author === "user" && e.message && e.message.role === "user");
    const kinds = turn.events.map(kindOf);
    const count = (kind) => kinds.filter((k) => k === kind).length;
    const plural = (n, word) => `${n} ${word}${n > 1 ? "s" : ""}`;
    const badges = [
      count("transfer") > 0 && h("span", { class: "badge transfer" }, plural(count("transfer"), "transfer")),
      count("pause") > 0 && h("span", { class: "badge pause" }, "paused"),
      count("error") > 0 && h("span", { class: "badge error" }, plural(count("error"), "error")),
    ];
    return h(
      "section",
      { class: "turn", dataset: { invocation: turn.id } },
      h(
        "header",
        { class: "turn-head" },
        h("span", { class: "turn-n" }, `Turn ${number}`),
        h("span", { class: "turn-title" }, first ? clip(first.message.content, 60) : "continued"),
        badges,
        h("time", {}, timeOf(turn.events[0].timestamp)),
      ),
      this.items(turn.root.items, turn.id, selectedId),
    );
  }

  items(items, turnId, selectedId) {
    const seen = new Map();
    return h(
      "ol",
      { class: "tree" },
      items.map((item) => {
        if (item.event) return h("li", {}, this.event(item.event, selectedId));
        const base = `${turnId}/${item.node.path.join("/")}`;
        const n = (seen.get(base) || 0) + 1;
        seen.set(base, n);
        return h("li", {}, this.node(item.node, `${base}#${n}`, turnId, selectedId));
      }),
    );
  }

  node(node, key, turnId, selectedId) {
    const details = h(
      "details",
      { class: "node", open: !this.collapsed.has(key), dataset: { path: node.path.join("/") } },
      h(
        "summary",
        { title: node.path.join(" › ") },
        h("span", { class: "agent-name" }, node.name),
        node.path.length > 1 && h("span", { class: "path" }, node.path.join(" › ")),
      ),
      this.items(node.items, turnId, selectedId),
    );
    details.addEventListener("toggle", () => {
      if (details.open) this.collapsed.delete(key);
      else this.collapsed.add(key);
    });
    return details;
  }

  event(event, selectedId) {
    const kind = kindOf(event);
    const classes = ["ev", `kind-${kind}`, event.id === selectedId ? "selected" : ""].join(" ").trim();
    return h(
      "button",
      {
        type: "button",
        class: classes,
        dataset: { id: event.id, kind },
        title: `${event.author} · ${timeOf(event.timestamp)}`,
        onclick: () => this.onSelect(event),
      },
      h("span", { class: `pill ${kind}` }, KIND_LABELS[kind]),
      h("span", { class: "ev-text" }, clip(summary(event), 140) || "(empty)"),
      hasDelta(event) && h("span", { class: "delta-mark", title: "changed state" }, "Δ state"),
    );
  }
}
