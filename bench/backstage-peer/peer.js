'use strict';
// Backstage's own scheduler (DefaultSchedulerService of @backstage/backend-defaults) driven through
// the scenarios of bench/engine_bench, on the PostgreSQL server in --url (default:
// STAGEHAND_TEST_POSTGRES_URL), or on a MySQL or MariaDB server (through mysql2, as Backstage's
// `client: mysql2`) when --url is a mysql:// URL. Prints one JSON document
// with the same keys as engine_bench's multi-process report, so bench/report.py can set them side
// by side. Each scenario uses a fresh database, dropped at the end.
//
//   node peer.js [--url=postgresql://...] --modules=DIR [--scenarios=a,b,...] [--smoke] [--out=FILE]
//   node peer.js [--url=...] --modules=DIR --migrate-check=DATABASE [--schema=SCHEMA]
//
// --modules is the node_modules folder that `npm ci` filled from bench/backstage-peer/package.json
// (bench/backstage-peer/install.sh installs it into a cache folder). Scenarios: trigger, across, cancel, cron,
// interval, idle, throughput, saturation, kill. Multi-process scenarios fork this file in worker
// mode (--worker=KIND); timestamps are CLOCK_MONOTONIC nanoseconds (process.hrtime), comparable
// across processes, and wall-clock milliseconds for cron slots.
//
// --migrate-check runs Backstage's own migrator instead, as a Backstage backend does when it starts
// a plugin's scheduler, on an existing plugin DATABASE (in SCHEMA for pluginDivisionMode schema;
// on MySQL or MariaDB, through mysql2, when --url is a mysql:// URL),
// and prints what knex saw before and after as JSON: {"before": {...}, "after": {...}, "error":
// null or the migrator's error}, each side with knex's completed and pending migrations and the
// rows of its two bookkeeping tables. Exits 1 when the migrator fails. The database is not dropped.
//
//   node peer.js [--url=...] --modules=DIR --serve-tasks=FILE.json
//
// --serve-tasks makes this process one Backstage worker of a mixed fleet (tests/system/
// operator_controls.py): it starts Backstage's scheduler for the plugin `plugin` on the existing
// database `database` and schedules each of `tasks`, then stays up until SIGTERM (or SIGINT), when
// it runs the scheduler's shutdown hooks and exits 0. FILE holds
//   {"plugin": ID, "database": NAME, "events": PATH, "host": NAME, "ready": PATH,
//    "tasks": [{"id": ID, "frequency": {...}, "timeout": {...}, "workMs": N, "fail": BOOL}]}
// Each run of a task appends {"host":…,"task":…,"event":"start","t":<wall ms>} to `events` when it
// begins and an "end" line (with "aborted": true when its abort signal fired) when it ends, each
// with one O_APPEND write, then throws when `fail` is set. `ready` is written (by rename) once every
// task is scheduled.

const path = require('node:path');
const fs = require('node:fs');
const { fork } = require('node:child_process');
const { createRequire } = require('node:module');

const kPluginId = 'benchpeer';

function parseArgs(argv) {
  const args = {};
  for (const arg of argv) {
    const match = /^--([a-z_-]+)(?:=(.*))?$/.exec(arg);
    if (!match) throw new Error(`unknown argument ${arg}`);
    args[match[1].replaceAll('-', '_')] = match[2] === undefined ? true : match[2];
  }
  return args;
}

const args = parseArgs(process.argv.slice(2));
args.url ??= process.env.STAGEHAND_TEST_POSTGRES_URL;
if (!args.url) throw new Error('--url (or STAGEHAND_TEST_POSTGRES_URL) is required');
if (!args.modules) throw new Error('--modules is required');
const load = createRequire(path.join(path.resolve(args.modules), 'peer-anchor.js'));
const { DefaultSchedulerService } = load('@backstage/backend-defaults/scheduler');
const knexFactory = load('knex');
const pg = load('pg');

