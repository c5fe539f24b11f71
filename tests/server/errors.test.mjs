// errors.test.mjs — every error in its dialect's shape and status: bad JSON,
// wrong types, missing fields, unknown model, context overflow, body over
// the 100 MB cap, unsupported values refused by name, unknown routes, auth.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { startServer, post } from './helpers.mjs';

let srv;
before(async () => { srv = await startServer(['--ctx', '64']); });
after(async () => { assert.equal(await srv.stop(), 0); });

const msgs = [{ role: 'user', content: 'hi' }];
function isOpenAIError(r, status, param) {
  assert.equal(r.status, status, JSON.stringify(r.body));
  assert.equal(typeof r.body.error.message, 'string');
  assert.equal(typeof r.body.error.type, 'string');
  assert.ok('param' in r.body.error && 'code' in r.body.error);
  if (param !== undefined) assert.equal(r.body.error.param, param);
}
function isAnthropicError(r, status, type) {
  assert.equal(r.status, status, JSON.stringify(r.body));
  assert.equal(r.body.type, 'error');
  assert.equal(r.body.error.type, type);
  assert.equal(typeof r.body.error.message, 'string');
}

test('bad JSON and non-object bodies', async () => {
  for (const route of ['/v1/chat/completions', '/v1/completions', '/v1/responses', '/cwen/v1/generate']) {
    isOpenAIError(await post(srv, route, '{"messages": ['), 400);
    isOpenAIError(await post(srv, route, '[1,2]'), 400);
  }
  isAnthropicError(await post(srv, '/v1/messages', '{nope'), 400, 'invalid_request_error');
  isAnthropicError(await post(srv, '/v1/messages/count_tokens', ''), 400, 'invalid_request_error');
});

test('wrong types and out-of-range values name the field', async () => {
  const cases = [
    [{ messages: msgs, temperature: 'hot' }, 'temperature'],
    [{ messages: msgs, max_tokens: 1.5 }, 'max_tokens'],
    [{ messages: msgs, top_p: 2 }, 'top_p'],
    [{ messages: msgs, stream: 'yes' }, 'stream'],
    [{ messages: msgs, stop: [1] }, 'stop'],
    [{ messages: msgs, logit_bias: { abc: 1 } }, 'logit_bias'],
    [{ messages: 'hi' }, 'messages'],
    [{ messages: [{ role: 'wizard', content: 'x' }] }, 'messages'],
    [{ messages: msgs, top_logprobs: 50, logprobs: true }, 'top_logprobs'],
  ];
  for (const [body, param] of cases) isOpenAIError(await post(srv, '/v1/chat/completions', body), 400, param);
  const a = await post(srv, '/v1/messages', { max_tokens: 'many', messages: msgs });
  isAnthropicError(a, 400, 'invalid_request_error');
  assert.match(a.body.error.message, /max_tokens/);
});

test('missing fields', async () => {
  isOpenAIError(await post(srv, '/v1/chat/completions', {}), 400, 'messages');
  isOpenAIError(await post(srv, '/v1/completions', { max_tokens: 1 }), 400, 'prompt');
  isOpenAIError(await post(srv, '/v1/responses', {}), 400, 'input');
  isOpenAIError(await post(srv, '/cwen/v1/generate', {}), 400, 'tokens');
  const a = await post(srv, '/v1/messages', { messages: msgs });
  isAnthropicError(a, 400, 'invalid_request_error');
  assert.match(a.body.error.message, /max_tokens/);
  isAnthropicError(await post(srv, '/v1/messages', { max_tokens: 1 }), 400, 'invalid_request_error');
});

test('unknown model: 400 naming the served ones, in both dialects and the official clients', async () => {
  const r = await post(srv, '/v1/chat/completions', { model: 'gpt-4o', messages: msgs });
  isOpenAIError(r, 400, 'model');
  assert.match(r.body.error.message, /gpt-4o/);
  assert.match(r.body.error.message, /server-tiny-moe\.gguf/);
  // the file's name is the served name here (no known checkpoint): said once
  assert.equal(r.body.error.message.split('server-tiny-moe.gguf').length, 2);
  const oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
  await assert.rejects(oai.chat.completions.create({ model: 'gpt-4o', messages: msgs }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /server-tiny-moe/.test(e.message));
  const ant = new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0 });
  await assert.rejects(ant.messages.create({ model: 'claude-opus-4', max_tokens: 1, messages: msgs }),
    (e) => e instanceof Anthropic.BadRequestError && e.error.error.type === 'invalid_request_error');
});

test('context overflow is a 400 in each dialect', async () => {
  const r = await post(srv, '/v1/chat/completions', { messages: msgs, max_tokens: 100 });
  isOpenAIError(r, 400, 'max_tokens');
  assert.equal(r.body.error.code, 'context_length_exceeded');
  const long = 'word '.repeat(200);
  isOpenAIError(await post(srv, '/v1/completions', { prompt: long }), 400);
  isAnthropicError(await post(srv, '/v1/messages', { max_tokens: 60, messages: msgs }), 400, 'invalid_request_error');
  isOpenAIError(await post(srv, '/cwen/v1/generate', { text: long, max_tokens: 1 }), 400);
});

