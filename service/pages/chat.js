"use strict";
// The customer chat. The conversation's live events draw it (their own messages, the bot's,
// a person's), so an agent who steps in is seen without reloading. Each message keeps its
// Idempotency-Key until it is answered: a failed one is retried with the SAME key, so a
// payment its handler already made is never made twice.
const $ = (id) => document.getElementById(id);
const log = $("log"), banner = $("banner"), status = $("status"), hint = $("hint");
const box = $("text");
let conversation = null, stream = null;
let handoff = { state: null, position: null, since: null };
let failure = null;  // the key whose failure `status` tells of: cleared when its answer comes

$("who").textContent = fd.claims().sub ? "Signed in as " + fd.claims().sub : "Not signed in";

// -- keys kept until answered (sessionStorage: they survive a reload of the tab) -----------
function kept() {
  try { return JSON.parse(sessionStorage.getItem("fd-pending-" + conversation) || "[]"); }
  catch (e) { return []; }
}
function keep(list) { sessionStorage.setItem("fd-pending-" + conversation, JSON.stringify(list)); }
function remember(text, key) {
  keep(kept().filter((p) => p.key !== key).concat([{ text, key, failed: false }]));
}
function markFailed(key) { keep(kept().map((p) => p.key === key ? { ...p, failed: true } : p)); }
function answered(key) { keep(kept().filter((p) => p.key !== key)); }
function failedWith(text) { return kept().find((p) => p.failed && p.text === text) || null; }
function pending(key) { return kept().some((p) => p.key === key); }  // not answered yet

// -- drawing --------------------------------------------------------------------------------
function label(m) {
  if (m.role === "user") return "You";
  if (m.author && (m.author.toLowerCase() === "agent" || m.author.startsWith("operator"))) return "Agent";
  return "Assistant";
}

function bubble(role) {
  const div = fd.el("div", "msg " + role);
  div.append(fd.el("span", "who"), fd.el("span", "text"));
  log.append(div);
  log.scrollTop = log.scrollHeight;
  return div;
}

function fill(div, m) {
  div.className = "msg " + m.role;
  if (m.role === "assistant" && label(m) === "Agent") div.classList.add("operator");
  if (m.kind === "handoff") div.classList.add("waiting");
  if (m.failed) div.classList.add("failed");
  div.querySelector(".who").textContent = label(m);
  div.querySelector(".text").textContent = m.text;  // text, never HTML
  if (m.id) div.dataset.id = m.id;
}

function byId(id) { return [...log.children].find((d) => d.dataset.id === id) || null; }

// One message of the conversation (from its live events): drawn once, wherever it came from.
function draw(m) {
  let div = byId(m.id);
  if (!div && m.role === "user") {
    div = [...log.children].find((d) => !d.dataset.id && d.dataset.key
                                 && d.querySelector(".text").textContent === m.text) || null;
  }
  if (!div && m.role === "assistant") div = log.querySelector(".msg[data-streaming]");
  if (m.role === "assistant" && m.kind !== "handoff") {
    for (const w of log.querySelectorAll(".msg.waiting")) {
      if (w.dataset.parent === m.parent_id && w !== div) w.remove();  // a person answered it
    }
  }
  if (!div) div = bubble(m.role);
  delete div.dataset.streaming;
  // A message whose answer failed here keeps its retry when its live copy comes in late
  // (`fill` resets the classes; only an answer, below, or the retry itself clears it).
  const failedHere = m.role === "user" && div.classList.contains("failed");
  fill(div, m);
  if (failedHere) div.classList.add("failed");
  if (m.parent_id) div.dataset.parent = m.parent_id;
  if (m.role === "user" && div.dataset.key && !m.failed) {
    const retry = div.querySelector(".retry");
    if (retry && !div.classList.contains("failed")) retry.remove();
  }
  if (m.role === "assistant" && m.kind !== "failed" && m.parent_id) {
    const question = byId(m.parent_id);
    if (question && question.dataset.key) {
      if (failure === question.dataset.key) { status.textContent = ""; failure = null; }
      answered(question.dataset.key);
      question.classList.remove("failed");
      const retry = question.querySelector(".retry");
      if (retry) retry.remove();
    }
  }
  offerRating(div);
  log.scrollTop = log.scrollHeight;
}

