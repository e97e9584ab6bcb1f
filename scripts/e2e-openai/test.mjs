// End-to-end test of `lynx-moe serve` with the official OpenAI client (npm `openai`):
// models, completions and chat completions, non-streaming and streaming, usage counts,
// stop strings, the "routing": "exact" extension, logit_bias and penalties, error objects,
// and what an agent client sends: tools with tool_choice "required" / a named function (the
// server forces a call by grammar in the model's Hermes format; the arguments must validate
// against the tool's schema), the streamed call through the client's stream helper, a
// follow-up turn with the call and a "tool" message, and response_format json_schema /
// json_object. The model has random weights: every answer here is what the grammar allowed,
// decoded greedily; the schemas bound every string (maxLength), so a call ends within
// max_tokens. Exits non-zero on failure.
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

// A JSON value against the subset of JSON Schema used below, by hand: "" when it matches,
// else what does not.
function mismatch(v, s, path = "$") {
  if (s.enum) return s.enum.includes(v) ? "" : `${path}: ${JSON.stringify(v)} not in enum`;
  switch (s.type) {
    case "object": {
      if (typeof v !== "object" || v === null || Array.isArray(v)) return `${path}: not an object`;
      for (const k of s.required ?? []) if (!(k in v)) return `${path}: missing ${k}`;
      for (const [k, x] of Object.entries(v)) {
        const sub = s.properties?.[k];
        if (!sub) {
          if (s.additionalProperties === false) return `${path}: unexpected key ${k}`;
          continue;
        }
        const m = mismatch(x, sub, `${path}.${k}`);
        if (m) return m;
      }
      return "";
    }
    case "string":
      if (typeof v !== "string") return `${path}: not a string`;
      return s.maxLength !== undefined && [...v].length > s.maxLength ? `${path}: too long` : "";
    case "integer": return Number.isInteger(v) ? "" : `${path}: not an integer`;
    case "boolean": return typeof v === "boolean" ? "" : `${path}: not a boolean`;
    default: return "";
  }
}

const weather = {
  type: "object",
  properties: {
    city: { type: "string", maxLength: 12 },
    unit: { type: "string", enum: ["celsius", "fahrenheit"] },
    days: { type: "integer" },
  },
  required: ["city", "unit", "days"],
  additionalProperties: false,
};
const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather forecast",
                                  parameters: weather } },
  { type: "function", function: { name: "get_time", description: "Local time",
                                  parameters: { type: "object",
                                                properties: { tz: { type: "string", maxLength: 8 } },
                                                required: ["tz"], additionalProperties: false } } },
];
const byName = Object.fromEntries(tools.map((t) => [t.function.name, t.function.parameters]));
const ask = [{ role: "user", content: "What is the weather in Paris for 3 days?" }];
// Greedy, one call (no parallel calls: the grammar then ends right after it). The grammar
// allows JSON whitespace between tokens, which the random model likes: tabs (byte 9) are
// banned and '"' (34, strings end sooner) and the end token (256, allowed only once the call
// is whole) raised, so the call ends well within max_tokens.
const bias = { "9": -100, "34": 4, "256": 30 };
const toolReq = { model, messages: ask, tools, temperature: 0, max_tokens: 200,
                  parallel_tool_calls: false, logit_bias: bias };

function checkCalls(choice, want) {
  assert.equal(choice.finish_reason, "tool_calls", JSON.stringify(choice));
  assert.equal(choice.tool_choice_unmet, undefined);  // the server's report of a missed call
  const calls = choice.message.tool_calls;
  assert.ok(Array.isArray(calls) && calls.length === 1, JSON.stringify(choice.message));
  const c = calls[0];
  assert.equal(c.type, "function");
  assert.ok(typeof c.id === "string" && c.id.length > 0);
  if (want) assert.equal(c.function.name, want);
  assert.ok(c.function.name in byName, c.function.name);
  const args = JSON.parse(c.function.arguments);
  assert.equal(mismatch(args, byName[c.function.name]), "", c.function.arguments);
  return c;
}

let forced = null, forcedPrompt = 0;
await check("tools: tool_choice required", async () => {
  const r = await client.chat.completions.create({ ...toolReq, tool_choice: "required" });
  checkCalls(r.choices[0]);
  assert.ok(r.usage.completion_tokens < 200);
});

