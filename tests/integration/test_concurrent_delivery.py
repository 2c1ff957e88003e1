"""Concurrent delivery at the HTTP sink (issue 36: max_in_flight, ordering),
through real processes: redis-server (locker and source), one baton, and a
slow HTTP receiver in a process of its own (lib/slowreceiver.py: keep-alive,
a thread per connection, it records the concurrency it sees, per request
and per ordering key). Each test has its own Redis, baton and receiver; the
four run in parallel threads (slowreceiver.parallel_main), so the file takes
as long as the longest (test_auto_limit_against_capped_receiver, ~50 s).

  1. key_order_throughput: receiver answers every POST after 20 ms;
     redis_psub over 50 channels -> http sink, max_in_flight = 64, ordering
     = "key"; 1,000 msg/s for 20 s (20,000 messages, each payload "<seq on
     its channel>:<global seq>"). Every message delivered exactly once;
     per channel, acceptance order = publish order, and never two requests
     of one channel at the receiver at once; throughput >= 500 msg/s (one
     request at a time would be <= 50).
  2. strict_global_order: ordering = "strict" (max_in_flight = 64 too):
     200 messages over 50 channels; acceptance order = publish order across
     channels, never two requests at the receiver at once, the
     concurrency_limit gauge says 1.
  3. auto_limit_against_capped_receiver: max_in_flight = "auto" against a
     receiver that processes at most 16 requests at once (20 ms each) and
     answers 503 at once beyond that; 2,000 msg/s for 15 s over 200
     channels (about 2.5 x what 16 x 20 ms can take: a backlog throughout).
     From 5 s after the start until the backlog is gone, every 0.5 s,
     baton_sink_concurrency_limit stays within 8..24; 503s are under 5 % of
     the requests that arrive after the first 5 s; every message delivered
     exactly once in the end (503s are retried).
  4. key_exclusion: 5 channels, bursts of 50 messages every 250 ms (each
     channel's backlog always has several messages ready), ordering = "key":
     0 requests that arrived while one of the same channel was being
     processed, while the receiver saw more than one request at once;
     per-channel order, exactly once.

Each test prints "CONCURRENT scenario=... result=PASS|FAIL ..." with its
figures (throughput msg/s, concurrency seen, limit, 503 share).

To see the ordering checks fail: BATON_IT_ORDERING=none python3
test_concurrent_delivery.py test_key_order_throughput test_key_exclusion
(ordering = "none" instead of "key" in tests 1 and 4).
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
import harness as h  # noqa: E402
import slowreceiver as sr  # noqa: E402
import termdelivery as td  # noqa: E402

EP = "orders"
LEASE = {"ttl_ms": 3000, "retry_ms": 100}
KEY_ORDERING = os.environ.get("BATON_IT_ORDERING", "key")


def psub_cfg(port, ordering, extra=""):
    return ('name = "%s"; type = "redis_psub"; sink = "hook";\n'
            'host = "127.0.0.1"; port = %d; patterns = [ "ch.*" ];\n'
            'ordering = "%s"; queue_size = 100000;\n%s\n' % (EP, port, ordering, extra))


def http_sink(url, extra):
    return '{ name = "hook"; type = "http"; url = "%s"; batch_max = 1; %s }' % (url, extra)


def start(t, rx, ordering, sink_extra):
    """Redis (locker and source) and one baton leading EP, subscribed."""
    redis = t.redis()
    rep = td.Replica(t, "r1", redis.port, http_sink(rx.url, sink_extra),
                     {"orders.cfg": psub_cfg(redis.port, ordering)}, lease=LEASE)
    t.require(td.wait_leader([rep], EP, 15) is not None, "baton did not lead within 15 s")
    probes = td.probe_subscribed(redis.port, "ch.probe")
    t.require(probes and probes[-1][1] == 1, "not subscribed within 15 s")
    return redis, rep


def delivered(rx):
    """[(rec, channel, channel seq, global seq)] of the publisher's accepted
    messages, in acceptance order (probes left out)."""
    out = []
    for r, e in sr.accepted_in_order(rx.records()):
        p = sr.parse_payload(e.get("payload"))
        if p is not None and e.get("channel") != "ch.probe":
            out.append((r, e.get("channel"), p[0], p[1]))
    return out


def wait_delivered(rx, n, timeout):
    return h.wait_until(lambda: len({d[3] for d in delivered(rx)}) >= n, timeout, 0.25)


def once_checks(t, pub, got):
    """Every message PUBLISH reached (one subscriber) accepted exactly once;
    nothing else. Returns (missing, duplicates)."""
    t.check(pub.error is None, "publisher: %r" % pub.error)
    sent = {e[0] for e in pub.entries if e[3] == 1}
    odd = [e for e in pub.entries if e[3] != 1]
    t.check(not odd, "%d PUBLISH did not reach exactly one subscriber, e.g. %r"
            % (len(odd), odd[:3]))
    gseqs = [d[3] for d in got]
    dups = h.duplicates(gseqs)
    missing = sorted(sent - set(gseqs))
    t.check(not missing, "%d of %d messages never accepted, e.g. global seqs %r"
            % (len(missing), len(sent), missing[:10]))
    t.check(not dups, "%d messages accepted more than once, e.g. %r"
            % (len(dups), sorted(dups.items())[:5]))
    t.check(not (set(gseqs) - sent), "accepted messages nobody published: %r"
            % sorted(set(gseqs) - sent)[:5])
    return missing, dups


def key_checks(t, rx, got):
    """Per channel: acceptance order = publish order; no request arrived
    while one of its channel was being processed. Returns (order
    violations, overlaps)."""
    bad = sr.order_violations([(d[1], d[2]) for d in got])
    t.check(not bad, "%d per-channel order violations (channel, previous, next), e.g. %r"
            % (len(bad), bad[:5]))
    ov = [r for r in rx.records() if r.ov]
    t.check(not ov, "%d requests arrived while a request of the same channel was being "
            "processed, e.g. %r" % (len(ov), ov[:3]))
    return bad, ov


def throughput(got):
    if len(got) < 2:
        return 0.0
    t0 = min(d[0].ta for d in got)
    t1 = max(d[0].td for d in got)
    return len(got) / max(t1 - t0, 1e-3)


# --------------------------------------------------------------------------

def test_key_order_throughput(t):
    name = "key_order_throughput"
    rx = sr.SlowReceiver(t, delay_s=0.020, key_mode="channel", name=name)
    redis, rep = start(t, rx, KEY_ORDERING, "max_in_flight = 64;")
    rate, secs = 1000, 20
    pub = sr.MultiPublisher(redis.port, ["ch.%02d" % i for i in range(50)], rate,
                            rate * secs).start()
    sampler = sr.MetricSampler(rep.mport, EP, ["baton_sink_in_flight",
                                               "baton_sink_concurrency_limit"]).start()
    t.require(pub.join(secs + 30), "publisher still running after %d s" % (secs + 30))
    ok = wait_delivered(rx, rate * secs, 30)
    time.sleep(0.5)
    sampler.halt()
    got = delivered(rx)
    recs = rx.records()
    missing, dups = once_checks(t, pub, got)
    bad, ov = key_checks(t, rx, got)
    tput = throughput(got)
    cmax, cmean = sr.concurrency_profile(recs)
    inflight = [s[1]["baton_sink_in_flight"] for s in sampler.samples
                if s[1]["baton_sink_in_flight"] is not None]
    limits = {s[1]["baton_sink_concurrency_limit"] for s in sampler.samples}
    pub_rate = len(pub.entries) / max(pub.t_end - pub.t_start, 1e-3)
    t.check(ok, "not everything accepted within 30 s of the last PUBLISH")
    t.check(tput >= 500, "throughput %.0f msg/s < 500" % tput)
    t.check(cmax > 1, "the receiver never saw two requests at once")
    t.check(limits == {64.0}, "baton_sink_concurrency_limit %r, expected 64" % limits)
    sr.result_line(name, "PASS" if not t.failures else "FAIL", ordering=KEY_ORDERING,
                   published=len(pub.entries), published_rate="%.0f" % pub_rate,
                   accepted=len(got), missing=len(missing), duplicates=len(dups),
                   order_violations=len(bad), same_channel_overlaps=len(ov),
                   throughput_msg_s="%.0f" % tput, receiver_concurrency_max=cmax,
                   receiver_concurrency_mean="%.1f" % cmean,
                   in_flight_gauge_max="%.0f" % max(inflight or [0]),
                   limit="/".join("%.0f" % x for x in sorted(x for x in limits if x is not None)),
                   requests=len(recs))


def test_strict_global_order(t):
    name = "strict_global_order"
    rx = sr.SlowReceiver(t, delay_s=0.020, key_mode="channel", name=name)
    redis, rep = start(t, rx, "strict", "max_in_flight = 64;")
    n = 200
    pub = sr.MultiPublisher(redis.port, ["ch.%02d" % i for i in range(50)], 200, n).start()
    t.require(pub.join(30), "publisher still running after 30 s")
    limit = sr.sink_gauge(rep.mport, "baton_sink_concurrency_limit", EP)
    ok = wait_delivered(rx, n, 30)
    time.sleep(0.3)
    got = delivered(rx)
    recs = rx.records()
    missing, dups = once_checks(t, pub, got)
    gbad = sr.order_violations([("all", d[3]) for d in got])
    cmax, _ = sr.concurrency_profile(recs)
    tput = throughput(got)
    t.check(ok, "not everything accepted within 30 s")
    t.check(not gbad, "%d global order violations (previous, next), e.g. %r"
            % (len(gbad), [b[1:] for b in gbad[:5]]))
    t.check(cmax == 1, "the receiver saw %d requests at once (strict: 1)" % cmax)
    t.check(limit == 1, "baton_sink_concurrency_limit %r, expected 1 (strict)" % limit)
    sr.result_line(name, "PASS" if not t.failures else "FAIL", published=len(pub.entries),
                   accepted=len(got), missing=len(missing), duplicates=len(dups),
                   global_order_violations=len(gbad), receiver_concurrency_max=cmax,
                   limit=limit, throughput_msg_s="%.1f" % tput)


def test_auto_limit_against_capped_receiver(t):
    name = "auto_limit"
    cap = 16
    rx = sr.SlowReceiver(t, delay_s=0.020, max_concurrent=cap, key_mode="channel", name=name)
    # 503s are retried: enough retries, short back-off, so that a message
    # refused a few times in a row is still delivered
    redis, rep = start(t, rx, "key", 'max_in_flight = "auto"; retries = 100; backoff_ms = 10; '
                       'backoff_max_ms = 100;')
    rate, secs, warm = 2000, 15, 5.0
    pub = sr.MultiPublisher(redis.port, ["ch.%03d" % i for i in range(200)], rate,
                            rate * secs).start()
    sampler = sr.MetricSampler(rep.mport, EP, ["baton_sink_concurrency_limit",
                                               "baton_sink_in_flight",
                                               "baton_sink_rtt_seconds"]).start()
    t.require(pub.join(secs + 30), "publisher still running after %d s" % (secs + 30))
    ok = wait_delivered(rx, rate * secs, 90)
    t_drained = time.monotonic()
    time.sleep(0.5)
    sampler.halt()
    got = delivered(rx)
    recs = rx.records()
    missing, dups = once_checks(t, pub, got)
    t0 = pub.t_start
    # the backlog: from warm s after the start until the last acceptance
    t_last = max((d[0].td for d in got), default=t_drained)
    window = [s for s in sampler.samples if t0 + warm <= s[0] <= t_last]
    limits = [s[1]["baton_sink_concurrency_limit"] for s in window
              if s[1]["baton_sink_concurrency_limit"] is not None]
    inflight = [s[1]["baton_sink_in_flight"] for s in window
                if s[1]["baton_sink_in_flight"] is not None]
    rtts = [s[1]["baton_sink_rtt_seconds"] for s in window
            if s[1]["baton_sink_rtt_seconds"] is not None]
    late = [r for r in recs if r.ta >= t0 + warm]
    early = [r for r in recs if r.ta < t0 + warm]
    share = sum(1 for r in late if r.st == 503) / float(max(len(late), 1))
    share_early = sum(1 for r in early if r.st == 503) / float(max(len(early), 1))
    tput = throughput(got)
    bad, ov = key_checks(t, rx, got)
    t.check(ok, "not everything accepted within 90 s of the last PUBLISH")
    t.check(len(limits) >= 10, "only %d samples of the limit under load" % len(limits))
    t.check(limits and min(limits) >= 8 and max(limits) <= 24,
            "baton_sink_concurrency_limit left 8..24 under load: min %s max %s (samples %s)"
            % (min(limits or [0]), max(limits or [0]), [int(x) for x in limits]))
    t.check(share < 0.05, "503s are %.1f %% of the requests after the first %.0f s (>= 5 %%)"
            % (100 * share, warm))
    cmax, cmean = sr.concurrency_profile([r for r in late if r.st != 503])
    sr.result_line(name, "PASS" if not t.failures else "FAIL", published=len(pub.entries),
                   accepted=len(got), missing=len(missing), duplicates=len(dups),
                   limit_min="%.0f" % min(limits or [0]), limit_max="%.0f" % max(limits or [0]),
                   limit_median="%.0f" % (statistics.median(limits) if limits else 0),
                   limit_samples=len(limits),
                   in_flight_mean="%.1f" % (statistics.mean(inflight) if inflight else 0),
                   rtt_ms_median="%.1f" % (1000 * statistics.median(rtts) if rtts else 0),
                   requests_after_warmup=len(late),
                   share_503_after_warmup="%.2f%%" % (100 * share),
                   share_503_first_5s="%.2f%%" % (100 * share_early),
                   receiver_concurrency_max=cmax, throughput_msg_s="%.0f" % tput,
                   order_violations=len(bad), same_channel_overlaps=len(ov))
    sr.say(name, "limit samples under load: %s" % " ".join("%.0f" % x for x in limits))


def test_key_exclusion(t):
    name = "key_exclusion"
    rx = sr.SlowReceiver(t, delay_s=0.020, key_mode="channel", name=name)
    redis, rep = start(t, rx, KEY_ORDERING, "max_in_flight = 64;")
    n = 1600
    chans = ["ch.k%d" % i for i in range(5)]
    # bursts: 50 messages (about 10 per channel) every 250 ms, 200 msg/s;
    # each channel takes at most 50/s one at a time, so every channel has a
    # backlog of ready messages most of the time
    pub = sr.MultiPublisher(redis.port, chans, 200, n, batch=50).start()
    t.require(pub.join(40), "publisher still running after 40 s")
    ok = wait_delivered(rx, n, 30)
    time.sleep(0.3)
    got = delivered(rx)
    recs = rx.records()
    missing, dups = once_checks(t, pub, got)
    bad, ov = key_checks(t, rx, got)
    cmax, cmean = sr.concurrency_profile(recs)
    hist = {}
    for r in recs:
        hist[r.c] = hist.get(r.c, 0) + 1
    t.check(ok, "not everything accepted within 30 s")
    t.check(cmax > 1, "the receiver never saw two requests at once (max %d)" % cmax)
    sr.result_line(name, "PASS" if not t.failures else "FAIL", ordering=KEY_ORDERING,
                   published=len(pub.entries), accepted=len(got), missing=len(missing),
                   duplicates=len(dups), same_channel_overlaps=len(ov),
                   order_violations=len(bad), receiver_concurrency_max=cmax,
                   receiver_concurrency_mean="%.2f" % cmean,
                   concurrency_histogram=",".join("%d:%d" % kv for kv in sorted(hist.items())),
                   throughput_msg_s="%.0f" % throughput(got))


if __name__ == "__main__":
    sr.parallel_main(globals())
