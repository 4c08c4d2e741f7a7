// The timeline: a session's events by turn (invocation), each turn a tree of run paths.
// An event whose run path is [triage, orders] sits under the node "orders" inside "triage",
// so transfers read as nesting: triage hands over to orders, orders back to triage
// ([triage, orders, triage]), and so on.

import { clip, h, replace, timeOf } from "./dom.js";
import { KIND_LABELS, hasDelta, kindOf, summary } from "./events.js";

/**
 * The turns of the events, in order: {id, events, root}. A node is {name, path, items}, an
 * item either {event} or {node}. The tree keeps the order of events: an event goes into the
 * node of its run path when that node is the latest thing that happened at its level, else a
 * new branch starts (a loop's second round, an invocation resumed after the user answered).
 * Only the children of a parallel agent (`kinds` maps agent names to their class) share their
 * nodes, since they run at the same time. An agent's event without a run path (the state its
 * output_key saves) goes into that agent's latest node.
 */
export function buildTurns(events, kinds = new Map()) {
  const turns = [];
  const byId = new Map();
  for (const event of events) {
    let turn = byId.get(event.invocation_id);
    if (!turn) {
      turn = { id: event.invocation_id, events: [], root: newNode(null, []), latest: new Map() };
      byId.set(event.invocation_id, turn);
      turns.push(turn);
    }
    turn.events.push(event);
    if (event.run_path.length) {
      turn.latest.set(event.author, place(turn.root, event.run_path, event, kinds));
    } else if (event.author !== "user" && turn.latest.has(event.author)) {
      turn.latest.get(event.author).items.push({ event });
    } else {
      turn.root.items.push({ event });
    }
  }
  return turns;
}

function newNode(name, path) {
  return { name, path, items: [], children: new Map() };
}

/** Put the event in the node of its run path (made when needed); that node. */
function place(node, rest, event, kinds) {
  if (!rest.length) {
    node.items.push({ event });
    return node;
  }
  let child;
  if (/Parallel/.test(kinds.get(node.name) || "")) {
    child = node.children.get(rest[0]);
  } else {
    const last = node.items[node.items.length - 1];
    child = last && last.node && last.node.name === rest[0] ? last.node : undefined;
  }
  if (!child) {
    child = newNode(rest[0], [...node.path, rest[0]]);
    node.children.set(rest[0], child);
    node.items.push({ node: child });
  }
  return place(child, rest.slice(1), event, kinds);
}

/** The timeline's view: render(events, selectedId) redraws it; onSelect(event) on a click. */
export class Timeline {
  constructor(container, onSelect) {
    this.container = container;
    this.onSelect = onSelect;
    this.collapsed = new Set(); // keys of the nodes the user folded
  }

  render(events, selectedId, kinds) {
    const box = this.container;
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    if (!events.length) {
      replace(box, h("p", { class: "empty" }, "No events yet: send a message."));
      return;
    }
    const turns = buildTurns(events, kinds);
    replace(
      box,
      turns.map((turn, n) => this.turn(turn, n + 1, selectedId)),
    );
    if (atBottom) box.scrollTop = box.scrollHeight;
  }

  turn(turn, number, selectedId) {
    const first = turn.events.find((e) => e.author === "user" && e.message && e.message.role === "user");
    const eventKinds = turn.events.map(kindOf);
    const count = (kind) => eventKinds.filter((k) => k === kind).length;
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
