// The Weir console: a single page over the HTTP API (no framework, no build step). Each page
// builds its layout once and refreshes its data every REFRESH_MS; rates are computed from the
// change between two refreshes. Everything shown comes from the API, as `weir topic describe`
// and `weir group describe` would show it.
'use strict';

const REFRESH_MS = 2000;
const HISTORY_POINTS = 150; // 5 minutes of lag history at REFRESH_MS
const DESCRIBE_MAX = 50; // topics or groups described per refresh at most
const PALETTE = ['#2f6fde', '#d92d20', '#12b76a', '#f79009', '#7a5af8', '#06aed4', '#ee46bc', '#667085'];

const view = document.getElementById('view');
const statusLine = document.getElementById('status');
let current = null; // { refresh, timer }

// ---- helpers -----------------------------------------------------------------------------

async function api(path, options = {}) {
  const response = await fetch(path, {
    ...options,
    headers: options.body ? { 'content-type': 'application/json' } : undefined,
  });
  const text = await response.text();
  let body = null;
  if (text) {
    try { body = JSON.parse(text); } catch (_) { body = text; }
  }
  if (!response.ok) {
    const detail = body && body.error ? `${body.error.code}: ${body.error.message}` : `HTTP ${response.status}`;
    throw new Error(detail);
  }
  return body;
}

// Builds an element; children are nodes or text (never parsed as HTML).
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'class') el.className = value;
    else el.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function table(headers, rows, options = {}) {
  const head = h('tr', {}, headers.map(([label, cls]) => h('th', { class: cls }, label)));
  const body = rows.length
    ? rows
    : [h('tr', {}, h('td', { colspan: headers.length, class: 'muted' }, options.empty || 'nothing yet'))];
  return h('div', { class: 'scroll' }, h('table', { id: options.id }, h('thead', {}, head), h('tbody', {}, body)));
}

function fill(container, ...children) {
  container.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
}

function card(label, value, id) {
  return h('div', { class: 'card' }, h('div', { class: 'label' }, label), h('div', { class: 'value', id }, value));
}

function pill(text, kind) { return h('span', { class: `pill ${kind}` }, text); }

function bytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

// A record's timestamp as ISO 8601, or the raw number when it is beyond what a Date holds.
function isoTime(ms) {
  const date = new Date(ms);
  return Number.isNaN(date.getTime()) ? String(ms) : date.toISOString();
}

function rate(n, unit) {
  if (n === null || n === undefined || Number.isNaN(n)) return '—';
  if (unit === 'B') return `${bytes(n)}/s`;
  return `${n < 10 ? n.toFixed(1) : Math.round(n).toLocaleString()}/s`;
}

function num(n) { return n === null || n === undefined ? '—' : n.toLocaleString(); }

function message(el, text, ok) {
  el.className = `message ${ok ? 'ok' : 'error'}`;
  el.textContent = text;
}

function setStatus(error) {
  statusLine.className = error ? 'status error' : 'status';
  statusLine.textContent = error ? `refresh failed: ${error.message}` : `updated ${new Date().toLocaleTimeString()}`;
}

// Remembers the previous sample of counters, to turn them into rates.
class Rates {
  constructor() { this.previous = new Map(); }
  // Per-second change of `value` under `key` since the last call, or null the first time.
  of(key, value, now) {
    const before = this.previous.get(key);
    this.previous.set(key, { value, now });
    if (value === null || value === undefined || !before || before.value === null) return null;
    const seconds = (now - before.now) / 1000;
    if (seconds <= 0) return null;
    return Math.max(0, (value - before.value) / seconds);
  }
}

// Describes every topic (at most DESCRIBE_MAX), with per-partition rates.
async function describeTopics(rates, includeInternal) {
  const { topics } = await api('/topics');
  const names = topics.filter((t) => includeInternal || !t.internal).map((t) => t.name).slice(0, DESCRIBE_MAX);
  const described = await Promise.all(names.map((n) => api(`/topics/${encodeURIComponent(n)}`).catch(() => null)));
  const now = Date.now();
  return described.filter(Boolean).map((topic) => {
    for (const p of topic.partitions) {
      const key = `${topic.name}/${p.partition}`;
      p.records_per_s = rates.of(`${key}/hw`, p.high_watermark, now);
      p.bytes_in_per_s = rates.of(`${key}/in`, p.bytes_in_total, now);
      p.bytes_out_per_s = rates.of(`${key}/out`, p.bytes_out_total, now);
    }
    return topic;
  });
}