test('unsupported parameter values are refused by name', async () => {
  const cases = [
    ['/v1/chat/completions', { messages: msgs, n: 2 }, 'n'],
    ['/v1/chat/completions', { messages: msgs, tool_choice: 'required' }, 'tool_choice'],
    ['/v1/chat/completions', { messages: msgs, response_format: { type: 'json_schema', json_schema: {} } }, 'response_format'],
    ['/v1/chat/completions', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, 'messages'],
    ['/v1/chat/completions', { messages: msgs, audio: { voice: 'x' } }, 'audio'],
    ['/v1/completions', { prompt: 'x', best_of: 3 }, 'best_of'],
    ['/v1/completions', { prompt: 'x', echo: true }, 'echo'],
    ['/v1/completions', { prompt: 'x', suffix: 'y' }, 'suffix'],
    ['/v1/responses', { input: 'x', previous_response_id: 'resp_1' }, 'previous_response_id'],
    ['/v1/responses', { input: 'x', text: { format: { type: 'json_object' } } }, 'text.format'],
  ];
  for (const [route, body, param] of cases) {
    const r = await post(srv, route, body);
    isOpenAIError(r, 400, param);
    assert.ok(r.body.error.message.includes(param.split('.')[0]), r.body.error.message);
  }
  const n = await post(srv, '/v1/chat/completions', { messages: msgs, n: 2 });
  assert.match(n.body.error.message, /must be 1/);
  for (const body of [
    { max_tokens: 1, messages: msgs, tool_choice: { type: 'any' } },
    { max_tokens: 1, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] },
    { max_tokens: 1, messages: msgs, thinking: { type: 'sometimes' } },
    { max_tokens: 1, messages: msgs, tools: [{ type: 'web_search_20250305', name: 'web_search' }] },
  ]) isAnthropicError(await post(srv, '/v1/messages', body), 400, 'invalid_request_error');
});

test('body over the 100 MB cap: 413', async () => {
  const big = JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(101 * 1024 * 1024) }] });
  const r = await post(srv, '/v1/chat/completions', big);
  isOpenAIError(r, 413);
  const a = await post(srv, '/v1/messages', big);
  isAnthropicError(a, 413, 'request_too_large');
  // the server is still fine
  assert.equal((await fetch(`${srv.url}/health`)).status, 200);
});

test('unknown routes and methods', async () => {
  isOpenAIError(await post(srv, '/v1/embeddings', { input: 'x' }), 404);
  const g = await fetch(`${srv.url}/v1/chat/completions`);
  assert.equal(g.status, 405);
  const h = await (await fetch(`${srv.url}/health`)).json();
  assert.equal(h.status, 'ready');
  assert.equal(h.model, 'server-tiny-moe.gguf');
  assert.equal(h.n_ctx, 64);
});

test('auth: Bearer and x-api-key, 401 in each dialect, /health open', async () => {
  const s = await startServer(['--api-key', 'sekret-key', '--ctx', '64']);
  try {
    isOpenAIError(await post(s, '/v1/chat/completions', { messages: msgs, max_tokens: 1 }), 401);
    isOpenAIError(await post(s, '/v1/chat/completions', { messages: msgs, max_tokens: 1 }, { authorization: 'Bearer sekret-kez' }), 401);
    isOpenAIError(await post(s, '/v1/chat/completions', { messages: msgs, max_tokens: 1 }, { authorization: 'Bearer sekret-key-longer' }), 401);
    isAnthropicError(await post(s, '/v1/messages', { messages: msgs, max_tokens: 1 }), 401, 'authentication_error');
    assert.equal((await post(s, '/v1/chat/completions', { messages: msgs, max_tokens: 1 }, { authorization: 'Bearer sekret-key' })).status, 200);
    assert.equal((await post(s, '/v1/messages', { messages: msgs, max_tokens: 1 }, { 'x-api-key': 'sekret-key' })).status, 200);
    assert.equal((await fetch(`${s.url}/health`)).status, 200);
    const models = await fetch(`${s.url}/v1/models`);
    assert.equal(models.status, 401);
    const oai = new OpenAI({ baseURL: `${s.url}/v1`, apiKey: 'sekret-key', maxRetries: 0 });
    assert.equal((await oai.models.list()).data.length, 1);
    const ant = new Anthropic({ baseURL: s.url, apiKey: 'sekret-key', maxRetries: 0 });
    assert.equal((await ant.messages.countTokens({ model: '', messages: msgs })).input_tokens > 0, true);
    const bad = new Anthropic({ baseURL: s.url, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.messages.countTokens({ model: '', messages: msgs }), (e) => e.status === 401);
  } finally {
    assert.equal(await s.stop(), 0);
  }
});

test('a non-loopback bind without a key warns', async () => {
  const s = await startServer(['--host', '0.0.0.0']);
  try {
    assert.match(s.log, /warning: listening on 0\.0\.0\.0 without --api-key/);
  } finally {
    await s.stop();
  }
});
