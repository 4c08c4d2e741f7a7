// relaykit's web dev UI: the page's state and what each control does. The views live in
// their own modules (chat, timeline, inspector, graph, pause); api.js talks to the server.

import { ApiError, api, apiKey, setApiKey } from "./api.js";
import { Chat } from "./chat.js";
import { ago, h, parseJson, replace } from "./dom.js";
import { currentSpeaker, pendingPause } from "./events.js";
import { agentGraph } from "./graph.js";
import { renderInspector } from "./inspector.js";
import { pauseForm } from "./pause.js";
import { Timeline } from "./timeline.js";

const $ = (id) => document.getElementById(id);

const state = {
  tree: null, // GET /agent
  kinds: new Map(), // agent name to its class, from the tree
  sessions: [], // GET /sessions
  session: null, // the open session (GET /sessions/{id}), events kept up to date below
  events: [], // the open session's events: stored ones, then those streamed since
  selected: null, // the selected event
  pending: null, // the pause waiting for an answer: {author, contexts}
  busy: false, // a turn is running
  turnSession: null, // the session of the turn running (or last run): what Stop cancels
};

const chat = new Chat($("chat-log"), select);
const timeline = new Timeline($("timeline"), select);

// -- messages -----------------------------------------------------------------------------
function toast(text, kind = "error") {
  const node = h("div", { class: `toast ${kind}`, role: kind === "error" ? "alert" : "status" }, text);
  $("toasts").append(node);
  setTimeout(() => node.remove(), 6000);
}

function report(error) {
  if (error instanceof ApiError && error.status === 401) {
    setStatus(apiKey() ? "This API key is not accepted." : "This server needs an API key.", "error");
    $("key-form").classList.add("attention");
    $("api-key").focus();
    return;
  }
  const text = error instanceof ApiError ? `${error.type}: ${error.message}` : String(error.message || error);
  toast(text);
}

function setStatus(text, kind = "") {
  const status = $("status");
  status.textContent = text;
  status.className = `status ${kind}`.trim();
}

// -- drawing ------------------------------------------------------------------------------
function drawGraph() {
  const box = $("agent-graph");
  if (!state.tree) return;
  const onPath = new Set(state.selected ? state.selected.run_path : []);
  const maxWidth = box.clientWidth - 20; // the box's padding
  replace(box, agentGraph(state.tree, { active: currentSpeaker(state.events), onPath, maxWidth }));
}

// The delete button waiting for its confirming click. It lives here, not on the button, so a
// redraw of the list (another tab's session, a list that loaded late) keeps it.
let confirming = null; // { id, timer }

function arm(id) {
  disarm();
  confirming = { id, timer: setTimeout(() => { confirming = null; drawSessions(); }, 4000) };
  drawSessions();
}

function disarm() {
  if (!confirming) return;
  clearTimeout(confirming.timer);
  confirming = null;
  drawSessions();
}

function drawSessions() {
  const list = $("session-list");
  if (!state.sessions.length) {
    replace(list, h("li", { class: "empty" }, "No sessions yet."));
    return;
  }
  replace(
    list,
    [...state.sessions].reverse().map((session) => {
      const open = state.session && state.session.id === session.id;
      const armed = confirming && confirming.id === session.id;
      const remove = h(
        "button",
        { type: "button", class: armed ? "delete armed" : "delete", "aria-label": `Delete session ${session.id}`, title: "Delete" },
        armed ? "Delete?" : "×",
      );
      remove.addEventListener("click", (e) => {
        e.stopPropagation();
        if (confirming && confirming.id === session.id) {
          disarm();
          deleteSession(session.id);
        } else arm(session.id);
      });
      return h(
        "li",
        { class: open ? "session open" : "session", dataset: { id: session.id } },
        h(
          "button",
          { type: "button", class: "open-session", onclick: () => openSession(session.id), title: session.id },
          h("span", { class: "session-id" }, session.id),
          h("span", { class: "session-meta" }, ago(session.last_update_time)),
        ),
        remove,
      );
    }),
  );
}

function drawPause() {
  const box = $("pause");
  if (!state.pending || state.busy) {
    box.hidden = true;
    replace(box);
    return;
  }
  box.hidden = false;
  const title = state.pending.contexts.some((p) => p.cancelled)
    ? "Stopped — continue it, or send a new message to abandon it."
    : "Waiting for you — or send a new message to abandon the pause.";
  replace(
    box,
    h("p", { class: "pause-title" }, title),
    pauseForm(state.pending, answerPause),
  );
}

