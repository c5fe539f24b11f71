// anthropic.test.mjs — the Anthropic dialect through the official
// `@anthropic-ai/sdk` client: messages (thinking blocks, thinking off, stop
// sequences, seeds), the streamed event sequence, count_tokens against the
// tokenizer, and tool definitions / a tool round trip rendered identically
// by all three chat dialects.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { startServer, tokenize, greedy, EOG_BAN } from './helpers.mjs';

let srv, client, oai;
const RAW = (q) => `<|im_start|>user\n${q}<|im_end|>\n<|im_start|>assistant\n<think>\n`;

before(async () => {
  srv = await startServer(['--ctx', '2048']);
  client = new Anthropic({ baseURL: srv.url, apiKey: 'unused', maxRetries: 0 });
  oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => { assert.equal(await srv.stop(), 0); });

test('messages: a thinking block, usage from the tokenizer, max_tokens stop reason', async () => {
  const m = await client.messages.create({
    model: 'server-tiny-moe.gguf', max_tokens: 5, messages: [{ role: 'user', content: 'Hello' }],
    temperature: 0, logit_bias: EOG_BAN,
  });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.content[0].type, 'thinking');
  assert.equal(m.usage.input_tokens, (await tokenize(srv, RAW('Hello'))).length);
  assert.equal(m.usage.output_tokens, 5);
  const nat = await greedy(srv, RAW('Hello'), 5, { logit_bias: EOG_BAN });
  assert.equal(m.content[0].thinking, nat.text.trim());
  // the same sampling through OpenAI chat gives the same reasoning
  const o = await oai.chat.completions.create({ model: '', max_tokens: 5, messages: [{ role: 'user', content: 'Hello' }], temperature: 0, logit_bias: EOG_BAN });
  assert.equal(o.choices[0].message.reasoning_content, m.content[0].thinking);
});

test('messages: thinking disabled gives text only; system prompts render', async () => {
  const m = await client.messages.create({
    model: '', max_tokens: 4, system: [{ type: 'text', text: 'Be brief.' }], thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }], temperature: 0, logit_bias: EOG_BAN,
  });
  assert.deepEqual(m.content.map((b) => b.type), ['text']);
  const want = '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n';
  assert.equal(m.usage.input_tokens, (await tokenize(srv, want)).length);
  const c = await client.messages.countTokens({ model: '', system: 'Be brief.', thinking: { type: 'disabled' }, messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(c.input_tokens, m.usage.input_tokens);
});

test('messages stream: message_start, ping, thinking block deltas, message_delta, message_stop', async () => {
  const req = { model: '', max_tokens: 5, messages: [{ role: 'user', content: 'Go' }], temperature: 0, logit_bias: EOG_BAN };
  const plain = await client.messages.create(req);
  const events = [];
  const stream = await client.messages.create({ ...req, stream: true });
  for await (const e of stream) events.push(e);
  const types = events.map((e) => e.type);
  assert.equal(types[0], 'message_start');
  assert.equal(types[1], 'content_block_start');
  assert.equal(events[1].content_block.type, 'thinking');
  assert.equal(types.at(-2), 'message_delta');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(events.at(-2).delta.stop_reason, 'max_tokens');
  assert.equal(events.at(-2).usage.output_tokens, 5);
  const thinking = events.filter((e) => e.type === 'content_block_delta' && e.delta.type === 'thinking_delta').map((e) => e.delta.thinking).join('');
  assert.equal(thinking, plain.content[0].thinking);
  // the SDK's accumulator agrees, and the raw stream carries a ping
  const final = await client.messages.stream(req).finalMessage();
  assert.deepEqual(final.content, plain.content);
  const raw = await fetch(`${srv.url}/v1/messages`, { method: 'POST', body: JSON.stringify({ ...req, stream: true }) });
  assert.match(await raw.text(), /event: ping\ndata: {"type":"ping"}/);
});

test('messages: stop_sequences end with stop_sequence and are never emitted', async () => {
  const req = { model: '', max_tokens: 10, messages: [{ role: 'user', content: 'Say' }], temperature: 0, thinking: { type: 'disabled' }, logit_bias: EOG_BAN };
  const full = await client.messages.create(req);
  const text = full.content[0].text;
  assert.ok(text.length >= 4);
  const stop = text.slice(2, 4);
  const m = await client.messages.create({ ...req, stop_sequences: [stop] });
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, stop);
  const got = m.content.length ? m.content[0].text : '';
  assert.equal(got, text.slice(0, text.indexOf(stop)).trim());
});

