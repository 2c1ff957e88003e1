"""The user's receiver down for 60 s behind sources that can hold messages
(issue 37), with the HTTP sink's DEFAULT settings (retries =
"while_leading", max_in_flight "auto", ordering "key") except a short
back-off (backoff_ms 50, backoff_max_ms 1000), a small endpoint queue
(queue_size 200, queue_policy "block") and a metrics listener. Real
rabbitmq-server, mariadb-server and redis-server (the locker), one real
baton process per scenario, receivers on loopback that really refuse
connections while down (the port is closed, kept-alive connections are
shut).

The two scenarios run concurrently (one thread each) so that the file takes
about as long as one outage:

- rabbitmq, mode = "group", prefetch 50: 3,000 messages published at
  150 msg/s (20 s, with publisher confirms) while the receiver is down from
  2 s after the start for 60 s. Every message delivered (accepted, 200),
  none lost, no duplicates; baton_queue_depth (polled every 0.5 s) never
  above queue_size; the broker still holds what baton did not take (at the
  end of publishing the group queue's ready + unacked + delivered is the
  3,000 published, ready is at least published - delivered - prefetch -
  queue_size - 128, unacked at most prefetch, and baton received at most
  prefetch more than were delivered); baton's VmRSS stays below 100 MiB.
  With after_sink acks the prefetch window is what holds the source back:
  the forwarder takes the 50 deliveries in one batch (queue_batch_max 256),
  so the queue itself stays near empty.
- mysql_cdc (ROW binlog, the checkpoint in the locker, settings as in
  test_mysql_cdc.py): 3,000 rows inserted in 30 transactions of 100 rows
  over 20 s, and 300 of them updated afterwards, while the receiver is down
  60 s. Every row event delivered, none lost, no duplicates, the insert of
  each row before its update; queue depth never above queue_size; the
  binlog was not read ahead of the queue (rows received by baton during
  the outage bounded by what the queue, the forwarder's batch, the
  requests in flight and one rows event can hold); VmRSS below 100 MiB.

One summary line per scenario gives the figures.
"""
import json
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import mariadb as mdb  # noqa: E402
import rabbitmq as rmq  # noqa: E402
from downreceiver import Receiver  # noqa: E402

QUEUE_SIZE = 200
PREFETCH = 50
TOTAL = 3000
PUBLISH_S = 20.0      # publishing / inserting spread over this long
DOWN_AFTER_S = 2.0    # the receiver goes down this long after the start
DOWN_S = 60.0         # and stays down this long
RSS_MAX_MIB = 100
QUEUE_BATCH_MAX = 256     # the endpoint default: messages the forwarder takes per send
IN_FLIGHT_LIMIT = 64      # the http sink's max_in_flight_limit default
CDC_BATCH = 100           # rows per INSERT transaction (about one rows event)
CDC_UPDATES = list(range(10, TOTAL + 1, 10))   # rows updated after the inserts

CDC_USER, CDC_PW = "cdc", "cdc-pw"
CDC_LEASE = {"ttl_ms": 1000, "renew_ms": 250, "retry_ms": 100}   # as test_mysql_cdc.py


# ------------------------------------------------------------------ helpers

def sanitized(pid):
    """True when the process runs under ASan/TSan: their shadow memory and
    quarantine are most of its RSS (about 110 MiB here), not baton's."""
    try:
        with open("/proc/%d/maps" % pid) as f:
            maps = f.read()
        return "libasan" in maps or "libtsan" in maps
    except OSError:
        return False


