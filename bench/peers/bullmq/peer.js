// peer.js - the BullMQ side of delayq's peer benchmark (bench/peer.py).
//
//   node peer.js add PORT N [SPREAD_MS]
//                                      N delayed jobs (16-byte data) with addBulk, 1000 a
//                                      call, each delayed 1 h, or with SPREAD_MS 60 s plus
//                                      0..SPREAD_MS (each job its own delay, drawn from a
//                                      seeded generator); prints {"n", "secs"}
//   node peer.js lateness PORT RATE SECS MAXDELAY_MS
//                                      a Worker (concurrency 50) while jobs are added one by
//                                      one at RATE/s for SECS s, each delayed 0..MAXDELAY_MS;
//                                      lateness = processing start - (timestamp + delay),
//                                      both on this machine's clock; prints {"n", "late": [...]}
//   node peer.js drain PORT N          N jobs due now (addBulk), then a Worker (concurrency
//                                      100); prints {"n", "secs"} from the Worker's start to
//                                      the Nth completion
//   node peer.js fill PORT N           N delayed jobs (delay 1 h) and exit: the driver reads
//                                      the server's memory
//
// Jobs are removed on completion (removeOnComplete), as a throughput-minded
// user configures BullMQ; everything talks to 127.0.0.1:PORT only. Every
// wait is bounded (the driver also kills this process by pid on timeout).
'use strict';
const { Queue, Worker } = require('bullmq');

const [mode, portArg, ...rest] = process.argv.slice(2);
const connection = { host: '127.0.0.1', port: Number(portArg), maxRetriesPerRequest: null };
const DATA = { p: '0123456789abcdef' };
const OPTS = { removeOnComplete: true, removeOnFail: true };

function sleep(ms) { return new Promise((r) => setTimeout(r, ms)); }

// A seeded generator (mulberry32), so both sides of a spread run see delays
// of one distribution and a run can be repeated.
function seeded(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// delay: the delay of every job (ms), or a function giving each job's.
async function addDelayed(queue, n, delay) {
  const delayOf = typeof delay === 'function' ? delay : () => delay;
  for (let i = 0; i < n; i += 1000) {
    const jobs = [];
    for (let j = i; j < Math.min(n, i + 1000); j++) {
      jobs.push({ name: 'j', data: DATA, opts: { ...OPTS, delay: delayOf() } });
    }
    await queue.addBulk(jobs);
  }
}

async function add(n, spreadMs) {
  const queue = new Queue('peer', { connection });
  const rnd = seeded(1);
  const delay = spreadMs > 0 ? () => 60000 + Math.floor(rnd() * (spreadMs + 1)) : 3600 * 1000;
  const t0 = process.hrtime.bigint();
  await addDelayed(queue, n, delay);
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  await queue.close();
  return { n, secs };
}

async function fill(n) {
  const queue = new Queue('peer', { connection });
  await addDelayed(queue, n, 3600 * 1000);
  await queue.close();
  return { n };
}

async function lateness(rate, secs, maxDelay) {
  const queue = new Queue('peer', { connection });
  const late = [];
  const worker = new Worker('peer', async (job) => {
    late.push(Date.now() - (job.timestamp + (job.opts.delay || 0)));
  }, { connection, concurrency: 50 });
  await worker.waitUntilReady();
  const t0 = Date.now();
  let sent = 0;
  while (Date.now() - t0 < secs * 1000) { // bounded by secs
    const want = Math.floor(((Date.now() - t0) / 1000) * rate);
    const adds = [];
    for (; sent < want; sent++) adds.push(queue.add('j', DATA, { ...OPTS, delay: Math.floor(Math.random() * (maxDelay + 1)) }));
    await Promise.all(adds);
    await sleep(5);
  }
  const end = Date.now() + maxDelay + 10000;
  while (late.length < sent && Date.now() < end) await sleep(50); // bounded
  await worker.close();
  await queue.close();
  return { n: sent, late };
}

async function drain(n) {
  const queue = new Queue('peer', { connection });
  for (let i = 0; i < n; i += 1000) {
    const jobs = [];
    for (let j = i; j < Math.min(n, i + 1000); j++) jobs.push({ name: 'j', data: DATA, opts: OPTS });
    await queue.addBulk(jobs);
  }
  let done = 0;
  let finished;
  const all = new Promise((r) => { finished = r; });
  const t0 = process.hrtime.bigint();
  const worker = new Worker('peer', async () => {
    if (++done === n) finished();
  }, { connection, concurrency: 100 });
  await Promise.race([all, sleep(120000)]);
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  await worker.close();
  await queue.close();
  return { n: done, secs };
}

async function main() {
  let out;
  if (mode === 'add') out = await add(Number(rest[0]), Number(rest[1] || 0));
  else if (mode === 'fill') out = await fill(Number(rest[0]));
  else if (mode === 'lateness') out = await lateness(Number(rest[0]), Number(rest[1]), Number(rest[2]));
  else if (mode === 'drain') out = await drain(Number(rest[0]));
  else throw new Error(`unknown mode ${mode}`);
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });
