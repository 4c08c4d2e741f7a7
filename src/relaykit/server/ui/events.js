// What an event of the API (EventOut) is, in words: its kind, a one-line summary, the pause
// it leaves waiting.

import { clip, parseJson } from "./dom.js";

/** The event's kind: user, answer, say, call, result, transfer, pause, error, state, other. */
export function kindOf(event) {
  const message = event.message;
  const action = event.action || {};
  if (event.error) return "error";
  if (action.interrupted) return "pause";
  if (action.transfer_to_agent) return "transfer";
  if (event.author === "user") return message && message.role === "tool" ? "answer" : "user";
  if (message && message.role === "tool") return "result";
  if (message && message.role === "assistant") return message.tool_calls.length ? "call" : "say";
  if (Object.keys(event.state_delta || {}).length) return "state";
  return "other";
}

/** The label shown for each kind. */
export const KIND_LABELS = {
  user: "you",
  answer: "answer",
  say: "says",
  call: "calls",
  result: "result",
  transfer: "transfer",
  pause: "paused",
  error: "error",
  state: "state",
  other: "event",
};

/** A tool call's arguments (JSON text) as "a: 1, b: x". */
export function argumentsText(text) {
  const parsed = parseJson(text);
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) return text;
  return Object.entries(parsed)
    .map(([k, v]) => `${k}: ${typeof v === "string" ? v : JSON.stringify(v)}`)
    .join(", ");
}

/** A tool call as "name(arguments)"; a transfer as "transfer_to_agent → dest". */
export function callText(call) {
  if (call.name === "transfer_to_agent") {
    const args = parseJson(call.arguments) || {};
    return `transfer_to_agent → ${args.agent_name ?? "?"}`;
  }
  return `${call.name}(${clip(argumentsText(call.arguments), 80)})`;
}

/** A long-running tool's pause info ({tool, tool_call_id, arguments, started}), else null. */
export function toolPause(point) {
  const info = parseJson(point.info);
  if (info && typeof info === "object" && "tool" in info && "tool_call_id" in info) return info;
  return null;
}

/** Where a point a cancel stopped was: "the call of lookup", "agent orders". */
function stoppedAt(point) {
  const last = point.address[point.address.length - 1] || "";
  if (last.startsWith("tool:")) return `the call of ${last.split(":")[1]}`;
  return last.startsWith("agent:") ? `agent ${last.slice("agent:".length)}` : last || "the run";
}

/** What a waiting point asks, in one line. */
export function pointText(point) {
  if (point.cancelled) return `stopped by a cancel at ${stoppedAt(point)}: continue to run it`;
  const tool = toolPause(point);
  if (tool) return `${tool.tool}(${clip(argumentsText(JSON.stringify(tool.arguments ?? {})), 80)}) waits for its result`;
  const info = parseJson(point.info);
  if (info && typeof info === "object" && !Array.isArray(info)) {
    const values = Object.values(info);
    if (values.length === 1 && typeof values[0] === "string") return values[0];
  }
  return point.info;
}

/** The event's summary line. */
export function summary(event) {
  const message = event.message;
  switch (kindOf(event)) {
    case "error":
      return event.error;
    case "pause":
      return event.action.interrupted.contexts.map(pointText).join("; ");
    case "transfer":
      return `→ ${event.action.transfer_to_agent}`;
    case "answer":
      return `${message.tool_call_id}: ${message.content}`;
    case "result":
      return `${message.tool_name || message.tool_call_id} → ${message.content}`;
    case "call":
      return [message.content, ...message.tool_calls.map(callText)].filter(Boolean).join(" · ");
    case "state":
      return `set ${Object.keys(event.state_delta).join(", ")}`;
    default:
      return message ? message.content : "";
  }
}

/** Whether the event changed state. */
export function hasDelta(event) {
  return Object.keys(event.state_delta || {}).length > 0;
}

/**
 * The pause the session's events leave waiting: {author, contexts} or null.
 *
 * The API does not say whether a session is paused; the events do: the last interrupt is
 * still waiting when only the user's events came after it (a tool response that did not get
 * through, say). Any agent event after it means it was answered, abandoned or replaced.
 */
export function pendingPause(events) {
  for (let i = events.length - 1; i >= 0; i--) {
    const event = events[i];
    const interrupted = event.action && event.action.interrupted;
    if (interrupted && interrupted.contexts.length) {
      return { author: event.author, contexts: interrupted.contexts };
    }
    if (event.author !== "user") return null;
  }
  return null;
}

/** The agent that speaks next: the last transfer's target, else the last agent author. */
export function currentSpeaker(events) {
  for (let i = events.length - 1; i >= 0; i--) {
    const event = events[i];
    if (event.action && event.action.transfer_to_agent) return event.action.transfer_to_agent;
    if (event.author !== "user" && !event.error) return event.author;
  }
  return null;
}
