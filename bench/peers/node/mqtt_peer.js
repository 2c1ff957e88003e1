// The job baton's mqtt endpoint does for a plain subscription under a lease
// (guard = active), written the way Node.js users commonly write it
// (bench/peers/README.md): a Redis SET NX PX lease (the seed's TryLock + Lua
// CAS renewal, ttl PEER_TTL_MS, default 3000 ms, renewed every ttl/3) with
// ioredis; the leader connects with mqtt (MQTT.js) under a fixed client id
// with clean: false (a persistent session: what is published while it is
// away is queued for it), subscribes to the filter and writes one JSON line
// per message to stdout. Losing the lease disconnects.
//
//   node mqtt_peer.js LOCK_PORT MQTT_PORT CLIENT_ID TOPIC_FILTER QOS
'use strict';
const os = require('os');
const Redis = require('ioredis');
const mqtt = require('mqtt');

const [lockPort, mqttPort, clientId, filter, qosArg] = process.argv.slice(2);
const QOS = Number(qosArg);
if (qosArg === undefined || ![0, 1, 2].includes(QOS)) {
  process.stderr.write('usage: node mqtt_peer.js LOCK_PORT MQTT_PORT CLIENT_ID TOPIC_FILTER QOS\n');
  process.exit(64);
}
const KEY = 'peer:lease:bench';
const TOKEN = `${os.hostname()}-${process.pid}-${Date.now()}`;
const TTL_MS = Number(process.env.PEER_TTL_MS) > 0 ? Number(process.env.PEER_TTL_MS) : 3000;
const RENEW_MS = Math.floor(TTL_MS / 3);
const RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then " +
              "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
const RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then " +
                "return redis.call('del', KEYS[1]) else return 0 end";

const lock = new Redis({ host: '127.0.0.1', port: Number(lockPort) });
let client = null;
let epoch = 0;

function start() {
  epoch++;
  const ep = epoch;
  client = mqtt.connect(`mqtt://127.0.0.1:${mqttPort}`, { clientId, clean: false });
  client.on('message', (topic, payload, packet) => {
    const env = {
      endpoint: 'bench', type: 'mqtt', epoch: ep, received_at: new Date().toISOString(),
      topic, qos: packet.qos, retained: packet.retain, dup: packet.dup,
    };
    if (packet.qos > 0) env.packet_id = packet.messageId;
    env.payload = payload.toString();
    process.stdout.write(JSON.stringify(env) + '\n');
  });
  client.on('connect', () => {
    client.subscribe(filter, { qos: QOS }, (err) => {
      if (err) process.stderr.write(`subscribe: ${err}\n`);
    });
  });
  client.on('error', (e) => process.stderr.write(`mqtt: ${e}\n`));
}

function stop() {
  if (client) client.end();
  client = null;
}

async function tick() {
  try {
    if (!client) {
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
async function shutdown() {
  clearInterval(timer);
  stop();
  try { await lock.eval(RELEASE, 1, KEY, TOKEN); } catch (e) { /* exiting */ }
  process.exit(0);
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
