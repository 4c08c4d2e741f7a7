// The agent tree (GET /agent) drawn as an SVG graph: a tidy top-down layout computed here
// (leaves side by side, each parent centred over its children), no library.

import { s } from "./dom.js";

const NODE_H = 42;
const ROW_GAP = 34;
const COL_GAP = 14;
const PAD = 8;
const NAME_FONT = "600 13px system-ui, sans-serif";
const KIND_FONT = "11px system-ui, sans-serif";

let canvas = null;
function textWidth(text, font) {
  canvas = canvas || document.createElement("canvas");
  const ctx = canvas.getContext("2d");
  ctx.font = font;
  return ctx.measureText(text).width;
}

/** The laid-out nodes: {agent, depth, x (centre), y (top), children} with one width for all. */
export function layout(tree) {
  const nodes = [];
  let width = 0;
  (function measure(agent) {
    width = Math.max(width, textWidth(agent.name, NAME_FONT), textWidth(agent.kind, KIND_FONT));
    agent.children.forEach(measure);
  })(tree);
  width = Math.ceil(width) + 24;
  let leaf = 0;
  function place(agent, depth) {
    const children = agent.children.map((child) => place(child, depth + 1));
    const x = children.length
      ? (children[0].x + children[children.length - 1].x) / 2
      : PAD + leaf++ * (width + COL_GAP) + width / 2;
    const node = { agent, depth, x, y: PAD + depth * (NODE_H + ROW_GAP), children };
    nodes.push(node);
    return node;
  }
  const root = place(tree, 0);
  const depth = Math.max(...nodes.map((n) => n.depth));
  return {
    root,
    nodes,
    width,
    totalWidth: PAD * 2 + leaf * width + (leaf - 1) * COL_GAP,
    totalHeight: PAD * 2 + (depth + 1) * NODE_H + depth * ROW_GAP,
  };
}

/**
 * The graph of `tree`. `active` is the agent that speaks next; `onPath` the names on the
 * selected event's run path.
 */
export function agentGraph(tree, { active = null, onPath = new Set() } = {}) {
  const { nodes, width, totalWidth, totalHeight } = layout(tree);
  const edges = [];
  for (const node of nodes) {
    for (const child of node.children) {
      const y1 = node.y + NODE_H;
      const y2 = child.y;
      const mid = (y1 + y2) / 2;
      const lit = onPath.has(node.agent.name) && onPath.has(child.agent.name);
      edges.push(
        s("path", {
          class: lit ? "edge lit" : "edge",
          d: `M${node.x},${y1} C${node.x},${mid} ${child.x},${mid} ${child.x},${y2}`,
        }),
      );
    }
  }
  const boxes = nodes.map((node) => {
    const name = node.agent.name;
    const classes = ["agent", name === active ? "active" : "", onPath.has(name) ? "on-path" : ""];
    return s(
      "g",
      { class: classes.join(" ").trim(), "data-agent": name, transform: `translate(${node.x - width / 2},${node.y})` },
      s("title", {}, node.agent.description ? `${name}: ${node.agent.description}` : name),
      s("rect", { width, height: NODE_H, rx: 8 }),
      s("text", { class: "name", x: width / 2, y: 18 }, name),
      s("text", { class: "kind", x: width / 2, y: 33 }, node.agent.kind),
    );
  });
  return s(
    "svg",
    {
      class: "agent-graph",
      viewBox: `0 0 ${totalWidth} ${totalHeight}`,
      width: totalWidth,
      height: totalHeight,
      role: "img",
      "aria-label": `agent tree rooted at ${tree.name}`,
    },
    s("g", { class: "edges" }, edges),
    s("g", { class: "nodes" }, boxes),
  );
}
