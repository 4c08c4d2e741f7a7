// The inspector: the selected event in full (message, tool calls, action, error, its state
// delta) and the session's state now.

import { h, pretty, replace, timeOf } from "./dom.js";
import { KIND_LABELS, kindOf } from "./events.js";

function stateTable(state, empty) {
  const keys = Object.keys(state || {});
  if (!keys.length) return h("p", { class: "muted" }, empty);
  return h(
    "table",
    { class: "state" },
    h("tbody", {}, keys.sort().map((key) => {
      const scope = key.includes(":") ? key.slice(0, key.indexOf(":")) : "session";
      return h(
        "tr",
        {},
        h("th", { scope: "row" }, h("span", { class: `scope ${scope}` }, scope), key),
        h("td", {}, h("pre", {}, pretty(state[key]))),
      );
    })),
  );
}

function field(name, ...value) {
  return [h("dt", {}, name), h("dd", {}, ...value)];
}

function eventView(event) {
  const kind = kindOf(event);
  const message = event.message;
  const action = event.action;
  const rows = [
    field("author", event.author),
    field("run path", event.run_path.length ? event.run_path.join(" › ") : "(the user)"),
    field("time", timeOf(event.timestamp)),
    field("event id", h("code", {}, event.id)),
    field("invocation", h("code", {}, event.invocation_id)),
  ];
  if (message) {
    rows.push(field("role", message.role));
    if (message.tool_name) rows.push(field("tool", message.tool_name));
    if (message.tool_call_id) rows.push(field("call id", h("code", {}, message.tool_call_id)));
    if (message.content) rows.push(field("content", h("pre", {}, pretty(message.content))));
    for (const call of message.tool_calls) {
      rows.push(field(`calls ${call.name}`, h("code", {}, call.id), h("pre", {}, pretty(call.arguments))));
    }
  }
  if (action) {
    if (action.transfer_to_agent) rows.push(field("transfer to", action.transfer_to_agent));
    if (action.exit) rows.push(field("exit", "yes"));
    if (action.break_loop) rows.push(field("break loop", "yes"));
    if (action.interrupted) {
      for (const point of action.interrupted.contexts) {
        rows.push(field("waits", h("code", {}, point.id), h("pre", {}, pretty(point.info)), point.address.join(" › ")));
      }
    }
    if (action.custom !== null && action.custom !== undefined) rows.push(field("custom", h("pre", {}, pretty(action.custom))));
  }
  if (event.error) rows.push(field("error", h("pre", { class: "error" }, event.error)));
  return h(
    "section",
    { class: "inspect-event", dataset: { id: event.id } },
    h("h3", {}, h("span", { class: `pill ${kind}` }, KIND_LABELS[kind]), ` ${event.author}`),
    h("dl", { class: "kv" }, rows),
    h("h4", {}, "State delta"),
    stateTable(event.state_delta, "This event changed no state."),
  );
}

/** Draw the inspector: the selected event (or a hint) and the session's state. */
export function renderInspector(container, event, session) {
  replace(
    container,
    event ? eventView(event) : h("p", { class: "muted hint" }, "Click an event in the timeline or the chat to see it here."),
    h(
      "section",
      { class: "inspect-state" },
      h("h4", {}, "Session state"),
      session ? stateTable(session.state, "The session's state is empty.") : h("p", { class: "muted" }, "No session open."),
    ),
  );
}