// -- feedback: thumbs on each bot answer, then an optional comment --------------------------
// A rating replaces the last one given to the same answer (the server keeps one per answer).
function offerRating(div) {
  const cls = div.classList;
  if (!div.dataset.id || div.dataset.streaming || div.querySelector(".rate")
      || !cls.contains("assistant") || cls.contains("operator") || cls.contains("waiting")
      || cls.contains("failed")) return;
  const row = fd.el("div", "rate");
  const up = fd.el("button", "quiet", "Helpful");
  const down = fd.el("button", "quiet", "Not helpful");
  const note = fd.el("span", "rated");
  note.setAttribute("role", "status");
  for (const [button, rating] of [[up, 5], [down, 1]]) {
    button.type = "button";
    button.setAttribute("aria-pressed", "false");
    button.addEventListener("click", () => rate(div, rating, null));
  }
  row.append(up, down, note);
  div.append(row);
}

async function rate(div, rating, comment) {
  const row = div.querySelector(".rate"), note = row.querySelector(".rated");
  const url = `/v1/conversations/${encodeURIComponent(conversation)}/messages/`
    + `${encodeURIComponent(div.dataset.id)}/feedback`;
  let r;
  try {
    r = await fd.api(url, { method: "POST", headers: { "Content-Type": "application/json" },
                            body: JSON.stringify({ rating, comment }) });
  } catch (err) { r = null; }
  if (!r || !r.ok) { note.textContent = "Your rating could not be saved. Please try again."; return; }
  const [up, down] = row.querySelectorAll("button");
  up.setAttribute("aria-pressed", String(rating === 5));
  down.setAttribute("aria-pressed", String(rating === 1));
  div.dataset.rating = String(rating);
  note.textContent = comment ? "Thanks, your comment is saved." : "Thanks for telling us.";
  if ((await r.clone().json().catch(() => ({}))).resolved) askIfResolved();
  if (row.querySelector("form")) return;
  const form = fd.el("form", "comment");
  const field = fd.el("input");
  field.type = "text";
  field.maxLength = 4000;
  field.setAttribute("aria-label", "Anything to add? (optional)");
  field.placeholder = "Anything to add? (optional)";
  const send = fd.el("button", "quiet", "Send comment");
  send.type = "submit";
  form.append(field, send);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    if (field.value.trim()) rate(div, Number(div.dataset.rating), field.value.trim());
  });
  row.append(form);
}

// -- the 1-5 question, once the conversation is resolved ------------------------------------
// Asked when the conversation's state (GET /v1/conversations/{cid}) says it is resolved (the
// customer said "that's all", a handler or an agent settled it, or it was assumed). The
// answer rates the conversation's last answer (stored with that message, like the thumbs,
// which it then shows: 5 is "Helpful", 1 "Not helpful"); answering again replaces it.
const survey = $("survey"), surveyNote = $("survey-note");
async function askIfResolved() {
  if (!conversation) return;
  const cid = conversation;
  let r;
  try { r = await fd.api(`/v1/conversations/${encodeURIComponent(cid)}`); } catch (err) { return; }
  if (!r.ok || cid !== conversation) return;
  const state = await r.json();
  const done = state.resolution === "resolved" || state.resolution === "assumed_resolved";
  if (done && lastAnswer() && survey.hidden) { survey.hidden = false; surveyNote.textContent = ""; }
}
function lastAnswer() {
  const answers = [...log.querySelectorAll(".msg.assistant[data-id]")]
    .filter((d) => !d.classList.contains("waiting") && !d.classList.contains("failed"));
  return answers.length ? answers[answers.length - 1] : null;
}
for (const b of survey.querySelectorAll("button[data-rating]")) {
  b.addEventListener("click", async () => {
    const div = lastAnswer();
    if (!div || !conversation) return;
    const rating = Number(b.dataset.rating);
    const url = `/v1/conversations/${encodeURIComponent(conversation)}/messages/`
      + `${encodeURIComponent(div.dataset.id)}/feedback`;
    let r;
    try {
      r = await fd.api(url, { method: "POST", headers: { "Content-Type": "application/json" },
                              body: JSON.stringify({ rating }) });
    } catch (err) { r = null; }
    if (!r || !r.ok) { surveyNote.textContent = "Your rating could not be saved. Please try again."; return; }
    for (const other of survey.querySelectorAll("button[data-rating]")) {
      other.setAttribute("aria-pressed", String(other === b));
    }
    surveyNote.textContent = `Thank you: you rated this conversation ${rating} out of 5.`;
    div.dataset.rating = String(rating);
    const thumbs = div.querySelectorAll(".rate button");
    if (thumbs.length === 2) {
      thumbs[0].setAttribute("aria-pressed", String(rating === 5));
      thumbs[1].setAttribute("aria-pressed", String(rating === 1));
    }
  });
}
function resetSurvey() {
  survey.hidden = true;
  surveyNote.textContent = "";
  for (const b of survey.querySelectorAll("button[data-rating]")) b.setAttribute("aria-pressed", "false");
}

