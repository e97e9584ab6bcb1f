// The chat page at / driven in headless chromium (run.sh starts the server). Every check reads
// the DOM or the requests the page sent, never pixels. Usage: node test.mjs URL API_KEY
import { chromium } from 'playwright-core';

const [url, key] = process.argv.slice(2);
const started = Date.now();
let failed = false;
function check(cond, what, detail) {
  if (!cond) {
    console.log('FAIL ' + what + (detail === undefined ? '' : ': ' + JSON.stringify(detail)));
    failed = true;
    throw new Error(what);
  }
}
const ok = (what) => console.log('ok   ' + what);

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
                                        headless: true });
try {
  const page = await browser.newPage();
  page.setDefaultTimeout(15000);
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  // Content-Security-Policy violations, recorded from before the page's own script runs.
  await page.addInitScript(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation',
                              (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));
  });
  const bodies = [];  // the JSON bodies the page posted to /v1/chat/completions
  page.on('request', (r) => {
    if (r.url().endsWith('/v1/chat/completions')) bodies.push(r.postDataJSON());
  });

  // --- The page, its headers and its policy.
  const resp = await page.goto(url + '/');
  check(resp.status() === 200, 'GET / is 200', resp.status());
  const headers = resp.headers();
  check(headers['content-type'] === 'text/html; charset=utf-8', 'content type',
        headers['content-type']);
  check((headers['content-security-policy'] || '').startsWith("default-src 'none'"), 'CSP',
        headers['content-security-policy']);
  // The server wants a key: the page says so until it is given, then shows the model.
  await page.waitForFunction(() => /unavailable/.test(document.getElementById('model-info').textContent));
  await page.fill('#api-key', key);
  await page.dispatchEvent('#api-key', 'change');
  await page.waitForFunction(() => /^tiny · olmoe/.test(document.getElementById('model-info').textContent));
  const info = await page.textContent('#model-info');
  check(info.includes('8 of 64 experts') && info.includes('routing lynx:alpha=3,beta=4'),
        'model info', info);
  // The policy is enforced: an injected inline script does not run (and is reported).
  const injected = await page.evaluate(() => {
    const s = document.createElement('script');
    s.textContent = 'window.__injected = 1';
    document.body.appendChild(s);
    return window.__injected;
  });
  check(injected === undefined, 'an injected inline script is blocked by the CSP');
  await page.waitForFunction(() => window.__csp.length > 0);
  const csp = await page.evaluate(() => window.__csp);
  check(csp.length === 1 && csp[0].startsWith('script-src'), 'only the injected script was refused',
        csp);
  ok('GET /: 200, text/html, CSP enforced (page script runs, an injected one does not), key asked');

  // Helpers over the last assistant message.
  const last = () => page.evaluate(() => {
    const m = [...document.querySelectorAll('.msg.assistant')].pop();
    const q = (c) => m.querySelector(':scope > .' + c);
    return { state: m.dataset.state, finish: m.dataset.finishReason,
             content: q('content').textContent, reasoning: q('reasoning').textContent,
             error: q('error').textContent, stats: q('stats').textContent,
             data: { ...q('stats').dataset }, elements: q('content').children.length };
  });
  const waitEnd = () => page.waitForFunction(() => {
    const m = [...document.querySelectorAll('.msg.assistant')].pop();
    return m && m.dataset.state !== 'streaming';
  });
  async function say(text) {
    const n = (await page.$$('.msg.assistant')).length;
    await page.fill('#input', text);
    await page.press('#input', 'Enter');  // Enter sends
    await page.waitForFunction((n) => document.querySelectorAll('.msg.assistant').length === n,
                               n + 1);
  }

  // --- Turn 1: a streamed answer with its stats line.
  await page.fill('#system', 'You are a test.');
  await page.fill('#temperature', '0');
  await page.fill('#max-tokens', '48');
  await page.fill('#extra', '{"ignore_eos": true}');
  await say('Hello there');
  await waitEnd();
  let m = await last();
  check(m.state === 'done' && m.finish === 'length', 'turn 1 finished', m);
  check(m.content.length > 0, 'turn 1 text shown', m);
  const d = m.data;
  check(Number(d.tps) > 0 && Number.isFinite(Number(d.tps)), 'tokens/s > 0', d);
  check(Number(d.ttftMs) > 0, 'time to first token', d);
  check(Number(d.completionTokens) === 48, 'completion tokens', d);
  // One request alone: lynx at batch 1 is exact top-k, 8 experts in the one MoE layer.
  check(Number(d.distinct) === 8, 'distinct experts per step', d);
  check(d.levels === '1:lynx:alpha=3,beta=4', 'routing level', d);
  check(/TTFT \d+ ms · [\d.]+ tok\/s · .* · 8\.00 distinct experts\/step \(exact top-k: 8\.00\) · routing L1 lynx:alpha=3,beta=4 \(47 tok\)/
          .test(m.stats), 'stats line', m.stats);
  check(JSON.stringify(bodies[0].messages.map((x) => x.role)) === '["system","user"]' &&
        bodies[0].stream === true && bodies[0].max_tokens === 48 && bodies[0].temperature === 0,
        'turn 1 request', bodies[0]);
  const p1 = Number(d.promptTokens), answer1 = m.content;
  ok(`turn 1: ${m.content.length} characters streamed; ${m.stats}`);

  // --- Turn 2: the history goes with it.
  await say('And again');
  await waitEnd();
  m = await last();
  check(m.state === 'done', 'turn 2 finished', m);
  const b2 = bodies[1];
  check(JSON.stringify(b2.messages.map((x) => x.role)) === '["system","user","assistant","user"]' &&
        b2.messages[2].content === answer1, 'turn 2 sends the history', b2.messages);
  // The server rendered them all: the prompt grew by the first answer and the new question
  // (without the history it would be about as long as the first).
  const p2 = Number(m.data.promptTokens);
  check(p2 > p1 + 9, 'server prompt grew with the history', { p1, p2 });
  ok(`turn 2: 4 messages sent, prompt ${p1} -> ${p2} tokens`);

  // --- Stop: a long answer, seen growing while it streams, then aborted.
  await page.fill('#max-tokens', '30000');
  await say('Write a lot');
  const growing = async (n) => {
    try {
      await page.waitForFunction((n) => {
        const m = [...document.querySelectorAll('.msg.assistant')].pop();
        return m.dataset.state !== 'streaming' || m.querySelector('.content').textContent.length > n;
      }, n);
    } catch (e) {
      check(false, 'the long answer streams', await last());
    }
  };
  await growing(0);
  let a = await last();
  check(a.state === 'streaming', 'text shown while the answer streams', a.state);
  const seen = a.content.length;
  await growing(seen + 20);
  a = await last();
  check(a.state === 'streaming' && a.content.length > seen, 'the text grows while it streams',
        { seen, now: a.content.length });
  check(await page.isEnabled('#stop') && !(await page.isEnabled('#send')), 'stop enabled');
  await page.click('#stop');
  await waitEnd();
  m = await last();
  check(m.state === 'stopped' && m.stats.includes('stopped'), 'stopped', m);
  check(!(await page.isEnabled('#stop')) && await page.isEnabled('#send'), 'send enabled again');
  // The server cancelled it (the abort reached it) rather than generating on.
  const metrics = async () => (await (await fetch(url + '/metrics',
      { headers: { Authorization: 'Bearer ' + key } })).text());
  let cancelled = 0;
  for (let i = 0; i < 100 && cancelled < 1; ++i) {
    const mm = (await metrics()).match(/^lynx_requests_finished_total\{reason="cancelled"\} (\d+)/m);
    cancelled = mm ? Number(mm[1]) : 0;
    if (cancelled < 1) await new Promise((r) => setTimeout(r, 50));
  }
  check(cancelled === 1, 'the server cancelled the stopped request', cancelled);
  ok(`stop: ${seen} then ${a.content.length} characters while streaming, aborted, cancelled on the server`);

  // --- An error from the server is shown, and the turn stays out of the history.
  await page.fill('#max-tokens', '-3');
  await say('bad');
  await waitEnd();
  m = await last();
  check(m.state === 'error' && m.error.startsWith('HTTP 400: ') && m.error.includes('max_tokens'),
        'the 400 is shown', m);
  check((await page.$$('.msg.user.unsent')).length === 1, 'the failed message is marked');
  ok('error: ' + m.error);

  // --- Model text that looks like HTML is shown as text. The server's grammar field forces
  // the model to write exactly this (a real answer through the real stream).
  const html = '<b>x</b><script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>';
  await page.fill('#max-tokens', '200');
  await page.fill('#extra', JSON.stringify({ grammar: 'root ::= "' + html + '"' }));
  await say('Say HTML');
  await waitEnd();
  m = await last();
  check(m.state === 'done' && m.content === html, 'HTML text shown literally', m);
  check(m.elements === 0, 'no element made from model text', m.elements);
  check(await page.evaluate(() => window.__pwned === undefined &&
        document.querySelectorAll('#messages b, #messages script, #messages img').length === 0),
        'nothing of it ran or rendered');
  check(bodies.at(-1).messages.length === 8, 'history after a stop and an error',
        bodies.at(-1).messages.map((x) => x.role));
  ok('HTML-like model text shown literally: ' + m.content);

  // --- Reasoning (Qwen3's <think> block, returned as reasoning_content) shown apart.
  await page.fill('#extra', JSON.stringify({ grammar: 'root ::= "<think>pondering</think>The answer."' }));
  await say('Think first');
  await waitEnd();
  m = await last();
  check(m.state === 'done' && m.reasoning.trim() === 'pondering' && m.content.trim() === 'The answer.',
        'reasoning shown apart from the answer', m);
  ok('reasoning_content shown apart');

  check(pageErrors.length === 0, 'no page errors', pageErrors);
  check((await page.evaluate(() => window.__csp)).length === 1, 'no other CSP violation');
} catch (e) {
  if (!failed) console.log('FAIL ' + (e.stack || e));
  failed = true;
} finally {
  await browser.close();
}
console.log(`e2e-chatpage browser checks ${failed ? 'failed' : 'passed'} in ${Date.now() - started} ms`);
process.exit(failed ? 1 : 0);
