"use strict";
// The operator desk: the queue live (who has what), a conversation's messages live, its
// context beside the thread. Tab to a queue item, Enter opens it READ-ONLY; "Take this
// conversation" claims it (taking it from another operator asks first). A desk that loses
// a conversation to another sees it at once: its reply box is disabled, saying why.
const $ = (id) => document.getElementById(id);
const status = $("status");
const me = fd.claims().sub || "";
let current = null, thread = null, queue = [];
const held = new Set();  // conversations this desk has had: losing one is said as such

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
    // Its name is what it shows, the action first: "Open c-12 alice · waiting 3 s ...".
    const action = h.claimed_by === me ? "Open yours" : "Open";
    button.append(
      fd.el("span", "act", action + " "),
      fd.el("span", "cid", h.conversation_id),
      fd.el("span", "sub", `${h.user_id || "anonymous"} \u00b7 ${waiting} \u00b7 ${who(h)}`
        + (h.reason ? ` \u00b7 ${h.reason}` : "")),
    );
    button.addEventListener("click", () => open(h.conversation_id));
    li.append(button);
    list.append(li);
    if (focused === h.conversation_id) button.focus();
  }
}

function onQueue(e) {
  if (e.type !== "queue") return;
  queue = e.handoffs;
  drawQueue();
  sync();
}
fd.follow("/v1/handoffs/events", onQueue);
setInterval(drawQueue, 15000);  // the waiting times

function handoffOf(cid) { return queue.find((h) => h.conversation_id === cid) || null; }

// The open conversation's controls, from who has it: only its claimant may reply.
function sync() {
  if (!current) { $("claim").textContent = ""; return; }
  const h = handoffOf(current);
  const mine = !!h && h.claimed_by === me;
  const other = h && h.claimed_by && !mine ? h.claimed_by : null;
  let why;
  if (!h) why = "Not handed off to a person: the bot answers it.";
  else if (mine) why = "You have this conversation.";
  else if (other && held.has(current)) why = `${other} took this conversation over from you: you can no longer reply.`;
  else if (other) why = `${other} has this conversation. Take it to reply.`;
  else why = "Nobody has taken this conversation yet. Take it to reply.";
  $("claim").textContent = why;
  enable(mine);
  $("reply").placeholder = mine ? "Reply as the agent" : why;
  if (mine) held.add(current);
  const take = $("take");
  take.hidden = !h || mine;
  take.textContent = other ? `Take this conversation from ${other}` : "Take this conversation";
  if (!other) $("confirm-take").hidden = true;
}

$("take").addEventListener("click", () => {
  const h = handoffOf(current);
  const other = h && h.claimed_by && h.claimed_by !== me ? h.claimed_by : null;
  if (!other) { takeOver(current); return; }
  $("confirm-text").textContent = `${other} has this conversation. Take it from them?`
    + " They can no longer reply once you do.";
  $("confirm-yes").textContent = `Yes, take it from ${other}`;
  $("confirm-take").hidden = false;
  $("confirm-yes").focus();
});
$("confirm-yes").addEventListener("click", () => { $("confirm-take").hidden = true; takeOver(current); });
$("confirm-no").addEventListener("click", () => { $("confirm-take").hidden = true; $("take").focus(); });

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
    const h = handoffOf(current);
    if (e.state === "handed_back" || e.state === "timed_out") {
      status.textContent = e.state === "timed_out" ? "Handed back: nobody answered in time." : "Handed back to the bot.";
      queue = queue.filter((q) => q.conversation_id !== current);
      sync();
    } else if (e.state === "claimed" && e.claimed_by && h) { h.claimed_by = e.claimed_by; sync(); }
  }
}

function enable(on) { for (const id of ["reply", "send", "hand-back"]) $(id).disabled = !on; }

async function takeOver(cid) {
  const r = await fd.api(`/v1/conversations/${encodeURIComponent(cid)}/claim`, { method: "POST" });
  if (!r.ok) return fail(r, "take it over");
  if (cid !== current) await open(cid);
  const h = handoffOf(cid);
  if (h) h.claimed_by = me;
  else queue.push({ conversation_id: cid, claimed_by: me, user_id: null, waiting_since: null });
  held.add(cid);
  sync();
  drawQueue();
  status.textContent = "You have taken over this conversation.";
  $("reply").focus();
}

async function open(cid) {
  if (thread) thread.stop();
  current = cid;
  status.textContent = "";
  $("title").textContent = "Conversation " + cid;
  $("log").replaceChildren();
  $("confirm-take").hidden = true;
  drawQueue();
  sync();
  thread = fd.follow(`/v1/conversations/${encodeURIComponent(cid)}/events`, onThread);
  await loadContext();
  ($("take").hidden ? $("reply") : $("take")).focus();
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
  if (!c.facts.length) facts.append(fd.el("li", "muted", "Nothing remembered."));
  for (const f of c.facts) {
    // Whose word it is: the business's record, or what the customer said (not verified).
    const li = fd.el("li");
    li.append(fd.el("span", "trust", f.trust === "verified" ? "verified" : "customer's word"));
    li.append(document.createTextNode(" " + f.text));
    facts.append(li);
  }
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
  queue = queue.filter((q) => q.conversation_id !== current);
  sync();
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
