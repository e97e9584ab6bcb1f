// End-to-end test of `lynx-moe serve` with the official OpenAI client (npm `openai`):
// models, completions and chat completions, non-streaming and streaming, usage counts,
// stop strings, the "routing": "exact" extension, logit_bias and penalties, error objects.
// Exits non-zero on failure.
// Usage: node test.mjs BASE_URL API_KEY
import assert from "node:assert/strict";
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });

async function check(name, fn) {
  const t0 = Date.now();
  await fn();
  console.log(`ok   ${name} (${Date.now() - t0} ms)`);
}

const models = await client.models.list();
const model = models.data[0].id;
await check("models.list", async () => {
  assert.equal(models.data.length, 1);
  assert.equal(models.data[0].object, "model");
});

let greedy = "";
await check("completions.create", async () => {
  const r = await client.completions.create({
    model, prompt: "Once upon a time", max_tokens: 16, temperature: 0, ignore_eos: true,
  });
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage.completion_tokens, 16);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 16);
  greedy = r.choices[0].text;
});

await check("completions.create stream", async () => {
  const stream = await client.completions.create({
    model, prompt: "Once upon a time", max_tokens: 16, temperature: 0, ignore_eos: true,
    stream: true, stream_options: { include_usage: true },
  });
  let text = "", finish = null, usage = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(text, greedy);
  assert.equal(finish, "length");
  assert.equal(usage.completion_tokens, 16);
});

let chatText = "";
await check("chat.completions.create", async () => {
  const r = await client.chat.completions.create({
    model, max_tokens: 12, temperature: 0, ignore_eos: true,
    messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "Hello!" }],
  });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(r.usage.completion_tokens, 12);
  chatText = r.choices[0].message.content;
});

await check("chat.completions.create stream (exact routing)", async () => {
  const stream = await client.chat.completions.create({
    model, max_tokens: 12, temperature: 0, ignore_eos: true, stream: true, routing: "exact",
    messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "Hello!" }],
  });
  let text = "", role = null, finish = null;
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    if (d.role) role = d.role;
    if (d.content) text += d.content;
    if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(role, "assistant");
  assert.equal(text, chatText);
  assert.equal(finish, "length");
});

await check("stop string", async () => {
  const cps = [...greedy];
  const stop = cps[Math.floor(cps.length / 2)];
  const r = await client.completions.create({
    model, prompt: "Once upon a time", max_tokens: 16, temperature: 0, ignore_eos: true, stop,
  });
  assert.equal(r.choices[0].text, greedy.slice(0, greedy.indexOf(stop)));
  assert.equal(r.choices[0].finish_reason, "stop");
});

await check("sampling controls: logit_bias, penalties", async () => {
  // Token 120 is the byte 'x' of the synthetic byte-level vocabulary: +100 forces it, and the
  // penalties (on every token generated so far) do not outweigh the bias.
  const r = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "hi" }], max_tokens: 6, temperature: 0,
    ignore_eos: true, logit_bias: { "120": 100 }, frequency_penalty: 0.5, presence_penalty: 0.5,
  });
  assert.equal(r.choices[0].message.content, "xxxxxx");
  const p = await client.completions.create({
    model, prompt: "Once upon a time", max_tokens: 16, temperature: 0, ignore_eos: true,
    frequency_penalty: 2, presence_penalty: 1,
  });
  assert.notEqual(p.choices[0].text, greedy);
  await assert.rejects(
    client.completions.create({ model, prompt: "x", max_tokens: 1, logit_bias: { "300": 1 } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "logit_bias");
  await assert.rejects(
    client.completions.create({ model, prompt: "x", max_tokens: 1, presence_penalty: 3 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "presence_penalty");
});

await check("errors are APIError objects", async () => {
  await assert.rejects(
    client.completions.create({ model: "no-such-model", prompt: "x", max_tokens: 1 }),
    (e) => e instanceof OpenAI.APIError && e.status === 400 && e.code === "model_not_found");
  await assert.rejects(
    client.completions.create({ model, prompt: "x", max_tokens: 0 }),
    (e) => e instanceof OpenAI.BadRequestError);
  const bad = new OpenAI({ baseURL, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
});

console.log("all openai client checks passed");
