// openai.test.mjs — the OpenAI dialect through the official `openai` client:
// models, chat completions (plain, streamed, reasoning split, thinking off,
// logprobs, seeds, stop strings), text completions and the Responses API.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, tokenize, greedy, post, parseSSE, EOG_BAN } from './helpers.mjs';

let srv, client;
const user = (content) => [{ role: 'user', content }];
const RAW = (q) => `<|im_start|>user\n${q}<|im_end|>\n<|im_start|>assistant\n<think>\n`;

before(async () => {
  srv = await startServer(['--ctx', '1024']);
  client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'unused', maxRetries: 0 });
});
after(async () => { assert.equal(await srv.stop(), 0); });

test('models lists the served file, and its name is accepted', async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  assert.deepEqual(ids, ['server-tiny-moe.gguf']);
  for (const model of ['server-tiny-moe.gguf', 'server-tiny-moe', '']) {
    const r = await client.chat.completions.create({ model, messages: user('hi'), max_tokens: 1 });
    assert.equal(r.choices.length, 1);
  }
});

test('chat: reasoning goes to reasoning_content, usage matches the tokenizer', async () => {
  const r = await client.chat.completions.create({
    model: '', messages: user('Hello there'), max_tokens: 5, seed: 11, logit_bias: EOG_BAN,
  });
  const ids = await tokenize(srv, RAW('Hello there'));
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.usage.prompt_tokens, ids.length);
  assert.equal(r.usage.completion_tokens, 5);
  assert.equal(r.usage.total_tokens, ids.length + 5);
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  const m = r.choices[0].message;
  assert.equal(m.role, 'assistant');
  // thinking is on by default and the reply never closed </think>: all reasoning
  assert.ok(m.reasoning_content.length > 0);
  assert.equal(m.content, '');
  assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 5);
  // the reasoning is the text the raw prompt gives with the same seed and sampling
  const raw = await post(srv, '/cwen/v1/generate', { text: RAW('Hello there'), max_tokens: 5, seed: 11, logit_bias: EOG_BAN });
  assert.equal(raw.status, 200);
  assert.equal(m.reasoning_content, raw.body.text.trim());
});

test('chat: the same seed reproduces, temperature 0 is greedy', async () => {
  const req = { model: '', messages: user('Count to ten'), max_tokens: 6, seed: 1234, temperature: 0.9, logit_bias: EOG_BAN };
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  assert.equal(a.choices[0].message.reasoning_content, b.choices[0].message.reasoning_content);
  const g1 = await client.chat.completions.create({ ...req, temperature: 0, seed: 1 });
  const g2 = await client.chat.completions.create({ ...req, temperature: 0, seed: 2 });
  assert.equal(g1.choices[0].message.reasoning_content, g2.choices[0].message.reasoning_content);
  const nat = await greedy(srv, RAW('Count to ten'), 6);
  assert.equal(g1.choices[0].message.reasoning_content.trim(), nat.text.trim());
});

test('chat: thinking off (chat_template_kwargs, reasoning_effort none) puts everything in content', async () => {
  for (const extra of [{ chat_template_kwargs: { enable_thinking: false } }, { reasoning_effort: 'none' }]) {
    const r = await client.chat.completions.create({
      model: '', messages: user('Hi'), max_tokens: 4, temperature: 0, logit_bias: EOG_BAN, ...extra,
    });
    const m = r.choices[0].message;
    assert.equal(m.reasoning_content, undefined);
    assert.ok(m.content.length > 0);
    assert.equal(r.usage.completion_tokens_details.reasoning_tokens, 0);
    const ids = await tokenize(srv, '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n');
    assert.equal(r.usage.prompt_tokens, ids.length);
  }
});