const nowNs = () => process.hrtime.bigint();
const nsToMs = (ns) => Number(ns) / 1e6;
const wallMs = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function databaseUrl(url, database) {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

const onMySql = args.url.startsWith('mysql://');

async function adminQuery(sql, params) {
  if (onMySql) {
    const connection = await load('mysql2/promise').createConnection(args.url);
    try {
      const [rows] = await connection.query(sql, params);
      return { rows };
    } finally {
      await connection.end();
    }
  }
  const client = new pg.Client({ connectionString: args.url });
  await client.connect();
  try {
    return await client.query(sql, params);
  } finally {
    await client.end();
  }
}

const quoteName = (name) => (onMySql ? `\`${name}\`` : `"${name}"`);

let databaseCounter = 0;
async function createDatabase() {
  const name = `backstage_plugin_${kPluginId}_${process.pid}_${databaseCounter++}`;
  await adminQuery(`CREATE DATABASE ${quoteName(name)}`);
  return name;
}

async function dropDatabase(name) {
  await adminQuery(`DROP DATABASE IF EXISTS ${quoteName(name)}${onMySql ? '' : ' WITH (FORCE)'}`);
}

// Statements run so far: on PostgreSQL, in `database` (pg_stat_statements); on MySQL, by the whole
// server (its Questions counter; the bench's throwaway server runs nothing but the scenario), less
// the reads of the counter itself (one connection and one statement each).
let counterReads = 0;
async function statementCalls(database) {
  if (onMySql) {
    const result = await adminQuery(
      "SELECT VARIABLE_VALUE AS calls FROM information_schema.GLOBAL_STATUS " +
        "WHERE VARIABLE_NAME = 'QUESTIONS'",
    );
    counterReads += 1;
    return Number(result.rows[0].calls) - counterReads;
  }
  const result = await adminQuery(
    'SELECT coalesce(sum(calls), 0)::float8 AS calls FROM pg_stat_statements s ' +
      'JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1',
    [database],
  );
  return Number(result.rows[0].calls);
}

// The minimal services DefaultSchedulerService.create needs: a quiet logger, a root lifecycle
// whose shutdown hooks we run ourselves, a router sink, the plugin's metadata, the database (knex
// on pg, as Backstage's DatabaseManager makes it) and no-op metrics.
// knex's settings for `database` on the server of --url: MySQL or MariaDB (mysql2, as Backstage's
// `backend.database.client: mysql2`) for a mysql:// URL, else PostgreSQL.
function knexConfig(database, schema) {
  if (new URL(args.url).protocol === 'mysql:') {
    return { client: 'mysql2', connection: databaseUrl(args.url, database), useNullAsDefault: true };
  }
  return {
    client: 'pg',
    connection: databaseUrl(args.url, database),
    searchPath: schema ? [schema] : undefined,
    useNullAsDefault: true,
  };
}

function makeScheduler(database, schema, pluginId = kPluginId) {
  const knex = knexFactory(knexConfig(database, schema));
  const logger = {
    debug() {},
    info() {},
    warn(message) {
      if (args.verbose) console.error(`peer warn: ${message}`);
    },
    error(message) {
      console.error(`peer error: ${message}`);
    },
    child() {
      return logger;
    },
  };
  const shutdownHooks = [];
  const rootLifecycle = {
    addStartupHook() {},
    addBeforeShutdownHook() {},
    addShutdownHook(hook) {
      shutdownHooks.push(typeof hook === 'function' ? hook : hook.fn);
    },
  };
  const instrument = { add() {}, record() {} };
  const metrics = {
    createCounter: () => instrument,
    createHistogram: () => instrument,
    createGauge: () => instrument,
    createUpDownCounter: () => instrument,
  };
  const scheduler = DefaultSchedulerService.create({
    database: { getClient: async () => knex, migrations: { skip: false } },
    logger,
    rootLifecycle,
    httpRouter: { use() {}, addAuthPolicy() {} },
    pluginMetadata: { getId: () => pluginId },
    metrics,
  });
  async function shutdown() {
    for (const hook of shutdownHooks) await hook();
    await sleep(50);
    await knex.destroy();
  }
  return { scheduler, shutdown };
}

// p50/p99/max of millisecond samples, nearest-rank, plus the samples themselves.
function percentiles(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const at = (q) => {
    const rank = Math.ceil(q * sorted.length);
    return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))];
  };
  const out = { n: sorted.length };
  if (sorted.length > 0) {
    out.p50_ms = at(0.5);
    out.p99_ms = at(0.99);
    out.max_ms = sorted[sorted.length - 1];
  }
  out.samples_ms = values;
  return out;
}