def rss_bound_ok(t, what, pid, max_rss_kib):
    """RSS stayed below RSS_MAX_MIB (reported, not bounded, under a
    sanitizer)."""
    if sanitized(pid):
        print("    %s: RSS max %.1f MiB under a sanitizer: not bounded" % (what, max_rss_kib / 1024.0))
        return
    t.check(0 < max_rss_kib < RSS_MAX_MIB * 1024, "%s: RSS max %.1f MiB (bound %d MiB)"
            % (what, max_rss_kib / 1024.0, RSS_MAX_MIB))


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def dup_times(recv, dup_ids, t_down, t_up, limit=5):
    """For the failure message: when each copy of a duplicated id was
    answered, relative to the receiver going down and coming back."""
    out = []
    for i in list(dup_ids)[:limit]:
        ts = ["%+.3f s after down" % (t - t_down) if t < t_up else "%+.3f s after up" % (t - t_up)
              for (t, e) in recv.accepted_at() if e["id"] == i]
        out.append("%s: %s" % (i, ", ".join(ts)))
    return "; ".join(out)


class Watch(threading.Thread):
    """Polls a replica's /metrics and VmRSS every 0.5 s; keeps the maxima."""

    def __init__(self, mport, endpoint, pid):
        super().__init__(daemon=True)
        self.mport, self.ep, self.pid = mport, endpoint, pid
        self.max_depth = 0
        self.max_rss = 0
        self.samples = 0
        self.stop_flag = False

    def run(self):
        key = 'baton_queue_depth{endpoint="%s"}' % self.ep
        while not self.stop_flag:
            m = h.metrics(self.mport)
            if key in m:
                self.max_depth = max(self.max_depth, int(m[key]))
                self.samples += 1
            r = rss_kib(self.pid)
            if r:
                self.max_rss = max(self.max_rss, r)
            time.sleep(0.5)


def sink_cfg(url):
    # the http sink's defaults but for a short back-off
    return '{ name = "hook"; type = "http"; url = "%s"; backoff_ms = 50; backoff_max_ms = 1000; }' % url


def main_cfg(redis_port, mport, url, lease=None):
    return h.main_cfg(redis_port, sinks=sink_cfg(url), lease=lease,
                      extra='metrics = { listen = "127.0.0.1:%d"; };' % mport)


def counter_sum(m, prefix, ep):
    return sum(v for k, v in m.items() if k.startswith(prefix) and 'endpoint="%s"' % ep in k)


# ----------------------------------------------------------- the scenarios

class SteadyPublisher(threading.Thread):
    """Publishes seq 0..count-1 at rate/s with publisher confirms (as in
    test_rabbitmq.py)."""

    def __init__(self, port, exchange, count, rate, prefix):
        super().__init__(daemon=True)
        self.c = rmq.Amqp(port)
        self.c.confirm_select()
        self.exchange, self.count, self.rate, self.prefix = exchange, count, rate, prefix
        self.error = None
        self.published = 0

    def run(self):
        try:
            t0 = time.monotonic()
            i = 0
            while i < self.count:
                d = t0 + i / float(self.rate) - time.monotonic()
                if d > 0:
                    time.sleep(d)
                self.c.publish_many([(self.exchange, "", json.dumps({"seq": i}).encode(),
                                      {"message_id": "%s-%d" % (self.prefix, i)})])
                i += 1
                self.published = i
            self.c.wait_confirms(60)
        except Exception as e:  # reported by the test
            self.error = e


def group_queue_counts(srv, qname):
    """(messages_ready, messages_unacknowledged) of the queue, or (None, None)."""
    cols = ["name", "messages_ready", "messages_unacknowledged"]
    rc, out, _err = srv.ctl("list_queues", "--no-table-headers", *cols)
    if rc != 0:
        return None, None
    for line in out.splitlines():
        p = line.split("\t")
        if len(p) == 3 and p[0] == qname:
            return int(p[1]), int(p[2])
    return None, None


