// The job baton's mysql_cdc endpoint does, written the way Node.js users
// commonly write it (bench/peers/README.md): a Redis SET NX PX lease (the
// seed's TryLock + Lua CAS renewal; ttl PEER_TTL_MS, default 3000 ms,
// renewed every ttl/3) with ioredis; the leader streams the MariaDB/MySQL
// binlog with @vlasky/zongji (zongji's README idiom: includeEvents
// tablemap + write/update/delete rows, here from a given file:position) and
// writes one JSON line per changed row to stdout, with the fields of
// baton's mysql_cdc envelope (endpoints/mysql_cdc.md). Losing the lease
// stops zongji; a later term resumes at zongji's last safe resume point
// (options.filename/position, a transaction boundary), kept in memory only
// (baton keeps its checkpoint in the locker). SIGTERM/SIGINT also gives
// the lease back.
//
// Differences from baton's envelope: row values are zongji's defaults
// (mysql2 conventions: DATETIME/TIMESTAMP as Date objects, so ISO strings
// in UTC with "Z" under the process time zone; DECIMAL as strings;
// BIGINT beyond 2^53 as strings; binary columns as Buffer objects), and the
// event's start position is derived from its header (end position - length).
//
//   node binlog_peer.js LOCK_PORT MYSQL_PORT USER PASSWORD BINLOG_FILE BINLOG_POS
'use strict';
const os = require('os');
const Redis = require('ioredis');

const [lockPort, mysqlPort, user, password, binlogFile, binlogPos] = process.argv.slice(2);
if (binlogPos === undefined || !(Number(binlogPos) >= 4)) {
  process.stderr.write('usage: node binlog_peer.js LOCK_PORT MYSQL_PORT USER PASSWORD ' +
                       'BINLOG_FILE BINLOG_POS\n');
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
const SERVER_ID = 4101; // replication server id: unique among the server's binlog readers
const OPS = { writerows: 'insert', updaterows: 'update', deleterows: 'delete' };

const lock = new Redis({ host: '127.0.0.1', port: Number(lockPort) });
let ZongJi = null;   // @vlasky/zongji is ESM-only: loaded with import() below
let zongji = null;   // the binlog reader while leading
let leading = false; // holds the lease
let epoch = 0;
let resume = { filename: binlogFile, position: Number(binlogPos) };

function start() {
  const ep = ++epoch;
  const z = new ZongJi({ host: '127.0.0.1', port: Number(mysqlPort), user, password });
  zongji = z;
  z.on('ready', () => {
    process.stderr.write(`streaming from ${resume.filename}:${resume.position}\n`);
  });
  z.on('binlog', (evt) => {
    const op = OPS[evt.getEventName()];
    if (op === undefined) return; // the table map: zongji keeps it
    const t = evt.tableMap[evt.tableId];
    const file = z.options.filename;
    // the rows event's start: its end position less its length (header
    // 19 bytes, + 4 with a CRC32 checksum, zongji's `size` excluding both)
    const pos = evt.nextPosition - evt.size - (z.useChecksum ? 23 : 19);
    const receivedAt = new Date().toISOString();
    const ts = new Date(evt.timestamp).toISOString();
    const rows = evt.rows;
    for (let i = 0; i < rows.length; i++) {
      const r = rows[i];
      process.stdout.write(JSON.stringify({
        endpoint: 'bench', type: 'mysql_cdc', epoch: ep, id: `${file}:${pos}:${i}`,
        received_at: receivedAt, db: t.parentSchema, table: t.tableName, op,
        before: op === 'insert' ? null : (op === 'update' ? r.before : r),
        after: op === 'delete' ? null : (op === 'update' ? r.after : r),
        gtid: evt.gtid, position: { file, pos }, ts,
      }) + '\n');
    }
  });
  z.on('error', (e) => {
    process.stderr.write(`zongji: ${e}\n`);
    if (zongji === z) { // the stream failed while leading: lead again later
      stop();
      release();
    }
  });
  z.start({
    serverId: SERVER_ID, startAtEnd: false, filename: resume.filename, position: resume.position,
    includeEvents: ['tablemap', 'writerows', 'updaterows', 'deleterows'],
  });
}

function stop() {
  const z = zongji;
  zongji = null;
  leading = false;
  if (z) {
    if (z.options.filename) resume = { filename: z.options.filename, position: z.options.position };
    z.stop();
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
        start();
      }
    } else if (await lock.eval(RENEW, 1, KEY, TOKEN, TTL_MS) !== 1) {
      stop();
    }
  } catch (e) {
    process.stderr.write(`lease: ${e}\n`);
    stop();
  }
}

let timer = null;
async function shutdown() {
  clearInterval(timer);
  stop();
  await release();
  process.exit(0);
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);

import('@vlasky/zongji').then((m) => {
  ZongJi = m.default;
  timer = setInterval(tick, RENEW_MS);
  tick();
}, (e) => {
  process.stderr.write(`cannot load @vlasky/zongji: ${e}\n`);
  process.exit(1);
});