// Runs Backstage's migrations on `database` once, before several workers start on it: Backstage
// migrates without a lock, so workers started at once on a fresh database race (PRODUCT.md's
// "1 in 15 fails to start"). That race is a measured target of its own, not this scenario's.
async function migrate(database) {
  const { scheduler, shutdown } = makeScheduler(database);
  await scheduler.triggerTask('no-such-task').catch(() => {});
  await shutdown();
}

// Resolves waiters when an event with a given key has been seen.
class Events {
  constructor() {
    this.seen = new Map();
    this.waiters = new Map();
  }
  emit(key, value) {
    const list = this.seen.get(key) ?? [];
    list.push(value);
    this.seen.set(key, list);
    const waiters = this.waiters.get(key) ?? [];
    this.waiters.delete(key);
    for (const waiter of waiters) waiter();
  }
  count(key) {
    return (this.seen.get(key) ?? []).length;
  }
  // Resolves with the n-th (1-based) value of `key`.
  async wait(key, n, timeoutMs) {
    const deadline = Date.now() + timeoutMs;
    while (this.count(key) < n) {
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw new Error(`timed out waiting for ${key} #${n}`);
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, remaining);
        const waiter = () => {
          clearTimeout(timer);
          resolve();
        };
        this.waiters.set(key, [...(this.waiters.get(key) ?? []), waiter]);
      });
    }
    return this.seen.get(key)[n - 1];
  }
}

const manual = (id, fn, timeout = { seconds: 60 }) => ({
  id,
  frequency: { trigger: 'manual' },
  timeout,
  fn,
});

