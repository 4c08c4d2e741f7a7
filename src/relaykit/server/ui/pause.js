// The form for a pause: one card per waiting point. A long-running tool's call is answered
// with its result (a tool response: Approve and Deny send {"approved": true|false, "by": ...},
// or any result typed in); an agent's question with an answer, sent as a resume target.
// Once every point has an answer, submit gets {kind: "turn", body} or {kind: "resume", body}.

import { clip, h, parseJson, pretty } from "./dom.js";
import { argumentsText, pointText, toolPause } from "./events.js";

const REVIEWER_STORAGE = "relaykit.reviewer";

/** JSON when the text parses, else the text (what an answer resumes with). */
function answerValue(text) {
  const parsed = parseJson(text);
  return parsed === null && text.trim() !== "null" ? text : parsed;
}

export function pauseForm(pending, submit) {
  const answers = new Map();
  const status = h("p", { class: "pause-status" });
  // Points a cancel stopped take no answer: a resume continues them, with the others' answers.
  const stopped = pending.contexts.filter((p) => p.cancelled);
  const points = pending.contexts.filter((p) => !p.cancelled);
  const form = h("div", { class: "pause-form" });
  if (stopped.length) form.append(stoppedCard(stopped, pending.author, points.length > 0));
  if (!points.length) {
    form.append(
      h(
        "button",
        {
          type: "button",
          class: "primary continue",
          onclick: (e) => {
            e.target.disabled = true;
            status.textContent = "sending…";
            submit({ kind: "resume", body: {} });
          },
        },
        "Continue",
      ),
      status,
    );
    return form;
  }

  function answered(point, answer, card) {
    answers.set(point.id, answer);
    card.classList.add("answered");
    for (const control of card.querySelectorAll("button, input, textarea")) control.disabled = true;
    if (answers.size < points.length) {
      status.textContent = `${answers.size} of ${points.length} answered`;
      return;
    }
    status.textContent = "sending…";
    // Tool responses also continue the points a cancel stopped: sent as they were typed.
    if (points.every((p) => answers.get(p.id).kind === "tool")) {
      const messages = points.map((p) => ({
        role: "tool",
        tool_call_id: answers.get(p.id).callId,
        content: answers.get(p.id).content,
      }));
      submit({ kind: "turn", body: { messages } });
    } else {
      const targets = {};
      for (const p of points) {
        const a = answers.get(p.id);
        targets[p.id] = a.kind === "tool" ? answerValue(a.content) : a.value;
      }
      submit({ kind: "resume", body: { targets } });
    }
  }

  for (const point of points) {
    const tool = toolPause(point);
    form.append(tool ? toolCard(point, tool, pending.author, answered) : questionCard(point, pending.author, answered));
  }
  if (!points.some(toolPause)) {
    form.append(
      h(
        "button",
        {
          type: "button",
          class: "link",
          onclick: () => {
            status.textContent = "sending…";
            submit({ kind: "resume", body: {} });
          },
        },
        "Resume every point without an answer",
      ),
    );
  }
  form.append(status);
  return form;
}

function stoppedCard(stopped, author, withQuestions) {
  return h(
    "article",
    { class: "pause-card stopped", dataset: { points: stopped.map((p) => p.id).join(" ") } },
    h("header", {}, h("span", { class: "pill pause" }, "stopped"), ` ${author}'s turn was cancelled`),
    h(
      "ul",
      { class: "muted" },
      stopped.map((p) => h("li", {}, pointText(p))),
    ),
    h(
      "p",
      { class: "muted" },
      withQuestions
        ? "Answer the points below: the resume also continues what was stopped (a cut tool call runs again)."
        : "Continue runs it from there (what finished does not run again; a cut tool call runs again).",
    ),
  );
}

function toolCard(point, tool, author, answered) {
  const reviewer = h("input", {
    type: "text",
    name: "reviewer",
    value: localStorage.getItem(REVIEWER_STORAGE) || "manager",
    "aria-label": "decided by",
  });
  const decide = (approved) => {
    const by = reviewer.value.trim() || "manager";
    localStorage.setItem(REVIEWER_STORAGE, by);
    answered(point, { kind: "tool", callId: tool.tool_call_id, content: JSON.stringify({ approved, by }) }, card);
  };
  const custom = h("textarea", { rows: 2, name: "result", placeholder: '{"approved": true, "note": "..."}' });
  const card = h(
    "article",
    { class: "pause-card", dataset: { point: point.id } },
    h("header", {}, h("span", { class: "pill pause" }, "waiting"), ` ${author} called `, h("code", {}, tool.tool)),
    h(
      "dl",
      { class: "kv" },
      h("dt", {}, "arguments"),
      h("dd", {}, clip(argumentsText(JSON.stringify(tool.arguments ?? {})), 200)),
      tool.started !== undefined && [h("dt", {}, "started"), h("dd", {}, clip(pretty(tool.started), 200))],
      h("dt", {}, "call"),
      h("dd", {}, h("code", {}, tool.tool_call_id)),
    ),
    h(
      "div",
      { class: "decide" },
      h("label", {}, "Decided by ", reviewer),
      h("button", { type: "button", class: "approve", onclick: () => decide(true) }, "Approve"),
      h("button", { type: "button", class: "deny", onclick: () => decide(false) }, "Deny"),
    ),
    h(
      "details",
      { class: "custom" },
      h("summary", {}, "Send another result"),
      custom,
      h(
        "button",
        {
          type: "button",
          onclick: () => {
            if (custom.value.trim()) answered(point, { kind: "tool", callId: tool.tool_call_id, content: custom.value }, card);
          },
        },
        "Send result",
      ),
    ),
  );
  return card;
}

function questionCard(point, author, answered) {
  const input = h("input", { type: "text", name: "answer", placeholder: "yes, 42, or JSON", "aria-label": "answer" });
  const send = () => {
    // Nothing typed is no answer (an Enter pressed by mistake); "Resume every point without an
    // answer" is the way to resume without one.
    if (input.value.trim()) answered(point, { kind: "target", value: answerValue(input.value) }, card);
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") send();
  });
  const card = h(
    "article",
    { class: "pause-card", dataset: { point: point.id } },
    h("header", {}, h("span", { class: "pill pause" }, "waiting"), ` ${author} asks: `, clip(pointText(point), 200)),
    h("p", { class: "muted" }, "Where: ", point.address.join(" › ")),
    h("div", { class: "decide" }, input, h("button", { type: "button", class: "approve", onclick: send }, "Resume")),
  );
  return card;
}
