// The chat: the conversation as bubbles (the user's and the agents' messages), with the
// tool calls, transfers, pauses and errors as small lines between them. A message that
// streams grows chunk by chunk; the stored event that follows it takes the bubble over.

import { clip, h, replace } from "./dom.js";
import { callText, kindOf, pointText } from "./events.js";

export class Chat {
  constructor(log, onSelect) {
    this.log = log;
    this.onSelect = onSelect;
    this.streaming = null; // {eventId, bubble, text, body, chunks, author}
  }

  reset(events) {
    this.streaming = null;
    replace(this.log);
    if (!events.length) this.log.append(h("p", { class: "empty" }, "Say hello: the agents answer here."));
    for (const event of events) this.add(event, false);
    this.scroll(true);
  }

  scroll(force) {
    const log = this.log;
    if (force || log.scrollHeight - log.scrollTop - log.clientHeight < 120) log.scrollTop = log.scrollHeight;
  }

  show(node, event) {
    const empty = this.log.querySelector(".empty");
    if (empty) empty.remove();
    if (event) {
      node.dataset.id = event.id;
      node.addEventListener("click", () => this.onSelect(event));
    }
    this.log.insertBefore(node, this.log.querySelector(".working")); // the indicator stays last
    return node;
  }

  /** Show or hide the "working" indicator at the end of the log. */
  working(on) {
    const indicator = this.log.querySelector(".working");
    if (indicator) indicator.remove();
    if (on) {
      this.log.append(h("div", { class: "working", role: "status" }, h("span", { class: "dots" }), "working…"));
      this.scroll(false);
    }
  }

  bubble(author, text, side) {
    const body = h("div", { class: "text" }, text);
    const node = h("article", { class: `msg ${side}` }, h("header", {}, author), body);
    return { node, body };
  }

  /** Show one event; live: it arrived while the turn runs. */
  add(event, live = true) {
    const kind = kindOf(event);
    const message = event.message;
    if (this.streaming && message && message.role === "assistant") {
      const open = this.streaming;
      this.streaming = null;
      if (message.content === open.text) {
        open.node.classList.remove("streaming");
        open.node.querySelector("header").textContent = event.author;
        open.node.dataset.id = event.id;
        open.node.addEventListener("click", () => this.onSelect(event));
        this.calls(event, open.node);
        this.scroll(false);
        return;
      }
      this.broken(open);
    }
    switch (kind) {
      case "user": {
        this.show(this.bubble("you", message.content, "user").node, event);
        break;
      }
      case "say":
      case "call": {
        if (message.content) {
          const { node } = this.bubble(event.author, message.content, "agent");
          this.show(node, event);
          this.calls(event, node);
        } else {
          this.calls(event, null);
        }
        break;
      }
      case "answer":
        this.line(event, "answer", `answer to ${message.tool_call_id}: ${clip(message.content, 100)}`);
        break;
      case "result":
        this.line(event, "result", `${message.tool_name || "tool"} → ${clip(message.content, 100)}`);
        break;
      case "transfer":
        this.line(event, "transfer", `${event.author} → ${event.action.transfer_to_agent}`);
        break;
      case "pause":
        for (const point of event.action.interrupted.contexts) {
          this.line(event, "pause", `${event.author} paused: ${clip(pointText(point), 120)}`);
        }
        break;
      case "error":
        this.line(event, "error", `${event.author}: ${event.error}`);
        break;
      default:
        break; // state-only events are in the timeline
    }
    if (live) this.scroll(false);
  }

  /** The tool calls of an assistant event (transfers show as their own line). */
  calls(event, bubble) {
    for (const call of event.message.tool_calls) {
      if (call.name === "transfer_to_agent") continue;
      const text = `${event.author} calls ${callText(call)}`;
      if (bubble) bubble.append(h("div", { class: "call" }, text));
      else this.line(event, "call", text);
    }
  }

  line(event, kind, text) {
    return this.show(h("div", { class: `line ${kind}` }, text), event);
  }

  /** A piece of a streamed message (a ChunkOut); `fallback` speaks when it names no agent. */
  chunk(chunk, fallback) {
    let open = this.streaming;
    if (!open || open.eventId !== chunk.event_id) {
      if (open) this.broken(open);
      const author = chunk.agent_name || fallback || "…";
      const { node, body } = this.bubble(author, "", "agent streaming");
      open = { eventId: chunk.event_id, node, body, text: "", chunks: 0 };
      this.streaming = open;
      this.show(node, null);
    }
    open.text += chunk.delta;
    open.chunks += 1;
    open.body.textContent = open.text;
    open.node.dataset.chunks = String(open.chunks);
    this.scroll(false);
  }

  /** The server dropped a streamed message (a DiscardOut): a retry streams anew, an error
   * event follows. What was shown of it goes. */
  discard(discard) {
    if (this.streaming && this.streaming.eventId === discard.event_id) {
      this.streaming.node.remove();
      this.streaming = null;
    }
  }

  /** The turn ended: a bubble still streaming never got its message. */
  end() {
    if (this.streaming) this.broken(this.streaming);
    this.streaming = null;
  }

  broken(open) {
    open.node.classList.remove("streaming");
    open.node.classList.add("broken");
    open.node.append(h("div", { class: "call" }, "the stream ended before the message was complete"));
  }

  /** A line that is not an event: an API error, say. */
  notice(text, kind = "error") {
    this.show(h("div", { class: `line ${kind}` }, text), null);
    this.scroll(true);
  }
}