function drawSide() {
  timeline.render(state.events, state.selected && state.selected.id, state.kinds);
  renderInspector($("inspector"), state.selected, state.session);
  drawGraph();
}

function drawAll() {
  $("session-title").textContent = state.session ? `${state.session.id} · user ${state.session.user_id}` : "no session open";
  chat.reset(state.events);
  drawSessions();
  drawPause();
  drawSide();
  setBusy(state.busy);
}

function select(event) {
  state.selected = event;
  for (const node of document.querySelectorAll(".selected")) node.classList.remove("selected");
  drawSide();
  for (const node of document.querySelectorAll(`[data-id="${CSS.escape(event.id)}"]`)) node.classList.add("selected");
}

function setBusy(busy) {
  state.busy = busy;
  $("send").disabled = busy;
  $("send").hidden = busy;
  const stop = $("stop");
  stop.hidden = !busy;
  if (!busy) {
    stop.disabled = false;
    stop.textContent = "Stop";
  }
  $("composer").classList.toggle("busy", busy);
  chat.working(busy);
}

// -- sessions -----------------------------------------------------------------------------
async function loadSessions() {
  state.sessions = await api.listSessions();
  drawSessions();
}

let opening = 0; // the latest openSession call: an older one that answers later is dropped
let switching = Promise.resolve(); // the latest switch of session, awaited before a turn starts

function openSession(id) {
  switching = load(id);
  return switching;
}

async function load(id) {
  const mine = ++opening;
  let session;
  try {
    session = await api.getSession(id);
  } catch (error) {
    report(error);
    return;
  }
  if (mine !== opening) return;
  state.session = session;
  state.events = session.events;
  state.selected = null;
  state.pending = storedPause(session);
  history.replaceState(null, "", `#session=${encodeURIComponent(id)}`);
  drawAll();
}

/** The session's pause as the server keeps it (null when nothing waits), with the author of
 * the event that paused when the events show it. */
function storedPause(session) {
  if (!session.pause || !session.pause.contexts.length) return null;
  const shown = pendingPause(session.events);
  return { author: shown ? shown.author : pauseAuthor(session.pause), contexts: session.pause.contexts };
}

/** The agent a waiting point names (`agent:<name>` in its address), for a pause whose event
 * is not the last one shown. */
function pauseAuthor(pause) {
  for (const point of pause.contexts) {
    const agents = point.address.filter((part) => part.startsWith("agent:"));
    if (agents.length) return agents[agents.length - 1].slice("agent:".length);
  }
  return "an agent";
}

function newSession() {
  opening++; // the user chose: a session the page is still opening on its own is dropped
  const created = (async () => {
    try {
      const session = await api.createSession({});
      await loadSessions();
      await openSession(session.id);
      $("message").focus();
      return session;
    } catch (error) {
      report(error);
      return null;
    }
  })();
  switching = created;
  return created;
}

async function deleteSession(id) {
  try {
    await api.deleteSession(id);
  } catch (error) {
    report(error); // not deleted: the session stays open and listed
    if (!(error instanceof ApiError && error.status === 404)) return;
  }
  if (state.session && state.session.id === id) {
    state.session = null;
    state.events = [];
    state.selected = null;
    state.pending = null;
    history.replaceState(null, "", "#");
    drawAll();
  }
  await loadSessions().catch(report);
}