def scenario_rabbitmq(t, srv, redis, res):
    ep = "rdown"
    c = rmq.Amqp(srv.port)
    c.exchange_declare("rdown", "fanout")
    c.close()
    recv = Receiver()
    mport = h.free_port()
    epcfg = ('name = "%s"; type = "rabbitmq"; sink = "hook";\nhost = "127.0.0.1"; port = %d; '
             'exchange = "rdown";\nmode = "group"; prefetch = %d; queue_size = %d;\n'
             % (ep, srv.port, PREFETCH, QUEUE_SIZE))
    b = t.baton(main_cfg(redis.port, mport, recv.url), {"r.cfg": epcfg}, name="baton-rabbitmq")
    t.require(h.wait_until(lambda: "consuming from" in b.stderr_text(), 30, 0.05),
              "rabbitmq: baton did not start consuming within 30 s")
    m = re.findall(r'consuming from \w+ queue "([^"]+)"', b.stderr_text())
    qname = m[-1] if m else "baton.%s" % ep
    watch = Watch(mport, ep, b.pid)
    watch.start()
    t0 = time.monotonic()
    pub = SteadyPublisher(srv.port, "rdown", TOTAL, TOTAL / PUBLISH_S, "r")
    pub.start()
    time.sleep(max(0.0, t0 + DOWN_AFTER_S - time.monotonic()))
    recv.down()
    t_down = time.monotonic()
    delivered_at_down = len(recv.accepted())
    pub.join(PUBLISH_S + 60)
    t.check(pub.error is None, "rabbitmq: publisher: %r" % pub.error)
    t.check(pub.c.acked == TOTAL, "rabbitmq: broker confirmed %d of %d" % (pub.c.acked, TOTAL))
    # publishing is over, the receiver still down: the broker holds the rest
    time.sleep(1.0)
    ready, unacked = group_queue_counts(srv, qname)
    delivered_mid = len(recv.accepted())
    mm = h.metrics(mport)
    depth_mid = int(mm.get('baton_queue_depth{endpoint="%s"}' % ep, -1))
    received_mid = int(counter_sum(mm, "baton_messages_received_total", ep))
    errors_mid = int(counter_sum(mm, "baton_sink_errors_total", ep))
    time.sleep(max(0.0, t_down + DOWN_S - time.monotonic()))
    recv.up()
    t_up = time.monotonic()
    h.log("rabbitmq: receiver back after %.1f s down" % (t_up - t_down))
    ok = h.wait_until(lambda: len({r["id"] for r in recv.accepted()}) >= TOTAL, 60, 0.2)
    t_done = time.monotonic()
    time.sleep(1.0)
    watch.stop_flag = True
    watch.join(5)
    got = recv.accepted()
    ids = [r["id"] for r in got]
    want = {"r-%d" % i for i in range(TOTAL)}
    lost = len(want - set(ids))
    dups = h.duplicates(ids)
    ndup = sum(n - 1 for n in dups.values())
    m = h.metrics(mport)
    dropped = counter_sum(m, "baton_messages_dropped_total", ep)
    demotions = counter_sum(m, "baton_demotions_total", ep)
    ready_end, unacked_end = group_queue_counts(srv, qname)
    floor = TOTAL - delivered_mid - PREFETCH - QUEUE_SIZE - 128
    res["summary"] = (
        "rabbitmq group, receiver down %.0f s: published %d, delivered %d, lost %d, duplicates %d, "
        "max queue depth %d (queue_size %d, prefetch %d), broker held %s ready + %s unacked during "
        "the outage (delivered before it %d; baton had received %d, queue depth then %d, failed "
        "attempts %d, requests left unanswered at the down %d), all delivered %.1f s after the "
        "receiver came back, RSS max %.1f MiB"
        % (DOWN_S, TOTAL, len(set(ids)), lost, ndup, watch.max_depth, QUEUE_SIZE, PREFETCH,
           ready, unacked, delivered_at_down, received_mid, depth_mid, errors_mid,
           recv.unanswered, t_done - t_up, watch.max_rss / 1024.0))
    t.check(ok and lost == 0, "rabbitmq: %d of %d lost (missing e.g. %s)"
            % (lost, TOTAL, sorted(want - set(ids))[:5]))
    t.check(ndup == 0, "rabbitmq: %d duplicates (answered at %s)"
            % (ndup, dup_times(recv, dups, t_down, t_up)))
    t.check(set(ids) <= want, "rabbitmq: unknown ids delivered: %s" % sorted(set(ids) - want)[:5])
    t.check(watch.samples > 100, "rabbitmq: only %d metrics samples" % watch.samples)
    t.check(watch.max_depth <= QUEUE_SIZE, "rabbitmq: queue depth %d above queue_size %d"
            % (watch.max_depth, QUEUE_SIZE))
    t.check(ready is not None and ready >= floor,
            "rabbitmq: the broker held %s ready at the end of publishing, expected >= %d "
            "(3000 - %d delivered - prefetch - queue_size - 128)" % (ready, floor, delivered_mid))
    t.check(ready is not None and ready + unacked + delivered_mid == TOTAL,
            "rabbitmq: during the outage the broker held %s ready + %s unacked and %d were "
            "delivered: not the %d published" % (ready, unacked, delivered_mid, TOTAL))
    t.check(unacked is not None and unacked <= PREFETCH,
            "rabbitmq: %s unacked during the outage, prefetch %d" % (unacked, PREFETCH))
    t.check(received_mid - delivered_mid <= PREFETCH,
            "rabbitmq: baton held %d undelivered during the outage (received %d, delivered %d), "
            "more than prefetch %d" % (received_mid - delivered_mid, received_mid, delivered_mid, PREFETCH))
    t.check(errors_mid > 0, "rabbitmq: failed attempts counted during the outage: %d" % errors_mid)
    t.check(dropped == 0, "rabbitmq: dropped %d" % dropped)
    t.check(demotions == 0, "rabbitmq: demoted %d times" % demotions)
    t.check(ready_end == 0 and unacked_end == 0,
            "rabbitmq: group queue after the run: ready %s, unacked %s" % (ready_end, unacked_end))
    rss_bound_ok(t, "rabbitmq", b.pid, watch.max_rss)
    t.check(b.alive(), "rabbitmq: baton exited: %s" % (b.proc.poll(),))
    pub.c.close()


