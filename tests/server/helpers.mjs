// helpers.mjs — shared by the server tests: the tiny model, starting and
// stopping a real `cwen serve` on a free loopback port, raw HTTP helpers.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';

export const BIN = process.env.CWEN_BIN;
const TMP = process.env.CWEN_TMP || '/tmp';
if (!BIN) throw new Error('CWEN_BIN is not set (run through ctest)');

// One generated model for every test file (mkmodel is deterministic).
export function model() {
  mkdirSync(TMP, { recursive: true });
  const file = path.join(TMP, 'server-tiny-moe.gguf');
  if (!existsSync(file)) {
    const part = `${file}.${process.pid}.part`;
    execFileSync(BIN, ['mkmodel', '--preset', 'tiny-moe', '--seed', '7', '--threads', '2', '-o', part],
      { stdio: 'ignore' });
    execFileSync('mv', [part, file]);
  }
  return file;
}

// Starts `cwen serve` with extra args; resolves once it listens.
export async function startServer(args = []) {
  const proc = spawn(BIN, ['serve', '-m', model(), '--port', '0', '--threads', '2', ...args],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 30000);
    proc.stderr.on('data', (d) => {
      log += d;
      const m = /listening on http:\/\/[^:]+:(\d+)/.exec(log);
      if (m && /cwen serve: ready: /.test(log)) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`server exited ${code}:\n${log}`)); });
  });
  proc.removeAllListeners('exit');
  const srv = {
    proc, port, url: `http://127.0.0.1:${port}`,
    get log() { return log; },
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode !== null) return proc.exitCode;
      const done = new Promise((r) => proc.on('exit', (code) => r(code)));
      proc.kill(signal);
      return done;
    },
    async waitLog(re, ms = 10000) {
      const t0 = Date.now();
      while (!re.test(log)) {
        if (Date.now() - t0 > ms) throw new Error(`log never matched ${re}:\n${log}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
  };
  proc.stderr.on('data', () => {}); // keep draining
  return srv;
}

// POSTs JSON (or a raw string) and returns {status, body (parsed or text), headers}.
export async function post(srv, route, body, headers = {}) {
  const res = await fetch(srv.url + route, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed = text;
  try { parsed = JSON.parse(text); } catch { /* stays text */ }
  return { status: res.status, body: parsed, headers: res.headers };
}

// Parses an SSE body into [{event, data}].
export function parseSSE(text) {
  return text.split('\n\n').filter((b) => b.trim()).map((block) => {
    let event = null; let data = '';
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('data: ')) data += line.slice(6);
    }
    return { event, data: data === '[DONE]' ? data : JSON.parse(data) };
  });
}

// The native tokenization of a text (special tokens parsed), via /cwen/v1/generate.
export async function tokenize(srv, text) {
  const r = await post(srv, '/cwen/v1/generate', { text, max_tokens: 1, temperature: 0 });
  if (r.status !== 200) throw new Error(JSON.stringify(r.body));
  return r.body.prompt_tokens;
}

// Greedy continuation of a raw prompt: {tokens, text}.
export async function greedy(srv, text, max_tokens, extra = {}) {
  const r = await post(srv, '/cwen/v1/generate', { text, max_tokens, temperature: 0, ...extra });
  if (r.status !== 200) throw new Error(JSON.stringify(r.body));
  return r.body;
}

// Ids of the end-of-generation tokens, banned to make generations run to max_tokens.
export const EOG_BAN = { 151643: -100, 151645: -100, 151662: -100, 151663: -100, 151664: -100 };
