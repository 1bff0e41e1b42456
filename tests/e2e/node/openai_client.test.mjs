// The official OpenAI client (npm `openai`) against `perfx serve`: plain and streamed completions
// and chat completions, usage fields, the closing `data: [DONE]`, stop strings, n, and errors.
// Usage: PERFX_URL=http://127.0.0.1:PORT [PERFX_API_KEY=...] node openai_client.test.mjs
import assert from "node:assert/strict";
import OpenAI from "openai";

const base = process.env.PERFX_URL;
if (!base) {
  console.error("PERFX_URL is not set");
  process.exit(2);
}
const client = new OpenAI({ baseURL: base + "/v1", apiKey: process.env.PERFX_API_KEY || "none", maxRetries: 0 });

let failures = 0;
async function check(name, fn) {
  try {
    await fn();
    console.log("ok - " + name);
  } catch (e) {
    failures++;
    console.log("not ok - " + name + "\n  " + String(e && e.stack ? e.stack : e).replace(/\n/g, "\n  "));
  }
}

function checkUsage(u, maxCompletion) {
  assert.ok(u, "usage is present");
  assert.ok(Number.isInteger(u.prompt_tokens) && u.prompt_tokens > 0, "prompt_tokens > 0");
  assert.ok(Number.isInteger(u.completion_tokens) && u.completion_tokens > 0, "completion_tokens > 0");
  assert.ok(u.completion_tokens <= maxCompletion, "completion_tokens <= max_tokens");
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
}

const models = await client.models.list();
const model = models.data[0].id;
const prompt = "In the beginning";
const messages = [{ role: "user", content: "Who made the heaven and the earth?" }];
let plainCompletion = "";
let plainChat = "";

await check("models.list names the served model", async () => {
  assert.equal(models.data.length, 1);
  assert.equal(typeof model, "string");
  const m = await client.models.retrieve(model);
  assert.equal(m.id, model);
});

await check("completions.create (plain): text, usage, finish_reason", async () => {
  const r = await client.completions.create({ model, prompt, max_tokens: 24, temperature: 0 });
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices.length, 1);
  plainCompletion = r.choices[0].text;
  assert.ok(plainCompletion.length > 0);
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  checkUsage(r.usage, 24);
  if (r.choices[0].finish_reason === "length") assert.equal(r.usage.completion_tokens, 24);
});

await check("completions.create (stream): same text, usage chunk", async () => {
  const stream = await client.completions.create({
    model, prompt, max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = "", usage = null, finish = null, chunks = 0;
  for await (const c of stream) {
    chunks++;
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      text += ch.text;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.ok(chunks > 2, "several chunks");
  assert.equal(text, plainCompletion);
  assert.ok(["stop", "length"].includes(finish));
  checkUsage(usage, 24);
});

await check("chat.completions.create (plain): message, usage, finish_reason", async () => {
  const r = await client.chat.completions.create({ model, messages, max_tokens: 20, temperature: 0 });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  plainChat = r.choices[0].message.content;
  assert.ok(plainChat.length > 0);
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  checkUsage(r.usage, 20);
});

await check("chat.completions.create (stream): same text, role delta, usage", async () => {
  const stream = await client.chat.completions.create({
    model, messages, max_tokens: 20, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let text = "", role = null, usage = null, finish = null;
  for await (const c of stream) {
    if (c.usage) usage = c.usage;
    for (const ch of c.choices) {
      if (ch.delta.role) role = ch.delta.role;
      if (ch.delta.content) text += ch.delta.content;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.equal(role, "assistant");
  assert.equal(text, plainChat);
  assert.ok(["stop", "length"].includes(finish));
  checkUsage(usage, 20);
});

await check("the raw stream ends with data: [DONE]", async () => {
  const headers = { "Content-Type": "application/json" };
  if (process.env.PERFX_API_KEY) headers["Authorization"] = "Bearer " + process.env.PERFX_API_KEY;
  for (const [path, body] of [
    ["/v1/completions", { model, prompt, max_tokens: 5, stream: true }],
    ["/v1/chat/completions", { model, messages, max_tokens: 5, stream: true }],
  ]) {
    const r = await fetch(base + path, { method: "POST", headers, body: JSON.stringify(body) });
    assert.equal(r.status, 200);
    assert.match(r.headers.get("content-type"), /text\/event-stream/);
    const text = await r.text();
    assert.ok(text.endsWith("data: [DONE]\n\n"), "ends with [DONE]: " + JSON.stringify(text.slice(-40)));
    assert.equal(text.split("data: [DONE]").length, 2, "exactly one [DONE]");
  }
});

await check("stop strings end the text before the stop string (plain and streamed)", async () => {
  const words = plainCompletion.trim().split(/\s+/);
  assert.ok(words.length >= 3, "need a few words: " + JSON.stringify(plainCompletion));
  const stop = " " + words[2];
  const cut = plainCompletion.slice(0, plainCompletion.indexOf(stop));
  const r = await client.completions.create({ model, prompt, max_tokens: 24, temperature: 0, stop: [stop, "\u0000never"] });
  assert.equal(r.choices[0].finish_reason, "stop");
  assert.equal(r.choices[0].text, cut);
  const stream = await client.completions.create({ model, prompt, max_tokens: 24, temperature: 0, stop, stream: true });
  let text = "", finish = null;
  for await (const c of stream) for (const ch of c.choices) {
    text += ch.text;
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  assert.equal(text, cut);
  assert.equal(finish, "stop");
});

await check("n=2 returns two choices; seeded sampling is reproducible", async () => {
  const a = await client.chat.completions.create({ model, messages, max_tokens: 8, n: 2, temperature: 0.9, seed: 7 });
  const b = await client.chat.completions.create({ model, messages, max_tokens: 8, n: 2, temperature: 0.9, seed: 7 });
  assert.equal(a.choices.length, 2);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1]);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
});

await check("errors arrive as the client's typed errors", async () => {
  await assert.rejects(
    client.chat.completions.create({ model: "no-such-model", messages, max_tokens: 4 }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && typeof e.message === "string");
  await assert.rejects(
    client.completions.create({ model, prompt, max_tokens: -1 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "max_tokens");
  await assert.rejects(
    client.chat.completions.create({ model, messages: [], max_tokens: 4 }),
    (e) => e instanceof OpenAI.BadRequestError);
  // And the server still answers.
  const r = await client.completions.create({ model, prompt, max_tokens: 2 });
  assert.equal(r.choices.length, 1);
});

if (failures) {
  console.log(`${failures} check(s) failed`);
  process.exit(1);
}
console.log("all OpenAI client checks passed");