def scenario_cdc(t, srv, redis, res):
    ep = "cdcdown"
    db = "rdown"
    srv.sql("CREATE DATABASE %s;\nCREATE TABLE %s.t (id INT PRIMARY KEY, v INT, s VARCHAR(64));"
            % (db, db))
    recv = Receiver()
    mport = h.free_port()
    epcfg = ('name = "%s";\ntype = "mysql_cdc";\nsink = "hook";\nhost = "127.0.0.1";\n'
             'port = %d;\nuser = "%s";\npassword_env = "CDC_PW";\nserver_id = 4242;\n'
             'tables = [ "%s.*" ];\nqueue_size = %d;\n' % (ep, srv.port, CDC_USER, db, QUEUE_SIZE))
    b = t.baton(main_cfg(redis.port, mport, recv.url, lease=CDC_LEASE), {"cdc.cfg": epcfg},
                name="baton-cdc", env={"CDC_PW": CDC_PW})
    t.require(h.wait_until(lambda: "streaming the binlog" in b.stderr_text(), 30, 0.05),
              "mysql_cdc: baton did not start streaming the binlog within 30 s")
    watch = Watch(mport, ep, b.pid)
    watch.start()
    t0 = time.monotonic()
    nb = TOTAL // CDC_BATCH
    down = {}

    def inserts():
        for k in range(nb):
            d = t0 + k * PUBLISH_S / nb - time.monotonic()
            if d > 0:
                time.sleep(d)
            rows = ",".join("(%d, 1, 'row-%d')" % (i, i)
                            for i in range(k * CDC_BATCH + 1, (k + 1) * CDC_BATCH + 1))
            srv.sql("INSERT INTO %s.t VALUES %s;" % (db, rows))
        # then every 10th row updated, 30 per transaction
        for k in range(0, len(CDC_UPDATES), 30):
            ids = CDC_UPDATES[k:k + 30]
            srv.sql("UPDATE %s.t SET v = 2 WHERE id IN (%s);" % (db, ",".join(map(str, ids))))

    err = []

    def run_writer():
        try:
            inserts()
        except Exception as e:
            err.append(e)
    writer = threading.Thread(target=run_writer, daemon=True)
    writer.start()
    time.sleep(max(0.0, t0 + DOWN_AFTER_S - time.monotonic()))
    recv.down()
    t_down = time.monotonic()
    down["delivered"] = len(recv.accepted())
    mm = h.metrics(mport)
    received_at_down = int(counter_sum(mm, "baton_messages_received_total", ep))
    writer.join(PUBLISH_S + 60)
    t.check(not writer.is_alive() and not err, "mysql_cdc: the inserts failed: %r" % err)
    n_events = TOTAL + len(CDC_UPDATES)
    time.sleep(3.0)
    mm = h.metrics(mport)
    delivered_mid = len(recv.accepted())
    received_mid = int(counter_sum(mm, "baton_messages_received_total", ep))
    depth_mid = int(mm.get('baton_queue_depth{endpoint="%s"}' % ep, -1))
    errors_mid = int(counter_sum(mm, "baton_sink_errors_total", ep))
    time.sleep(max(0.0, t_down + DOWN_S - time.monotonic()))
    mm = h.metrics(mport)
    received_late = int(counter_sum(mm, "baton_messages_received_total", ep))
    recv.up()
    t_up = time.monotonic()
    h.log("mysql_cdc: receiver back after %.1f s down" % (t_up - t_down))

    def distinct():
        return len({r["id"] for r in recv.accepted()})
    ok = h.wait_until(lambda: distinct() >= n_events, 60, 0.2)
    t_done = time.monotonic()
    time.sleep(1.0)
    watch.stop_flag = True
    watch.join(5)
    got = [r for r in recv.accepted() if r.get("op") in ("insert", "update", "delete")]
    keys = [(r["op"], (r["after"] or r["before"])["id"]) for r in got]
    want = {("insert", i) for i in range(1, TOTAL + 1)} | {("update", i) for i in CDC_UPDATES}
    lost = len(want - set(keys))
    dups = h.duplicates(r["id"] for r in got)
    ndup = sum(n - 1 for n in dups.values())
    kdups = h.duplicates(keys)
    pos = {}
    for n, k in enumerate(keys):
        pos.setdefault(k, n)
    disorder = [i for i in CDC_UPDATES
                if ("insert", i) in pos and ("update", i) in pos and pos[("update", i)] < pos[("insert", i)]]
    bad_values = sum(1 for r in got if r["op"] == "update" and
                     (r["before"].get("v") != 1 or r["after"].get("v") != 2)) + \
        sum(1 for r in got if r["op"] == "insert" and r["after"].get("s") != "row-%d" % r["after"]["id"])
    m = h.metrics(mport)
    dropped = counter_sum(m, "baton_messages_dropped_total", ep)
    returned = counter_sum(m, "baton_messages_returned_total", ep)
    demotions = counter_sum(m, "baton_demotions_total", ep)
    held_mid = received_mid - delivered_mid
    held_bound = QUEUE_SIZE + QUEUE_BATCH_MAX + IN_FLIGHT_LIMIT + CDC_BATCH
    reconnects = b.stderr_text().count("streaming the binlog")
    res["summary"] = (
        "mysql_cdc, receiver down %.0f s: rows %d + updates %d = %d events, delivered %d, lost %d, "
        "duplicates %d, out of order %d, max queue depth %d (queue_size %d), received by baton "
        "during the outage %d of %d (at the down %d, delivered before it %d; held %d undelivered, "
        "queue depth then %d, failed attempts %d; %d more read in the rest of the outage; "
        "requests left unanswered at the down %d), all delivered %.1f s after the receiver came "
        "back, RSS max %.1f MiB"
        % (DOWN_S, TOTAL, len(CDC_UPDATES), n_events, len(set(keys)), lost, ndup, len(disorder),
           watch.max_depth, QUEUE_SIZE, received_mid, n_events, received_at_down, down["delivered"],
           held_mid, depth_mid, errors_mid, received_late - received_mid, recv.unanswered,
           t_done - t_up, watch.max_rss / 1024.0))
    t.check(ok and lost == 0, "mysql_cdc: %d of %d row events lost (e.g. %s)"
            % (lost, n_events, sorted(want - set(keys))[:5]))
    t.check(ndup == 0 and not kdups, "mysql_cdc: %d duplicate envelope ids, %d duplicate rows (e.g. %s; "
            "answered at %s)" % (ndup, len(kdups), list(kdups.items())[:5],
                                 dup_times(recv, dups, t_down, t_up)))
    t.check(not disorder, "mysql_cdc: %d updates delivered before their row's insert (e.g. %s)"
            % (len(disorder), disorder[:5]))
    t.check(bad_values == 0, "mysql_cdc: %d row events with unexpected values" % bad_values)
    t.check(watch.samples > 100, "mysql_cdc: only %d metrics samples" % watch.samples)
    t.check(watch.max_depth <= QUEUE_SIZE, "mysql_cdc: queue depth %d above queue_size %d"
            % (watch.max_depth, QUEUE_SIZE))
    t.check(received_mid < n_events and held_mid <= held_bound,
            "mysql_cdc: the binlog was read ahead of the queue during the outage: received %d of %d, "
            "%d held undelivered (bound queue_size + queue_batch_max + max_in_flight_limit + one "
            "rows event = %d)" % (received_mid, n_events, held_mid, held_bound))
    t.check(received_late - delivered_mid <= held_bound,
            "mysql_cdc: the binlog was read ahead later in the outage: received %d, delivered %d"
            % (received_late, delivered_mid))
    t.check(errors_mid > 0, "mysql_cdc: failed attempts counted during the outage: %d" % errors_mid)
    t.check(dropped == 0 and returned == 0, "mysql_cdc: dropped %d, returned %d" % (dropped, returned))
    t.check(demotions == 0, "mysql_cdc: demoted %d times" % demotions)
    t.check(reconnects == 1, "mysql_cdc: the binlog stream (re)started %d times" % reconnects)
    rss_bound_ok(t, "mysql_cdc", b.pid, watch.max_rss)
    t.check(b.alive(), "mysql_cdc: baton exited: %s" % (b.proc.poll(),))


