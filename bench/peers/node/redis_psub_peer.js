// The job baton does, written the way Node.js users commonly write it
// (bench/peers/README.md): a Redis SET NX PX lease (the seed's TryLock +
// Lua CAS renewal, ttl 3000 ms, renewed every 1000 ms); the leader
// PSUBSCRIBEs with ioredis and writes one JSON line per message to stdout.
//
//   node redis_psub_peer.js LOCK_PORT SOURCE_PORT PATTERN
'use strict';
const os = require('os');
const Redis = require('ioredis');

const [lockPort, srcPort, pattern] = process.argv.slice(2);
if (!pattern) {
  process.stderr.write('usage: node redis_psub_peer.js LOCK_PORT SOURCE_PORT PATTERN\n');
  process.exit(64);
}
const KEY = 'peer:lease:bench';
const TOKEN = `${os.hostname()}-${process.pid}-${Date.now()}`;
const TTL_MS = 3000;
const RENEW_MS = 1000;
const RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then " +
              "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
const RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then " +
                "return redis.call('del', KEYS[1]) else return 0 end";

const lock = new Redis({ host: '127.0.0.1', port: Number(lockPort) });
let sub = null;
let epoch = 0;

function start() {
  epoch++;
  sub = new Redis({ host: '127.0.0.1', port: Number(srcPort) });
  sub.on('pmessage', (pat, channel, payload) => {
    process.stdout.write(JSON.stringify({
      endpoint: 'bench', type: 'redis_psub', epoch, received_at: new Date().toISOString(),
      channel, pattern: pat, payload,
    }) + '\n');
  });
  sub.psubscribe(pattern).catch((e) => process.stderr.write(`psubscribe: ${e}\n`));
}

function stop() {
  if (sub) sub.disconnect();
  sub = null;
}

async function tick() {
  try {
    if (!sub) {
      if (await lock.set(KEY, TOKEN, 'PX', TTL_MS, 'NX') === 'OK') start();
    } else if (await lock.eval(RENEW, 1, KEY, TOKEN, TTL_MS) !== 1) {
      stop();
    }
  } catch (e) {
    process.stderr.write(`lease: ${e}\n`);
    stop();
  }
}

const timer = setInterval(tick, RENEW_MS);
tick();
process.on('SIGTERM', async () => {
  clearInterval(timer);
  stop();
  try { await lock.eval(RELEASE, 1, KEY, TOKEN); } catch (e) { /* exiting */ }
  process.exit(0);
});
