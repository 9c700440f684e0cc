// Drives the Weir web console in headless Chromium (Debian's `chromium`, through
// playwright-core) for compat/tests/test_console.py. One scenario per run:
//
//   node check.mjs BASE_URL SCENARIO SCREENSHOT_DIR [ARG]
//
//   pages         every page loads and renders its data, with no console error
//   create-topic  the create form makes topic ARG, which then appears in the list
//   lag           the group page of ARG (GROUP:MIN) shows a total lag of at least MIN
//   hot           the hot-partition view marks partition ARG (TOPIC/PARTITION) hot, alone
//   held-back     the hot-partition view marks partition ARG held back by the broker, alone
//   browse        the record browser shows topic ARG's records as text, JSON and hex
//   hung          the overview lists a hung transaction on partition ARG (TOPIC/PARTITION)
//   quotas        the overview lists client quota entity ARG and the throttling of this node
//
// Prints one JSON line: {"ok": bool, "errors": [...], "screenshots": [...], ...}; exits 1 on
// failure. Console errors, page errors and failed requests count as errors.
import { chromium } from 'playwright-core';
import path from 'node:path';

const [base, scenario, shots, arg] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
const TIMEOUT = 20000;

const result = { ok: false, scenario, errors: [], screenshots: [] };
const browser = await chromium.launch({ executablePath, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
const context = await browser.newContext({ viewport: { width: 1360, height: 900 } });
const page = await context.newPage();
page.setDefaultTimeout(TIMEOUT);
page.on('console', (m) => { if (m.type() === 'error') result.errors.push(`console: ${m.text()}`); });
page.on('pageerror', (e) => result.errors.push(`page: ${e.message}`));
page.on('requestfailed', (r) => result.errors.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));

async function shot(name) {
  const file = path.join(shots, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  result.screenshots.push(file);
}

async function open(hash, ready) {
  await page.goto(`${base}/${hash}`);
  await page.waitForSelector(ready);
  // Two refreshes, so rates and charts have data.
  await page.waitForTimeout(4500);
}

async function text(selector) { return (await page.textContent(selector)) || ''; }

try {
  if (scenario === 'pages') {
    const started = Date.now();
    await page.goto(`${base}/`, { waitUntil: 'load' });
    await page.waitForSelector('#brokers tbody tr[data-node]');
    result.first_render_ms = Date.now() - started;
    const weight = await page.evaluate(() => performance.getEntriesByType('resource')
      .concat(performance.getEntriesByType('navigation'))
      .filter((e) => !e.name.includes('/cluster') && !e.name.includes('/topics') && !e.name.includes('/groups'))
      .reduce((n, e) => n + (e.transferSize || e.encodedBodySize || 0), 0));
    result.page_weight_bytes = weight;
    const nav = await page.evaluate(() => performance.getEntriesByType('navigation')[0].toJSON());
    result.load_event_ms = Math.round(nav.loadEventEnd);
    await page.waitForTimeout(2500);
    result.cluster_health = (await text('#cluster-health')).trim();
    await shot('cluster');
    await open('#/topics', '#topics tbody tr[data-topic]');
    await shot('topics');
    const topic = await page.getAttribute('#topics tbody tr[data-topic]', 'data-topic');
    await open(`#/topics/${encodeURIComponent(topic)}`, '#partitions tbody tr[data-partition]');
    await shot('topic');
    await open('#/hot', '#hot-partitions');
    await shot('hot-partitions');
    await open('#/groups', '#groups');
    await shot('groups');
    await open(`#/browse/${encodeURIComponent(topic)}`, '#records');
    await shot('records');
    result.ok = true;
  } else if (scenario === 'create-topic') {
    await open('#/topics', '#create-topic');
    await page.fill('#create-topic input[name=name]', arg);
    await page.fill('#create-topic input[name=partitions]', '3');
    await page.fill('#create-topic input[name=configs]', 'retention.ms=3600000');
    await shot('create-topic-form');
    await page.click('#create-topic button[type=submit]');
    await page.waitForSelector(`#topics tr[data-topic="${arg}"]`);
    result.message = (await text('.message')).trim();
    await shot('create-topic-done');
    result.ok = true;
  } else if (scenario === 'lag') {
    const [group, min] = arg.split(':');
    await open(`#/groups/${encodeURIComponent(group)}`, '#group-partitions');
    const deadline = Date.now() + TIMEOUT;
    let lag = -1;
    while (Date.now() < deadline) {
      lag = Number((await text('#group-lag')).replace(/[^0-9]/g, '') || -1);
      if (lag >= Number(min)) break;
      await page.waitForTimeout(500);
    }
    result.lag = lag;
    result.chart_points = await page.evaluate(() => (document.querySelector('polyline[data-series=total]')?.getAttribute('points') || '').split(' ').filter(Boolean).length);
    await shot('group-lag');
    result.ok = lag >= Number(min);
  } else if (scenario === 'hot') {
    await open('#/hot', '#hot-partitions');
    const deadline = Date.now() + TIMEOUT;
    let hot = [];
    while (Date.now() < deadline) {
      hot = await page.$$eval('#hot-partitions tr.hot', (rows) => rows.map((r) => r.getAttribute('data-partition')));
      if (hot.includes(arg)) break;
      await page.waitForTimeout(500);
    }
    result.hot = hot;
    result.summary = (await text('#hot-summary')).trim();
    await shot('hot-flooded');
    result.ok = hot.length === 1 && hot[0] === arg;
  } else if (scenario === 'held-back') {
    await open('#/hot', '#hot-partitions');
    await page.waitForSelector(`#hot-partitions tr[data-partition="${arg}"][data-held-back]`);
    result.held_back = await page.$$eval('#hot-partitions tr[data-held-back]', (rows) => rows.map((r) => r.getAttribute('data-partition')));
    result.summary = (await text('#held-back-summary')).trim();
    await shot('hot-held-back');
    result.ok = result.held_back.length === 1 && result.held_back[0] === arg;
  } else if (scenario === 'hung') {
    await page.goto(`${base}/`, { waitUntil: 'load' });
    await page.waitForSelector(`#hung-transactions tr[data-partition="${arg}"]`);
    result.hung = (await text('#hung-count')).trim();
    result.health = (await text('#cluster-health')).trim();
    result.row = await page.$$eval(`#hung-transactions tr[data-partition="${arg}"] td`, (cells) => cells.map((c) => c.textContent));
    await shot('hung-transaction');
    result.ok = true;
  } else if (scenario === 'quotas') {
    await page.goto(`${base}/`, { waitUntil: 'load' });
    await page.waitForSelector(`#client-quotas tr[data-entity="${arg}"]`);
    result.quotas = await page.$$eval(`#client-quotas tr[data-entity="${arg}"] td`, (cells) => cells.map((c) => c.textContent));
    result.throttling = await page.$$eval('#throttling tr[data-quota]',
      (rows) => rows.map((r) => [...r.querySelectorAll('td')].map((c) => c.textContent)));
    await shot('client-quotas');
    result.ok = true;
  } else if (scenario === 'browse') {
    await open(`#/browse/${encodeURIComponent(arg)}`, '#records tbody tr[data-offset]');
    result.rows = await page.$$eval('#records tbody tr[data-offset]', (rows) => rows.length);
    result.text = (await text('#records tbody tr[data-offset] td:nth-child(4)')).trim();
    await shot('records-text');
    await page.selectOption('#browse select[name=format]', 'json');
    result.json = (await text('#records tbody tr[data-offset] td:nth-child(4)')).trim();
    await shot('records-json');
    await page.selectOption('#browse select[name=format]', 'hex');
    result.hex = (await text('#records tbody tr[data-offset] td:nth-child(4)')).trim();
    await shot('records-hex');
    result.ok = result.rows > 0;
  } else {
    throw new Error(`unknown scenario ${scenario}`);
  }
} catch (error) {
  result.errors.push(`check: ${error.message}`);
  try { await shot(`${scenario}-failure`); } catch (_) { /* the page may be gone */ }
}
await browser.close();
if (result.errors.length) result.ok = false;
console.log(JSON.stringify(result));
process.exit(result.ok ? 0 : 1);