function sum(values) {
  let total = null;
  for (const v of values) if (v !== null && v !== undefined) total = (total || 0) + v;
  return total;
}

// ---- pages -------------------------------------------------------------------------------

function overviewPage() {
  const cards = h('div', { class: 'cards' });
  const brokers = h('div');
  const unhealthy = h('div');
  const hung = h('div');
  const quotas = h('div');
  fill(view, h('h1', {}, 'Cluster'), cards, h('h2', {}, 'Brokers'), brokers, h('h2', {}, 'Partitions not fully replicated'), unhealthy,
    h('h2', {}, 'Hung transactions'), hung, h('h2', {}, 'Client quotas'), quotas);
  return async () => {
    const c = await api('/cluster');
    const kind = { healthy: 'ok', degraded: 'warn', partitions_offline: 'bad' }[c.health] || 'warn';
    const alive = c.brokers.filter((b) => !b.fenced).length;
    fill(cards,
      h('div', { class: 'card' }, h('div', { class: 'label' }, 'Health'), h('div', { class: 'value', id: 'cluster-health' }, pill(c.health, kind))),
      card('Brokers alive', `${alive} / ${c.brokers.length}`, 'brokers-alive'),
      card('Controller', c.controller),
      card('Topics', c.topics, 'topic-count'),
      card('Partitions', c.partitions),
      card('Under-replicated', c.under_replicated.length, 'under-replicated'),
      card('Offline', c.offline_partitions),
      card('Hung transactions', c.hung_transactions.length, 'hung-count'),
      card('Quorum epoch', c.quorum ? c.quorum.epoch : '—'));
    fill(brokers, table(
      [['Node'], ['Address'], ['Rack'], ['State'], ['Quorum log end', 'num']],
      c.brokers.map((b) => {
        const voter = c.quorum && c.quorum.voters.find((v) => v.node_id === b.node_id);
        return h('tr', { 'data-node': b.node_id },
          h('td', {}, b.node_id, b.node_id === c.controller ? ' (controller)' : ''),
          h('td', {}, b.address || '—'), h('td', {}, b.rack || '—'),
          h('td', {}, b.fenced ? pill('fenced', 'bad') : pill('alive', 'ok')),
          h('td', { class: 'num' }, voter ? num(voter.log_end_offset) : '—'));
      }), { id: 'brokers' }));
    fill(unhealthy, table(
      [['Topic'], ['Partition', 'num'], ['Leader', 'num'], ['Replicas'], ['ISR']],
      c.under_replicated.map((p) => h('tr', {},
        h('td', {}, h('a', { href: `#/topics/${encodeURIComponent(p.topic)}` }, p.topic)),
        h('td', { class: 'num' }, p.partition),
        h('td', { class: 'num' }, p.leader < 0 ? 'none' : p.leader),
        h('td', {}, p.replicas.join(', ')), h('td', {}, p.isr.join(', ')))),
      { empty: 'every partition has its full ISR' }));
    fill(hung, table(
      [['Topic'], ['Partition', 'num'], ['Leader', 'num'], ['Producer', 'num'], ['Epoch', 'num'], ['Open from offset', 'num'], ['Idle', 'num']],
      c.hung_transactions.map((t) => h('tr', { 'data-partition': `${t.topic}/${t.partition}` },
        h('td', {}, h('a', { href: `#/topics/${encodeURIComponent(t.topic)}` }, t.topic)),
        h('td', { class: 'num' }, t.partition),
        h('td', { class: 'num' }, t.leader),
        h('td', { class: 'num' }, t.producer_id),
        h('td', { class: 'num' }, t.producer_epoch),
        h('td', { class: 'num' }, num(t.start_offset)),
        h('td', { class: 'num' }, `${(t.idle_ms / 1000).toFixed(1)} s`))),
      { id: 'hung-transactions', empty: 'no transaction is open past transaction.max.timeout.ms' }),
      c.hung_transactions.length ? h('p', { class: 'message muted' },
        'read_committed consumers stop at each; end one with an abort marker: weir txn abort --topic TOPIC --partition P --start-offset OFFSET') : null,
      ...c.leaders_not_asked.map((why) => h('p', { class: 'message muted' }, `leader ${why} (not asked)`)));
    fill(quotas,
      c.client_quotas === null
        ? h('p', { class: 'message muted' }, 'describing client quotas needs DESCRIBE_CONFIGS on the cluster')
        : table([['Entity'], ['Quotas']],
          c.client_quotas.map((q) => h('tr', { 'data-entity': q.entity },
            h('td', {}, q.entity),
            h('td', {}, Object.entries(q.quotas).map(([key, value]) => `${key}=${value}`).join(', ')))),
          { id: 'client-quotas', empty: 'no client quota is set (weir quota set)' }),
      h('p', { class: 'message muted' }, `Clients throttled on node ${c.served_by} since it started:`),
      table([['Quota'], ['Throttled responses', 'num'], ['Throttled for', 'num']],
        c.throttling.map((t) => h('tr', { 'data-quota': t.quota },
          h('td', {}, { produce: 'producer_byte_rate', fetch: 'consumer_byte_rate', request: 'request_percentage', controller_mutation: 'controller_mutation_rate' }[t.quota] || t.quota),
          h('td', { class: 'num' }, num(t.responses)),
          h('td', { class: 'num' }, `${t.seconds.toFixed(1)} s`))),
        { id: 'throttling' }));
  };
}

