"use strict";
// The operator console: the queue live (who has what), a conversation's messages live, its
// context beside the thread. Tab to a queue item, Enter takes it over (a claim).
const $ = (id) => document.getElementById(id);
const status = $("status");
const me = fd.claims().sub || "";
let current = null, thread = null, queue = [];

$("who").textContent = me ? "Signed in as " + me : "Not signed in";

async function fail(r, what) {
  const body = await r.json().catch(() => ({}));
  if (r.status === 409 && /claimed/.test(String(body.detail || ""))) {
    status.textContent = `Another operator has this conversation: take it over first to ${what}.`;
  } else {
    status.textContent = `Could not ${what} (${r.status}): ${body.detail || r.statusText}`;
  }
}

// -- the queue ------------------------------------------------------------------------------
function who(h) {
  if (!h.claimed_by) return "not claimed";
  return h.claimed_by === me ? "yours" : "claimed by " + h.claimed_by;
}

function drawQueue() {
  const list = $("queue");
  const focused = document.activeElement && document.activeElement.dataset
    ? document.activeElement.dataset.conversation : null;
  list.replaceChildren();
  if (!queue.length) list.append(fd.el("li", "empty", "No conversation is waiting."));
  for (const h of queue) {
    const li = fd.el("li");
    li.dataset.conversation = h.conversation_id;
    if (h.conversation_id === current) li.classList.add("active");
    const button = fd.el("button");
    button.type = "button";
    button.dataset.conversation = h.conversation_id;
    const waiting = h.waiting_since
      ? "waiting " + fd.waited((Date.now() - Date.parse(h.waiting_since)) / 1000) : "answered";
    // Its name is what it shows, the action first: "Take over c-12 alice · waiting 3 s ...".
    const action = h.claimed_by === me ? "Open" : (h.claimed_by ? "Take over from " + h.claimed_by : "Take over");
    button.append(
      fd.el("span", "act", action + " "),
      fd.el("span", "cid", h.conversation_id),
      fd.el("span", "sub", `${h.user_id || "anonymous"} \u00b7 ${waiting} \u00b7 ${who(h)}`
        + (h.reason ? ` \u00b7 ${h.reason}` : "")),
    );
    button.addEventListener("click", () => takeOver(h.conversation_id));
    li.append(button);
    list.append(li);
    if (focused === h.conversation_id) button.focus();
  }
}

function onQueue(e) {
  if (e.type !== "queue") return;
  queue = e.handoffs;
  drawQueue();
  const mine = queue.find((h) => h.conversation_id === current);
  showClaim(mine || null);
}
fd.follow("/v1/handoffs/events", onQueue);
setInterval(drawQueue, 15000);  // the waiting times

function showClaim(h) {
  if (!current) { $("claim").textContent = ""; return; }
  $("claim").textContent = h ? (h.claimed_by === me ? "You have this conversation."
    : h.claimed_by ? `${h.claimed_by} has this conversation.` : "Nobody has claimed it yet.")
    : "Not handed off to a person.";
}

// -- one conversation -----------------------------------------------------------------------
function label(m) {
  if (m.role === "user") return "Customer";
  if (m.author && m.author.startsWith("operator:")) {
    const id = m.author.slice("operator:".length);
    return id === me ? "You (agent)" : "Agent " + id;
  }
  return "Bot";
}

function byId(id) { return [...$("log").children].find((d) => d.dataset.id === id) || null; }

function draw(m) {
  const log = $("log");
  let div = byId(m.id);
  if (!div) { div = fd.el("div"); div.append(fd.el("span", "who"), fd.el("span", "text")); log.append(div); }
  div.className = "msg " + m.role + (m.author && m.author.startsWith("operator:") ? " operator" : "")
    + (m.kind === "handoff" ? " waiting" : "");
  div.dataset.id = m.id;
  div.querySelector(".who").textContent = label(m);
  div.querySelector(".text").textContent = m.text;  // text, never HTML
  log.scrollTop = log.scrollHeight;
}