// -- turns --------------------------------------------------------------------------------
/** Run a turn or a resume, showing its events and chunks as they come. */
async function runTurn(start) {
  const id = state.session.id;
  state.turnSession = id;
  state.pending = null;
  setBusy(true);
  drawPause();
  let done = null;
  let failed = false;
  try {
    for await (const { event, data } of start(id)) {
      if (!state.session || state.session.id !== id) break; // another session was opened
      if (event === "agent_event") {
        if (!state.events.some((e) => e.id === data.id)) state.events.push(data);
        chat.add(data);
        drawSide();
      } else if (event === "chunk") {
        chat.chunk(data, currentSpeaker(state.events));
      } else if (event === "discard") {
        chat.discard(data);
      } else if (event === "done") {
        done = data;
      }
    }
  } catch (error) {
    failed = true;
    report(error);
  } finally {
    chat.end();
    setBusy(false);
  }
  if (!state.session || state.session.id !== id) return;
  if (!done && !failed) {
    chat.notice(
      "The connection closed before the turn ended. The server finishes the turn and stores it: " +
        "open the session again to see the rest.",
    );
  }
  if (done && done.interrupt) {
    const paused = pendingPause(state.events);
    state.pending = { author: paused ? paused.author : "an agent", contexts: done.interrupt.contexts };
  } else if (!done) {
    state.pending = pendingPause(state.events); // refused: the pause (if any) still waits
  }
  try {
    const fresh = await api.getSession(id); // the state after the turn, and its pause
    state.session = { ...fresh, events: state.events };
    if (done || failed) state.pending = storedPause(fresh);
  } catch (error) {
    report(error);
  }
  drawPause();
  drawSide();
  chat.scroll(true); // the pause form took room: keep the end of the conversation in view
  loadSessions().catch(report);
}

async function send(event) {
  event.preventDefault();
  await switching; // a session being created or opened is the one this message goes to
  if (state.busy) return;
  const text = $("message").value;
  if (!text.trim()) return;
  const deltaText = $("state-delta").value.trim();
  let stateDelta;
  if (deltaText) {
    stateDelta = parseJson(deltaText);
    if (!stateDelta || typeof stateDelta !== "object" || Array.isArray(stateDelta)) {
      toast('The state delta must be a JSON object, like {"key": "value"}.');
      return;
    }
  }
  if (!state.session && !(await newSession())) return;
  $("message").value = "";
  $("state-delta").value = "";
  $("state-delta").closest("details").open = false;
  const body = stateDelta ? { text, state_delta: stateDelta } : { text };
  await runTurn((id) => api.turn(id, body));
  $("message").focus();
}

/** Stop the running turn: the server keeps it as the session's pause, which the turn's own
 * stream then ends with (its form offers Continue). */
async function stop() {
  // The session whose turn runs (another one may be open meanwhile).
  const id = state.turnSession;
  if (!state.busy || !id) return;
  const button = $("stop");
  button.disabled = true;
  button.textContent = "Stopping…";
  try {
    await api.cancel(id, { mode: "immediate" });
  } catch (error) {
    if (!state.busy || state.turnSession !== id) return; // the turn ended meanwhile
    button.disabled = false;
    button.textContent = "Stop";
    if (error instanceof ApiError && error.type === "not_running") {
      toast("This turn cannot be stopped from here: this server process does not run it.");
    } else report(error);
  }
}

function answerPause(answer) {
  if (answer.kind === "turn") runTurn((id) => api.turn(id, answer.body));
  else runTurn((id) => api.resume(id, answer.body));
}

// -- start --------------------------------------------------------------------------------
async function start() {
  try {
    await api.health();
    setStatus("connected", "ok");
  } catch {
    setStatus("the server does not answer", "error");
    return;
  }
  try {
    state.tree = await api.agent();
    (function walk(agent) {
      state.kinds.set(agent.name, agent.kind);
      agent.children.forEach(walk);
    })(state.tree);
    $("app-name").textContent = state.tree.name;
    document.title = `relaykit · ${state.tree.name}`;
    await loadSessions();
  } catch (error) {
    report(error);
    return;
  }
  if (!opening) {
    // Reopen the session in the address (#session=...), else the latest one.
    const wanted = new URLSearchParams(location.hash.slice(1)).get("session");
    const known = state.sessions.find((s) => s.id === wanted) || state.sessions[state.sessions.length - 1];
    if (known) await openSession(known.id);
    else drawAll();
  }
  document.body.dataset.ready = "true";
}

let resizing = 0;
window.addEventListener("resize", () => {
  cancelAnimationFrame(resizing);
  resizing = requestAnimationFrame(drawGraph); // the graph's shape depends on the panel's width
});
$("composer").addEventListener("submit", send);
$("message").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    $("composer").requestSubmit();
  }
});
$("new-session").addEventListener("click", newSession);
$("stop").addEventListener("click", stop);
$("api-key").value = apiKey();
$("key-form").addEventListener("submit", (e) => {
  e.preventDefault();
  setApiKey($("api-key").value.trim());
  location.reload(); // another key may be another user: start over
});

start();