function topicsPage() {
  const rates = new Rates();
  const list = h('div');
  const result = h('div', { class: 'message' });
  const name = h('input', { name: 'name', required: true, placeholder: 'orders', pattern: '[a-zA-Z0-9._\\-]+' });
  const partitions = h('input', { name: 'partitions', type: 'number', min: 1, max: 10000, placeholder: 'default' });
  const replication = h('input', { name: 'replication_factor', type: 'number', min: 1, placeholder: 'default' });
  const configs = h('input', { name: 'configs', placeholder: 'retention.ms=86400000, cleanup.policy=compact', size: 40 });
  const form = h('form', { class: 'inline', id: 'create-topic', onsubmit: async (event) => {
    event.preventDefault();
    const body = { name: name.value.trim() };
    if (partitions.value) body.partitions = Number(partitions.value);
    if (replication.value) body.replication_factor = Number(replication.value);
    if (configs.value.trim()) {
      body.configs = {};
      for (const pair of configs.value.split(',')) {
        const [k, ...v] = pair.split('=');
        if (k.trim()) body.configs[k.trim()] = v.join('=').trim();
      }
    }
    try {
      const topic = await api('/topics', { method: 'POST', body: JSON.stringify(body) });
      message(result, `created ${topic.name} with ${topic.partitions.length} partitions`, true);
      form.reset();
      refresh().catch(setStatus);
    } catch (error) { message(result, error.message, false); }
  } },
  h('label', {}, 'Name', name), h('label', {}, 'Partitions', partitions), h('label', {}, 'Replication factor', replication),
  h('label', {}, 'Configs', configs), h('button', { type: 'submit' }, 'Create topic'));
  fill(view, h('h1', {}, 'Topics'), h('div', { class: 'panel' }, h('h2', { style: 'margin-top:0' }, 'Create a topic'), form, result), list);
  const refresh = async () => {
    const topics = await describeTopics(rates, true);
    fill(list, table(
      [['Topic'], ['Partitions', 'num'], ['Replication', 'num'], ['Under-replicated', 'num'], ['Records', 'num'], ['Size', 'num'], ['In records/s', 'num'], ['In bytes/s', 'num'], ['Out bytes/s', 'num'], ['']],
      topics.map((t) => {
        const ps = t.partitions;
        return h('tr', { 'data-topic': t.name },
          h('td', {}, h('a', { href: `#/topics/${encodeURIComponent(t.name)}` }, t.name)),
          h('td', { class: 'num' }, ps.length),
          h('td', { class: 'num' }, Math.max(0, ...ps.map((p) => p.replicas.length))),
          h('td', { class: 'num' }, ps.filter((p) => p.under_replicated).length),
          h('td', { class: 'num' }, num(ps.reduce((n, p) => n + p.high_watermark - p.log_start_offset, 0))),
          h('td', { class: 'num' }, bytes(sum(ps.map((p) => p.size_bytes)))),
          h('td', { class: 'num' }, rate(sum(ps.map((p) => p.records_per_s)))),
          h('td', { class: 'num' }, rate(sum(ps.map((p) => p.bytes_in_per_s)), 'B')),
          h('td', { class: 'num' }, rate(sum(ps.map((p) => p.bytes_out_per_s)), 'B')),
          h('td', {}, h('a', { href: `#/browse/${encodeURIComponent(t.name)}` }, 'records')));
      }), { id: 'topics', empty: 'no topics yet' }));
  };
  return refresh;
}

