// The job baton's rabbitmq endpoint does (private mode), written the way
// Node.js users commonly write it (bench/peers/README.md): a Redis SET NX PX
// lease (the seed's TryLock + Lua CAS renewal; ttl PEER_TTL_MS, default
// 3000 ms, renewed every ttl/3) with ioredis; the leader consumes a RabbitMQ
// fanout exchange with amqplib (the RabbitMQ tutorial's receive_logs.js:
// server-named exclusive queue, bound, consume with noAck) and writes one
// JSON line per message to stdout. Losing the lease closes the connection
// (the broker then deletes the queue); SIGTERM/SIGINT also gives the lease
// back.
//
//   node rabbitmq_peer.js LOCK_PORT AMQP_PORT EXCHANGE
'use strict';
const os = require('os');
const Redis = require('ioredis');
const amqp = require('amqplib');

const [lockPort, amqpPort, exchange] = process.argv.slice(2);
if (!exchange) {
  process.stderr.write('usage: node rabbitmq_peer.js LOCK_PORT AMQP_PORT EXCHANGE\n');
  process.exit(64);
}
const KEY = 'peer:lease:bench';
const TOKEN = `${os.hostname()}-${process.pid}-${Date.now()}`;
const TTL_MS = Number(process.env.PEER_TTL_MS) >= 3 ? Number(process.env.PEER_TTL_MS) : 3000;
const RENEW_MS = Math.floor(TTL_MS / 3);
const RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then " +
              "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
const RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then " +
                "return redis.call('del', KEYS[1]) else return 0 end";
const URL = `amqp://guest:guest@127.0.0.1:${amqpPort}/`;

const lock = new Redis({ host: '127.0.0.1', port: Number(lockPort) });
let leading = false; // holds the lease
let conn = null;     // the broker connection while leading
let epoch = 0;

async function start() {
  const ep = ++epoch;
  const c = await amqp.connect(URL);
  c.on('error', (e) => process.stderr.write(`amqp: ${e}\n`));
  c.on('close', () => {
    if (conn === c) { // the broker went away while leading: lead again later
      process.stderr.write('consumer ended\n');
      conn = null;
      release();
    }
  });
  if (!leading || ep !== epoch) { c.close().catch(() => {}); return; }
  conn = c;
  const ch = await c.createChannel();
  // durable, as baton declares it (exchange_durable defaults to true)
  await ch.assertExchange(exchange, 'fanout', { durable: true });
  const { queue } = await ch.assertQueue('', { exclusive: true, autoDelete: true });
  await ch.bindQueue(queue, exchange, '');
  // noAck: what most users write for a private broadcast queue (and baton's
  // private-mode default, ack = "auto"); no prefetch, as there
  await ch.consume(queue, (msg) => {
    if (msg === null) return; // cancelled by the broker
    const f = msg.fields;
    const p = msg.properties;
    process.stdout.write(JSON.stringify({
      endpoint: 'bench', type: 'rabbitmq', epoch: ep, id: p.messageId,
      received_at: new Date().toISOString(), exchange: f.exchange, routing_key: f.routingKey,
      delivery_tag: f.deliveryTag, redelivered: f.redelivered, message_id: p.messageId,
      content_type: p.contentType, headers: p.headers, payload: msg.content.toString(),
    }) + '\n');
  }, { noAck: true });
  process.stderr.write(`consuming from queue ${queue}\n`);
}

async function stop() {
  const c = conn;
  conn = null;
  leading = false;
  if (c) {
    try { await c.close(); } catch (e) { /* already closed */ }
  }
}

async function release() {
  leading = false;
  try { await lock.eval(RELEASE, 1, KEY, TOKEN); } catch (e) { /* lease expires */ }
}

async function tick() {
  try {
    if (!leading) {
      if (await lock.set(KEY, TOKEN, 'PX', TTL_MS, 'NX') === 'OK') {
        leading = true;
        start().catch((e) => {
          process.stderr.write(`consume: ${e}\n`);
          stop().then(release);
        });
      }
    } else if (await lock.eval(RENEW, 1, KEY, TOKEN, TTL_MS) !== 1) {
      await stop();
    }
  } catch (e) {
    process.stderr.write(`lease: ${e}\n`);
    await stop();
  }
}

const timer = setInterval(tick, RENEW_MS);
tick();
async function shutdown() {
  clearInterval(timer);
  await stop();
  await release();
  process.exit(0);
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