function showBanner() {
  const h = handoff;
  if (h.state === "claimed") {
    banner.textContent = "A person from our team has taken over this conversation and will answer here.";
  } else if (h.state === "opened") {
    const place = h.position ? `You are number ${h.position} in the queue for a person.` : "";
    const wait = h.since ? ` You have waited ${fd.waited((Date.now() - h.since) / 1000)}.` : "";
    banner.textContent = ("Waiting for a person from our team. " + place + wait).trim();
  } else if (h.state === "back") {
    banner.textContent = "You're back with the assistant.";
  } else banner.textContent = "";
  banner.classList.toggle("on", !!h.state);
}
setInterval(() => { if (handoff.state === "opened") showBanner(); }, 5000);

function onEvent(e) {
  if (e.type === "message") draw(e);
  else if (e.type === "message_removed") { const d = byId(e.id); if (d) d.remove(); }
  else if (e.type === "handoff") {
    if (e.state === "opened") handoff = { state: "opened", position: null, since: Date.parse(e.time) };
    else if (e.state === "claimed" || e.state === "answered") handoff.state = "claimed";
    else if (handoff.state === "opened" || handoff.state === "claimed") {
      handoff = { state: "back", position: null, since: null };  // a person handed it back
      askIfResolved();  // an agent may have marked it resolved
    } else if (handoff.state !== "back") handoff = { state: null, position: null, since: null };
    showBanner();
  } else if (e.type === "queue_position") { handoff.position = e.position; showBanner(); }
}

function followConversation() {
  if (stream || !conversation) return;
  const connection = $("connection");
  stream = fd.follow(`/v1/conversations/${encodeURIComponent(conversation)}/events`, onEvent,
    (state, code) => {
      if (state === "refused" && code === 404 && stream) { stream.stop(); stream = null; return; }
      // Down: said until it is back; it then catches up (Last-Event-ID), nothing missed.
      const down = state === "reconnecting" || state === "refused";
      connection.textContent = down ? "Reconnecting\u2026" : "";
      connection.classList.toggle("on", down);
    });
}

// -- plain-language errors ------------------------------------------------------------------
function plain(statusCode, body) {
  const detail = String(body.detail || "");
  if (body.type === "InputTooLarge" || statusCode === 413) {
    const limit = /limit is ([\d,]+)/.exec(detail);
    return "Your message is too long to send" + (limit ? ` (the limit is ${limit[1]} characters)` : "")
      + ". Please shorten it: your text is still in the box.";
  }
  if (body.type === "EmptyMessage") return "Please write a message first.";
  if (body.type === "ForbiddenCharacters") return "Your message has characters we cannot accept. Please remove them and send again.";
  if (statusCode === 429) return "You are sending messages quickly. Please wait a moment, then send again.";
  if (statusCode === 401 || statusCode === 403) return "You are not signed in any more. Please sign in again.";
  if (body.type === "ServiceBusy") return "We are very busy right now and your message was not sent. Please wait a moment, then press Retry: it is sent once.";
  if (statusCode === 409) return "We are still answering your previous message. Please wait a moment, then send again.";
  return "Sorry, we could not send that message. Please try again.";
}

function offerRetry(div, text, key) {
  failure = key;
  div.classList.add("failed");
  markFailed(key);
  if (div.querySelector(".retry")) return;
  const short = text.length > 40 ? text.slice(0, 40) + "\u2026" : text;
  const retry = fd.el("button", "retry", "Retry");
  retry.type = "button";
  retry.setAttribute("aria-label", `Retry sending '${short}'`);
  retry.addEventListener("click", () => submit(text, key));
  div.append(retry);
}

// -- sending --------------------------------------------------------------------------------
let fresh = false;  // "New conversation" was pressed: the link's conversation is left behind
async function ensureConversation() {
  if (conversation) return conversation;
  const named = (fresh ? null : fd.params.get("conversation")) || sessionStorage.getItem("fd-conversation");
  if (named) conversation = named;
  else {
    const r = await fd.api("/v1/conversations", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: "{}",
    });
    if (r.status === 201) conversation = (await r.json()).conversation_id;
    else if (r.status === 404 || r.status === 405) conversation = "web-" + crypto.randomUUID();
    else throw new Error(plain(r.status, await r.json().catch(() => ({}))));
  }
  sessionStorage.setItem("fd-conversation", conversation);
  return conversation;
}