function topicPage(name) {
  const rates = new Rates();
  const partitions = h('div');
  const configs = h('div');
  const result = h('div', { class: 'message' });
  const key = h('input', { name: 'key', required: true, placeholder: 'retention.ms' });
  const value = h('input', { name: 'value', placeholder: '3600000' });
  let loadConfigs;
  const change = async (body) => {
    try {
      await api(`/topics/${encodeURIComponent(name)}/configs`, { method: 'PATCH', body: JSON.stringify(body) });
      message(result, 'config changed', true);
      loadConfigs().catch(setStatus);
    } catch (error) { message(result, error.message, false); }
  };
  const form = h('form', { class: 'inline', id: 'alter-config', onsubmit: (event) => {
    event.preventDefault();
    change({ set: { [key.value.trim()]: value.value } });
  } }, h('label', {}, 'Config', key), h('label', {}, 'Value', value), h('button', { type: 'submit' }, 'Set'),
  h('button', { type: 'button', class: 'secondary', onclick: () => key.value.trim() && change({ delete: [key.value.trim()] }) }, 'Reset to default'));
  fill(view, h('h1', {}, 'Topic ', name, ' ', h('a', { href: `#/browse/${encodeURIComponent(name)}`, style: 'font-size:14px' }, 'browse records')),
    h('h2', {}, 'Partitions'), partitions,
    h('h2', {}, 'Configs'), h('div', { class: 'panel' }, form, result), configs);
  loadConfigs = async () => {
    const { configs: entries } = await api(`/topics/${encodeURIComponent(name)}/configs`);
    entries.sort((a, b) => (a.source === 'TOPIC_CONFIG' ? 0 : 1) - (b.source === 'TOPIC_CONFIG' ? 0 : 1) || a.name.localeCompare(b.name));
    fill(configs, table([['Name'], ['Value'], ['Source']], entries.map((c) => h('tr', { 'data-config': c.name },
      h('td', {}, c.name), h('td', {}, c.value === null ? '—' : c.value),
      h('td', {}, c.source === 'TOPIC_CONFIG' ? pill('override', 'warn') : h('span', { class: 'muted' }, c.source.toLowerCase()))))));
  };
  loadConfigs().catch(setStatus);
  return async () => {
    const topic = await api(`/topics/${encodeURIComponent(name)}`);
    const now = Date.now();
    fill(partitions, table(
      [['Partition', 'num'], ['Leader', 'num'], ['Replicas'], ['ISR'], ['State'], ['Start', 'num'], ['High watermark', 'num'], ['Size', 'num'], ['In records/s', 'num'], ['In bytes/s', 'num'], ['Out bytes/s', 'num']],
      topic.partitions.map((p) => {
        const k = `${p.partition}`;
        return h('tr', { 'data-partition': p.partition },
          h('td', { class: 'num' }, p.partition),
          h('td', { class: 'num' }, p.leader < 0 ? 'none' : p.leader),
          h('td', {}, p.replicas.join(', ')), h('td', {}, p.isr.join(', ')),
          h('td', {}, p.leader < 0 ? pill('offline', 'bad') : p.under_replicated ? pill('under-replicated', 'warn') : pill('in sync', 'ok')),
          h('td', { class: 'num' }, num(p.log_start_offset)), h('td', { class: 'num' }, num(p.high_watermark)),
          h('td', { class: 'num' }, bytes(p.size_bytes)),
          h('td', { class: 'num' }, rate(rates.of(`${k}/hw`, p.high_watermark, now))),
          h('td', { class: 'num' }, rate(rates.of(`${k}/in`, p.bytes_in_total, now), 'B')),
          h('td', { class: 'num' }, rate(rates.of(`${k}/out`, p.bytes_out_total, now), 'B')));
      }), { id: 'partitions' }));
  };
}

