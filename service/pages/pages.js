"use strict";
// What both pages share: the token, API calls, and live events over fetch (EventSource
// cannot send an Authorization header). Served as a file: the pages' CSP runs no inline code.
// The bearer token comes from the URL fragment (#token=...), which the browser never sends.
const fd = (() => {
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("token") || "";

  function claims() {
    try { return JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/"))); }
    catch (e) { return {}; }
  }

  function api(path, options = {}) {
    const headers = Object.assign({ "Authorization": "Bearer " + token }, options.headers || {});
    return fetch(path, Object.assign({}, options, { headers }));
  }

  const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

  // Server-Sent Events frames: separated by a blank line; `id:`, `event:`, `data:` lines
  // (`data:` is JSON); comment lines (keep-alives) start with ":".
  async function* frames(response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let id = null, type = null, data = "";
        for (const line of frame.split("\n")) {
          if (line.startsWith("id:")) id = line.slice(3).trim();
          else if (line.startsWith("event:")) type = line.slice(6).trim();
          else if (line.startsWith("data:")) data += line.slice(5).trim();
        }
        if (id === null && type === null && !data) continue;
        yield { id, type, data: data ? JSON.parse(data) : null };
      }
    }
  }

  // Follow a live stream: reconnects after a drop with Last-Event-ID, so nothing is missed
  // and nothing is drawn twice. `onEvent(data)` for each event; `onState(state, status)`.
  function follow(path, onEvent, onState = () => {}) {
    let last = null, stopped = false, controller = null;
    async function run() {
      while (!stopped) {
        controller = new AbortController();
        try {
          const headers = { "Accept": "text/event-stream" };
          if (last) headers["Last-Event-ID"] = last;
          const r = await api(path, { headers, signal: controller.signal });
          if (!r.ok) onState("refused", r.status);
          else {
            onState("live", r.status);
            for await (const frame of frames(r)) {
              if (stopped) return;
              if (frame.id) last = frame.id;
              if (frame.data) onEvent(frame.data);
            }
          }
        } catch (e) {
          if (stopped) return;
        }
        onState("reconnecting", 0);
        await sleep(1000);
      }
    }
    run();
    return {
      stop() { stopped = true; if (controller) controller.abort(); },
      get lastEventId() { return last; },
    };
  }

  function waited(seconds) {
    if (seconds < 60) return Math.max(0, Math.round(seconds)) + " s";
    return Math.round(seconds / 60) + " min";
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;  // text, never HTML
    return node;
  }

  return { params, token, claims, api, frames, follow, sleep, waited, el };
})();