// A request waiting for the customer's yes (Category(confirm=...)): Yes / No send those
// words as the next message (typing them works the same); either answer removes the buttons.
// The passages the reply cites (`citations` of its answer): each a link when its document
// was added under its URL, else its name; nothing when the reply cites none.
function showCitations(div, citations) {
  for (const old of div.querySelectorAll(".cites")) old.remove();
  if (!citations || !citations.length) return;
  const row = fd.el("div", "cites", "Sources: ");
  citations.forEach((c, i) => {
    const name = `${c.source} - ${c.title}`;
    let item;
    if (/^https?:\/\//i.test(c.source)) {
      item = fd.el("a", "cite", name);
      item.href = c.source;
      item.target = "_blank";
      item.rel = "noopener noreferrer";
    } else {
      item = fd.el("span", "cite", name);
    }
    if (i) row.append("; ");
    row.append(item);
  });
  div.append(row);
}

function offerConfirmation(div) {
  const row = document.createElement("div");
  row.className = "confirm";
  for (const [word, label] of [["Yes", "Yes, go ahead"], ["No", "No, cancel"]]) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.addEventListener("click", () => {
      for (const other of document.querySelectorAll(".confirm")) other.remove();
      submit(word, crypto.randomUUID());
    });
    row.append(b);
  }
  div.append(row);
}

let busy = false;
async function submit(text, key) {
  for (const row of document.querySelectorAll(".confirm")) row.remove();
  if (busy) return;
  busy = true;
  $("go").disabled = true;
  try { await exchange(text, key); }
  catch (err) { status.textContent = "We could not reach the service. Check your connection and try again."; }
  finally { busy = false; $("go").disabled = false; box.focus(); }
}

async function exchange(text, key) {
  await ensureConversation();
  status.textContent = "";
  failure = null;
  hint.textContent = "";
  if (handoff.state === "back") { handoff.state = null; showBanner(); }
  remember(text, key);
  let mine = [...log.children].find((d) => d.dataset.key === key) || null;
  if (!mine) { mine = bubble("user"); fill(mine, { role: "user", text }); mine.dataset.key = key; }
  mine.classList.remove("failed");
  const old = mine.querySelector(".retry");
  if (old) old.remove();
  let response;
  try {
    response = await fd.api(`/v1/conversations/${encodeURIComponent(conversation)}/messages`, {
      method: "POST",
      headers: { "Content-Type": "application/json", "Accept": "text/event-stream",
                 "Idempotency-Key": key },
      body: JSON.stringify({ text }),
    });
  } catch (err) {
    if (!pending(key)) return;  // its answer came by the live stream meanwhile
    offerRetry(mine, text, key);
    status.textContent = "Your message may not have reached us. Retry sends it again, once.";
    return;
  }
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    status.textContent = plain(response.status, body);
    if (response.status >= 500) { offerRetry(mine, text, key); return; }
    if (!mine.dataset.id) mine.remove();
    answered(key);
    if (!box.value) box.value = text;  // a refused message stays in the box
    return;
  }
  followConversation();
  let answer = null, sofar = "", finished = false;
  try {
    for await (const frame of fd.frames(response)) {
      const event = frame.data;
      if (frame.type === "delta") {
        sofar += event.text;
        if (!answer) { answer = bubble("assistant"); answer.dataset.streaming = "1"; }
        fill(answer, { role: "assistant", author: "bot", text: sofar, id: answer.dataset.id });
      } else if (frame.type === "done") {
        finished = true;
        mine.dataset.id = event.user_message_id;
        const drawn = byId(event.message_id);
        if (answer && drawn && drawn !== answer) answer.remove();
        else if (event.text) {
          if (!answer) answer = bubble("assistant");
          delete answer.dataset.streaming;
          fill(answer, { role: "assistant", author: "bot", text: event.text, id: event.message_id,
                         kind: event.handoff ? "handoff" : "message" });
          answer.dataset.parent = event.user_message_id;
          if (!event.handoff) offerRating(answer);
        } else if (answer) answer.remove();
        const shown = byId(event.message_id);
        if (shown) showCitations(shown, event.citations);
        if (event.awaiting_confirmation && shown) offerConfirmation(shown);
        answered(key);
        askIfResolved();  // "that's all, thanks", or a handler that completed the request
        setTimeout(loadMemories, 1000);  // what it learnt is stored just after the reply (a job:
        setTimeout(loadMemories, 4000);  // usually within a second, later on a busy server)
      } else if (frame.type === "failed") {
        finished = true;
        if (event.user_message_id) mine.dataset.id = event.user_message_id;
        if (answer) answer.remove();
        offerRetry(mine, text, key);
        status.textContent = "Sorry, something went wrong answering that. Retry sends the same message again; anything it started is not done twice.";
      }
    }
  } catch (err) { /* the connection dropped: offered as a retry below */ }
  if (!finished && !pending(key)) { if (answer && !answer.dataset.id) answer.remove(); return; }
  if (!finished) {
    if (answer) answer.remove();
    offerRetry(mine, text, key);
    status.textContent = "The answer was cut off. Retry sends the same message again, once.";
  }
}