function hotPage() {
  const rates = new Rates();
  const summary = h('p', { class: 'muted' }, 'Measuring: rates appear after the second refresh.');
  const lane = h('p', { class: 'muted' });
  const list = h('div');
  fill(view, h('h1', {}, 'Hot partitions'),
    h('p', { class: 'muted' }, 'Every partition by records appended per second. A partition taking at least three times the median rate, and at least a quarter of all traffic, is marked hot. '
      + 'A broker appends a partition that took a quarter or more of its bytes over the last second (at least 1 MiB/s, beside others) at a lower priority, so that it cannot starve the rest: marked held back.'),
    summary, lane, list);
  return async () => {
    const [topics, cluster] = await Promise.all([describeTopics(rates, false), api('/cluster').catch(() => null)]);
    const heldBack = new Map((cluster ? cluster.hot_partitions : []).map((p) => [`${p.topic}/${p.partition}`, p.bytes_per_second]));
    fill(lane, cluster === null
      ? 'Which partitions a broker holds back needs DESCRIBE on the cluster.'
      : h('span', { id: 'held-back-summary' }, heldBack.size
        ? `Node ${cluster.served_by} holds back ${[...heldBack].map(([key, b]) => `${key} (${rate(b, 'B')})`).join(', ')}.`
        : `Node ${cluster.served_by} holds back no partition.`));
    const rows = topics.flatMap((t) => t.partitions.map((p) => ({ topic: t.name, ...p })));
    const measured = rows.filter((r) => r.records_per_s !== null);
    if (!measured.length) { fill(list, table([['Topic']], [], { empty: 'measuring…' })); return; }
    rows.sort((a, b) => (b.records_per_s || 0) - (a.records_per_s || 0));
    const ratesSorted = measured.map((r) => r.records_per_s).sort((a, b) => a - b);
    const median = ratesSorted[Math.floor(ratesSorted.length / 2)];
    const total = ratesSorted.reduce((a, b) => a + b, 0);
    const top = rows[0].records_per_s || 0;
    const isHot = (r) => r.records_per_s > 1 && r.records_per_s >= 3 * median && r.records_per_s >= total / 4;
    const hot = rows.filter(isHot);
    fill(summary, `${rows.length} partitions, ${rate(total)} records in total; median ${rate(median)}. `,
      hot.length ? h('strong', { id: 'hot-summary' }, `${hot.length} hot: ${hot.map((r) => `${r.topic}/${r.partition}`).join(', ')}`) : h('span', { id: 'hot-summary' }, 'none hot'));
    fill(list, table(
      [['Topic'], ['Partition', 'num'], ['Leader', 'num'], ['Records/s', 'num'], ['Share', 'num'], [''], ['In bytes/s', 'num'], ['Out bytes/s', 'num'], ['']],
      rows.map((r) => {
        const key = `${r.topic}/${r.partition}`;
        const share = total > 0 ? (r.records_per_s || 0) / total : 0;
        const width = top > 0 ? Math.round(100 * (r.records_per_s || 0) / top) : 0;
        return h('tr', { class: isHot(r) ? 'hot' : null, 'data-partition': key, 'data-held-back': heldBack.has(key) ? 'true' : null },
          h('td', {}, h('a', { href: `#/topics/${encodeURIComponent(r.topic)}` }, r.topic)),
          h('td', { class: 'num' }, r.partition), h('td', { class: 'num' }, r.leader),
          h('td', { class: 'num' }, rate(r.records_per_s)), h('td', { class: 'num' }, `${(share * 100).toFixed(0)}%`),
          h('td', {}, h('div', { class: 'bar' }, h('span', { style: `width:${width}%` }))),
          h('td', { class: 'num' }, rate(r.bytes_in_per_s, 'B')), h('td', { class: 'num' }, rate(r.bytes_out_per_s, 'B')),
          h('td', {}, isHot(r) ? pill('hot', 'bad') : '', heldBack.has(key) ? pill('held back', 'warn') : ''));
      }), { id: 'hot-partitions' }));
  };
}

