// The stagehand dashboard: every plugin's tasks in one live view, steered through the daemon's
// REST API. Plain ES2020, no dependencies and no build step; index.html holds the markup and
// style.css the looks. The server fills in two <meta> tags: the relative URL of the daemon's root
// (the page may live at a sub-path behind a proxy) and the auth mode ("token" or "development").
'use strict';

(() => {
  // ---------------------------------------------------------------- configuration
  const metaContent = (name, fallback) => {
    const node = document.querySelector(`meta[name="${name}"]`);
    const value = node ? node.content.trim() : '';
    // An unfilled placeholder (the file opened as it is stored) falls back to the defaults.
    return !value || value.startsWith('%') ? fallback : value;
  };
  const ROOT = new URL(metaContent('stagehand-root', './'), location.href);
  const AUTH_MODE = metaContent('stagehand-auth', 'unknown'); // token | development | unknown
  // stagehand.dashboard.traceUrl: where a run's trace id links to, '{traceId}' standing for it.
  const TRACE_URL = metaContent('stagehand-trace-url', '');
  const TOKEN_KEY = 'stagehand.token';
  const PLUGINS_KEY = 'stagehand.plugins'; // the plugin ids of the last visit (not a secret)
  const SECOND = 1000;
  const MINUTE = 60 * SECOND;
  const HOUR = 60 * MINUTE;
  const DAY = 24 * HOUR;
  const HISTORY_CONCURRENCY = 4;
  const SAFETY_REFRESH_MS = 45 * SECOND;
  const PAST_FRACTION = 0.7; // share of the timeline before "now"
  const MAX_CACHED_HISTORIES = 3000;
  const UPCOMING_ASKED = 20; // next starts asked of the daemon per task
  const PROBLEM_OUTCOMES = new Set(['failed', 'timed_out', 'lost', 'fenced']);

  // ---------------------------------------------------------------- small helpers
  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;
  const pad2 = (n) => String(n).padStart(2, '0');
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const clamp = (v, lo, hi) => Math.min(hi, Math.max(lo, v));
  const parseTime = (text) => {
    if (!text) return null;
    const ms = Date.parse(text);
    return Number.isNaN(ms) ? null : ms;
  };
  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }
  function setText(node, text) {
    const value = text === undefined || text === null ? '' : String(text);
    if (node.textContent !== value) node.textContent = value;
  }
  function setClass(node, className) {
    if (node.className !== className) node.className = className;
  }
  function plural(n, word) {
    return `${n} ${word}${n === 1 ? '' : 's'}`;
  }
  function listWords(items) {
    if (items.length <= 1) return items.join('');
    return `${items.slice(0, -1).join(', ')} and ${items[items.length - 1]}`;
  }

  // ---------------------------------------------------------------- time formatting
  const VIEWER_ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone || 'your zone';
  const fmtClock = new Intl.DateTimeFormat(undefined, {
    hour: '2-digit', minute: '2-digit', second: '2-digit',
  });
  const fmtHourMinute = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });
  const fmtDayClock = new Intl.DateTimeFormat(undefined, {
    weekday: 'short', day: 'numeric', month: 'short', hour: '2-digit', minute: '2-digit',
  });
  const fmtFull = new Intl.DateTimeFormat(undefined, {
    year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit',
    second: '2-digit', timeZoneName: 'short',
  });
  const fmtInput = (ms) => {
    const d = new Date(ms);
    return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())}T${pad2(d.getHours())}:${pad2(d.getMinutes())}`;
  };
  function sameDay(a, b) {
    const x = new Date(a);
    const y = new Date(b);
    return x.getFullYear() === y.getFullYear() && x.getMonth() === y.getMonth() &&
      x.getDate() === y.getDate();
  }
  // Returns an instant in the viewer's zone: the time alone today, else with its day.
  const absTime = (ms, now) => (sameDay(ms, now) ? fmtClock.format(ms) : fmtDayClock.format(ms));
  const fullTime = (ms) => fmtFull.format(ms);

  // Returns a span for people: "850 ms", "4.2 s", "3 min 12 s", "2 h 5 min", "3 d 4 h".
  function humanSpan(ms) {
    if (ms === null || ms === undefined || !Number.isFinite(ms)) return '';
    ms = Math.max(0, ms);
    if (ms < SECOND) return `${Math.round(ms)} ms`;
    if (ms < 10 * SECOND) return `${(Math.floor(ms / 100) / 10).toFixed(1)} s`;
    const s = Math.floor(ms / SECOND);
    if (s < 60) return `${s} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return s % 60 ? `${m} min ${s % 60} s` : `${m} min`;
    const h = Math.floor(m / 60);
    if (h < 48) return m % 60 ? `${h} h ${m % 60} min` : `${h} h`;
    const d = Math.floor(h / 24);
    return h % 24 ? `${d} d ${h % 24} h` : `${d} d`;
  }
  // Returns a coarse span for relative times: "12 s", "3 min", "5 h 10 min", "3 d".
  function coarseSpan(ms) {
    const s = Math.round(ms / SECOND);
    if (s < 60) return `${s} s`;
    const m = Math.round(ms / MINUTE);
    if (m < 60) return `${m} min`;
    const h = Math.floor(ms / HOUR);
    const rest = Math.round((ms - h * HOUR) / MINUTE);
    if (h < 10) return rest ? `${h} h ${rest} min` : `${h} h`;
    if (h < 48) return `${Math.round(ms / HOUR)} h`;
    return `${Math.round(ms / DAY)} d`;
  }
  function relTime(ms, now) {
    const delta = ms - now;
    if (Math.abs(delta) < 1500) return 'now';
    return delta > 0 ? `in ${coarseSpan(delta)}` : `${coarseSpan(-delta)} ago`;
  }

  // ---------------------------------------------------------------- ISO-8601 durations
  const ISO_DURATION = /^P(?:(\d+(?:\.\d+)?)Y)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)W)?(?:(\d+(?:\.\d+)?)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$/i;
  const ISO_UNITS = [
    ['year', null], ['month', null], ['week', 7 * DAY], ['day', DAY],
    ['hour', HOUR], ['minute', MINUTE], ['second', SECOND],
  ];
  // Returns {parts: [[count, unit]], ms} for an ISO duration ("PT1H30M"), ms null when it has
  // years or months (not a fixed length); null when the text is not one.
  function parseIsoDuration(text) {
    const match = ISO_DURATION.exec(String(text || '').trim());
    if (!match || text.endsWith('T')) return null;
    const parts = [];
    let ms = 0;
    ISO_UNITS.forEach(([unit, unitMs], i) => {
      const value = match[i + 1];
      if (value === undefined) return;
      const count = Number(value);
      parts.push([count, unit]);
      ms = unitMs === null || ms === null ? null : ms + count * unitMs;
    });
    if (parts.length === 0) return null;
    return { parts, ms };
  }
  function durationWords(parsed) {
    const nonZero = parsed.parts.filter(([count]) => count !== 0);
    if (nonZero.length === 1 && nonZero[0][0] === 1) return `every ${nonZero[0][1]}`;
    if (nonZero.length === 0) return 'continuously';
    return `every ${listWords(nonZero.map(([count, unit]) => plural(count, unit)))}`;
  }
  const isoToHuman = (text) => {
    const parsed = parseIsoDuration(text);
    if (!parsed) return text || '';
    return parsed.ms === null ? durationWords(parsed).replace(/^every /, '') : humanSpan(parsed.ms);
  };

  // ---------------------------------------------------------------- cron
  // Parsed as the daemon parses it (npm cron): 5 or 6 fields (seconds first), presets, month and
  // weekday names, lists, ranges and steps; day of week 7 is Sunday.
  const CRON_UNITS = [
    { name: 'second', low: 0, high: 59 },
    { name: 'minute', low: 0, high: 59 },
    { name: 'hour', low: 0, high: 23 },
    { name: 'day of month', low: 1, high: 31 },
    { name: 'month', low: 1, high: 12 },
    { name: 'day of week', low: 0, high: 7 },
  ];
  const CRON_PRESETS = {
    '@yearly': '0 0 0 1 1 *', '@monthly': '0 0 0 1 * *', '@weekly': '0 0 0 * * 0',
    '@daily': '0 0 0 * * *', '@hourly': '0 0 * * * *', '@minutely': '0 * * * * *',
    '@secondly': '* * * * * *', '@weekdays': '0 0 0 * * 1-5', '@weekends': '0 0 0 * * 0,6',
  };
  const CRON_ALIASES = {
    jan: 1, feb: 2, mar: 3, apr: 4, may: 5, jun: 6, jul: 7, aug: 8, sep: 9, oct: 10, nov: 11,
    dec: 12, sun: 0, mon: 1, tue: 2, wed: 3, thu: 4, fri: 5, sat: 6,
  };
  const MONTH_NAMES = ['', 'January', 'February', 'March', 'April', 'May', 'June', 'July',
    'August', 'September', 'October', 'November', 'December'];
  const WEEKDAY_NAMES = ['Sunday', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday',
    'Saturday'];

  // Returns {sec, min, hour, dom, month, dow: sorted value arrays, *Set, domRestricted,
  // dowRestricted} or null when the expression does not parse.
  function parseCron(expression) {
    let text = String(expression).trim().toLowerCase();
    if (CRON_PRESETS[text]) text = CRON_PRESETS[text];
    let bad = false;
    text = text.replace(/[a-z]{1,3}/g, (run) => {
      if (!(run in CRON_ALIASES)) bad = true;
      return String(CRON_ALIASES[run]);
    });
    if (bad) return null;
    const fields = text.split(/\s+/).filter(Boolean);
    if (fields.length === 5) fields.unshift('0');
    if (fields.length !== 6) return null;
    const sets = [];
    for (let i = 0; i < 6; i++) {
      const unit = CRON_UNITS[i];
      const values = new Set();
      for (const rawItem of fields[i].split(',')) {
        if (rawItem.indexOf('*') > 0) return null;
        const item = rawItem.replace('*', `${unit.low}-${unit.high}`);
        const m = /^(\d+)(?:-(\d+))?(?:\/(\d+))?$/.exec(item);
        if (!m) return null;
        const lower = Number(m[1]);
        const upper = m[2] === undefined ? null : Number(m[2]);
        const step = m[3] === undefined ? null : Number(m[3]);
        if (step === 0 || (upper !== null && lower > upper)) return null;
        if (lower < unit.low || lower > unit.high || (upper !== null && upper > unit.high)) return null;
        const last = upper !== null ? upper : (step !== null ? unit.high : lower);
        for (let v = lower; v <= last; v += step || 1) values.add(v);
      }
      sets.push(values);
    }
    if (sets[5].has(7)) {
      sets[5].delete(7);
      sets[5].add(0);
    }
    const sorted = sets.map((s) => [...s].sort((a, b) => a - b));
    return {
      sec: sorted[0], min: sorted[1], hour: sorted[2], dom: sorted[3], month: sorted[4], dow: sorted[5],
      secSet: sets[0], minSet: sets[1], hourSet: sets[2], domSet: sets[3], monthSet: sets[4], dowSet: sets[5],
      domRestricted: sets[3].size !== 31,
      dowRestricted: sets[5].size !== 7,
    };
  }

  // Returns {step, offset} when `values` are offset, offset+step, ... through the whole range
  // (size divisible by step, offset < step), else null.
  function periodic(values, size) {
    if (values.length === size) return { step: 1, offset: 0 };
    if (values.length < 2) return null;
    const step = values[1] - values[0];
    const offset = values[0];
    if (size % step !== 0 || offset >= step || values.length !== size / step) return null;
    for (let i = 1; i < values.length; i++) {
      if (values[i] - values[i - 1] !== step) return null;
    }
    return { step, offset };
  }
  function contiguous(values) {
    if (values.length < 2) return null;
    for (let i = 1; i < values.length; i++) if (values[i] !== values[i - 1] + 1) return null;
    return [values[0], values[values.length - 1]];
  }
  const clockText = (h, m, s) => `${pad2(h)}:${pad2(m)}${s ? `:${pad2(s)}` : ''}`;
  const ordinal = (n) => {
    const tail = n % 100 >= 11 && n % 100 <= 13 ? 'th' : ({ 1: 'st', 2: 'nd', 3: 'rd' }[n % 10] || 'th');
    return `${n}${tail}`;
  };

  // Returns {text, zoneMatters} describing the time of day, or null when words would be wrong.
  function cronTimeWords(c) {
    const allMin = c.min.length === 60;
    const allHour = c.hour.length === 24;
    const oneSec = c.sec.length === 1 ? c.sec[0] : null;
    const secSuffix = oneSec ? `, at second ${oneSec}` : '';
    if (allMin && allHour) {
      if (c.sec.length === 60) return { text: 'every second', zoneMatters: false };
      const p = periodic(c.sec, 60);
      if (p) {
        const from = p.offset ? `, from second ${p.offset}` : '';
        return { text: `every ${p.step} seconds${from}`, zoneMatters: false };
      }
      if (oneSec !== null) return { text: `every minute${secSuffix}`, zoneMatters: false };
      return null;
    }
    if (oneSec === null) return null;
    const minuteMarks = (mins) => listWords(mins.map((m) => `:${pad2(m)}${oneSec ? `:${pad2(oneSec)}` : ''}`));
    if (allHour) {
      const p = periodic(c.min, 60);
      if (p && p.step > 1) {
        if (p.offset === 0) return { text: `every ${p.step} minutes${secSuffix}`, zoneMatters: false };
        if (c.min.length <= 4) return { text: `hourly at ${minuteMarks(c.min)}`, zoneMatters: false };
        return { text: `every ${p.step} minutes from :${pad2(p.offset)}${secSuffix}`, zoneMatters: false };
      }
      if (c.min.length <= 6) return { text: `hourly at ${minuteMarks(c.min)}`, zoneMatters: false };
      return null;
    }
    // The hour is restricted: the zone matters from here on.
    if (c.hour.length * c.min.length <= 6) {
      const times = [];
      for (const h of c.hour) for (const m of c.min) times.push(clockText(h, m, oneSec));
      return { text: `at ${listWords(times)}`, zoneMatters: true };
    }
    const hourPeriod = periodic(c.hour, 24);
    if (hourPeriod && hourPeriod.step > 1 && c.min.length <= 2) {
      const from = hourPeriod.offset ? ` from ${clockText(hourPeriod.offset, c.min[0], oneSec)}` : '';
      return { text: `every ${hourPeriod.step} hours at ${minuteMarks(c.min)}${from}`, zoneMatters: true };
    }
    const hours = c.hour.length === 1 ? [c.hour[0], c.hour[0]] : contiguous(c.hour);
    if (!hours) return null;
    const lastMin = c.min[c.min.length - 1];
    const span = `from ${clockText(hours[0], c.min[0], 0)} to ${clockText(hours[1], lastMin, 0)}`;
    if (allMin) return { text: `every minute${secSuffix} ${span}`, zoneMatters: true };
    const p = periodic(c.min, 60);
    if (p && p.step > 1 && p.offset === 0) {
      return { text: `every ${p.step} minutes${secSuffix} ${span}`, zoneMatters: true };
    }
    if (c.min.length <= 4 && hours[0] !== hours[1]) {
      return { text: `hourly at ${minuteMarks(c.min)} ${span}`, zoneMatters: true };
    }
    return null;
  }

  // Returns the day phrase ("" for every day), or null when words would be wrong.
  function cronDayWords(c) {
    const words = [];
    let weekdays = null;
    if (c.dowRestricted) {
      const range = contiguous(c.dow);
      const mondayFirst = c.dow.slice().sort((a, b) => ((a + 6) % 7) - ((b + 6) % 7));
      if (c.dow.length === 1) weekdays = WEEKDAY_NAMES[c.dow[0]];
      else if (range && c.dow.length >= 3) weekdays = `${WEEKDAY_NAMES[range[0]]} to ${WEEKDAY_NAMES[range[1]]}`;
      else if (c.dow.length <= 4) weekdays = listWords(mondayFirst.map((d) => WEEKDAY_NAMES[d]));
      else return null;
    }
    if (c.domRestricted && !c.dowRestricted && c.dom.length === 1 && c.month.length === 1) {
      return `on ${c.dom[0]} ${MONTH_NAMES[c.month[0]]}`;
    }
    let monthDays = null;
    if (c.domRestricted) {
      const range = contiguous(c.dom);
      if (c.dom.length <= 4) monthDays = `the ${listWords(c.dom.map(ordinal))}`;
      else if (range) monthDays = `the ${ordinal(range[0])} to the ${ordinal(range[1])}`;
      else return null;
    }
    if (weekdays && monthDays) words.push(`on ${monthDays} of the month or on ${weekdays}`);
    else if (weekdays) words.push(`on ${weekdays}`);
    else if (monthDays) words.push(`on ${monthDays} of the month`);
    if (c.month.length !== 12) {
      const range = contiguous(c.month);
      if (c.month.length <= 4) words.push(`in ${listWords(c.month.map((m) => MONTH_NAMES[m]))}`);
      else if (range) words.push(`from ${MONTH_NAMES[range[0]]} to ${MONTH_NAMES[range[1]]}`);
      else return null;
    }
    return words.join(' ');
  }

  const zoneName = (zone) => (zone === 'Etc/UTC' || zone === 'UTC' || zone === 'Etc/GMT' ? 'UTC' : zone);

  function cronWords(c, zone) {
    const time = cronTimeWords(c);
    const days = cronDayWords(c);
    if (!time || days === null) return null;
    const zoneMatters = time.zoneMatters || days !== '';
    const inZone = zoneMatters && zone ? ` in ${zoneName(zone)}` : '';
    return `${time.text}${days ? ` ${days}` : ''}${inZone}`;
  }

  // Returns the typical gap between two fires, for sizing history fetches.
  function cronPeriod(c) {
    if (c.sec.length > 1) return (60 / c.sec.length) * SECOND;
    if (c.min.length > 1) return (60 / c.min.length) * MINUTE;
    if (c.hour.length > 1) return (24 / c.hour.length) * HOUR;
    return DAY;
  }

  // Zone offsets (ms to add to UTC for local wall time) through Intl, one formatter per zone.
  const zoneFormatters = new Map();
  function zoneOffset(zone, ms) {
    let formatter = zoneFormatters.get(zone);
    if (formatter === undefined) {
      try {
        formatter = new Intl.DateTimeFormat('en-US', {
          timeZone: zone, hourCycle: 'h23', year: 'numeric', month: 'numeric', day: 'numeric',
          hour: 'numeric', minute: 'numeric', second: 'numeric',
        });
      } catch (e) {
        formatter = null;
      }
      zoneFormatters.set(zone, formatter);
    }
    if (!formatter) return null;
    const p = {};
    for (const part of formatter.formatToParts(ms)) p[part.type] = part.value;
    const local = Date.UTC(+p.year, +p.month - 1, +p.day, +p.hour % 24, +p.minute, +p.second);
    return local - Math.floor(ms / SECOND) * SECOND;
  }

  function cronDayMatches(c, local) {
    const dom = local.getUTCDate();
    return c.monthSet.has(local.getUTCMonth() + 1) && (
      c.domRestricted && c.dowRestricted ? c.domSet.has(dom) || c.dowSet.has(local.getUTCDay())
        : c.domRestricted ? c.domSet.has(dom)
          : c.dowRestricted ? c.dowSet.has(local.getUTCDay()) : true);
  }
  // Returns whether a local minute in [localStart, localEnd) (wall clock as UTC ms) matches.
  function cronGapMatches(c, localStart, localEnd) {
    for (let at = localStart; at < localEnd; at += MINUTE) {
      const local = new Date(at);
      if (cronDayMatches(c, local) && c.hourSet.has(local.getUTCHours()) && c.minSet.has(local.getUTCMinutes())) return true;
    }
    return false;
  }

  // Returns the fire times of a parsed cron in [from, to], at most `max`, evaluated minute by
  // minute in `zone` (skipping whole hours and days that cannot match). As the daemon does, a
  // time that a spring-forward change skips fires at the change.
  function cronSlots(c, zone, from, to, max) {
    const out = [];
    const tz = zone || VIEWER_ZONE;
    let t = Math.floor(from / MINUTE) * MINUTE;
    let offset = null;
    let offsetAt = -Infinity;
    let offsetUntil = -Infinity;
    let guard = 0;
    while (t <= to && out.length < max && guard++ < 200000) {
      if (t >= offsetUntil) {
        const next = zoneOffset(tz, t);
        if (next === null) return out;
        if (offset !== null && next > offset) {
          // Spring forward somewhere in (offsetAt, t]: find the minute it happened.
          let lo = Math.floor(offsetAt / MINUTE) * MINUTE;
          let hi = t;
          while (hi - lo > MINUTE) {
            const mid = lo + Math.floor((hi - lo) / 2 / MINUTE) * MINUTE;
            if (zoneOffset(tz, mid) === offset) lo = mid;
            else hi = mid;
          }
          if (hi >= from && hi <= to && cronGapMatches(c, hi + offset, hi + next)) out.push(hi);
        }
        offset = next;
        offsetAt = t;
        offsetUntil = Math.floor(t / (15 * MINUTE)) * 15 * MINUTE + 15 * MINUTE;
      }
      const local = new Date(t + offset);
      const minute = local.getUTCMinutes();
      const hour = local.getUTCHours();
      if (!cronDayMatches(c, local)) {
        t += ((23 - hour) * 60 + (60 - minute)) * MINUTE;
        continue;
      }
      if (!c.hourSet.has(hour)) {
        t += (60 - minute) * MINUTE;
        continue;
      }
      if (c.minSet.has(minute)) {
        for (const s of c.sec) {
          const at = t + s * SECOND;
          if (at >= from && at <= to) out.push(at);
          if (out.length >= max) break;
        }
      }
      t += MINUTE;
    }
    return out.sort((a, b) => a - b).slice(0, max);
  }

  // Returns what a cadence means: {kind, words, expr, periodMs, cron}.
  const cadenceCache = new Map();
  function cadenceInfo(cadence, zone) {
    const key = `${cadence}\u0000${zone || ''}`;
    let info = cadenceCache.get(key);
    if (info) return info;
    const expr = String(cadence || '');
    if (expr === 'manual') {
      info = { kind: 'manual', words: 'only when triggered', expr, periodMs: null, cron: null };
    } else if (/^P/i.test(expr) && parseIsoDuration(expr)) {
      const parsed = parseIsoDuration(expr);
      info = { kind: 'duration', words: durationWords(parsed), expr, periodMs: parsed.ms, cron: null };
    } else {
      const cron = parseCron(expr);
      info = cron
        ? { kind: 'cron', words: cronWords(cron, zone), expr, periodMs: cronPeriod(cron), cron }
        : { kind: 'unknown', words: null, expr, periodMs: null, cron: null };
    }
    cadenceCache.set(key, info);
    return info;
  }

  // ---------------------------------------------------------------- auth and the API
  class ApiError extends Error {
    constructor(status, name, message) {
      super(message);
      this.status = status;
      this.name = name;
    }
  }
  let token = '';
  try {
    token = sessionStorage.getItem(TOKEN_KEY) || '';
  } catch (e) {
    token = '';
  }
  let tokenPrompt = null; // the pending prompt's promise, shared by every waiting request

  function forgetToken() {
    token = '';
    try {
      sessionStorage.removeItem(TOKEN_KEY);
    } catch (e) { /* storage may be off: the token then lives in this page only */ }
  }

  // Asks for the token (once, however many requests wait) and resolves when one is entered.
  function askForToken(reason) {
    if (tokenPrompt) {
      if (reason) setText($('token-error'), reason);
      return tokenPrompt;
    }
    tokenPrompt = new Promise((resolve) => {
      const dialog = $('token-dialog');
      const input = $('token-input');
      setText($('token-error'), reason || '');
      input.value = '';
      const onSubmit = (event) => {
        event.preventDefault();
        const value = input.value.trim();
        if (!value) {
          setText($('token-error'), 'Enter the token.');
          input.focus();
          return;
        }
        token = value;
        try {
          sessionStorage.setItem(TOKEN_KEY, value);
        } catch (e) { /* kept in this page only */ }
        $('token-form').removeEventListener('submit', onSubmit);
        dialog.removeEventListener('cancel', onCancel);
        dialog.close();
        $('signin-banner').hidden = true;
        tokenPrompt = null;
        resolve();
      };
      const onCancel = (event) => {
        // Without a token nothing can be shown: keep asking, but let the page say why.
        event.preventDefault();
        $('signin-banner').hidden = false;
      };
      $('token-form').addEventListener('submit', onSubmit);
      dialog.addEventListener('cancel', onCancel);
      if (!dialog.open) dialog.showModal();
      input.focus();
    });
    return tokenPrompt;
  }

  // Says why a request with `sent` (the token it carried, or none) was refused.
  function explainUnauthorized(err, sent) {
    if (!sent) return 'This daemon needs a token.';
    return `The daemon refused the token (${err.message}). Enter it again.`;
  }

  async function errorFrom(response) {
    let name = `HTTP ${response.status}`;
    let message = response.statusText || '';
    try {
      const body = await response.json();
      if (body && body.error) {
        name = body.error.name || name;
        message = body.error.message || message;
      }
    } catch (e) { /* not JSON: keep the status */ }
    return new ApiError(response.status, name, message);
  }

  const apiUrl = (path) => new URL(path, ROOT);

  // Calls the API at `path` (relative to the daemon's root) and returns its JSON (null for an
  // empty body). Throws ApiError: status 0 when the daemon cannot be reached. A 401 asks for the
  // token and tries again.
  async function api(path, { method = 'GET', body, signal } = {}) {
    for (let attempt = 0; ; attempt++) {
      if (AUTH_MODE === 'token' && !token) await askForToken();
      const headers = { Accept: 'application/json' };
      const sent = token;
      if (sent) headers.Authorization = `Bearer ${sent}`;
      if (body !== undefined) headers['Content-Type'] = 'application/json';
      let response;
      try {
        response = await fetch(apiUrl(path), {
          method, headers, signal, cache: 'no-store', credentials: 'same-origin',
          body: body === undefined ? undefined : JSON.stringify(body),
        });
      } catch (e) {
        if (e && e.name === 'AbortError') throw e;
        throw new ApiError(0, 'NetworkError', 'the daemon cannot be reached');
      }
      if (response.status === 401 && attempt < 5) {
        const reason = explainUnauthorized(await errorFrom(response), sent);
        if (token === sent) {
          // Otherwise a new token came while this request was out: try that one.
          forgetToken();
          await askForToken(reason);
        }
        continue;
      }
      if (!response.ok) throw await errorFrom(response);
      if (method === 'GET') return response.json();
      const text = await response.text();
      return text ? JSON.parse(text) : null;
    }
  }

  const pluginBase = (pluginId) => `api/${enc(pluginId)}/`;
  const taskPaths = {
    listing: (p) => `${pluginBase(p)}.stagehand/v1/tasks?upcoming=${UPCOMING_ASKED}`,
    runs: (p, t, limit, before) => `${pluginBase(p)}.stagehand/v1/tasks/${enc(t)}/runs?limit=${limit}${before ? `&before=${enc(before)}` : ''}`,
    run: (p, r) => `${pluginBase(p)}.stagehand/v1/runs/${enc(r)}`,
    trigger: (p, t) => `${pluginBase(p)}.backstage/scheduler/v1/tasks/${enc(t)}/trigger`,
    cancel: (p, t) => `${pluginBase(p)}.backstage/scheduler/v1/tasks/${enc(t)}/cancel`,
    pause: (p, t) => `${pluginBase(p)}.stagehand/v1/tasks/${enc(t)}/pause`,
    resume: (p, t) => `${pluginBase(p)}.stagehand/v1/tasks/${enc(t)}/resume`,
  };

  // ---------------------------------------------------------------- state
  const plugins = new Map(); // id -> {id, keys, noHistory, lastFetchMs, timer, lastFetchAt}
  let pluginOrder = [];
  const tasks = new Map(); // "plugin/task" -> task (the listing's fields plus what events taught)
  const histories = new Map(); // key -> {runs, limit, fetchedAt, stale, loading, error}
  let view = []; // the keys shown, filtered and sorted
  let loadedOnce = false;
  const filters = { q: '', plugin: '', scope: '', state: '', outcome: '', sort: '', window: HOUR };

  const keyOf = (pluginId, taskId) => `${pluginId}/${taskId}`;

  function parseError(text) {
    if (!text) return null;
    if (typeof text === 'object') return text;
    try {
      const value = JSON.parse(text);
      if (value && typeof value === 'object') return value;
    } catch (e) { /* plain text */ }
    return { name: 'Error', message: String(text) };
  }
  function outcomeFromError(error) {
    const message = (error && error.message) || '';
    if (/cancel/i.test(message)) return 'cancelled';
    if (/timed out/i.test(message)) return 'timed_out';
    return 'failed';
  }
  const outcomeLabel = (outcome) => String(outcome || '').replace('_', ' ');

  function isRunning(t) {
    return Boolean(t.live) || Boolean(t.taskState && t.taskState.status === 'running' && !(t.pause && !t.pause.pending));
  }
  function stateOf(t) {
    if (t.pause && !t.pause.pending) return 'paused';
    if (isRunning(t)) return 'running';
    if (t.workerState && t.workerState.status === 'initial-wait') return 'initial-wait';
    return 'idle';
  }
  function runningRun(t) {
    const h = histories.get(t.key);
    const fromHistory = h && h.runs.find((r) => r.outcome === 'running');
    return t.live || fromHistory || null;
  }
  // Returns the last ended run as well as it is known: from the history, an event, or the row.
  function lastOf(t) {
    let best = null;
    const h = histories.get(t.key);
    if (h) best = h.runs.find((r) => r.outcome !== 'running') || null;
    if (t.last && (!best || (parseTime(t.last.endedAt) || 0) >= (parseTime(best.endedAt) || 0))) best = t.last;
    if (best) return best;
    const ts = t.taskState;
    if (ts && ts.lastRunEndedAt) {
      const error = parseError(ts.lastRunError);
      return {
        outcome: error ? outcomeFromError(error) : 'succeeded', endedAt: ts.lastRunEndedAt,
        durationMs: null, host: null, error, fromRow: true,
      };
    }
    return null;
  }
  function startedAtOf(t) {
    const run = runningRun(t);
    return parseTime(run && run.startedAt) || parseTime(t.taskState && t.taskState.startedAt);
  }
  function timeoutMs(t) {
    const parsed = parseIsoDuration(t.settings && t.settings.timeoutAfterDuration);
    return parsed ? parsed.ms : null;
  }
  function cadenceOf(t) {
    return cadenceInfo(t.settings && t.settings.cadence, t.timeZone);
  }

  // Returns the start times in [from, to], at most `max`: the daemon's `upcoming` where it lists
  // them (computed by its own cron), and past the last one listed the cadence carried on from the
  // row's next start (or, while a duration task runs, from its run's start).
  const slotCache = new Map();
  function slotsOf(t, from, to, max = 400) {
    if (t.pause && !t.pause.pending) return [];
    const own = cadenceSlots(t, from, to, max);
    const listed = Array.isArray(t.upcoming) ? t.upcoming.map(parseTime).filter((ms) => ms !== null) : [];
    if (!listed.length) return own;
    const last = listed[listed.length - 1];
    const slots = listed.filter((ms) => ms >= from && ms <= to);
    // Fewer than asked for means none more within the daemon's 24 hours.
    if (listed.length >= UPCOMING_ASKED) for (const ms of own) if (ms > last) slots.push(ms);
    return slots.slice(0, max);
  }
  function cadenceSlots(t, from, to, max) {
    const cadence = cadenceOf(t);
    const ts = t.taskState;
    const running = ts && ts.status === 'running';
    const startsAt = ts && !running ? parseTime(ts.startsAt) : null;
    if (cadence.kind === 'duration') {
      const out = [];
      let at = startsAt;
      if (at === null && running && cadence.periodMs) {
        const started = startedAtOf(t);
        if (started !== null) at = started + cadence.periodMs;
      }
      if (at === null) return out;
      if (cadence.periodMs && at < from) at += Math.ceil((from - at) / cadence.periodMs) * cadence.periodMs;
      while (at <= to && out.length < max) {
        if (at >= from) out.push(at);
        if (!cadence.periodMs) break;
        at += cadence.periodMs;
      }
      return out;
    }
    if (cadence.kind === 'cron') {
      const cacheKey = `${t.settings.cadence}|${t.timeZone}|${Math.floor(from / (5 * SECOND))}|${to - from}|${max}`;
      let slots = slotCache.get(cacheKey);
      if (!slots) {
        slots = cronSlots(cadence.cron, t.timeZone, from, to, max);
        if (slotCache.size > 5000) slotCache.clear();
        slotCache.set(cacheKey, slots);
      }
      return slots;
    }
    return startsAt !== null && startsAt >= from && startsAt <= to ? [startsAt] : [];
  }
  function nextStartOf(t, now) {
    if (t.pause && !t.pause.pending) return null;
    const ts = t.taskState;
    if (ts && ts.status !== 'running' && ts.startsAt) return parseTime(ts.startsAt);
    const slots = slotsOf(t, now, now + 400 * DAY, 1);
    return slots.length ? slots[0] : null;
  }

  // ---------------------------------------------------------------- loading
  async function loadPlugins() {
    const body = await api('.stagehand/v1/plugins');
    const ids = ((body && body.plugins) || []).map((p) => p.id);
    pluginOrder = ids;
    for (const id of ids) {
      if (!plugins.has(id)) {
        plugins.set(id, { id, keys: [], noHistory: false, lastFetchMs: 0, lastFetchAt: 0, timer: null, inFlight: null });
      }
    }
    for (const id of [...plugins.keys()]) {
      if (!ids.includes(id)) {
        for (const key of plugins.get(id).keys) {
          tasks.delete(key);
          histories.delete(key);
        }
        plugins.delete(id);
      }
    }
    try {
      localStorage.setItem(PLUGINS_KEY, JSON.stringify(ids));
    } catch (e) { /* only a head start is lost */ }
    const select = $('f-plugin');
    const current = select.value || filters.plugin;
    while (select.options.length > 1) select.remove(1);
    for (const id of ids) select.add(new Option(id, id));
    select.value = ids.includes(current) ? current : '';
    return ids;
  }

  function fetchListing(pluginId) {
    return api(taskPaths.listing(pluginId)).catch((e) => {
      if (e.status === 404) return { tasks: [] };
      throw e;
    });
  }

  // Reads one plugin's listing (or takes the one already asked for) and merges it.
  async function loadPlugin(pluginId, prefetched) {
    const plugin = plugins.get(pluginId);
    if (!plugin) return;
    if (plugin.inFlight) {
      plugin.again = true; // what it answers may predate the change that asked for this
      return plugin.inFlight;
    }
    const started = performance.now();
    const requestedAt = Date.now();
    plugin.inFlight = (async () => {
      const body = await (prefetched || fetchListing(pluginId));
      const keys = [];
      const list = (body && body.tasks) || [];
      for (let i = 0; i < list.length; i++) {
        const item = list[i];
        const key = keyOf(pluginId, item.taskId);
        keys.push(key);
        const t = tasks.get(key) || { key, live: null, last: null, note: null };
        t.pluginId = pluginId;
        t.taskId = item.taskId;
        t.scope = item.scope;
        t.settings = item.settings || {};
        t.timeZone = item.timeZone || null;
        t.index = i;
        if (t.eventAt && t.eventAt >= requestedAt) {
          // An event came after this listing was asked for: keep what it said, read again.
          plugin.again = true;
        } else {
          t.pause = item.pause || null;
          t.taskState = item.taskState || null;
          t.workerState = item.workerState || null;
          t.upcoming = Array.isArray(item.upcoming) ? item.upcoming : null;
        }
        if (t.live && !(t.taskState && t.taskState.status === 'running') &&
            (parseTime(t.live.startedAt) || 0) < requestedAt - 5 * SECOND) {
          t.live = null; // its end was missed; the listing knows better
        }
        if (t.note && Date.now() - t.note.at > 30 * SECOND) t.note = null;
        tasks.set(key, t);
      }
      const kept = new Set(keys);
      for (const key of plugin.keys) {
        if (!kept.has(key)) {
          tasks.delete(key);
          histories.delete(key);
        }
      }
      plugin.keys = keys;
      plugin.lastFetchMs = performance.now() - started;
      plugin.lastFetchAt = Date.now();
    })();
    try {
      await plugin.inFlight;
    } finally {
      plugin.inFlight = null;
    }
    if (plugin.again) {
      plugin.again = false;
      scheduleListingRefresh(pluginId, 0);
    }
    refilter();
  }

  async function loadAll() {
    // On the first load, the listings of the last visit's plugins are asked for at once, beside
    // the plugin list, rather than one round trip later.
    const prefetched = new Map();
    if (!loadedOnce && (AUTH_MODE !== 'token' || token)) {
      let remembered = [];
      try {
        remembered = JSON.parse(localStorage.getItem(PLUGINS_KEY) || '[]');
      } catch (e) { /* none */ }
      for (const id of Array.isArray(remembered) ? remembered.slice(0, 20) : []) {
        if (typeof id !== 'string') continue;
        const listing = fetchListing(id);
        listing.catch(() => { /* a plugin gone since is read no more */ });
        prefetched.set(id, listing);
      }
    }
    try {
      const ids = await loadPlugins();
      await Promise.all(ids.map((id) => loadPlugin(id, prefetched.get(id))));
      loadedOnce = true;
      $('load-error').hidden = true;
      for (const [type, data] of earlyEvents.splice(0)) applyEvent(type, data);
      refilter();
    } catch (e) {
      showLoadError(e);
    }
  }

  function showLoadError(e) {
    const banner = $('load-error');
    banner.textContent = '';
    banner.append(el('strong', null, 'Could not read the tasks: '), explainError(e, 'load'), ' ');
    const retry = el('button', 'btn small', 'Try again');
    retry.type = 'button';
    retry.addEventListener('click', () => loadAll());
    banner.append(retry);
    banner.hidden = false;
    if (!loadedOnce) setText($('summary'), 'No tasks loaded.');
  }

  // Re-reads a plugin's listing soon: at once for the first change, then no more often than
  // ten times its last fetch took (a 10,000-task listing is not re-read on every event).
  function scheduleListingRefresh(pluginId, delay = 150) {
    const plugin = plugins.get(pluginId);
    if (!plugin) return;
    if (plugin.timer) return;
    const gap = Math.max(750, plugin.lastFetchMs * 10);
    const wait = Math.max(delay, plugin.lastFetchAt + gap - Date.now());
    plugin.timer = setTimeout(() => {
      plugin.timer = null;
      loadPlugin(pluginId).catch(() => { /* the safety refresh tries again */ });
    }, wait);
  }

  // ---------------------------------------------------------------- run histories
  const historyQueue = [];
  let historyActive = 0;

  function historyLimit(t) {
    const cadence = cadenceOf(t);
    const past = filters.window * PAST_FRACTION;
    if (!cadence.periodMs) return 20;
    return clamp(Math.ceil(past / cadence.periodMs) + 3, 10, 300);
  }
  function needsHistory(t) {
    const plugin = plugins.get(t.pluginId);
    if (!plugin || plugin.noHistory) return false;
    const h = histories.get(t.key);
    if (!h) return true;
    if (h.loading) return false;
    return h.stale || h.limit < historyLimit(t);
  }
  function requestHistories(keys) {
    for (const key of keys) {
      const t = tasks.get(key);
      if (t && needsHistory(t) && !historyQueue.includes(key)) historyQueue.push(key);
    }
    pumpHistories();
  }
  function pumpHistories() {
    while (historyActive < HISTORY_CONCURRENCY && historyQueue.length) {
      const key = historyQueue.shift();
      const t = tasks.get(key);
      if (!t || !rendered.has(key) || !needsHistory(t)) continue;
      historyActive++;
      fetchHistory(t).finally(() => {
        historyActive--;
        pumpHistories();
      });
    }
  }
  async function fetchHistory(t) {
    const limit = historyLimit(t);
    const previous = histories.get(t.key);
    const entry = previous || { runs: [], limit: 0, fetchedAt: 0, stale: false, loading: false, error: null };
    entry.loading = true;
    histories.set(t.key, entry);
    try {
      const body = await api(taskPaths.runs(t.pluginId, t.taskId, limit));
      entry.runs = (body && body.runs) || [];
      entry.limit = limit;
      entry.fetchedAt = Date.now();
      entry.stale = false;
      entry.error = null;
    } catch (e) {
      if (e.status === 501) {
        const plugin = plugins.get(t.pluginId);
        if (plugin) {
          plugin.noHistory = true;
          plugin.noHistoryReason = e.message;
        }
      }
      entry.error = e;
      entry.stale = false;
      entry.limit = limit;
      entry.fetchedAt = Date.now();
    } finally {
      entry.loading = false;
    }
    if (histories.size > MAX_CACHED_HISTORIES) {
      for (const key of histories.keys()) {
        if (histories.size <= MAX_CACHED_HISTORIES * 0.8) break;
        if (!rendered.has(key)) histories.delete(key);
      }
    }
    updateRow(t.key, true);
    if (filters.outcome) scheduleRefilter();
  }
  // Folds a run event into the cached history of its task.
  function foldRun(key, run) {
    const h = histories.get(key);
    if (!h) return;
    const i = h.runs.findIndex((r) => r.runId === run.runId);
    if (i >= 0) h.runs[i] = Object.assign({}, h.runs[i], run);
    else h.runs.unshift(run);
    if (h.runs.length > Math.max(h.limit, 20) + 20) h.runs.length = Math.max(h.limit, 20) + 20;
  }

  // ---------------------------------------------------------------- filtering and sorting
  function outcomeKey(t) {
    const last = lastOf(t);
    return last ? last.outcome : 'none';
  }
  function matches(t) {
    if (filters.plugin && t.pluginId !== filters.plugin) return false;
    if (filters.scope && t.scope !== filters.scope) return false;
    if (filters.state && stateOf(t) !== filters.state) return false;
    if (filters.outcome) {
      const outcome = outcomeKey(t);
      if (filters.outcome === 'problem' ? !PROBLEM_OUTCOMES.has(outcome) : outcome !== filters.outcome) return false;
    }
    if (filters.q && !t.taskId.toLowerCase().includes(filters.q)) return false;
    return true;
  }
  const STATE_RANK = { running: 0, paused: 1, 'initial-wait': 2, idle: 3 };
  function refilter() {
    const now = Date.now();
    const keys = [];
    for (const id of pluginOrder) {
      const plugin = plugins.get(id);
      if (!plugin) continue;
      for (const key of plugin.keys) {
        const t = tasks.get(key);
        if (t && matches(t)) keys.push(key);
      }
    }
    if (filters.sort) {
      const rank = new Map();
      for (const key of keys) {
        const t = tasks.get(key);
        let value;
        if (filters.sort === 'id') value = t.taskId;
        else if (filters.sort === 'next') value = nextStartOf(t, now) ?? Infinity;
        else if (filters.sort === 'state') value = STATE_RANK[stateOf(t)];
        else value = PROBLEM_OUTCOMES.has(outcomeKey(t)) ? 0 : 1;
        rank.set(key, value);
      }
      const position = new Map(keys.map((key, i) => [key, i]));
      keys.sort((a, b) => {
        const x = rank.get(a);
        const y = rank.get(b);
        if (x < y) return -1;
        if (x > y) return 1;
        return position.get(a) - position.get(b);
      });
    }
    view = keys;
    $('task-table').setAttribute('aria-rowcount', String(view.length + 1));
    $('empty').hidden = view.length > 0 || !loadedOnce;
    updateSummary();
    requestRender(true);
  }
  let refilterTimer = null;
  function scheduleRefilter() {
    if (refilterTimer) return;
    refilterTimer = setTimeout(() => {
      refilterTimer = null;
      refilter();
    }, 100);
  }

  let summaryTimer = null;
  function scheduleSummary() {
    if (summaryTimer) return;
    summaryTimer = setTimeout(() => {
      summaryTimer = null;
      updateSummary();
    }, 250);
  }

  function updateSummary() {
    let running = 0;
    let paused = 0;
    let failing = 0;
    for (const t of tasks.values()) {
      const state = stateOf(t);
      if (state === 'running') running++;
      else if (state === 'paused') paused++;
      const last = lastOf(t);
      if (last && PROBLEM_OUTCOMES.has(last.outcome)) failing++;
    }
    const total = tasks.size;
    if (!loadedOnce && total === 0) return;
    const parts = [`${plural(total, 'task')} in ${plural(plugins.size, 'plugin')}`,
      `${running} running`, `${paused} paused`, `${failing} failing`];
    setText($('summary'), parts.join(' · '));
    setText($('match-count'), view.length === total ? `Showing all ${plural(total, 'task')}.` : `Showing ${view.length} of ${plural(total, 'task')}.`);
  }

  // ---------------------------------------------------------------- the virtual list
  const list = $('task-list');
  const spacer = $('spacer');
  const rendered = new Map(); // key -> row element
  const rowPool = [];
  let rowHeight = 56;
  let renderQueued = false;
  let fullUpdate = false;
  let firstRowsMarked = false;

  function readRowHeight() {
    const value = parseFloat(getComputedStyle(list).getPropertyValue('--row-h'));
    rowHeight = Number.isFinite(value) && value > 0 ? value : 56;
  }

  function makeRow() {
    const row = el('div', 'row');
    row.setAttribute('role', 'row');
    const cell = (cls) => {
      const c = el('div', `cell ${cls}`);
      c.setAttribute('role', 'cell');
      row.append(c);
      return c;
    };
    const refs = {};
    const taskCell = cell('c-task');
    refs.name = el('button', 'task-button');
    refs.name.type = 'button';
    refs.name.dataset.action = 'open';
    refs.where = el('span', 'sub');
    taskCell.append(refs.name, refs.where);

    const stateCell = cell('c-state');
    refs.state = el('span', 'badge');
    refs.stateText = el('span', 'sub');
    stateCell.append(refs.state, refs.stateText);

    const cadenceCell = cell('c-cadence');
    refs.words = el('span', 'main');
    refs.expr = el('code', 'sub expr');
    cadenceCell.append(refs.words, refs.expr);

    const nextCell = cell('c-next');
    refs.nextAbs = el('span', 'main');
    refs.nextRel = el('span', 'sub');
    nextCell.append(refs.nextAbs, refs.nextRel);

    const lastCell = cell('c-last');
    const lastMain = el('span', 'main');
    refs.outcome = el('span', 'badge');
    refs.duration = el('span', 'dur');
    lastMain.append(refs.outcome, refs.duration);
    refs.lastSub = el('span', 'sub');
    lastCell.append(lastMain, refs.lastSub);

    const timelineCell = cell('c-timeline');
    refs.canvas = el('canvas', 'timeline');
    refs.canvas.setAttribute('aria-hidden', 'true');
    refs.timelineText = el('span', 'visually-hidden');
    timelineCell.append(refs.canvas, refs.timelineText);

    const actionsCell = cell('c-actions');
    refs.trigger = el('button', 'btn small primary', 'Trigger');
    refs.trigger.type = 'button';
    refs.trigger.dataset.action = 'trigger';
    refs.second = el('button', 'btn small');
    refs.second.type = 'button';
    actionsCell.append(refs.trigger, refs.second);
    row.refs = refs;
    return row;
  }

  function requestRender(all = false) {
    if (all) fullUpdate = true;
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(render);
  }

  function visibleRange() {
    const top = list.scrollTop;
    const height = list.clientHeight || window.innerHeight;
    const first = Math.max(0, Math.floor(top / rowHeight) - 3);
    const last = Math.min(view.length - 1, Math.ceil((top + height) / rowHeight) + 3);
    return [first, last];
  }

  function render() {
    renderQueued = false;
    const all = fullUpdate;
    fullUpdate = false;
    spacer.style.height = `${view.length * rowHeight}px`;
    const [first, last] = visibleRange();
    const wanted = new Map();
    for (let i = first; i <= last; i++) wanted.set(view[i], i);
    // Keep the row holding the focus, so that scrolling never drops it.
    const focusRow = document.activeElement && document.activeElement.closest &&
      document.activeElement.closest('#task-list .row');
    for (const [key, row] of rendered) {
      if (wanted.has(key)) continue;
      if (row === focusRow && view.includes(key)) {
        wanted.set(key, view.indexOf(key));
        continue;
      }
      row.remove();
      rendered.delete(key);
      rowPool.push(row);
    }
    const now = Date.now();
    const newKeys = [];
    for (const [key, index] of wanted) {
      let row = rendered.get(key);
      const fresh = !row;
      if (fresh) {
        row = rowPool.pop() || makeRow();
        row.dataset.key = key;
        rendered.set(key, row);
        list.append(row);
        newKeys.push(key);
      }
      if (row.index !== index) {
        row.index = index;
        row.style.transform = `translateY(${index * rowHeight}px)`;
        row.setAttribute('aria-rowindex', String(index + 2));
      }
      if (fresh || all) fillRow(row, tasks.get(key), now, true);
    }
    if (!firstRowsMarked && rendered.size > 0) {
      firstRowsMarked = true;
      performance.mark('stagehand:first-rows');
    }
    if (newKeys.length || all) scheduleHistoryFetch();
  }

  let historyFetchTimer = null;
  function scheduleHistoryFetch() {
    clearTimeout(historyFetchTimer);
    // Only rows that stay in view for a moment are fetched: a fast scroll costs no requests.
    historyFetchTimer = setTimeout(() => {
      const [first, last] = visibleRange();
      requestHistories(view.slice(first, last + 1));
    }, 120);
  }

  function updateRow(key, redrawTimeline = false) {
    const row = rendered.get(key);
    const t = tasks.get(key);
    if (row && t) fillRow(row, t, Date.now(), redrawTimeline);
  }

  function stateWords(t, now) {
    const state = stateOf(t);
    if (state === 'paused') {
      const p = t.pause;
      const bits = [];
      if (p.by) bits.push(`by ${p.by}`);
      const until = parseTime(p.until);
      bits.push(until ? `until ${absTime(until, now)}` : 'until resumed');
      if (p.reason) bits.push(`“${p.reason}”`);
      return { label: 'paused', cls: 'paused', text: bits.join(' · ') };
    }
    if (state === 'running') {
      const started = startedAtOf(t);
      const timeout = timeoutMs(t);
      const bits = [];
      if (started) bits.push(`for ${humanSpan(now - started)}`);
      if (timeout) bits.push(`timeout ${humanSpan(timeout)}`);
      if (t.pause && t.pause.pending) bits.push('pausing after this run');
      if (t.note && t.note.kind === 'cancelling') bits.push('cancelling…');
      return { label: 'running', cls: 'running', text: bits.join(' · ') };
    }
    if (t.note && t.note.kind === 'triggered' && now - t.note.at < 15 * SECOND) {
      return { label: 'starting', cls: 'running', text: 'triggered, waiting for a host' };
    }
    if (t.note && t.note.kind === 'retrying' && t.note.until > now) {
      return { label: 'retrying', cls: 'initial-wait', text: `next attempt ${relTime(t.note.until, now)}` };
    }
    if (state === 'initial-wait') {
      const startsAt = parseTime(t.taskState && t.taskState.startsAt);
      return { label: 'initial wait', cls: 'initial-wait', text: startsAt ? `first run ${relTime(startsAt, now)}` : '' };
    }
    if (!t.workerState && t.scope === 'local') return { label: 'idle', cls: 'idle', text: 'not on this host' };
    return { label: 'idle', cls: 'idle', text: '' };
  }

  function nextWords(t, now) {
    const state = stateOf(t);
    if (state === 'paused') {
      const until = parseTime(t.pause.until);
      return { abs: 'paused', rel: until ? `resumes ${relTime(until, now)}` : 'until resumed', title: '' };
    }
    const cadence = cadenceOf(t);
    const next = nextStartOf(t, now);
    if (next === null) {
      if (cadence.kind === 'manual') return { abs: '—', rel: 'when triggered', title: '' };
      if (isRunning(t)) return { abs: 'after this run', rel: '', title: '' };
      return { abs: '—', rel: '', title: '' };
    }
    const rel = next < now - 1500 ? `due ${coarseSpan(now - next)} ago` : relTime(next, now);
    return { abs: absTime(next, now), rel, title: fullTime(next) };
  }

  function lastWords(t, now) {
    const run = isRunning(t) ? runningRun(t) : null;
    const last = lastOf(t);
    const host = run && run.host ? run.host : last && last.host;
    if (!last) {
      return { outcome: '', cls: '', dur: 'never ran', sub: host ? `on ${host}` : '' };
    }
    const ended = parseTime(last.endedAt);
    const sub = [];
    if (run && run.host) sub.push(`running on ${run.host}`);
    else if (last.host) sub.push(`on ${last.host}`);
    if (ended) sub.push(relTime(ended, now));
    return {
      outcome: outcomeLabel(last.outcome), cls: `o-${last.outcome}`,
      dur: last.durationMs !== null && last.durationMs !== undefined ? humanSpan(last.durationMs) : '',
      sub: sub.join(' · '),
    };
  }

  function fillRow(row, t, now, redrawTimeline) {
    if (!t) return;
    const r = row.refs;
    setText(r.name, t.taskId);
    r.name.title = `Open ${t.taskId}: settings, runs and output`;
    setText(r.where, `${t.pluginId} · ${t.scope}`);
    const state = stateWords(t, now);
    setText(r.state, state.label);
    setClass(r.state, `badge s-${state.cls}`);
    setText(r.stateText, state.text);
    const cadence = cadenceOf(t);
    setText(r.words, cadence.words || 'cron');
    const zone = cadence.kind === 'cron' && t.timeZone ? ` (${zoneName(t.timeZone)})` : '';
    setText(r.expr, `${cadence.expr}${zone}`);
    const next = nextWords(t, now);
    setText(r.nextAbs, next.abs);
    setText(r.nextRel, next.rel);
    r.nextAbs.title = next.title;
    const last = lastWords(t, now);
    setText(r.outcome, last.outcome);
    setClass(r.outcome, last.outcome ? `badge ${last.cls}` : 'badge none');
    setText(r.duration, last.dur);
    setText(r.lastSub, last.sub);

    r.trigger.setAttribute('aria-label', `Trigger ${t.taskId}`);
    const running = isRunning(t);
    const paused = t.pause && !t.pause.pending;
    // aria-disabled rather than disabled: the button keeps the focus, and a click says why.
    setBlocked(r.trigger, running ? 'running' : paused ? 'paused' : null);
    let second = null;
    if (running) second = ['cancel', 'Cancel'];
    else if (t.pause) second = ['resume', 'Resume'];
    else if (t.scope === 'global') second = ['pause', 'Pause'];
    if (second) {
      r.second.hidden = false;
      r.second.dataset.action = second[0];
      setText(r.second, second[1]);
      r.second.setAttribute('aria-label', `${second[1]} ${t.taskId}`);
      setClass(r.second, second[0] === 'cancel' ? 'btn small danger' : 'btn small');
    } else {
      r.second.hidden = true;
    }
    if (redrawTimeline || running) drawTimeline(row, t, now);
  }

  // ---------------------------------------------------------------- timeline
  let colors = {};
  function readColors() {
    const style = getComputedStyle(document.documentElement);
    const get = (name) => style.getPropertyValue(name).trim() || '#888';
    colors = {
      track: get('--timeline-track'), future: get('--timeline-future'), grid: get('--timeline-grid'),
      now: get('--timeline-now'),
      upcoming: get('--timeline-upcoming'), running: get('--o-running'),
      succeeded: get('--o-succeeded'), failed: get('--o-failed'), timed_out: get('--o-timed_out'),
      cancelled: get('--o-cancelled'), lost: get('--o-lost'), fenced: get('--o-lost'),
    };
  }
  let timelineWidth = 0;
  let timelineHeight = 0;
  function measureTimeline() {
    const probe = document.querySelector('#task-list .row .c-timeline');
    if (!probe) return false;
    const style = getComputedStyle(probe);
    const width = probe.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    const changed = Math.round(width) !== timelineWidth;
    timelineWidth = Math.max(40, Math.round(width));
    timelineHeight = 22;
    return changed;
  }
  function timelineWindow(now) {
    const span = filters.window;
    const start = now - span * PAST_FRACTION;
    return { start, end: start + span, span };
  }

  function drawTimeline(row, t, now) {
    const canvas = row.refs.canvas;
    if (!timelineWidth) measureTimeline();
    const width = timelineWidth;
    const height = timelineHeight;
    const dpr = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(width * dpr) || canvas.height !== Math.round(height * dpr)) {
      canvas.width = Math.round(width * dpr);
      canvas.height = Math.round(height * dpr);
      canvas.style.width = `${width}px`;
      canvas.style.height = `${height}px`;
    }
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const { start, end, span } = timelineWindow(now);
    const x = (ms) => ((ms - start) / span) * width;
    const nowX = Math.round(x(now));
    ctx.fillStyle = colors.track;
    ctx.fillRect(0, 4, nowX, height - 8);
    ctx.fillStyle = colors.future;
    ctx.fillRect(nowX, 4, width - nowX, height - 8);
    // Grid lines on round local times: every minute, 10 minutes, hour or 3 hours.
    const step = span <= 10 * MINUTE ? MINUTE : span <= HOUR ? 10 * MINUTE : span <= 6 * HOUR ? HOUR : 3 * HOUR;
    const zoneShift = new Date(start).getTimezoneOffset() * MINUTE;
    ctx.fillStyle = colors.grid;
    for (let at = Math.ceil((start - zoneShift) / step) * step + zoneShift; at < end; at += step) {
      ctx.fillRect(Math.round(x(at)), 4, 1, height - 8);
    }

    const h = histories.get(t.key);
    const runs = h ? h.runs.slice() : [];
    const live = runningRun(t);
    if (t.live && !runs.some((r) => r.runId === t.live.runId)) runs.unshift(t.live);
    if (!live && t.last && !runs.some((r) => r.runId === t.last.runId)) runs.unshift(t.last);
    let counts = {};
    let shown = 0;
    for (const run of runs) {
      const s = parseTime(run.startedAt);
      if (s === null) continue;
      const e = run.outcome === 'running' || !run.endedAt ? now : parseTime(run.endedAt);
      if (e < start || s > end) continue;
      shown++;
      counts[run.outcome] = (counts[run.outcome] || 0) + 1;
      const x0 = Math.max(0, x(s));
      const x1 = Math.min(width, Math.max(x(e), x0 + 2));
      ctx.fillStyle = colors[run.outcome] || colors.failed;
      ctx.fillRect(x0, 2, Math.max(2, x1 - x0), height - 4);
    }
    // Upcoming starts: a short tick each, at least 4 px apart.
    ctx.fillStyle = colors.upcoming;
    let lastX = -10;
    let upcoming = 0;
    for (const at of slotsOf(t, now, end, 600)) {
      const px = Math.round(x(at));
      upcoming++;
      if (px - lastX < 4) continue;
      lastX = px;
      ctx.fillRect(px - 1, Math.round(height * 0.45), 2, height - Math.round(height * 0.45));
    }
    ctx.fillStyle = colors.now;
    ctx.fillRect(nowX - 1, 0, 2, height);

    const summary = [];
    const label = windowLabel();
    if (shown === 0) summary.push(`No runs in the last ${label}.`);
    else {
      summary.push(`${plural(shown, 'run')} in the last ${label}: ${Object.entries(counts).map(([o, n]) => `${n} ${outcomeLabel(o)}`).join(', ')}.`);
    }
    if (upcoming) summary.push(`${plural(upcoming, 'start')} due before ${absTime(end, now)}.`);
    setText(row.refs.timelineText, summary.join(' '));
  }
  function windowLabel() {
    return humanSpan(filters.window * PAST_FRACTION).replace(/ 0 min$/, '');
  }
  function drawAxis() {
    const now = Date.now();
    const { start, end } = timelineWindow(now);
    const label = (ms) => (sameDay(ms, now) ? fmtHourMinute.format(ms) : fmtDayClock.format(ms));
    setText($('axis-start'), label(start));
    setText($('axis-end'), label(end));
  }

  // ---------------------------------------------------------------- actions
  const toasts = $('toasts');
  function toast(message, kind = 'ok') {
    const item = el('div', `toast toast-${kind}`);
    item.append(el('span', null, message));
    const close = el('button', 'icon-button', '✕');
    close.type = 'button';
    close.setAttribute('aria-label', 'Dismiss');
    close.addEventListener('click', () => item.remove());
    item.append(close);
    toasts.append(item);
    while (toasts.children.length > 4) toasts.firstElementChild.remove();
    setTimeout(() => item.remove(), kind === 'error' ? 20000 : 8000);
  }

  // Returns words for an API error, with what it means for this action.
  function explainError(e, action, t) {
    const name = t ? t.taskId : 'the task';
    if (!(e instanceof ApiError)) return `unexpected error: ${e && e.message}`;
    switch (e.status) {
      case 0: return 'the daemon cannot be reached (it may be restarting); try again in a moment.';
      case 400: return `the daemon refused the request as invalid: ${e.message}.`;
      case 401: return `not authorised: the daemon refused the token (${e.message}). Enter a valid token and try again.`;
      case 403: return `forbidden: this token may not do that (${e.message}).`;
      case 404: return `not found: ${name} is not registered on this daemon (any more); the config may have been reloaded. The list is being refreshed.`;
      case 409: {
        const hints = {
          trigger: 'A task runs once at a time, and a paused task does not start: wait for the run to end, cancel it, or resume the task.',
          cancel: 'Only a running task can be cancelled; its run may have ended already.',
          pause: 'Only a global task that is not already paused can be paused (a local task runs on every host by itself).',
          resume: 'Only a paused task can be resumed; its pause may have ended already.',
        };
        return `conflict: ${e.message}. ${hints[action] || ''}`.trim();
      }
      case 501: return `not available: ${e.message}`;
      case 503: return `the daemon is busy or not ready (${e.message}); try again shortly.`;
      default:
        if (e.status >= 500) return `the daemon failed (${e.status} ${e.name}: ${e.message}); its log has the details.`;
        return `${e.status} ${e.name}: ${e.message}`;
    }
  }

  const ACTION_WORDS = {
    trigger: ['Trigger', 'Triggered', 'it starts on a free host within a second'],
    cancel: ['Cancel', 'Cancelled', 'its processes get SIGTERM, then SIGKILL after 5 s'],
    pause: ['Pause', 'Paused', 'it starts on no host until resumed'],
    resume: ['Resume', 'Resumed', 'it is scheduled again from its next start'],
  };

  async function runAction(action, t, body) {
    const [verb, done, what] = ACTION_WORDS[action];
    try {
      await api(taskPaths[action](t.pluginId, t.taskId), { method: 'POST', body });
      if (action === 'trigger') t.note = { kind: 'triggered', at: Date.now() };
      if (action === 'cancel') t.note = { kind: 'cancelling', at: Date.now() };
      if (action === 'resume') t.pause = null;
      toast(`${done} ${t.taskId} (${t.pluginId}): ${what}.`);
      updateRow(t.key);
      refreshDetailSoon(t.key);
      scheduleListingRefresh(t.pluginId, 100);
      return true;
    } catch (e) {
      toast(`${verb} ${t.taskId} failed: ${explainError(e, action, t)}`, 'error');
      if (e.status === 404 || e.status === 409) scheduleListingRefresh(t.pluginId, 0);
      return false;
    }
  }

  // Shows the confirmation dialog; resolves with the pause body, true, or null when declined.
  function confirmAction(action, t) {
    const dialog = $('confirm');
    const isPause = action === 'pause';
    setText($('confirm-title'), isPause ? `Pause ${t.taskId}?` : `Cancel the run of ${t.taskId}?`);
    setText($('confirm-text'), isPause
      ? `${t.taskId} (${t.pluginId}) will start on no host, Backstage workers included, until it is resumed or until the time below. A run in progress is left to end unless you cancel it too.`
      : `The current run of ${t.taskId} (${t.pluginId}) is stopped: every process of a command gets SIGTERM, then SIGKILL 5 s later, and the run ends as cancelled. Its schedule is unchanged.`);
    $('pause-fields').hidden = !isPause;
    $('pause-reason').value = '';
    $('pause-until').value = '';
    $('pause-until').min = fmtInput(Date.now() + MINUTE);
    $('pause-cancel').checked = false;
    $('pause-cancel').disabled = !isRunning(t);
    setText($('pause-error'), '');
    setText($('confirm-yes'), isPause ? `Pause ${t.taskId}` : 'Cancel the run');
    setText($('confirm-no'), isPause ? 'Do not pause' : 'Keep it running');
    return new Promise((resolve) => {
      const form = $('confirm-form');
      const finish = (value) => {
        form.removeEventListener('submit', onSubmit);
        $('confirm-no').removeEventListener('click', onNo);
        dialog.removeEventListener('close', onClose);
        if (dialog.open) dialog.close();
        resolve(value);
      };
      const onSubmit = (event) => {
        event.preventDefault();
        if (!isPause) return finish(true);
        const body = { by: 'dashboard' };
        const reason = $('pause-reason').value.trim();
        if (reason) body.reason = reason;
        const untilText = $('pause-until').value;
        if (untilText) {
          const until = new Date(untilText).getTime();
          if (!Number.isFinite(until) || until <= Date.now()) {
            setText($('pause-error'), 'The end of the pause must be in the future.');
            $('pause-until').focus();
            return undefined;
          }
          body.until = new Date(until).toISOString();
        }
        if ($('pause-cancel').checked) body.cancel = true;
        return finish(body);
      };
      const onNo = () => finish(null);
      const onClose = () => finish(null);
      form.addEventListener('submit', onSubmit);
      $('confirm-no').addEventListener('click', onNo);
      dialog.addEventListener('close', onClose);
      dialog.showModal();
      (isPause ? $('pause-reason') : $('confirm-no')).focus();
    });
  }

  // Marks a button as not usable now (`why`: 'running' or 'paused'), or usable (null).
  function setBlocked(button, why) {
    if (why) {
      button.setAttribute('aria-disabled', 'true');
      button.dataset.blocked = why;
    } else if (button.hasAttribute('aria-disabled')) {
      button.removeAttribute('aria-disabled');
      delete button.dataset.blocked;
    }
  }
  // Says why a blocked button does nothing; returns whether it was blocked.
  function explainBlocked(button, key) {
    const why = button.dataset.blocked;
    if (!why) return false;
    const t = tasks.get(key);
    const name = t ? t.taskId : key;
    toast(why === 'running'
      ? `${name} is running: a task runs once at a time. Wait for the run to end, or cancel it.`
      : `${name} is paused: resume it first.`, 'info');
    return true;
  }

  const busy = new Set();
  async function act(action, key, button) {
    const t = tasks.get(key);
    if (!t || busy.has(`${key}|${action}`)) return;
    let body;
    if (action === 'cancel' || action === 'pause') {
      const answer = await confirmAction(action, t);
      if (!answer) {
        if (button && button.isConnected) button.focus();
        return;
      }
      if (action === 'pause') body = answer;
    }
    busy.add(`${key}|${action}`);
    if (button) button.setAttribute('aria-busy', 'true');
    try {
      await runAction(action, t, body);
    } finally {
      busy.delete(`${key}|${action}`);
      if (button) button.removeAttribute('aria-busy');
      if (button && button.isConnected && document.activeElement === document.body) button.focus();
    }
  }

  // ---------------------------------------------------------------- the detail dialog
  const detail = {
    key: null, runs: [], nextCursor: null, loading: false, error: null, open: new Set(),
    outputs: new Map(), items: new Map(), refreshTimer: null, liveTimer: null,
  };
  const detailDialog = $('detail');
  const detailBody = $('detail-body');

  function openDetail(key, runId) {
    const t = tasks.get(key);
    if (!t) return;
    if (detail.key !== key) {
      detail.key = key;
      detail.runs = [];
      detail.nextCursor = null;
      detail.error = null;
      detail.open = new Set();
      detail.outputs = new Map();
      detail.items = new Map();
      detailBody.textContent = '';
      detail.sections = null;
    }
    if (runId) detail.open.add(runId);
    renderDetail();
    if (!detailDialog.open) detailDialog.showModal();
    writeHash();
    loadDetailRuns();
  }
  function closeDetail() {
    if (detailDialog.open) detailDialog.close();
  }
  detailDialog.addEventListener('close', () => {
    detail.key = null;
    clearInterval(detail.liveTimer);
    detail.liveTimer = null;
    writeHash();
  });
  $('detail-close').addEventListener('click', closeDetail);
  detailDialog.addEventListener('click', (event) => {
    if (event.target === detailDialog) closeDetail(); // a click on the backdrop
  });

  async function loadDetailRuns(older = false) {
    const key = detail.key;
    const t = tasks.get(key);
    if (!t) return;
    const plugin = plugins.get(t.pluginId);
    if (plugin && plugin.noHistory) {
      detail.error = plugin.noHistoryReason || 'This plugin keeps no run history.';
      renderDetailRuns();
      return;
    }
    detail.loading = true;
    renderDetailRuns();
    try {
      const body = await api(taskPaths.runs(t.pluginId, t.taskId, 20, older ? detail.nextCursor : null));
      if (detail.key !== key) return;
      const runs = (body && body.runs) || [];
      if (older) {
        detail.runs = detail.runs.concat(runs.filter((r) => !detail.runs.some((x) => x.runId === r.runId)));
        detail.nextCursor = body.nextCursor || null;
      } else {
        const fresh = new Map(runs.map((r) => [r.runId, r]));
        const olderKept = detail.runs.filter((r) => !fresh.has(r.runId) &&
          (parseTime(r.startedAt) || 0) < (parseTime(runs.length ? runs[runs.length - 1].startedAt : null) || Infinity));
        detail.runs = runs.concat(olderKept);
        if (!olderKept.length) detail.nextCursor = body.nextCursor || null;
        if (!detail.runs.length) detail.nextCursor = null;
      }
      detail.error = null;
    } catch (e) {
      if (detail.key !== key) return;
      detail.error = e.status === 501 ? e.message : `Could not read the runs: ${explainError(e, 'load', t)}`;
    } finally {
      detail.loading = false;
    }
    renderDetailRuns();
  }

  function refreshDetailSoon(key) {
    if (detail.key !== key) return;
    clearTimeout(detail.refreshTimer);
    detail.refreshTimer = setTimeout(() => {
      if (detail.key !== key) return;
      renderDetail();
      loadDetailRuns();
    }, 200);
  }

  function dlRow(dl, term, value, cls) {
    const dt = el('dt', null, term);
    const dd = el('dd', cls || null);
    if (value instanceof Node) dd.append(value);
    else dd.textContent = value;
    dl.append(dt, dd);
  }

  function renderDetail() {
    const t = tasks.get(detail.key);
    if (!t) {
      detailBody.textContent = '';
      detailBody.append(el('p', null, 'This task is no longer registered.'));
      return;
    }
    const now = Date.now();
    setText($('detail-title'), t.taskId);
    if (!detail.sections) {
      detailBody.textContent = '';
      const sections = {};
      sections.actions = el('div', 'detail-actions');
      sections.state = el('div', 'detail-state');
      sections.settingsHeading = el('h3', null, 'Settings');
      sections.settings = el('dl', 'facts');
      sections.runsHeading = el('h3', null, 'Runs');
      sections.runsNote = el('p', 'note');
      sections.runs = el('ol', 'runs');
      sections.more = el('button', 'btn', 'Load older runs');
      sections.more.type = 'button';
      sections.more.addEventListener('click', () => loadDetailRuns(true));
      detailBody.append(sections.actions, sections.state, sections.settingsHeading, sections.settings,
        sections.runsHeading, sections.runsNote, sections.runs, sections.more);
      detail.sections = sections;
    }
    const s = detail.sections;

    // Actions, rebuilt only when what is possible changes (so the focus stays put).
    const running = isRunning(t);
    const wanted = ['trigger'];
    if (running) wanted.push('cancel');
    if (t.pause) wanted.push('resume');
    else if (t.scope === 'global') wanted.push('pause');
    const signature = `${wanted.join(',')}|${running}|${Boolean(t.pause && !t.pause.pending)}`;
    if (s.actions.dataset.signature !== signature) {
      const focusedAction = s.actions.contains(document.activeElement) ? document.activeElement.dataset.action : null;
      s.actions.dataset.signature = signature;
      s.actions.textContent = '';
      for (const action of wanted) {
        const button = el('button', `btn ${action === 'trigger' ? 'primary' : action === 'cancel' ? 'danger' : ''}`, ACTION_WORDS[action][0]);
        button.type = 'button';
        button.dataset.action = action;
        button.dataset.key = t.key;
        if (action === 'trigger') setBlocked(button, running ? 'running' : t.pause && !t.pause.pending ? 'paused' : null);
        s.actions.append(button);
      }
      if (focusedAction) {
        const again = s.actions.querySelector(`[data-action="${focusedAction}"]`) || s.actions.querySelector('button');
        if (again) again.focus();
      }
      if (t.scope === 'local') {
        s.actions.append(el('p', 'note', 'A local task runs on every host by itself: it cannot be paused.'));
      }
    }

    const state = stateWords(t, now);
    s.state.textContent = '';
    const badge = el('span', `badge s-${state.cls}`, state.label);
    s.state.append(badge, ' ', el('span', null, state.text));

    const cadence = cadenceOf(t);
    const dl = s.settings;
    dl.textContent = '';
    dlRow(dl, 'Plugin', t.pluginId);
    dlRow(dl, 'Scope', t.scope === 'global'
      ? 'global: one run at a time across the hosts sharing the database'
      : 'local: runs on every host, without overlapping itself');
    const cadenceNode = el('span');
    if (cadence.words) cadenceNode.append(el('span', null, cadence.words), ' ');
    cadenceNode.append(el('code', null, cadence.expr));
    if (cadence.kind === 'cron' && t.timeZone) cadenceNode.append(` in ${t.timeZone}`);
    dlRow(dl, 'Cadence', cadenceNode);
    dlRow(dl, 'Timeout', t.settings.timeoutAfterDuration
      ? `${isoToHuman(t.settings.timeoutAfterDuration)} (${t.settings.timeoutAfterDuration})` : '—');
    if (t.settings.initialDelayDuration) {
      dlRow(dl, 'Initial delay', `${isoToHuman(t.settings.initialDelayDuration)} (${t.settings.initialDelayDuration})`);
    }
    const next = nextStartOf(t, now);
    dlRow(dl, 'Next start', next === null ? nextWords(t, now).abs : `${fullTime(next)} (${relTime(next, now)})`);
    const upcoming = slotsOf(t, now, now + 7 * DAY, 5);
    if (upcoming.length > 1) dlRow(dl, 'Then', upcoming.slice(1).map((ms) => absTime(ms, now)).join(', '));
    if (running) {
      const started = startedAtOf(t);
      const run = runningRun(t);
      const timeout = timeoutMs(t);
      const bits = [];
      if (started) bits.push(`since ${fullTime(started)} (${humanSpan(now - started)})`);
      if (run && run.host) bits.push(`on ${run.host}`);
      if (started && timeout) bits.push(`times out at ${absTime(started + timeout, now)}`);
      dlRow(dl, 'Running', bits.join(', '));
    }
    if (t.pause) {
      const p = t.pause;
      const bits = [];
      bits.push(p.pending ? 'pending: takes effect when the current run ends' : 'in effect');
      if (p.by) bits.push(`by ${p.by}`);
      if (parseTime(p.since)) bits.push(`since ${fullTime(parseTime(p.since))}`);
      bits.push(parseTime(p.until) ? `until ${fullTime(parseTime(p.until))}` : 'until resumed');
      dlRow(dl, 'Pause', bits.join(', '));
      if (p.reason) dlRow(dl, 'Reason', p.reason);
    }
    const ts = t.taskState || {};
    if (ts.lastRunEndedAt) dlRow(dl, 'Last run ended', fullTime(parseTime(ts.lastRunEndedAt)));
    const lastError = parseError(ts.lastRunError);
    if (lastError) dlRow(dl, 'Last error', errorNode(lastError), 'error-text');
    if (t.workerState) dlRow(dl, 'This host', `worker ${t.workerState.status}`);
    renderDetailRuns();
  }

  function errorNode(error) {
    const node = el('span');
    node.append(el('strong', null, `${error.name || 'Error'}: `), error.message || '');
    if (error.attempt) node.append(` (attempt ${error.attempt})`);
    return node;
  }

  function traceIdOf(run) {
    return run.traceId || (run.trace && run.trace.traceId) || null;
  }

  function traceNode(traceId) {
    const code = el('code', null, traceId);
    if (!TRACE_URL.includes('{traceId}') || !/^https?:\/\//i.test(TRACE_URL)) return code;
    const link = el('a');
    link.href = TRACE_URL.split('{traceId}').join(encodeURIComponent(traceId));
    link.target = '_blank';
    link.rel = 'noopener';
    link.append(code);
    return link;
  }

  function renderDetailRuns() {
    if (!detail.sections) return;
    const s = detail.sections;
    const t = tasks.get(detail.key);
    const now = Date.now();
    if (detail.error) setText(s.runsNote, detail.error);
    else if (detail.loading && !detail.runs.length) setText(s.runsNote, 'Loading runs…');
    else if (!detail.runs.length) setText(s.runsNote, 'No runs recorded yet.');
    else setText(s.runsNote, `Newest first. Open a run for its output.`);
    s.more.hidden = !detail.nextCursor;
    s.more.disabled = detail.loading;
    const seen = new Set();
    let previous = null;
    for (const run of detail.runs) {
      seen.add(run.runId);
      let item = detail.items.get(run.runId);
      if (!item) {
        item = makeRunItem(run.runId);
        detail.items.set(run.runId, item);
      }
      fillRunItem(item, run, now, t);
      const expectedPrev = previous;
      if ((expectedPrev ? expectedPrev.nextSibling : s.runs.firstChild) !== item) {
        if (expectedPrev) expectedPrev.after(item);
        else s.runs.prepend(item);
      }
      previous = item;
    }
    for (const [runId, item] of detail.items) {
      if (!seen.has(runId)) {
        item.remove();
        detail.items.delete(runId);
      }
    }
    const anyLiveOpen = detail.runs.some((r) => r.outcome === 'running' && detail.open.has(r.runId));
    if (anyLiveOpen && !detail.liveTimer) {
      detail.liveTimer = setInterval(() => {
        for (const run of detail.runs) {
          if (run.outcome === 'running' && detail.open.has(run.runId)) loadOutput(run.runId);
        }
      }, 2000);
    } else if (!anyLiveOpen && detail.liveTimer) {
      clearInterval(detail.liveTimer);
      detail.liveTimer = null;
    }
  }

  function makeRunItem(runId) {
    const li = el('li', 'run');
    const details = el('details');
    const summary = el('summary');
    const refs = {
      outcome: el('span', 'badge'), when: el('span', 'when'), dur: el('span', 'dur'), meta: el('span', 'meta'),
    };
    summary.append(refs.outcome, refs.when, refs.dur, refs.meta);
    refs.facts = el('dl', 'facts');
    refs.outputHeading = el('h4', null, 'Output (tail)');
    refs.output = el('pre', 'output');
    refs.output.tabIndex = 0;
    refs.outputNote = el('p', 'note');
    details.append(summary, refs.facts, refs.outputHeading, refs.outputNote, refs.output);
    details.addEventListener('toggle', () => {
      if (details.open) {
        detail.open.add(runId);
        loadOutput(runId);
      } else {
        detail.open.delete(runId);
      }
      renderDetailRuns();
    });
    li.append(details);
    li.details = details;
    li.refs = refs;
    return li;
  }

  function fillRunItem(item, run, now, t) {
    const r = item.refs;
    setText(r.outcome, outcomeLabel(run.outcome));
    setClass(r.outcome, `badge o-${run.outcome}`);
    const started = parseTime(run.startedAt);
    setText(r.when, started ? absTime(started, now) : '');
    r.when.title = started ? fullTime(started) : '';
    setText(r.dur, run.durationMs !== null && run.durationMs !== undefined
      ? humanSpan(run.durationMs) : (run.outcome === 'running' && started ? `${humanSpan(now - started)} so far` : ''));
    const trigger = run.attempt > 1 ? `${run.trigger}, attempt ${run.attempt}` : run.trigger;
    setText(r.meta, [trigger, run.host].filter(Boolean).join(' · '));
    if (detail.open.has(run.runId) !== item.details.open) item.details.open = detail.open.has(run.runId);

    const dl = r.facts;
    dl.textContent = '';
    const runIdNode = el('code', null, run.runId);
    dlRow(dl, 'Run id', runIdNode);
    if (run.host) dlRow(dl, 'Host', run.pid ? `${run.host} (pid ${run.pid})` : run.host);
    dlRow(dl, 'Trigger', `${run.trigger}${run.attempt ? `, attempt ${run.attempt}` : ''}`);
    if (started) dlRow(dl, 'Started', fullTime(started));
    if (parseTime(run.slot)) dlRow(dl, 'Due', `${fullTime(parseTime(run.slot))}${run.startLagMs !== null && run.startLagMs !== undefined ? `, started ${humanSpan(run.startLagMs)} late` : ''}`);
    if (parseTime(run.endedAt)) dlRow(dl, 'Ended', fullTime(parseTime(run.endedAt)));
    const ends = [];
    if (run.exitCode !== null && run.exitCode !== undefined) ends.push(`exit code ${run.exitCode}`);
    if (run.signal !== null && run.signal !== undefined) ends.push(`signal ${run.signal}${run.signal === 15 ? ' (SIGTERM)' : run.signal === 9 ? ' (SIGKILL)' : ''}`);
    if (run.httpStatus !== null && run.httpStatus !== undefined) ends.push(`HTTP status ${run.httpStatus}`);
    if (ends.length) dlRow(dl, 'Ended with', ends.join(', '));
    if (run.error) dlRow(dl, 'Error', errorNode(run.error), 'error-text');
    const traceId = traceIdOf(run);
    if (traceId) dlRow(dl, 'Trace id', traceNode(traceId));

    const output = detail.outputs.get(run.runId);
    if (!item.details.open) return;
    if (!output) {
      setText(r.outputNote, 'Loading output…');
      setText(r.output, '');
      r.output.hidden = true;
    } else if (output.error) {
      setText(r.outputNote, output.error);
      r.output.hidden = true;
    } else {
      const bits = [];
      if (output.live) bits.push('live: refreshed every 2 s while open');
      if (output.bytes > output.text.length) bits.push(`last ${output.text.length} of ${output.bytes} bytes`);
      if (!output.text) bits.push('it printed nothing');
      setText(r.outputNote, bits.join('; '));
      r.output.hidden = !output.text;
      if (r.output.textContent !== output.text) {
        const atBottom = r.output.scrollTop + r.output.clientHeight >= r.output.scrollHeight - 4;
        r.output.textContent = output.text;
        if (atBottom) r.output.scrollTop = r.output.scrollHeight;
      }
    }
    void t;
  }

  async function loadOutput(runId) {
    const key = detail.key;
    const t = tasks.get(key);
    if (!t) return;
    try {
      const run = await api(taskPaths.run(t.pluginId, runId));
      if (detail.key !== key) return;
      detail.outputs.set(runId, { text: run.output || '', bytes: run.outputBytes || 0, live: Boolean(run.live) });
      const i = detail.runs.findIndex((r) => r.runId === runId);
      if (i >= 0) {
        const copy = Object.assign({}, run);
        delete copy.output;
        detail.runs[i] = Object.assign({}, detail.runs[i], copy);
      }
    } catch (e) {
      if (detail.key !== key) return;
      detail.outputs.set(runId, { error: `Could not read the output: ${explainError(e, 'load', t)}` });
    }
    renderDetailRuns();
  }

  // ---------------------------------------------------------------- live events
  const connection = $('connection');
  let connectionState = '';
  function setConnection(state, text) {
    if (connectionState === state && $('connection-text').textContent === text) return;
    connectionState = state;
    connection.dataset.state = state;
    setText($('connection-text'), text);
  }

  const earlyEvents = [];
  function applyEvent(type, data) {
    if (!loadedOnce) {
      // The first listing is still on its way: these are applied once it is in.
      if (type !== 'reset' && earlyEvents.length < 1000) earlyEvents.push([type, data]);
      return;
    }
    if (type === 'reset') {
      resetAll();
      return;
    }
    if (!data || !data.pluginId) return;
    const key = keyOf(data.pluginId, data.taskId);
    const t = tasks.get(key);
    if (!plugins.has(data.pluginId)) {
      scheduleLoadAll();
      return;
    }
    if (!t) {
      scheduleListingRefresh(data.pluginId, 0);
      return;
    }
    const now = Date.now();
    t.eventAt = now;
    switch (type) {
      case 'run.started': {
        const run = Object.assign({ outcome: 'running', endedAt: null, durationMs: null }, data);
        t.live = run;
        t.note = null;
        t.taskState = Object.assign({}, t.taskState, { status: 'running', startedAt: data.startedAt });
        foldRun(key, run);
        scheduleListingRefresh(t.pluginId);
        break;
      }
      case 'run.ended': {
        t.live = null;
        t.note = null;
        t.last = data;
        t.taskState = Object.assign({}, t.taskState, { status: 'idle', lastRunEndedAt: data.endedAt });
        if (t.pause && t.pause.pending) t.pause = Object.assign({}, t.pause, { pending: false });
        foldRun(key, data);
        scheduleListingRefresh(t.pluginId);
        break;
      }
      case 'task.triggered':
        t.note = { kind: 'triggered', at: now };
        break;
      case 'task.cancelled':
        t.note = { kind: 'cancelling', at: now };
        break;
      case 'task.paused':
        t.pause = {
          by: data.by, reason: data.reason, until: data.until, since: new Date(now).toISOString(),
          pending: isRunning(t) && !data.cancelRun,
        };
        if (data.cancelRun && isRunning(t)) {
          t.pause.pending = true;
          t.note = { kind: 'cancelling', at: now };
        }
        scheduleListingRefresh(t.pluginId);
        break;
      case 'task.resumed':
        t.pause = null;
        scheduleListingRefresh(t.pluginId);
        break;
      case 'task.retrying':
        t.note = { kind: 'retrying', at: now, until: now + (data.delayMs || 0) };
        scheduleListingRefresh(t.pluginId, (data.delayMs || 0) + 200);
        break;
      case 'task.registered':
        scheduleListingRefresh(t.pluginId, 0);
        break;
      default:
        return;
    }
    updateRow(key, true);
    if (filters.state || filters.outcome || filters.sort) scheduleRefilter();
    else scheduleSummary();
    refreshDetailSoon(key);
  }

  let loadAllTimer = null;
  function scheduleLoadAll() {
    if (loadAllTimer) return;
    loadAllTimer = setTimeout(() => {
      loadAllTimer = null;
      loadAll();
    }, 300);
  }

  function resetAll() {
    for (const t of tasks.values()) {
      t.live = null;
      t.note = null;
    }
    for (const h of histories.values()) h.stale = true;
    loadAll().then(() => {
      const [first, last] = visibleRange();
      requestHistories(view.slice(first, last + 1));
      if (detail.key) refreshDetailSoon(detail.key);
    });
  }

  // Reads the event stream with fetch (EventSource cannot send the token), resuming with
  // Last-Event-ID, backing off while the daemon is away, and re-reading everything after a gap.
  async function followEvents() {
    let lastEventId = null;
    let failures = 0;
    for (;;) {
      const controller = new AbortController();
      let watchdog = null;
      const kick = () => {
        clearTimeout(watchdog);
        watchdog = setTimeout(() => controller.abort(), 40 * SECOND); // keepalives come every 15 s
      };
      try {
        if (AUTH_MODE === 'token' && !token) {
          setConnection('connecting', 'Waiting for a token…');
          await askForToken();
        }
        setConnection(failures ? 'reconnecting' : 'connecting', failures ? 'Reconnecting…' : 'Connecting…');
        const headers = { Accept: 'text/event-stream' };
        const sent = token;
        if (sent) headers.Authorization = `Bearer ${sent}`;
        if (lastEventId) headers['Last-Event-ID'] = lastEventId;
        kick();
        const response = await fetch(apiUrl('.stagehand/v1/events'), {
          headers, cache: 'no-store', credentials: 'same-origin', signal: controller.signal,
        });
        if (response.status === 401) {
          const reason = explainUnauthorized(await errorFrom(response), sent);
          clearTimeout(watchdog);
          if (token === sent) {
            forgetToken();
            await askForToken(reason);
          }
          continue;
        }
        if (!response.ok || !response.body) throw new ApiError(response.status, 'HTTP', response.statusText);
        const wasDown = failures > 0;
        failures = 0;
        setConnection('live', 'Live');
        if (wasDown && !lastEventId) resetAll();
        else if (wasDown) {
          // The stream replays what was missed, or sends reset; the listing may still have moved.
          for (const id of plugins.keys()) scheduleListingRefresh(id, 500);
        }
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = '';
        let eventType = '';
        let data = [];
        let pendingId = null;
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          kick();
          buffer += decoder.decode(value, { stream: true });
          let newline;
          while ((newline = buffer.search(/\r\n|\r|\n/)) >= 0) {
            if (buffer[newline] === '\r' && newline === buffer.length - 1) break; // maybe \r\n split
            const line = buffer.slice(0, newline);
            buffer = buffer.slice(newline + (buffer.startsWith('\r\n', newline) ? 2 : 1));
            if (line === '') {
              if (pendingId !== null) lastEventId = pendingId;
              if (data.length) {
                let parsed = null;
                try {
                  parsed = JSON.parse(data.join('\n'));
                } catch (e) { /* a malformed event is skipped */ }
                applyEvent(eventType || 'message', parsed);
              }
              eventType = '';
              data = [];
              pendingId = null;
              continue;
            }
            if (line.startsWith(':')) continue;
            const colon = line.indexOf(':');
            const field = colon < 0 ? line : line.slice(0, colon);
            let fieldValue = colon < 0 ? '' : line.slice(colon + 1);
            if (fieldValue.startsWith(' ')) fieldValue = fieldValue.slice(1);
            if (field === 'event') eventType = fieldValue;
            else if (field === 'data') data.push(fieldValue);
            else if (field === 'id' && !fieldValue.includes('\0')) pendingId = fieldValue;
          }
        }
        throw new Error('stream ended');
      } catch (e) {
        clearTimeout(watchdog);
        failures++;
        const wait = Math.min(10 * SECOND, 500 * 2 ** Math.min(failures - 1, 5)) * (0.8 + Math.random() * 0.4);
        setConnection('reconnecting', failures > 1 ? `Reconnecting… (attempt ${failures})` : 'Reconnecting…');
        await sleep(wait);
      } finally {
        clearTimeout(watchdog);
      }
    }
  }

  // ---------------------------------------------------------------- filters and the URL
  function readHash() {
    const params = new URLSearchParams(location.hash.slice(1));
    filters.q = (params.get('q') || '').toLowerCase();
    filters.plugin = params.get('plugin') || '';
    filters.scope = params.get('scope') || '';
    filters.state = params.get('state') || '';
    filters.outcome = params.get('outcome') || '';
    filters.sort = params.get('sort') || '';
    const windowMs = Number(params.get('window'));
    filters.window = [10 * MINUTE, HOUR, 6 * HOUR, DAY].includes(windowMs) ? windowMs : HOUR;
    $('f-search').value = params.get('q') || '';
    $('f-plugin').value = filters.plugin;
    $('f-scope').value = filters.scope;
    $('f-state').value = filters.state;
    $('f-outcome').value = filters.outcome;
    $('f-sort').value = filters.sort;
    $('f-window').value = String(filters.window);
    return params.get('task');
  }
  function writeHash() {
    const params = new URLSearchParams();
    if ($('f-search').value) params.set('q', $('f-search').value);
    for (const name of ['plugin', 'scope', 'state', 'outcome', 'sort']) {
      if (filters[name]) params.set(name, filters[name]);
    }
    if (filters.window !== HOUR) params.set('window', String(filters.window));
    if (detail.key) params.set('task', detail.key);
    const hash = params.toString();
    const url = `${location.pathname}${location.search}${hash ? `#${hash}` : ''}`;
    if (url !== `${location.pathname}${location.search}${location.hash}`) history.replaceState(null, '', url);
  }

  function onFilterChange() {
    filters.q = $('f-search').value.trim().toLowerCase();
    filters.plugin = $('f-plugin').value;
    filters.scope = $('f-scope').value;
    filters.state = $('f-state').value;
    filters.outcome = $('f-outcome').value;
    filters.sort = $('f-sort').value;
    const windowMs = Number($('f-window').value);
    const windowChanged = windowMs !== filters.window;
    filters.window = windowMs;
    list.scrollTop = 0;
    writeHash();
    refilter();
    if (windowChanged) drawAxis();
  }

  // ---------------------------------------------------------------- wiring
  $('filters').addEventListener('input', onFilterChange);
  $('filters').addEventListener('submit', (event) => event.preventDefault());

  list.addEventListener('scroll', () => requestRender(), { passive: true });
  list.addEventListener('click', (event) => {
    const row = event.target.closest('.row');
    if (!row) return;
    const key = row.dataset.key;
    const button = event.target.closest('button[data-action]');
    if (button) {
      if (button.dataset.action === 'open') openDetail(key);
      else if (!explainBlocked(button, key)) act(button.dataset.action, key, button);
      return;
    }
    if (event.target.closest('canvas')) {
      // A click on the timeline opens the run under the pointer.
      const run = runUnder(key, event.target, event.clientX);
      if (tasks.has(key)) openDetail(key, run ? run.runId : undefined);
    }
  });
  // Returns the run of `key` drawn under `clientX` on `canvas` (within 6 px), or null.
  function runUnder(key, canvas, clientX) {
    const rect = canvas.getBoundingClientRect();
    const now = Date.now();
    const { start, span } = timelineWindow(now);
    const at = start + ((clientX - rect.left) / rect.width) * span;
    const h = histories.get(key);
    let best = null;
    let bestGap = (span / rect.width) * 6;
    for (const run of (h ? h.runs : [])) {
      const s = parseTime(run.startedAt);
      const e = parseTime(run.endedAt) || now;
      const gap = at < s ? s - at : at > e ? at - e : 0;
      if (gap <= bestGap) {
        best = run;
        bestGap = gap;
      }
    }
    return best;
  }
  list.addEventListener('mousemove', (event) => {
    if (event.target.tagName !== 'CANVAS') return;
    const row = event.target.closest('.row');
    const run = row && runUnder(row.dataset.key, event.target, event.clientX);
    const now = Date.now();
    event.target.title = run
      ? `${outcomeLabel(run.outcome)} · ${absTime(parseTime(run.startedAt), now)}${run.durationMs !== null && run.durationMs !== undefined ? ` · ${humanSpan(run.durationMs)}` : ''}${run.host ? ` · ${run.host}` : ''} (click for its output)`
      : 'Click for the runs and their output';
  }, { passive: true });
  detailBody.addEventListener('click', (event) => {
    const button = event.target.closest('button[data-action]');
    if (button && detail.key && !explainBlocked(button, detail.key)) act(button.dataset.action, detail.key, button);
  });

  // Arrow keys move between rows (the list only holds the rows in view).
  list.addEventListener('keydown', (event) => {
    const row = event.target.closest && event.target.closest('.row');
    if (!row || event.altKey || event.ctrlKey || event.metaKey) return;
    const index = view.indexOf(row.dataset.key);
    if (index < 0) return;
    const page = Math.max(1, Math.floor(list.clientHeight / rowHeight) - 1);
    const moves = { ArrowDown: 1, ArrowUp: -1, PageDown: page, PageUp: -page, Home: -Infinity, End: Infinity };
    if (!(event.key in moves)) return;
    if ((event.key === 'Home' || event.key === 'End') && event.target.tagName === 'INPUT') return;
    event.preventDefault();
    const target = clamp(index + moves[event.key], 0, view.length - 1);
    const top = target * rowHeight;
    if (top < list.scrollTop) list.scrollTop = top;
    else if (top + rowHeight > list.scrollTop + list.clientHeight) list.scrollTop = top + rowHeight - list.clientHeight;
    renderQueued = false;
    render();
    const targetRow = rendered.get(view[target]);
    const column = event.target.dataset.action === 'open' ? '.task-button'
      : event.target.dataset.action ? `[data-action="${event.target.dataset.action}"]` : '.task-button';
    const focusTarget = (targetRow && (targetRow.querySelector(`${column}:not([hidden]):not([disabled])`) ||
      targetRow.querySelector('.task-button')));
    if (focusTarget) focusTarget.focus();
  });

  const resizeObserver = new ResizeObserver(() => {
    const before = rowHeight;
    readRowHeight();
    measureTimeline();
    syncHeaderGutter();
    if (before !== rowHeight) {
      for (const row of rendered.values()) row.index = -1;
    }
    requestRender(true);
  });
  resizeObserver.observe(list);

  function syncHeaderGutter() {
    const gutter = list.offsetWidth - list.clientWidth;
    document.querySelector('.thead').style.paddingRight = `${Math.max(0, gutter)}px`;
  }

  const scheme = window.matchMedia('(prefers-color-scheme: dark)');
  scheme.addEventListener('change', () => {
    readColors();
    requestRender(true);
  });

  // Once a second: relative times and elapsed times; the timelines every other second.
  let tick = 0;
  setInterval(() => {
    if (document.hidden) return;
    tick++;
    const now = Date.now();
    const redraw = tick % 2 === 0;
    for (const [key, row] of rendered) fillRow(row, tasks.get(key), now, redraw);
    if (redraw) drawAxis();
    if (detail.key && tick % 5 === 0) renderDetail();
  }, SECOND);

  // The safety net: a slow full re-read, in case an event was missed.
  setInterval(() => {
    if (document.hidden) return;
    for (const h of histories.values()) h.stale = true;
    loadAll().then(() => scheduleHistoryFetch());
  }, SAFETY_REFRESH_MS);
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && loadedOnce) loadAll();
  });

  $('token-dialog').addEventListener('close', () => {
    if (tokenPrompt && !token) $('signin-banner').hidden = false;
  });

  // Shows the sign-in banner when a token prompt was dismissed.
  function addSigninBanner() {
    const banner = el('div', 'banner');
    banner.id = 'signin-banner';
    banner.setAttribute('role', 'note');
    banner.hidden = true;
    banner.append('This daemon needs an API token to show its tasks. ');
    const button = el('button', 'btn small primary', 'Enter the token');
    button.type = 'button';
    button.addEventListener('click', () => {
      const dialog = $('token-dialog');
      if (!dialog.open) dialog.showModal();
      $('token-input').focus();
    });
    banner.append(button);
    $('dev-banner').after(banner);
  }

  // ---------------------------------------------------------------- start
  // For tests and the curious: the cadence in words as this page writes it.
  Object.defineProperty(window, 'stagehandDashboard', {
    value: Object.freeze({ cadenceWords: (cadence, zone) => cadenceInfo(cadence, zone || null).words }),
  });

  function start() {
    addSigninBanner();
    const openTask = readHash();
    // The requests first: the layout reads below wait for styles, the network need not.
    loadAll().then(() => {
      if (openTask && tasks.has(openTask)) openDetail(openTask);
    });
    followEvents();
    if (AUTH_MODE === 'development') $('dev-banner').hidden = false;
    setText($('zone-note'), `Times are in your zone, ${VIEWER_ZONE}.`);
    readColors();
    readRowHeight();
    syncHeaderGutter();
    drawAxis();
  }
  start();
})();