await check("tools: named function", async () => {
  const r = await client.chat.completions.create({
    ...toolReq, tool_choice: { type: "function", function: { name: "get_weather" } },
  });
  forced = r.choices[0];
  forcedPrompt = r.usage.prompt_tokens;
  checkCalls(forced, "get_weather");
  const args = JSON.parse(forced.message.tool_calls[0].function.arguments);
  assert.deepEqual(Object.keys(args), ["city", "unit", "days"]);  // the schema's key order
});

await check("tools: streamed with the stream helper", async () => {
  const stream = client.chat.completions.stream({
    ...toolReq, tool_choice: { type: "function", function: { name: "get_weather" } },
  });
  const done = [];
  stream.on("tool_calls.function.arguments.done", (e) => done.push(e));
  // The raw chunks: the call's id and name first, then its arguments in pieces.
  const pieces = [];
  let header = null;
  stream.on("chunk", (chunk) => {
    for (const t of chunk.choices[0]?.delta?.tool_calls ?? []) {
      if (t.id) {
        assert.equal(header, null);
        assert.equal(pieces.length, 0);
        header = t;
      } else if (t.function?.arguments) {
        pieces.push(t.function.arguments);
      }
    }
  });
  const final = await stream.finalChatCompletion();
  const c = checkCalls(final.choices[0], "get_weather");
  assert.equal(header.function.name, "get_weather");
  assert.ok(pieces.length > 3, `arguments in ${pieces.length} pieces`);
  assert.equal(pieces.join(""), c.function.arguments);
  // Greedy: the same call as the non-streamed request, assembled from the deltas.
  assert.equal(c.function.arguments, forced.message.tool_calls[0].function.arguments);
  assert.equal(done.length, 1);
  assert.equal(done[0].name, "get_weather");
  assert.equal(done[0].arguments, c.function.arguments);
});

await check("tools: follow-up turn with the tool's result", async () => {
  const call = forced.message.tool_calls[0];
  const r = await client.chat.completions.create({
    model, tools, temperature: 0, max_tokens: 8,
    messages: [
      ...ask,
      { role: "assistant", content: null, tool_calls: [call] },
      { role: "tool", tool_call_id: call.id, content: JSON.stringify({ temp_c: 21, sky: "clear" }) },
    ],
  });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.ok(["stop", "length", "tool_calls"].includes(r.choices[0].finish_reason));
  // The template rendered the call and the result after the question.
  assert.ok(r.usage.prompt_tokens > forcedPrompt + 20, `${r.usage.prompt_tokens}`);
  assert.ok(r.usage.completion_tokens > 0);
});

await check("response_format json_schema (strict)", async () => {
  const schema = {
    type: "object",
    properties: {
      name: { type: "string", maxLength: 10 },
      level: { type: "string", enum: ["low", "mid", "high"] },
      count: { type: "integer" },
      ok: { type: "boolean" },
    },
    required: ["name", "level", "count", "ok"],
    additionalProperties: false,
  };
  const r = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Describe a cat as JSON." }], temperature: 0,
    max_tokens: 200, logit_bias: bias,
    response_format: { type: "json_schema", json_schema: { name: "cat", schema, strict: true } },
  });
  assert.equal(r.choices[0].finish_reason, "stop", JSON.stringify(r.choices[0]));
  const v = JSON.parse(r.choices[0].message.content);
  assert.equal(mismatch(v, schema), "", r.choices[0].message.content);
  assert.deepEqual(Object.keys(v), ["name", "level", "count", "ok"]);
});

await check("response_format json_object", async () => {
  // Any object: the random model would write strings without end, so '}' (byte 125) and the
  // end token (256) are raised; the grammar allows the end only after a whole object.
  const r = await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Answer in JSON." }], temperature: 0,
    max_tokens: 64, response_format: { type: "json_object" }, logit_bias: { "125": 6, "256": 30 },
  });
  assert.equal(r.choices[0].finish_reason, "stop", JSON.stringify(r.choices[0]));
  const v = JSON.parse(r.choices[0].message.content);
  assert.ok(typeof v === "object" && v !== null && !Array.isArray(v), r.choices[0].message.content);
});

console.log("all openai client checks passed");