test('seeds reproduce with temperature > 0, and differ across seeds', async () => {
  const req = { model: '', max_tokens: 6, messages: [{ role: 'user', content: 'Random' }], temperature: 1.0, top_k: 40, top_p: 0.95, logit_bias: EOG_BAN };
  const a = await client.messages.create({ ...req, seed: 5 });
  const b = await client.messages.create({ ...req, seed: 5 });
  assert.deepEqual(a.content, b.content);
  const outs = new Set();
  for (const seed of [1, 2, 3, 4]) outs.add(JSON.stringify((await client.messages.create({ ...req, seed })).content));
  assert.ok(outs.size > 1, 'different seeds gave identical outputs');
});

// ---- tools ----------------------------------------------------------------

const weatherSchema = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
const ROUND_TRIP = '<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n'
  + '<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call><|im_end|>\n'
  + '<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n';

test('tool round trip: the tool call turn and its result render the same in every dialect', async () => {
  const want = (await tokenize(srv, ROUND_TRIP)).length;
  const anth = await client.messages.countTokens({
    model: '',
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny' }] },
    ],
  });
  assert.equal(anth.input_tokens, want);
  const chat = await oai.chat.completions.create({
    model: '', max_tokens: 1,
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
    ],
  });
  assert.equal(chat.usage.prompt_tokens, want);
  const resp = await oai.responses.create({
    model: '', max_output_tokens: 1,
    input: [
      { role: 'user', content: 'Weather in Paris?' },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
    ],
  });
  assert.equal(resp.usage.input_tokens, want);
});

test('tool definitions: rendered into the system prompt, same in every dialect', async () => {
  const base = (await client.messages.countTokens({ model: '', messages: [{ role: 'user', content: 'Weather?' }] })).input_tokens;
  const anth = (await client.messages.countTokens({
    model: '', messages: [{ role: 'user', content: 'Weather?' }],
    tools: [{ name: 'get_weather', description: 'Current weather', input_schema: weatherSchema }],
  })).input_tokens;
  assert.ok(anth > base + 100, `tools add their instructions (${base} -> ${anth})`);
  const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Current weather', parameters: weatherSchema } }];
  const chat = await oai.chat.completions.create({ model: '', max_tokens: 1, messages: [{ role: 'user', content: 'Weather?' }], tools, parallel_tool_calls: false });
  assert.equal(chat.usage.prompt_tokens, anth);
  const resp = await oai.responses.create({ model: '', max_output_tokens: 1, input: 'Weather?',
    tools: [{ type: 'function', name: 'get_weather', description: 'Current weather', parameters: weatherSchema }] });
  assert.equal(resp.usage.input_tokens, anth);
  // tool_choice none leaves the tools out
  const none = await oai.chat.completions.create({ model: '', max_tokens: 1, messages: [{ role: 'user', content: 'Weather?' }], tools, tool_choice: 'none' });
  assert.equal(none.usage.prompt_tokens, base);
  // the prompt text itself: the tool JSON as the template's tojson writes it
  const sys = '<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n'
    + '{"type": "function", "function": {"name": "get_weather", "description": "Current weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}\n</tools>';
  const ids = await tokenize(srv, sys);
  assert.ok(ids.length < anth);
});

test('assistant reasoning and text fed back render like the template', async () => {
  const msgs = [
    { role: 'user', content: 'A' },
    { role: 'assistant', content: [{ type: 'thinking', thinking: 'hmm', signature: '' }, { type: 'text', text: 'B' }] },
    { role: 'user', content: 'C' },
  ];
  const c = await client.messages.countTokens({ model: '', messages: msgs });
  // the reasoning of a turn before the last user query is dropped by the template
  const want = '<|im_start|>user\nA<|im_end|>\n<|im_start|>assistant\nB<|im_end|>\n<|im_start|>user\nC<|im_end|>\n<|im_start|>assistant\n<think>\n';
  assert.equal(c.input_tokens, (await tokenize(srv, want)).length);
  const o = await oai.chat.completions.create({ model: '', max_tokens: 1, messages: [
    { role: 'user', content: 'A' }, { role: 'assistant', content: 'B', reasoning_content: 'hmm' }, { role: 'user', content: 'C' }] });
  assert.equal(o.usage.prompt_tokens, c.input_tokens);
});