function onThread(e) {
  if (e.type === "message") { draw(e); if (e.role === "user") loadContext(); }
  else if (e.type === "message_removed") { const d = byId(e.id); if (d) d.remove(); }
  else if (e.type === "handoff") {
    if (e.state === "handed_back") { status.textContent = "Handed back to the bot."; enable(false); }
    else if (e.state === "timed_out") { status.textContent = "Handed back: nobody answered in time."; enable(false); }
    else if (e.state === "opened") enable(true);
  }
}

function enable(on) { for (const id of ["reply", "send", "hand-back"]) $(id).disabled = !on; }

async function takeOver(cid) {
  const r = await fd.api(`/v1/conversations/${encodeURIComponent(cid)}/claim`, { method: "POST" });
  if (!r.ok) return fail(r, "take it over");
  await open(cid);
  status.textContent = "You have taken over this conversation.";
}

async function open(cid) {
  if (thread) thread.stop();
  current = cid;
  status.textContent = "";
  $("title").textContent = "Conversation " + cid;
  $("log").replaceChildren();
  enable(true);
  drawQueue();
  showClaim(queue.find((h) => h.conversation_id === cid) || null);
  thread = fd.follow(`/v1/conversations/${encodeURIComponent(cid)}/events`, onThread);
  await loadContext();
  $("reply").focus();
}

async function loadContext() {
  if (!current) return;
  const cid = current;
  const r = await fd.api(`/v1/conversations/${encodeURIComponent(cid)}/context`);
  if (!r.ok || cid !== current) return;
  const c = await r.json();
  $("summary").textContent = c.summary || "Nothing summarised yet.";
  const facts = $("facts");
  facts.replaceChildren();
  if (!c.memories.length) facts.append(fd.el("li", "muted", "Nothing remembered."));
  for (const f of c.memories) facts.append(fd.el("li", "", f));
  const turns = $("turns");
  turns.replaceChildren();
  for (const t of c.turns) {
    const li = fd.el("li");
    li.append(fd.el("span", "cat", t.category || "not routed"), document.createTextNode(": " + t.text));
    if (t.request) li.append(fd.el("div", "muted", "Request: " + JSON.stringify(t.request)));
    if (t.need_more_info) li.append(fd.el("div", "muted", "Asked for: " + JSON.stringify(t.need_more_info)));
    if (t.instruction) li.append(fd.el("div", "muted", "Instruction: " + t.instruction));
    turns.append(li);
  }
}

$("answer").addEventListener("submit", async (e) => {
  e.preventDefault();
  const text = $("reply").value;
  if (!current || !text.trim()) return;
  const r = await fd.api(`/v1/conversations/${encodeURIComponent(current)}/operator-messages`, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ text }),
  });
  if (!r.ok) return fail(r, "send the reply");
  const sent = await r.json();
  draw({ id: sent.message_id, role: "assistant", author: "operator:" + me, text, kind: "message" });
  $("reply").value = "";
  status.textContent = "Sent.";
});
$("reply").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("answer").requestSubmit(); }
});

$("hand-back").addEventListener("click", async () => {
  if (!current) return;
  const r = await fd.api(`/v1/conversations/${encodeURIComponent(current)}/hand-back`, { method: "POST" });
  if (!r.ok) return fail(r, "hand it back");
  status.textContent = "Handed back to the bot.";
  enable(false);
});

$("takeover").addEventListener("submit", async (e) => {
  e.preventDefault();
  const cid = $("take-cid").value.trim();
  if (!cid) return;
  const r = await fd.api(`/v1/conversations/${encodeURIComponent(cid)}/handoff`, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ reason: "taken over by " + (me || "an operator") }),
  });
  if (!r.ok) return fail(r, "take it over");
  $("take-cid").value = "";
  await takeOver(cid);
});

if (!fd.token) status.textContent = "Not signed in: open this page as /operator#token=<JWT>.";
