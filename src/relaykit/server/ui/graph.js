// The agent tree (GET /agent) drawn as an SVG graph, laid out here (no library): top-down
// (leaves side by side, each parent centred over its children) when that fits the panel,
// shrunk a little if need be; else as an indented tree (each child below its parent, one
// step to the right), which grows with the tree's depth instead of its breadth.

import { s } from "./dom.js";

const NODE_H = 42;
const PAD = 8;
const ROW_GAP = 34; // top-down: between levels
const COL_GAP = 14; // top-down: between leaves
const LIST_GAP = 8; // indented: between rows
const INDENT = 24; // indented: per level
const NAME_FONT = "600 13px system-ui, sans-serif";
const KIND_FONT = "11px system-ui, sans-serif";
const MIN_SCALE = 0.8; // a top-down graph may shrink to fit the panel, this far

let canvas = null;
function textWidth(text, font) {
  canvas = canvas || document.createElement("canvas");
  const ctx = canvas.getContext("2d");
  ctx.font = font;
  return ctx.measureText(text).width;
}

function boxWidth(agent) {
  return Math.ceil(Math.max(textWidth(agent.name, NAME_FONT), textWidth(agent.kind, KIND_FONT))) + 24;
}

/** Top-down: {nodes: [{agent, x, y, w, children}], edges, width, height}; x, y the top left. */
export function topDown(tree) {
  const nodes = [];
  let width = 0;
  (function measure(agent) {
    width = Math.max(width, boxWidth(agent));
    agent.children.forEach(measure);
  })(tree);
  let leaf = 0;
  let depth = 0;
  function place(agent, level) {
    depth = Math.max(depth, level);
    const children = agent.children.map((child) => place(child, level + 1));
    const centre = children.length
      ? (children[0].x + children[children.length - 1].x) / 2 + width / 2
      : PAD + leaf++ * (width + COL_GAP) + width / 2;
    const node = { agent, x: centre - width / 2, y: PAD + level * (NODE_H + ROW_GAP), w: width, children };
    nodes.push(node);
    return node;
  }
  place(tree, 0);
  const edges = [];
  for (const node of nodes) {
    for (const child of node.children) {
      const x1 = node.x + width / 2;
      const x2 = child.x + width / 2;
      const y1 = node.y + NODE_H;
      const mid = (y1 + child.y) / 2;
      edges.push({ from: node, to: child, d: `M${x1},${y1} C${x1},${mid} ${x2},${mid} ${x2},${child.y}` });
    }
  }
  return {
    nodes,
    edges,
    width: PAD * 2 + leaf * width + (leaf - 1) * COL_GAP,
    height: PAD * 2 + (depth + 1) * NODE_H + depth * ROW_GAP,
  };
}

/** Indented: as topDown, each node in a row of its own. */
export function indented(tree) {
  const nodes = [];
  let row = 0;
  function place(agent, level) {
    const node = { agent, x: PAD + level * INDENT, y: PAD + row++ * (NODE_H + LIST_GAP), w: boxWidth(agent), children: [] };
    nodes.push(node);
    node.children = agent.children.map((child) => place(child, level + 1));
    return node;
  }
  place(tree, 0);
  const edges = [];
  for (const node of nodes) {
    for (const child of node.children) {
      const x = node.x + 12;
      const y = child.y + NODE_H / 2;
      edges.push({ from: node, to: child, d: `M${x},${node.y + NODE_H} V${y - 6} Q${x},${y} ${x + 6},${y} H${child.x}` });
    }
  }
  return {
    nodes,
    edges,
    width: PAD + Math.max(...nodes.map((n) => n.x + n.w)),
    height: PAD * 2 + row * NODE_H + (row - 1) * LIST_GAP,
  };
}

/**
 * The graph of `tree`: top-down when it fits in `maxWidth` (shrunk by a fifth at most), else
 * indented. `active` is
 * the agent that speaks next; `onPath` the names on the selected event's run path.
 */
export function agentGraph(tree, { active = null, onPath = new Set(), maxWidth = Infinity } = {}) {
  let drawn = topDown(tree);
  let shape = "top-down";
  if (drawn.width * MIN_SCALE > maxWidth) {
    const other = indented(tree);
    if (other.width < drawn.width) {
      drawn = other;
      shape = "indented";
    }
  }
  const edges = drawn.edges.map((edge) => {
    const lit = onPath.has(edge.from.agent.name) && onPath.has(edge.to.agent.name);
    return s("path", { class: lit ? "edge lit" : "edge", d: edge.d });
  });
  const boxes = drawn.nodes.map((node) => {
    const name = node.agent.name;
    const classes = ["agent", name === active ? "active" : "", onPath.has(name) ? "on-path" : ""];
    return s(
      "g",
      { class: classes.join(" ").trim(), "data-agent": name, transform: `translate(${node.x},${node.y})` },
      s("title", {}, node.agent.description ? `${name}: ${node.agent.description}` : name),
      s("rect", { width: node.w, height: NODE_H, rx: 8 }),
      s("text", { class: "name", x: node.w / 2, y: 18 }, name),
      s("text", { class: "kind", x: node.w / 2, y: 33 }, node.agent.kind),
    );
  });
  return s(
    "svg",
    {
      class: `agent-graph ${shape}`,
      viewBox: `0 0 ${drawn.width} ${drawn.height}`,
      width: drawn.width,
      height: drawn.height,
      role: "img",
      "aria-label": `agent tree rooted at ${tree.name}`,
    },
    s("g", { class: "edges" }, edges),
    s("g", { class: "nodes" }, boxes),
  );
}
