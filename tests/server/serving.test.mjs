// serving.test.mjs — the server as a process: a client that disconnects
// mid-stream cancels its generation and the server goes on; concurrent
// clients are answered one after another with the same results as alone; a
// full queue answers 503 (OpenAI) / 529 (Anthropic); SIGTERM ends running
// streams with an error event and the process exits cleanly.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, post, EOG_BAN } from './helpers.mjs';

const msgs = [{ role: 'user', content: 'hi' }];
// A request that runs until cancelled (end-of-generation banned, a big budget).
const LONG = { messages: msgs, max_tokens: 100000, logit_bias: EOG_BAN, stream: true };

// Opens a stream and resolves once the first bytes came; returns {controller, reader, first}.
async function openStream(srv, route, body) {
  const controller = new AbortController();
  const res = await fetch(srv.url + route, { method: 'POST', body: JSON.stringify(body), signal: controller.signal });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  let first = '';
  while (!first.includes('\n\n')) {
    const { value, done } = await reader.read();
    assert.ok(!done);
    first += Buffer.from(value).toString();
  }
  return { controller, reader, res, first };
}

test('a client that disconnects mid-stream cancels its generation; the server goes on', async () => {
  const srv = await startServer(['--ctx', '100100', '--log-level', 'info']);
  try {
    const s = await openStream(srv, '/v1/chat/completions', LONG);
    s.controller.abort();
    await srv.waitLog(/openai\.chat stream .*finish=cancelled \(client disconnected\)/);
    const r = await post(srv, '/v1/chat/completions', { messages: msgs, max_tokens: 2 });
    assert.equal(r.status, 200);
    assert.equal(r.body.usage.completion_tokens <= 2, true);
    // Anthropic too
    const a = await openStream(srv, '/v1/messages', { ...LONG, max_tokens: 100000 });
    a.controller.abort();
    await srv.waitLog(/anthropic\.messages stream .*finish=cancelled \(client disconnected\)/);
  } finally {
    assert.equal(await srv.stop(), 0);
  }
});

test('concurrent clients are answered one after another with their own results', async () => {
  const srv = await startServer(['--ctx', '256']);
  try {
    const oai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const reqs = [1, 2, 3, 4].map((seed) => ({ model: '', messages: [{ role: 'user', content: `q${seed}` }], max_tokens: 4, seed, temperature: 0.8, logit_bias: EOG_BAN }));
    const alone = [];
    for (const r of reqs) alone.push((await oai.chat.completions.create(r)).choices[0].message);
    const together = await Promise.all(reqs.map((r, i) => (i % 2
      ? oai.chat.completions.create(r).then((x) => x.choices[0].message)
      : (async () => {
        const s = await oai.chat.completions.create({ ...r, stream: true });
        let reasoning = '';
        for await (const c of s) reasoning += c.choices[0]?.delta?.reasoning_content ?? '';
        return { reasoning_content: reasoning };
      })())));
    together.forEach((m, i) => assert.equal(m.reasoning_content, alone[i].reasoning_content));
  } finally {
    assert.equal(await srv.stop(), 0);
  }
});

test('a full queue answers 503 (OpenAI) and 529 (Anthropic)', async () => {
  const srv = await startServer(['--ctx', '100100', '--queue', '1']);
  try {
    const running = await openStream(srv, '/v1/chat/completions', LONG);
    // one may wait...
    const waiting = post(srv, '/v1/chat/completions', { messages: msgs, max_tokens: 2 });
    await new Promise((r) => setTimeout(r, 300));
    // ...the next is turned away
    const o = await post(srv, '/v1/chat/completions', { messages: msgs, max_tokens: 2 });
    assert.equal(o.status, 503);
    assert.equal(o.body.error.type, 'server_error');
    const a = await post(srv, '/v1/messages', { messages: msgs, max_tokens: 2 });
    assert.equal(a.status, 529);
    assert.equal(a.body.error.type, 'overloaded_error');
    running.controller.abort();
    const w = await waiting;
    assert.equal(w.status, 200);
    assert.ok(w.body.usage.completion_tokens <= 2);
  } finally {
    assert.equal(await srv.stop(), 0);
  }
});

test('SIGTERM: a running stream ends with an error event, queued requests get 503, exit 0', async () => {
  const srv = await startServer(['--ctx', '100100']);
  const s = await openStream(srv, '/v1/chat/completions', LONG);
  const queued = post(srv, '/v1/messages', { messages: msgs, max_tokens: 2 });
  await new Promise((r) => setTimeout(r, 200));
  const t0 = Date.now();
  const code = await srv.stop('SIGTERM');
  assert.equal(code, 0);
  assert.ok(Date.now() - t0 < 10000);
  let rest = s.first;
  for (;;) {
    const { value, done } = await s.reader.read();
    if (done) break;
    rest += Buffer.from(value).toString();
  }
  assert.match(rest, /"error":\{"message":"generation cancelled: the server is shutting down"/);
  assert.match(rest, /data: \[DONE\]\n\n$/);
  const q = await queued;
  assert.equal(q.status, 503);
  assert.equal(q.body.error.type, 'api_error');
  assert.match(srv.log, /SIGTERM: shutting down/);
  assert.match(srv.log, /stopped/);
});