function groupsPage() {
  const list = h('div');
  fill(view, h('h1', {}, 'Consumer groups'), list);
  return async () => {
    const { groups } = await api('/groups');
    const described = await Promise.all(groups.slice(0, DESCRIBE_MAX).map((g) => api(`/groups/${encodeURIComponent(g.group_id)}`).catch(() => null)));
    fill(list, table([['Group'], ['State'], ['Protocol'], ['Members', 'num'], ['Total lag', 'num']],
      groups.map((g, i) => {
        const d = described[i];
        return h('tr', { 'data-group': g.group_id },
          h('td', {}, h('a', { href: `#/groups/${encodeURIComponent(g.group_id)}` }, g.group_id)),
          h('td', {}, g.state), h('td', {}, d ? d.protocol || '—' : '—'),
          h('td', { class: 'num' }, d ? d.members.length : '—'), h('td', { class: 'num' }, d ? num(d.total_lag) : '—'));
      }), { id: 'groups', empty: 'no consumer groups yet' }));
  };
}

// Draws lines of [time, value] points as an SVG chart.
function chart(series) {
  const ns = 'http://www.w3.org/2000/svg';
  const width = 1000, height = 220, pad = 36;
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
  svg.setAttribute('class', 'chart');
  svg.setAttribute('preserveAspectRatio', 'none');
  const points = series.flatMap((s) => s.points);
  if (!points.length) return svg;
  const t0 = Math.min(...points.map((p) => p[0])), t1 = Math.max(...points.map((p) => p[0]), t0 + 1);
  const top = Math.max(1, ...points.map((p) => p[1]));
  const x = (t) => pad + (width - 2 * pad) * (t - t0) / (t1 - t0);
  const y = (v) => height - pad / 2 - (height - pad) * v / top;
  const line = (x1, y1, x2, y2, color) => {
    const l = document.createElementNS(ns, 'line');
    Object.entries({ x1, y1, x2, y2, stroke: color, 'stroke-width': 1 }).forEach(([k, v]) => l.setAttribute(k, v));
    svg.append(l);
  };
  const label = (text, tx, ty) => {
    const t = document.createElementNS(ns, 'text');
    t.setAttribute('x', tx); t.setAttribute('y', ty); t.setAttribute('font-size', 11); t.setAttribute('fill', '#667085');
    t.textContent = text;
    svg.append(t);
  };
  line(pad, y(0), width - pad, y(0), '#d0d5dd');
  line(pad, y(top), width - pad, y(top), '#eaecf0');
  label(top.toLocaleString(), 2, y(top) + 4);
  label('0', 2, y(0) + 4);
  series.forEach((s) => {
    const path = document.createElementNS(ns, 'polyline');
    path.setAttribute('fill', 'none');
    path.setAttribute('stroke', s.color);
    path.setAttribute('stroke-width', s.width || 2);
    path.setAttribute('points', s.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(' '));
    path.setAttribute('data-series', s.name);
    svg.append(path);
  });
  return svg;
}

