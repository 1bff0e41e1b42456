// The chat page (see chat_page.h). It lists the served model, keeps the conversation in the page,
// and streams each answer from /v1/chat/completions (stream: true) as the tokens arrive.
#include "server/web/chat_page.h"

namespace perfx::server {
namespace {

constexpr const char kPage[] = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>PerfXLLM chat</title>
<style>
  :root { --bg: #f6f7f9; --panel: #fff; --line: #d9dde3; --text: #1d232b; --muted: #67707c;
          --accent: #2563eb; --user: #e8effd; --bot: #fff; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif;
         background: var(--bg); color: var(--text); height: 100vh; display: flex;
         flex-direction: column; }
  header { display: flex; align-items: center; gap: 12px; padding: 10px 16px;
           background: var(--panel); border-bottom: 1px solid var(--line); flex-wrap: wrap; }
  header h1 { font-size: 17px; margin: 0; }
  header .model { color: var(--muted); font-size: 13px; }
  header label { font-size: 13px; color: var(--muted); display: flex; align-items: center; gap: 4px; }
  header input { width: 70px; padding: 3px 5px; border: 1px solid var(--line); border-radius: 5px; }
  header input#apikey { width: 140px; }
  .spacer { flex: 1; }
  main { flex: 1; overflow-y: auto; padding: 16px; }
  #messages { max-width: 820px; margin: 0 auto; display: flex; flex-direction: column; gap: 10px; }
  .msg { padding: 10px 14px; border-radius: 10px; border: 1px solid var(--line);
         white-space: pre-wrap; word-wrap: break-word; }
  .msg.user { background: var(--user); align-self: flex-end; max-width: 85%; }
  .msg.assistant { background: var(--bot); align-self: flex-start; max-width: 85%; }
  .msg.error { background: #fdecec; border-color: #f5b5b5; color: #8a1c1c; }
  .msg .role { display: block; font-size: 11px; text-transform: uppercase; color: var(--muted);
               letter-spacing: .05em; margin-bottom: 2px; }
  .msg .stats { display: block; font-size: 11px; color: var(--muted); margin-top: 4px; }
  .empty { color: var(--muted); text-align: center; margin-top: 15vh; }
  footer { background: var(--panel); border-top: 1px solid var(--line); padding: 12px 16px; }
  form { max-width: 820px; margin: 0 auto; display: flex; gap: 8px; }
  textarea { flex: 1; resize: none; height: 64px; padding: 8px 10px; font: inherit;
             border: 1px solid var(--line); border-radius: 8px; }
  button { padding: 0 18px; border: 0; border-radius: 8px; background: var(--accent); color: #fff;
           font: inherit; cursor: pointer; }
  button:disabled { opacity: .5; cursor: default; }
  button.secondary { background: #6b7280; }
  #system { width: 100%; max-width: 820px; margin: 0 auto 8px; display: block; height: 38px; }
</style>
</head>
<body>
<header>
  <h1>PerfXLLM</h1>
  <span class="model" id="model">connecting…</span>
  <span class="spacer"></span>
  <label>temperature <input id="temperature" type="number" min="0" max="2" step="0.1" value="0.7"></label>
  <label>max tokens <input id="max_tokens" type="number" min="1" step="1" value="256"></label>
  <label>API key <input id="apikey" type="password" placeholder="(none)"></label>
  <button type="button" class="secondary" id="clear">New chat</button>
</header>
<main id="scroll">
  <div id="messages"><div class="empty" id="empty">Send a message to start.</div></div>
</main>
<footer>
  <textarea id="system" placeholder="System prompt (optional)"></textarea>
  <form id="form">
    <textarea id="input" placeholder="Type a message; Enter sends, Shift+Enter adds a line"></textarea>
    <button type="submit" id="send">Send</button>
    <button type="button" class="secondary" id="stop" disabled>Stop</button>
  </form>
</footer>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const history = [];
let modelId = "";
let controller = null;

$("apikey").value = localStorage.getItem("perfx_api_key") || "";
$("apikey").addEventListener("change", () => {
  localStorage.setItem("perfx_api_key", $("apikey").value);
  loadModel();
});

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("apikey").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function loadModel() {
  try {
    const r = await fetch("/v1/models", { headers: headers() });
    const j = await r.json();
    if (!r.ok) throw new Error(j.error ? j.error.message : r.statusText);
    modelId = j.data[0].id;
    $("model").textContent = "model: " + modelId;
  } catch (e) {
    $("model").textContent = "cannot list models: " + e.message;
  }
}

function addMessage(role, text) {
  const empty = $("empty");
  if (empty) empty.remove();
  const div = document.createElement("div");
  div.className = "msg " + role;
  const label = document.createElement("span");
  label.className = "role";
  label.textContent = role;
  const body = document.createElement("span");
  body.className = "content";
  body.textContent = text;
  div.append(label, body);
  $("messages").append(div);
  $("scroll").scrollTop = $("scroll").scrollHeight;
  return div;
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

async function send(text) {
  history.push({ role: "user", content: text });
  addMessage("user", text);
  const div = addMessage("assistant", "");
  div.dataset.state = "streaming";
  const body = div.querySelector(".content");
  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  messages.push(...history);
  const req = {
    model: modelId || undefined,
    messages,
    stream: true,
    stream_options: { include_usage: true },
    temperature: parseFloat($("temperature").value),
    max_tokens: parseInt($("max_tokens").value, 10),
  };
  controller = new AbortController();
  setBusy(true);
  const t0 = performance.now();
  let first = 0, answer = "", usage = null, finish = "";
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(req), signal: controller.signal,
    });
    if (!r.ok) {
      const j = await r.json().catch(() => ({}));
      throw new Error(j.error ? j.error.message : r.status + " " + r.statusText);
    }
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let k;
      while ((k = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, k);
        buf = buf.slice(k + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          const j = JSON.parse(data);
          if (j.error) throw new Error(j.error.message);
          if (j.usage) usage = j.usage;
          for (const c of j.choices || []) {
            const piece = (c.delta && c.delta.content) || "";
            if (piece) {
              if (!first) first = performance.now();
              answer += piece;
              body.textContent = answer;
              $("scroll").scrollTop = $("scroll").scrollHeight;
            }
            if (c.finish_reason) finish = c.finish_reason;
          }
        }
      }
    }
    history.push({ role: "assistant", content: answer });
    const stats = document.createElement("span");
    stats.className = "stats";
    const secs = (performance.now() - t0) / 1000;
    let s = "finish: " + (finish || "?");
    if (usage) s += " · " + usage.completion_tokens + " tokens";
    if (first) s += " · first token " + ((first - t0) / 1000).toFixed(2) + " s";
    if (usage && secs > 0) s += " · " + (usage.completion_tokens / secs).toFixed(1) + " tok/s";
    stats.textContent = s;
    div.append(stats);
  } catch (e) {
    if (e.name === "AbortError") {
      history.push({ role: "assistant", content: answer });
      const stats = document.createElement("span");
      stats.className = "stats";
      stats.textContent = "stopped";
      div.append(stats);
    } else {
      div.classList.add("error");
      body.textContent = (answer ? answer + "\n" : "") + "Error: " + e.message;
      history.pop();
    }
  } finally {
    div.dataset.state = "done";
    controller = null;
    setBusy(false);
  }
}

$("form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("input").value.trim();
  if (!text || controller) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) {
    ev.preventDefault();
    $("form").requestSubmit();
  }
});
$("stop").addEventListener("click", () => { if (controller) controller.abort(); });
$("clear").addEventListener("click", () => {
  if (controller) controller.abort();
  history.length = 0;
  $("messages").innerHTML = '<div class="empty" id="empty">Send a message to start.</div>';
});
loadModel();
</script>
</body>
</html>
)HTML";

}  // namespace

std::string_view chat_page_html() {
  return std::string_view(kPage, sizeof(kPage) - 1);
}

}  // namespace perfx::server