# ----------------------------------------------------------------- the test

def test_receiver_down_60s_rabbitmq_group_and_mysql_cdc(t):
    """Both scenarios at once, each in its own thread with its own baton;
    the brokers started once, concurrently."""
    brokers = {}

    def start(name, fn):
        try:
            brokers[name] = fn()
        except Exception as e:  # reported below
            brokers[name + "_error"] = e

    def maria():
        srv = mdb.MariaServer()
        srv.create_user(CDC_USER, CDC_PW)
        return srv
    ths = [threading.Thread(target=start, args=("rabbitmq", rmq.RabbitServer)),
           threading.Thread(target=start, args=("mariadb", maria))]
    for th in ths:
        th.start()
    redis = t.redis()
    for th in ths:
        th.join(180)
    for name in ("rabbitmq", "mariadb"):
        t.require(name in brokers, "%s did not start: %r" % (name, brokers.get(name + "_error")))

    results = {"rabbitmq": {}, "mysql_cdc": {}}

    def run(name, fn, srv):
        try:
            fn(t, srv, redis, results[name])
        except h.TestFailure:
            pass
        except Exception as e:  # an unexpected error fails the test
            import traceback
            traceback.print_exc()
            t.failures.append("%s: exception %r" % (name, e))

    t0 = time.monotonic()
    runs = [threading.Thread(target=run, args=("rabbitmq", scenario_rabbitmq, brokers["rabbitmq"])),
            threading.Thread(target=run, args=("mysql_cdc", scenario_cdc, brokers["mariadb"]))]
    for th in runs:
        th.start()
    for th in runs:
        th.join(300)
    for name in ("rabbitmq", "mysql_cdc"):
        print("    " + results[name].get("summary", "%s: no figures (the scenario stopped early)" % name),
              flush=True)
    h.log("both scenarios took %.1f s" % (time.monotonic() - t0))


if __name__ == "__main__":
    h.main(globals())