function groupPage(group) {
  const history = new Map(); // series name -> [[time, lag]]
  const cards = h('div', { class: 'cards' });
  const plot = h('div');
  const members = h('div');
  const partitions = h('div');
  fill(view, h('h1', {}, 'Group ', group), cards, h('h2', {}, 'Lag over time'), plot, h('h2', {}, 'Members'), members, h('h2', {}, 'Lag by partition'), partitions);
  const record = (name, value, now) => {
    if (value === null || value === undefined) return;
    const points = history.get(name) || [];
    points.push([now, value]);
    if (points.length > HISTORY_POINTS) points.shift();
    history.set(name, points);
  };
  return async () => {
    const g = await api(`/groups/${encodeURIComponent(group)}`);
    const now = Date.now();
    record('total', g.total_lag, now);
    for (const p of g.partitions) record(`${p.topic}/${p.partition}`, p.lag, now);
    fill(cards, card('State', g.state, 'group-state'), card('Members', g.members.length, 'group-members'),
      card('Total lag', num(g.total_lag), 'group-lag'), card('Assignor', g.protocol || '—'));
    const lines = [...history.entries()].filter(([name]) => name !== 'total').slice(0, PALETTE.length - 1)
      .map(([name, points], i) => ({ name, points, color: PALETTE[i + 1], width: 1.5 }));
    lines.unshift({ name: 'total', points: history.get('total') || [], color: PALETTE[0], width: 3 });
    fill(plot, chart(lines), h('div', { class: 'legend' }, lines.map((l) => h('span', {}, h('i', { style: `background:${l.color}` }), l.name))));
    fill(members, table([['Member'], ['Client'], ['Host'], ['Assigned']], g.members.map((m) => h('tr', {},
      h('td', {}, m.member_id), h('td', {}, m.client_id), h('td', {}, m.client_host),
      h('td', {}, m.assignment.map((a) => `${a.topic} [${a.partitions.join(', ')}]`).join('; ')))), { empty: 'no members: nothing is consuming' }));
    fill(partitions, table([['Topic'], ['Partition', 'num'], ['Committed', 'num'], ['Log end', 'num'], ['Lag', 'num'], ['Member']],
      g.partitions.map((p) => h('tr', { 'data-partition': `${p.topic}/${p.partition}` },
        h('td', {}, p.topic), h('td', { class: 'num' }, p.partition), h('td', { class: 'num' }, num(p.committed_offset)),
        h('td', { class: 'num' }, num(p.log_end_offset)), h('td', { class: 'num lag' }, num(p.lag)), h('td', {}, p.member_id || '—'))),
      { id: 'group-partitions' }));
  };
}

// Decodes base64 to bytes.
function decode(b64) {
  const raw = atob(b64);
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
  return out;
}

function show(b64, format) {
  if (b64 === null || b64 === undefined) return h('span', { class: 'muted' }, 'null');
  const data = decode(b64);
  if (format === 'hex') {
    const hex = [...data].map((b) => b.toString(16).padStart(2, '0'));
    const lines = [];
    for (let i = 0; i < hex.length; i += 16) lines.push(hex.slice(i, i + 16).join(' '));
    return h('pre', {}, lines.join('\n'));
  }
  let text;
  try { text = new TextDecoder('utf-8', { fatal: true }).decode(data); } catch (_) {
    return h('pre', { class: 'muted', title: 'not UTF-8: shown as hex' }, [...data].map((b) => b.toString(16).padStart(2, '0')).join(' '));
  }
  if (format === 'json') {
    try { return h('pre', {}, JSON.stringify(JSON.parse(text), null, 2)); } catch (_) { return h('pre', { title: 'not JSON' }, text); }
  }
  return h('pre', {}, text);
}