// Typing the words of a message that failed offers its retry (same key, never a new one).
box.addEventListener("input", () => {
  const again = failedWith(box.value);
  hint.textContent = again ? "This is the message that failed: Send retries it once, it is not sent twice." : "";
});
box.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("send").requestSubmit(); }
});

$("send").addEventListener("submit", async (e) => {
  e.preventDefault();
  const text = box.value;
  if (!text.trim()) { status.textContent = "Please write a message first."; return; }
  const again = failedWith(text);
  box.value = "";
  await submit(text, again ? again.key : crypto.randomUUID());
});

// -- memories -------------------------------------------------------------------------------
async function loadMemories() {
  const list = $("memories");
  const past = $("past-conversations");
  const r = await fd.api("/v1/me/memories");
  list.replaceChildren();
  past.replaceChildren();
  if (!r.ok) { list.append(fd.el("li", "", "What we remember cannot be shown right now.")); return; }
  const body = await r.json();
  showMemories(list, body.memories || [], "Nothing remembered.");
  showMemories(past, body.past_conversations || [], "No past conversation kept.");
}

// Facts and past conversations are listed apart, each with its own delete button.
function showMemories(list, items, empty) {
  if (!items.length) list.append(fd.el("li", "", empty));
  for (const m of items) {
    const li = fd.el("li");
    const del = fd.el("button", "", "Delete");
    del.type = "button";
    del.setAttribute("aria-label", `Delete '${m.text}'`);
    del.addEventListener("click", async () => {
      await fd.api(`/v1/me/memories/${encodeURIComponent(m.id)}`, { method: "DELETE" });
      loadMemories();
    });
    li.append(fd.el("span", "", m.text), del);
    list.append(li);
  }
}

$("forget-all").addEventListener("click", () => {
  $("confirm-forget").hidden = false;
  $("forget-no").focus();  // the safe choice first
});
$("forget-no").addEventListener("click", () => { $("confirm-forget").hidden = true; $("forget-all").focus(); });
$("forget-yes").addEventListener("click", async () => {
  $("confirm-forget").hidden = true;
  const r = await fd.api("/v1/me/memories", { method: "DELETE" });
  if (!r.ok) status.textContent = "We could not delete what we remember. Please try again.";
  loadMemories();
  $("forget-all").focus();
});

// A new conversation: the page starts over (what is remembered stays; the old conversation
// is kept, and can be carried on from its link).
$("new-conversation").addEventListener("click", async () => {
  if (stream) { stream.stop(); stream = null; }
  sessionStorage.removeItem("fd-conversation");
  conversation = null;
  fresh = true;
  handoff = { state: null, position: null, since: null };
  showBanner();
  resetSurvey();
  status.textContent = hint.textContent = "";
  failure = null;
  for (const d of [...log.children]) if (d.id !== "greeting") d.remove();
  $("connection").classList.remove("on");
  try { await ensureConversation(); } catch (err) { status.textContent = err.message; return; }
  followConversation();
  box.focus();
});
$("reload-memories").addEventListener("click", loadMemories);

async function start() {
  if (!fd.token) { status.textContent = "You are not signed in: open this page from your account."; return; }
  const named = fd.params.get("conversation") || sessionStorage.getItem("fd-conversation");
  if (named) conversation = named;
  else {
    try { await ensureConversation(); } catch (err) { status.textContent = err.message; }
  }
  followConversation();
  loadMemories();
  setTimeout(askIfResolved, 1500);  // a resolved conversation reopened: once its answers are drawn
}
start();