// Triggers `id` and returns the monotonic instant just before the accepted call. The previous
// sample's run may still hold the row (it reported its start, not yet its release), and Backstage
// answers 409 until then: such calls are retried and not timed.
async function triggerWhenReleased(trigger, id) {
  for (;;) {
    const before = nowNs();
    try {
      await trigger(id);
      return before;
    } catch (error) {
      if (error?.name !== 'ConflictError') throw error;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

// Backstage's global workers look for work every 5 s each, so one sample takes seconds. Samples
// are taken on `width` tasks at a time (each task has its own worker loop: they are independent).
async function triggerRounds(count, width, trigger, events) {
  const latencies = [];
  for (let done = 0; done < count; done += width) {
    const ids = [];
    for (let i = 0; i < Math.min(width, count - done); ++i) ids.push(`manual-${i}`);
    const expected = ids.map((id) => events.count(`start:${id}`) + 1);
    const triggered = await Promise.all(
      ids.map((id) => triggerWhenReleased(trigger, id)),
    );
    const starts = await Promise.all(
      ids.map((id, i) => events.wait(`start:${id}`, expected[i], 60000)),
    );
    ids.forEach((_, i) => latencies.push(nsToMs(starts[i] - triggered[i])));
  }
  return latencies;
}

async function scenarioTrigger(counts) {
  const database = await createDatabase();
  const { scheduler, shutdown } = makeScheduler(database);
  const events = new Events();
  try {
    for (let i = 0; i < counts.width; ++i) {
      const id = `manual-${i}`;
      await scheduler.scheduleTask(manual(id, async () => events.emit(`start:${id}`, nowNs())));
    }
    const latencies = await triggerRounds(counts.triggers, counts.width, (id) =>
      scheduler.triggerTask(id), events);
    return percentiles(latencies);
  } finally {
    await shutdown();
    await dropDatabase(database);
  }
}

// A worker process of this program: its messages land in `events` as `<event>:<id>` (value: the
// monotonic instant) or `<event>` (value: the message).
function spawnWorker(kind, database, extra, events) {
  const child = fork(
    __filename,
    [`--url=${args.url}`, `--modules=${args.modules}`, `--worker=${kind}`, `--database=${database}`,
      ...Object.entries(extra).map(([k, v]) => `--${k}=${v}`)],
    { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
  );
  child.on('message', (message) => {
    if (message.id !== undefined) events.emit(`${message.event}:${message.id}`, BigInt(message.ns));
    else events.emit(message.event, message);
  });
  child.exited = new Promise((resolve) => child.on('exit', resolve));
  child.on('exit', (code, signal) => {
    if (code !== 0 && signal !== 'SIGKILL') {
      console.error(`peer: worker ${kind} exited with ${code ?? signal}`);
      process.exit(1);
    }
  });
  return child;
}

async function stopWorker(child) {
  if (child.exitCode === null && child.signalCode === null) child.send({ cmd: 'quit' });
  await child.exited;
}

async function acrossProcesses(counts, kind) {
  const database = await createDatabase();
  const events = new Events();
  const a = makeScheduler(database);
  const b = spawnWorker(kind, database, { width: counts.width }, events);
  try {
    await events.wait('ready', 1, 60000);
    if (kind === 'manual') {
      return percentiles(await triggerRounds(counts.across, counts.width, (id) =>
        a.scheduler.triggerTask(id), events));
    }
    const latencies = [];
    for (let done = 0; done < counts.cancels; done += counts.width) {
      const ids = [];
      for (let i = 0; i < Math.min(counts.width, counts.cancels - done); ++i) ids.push(`manual-${i}`);
      await Promise.all(ids.map(async (id) => {
        const n = events.count(`start:${id}`) + 1;
        await triggerWhenReleased((task) => a.scheduler.triggerTask(task), id);
        await events.wait(`start:${id}`, n, 60000);
        const cancelled = nowNs();
        await a.scheduler.cancelTask(id);
        const stopped = await events.wait(`stop:${id}`, n, 60000);
        latencies.push(nsToMs(stopped - cancelled));
      }));
    }
    return percentiles(latencies);
  } finally {
    await stopWorker(b);
    await a.shutdown();
    await dropDatabase(database);
  }
}

// Slots: `seconds` whole seconds from the second after the first whole second following
// registration; lag of each run after its (rounded) second.
async function scenarioCron(seconds) {
  const database = await createDatabase();
  const { scheduler, shutdown } = makeScheduler(database);
  const starts = [];
  try {
    const registered = wallMs();
    await scheduler.scheduleTask({
      id: 'cron',
      frequency: { cron: '* * * * * *' },
      timeout: { seconds: 60 },
      fn: async () => { starts.push(wallMs()); },
    });
    const firstSlot = Math.ceil(registered / 1000) * 1000 + 1000;
    const lastSlot = firstSlot + (seconds - 1) * 1000;
    await sleep(lastSlot + 500 - wallMs());
    const hit = new Set();
    const lags = [];
    for (const start of starts) {
      // A run belongs to the second at or before its start (a run is never early for its slot).
      const slot = Math.floor(start / 1000) * 1000;
      if (slot < firstSlot || slot > lastSlot) continue;
      hit.add(slot);
      lags.push(start - slot);
    }
    return {
      seconds,
      slots: seconds,
      slots_run: hit.size,
      runs_in_window: lags.length,
      start_lag: percentiles(lags),
    };
  } finally {
    await shutdown();
    await dropDatabase(database);
  }
}

async function scenarioInterval(seconds) {
  const database = await createDatabase();
  const { scheduler, shutdown } = makeScheduler(database);
  const starts = [];
  try {
    await scheduler.scheduleTask({
      id: 'interval',
      frequency: { seconds: 1 },
      timeout: { seconds: 60 },
      fn: async () => { starts.push(nowNs()); },
    });
    await sleep(seconds * 1000);
    const spacing = [];
    for (let i = 1; i < starts.length; ++i) spacing.push(nsToMs(starts[i] - starts[i - 1]));
    return { seconds, runs: starts.length, spacing: percentiles(spacing) };
  } finally {
    await shutdown();
    await dropDatabase(database);
  }
}

// `tasks` idle global tasks (cron once a year) in a worker process: its registration time, then
// statements, CPU and RSS over `seconds` of doing nothing.
async function scenarioIdle(tasks, seconds) {
  const database = await createDatabase();
  const events = new Events();
  const child = spawnWorker('idle', database, { tasks }, events);
  try {
    const ready = await events.wait('ready', 1, 600000);
    await sleep(2000);
    const callsBefore = await statementCalls(database);
    child.send({ cmd: 'measure_begin' });
    await events.wait('measuring', 1, 60000);
    const begin = nowNs();
    await sleep(seconds * 1000);
    child.send({ cmd: 'measure_end' });
    const measured = await events.wait('measured', 1, 60000);
    const idleSeconds = nsToMs(nowNs() - begin) / 1000;
    const callsAfter = await statementCalls(database);
    return {
      tasks,
      registration_ms: ready.registration_ms,
      idle_seconds: idleSeconds,
      statements_per_s: (callsAfter - callsBefore) / idleSeconds,
      cpu_ms_per_s: measured.cpu_ms / idleSeconds,
      rss_mb: measured.rss_mb,
    };
  } finally {
    await stopWorker(child);
    await dropDatabase(database);
  }
}

// `processes` workers each register the same `tasks` global tasks every `cadenceMs`; completed runs
// per second over `seconds` once all are registered, and overlapping runs of one task across all.
async function scenarioThroughput(processes, tasks, cadenceMs, seconds) {
  const database = await createDatabase();
  const events = new Events();
  const children = [];
  try {
    await migrate(database);
    for (let i = 0; i < processes; ++i) {
      children.push(spawnWorker('throughput', database, { tasks, cadence: cadenceMs }, events));
    }
    await events.wait('ready', processes, 600000);
    const begin = nowNs();
    await sleep(seconds * 1000);
    const end = nowNs();
    for (const child of children) child.send({ cmd: 'report' });
    const reports = [];
    for (let i = 1; i <= processes; ++i) reports.push(await events.wait('runs', i, 60000));
    return summariseRuns(reports.map((r) => r.runs), begin, end, processes, tasks, cadenceMs);
  } finally {
    for (const child of children) await stopWorker(child);
    await dropDatabase(database);
  }
}

// `runs`: per process, [taskIndex, startNs, endNs] triples flattened (as strings: BigInt over IPC).
function summariseRuns(runs, begin, end, processes, tasks, cadenceMs) {
  const byTask = new Map();
  let completed = 0;
  const perProcess = [];
  for (const list of runs) {
    let mine = 0;
    for (let i = 0; i < list.length; i += 3) {
      const task = list[i];
      const start = BigInt(list[i + 1]);
      const stop = BigInt(list[i + 2]);
      if (!byTask.has(task)) byTask.set(task, []);
      byTask.get(task).push([start, stop]);
      if (stop >= begin && stop <= end) {
        ++completed;
        ++mine;
      }
    }
    perProcess.push(mine);
  }
  let overlaps = 0;
  for (const intervals of byTask.values()) {
    intervals.sort((x, y) => (x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0));
    for (let i = 1; i < intervals.length; ++i) {
      if (intervals[i][0] < intervals[i - 1][1]) ++overlaps;
    }
  }
  const seconds = nsToMs(end - begin) / 1000;
  return {
    processes,
    tasks,
    cadence_ms: cadenceMs,
    seconds,
    completed_runs: completed,
    runs_per_s: completed / seconds,
    runs_per_process: perProcess,
    overlaps,
  };
}

// Two workers register one global task (every second, `timeoutSeconds` timeout, runs until
// aborted). The one running it is killed with SIGKILL; seconds until the other starts it.
async function scenarioKill(timeoutSeconds, limitSeconds) {
  const database = await createDatabase();
  const events = new Events();
  await migrate(database);
  const children = [0, 1].map((i) =>
    spawnWorker('kill', database, { timeout: timeoutSeconds, index: i }, events));
  try {
    await events.wait('ready', 2, 60000);
    const first = await events.wait('owner', 1, 60000);
    await sleep(1000);
    const victim = children[first.index];
    const killed = nowNs();
    victim.kill('SIGKILL');
    try {
      const next = await events.wait('owner', 2, limitSeconds * 1000);
      return {
        timeout_s: timeoutSeconds,
        takeover_s: nsToMs(BigInt(next.ns) - killed) / 1000,
        taken_over_by_other: next.index !== first.index,
      };
    } catch {
      return { timeout_s: timeoutSeconds, takeover_s: null, limit_s: limitSeconds };
    }
  } finally {
    for (const child of children) await stopWorker(child);
    await dropDatabase(database);
  }
}

// ---------------------------------------------------------------------------------------------
// Worker mode: one Backstage scheduler in this process, commands from the parent over IPC.

async function worker() {
  const kind = args.worker;
  const { scheduler, shutdown } = makeScheduler(args.database);
  const send = (message) => process.send(message);
  const aborts = new Map();
  const runs = [];
  let quitting = false;
  process.on('message', async (message) => {
    if (message.cmd === 'quit') {
      if (quitting) return;
      quitting = true;
      for (const abort of aborts.values()) abort();
      await shutdown();
      process.disconnect();
      process.exit(0);
    } else if (message.cmd === 'measure_begin') {
      worker.cpu = process.cpuUsage();
      send({ event: 'measuring' });
    } else if (message.cmd === 'measure_end') {
      const cpu = process.cpuUsage(worker.cpu);
      send({
        event: 'measured',
        cpu_ms: (cpu.user + cpu.system) / 1000,
        rss_mb: process.memoryUsage().rss / (1024 * 1024),
      });
    } else if (message.cmd === 'report') {
      send({ event: 'runs', runs });
    }
  });

  const blockUntilAbort = (signal) =>
    new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));

  if (kind === 'manual' || kind === 'blocking') {
    for (let i = 0; i < Number(args.width); ++i) {
      const id = `manual-${i}`;
      await scheduler.scheduleTask(manual(id, async (signal) => {
        send({ event: 'start', id, ns: String(nowNs()) });
        if (kind === 'blocking') {
          await blockUntilAbort(signal);
          send({ event: 'stop', id, ns: String(nowNs()) });
        }
      }));
    }
    send({ event: 'ready' });
  } else if (kind === 'idle') {
    const begin = nowNs();
    for (let i = 0; i < Number(args.tasks); ++i) {
      await scheduler.scheduleTask({
        id: `idle-${i}`,
        frequency: { cron: '0 0 1 1 *' },
        timeout: { seconds: 60 },
        fn: async () => {},
      });
    }
    send({ event: 'ready', registration_ms: nsToMs(nowNs() - begin) });
  } else if (kind === 'throughput') {
    for (let i = 0; i < Number(args.tasks); ++i) {
      await scheduler.scheduleTask({
        id: `t-${i}`,
        frequency: { milliseconds: Number(args.cadence) },
        timeout: { seconds: 60 },
        fn: async () => {
          const start = nowNs();
          await null;
          runs.push(i, String(start), String(nowNs()));
        },
      });
    }
    send({ event: 'ready' });
  } else if (kind === 'kill') {
    await scheduler.scheduleTask({
      id: 'victim',
      frequency: { seconds: 1 },
      timeout: { seconds: Number(args.timeout) },
      fn: async (signal) => {
        send({ event: 'owner', index: Number(args.index), ns: String(nowNs()) });
        await blockUntilAbort(signal);
      },
    });
    send({ event: 'ready' });
  } else {
    throw new Error(`unknown worker kind ${kind}`);
  }
}

// ---------------------------------------------------------------------------------------------

// The --migrate-check mode (see the top of this file).
async function migrateCheck(database, schema) {
  const knex = knexFactory(knexConfig(database, schema));
  const tableName = 'backstage_backend_tasks__knex_migrations';
  const directory = path.join(
    path.dirname(load.resolve('@backstage/backend-defaults/package.json')),
    'migrations',
    'scheduler',
  );
  // What knex sees; a failure (such as a migration name it does not know) is part of the report.
  const snapshot = async () => {
    try {
      const [completed, pending] = await knex.migrate.list({ directory, tableName });
      return {
        completed: completed.map((m) => m.name ?? m.file ?? String(m)),
        pending: pending.map((m) => m.file ?? m.name ?? String(m)),
        rows: await knex(tableName).select('id', 'name', 'batch').orderBy('id'),
        lock: await knex(`${tableName}_lock`).select('index', 'is_locked').orderBy('index'),
      };
    } catch (thrown) {
      return { error: String(thrown?.message ?? thrown) };
    }
  };
  try {
    const before = await snapshot();
    // DefaultSchedulerService migrates on its first use of the database.
    const { scheduler, shutdown } = makeScheduler(database, schema);
    let error = null;
    try {
      await scheduler.triggerTask('no-such-task');
    } catch (thrown) {
      if (thrown?.name !== 'NotFoundError') error = String(thrown?.stack ?? thrown);
    }
    await shutdown();
    const after = await snapshot();
    console.log(JSON.stringify({ before, after, error }, null, 2));
    if (error || before.error || after.error) process.exitCode = 1;
  } finally {
    await knex.destroy();
  }
}

async function main() {
  const smoke = Boolean(args.smoke);
  const counts = smoke
    ? { triggers: 1, across: 1, cancels: 1, width: 2, cron: 2, interval: 2, idle: [50],
      idleSeconds: 1, processes: 2, tasks: 20, throughputSeconds: 2 }
    : { triggers: 50, across: 50, cancels: 20, width: 10, cron: 30, interval: 30,
      idle: [1000, 10000], idleSeconds: 60, processes: 4, tasks: 500, throughputSeconds: 30 };
  const all = ['trigger', 'across', 'cancel', 'cron', 'interval', 'idle', 'throughput',
    'saturation', 'kill'];
  const scenarios = new Set(args.scenarios ? args.scenarios.split(',') : all);
  for (const name of scenarios) {
    if (!all.includes(name)) throw new Error(`unknown scenario ${name}`);
  }
  const version = load('@backstage/backend-defaults/package.json').version;
  const results = {
    system: 'backstage',
    backend_defaults_version: version,
    node_version: process.version,
    smoke,
  };
  const run = async (name, key, fn) => {
    if (!scenarios.has(name)) return;
    const begin = Date.now();
    console.error(`peer: ${key}...`);
    results[key] = await fn();
    console.error(`peer: ${key} done in ${((Date.now() - begin) / 1000).toFixed(1)} s`);
  };
  await run('trigger', 'in_process_trigger', () => scenarioTrigger(counts));
  await run('across', 'trigger_across_processes', () => acrossProcesses(counts, 'manual'));
  await run('cancel', 'cancel_across_processes', () => acrossProcesses(counts, 'blocking'));
  await run('cron', 'cron_every_second', () => scenarioCron(counts.cron));
  await run('interval', 'interval_one_second', () => scenarioInterval(counts.interval));
  for (const tasks of counts.idle) {
    await run('idle', `idle_tasks_${tasks}`, () => scenarioIdle(tasks, counts.idleSeconds));
  }
  // MySQL keeps whole seconds, so the finest cadence a task there can keep is a second.
  await run('throughput', 'throughput', () =>
    scenarioThroughput(counts.processes, counts.tasks, onMySql ? 1000 : 100,
      counts.throughputSeconds));
  // The same tasks always due: the scheduler's own claim+run+release limit.
  await run('saturation', 'throughput_saturated', () =>
    scenarioThroughput(counts.processes, counts.tasks, 1, counts.throughputSeconds));
  await run('kill', 'sigkill_takeover', () => scenarioKill(smoke ? 2 : 30, smoke ? 90 : 300));
  const text = JSON.stringify(results, null, 2);
  if (args.out) fs.writeFileSync(args.out, `${text}\n`);
  console.log(text);
}

// The --serve-tasks mode (see the top of this file).
async function serveTasks(file) {
  const spec = JSON.parse(fs.readFileSync(file, 'utf8'));
  const { scheduler, shutdown } = makeScheduler(spec.database, undefined, spec.plugin);
  const record = (task, event, extra) => {
    const line = JSON.stringify({ host: spec.host, task, event, t: wallMs(), ...extra });
    fs.appendFileSync(spec.events, `${line}\n`);
  };
  let stopping = null;
  const stop = () => {
    stopping ??= shutdown().then(
      () => process.exit(0),
      (error) => {
        console.error(`peer: shutdown failed: ${error.stack ?? error}`);
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  for (const task of spec.tasks) {
    await scheduler.scheduleTask({
      id: task.id,
      frequency: task.frequency,
      timeout: task.timeout,
      scope: 'global',
      fn: async (signal) => {
        record(task.id, 'start');
        if (task.workMs > 0) {
          await new Promise((resolve) => {
            const timer = setTimeout(resolve, task.workMs);
            signal.addEventListener('abort', () => {
              clearTimeout(timer);
              resolve();
            }, { once: true });
          });
        }
        record(task.id, 'end', signal.aborted ? { aborted: true } : {});
        if (task.fail) throw new Error(`task ${task.id} fails as told`);
      },
    });
  }
  fs.writeFileSync(`${spec.ready}.tmp`, `${JSON.stringify({ pid: process.pid })}\n`);
  fs.renameSync(`${spec.ready}.tmp`, spec.ready);
  await new Promise(() => {});
}

const mode = () => {
  if (args.worker) return worker();
  if (args.serve_tasks) return serveTasks(args.serve_tasks);
  if (args.migrate_check) return migrateCheck(args.migrate_check, args.schema);
  return main();
};

mode().catch((error) => {
  console.error(`peer: ${error.stack ?? error}`);
  process.exit(1);
});