function browsePage(initialTopic) {
  const records = h('div');
  const result = h('div', { class: 'message' });
  const topic = h('select', { name: 'topic' });
  const partition = h('input', { name: 'partition', type: 'number', min: 0, value: 0, style: 'width:90px' });
  const from = h('select', { name: 'from' }, h('option', { value: 'earliest' }, 'earliest'), h('option', { value: 'offset' }, 'offset'), h('option', { value: 'timestamp' }, 'time'));
  const position = h('input', { name: 'position', placeholder: 'offset, or 2026-12-03T10:00:00Z', size: 26 });
  const max = h('input', { name: 'max', type: 'number', min: 1, max: 1000, value: 50, style: 'width:80px' });
  const format = h('select', { name: 'format' }, ['text', 'json', 'hex'].map((f) => h('option', { value: f }, f)));
  let last = null;
  let next = null;
  const render = () => {
    if (!last) return;
    fill(records, table([['Offset', 'num'], ['Time'], ['Key'], ['Value'], ['Headers']],
      last.records.map((r) => h('tr', { 'data-offset': r.offset },
        h('td', { class: 'num' }, r.offset), h('td', {}, isoTime(r.timestamp)),
        h('td', {}, show(r.key, format.value)), h('td', {}, show(r.value, format.value)),
        h('td', {}, r.headers.map((hd) => h('div', {}, `${hd.key}: `, show(hd.value, format.value)))))),
      { id: 'records', empty: 'no records there' }));
  };
  const load = async (offset) => {
    const params = new URLSearchParams({ max: max.value || '50', encoding: 'base64' });
    if (offset !== undefined) params.set('offset', offset);
    else if (from.value === 'offset') params.set('offset', position.value.trim() || '0');
    else if (from.value === 'timestamp') {
      const t = /^\d+$/.test(position.value.trim()) ? Number(position.value.trim()) : Date.parse(position.value.trim());
      if (Number.isNaN(t)) { message(result, 'give the time as ms since the epoch or an ISO date', false); return; }
      params.set('timestamp', t);
    }
    try {
      last = await api(`/topics/${encodeURIComponent(topic.value)}/partitions/${partition.value || 0}/records?${params}`);
      next = last.next_offset;
      message(result, `${last.records.length} records; high watermark ${num(last.high_watermark)}`, true);
      render();
    } catch (error) { message(result, error.message, false); }
  };
  format.addEventListener('change', render);
  const form = h('form', { class: 'inline', id: 'browse', onsubmit: (event) => { event.preventDefault(); load(); } },
    h('label', {}, 'Topic', topic), h('label', {}, 'Partition', partition), h('label', {}, 'From', from),
    h('label', {}, 'Offset or time', position), h('label', {}, 'Max', max), h('label', {}, 'Show as', format),
    h('button', { type: 'submit' }, 'Read'),
    h('button', { type: 'button', class: 'secondary', onclick: () => next !== null && load(next) }, 'Next page'));
  fill(view, h('h1', {}, 'Records'), h('div', { class: 'panel' }, form, result), records);
  api('/topics').then(({ topics }) => {
    fill(topic, topics.map((t) => h('option', { value: t.name, selected: t.name === initialTopic }, t.name)));
    if (initialTopic) load();
  }).catch((error) => message(result, error.message, false));
  return null; // nothing refreshes by itself: records are read on demand
}

// ---- routing -----------------------------------------------------------------------------

const routes = [
  [/^#?\/?$/, 'overview', () => overviewPage()],
  [/^#\/topics$/, 'topics', () => topicsPage()],
  [/^#\/topics\/(.+)$/, 'topics', (m) => topicPage(decodeURIComponent(m[1]))],
  [/^#\/hot$/, 'hot', () => hotPage()],
  [/^#\/groups$/, 'groups', () => groupsPage()],
  [/^#\/groups\/(.+)$/, 'groups', (m) => groupPage(decodeURIComponent(m[1]))],
  [/^#\/browse(?:\/(.+))?$/, 'browse', (m) => browsePage(m[1] ? decodeURIComponent(m[1]) : null)],
];

function route() {
  if (current && current.timer) clearInterval(current.timer);
  current = null;
  const hash = location.hash || '#/';
  const found = routes.find(([pattern]) => pattern.test(hash));
  const [pattern, nav, build] = found || routes[0];
  for (const link of document.querySelectorAll('nav a')) link.classList.toggle('active', link.dataset.page === nav);
  const refresh = build(hash.match(pattern));
  if (!refresh) { statusLine.textContent = ''; return; }
  const run = () => refresh().then(() => setStatus(null), setStatus);
  current = { refresh, timer: setInterval(run, REFRESH_MS) };
  run();
}

window.addEventListener('hashchange', route);
route();