test('chat stream: role chunk, reasoning deltas, finish chunk, usage chunk, [DONE]', async () => {
  const req = { model: '', messages: user('Stream please'), max_tokens: 5, temperature: 0, logit_bias: EOG_BAN };
  const plain = await client.chat.completions.create(req);
  const stream = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const reasoning = chunks.map((c) => c.choices[0]?.delta?.reasoning_content ?? '').join('');
  const content = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  assert.equal(reasoning, plain.choices[0].message.reasoning_content);
  assert.equal(content, '');
  const fin = chunks.filter((c) => c.choices[0]?.finish_reason);
  assert.equal(fin.length, 1);
  assert.equal(fin[0].choices[0].finish_reason, 'length');
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.deepEqual(last.usage, plain.usage);
  // raw SSE ends with [DONE]
  const raw = await fetch(`${srv.url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ ...req, stream: true }) });
  assert.equal(raw.headers.get('content-type'), 'text/event-stream');
  const ev = parseSSE(await raw.text());
  assert.equal(ev.at(-1).data, '[DONE]');
  assert.ok(!ev.slice(0, -1).some((e) => e.data.usage), 'no usage chunk unless asked');
});

test('chat: logprobs and top_logprobs', async () => {
  const r = await client.chat.completions.create({
    model: '', messages: user('Hi'), max_tokens: 3, temperature: 0, logprobs: true, top_logprobs: 3, logit_bias: EOG_BAN,
  });
  const lp = r.choices[0].logprobs.content;
  assert.equal(lp.length, 3);
  for (const t of lp) {
    assert.ok(t.logprob <= 0);
    assert.equal(t.top_logprobs.length, 3);
    // greedy: the chosen token is the most likely one
    assert.ok(t.logprob <= t.top_logprobs[0].logprob);
    assert.ok(t.top_logprobs[1].logprob <= t.top_logprobs[0].logprob);
    assert.ok(t.top_logprobs[2].logprob <= t.top_logprobs[1].logprob);
    assert.deepEqual(Buffer.from(t.bytes).length > 0, true);
  }
});

test('stop strings are never emitted, even across tokens', async () => {
  const prompt = 'The quick brown fox';
  const full = await greedy(srv, prompt, 12, { logit_bias: EOG_BAN, logprobs: true });
  // a stop string straddling a token boundary: 2 bytes on each side, valid UTF-8
  const bufs = full.logprobs.map((t) => Buffer.from(t.bytes));
  const all = Buffer.concat(bufs);
  let stop = null;
  for (let i = 1, p = bufs[0].length; i < bufs.length && !stop; p += bufs[i].length, i++) {
    if (p < 2 || p + 2 > all.length) continue;
    const cand = all.subarray(p - 2, p + 2);
    const s = cand.toString('utf8');
    if (Buffer.from(s).equals(cand) && !s.includes('\ufffd')) stop = s;
  }
  assert.ok(stop, `no stop string candidate in ${JSON.stringify(full.text)}`);
  const text = full.text;
  const r = await client.completions.create({ model: '', prompt, max_tokens: 12, temperature: 0, stop: [stop], logit_bias: EOG_BAN });
  assert.equal(r.choices[0].text, text.slice(0, text.indexOf(stop)));
  assert.equal(r.choices[0].finish_reason, 'stop');
  const s = await client.completions.create({ model: '', prompt, max_tokens: 12, temperature: 0, stop, stream: true, logit_bias: EOG_BAN });
  let streamed = '';
  for await (const c of s) streamed += c.choices[0]?.text ?? '';
  assert.equal(streamed, r.choices[0].text);
  const nat = await greedy(srv, prompt, 12, { logit_bias: EOG_BAN, stop: [stop] });
  assert.equal(nat.text, r.choices[0].text);
  assert.equal(nat.stop_string, stop);
});

test('completions: text, token-id prompts, logprobs, usage chunk', async () => {
  const ids = await tokenize(srv, 'Once upon a time');
  const a = await client.completions.create({ model: '', prompt: 'Once upon a time', max_tokens: 4, temperature: 0, logprobs: 2, logit_bias: EOG_BAN });
  const b = await client.completions.create({ model: '', prompt: ids, max_tokens: 4, temperature: 0, logit_bias: EOG_BAN });
  assert.equal(a.object, 'text_completion');
  assert.equal(a.choices[0].text, b.choices[0].text);
  assert.equal(a.usage.prompt_tokens, ids.length);
  assert.equal(a.usage.completion_tokens, 4);
  assert.equal(a.choices[0].logprobs.tokens.length, 4);
  assert.equal(Object.keys(a.choices[0].logprobs.top_logprobs[0]).length, 2);
  const nat = await greedy(srv, 'Once upon a time', 4, {});
  assert.equal(nat.prompt_tokens.length, ids.length);
  const s = await client.completions.create({ model: '', prompt: 'Once upon a time', max_tokens: 4, temperature: 0, stream: true, stream_options: { include_usage: true }, logit_bias: EOG_BAN });
  let text = ''; let usage;
  for await (const c of s) { text += c.choices[0]?.text ?? ''; if (c.usage) usage = c.usage; }
  assert.equal(text, a.choices[0].text);
  assert.equal(usage.completion_tokens, 4);
  const lp = await client.completions.create({ model: '', prompt: 'Once upon a time', max_tokens: 4, temperature: 0, stream: true, logprobs: 1, logit_bias: EOG_BAN });
  const streamed = [];
  for await (const c of lp) streamed.push(...(c.choices[0]?.logprobs?.tokens ?? []));
  assert.deepEqual(streamed, a.choices[0].logprobs.tokens);
});

test('responses: reasoning item then output, usage; the stream event sequence', async () => {
  const req = { model: '', input: 'Tell me', max_output_tokens: 4, temperature: 0 };
  const r = await client.responses.create(req);
  assert.equal(r.object, 'response');
  assert.equal(r.output[0].type, 'reasoning');
  assert.ok(r.output[0].content[0].text.length > 0);
  assert.equal(r.usage.input_tokens, (await tokenize(srv, RAW('Tell me'))).length);
  assert.equal(r.usage.output_tokens_details.reasoning_tokens, r.usage.output_tokens);
  const events = [];
  for await (const e of await client.responses.create({ ...req, stream: true })) events.push(e);
  const types = events.map((e) => e.type);
  assert.equal(types[0], 'response.created');
  assert.equal(types[1], 'response.in_progress');
  assert.equal(types[2], 'response.output_item.added');
  assert.equal(events[2].item.type, 'reasoning');
  assert.ok(types.includes('response.reasoning_text.delta'));
  assert.ok(['response.completed', 'response.incomplete'].includes(types.at(-1)));
  events.forEach((e, i) => assert.equal(e.sequence_number, i));
  const deltas = events.filter((e) => e.type === 'response.reasoning_text.delta').map((e) => e.delta).join('');
  assert.equal(deltas, r.output[0].content[0].text);
  assert.deepEqual(events.at(-1).response.usage, r.usage);
  // thinking off: a message item with output_text, parts added and done
  const off = [];
  for await (const e of await client.responses.create({ ...req, reasoning: { effort: 'none' }, stream: true, logit_bias: EOG_BAN })) off.push(e);
  const t = off.map((e) => e.type);
  for (const want of ['response.output_item.added', 'response.content_part.added', 'response.output_text.delta',
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done']) {
    assert.ok(t.includes(want), want);
  }
  assert.equal(off.at(-1).response.output[0].type, 'message');
  assert.equal(off.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join(''),
    off.at(-1).response.output[0].content[0].text);
});
