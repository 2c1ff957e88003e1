/* lease.pml -- baton's lease protocol and term-scoped delivery, for spin 6.5.
 *
 * guard/model/README.md gives the command, the assumptions, the figures and
 * the map from each part below to the C function that implements it.
 *
 * PROCESSES
 *   Guard(i)  i = 0..2  the lease thread of replica i (guard/active_guard.c)
 *   Fwd(i)    i = 0..2  its forwarder and bounded sink write (src/gateway.c,
 *                       src/forward.c, src/sink_*.c); with -DINFLIGHT2 its
 *                       concurrent HTTP sink: up to two requests in flight,
 *                       one per ordering key
 *   Redis()             one Redis node: the lock key with expiry on Redis's
 *                       clock, the epoch key, TIME (guard/locker_redis.c)
 *   Env()               time, clock drift, connection breaks, Redis restarts
 *   Ren(i)              (RENEWER only) the replica's renewer thread: the
 *                       happy-path renewals of a term delegated by Guard(i)
 *                       (guard/renewer.c)
 *   Watch(i)            (LATE_NOTICE only) the subscriber thread that notices
 *                       a broken connection
 *   the sink            a monitor: deliver() checks what it receives
 *
 * TIME
 *   Discrete ticks. Redis's clock is the time axis: one Env() tick is one
 *   tick of Redis's clock (any monotone reparametrisation of real time keeps
 *   the order of all events, so nothing is lost by choosing Redis's clock).
 *   All timers are relative (ticks left), so there is no horizon: the state
 *   space is finite because the budgets below bound the number of grants,
 *   restarts, breaks, releases and messages -- not because time stops.
 *
 *   Processes take their steps at arbitrary moments: time may advance between
 *   any two steps (Env() may always tick, except that Redis applies a request
 *   within DMAX ticks of its send). So a replica, or one of its threads, can
 *   be paused (SIGSTOP, swap, a slow thread) for any length at any point, and
 *   a reply may be read arbitrarily late; the clocks keep running meanwhile.
 *
 *   Drift: a replica's clock may stand still for one tick (its timers are not
 *   decremented while Redis's are) once per busy period -- a stretch of time
 *   in which it times something that matters (TIMING(i)). Every lease
 *   interval (from a request's send to the deadline it gives) lies inside
 *   one busy period, so each interval may lose one tick, placed anywhere;
 *   MARGIN = 1 tick covers it. -DDRIFT_WINDOW instead allows one lost tick
 *   in any DRIFT_W consecutive ticks (bigger state space); -DNO_DRIFT none.
 *   A replica clock running faster than Redis's only makes its deadlines
 *   pass sooner: safe, not modelled.
 *
 * PROPERTIES (assertions; the first violated one is reported)
 *   S1  never two replicas inside a sink write at the same time (checked when
 *       a write starts; a write is "inside" from the leadership check before
 *       it until it completes or its bound passes);
 *   S2  the sink never receives an epoch lower than one it already received;
 *   S3  a message is written only within the term it was received in: when
 *       its write completes, the replica is in that same term (same epoch,
 *       deadline not passed) and that term never ended meanwhile (a passed
 *       deadline is final);
 *   S4  (-DS4, optional) when a write completes, Redis still holds that
 *       term's token;
 *   S5  (INFLIGHT2) per-key order, at the sink: on each key, within an
 *       epoch, the messages are accepted in their receive order, none
 *       skipped (the first accepted of an epoch is the first received in
 *       it, each next one the next received on that key);
 *   L1  (-DLIVE: LTL, weak fairness) with Redis up and replica 0 running,
 *       some running replica leads infinitely often.
 *   -DNO_S1 / -DNO_S2 / -DNO_S3 / -DNO_S5 switch one off (to see what else
 *   breaks).
 *   With INFLIGHT2 a replica may be inside several requests at once (that
 *   is allowed); S1 is about replicas: a request may start only while no
 *   other replica has one in flight.
 *
 * SWITCHES
 *   wrong designs (each must give a counterexample):
 *   LATE_RENEW_EXTENDS   a renew answered after the deadline revives the term
 *   CHECK_PER_BATCH      "leader now" once per batch, then one write of the
 *                        whole batch with no bound
 *   DEADLINE_FROM_REPLY  deadline = time the reply is read + ttl - margin
 *   GEN_AFTER_GRANT      the connection generation read after the grant
 *   NO_MARGIN            safety margin 0: drift is no longer covered
 *   NO_TIME_FLOOR        epoch = stored + 1 (plain INCR: back to 1 after a
 *                        data loss)
 *   ZOMBIE_RENEW         (with LIVE) a guard whose term ended keeps renewing
 *                        the key instead of releasing it
 *   environment (drop an assumption of the real model; see README "Gap"):
 *   RESTART_MID_WRITE    Redis may restart while a sink write is in flight
 *   LATE_NOTICE          a replica notices a broken connection at a later
 *                        step of its own (its subscriber thread), not at once
 *   design candidate:
 *   FENCE                after a data loss Redis grants nothing for one ttl
 *   the renewer thread (must verify like the real model):
 *   RENEWER              a term begins delegated: Ren(i) renews it on its own
 *                        request slot (rrq...: two independent slots over-
 *                        approximate the one pipelined connection), extends
 *                        it with the CAS of term_extend and hands it back to
 *                        the guard on LOST (the guard ends the term) or on a
 *                        connection error (the guard notices, renews itself
 *                        until a renew succeeds, then delegates again); the
 *                        guard leaves a term (unlock, standby) only while
 *                        the renewer has no request in flight for it
 *   concurrent delivery (must verify like the real model):
 *   INFLIGHT2            the HTTP sink with several requests in flight
 *                        (max_in_flight = MAXINF = 2), ordered per key:
 *                        every message gets one of NK = 2 keys when it is
 *                        received; the replica keeps its messages in receive
 *                        order (QLEN, 2 or 3, pending and in flight
 *                        together); a request for one starts only after the
 *                        check of its term (same as today: epoch equal,
 *                        deadline not passed, generation unchanged) and only
 *                        when no earlier message of its key is left (so one
 *                        request per key in flight, in receive order; keys
 *                        in parallel); a request lives while its term does
 *                        (each asks the lease every poll slice:
 *                        run_request) and completes at any moment of it;
 *                        when the term ends (deadline, LOST, release) all of
 *                        its requests in flight are aborted and its messages
 *                        settled
 *   RX_FENCE             (with INFLIGHT2) a fencing receiver: once, while a
 *                        replica has requests in flight, one is answered
 *                        409; the term ends in that step (its requests
 *                        aborted) and the lease is given up (src/gateway.c
 *                        on_fenced); S1-S5 must hold as without it
 *   RX_FENCE_RELEASE_FIRST (wrong, with RX_FENCE) the lease is released at
 *                        the 409 while the term's other requests go on
 *   with INFLIGHT2, wrong designs:
 *   NO_ABORT_INFLIGHT    when a term ends only the first request in flight
 *                        is aborted: the other keeps going (S3; with S3 off
 *                        and a third message, S1)
 *   NO_KEY_BUSY          a key's next message may start while its previous
 *                        one is still in flight (two requests on one key):
 *                        they complete out of order (S5)
 *   an operator's step-down (must verify like the real model):
 *   STEPDOWN             baton_active_guard_step_down (POST /v1/endpoints/
 *                        NAME/step-down, /v1/drain): asked at any moment of
 *                        a term -- also while the guard's (or the
 *                        renewer's) renew is in flight and while standbys'
 *                        try_locks are on their way; from then on the
 *                        replica consumes nothing more (no arrivals), the
 *                        lease keeps being renewed while what was received
 *                        drains, and only once drained (no write in
 *                        flight) and with the renew answered is the term
 *                        ended and the lease released (the graceful path of
 *                        a stop, for one guard). The hold that follows (no
 *                        try_lock for hold_ms, or until resumed) only takes
 *                        behaviours away: not modelled, so the runs cover
 *                        every hold, 0 included
 *   STEPDOWN_RELEASE_EARLY (wrong, with STEPDOWN) the unlock is sent when
 *                        the step-down is asked, before the drain finished:
 *                        the write in flight completes after the lease was
 *                        let go (S3; a standby may take the lease meanwhile)
 *   with RENEWER, wrong designs:
 *   REN_NO_CAS           the renewer's extension is a read, then (another
 *                        step) a plain store: it revives an ended term
 *   REN_NO_WAIT          the guard leaves the term without waiting for the
 *                        renewer's request in flight: the late LOST of the
 *                        old term's renew is handed back in the next term
 *                        and ends it in the middle of a write (S3)
 *   same-database fencing (issue 41; must verify, with no assumption on the
 *   replicas' clocks, pauses or message delays):
 *   STORE_FENCE          the lease store is PostgreSQL and the sink writes
 *                        to the same database: Redis() stands for it (the
 *                        lease row: ktok/krem live token, ptok the token
 *                        column, kept after expiry; stored the epoch
 *                        column) and Fwd(i)'s write is a transaction: (1)
 *                        SELECT ... WHERE token = T AND expires_at >
 *                        clock_timestamp() FOR KEY SHARE (0 rows: refused,
 *                        the message is settled as fenced; no local check
 *                        of the term before it), (2)+(3) the message row
 *                        and COMMIT. An open transaction holds its share
 *                        lock (sh) until it commits or is aborted (the
 *                        store's idle_in_transaction timeout, the client's
 *                        rollback, a broken connection: at any moment;
 *                        nothing commits, the message stays queued). An
 *                        acquisition of a free row takes FOR UPDATE: it is
 *                        applied only while no share lock is held (waits;
 *                        or gives up: lock_timeout, "held"), and re-checks
 *                        and grants in that step; renewals and releases
 *                        (FOR NO KEY UPDATE) never wait, and the share
 *                        lock stays on the row they update. Replica clocks
 *                        are independent of the store's (each ticks on its
 *                        own steps: any drift, either way; margin 0; ttl 1
 *                        tick of the store's clock, the lease 2 of the
 *                        replica's, see "timings"), requests are applied
 *                        arbitrarily late (no DMAX), pauses are arbitrary
 *                        as everywhere, and a restart keeps the rows
 *                        (durable) and aborts every open transaction (any
 *                        time, mid-write included). S1 counts a write from
 *                        its check to its commit or abort; S2 is on commit
 *                        order; S3 becomes: when a write commits, no later
 *                        term has been granted since its check (the epoch
 *                        column is still its epoch) and its check found the
 *                        term live on the store's clock (wlv): the write is
 *                        equivalent to one made atomically at its check,
 *                        inside its term. S4 does not hold there, by
 *                        design: a commit may follow the row's expiry or
 *                        its release (the next acquisition waits for it)
 *   with STORE_FENCE, wrong designs:
 *   STORE_FENCE_NO_LOCK  the check is a plain SELECT (no share lock): an
 *                        acquisition commits between the check and the
 *                        write's commit (S1; S2 or S3 otherwise)
 *   STORE_FENCE_CLIENT_CLOCK the check compares the token only (the row
 *                        keeps it after expiry) and takes the replica's own
 *                        deadline for expires_at: a replica whose clock
 *                        lags writes after its term expired on the store's
 *                        clock (S3; S1 and S2 still hold: the lock and the
 *                        token alone keep the terms apart)
 *
 * REDUCTIONS (each keeps every behaviour the properties can observe; marked
 * "(reduction)" where they are made)
 *   - a try_lock answered "held", an unlock, and a try_lock or unlock whose
 *     connection broke bring the guard back to standby at once (what it does
 *     next does not depend on when it reads those answers);
 *   - messages of an ended term are dropped when the term ends, and a write
 *     is aborted when its bound passes (the forwarder would do the same
 *     whenever it looks: the check never says yes again for an ended term);
 *     INFLIGHT2: the requests of a term are aborted in the step that ends it
 *     (the C code aborts each at its next poll slice, before it writes or
 *     reads anything more);
 *   - INFLIGHT2: the two keys are symmetric, so the first message is on
 *     key 0; a retry of a failed attempt is part of its request's time in
 *     flight (its check is the term being live, which the request needs
 *     anyway; a retry waiting while UNSURE does less than a request that
 *     goes on);
 *   - messages arrive when a term begins and after a write completes (the
 *     forwarder may wait arbitrarily, so a later arrival in the same term
 *     carries the same epoch and allows nothing more);
 *   - a renew (the guard's or the renewer's) is not sent in the tick its
 *     deadline was set (it could not move the deadline);
 *   - what matters only in a term is reset when the guard is back in standby;
 *   - STORE_FENCE: a store tick changes nothing but the row's expiry, and
 *     ticks are free steps, so ttl 1 lets the row expire at any moment after
 *     its last grant or renewal, as any ttl would; a check's or an unlock's
 *     age is not timed (no DMAX); the message row and the COMMIT are one
 *     step (the row is invisible until the commit, and it takes no lock
 *     another transaction waits for).
 */

#define N 3

/* ---- timings (ticks) ---- */
#ifdef STORE_FENCE
/* The replicas' clocks are unrelated to the store's (each ticks on its own
 * steps, at any rate), and the store's ticks change nothing but the row's
 * expiry: a timer's length only sets how many steps it takes. ttl 1: the
 * row expires at any moment after its last grant or renewal, as with any
 * ttl. The replica's lease, 2 ticks of its own clock (margin 0): a renewal
 * can be sent before its deadline and move it. */
#ifndef TTL
#define TTL 1
#endif
#define MARGIN 0
#define LEASE 2
#else
#ifndef TTL
#define TTL 3            /* key ttl */
#endif
#ifdef NO_MARGIN
#define MARGIN 0
#endif
#ifndef MARGIN
#define MARGIN 1         /* safety margin */
#endif
#define LEASE (TTL - MARGIN)
#endif
#ifndef DMAX
#define DMAX 1           /* a request is applied by Redis within DMAX ticks of its send */
#endif
#ifndef DRIFT_W
#define DRIFT_W TTL      /* DRIFT_WINDOW: one lost tick per DRIFT_W ticks */
#endif

/* ---- budgets: the bounds of the exploration ---- */
#ifndef MAXTERMS
#define MAXTERMS 3       /* grants by Redis (lost grants included) */
#endif
#ifndef MAXRESTART
#define MAXRESTART 1     /* Redis restarts that lose all data */
#endif
#ifndef MAXBRK
#define MAXBRK 1         /* breaks of one replica's connection (no data loss) */
#endif
#ifndef MAXMSG
#define MAXMSG 2         /* messages from the source, all replicas together */
#endif
#ifndef MAXREL
#define MAXREL 1         /* graceful releases */
#endif
#ifdef INFLIGHT2
#ifndef QLEN
#define QLEN 2           /* INFLIGHT2: pending and in-flight messages per replica (2 or 3) */
#endif
#ifndef MAXINF
#define MAXINF 2         /* INFLIGHT2: max_in_flight, requests in flight per replica */
#endif
#define NK 2             /* INFLIGHT2: ordering keys */
#ifdef CHECK_PER_BATCH
#error "CHECK_PER_BATCH is a one-write forwarder: not with INFLIGHT2"
#endif
#else
#if defined(NO_ABORT_INFLIGHT) || defined(NO_KEY_BUSY)
#error "NO_ABORT_INFLIGHT and NO_KEY_BUSY need INFLIGHT2"
#endif
#endif
#ifndef QLEN
#define QLEN 1           /* forwarder queue per replica (1 or 2) */
#endif
#ifdef STORE_FENCE
#if defined(INFLIGHT2) || defined(CHECK_PER_BATCH) || defined(LIVE) || defined(FENCE) || defined(RESTART_MID_WRITE)
#error "STORE_FENCE: one transaction at a time per replica, safety only, restarts keep the rows"
#endif
#else
#if defined(STORE_FENCE_NO_LOCK) || defined(STORE_FENCE_CLIENT_CLOCK)
#error "STORE_FENCE_NO_LOCK and STORE_FENCE_CLIENT_CLOCK need STORE_FENCE"
#endif
#endif

#ifdef LIVE
#undef MAXRESTART
#define MAXRESTART 0     /* L1: Redis up */
#undef MAXMSG
#define MAXMSG 0
#endif

/* ---- guard states ---- */
#define G_STBY 0   /* standby: may send try_lock */
#define G_ACQ  1   /* try_lock sent */
#define G_PUB  2   /* GEN_AFTER_GRANT only: granted, generation not read yet */
#define G_LEAD 3   /* in a term, or its deadline just passed */
#define G_REN  4   /* renew sent */
#define G_CHK  5   /* check sent (lease unsure) */
#define G_UNL  6   /* unlock sent */
#define G_DONE 7   /* RENEWER: released (term ended): unlock once the renewer is idle */
#define G_GONE 8   /* RENEWER: check LOST (term ended): standby once the renewer is idle */

/* ---- requests and replies ---- */
#define R_NONE 0
#define R_ACQ  1
#define R_REN  2
#define R_CHK  3
#define R_UNL  4
#define P_PEND 0   /* not applied yet */
#define P_OK   1   /* granted / renewed / token matches */
#define P_NO   2   /* lost (key gone or another token) */
#define P_ERR  3   /* the connection broke: request dropped or reply lost */
#define R_EXT  5   /* REN_NO_CAS: the renewer read OK and a live term, store pending */
#define HB_NONE 0  /* RENEWER: nothing handed back */
#define HB_LOST 1  /* the renewer's renew said LOST: the guard ends the term */
#define HB_ERR  2  /* the renewer's renew failed (connection): the guard takes over */

/* ---- replicas ---- */
byte gst[N];       /* guard state */
byte rq[N];        /* outstanding request (one lease connection: one at a time) */
byte rp[N];        /* its reply */
byte rtok[N];      /* the token it carries (= the term's epoch) */
byte gep[N];       /* epoch granted to an acquire */
byte cand[N];      /* deadline the request would give, ticks left: send + ttl - margin
                      (replica clock); for a check or unlock only its age (DMAX) */
bool chgs[N];      /* generation changed since the outstanding request was sent */
bool chg[N];       /* generation changed since the term's last acquire/renew/check: UNSURE */
bool pn[N];        /* LATE_NOTICE: connection broken, not noticed yet */
byte tep[N];       /* epoch of the current term (0 in standby) */
byte tdl[N];       /* ticks left until the term's deadline (replica clock); 0 = no live term */
bool tend[N];      /* ghost: the current term has ended (deadline passed, lost or released) */
byte dq[N];        /* drift state */
#ifdef RENEWER
/* the renewer thread's request slot for replica i's lease (one request of the
 * pipelined batch; modelled as a second, independent slot) */
bool ren_on[N];    /* renewal delegated to the renewer (renewer_add) */
byte rrq[N];       /* its outstanding request: R_NONE, R_REN (R_EXT: REN_NO_CAS) */
byte rrp[N];       /* its reply */
byte rrtok[N];     /* the token it carries (tep[i] when sent) */
byte rcand[N];     /* deadline it would give, ticks left: send + ttl - margin */
bool rchgs[N];     /* generation changed since it was sent */
byte hb[N];        /* handed back to the guard: HB_NONE, HB_LOST, HB_ERR */
#ifdef REN_NO_CAS
bool rlive[N];     /* step 1 saw a live term and a later deadline: step 2 stores */
#endif
#endif

#ifndef INFLIGHT2
typedef queue { byte m[QLEN] };
queue q[N];        /* forwarder queue: the epoch each message was received in */
#else
/* INFLIGHT2: the replica's messages in receive order, pending or in flight
 * (a request in flight keeps its place until it completes or is aborted) */
typedef mqueue {
	byte ep[QLEN]; /* the epoch it was received in */
	byte s[QLEN];  /* its place on its key in that term: 1, 2, ... */
	bit k[QLEN];   /* its ordering key */
	bit f[QLEN]    /* a request for it is in flight */
};
mqueue q[N];
byte nfl[N];       /* requests in flight (at most MAXINF; one per key) */
byte kseq[N * NK]; /* messages received on each key in the current term */
byte kn[NK];       /* the sink, per key: the place of the last message it
                      accepted in epoch `last` (0: none yet) */
byte tj, tk, te;   /* scratch for the steps below (0 between steps; not hidden: BFS) */
#endif
byte qn[N];
bool wr[N];        /* inside a sink write */
byte wdl[N];       /* ticks left on the write's bound (the time left when it started) */
byte wn[N];        /* messages in the write (CHECK_PER_BATCH: several) */
#ifdef STORE_FENCE
/* wr[i]: replica i's sink transaction is open and its check found the row
 * (from the check to the commit or the abort) */
bool sh[N];        /* it holds the lease row's FOR KEY SHARE lock */
bool wlv[N];       /* ghost: its check found the term live on the store's clock */
#endif

/* ---- Redis ---- */
byte ktok;         /* the lock key: token (the term's epoch); 0 = absent */
byte krem;         /* ticks until it expires (Redis clock) */
byte stored;       /* the epoch key; 0 = absent (data lost) */
byte rtime;        /* TIME in us: above every epoch issued so far, survives restarts */
byte frem;         /* FENCE: ticks until grants resume */
#ifdef STORE_FENCE
byte ptok;         /* the row's token column: kept after expiry (ktok = 0
                      then: no live token), cleared by a release */
#define SHARED (sh[0] || sh[1] || sh[2])   /* a share lock is held on the row */
#endif

/* ---- budgets used, sink ---- */
byte grants, nbrk, nrst, nmsg, nrel, nfence;
#ifdef STEPDOWN
#ifndef MAXSD
#define MAXSD 1          /* step-downs asked, all replicas together */
#endif
bool sd[N];        /* a step-down was asked in the current term */
byte nsd;
#define SD(i) sd[i]
#define SD_RESET(i) sd[i] = 0;
#else
#define SD(i) 0
#define SD_RESET(i)
#endif
byte last;         /* the sink: highest epoch received so far */

#ifdef LIVE
bool dead[N];      /* stopped for good (replicas 1 and 2) */
bool rwait[N];     /* standby waits for the next tick before trying again */
#define ALIVE(i) (!dead[i])
#define RETRY_OK(i) (!rwait[i])
#define HELD_WAIT(i) rwait[i] = 1
#define GRANT_BUDGET 1
#else
#define ALIVE(i) 1
#define RETRY_OK(i) 1
#define HELD_WAIT(i) skip
#define GRANT_BUDGET (grants < MAXTERMS)
#endif

/* a write that can still reach the sink */
#if defined(INFLIGHT2)
#define LIVEW(j) (nfl[j] > 0)
#elif defined(CHECK_PER_BATCH) || defined(STORE_FENCE)
#define LIVEW(j) (wr[j])
#else
#define LIVEW(j) (wr[j] && wdl[j] > 0)
#endif
#define NO_LIVE_WRITE (!LIVEW(0) && !LIVEW(1) && !LIVEW(2))

/* ================================================================== */
/* connection                                                          */

/* The replica notices its connection broke: its generation changes. */
inline noticed(i) {
	chg[i] = 1; chgs[i] = 1
#ifdef RENEWER
	; rchgs[i] = 1
#endif
}

inline notice(i) {
	if
	:: gst[i] != G_STBY ->          /* (a standby has no lease to doubt) */
#ifdef LATE_NOTICE
		pn[i] = 1
#else
		noticed(i)
#endif
	:: else -> skip
	fi
}

inline send(i, kind, tok) {
	rq[i] = kind; rp[i] = P_PEND; rtok[i] = tok;
	chgs[i] = 0;                    /* the generation is read just before sending */
#ifndef STORE_FENCE
	cand[i] = LEASE                 /* send time + ttl - margin */
#else
	/* (reduction) no DMAX: a check's or an unlock's age is not timed */
	if
	:: kind == R_ACQ || kind == R_REN -> cand[i] = LEASE
	:: else -> cand[i] = 0
	fi
#endif
}

inline done_req(i) {
	rq[i] = R_NONE; rp[i] = P_PEND; rtok[i] = 0; cand[i] = 0; gep[i] = 0; chgs[i] = 0
}

#ifdef RENEWER
/* the renewer's slot: same as send()/done_req() */
inline rsend(i) {
	rrq[i] = R_REN; rrp[i] = P_PEND; rrtok[i] = tep[i];
	rchgs[i] = 0;                   /* the generation is read just before sending */
	rcand[i] = LEASE
}
inline rdone(i) {
	rrq[i] = R_NONE; rrp[i] = P_PEND; rrtok[i] = 0; rcand[i] = 0; rchgs[i] = 0
}
#ifdef REN_NO_WAIT
#define REN_IDLE(i) 1              /* the guard does not wait for the renewer */
#else
#define REN_IDLE(i) (rrq[i] == R_NONE)   /* renewer_remove: no request in flight */
#endif
/* (REN_ON/REN_OFF carry their own ';': without RENEWER they are nothing) */
#define REN_OFF(i) ren_on[i] = 0;
#define REN_ON(i) ren_on[i] = 1;
#define OWN_RENEW(i) (!ren_on[i] && hb[i] == HB_NONE)   /* the guard renews itself */
#else
#define REN_IDLE(i) 1
#define REN_OFF(i)
#define REN_ON(i)
#define OWN_RENEW(i) 1
#endif

/* ================================================================== */
/* forwarder queue                                                     */

#ifndef INFLIGHT2
inline pop(i) {
#if QLEN > 1
	q[i].m[0] = q[i].m[1]; q[i].m[1] = 0;
#else
	q[i].m[0] = 0;
#endif
	qn[i]--
}

/* A message from the source, tagged with the replica's current epoch (the
 * C code drops it at once when there is no lease at all). (Reduction: see
 * the header.) */
inline arrive(i) {
	q[i].m[qn[i]] = tep[i]; qn[i]++; nmsg++;
	printf("r%d: message received in term %d\n", i, tep[i])
}
inline maybe_arrive(i) {
	do
	:: nmsg < MAXMSG && tdl[i] > 0 && qn[i] < QLEN && !SD(i) -> arrive(i)
	:: true -> break
	od
}

/* Messages of an ended term are settled as term_ended: dropped, never
 * delivered. Ended ones are always at the head. */
inline settle1(i) {
	if
	:: !wr[i] && qn[i] > 0 && (tep[i] != q[i].m[0] || tdl[i] == 0) ->
		printf("r%d: message of term %d dropped (term_ended)\n", i, q[i].m[0]); pop(i)
	:: else -> skip
	fi
}
inline settle(i) {
	settle1(i);
#if QLEN > 1
	settle1(i)
#endif
}
#define DRAINED(i) (!wr[i])
#define ABORT_ALL(i)
#else
/* INFLIGHT2. The queue keeps receive order; a message leaves it when its
 * request completes or when it is settled. */

/* remove entry j (shift the later ones down) */
inline qdel(i, j) {
	tk = j;
	do
	:: tk + 1 < qn[i] ->
		q[i].ep[tk] = q[i].ep[tk + 1]; q[i].s[tk] = q[i].s[tk + 1];
		q[i].k[tk] = q[i].k[tk + 1]; q[i].f[tk] = q[i].f[tk + 1]; tk++
	:: else -> break
	od;
	q[i].ep[tk] = 0; q[i].s[tk] = 0; q[i].k[tk] = 0; q[i].f[tk] = 0; tk = 0;
	qn[i]--
}

/* A message from the source on key `key`, tagged with the replica's current
 * epoch and its place on the key in this term. (Reduction: see the header.) */
inline arrive(i, key) {
	kseq[i * NK + key]++;
	q[i].ep[qn[i]] = tep[i]; q[i].k[qn[i]] = key; q[i].s[qn[i]] = kseq[i * NK + key];
	qn[i]++; nmsg++;
	printf("r%d: message %d of key %d received in term %d\n", i, kseq[i * NK + key], key, tep[i])
}
/* (reduction) the keys are symmetric: the first message is on key 0 */
inline maybe_arrive(i) {
	do
	:: nmsg < MAXMSG && tdl[i] > 0 && qn[i] < QLEN && !SD(i) -> arrive(i, 0)
	:: nmsg < MAXMSG && tdl[i] > 0 && qn[i] < QLEN && nmsg > 0 && !SD(i) -> arrive(i, 1)
	:: true -> break
	od
}

/* Messages of an ended term, not in flight, are settled as term_ended:
 * dropped, never delivered (their requests were aborted when the term
 * ended: abort_all). */
inline settle(i) {
	tj = 0;
	do
	:: tj < qn[i] ->
		if
		:: !q[i].f[tj] && (tep[i] != q[i].ep[tj] || tdl[i] == 0) ->
			printf("r%d: message %d of key %d, term %d, dropped (term_ended)\n",
			       i, q[i].s[tj], q[i].k[tj], q[i].ep[tj]);
			qdel(i, tj)
		:: else -> tj++
		fi
	:: else -> break
	od;
	tj = 0
}

/* The term ended: every request of it in flight is aborted (each asks the
 * lease every poll slice). NO_ABORT_INFLIGHT: only the first one is. */
inline abort_all(i) {
	tj = 0;
	do
	:: tj < qn[i] ->
		if
		:: q[i].f[tj] -> q[i].f[tj] = 0; nfl[i]--;
			printf("r%d: request for message %d of key %d aborted (term %d ended)\n",
			       i, q[i].s[tj], q[i].k[tj], q[i].ep[tj]);
#ifdef NO_ABORT_INFLIGHT
			tj = QLEN
#else
			tj++
#endif
		:: else -> tj++
		fi
	:: else -> break
	od;
	tj = 0
}
#define DRAINED(i) (nfl[i] == 0)
/* (carries its own leading ';': without INFLIGHT2 it is nothing, so the
 * other runs are the same model as before) */
#define ABORT_ALL(i) ; abort_all(i)
#endif

/* ================================================================== */
/* term                                                                */

/* back to standby; what mattered only in the term is reset */
inline standby(i) {
	done_req(i); gst[i] = G_STBY; tep[i] = 0; tend[i] = 0; chg[i] = 0; chgs[i] = 0; pn[i] = 0;
	SD_RESET(i)
#ifdef RENEWER
	ren_on[i] = 0; hb[i] = HB_NONE;  /* (the renewer's slot is idle: the guard waited) */
#endif
#ifdef INFLIGHT2
	kseq[i * NK] = 0; kseq[i * NK + 1] = 0;
#endif
	HELD_WAIT(i)
}

inline term_end(i) {
	tdl[i] = 0; tend[i] = 1 ABORT_ALL(i); settle(i)
}

/* Replica i's connection breaks: a request not applied yet is dropped, a
 * reply not read yet is lost (the guard reads an error). */
inline brk(i) {
	notice(i);
	if
	:: rq[i] == R_ACQ || rq[i] == R_UNL -> standby(i)      /* (reduction) */
	:: rq[i] == R_REN || rq[i] == R_CHK -> rp[i] = P_ERR
	:: else -> skip
	fi
#ifdef RENEWER
	;
	if
	:: rrq[i] == R_REN -> rrp[i] = P_ERR   /* the renewer's request: dropped or reply lost */
	:: else -> skip
	fi
#endif
}

/* ================================================================== */
/* clocks                                                              */

/* one tick of replica i's clock */
inline ltick(i) {
	if
	:: cand[i] > 0 -> cand[i]--
	:: else -> skip
	fi;
#ifdef RENEWER
	if
	:: rcand[i] > 0 -> rcand[i]--
	:: else -> skip
	fi;
#endif
	if
	:: tdl[i] > 0 -> tdl[i]--;
		if
		:: tdl[i] == 0 -> tend[i] = 1;  /* the deadline passed: the term ended, for good */
			printf("r%d: deadline of term %d passed: term ended\n", i, tep[i])
			ABORT_ALL(i)
		:: else -> skip
		fi
	:: else -> skip
	fi;
	if
	:: wdl[i] > 0 -> wdl[i]--;
		if
		:: wdl[i] == 0 && wr[i] -> wr[i] = 0; wn[i] = 0;   /* aborted at its bound */
			printf("r%d: sink write aborted at its bound (not delivered)\n", i)
		:: else -> skip
		fi
	:: else -> skip
	fi;
	settle(i)
}

/* replica i times something that matters: a live term deadline, a write's
 * bound, or a grant not read yet (its candidate deadline) */
#define TIMING(i) (tdl[i] > 0 || wdl[i] > 0 || (rq[i] == R_ACQ && rp[i] == P_OK))

/* one tick of Redis's clock, as replica i's clock sees it */
inline rtick(i) {
#if defined(STORE_FENCE)
	skip                            /* replica clocks tick on their own steps (Env) */
#elif defined(NO_DRIFT)
	ltick(i)
#elif defined(DRIFT_WINDOW)
	if
	:: !TIMING(i) -> dq[i] = 0; ltick(i)
	:: else ->
		if
		:: dq[i] == 0 -> dq[i] = DRIFT_W - 1;     /* replica i's clock loses this tick */
			printf("   (r%d's clock stands still this tick)\n", i)
		:: true ->
			if
			:: dq[i] > 0 -> dq[i]--
			:: else -> skip
			fi;
			ltick(i)
		fi
	fi
#else
	if
	:: !TIMING(i) -> dq[i] = 0; ltick(i)
	:: else ->
		if
		:: !dq[i] -> dq[i] = 1;                   /* replica i's clock loses this tick */
			printf("   (r%d's clock stands still this tick)\n", i)
		:: true -> ltick(i)
		fi
	fi
#endif
#ifdef LIVE
	; rwait[i] = 0
#endif
}

/* ================================================================== */
/* Redis                                                               */

/* SCRIPT_ACQUIRE: SET NX PX ttl; epoch = max(stored + 1, TIME) */
inline grant(i) {
	if
	:: ktok == 0 && GRANT_BUDGET ->
#ifdef LIVE
		ktok = i + 1;                /* L1 needs no epochs: token = replica */
#else
		grants++;
		rtime++;                     /* TIME moved since the last script */
#ifdef NO_TIME_FLOOR
		stored = stored + 1;
#else
		if
		:: stored + 1 > rtime -> stored = stored + 1
		:: else -> stored = rtime
		fi;
#endif
		ktok = stored;
#endif
#ifdef STORE_FENCE
		ptok = ktok;
#endif
		krem = TTL; gep[i] = ktok; rp[i] = P_OK;
		printf("redis: grants r%d epoch %d (key expires in %d ticks)\n", i, ktok, TTL)
	:: else -> standby(i);           /* held (reduction) */
		printf("redis: r%d's try_lock: held\n", i)
	fi
}

inline apply(i) {
	if
	:: rq[i] == R_ACQ ->
#ifdef FENCE
		if
		:: stored == 0 ->            /* the epoch key is gone: data lost */
			rtime++; stored = rtime; frem = TTL; standby(i);
			printf("redis: epoch key gone (data lost): no grant for %d ticks\n", TTL)
		:: stored != 0 && frem > 0 -> standby(i)
		:: else -> grant(i)
		fi
#else
		grant(i)
#endif
	:: rq[i] == R_REN ->             /* SCRIPT_RENEW: compare the token, PEXPIRE ttl */
		if
		:: ktok != 0 && ktok == rtok[i] -> krem = TTL; rp[i] = P_OK;
			printf("redis: renews r%d's key (epoch %d): expires in %d ticks\n", i, ktok, TTL)
		:: else -> rp[i] = P_NO; printf("redis: r%d's renew: LOST\n", i)
		fi
	:: rq[i] == R_CHK ->             /* SCRIPT_CHECK: compare the token */
		if
		:: ktok != 0 && ktok == rtok[i] -> rp[i] = P_OK; printf("redis: r%d's check: OK\n", i)
		:: else -> rp[i] = P_NO; printf("redis: r%d's check: LOST\n", i)
		fi
	:: rq[i] == R_UNL ->             /* SCRIPT_UNLOCK: compare and delete */
		if
		:: ktok != 0 && ktok == rtok[i] -> ktok = 0; krem = 0;
#ifdef STORE_FENCE
			ptok = 0;                /* token cleared (the epoch column stays) */
#endif
			printf("redis: r%d's unlock deletes the key\n", i)
		:: else -> skip
		fi;
		standby(i)                   /* (reduction) */
	fi
}

#ifdef RENEWER
/* the renewer's renew: SCRIPT_RENEW, like R_REN */
inline rapply(i) {
	if
	:: ktok != 0 && ktok == rrtok[i] -> krem = TTL; rrp[i] = P_OK;
		printf("redis: renews r%d's key (epoch %d) for its renewer: expires in %d ticks\n", i, ktok, TTL)
	:: else -> rrp[i] = P_NO; printf("redis: r%d's renewer's renew: LOST\n", i)
	fi
}
#endif

#ifdef STORE_FENCE
/* PostgreSQL: an acquisition of a free row (expired or released: ktok == 0)
 * takes the row's FOR UPDATE lock, so it waits while a sink transaction
 * holds FOR KEY SHARE; once none does it re-checks and grants, in one step
 * (apply). A live row answers "held" at once. Renew, check and release do
 * not wait (FOR NO KEY UPDATE, or no lock). STORE_FENCE_NO_LOCK: no share
 * lock is ever held, so nothing waits. */
#define APPLY_OK(i) (rq[i] != R_ACQ || ktok != 0 || !SHARED)
/* the waiting acquisition gives up (lock_timeout): "held", nothing granted */
#define LOCK_WAIT(i) (rq[i] == R_ACQ && rp[i] == P_PEND && ktok == 0 && SHARED)
#endif

proctype Redis() {
	do
#ifdef STORE_FENCE
	:: atomic { rq[0] != R_NONE && rp[0] == P_PEND && APPLY_OK(0) -> apply(0) }
	:: atomic { rq[1] != R_NONE && rp[1] == P_PEND && APPLY_OK(1) -> apply(1) }
	:: atomic { rq[2] != R_NONE && rp[2] == P_PEND && APPLY_OK(2) -> apply(2) }
	:: atomic { LOCK_WAIT(0) -> printf("pg: r0's acquisition: lock_timeout (held)\n"); standby(0) }
	:: atomic { LOCK_WAIT(1) -> printf("pg: r1's acquisition: lock_timeout (held)\n"); standby(1) }
	:: atomic { LOCK_WAIT(2) -> printf("pg: r2's acquisition: lock_timeout (held)\n"); standby(2) }
#else
	:: atomic { rq[0] != R_NONE && rp[0] == P_PEND -> apply(0) }
	:: atomic { rq[1] != R_NONE && rp[1] == P_PEND -> apply(1) }
	:: atomic { rq[2] != R_NONE && rp[2] == P_PEND -> apply(2) }
#endif
#ifdef RENEWER
	:: atomic { rrq[0] == R_REN && rrp[0] == P_PEND -> rapply(0) }
	:: atomic { rrq[1] == R_REN && rrp[1] == P_PEND -> rapply(1) }
	:: atomic { rrq[2] == R_REN && rrp[2] == P_PEND -> rapply(2) }
#endif
	od
}

/* ================================================================== */
/* the sink                                                            */

inline deliver(i, e) {
	printf("r%d: sink write completes: SINK RECEIVES epoch %d\n", i, e);
#ifndef NO_S2
	assert(e >= last);                                   /* S2 */
#endif
	last = e;
#ifndef NO_S3
#ifndef STORE_FENCE
	assert(tep[i] == e && tdl[i] > 0 && !tend[i]);       /* S3 */
#else
	/* S3 on the store: no later term has been granted since the check
	 * (the epoch column is still e), and the check found term e live on
	 * the store's clock */
	assert(stored == e);                                 /* S3 */
	assert(wlv[i]);                                      /* S3 */
#endif
#endif
#ifdef S4
	assert(ktok == e)                                    /* S4 */
#endif
}

inline s1(i) {
#ifndef NO_S1
#ifndef INFLIGHT2
	assert(!LIVEW((i + 1) % N) && !LIVEW((i + 2) % N))  /* S1 */
#else
	assert(nfl[(i + 1) % N] == 0 && nfl[(i + 2) % N] == 0)  /* S1 */
#endif
#else
	skip
#endif
}

#ifdef INFLIGHT2
/* the message at q[i] entry j reaches the sink: S2-S4 as deliver(), and
 * S5: on each key, within an epoch, the sink accepts the messages in their
 * receive order, none skipped (the first one it accepts of an epoch is the
 * first received in it, each next one the next received) */
inline deliver2(i, j) {
	printf("r%d: request for message %d of key %d completes\n", i, q[i].s[j], q[i].k[j]);
	te = q[i].ep[j]; tk = last; deliver(i, te);
	if
	:: te > tk -> kn[0] = 0; kn[1] = 0     /* a newer epoch: nothing accepted in it yet */
	:: else -> skip
	fi;
#ifndef NO_S5
	assert(q[i].s[j] == kn[q[i].k[j]] + 1);                /* S5 */
#endif
	kn[q[i].k[j]] = q[i].s[j]; te = 0; tk = 0
}
#endif

/* ================================================================== */
/* forwarder                                                           */

#ifdef INFLIGHT2
/* entry j may be started: its term is live and sure (the check before every
 * request), a request slot is free, and no earlier message of its key is
 * left (per-key order: one request per key in flight, in receive order).
 * NO_KEY_BUSY: only an earlier message of its key not yet in flight stops it */
#ifdef NO_KEY_BUSY
#define EARLIER(i, a, j) (q[i].k[a] == q[i].k[j] && !q[i].f[a])
#else
#define EARLIER(i, a, j) (q[i].k[a] == q[i].k[j])
#endif
#define CANSTART(i, j) (j < qn[i] && !q[i].f[j] && q[i].ep[j] == tep[i] && \
                        tdl[i] > 0 && !chg[i] && nfl[i] < MAXINF)
inline start(i, j) {
	printf("r%d: term %d live: request for message %d of key %d starts\n", i, tep[i], q[i].s[j], q[i].k[j]);
	s1(i); q[i].f[j] = 1; nfl[i]++
}
/* it completes while its term lasts (abort_all() aborts it when the term
 * ends; NO_ABORT_INFLIGHT: maybe not) */
inline complete(i, j) {
	deliver2(i, j); q[i].f[j] = 0; nfl[i]--; qdel(i, j); settle(i); maybe_arrive(i)
}

proctype Fwd(byte i) {
	do
	:: atomic { ALIVE(i) && CANSTART(i, 0) -> start(i, 0) }
	:: atomic { ALIVE(i) && CANSTART(i, 1) && !EARLIER(i, 0, 1) -> start(i, 1) }
#if QLEN > 2
	:: atomic { ALIVE(i) && CANSTART(i, 2) && !EARLIER(i, 0, 2) && !EARLIER(i, 1, 2) -> start(i, 2) }
#endif
	:: atomic { ALIVE(i) && q[i].f[0] -> complete(i, 0) }
	:: atomic { ALIVE(i) && q[i].f[1] -> complete(i, 1) }
#if QLEN > 2
	:: atomic { ALIVE(i) && q[i].f[2] -> complete(i, 2) }
#endif
	od
}
#elif defined(STORE_FENCE)
/* The sink is the lease store: each write is one transaction, (1) the check
 * SELECT 1 FROM baton_leases WHERE key = K AND token = T AND expires_at >
 * clock_timestamp() FOR KEY SHARE, (2) the message row, (3) COMMIT. No local
 * check of the term comes before it: the store alone decides (the queue
 * still holds only messages of the replica's current term, settle()). */
#ifdef STORE_FENCE_CLIENT_CLOCK
/* wrong: token = T only (the row keeps it after expiry), and the replica's
 * own deadline instead of expires_at > clock_timestamp() */
#define ROW_OK(i, e) (ptok == e && tdl[i] > 0)
#else
#define ROW_OK(i, e) (ktok == e)        /* token = T AND expires_at > clock_timestamp() */
#endif
#ifdef STORE_FENCE_NO_LOCK
#define SH_TAKE(i) skip                 /* wrong: a plain SELECT, no lock */
#else
#define SH_TAKE(i) sh[i] = 1            /* FOR KEY SHARE, held until commit or abort */
#endif
/* the transaction ends (commit or abort): its lock goes with it */
inline txn_close(i) {
	wr[i] = 0; sh[i] = 0; wlv[i] = 0; settle(i)
}
proctype Fwd(byte i) {
	do
	/* BEGIN and the check, in one step (a pause before it changes nothing) */
	:: atomic { qn[i] > 0 && !wr[i] ->
		if
		:: ROW_OK(i, q[i].m[0]) ->
#if defined(STORE_FENCE_NO_LOCK)
			printf("r%d: sink txn: the row holds term %d (plain SELECT: no lock)\n", i, q[i].m[0]);
#elif defined(STORE_FENCE_CLIENT_CLOCK)
			printf("r%d: sink txn: the row has token %d (live on the store's clock: %d), own deadline in %d: FOR KEY SHARE held\n",
			       i, q[i].m[0], ktok == q[i].m[0], tdl[i]);
#else
			printf("r%d: sink txn: the row holds term %d: FOR KEY SHARE held\n", i, q[i].m[0]);
#endif
			s1(i); wr[i] = 1; SH_TAKE(i); wlv[i] = (ktok == q[i].m[0])
		:: else ->                      /* 0 rows: refused, rolled back */
			printf("r%d: sink txn: no row for term %d: FENCED, rolled back (settled)\n", i, q[i].m[0]);
			pop(i); settle(i); maybe_arrive(i)
		fi }
	/* (2) the message row and (3) COMMIT: at any later moment (a pause of
	 * any length between the check and the commit) */
	:: atomic { wr[i] ->
		deliver(i, q[i].m[0]); pop(i); txn_close(i); maybe_arrive(i) }
	/* or the transaction is aborted: the store's idle_in_transaction
	 * timeout while the client is paused, a broken connection, a restart,
	 * the client's own rollback. Its lock is released and nothing commits
	 * (the client, when it continues, gets an error); the message stays
	 * queued for another transaction */
	:: atomic { wr[i] ->
		printf("r%d: sink txn ABORTED (idle timeout / connection): lock released, nothing committed\n", i);
		txn_close(i) }
	od
}
#else
proctype Fwd(byte i) {
	do
#ifndef CHECK_PER_BATCH
	/* active_guard_term_state() == LEADER_YES for the message's term: one
	 * write, bounded by the time left (LEADER_NO: settled, see settle();
	 * LEADER_UNSURE: wait) */
	:: atomic { ALIVE(i) && qn[i] > 0 && !wr[i] &&
	            tep[i] == q[i].m[0] && tdl[i] > 0 && !chg[i] ->
		printf("r%d: term %d live: sink write starts (bound: %d ticks)\n", i, tep[i], tdl[i]);
		s1(i); wr[i] = 1; wdl[i] = tdl[i]; wn[i] = 1 }
	/* it completes before its bound (or is aborted at it, in ltick()) */
	:: atomic { ALIVE(i) && wr[i] && wdl[i] > 0 ->
		deliver(i, q[i].m[0]); pop(i); wr[i] = 0; wdl[i] = 0; wn[i] = 0; settle(i);
		maybe_arrive(i) }
#else
	/* the old design: "leader now" once per batch, then one write of the
	 * whole batch, not bounded by the deadline */
	:: atomic { qn[i] > 0 && !wr[i] && tdl[i] > 0 && !chg[i] ->
		printf("r%d: leader now: sink write of %d message(s) starts, no bound\n", i, qn[i]);
		s1(i); wr[i] = 1; wn[i] = qn[i] }
	:: atomic { wr[i] ->
		deliver(i, q[i].m[0]); pop(i);
		if
		:: wn[i] == 2 -> deliver(i, q[i].m[0]); pop(i)
		:: else -> skip
		fi;
		wr[i] = 0; wn[i] = 0; settle(i); maybe_arrive(i) }
#endif
	od
}
#endif

/* ================================================================== */
/* guard                                                               */

inline term_begin(i) {
	tep[i] = gep[i];
#ifdef DEADLINE_FROM_REPLY
	tdl[i] = LEASE;                 /* from the moment the reply is read */
#else
	tdl[i] = cand[i];               /* from the moment the request was sent */
#endif
	chg[i] = chgs[i];               /* the generation snapshot read before sending */
	tend[i] = (tdl[i] == 0);
	printf("r%d: term %d begins: deadline in %d ticks, unsure=%d\n", i, tep[i], tdl[i], chg[i]);
	done_req(i); settle(i); maybe_arrive(i);
	REN_ON(i)                       /* RENEWER: renewer_add (delegated) */
	gst[i] = G_LEAD
}

proctype Guard(byte i) {
	do
	/* standby: try_lock */
	:: atomic { ALIVE(i) && gst[i] == G_STBY && RETRY_OK(i) ->
		send(i, R_ACQ, 0); gst[i] = G_ACQ; printf("r%d: try_lock sent\n", i) }
	:: atomic { ALIVE(i) && gst[i] == G_ACQ && rp[i] == P_OK ->
#ifdef GEN_AFTER_GRANT
		rq[i] = R_NONE; rp[i] = P_PEND; gst[i] = G_PUB;
		printf("r%d: granted epoch %d (generation not read yet)\n", i, gep[i])
#else
		term_begin(i)
#endif
	}
#ifdef GEN_AFTER_GRANT
	:: atomic { ALIVE(i) && gst[i] == G_PUB ->
		chgs[i] = 0;                /* the generation is read only now */
		term_begin(i) }
#endif
	/* leader: the deadline passed -- the term ended; release quietly
	 * (RENEWER: once the renewer has no request in flight) */
	:: atomic { ALIVE(i) && gst[i] == G_LEAD && tdl[i] == 0 && REN_IDLE(i) ->
#ifdef ZOMBIE_RENEW
		send(i, R_REN, tep[i]); gst[i] = G_REN; printf("r%d: renew sent after its term ended\n", i) }
#else
		REN_OFF(i)
		send(i, R_UNL, tep[i]); gst[i] = G_UNL; printf("r%d: unlock sent (term %d ended)\n", i, tep[i]) }
#endif
	/* leader: renew (any time; (reduction) not in the tick the deadline was
	 * set; RENEWER: only while not delegated) */
	:: atomic { ALIVE(i) && gst[i] == G_LEAD && tdl[i] > 0 && tdl[i] < LEASE && OWN_RENEW(i) ->
		send(i, R_REN, tep[i]); gst[i] = G_REN; printf("r%d: renew sent (term %d)\n", i, tep[i]) }
	/* leader, unsure (the generation changed): verify */
	:: atomic { ALIVE(i) && gst[i] == G_LEAD && tdl[i] > 0 && chg[i] ->
		send(i, R_CHK, tep[i]); gst[i] = G_CHK; printf("r%d: lease UNSURE: check sent\n", i) }
#if defined(RX_FENCE) && !defined(RENEWER)
	/* a fencing receiver answers 409 to a request in flight (it saw a
	 * newer epoch): src/gateway.c on_fenced ends the term at once
	 * (fenced_epoch: the term counts as ended for forwarding, every
	 * request of it is aborted at its next poll slice, its messages are
	 * settled), then the guard gives the lease up: on_demoted drains
	 * (nothing of the term is in flight any more) and unlocks */
	:: atomic { ALIVE(i) && gst[i] == G_LEAD && tdl[i] > 0 && nfence < 1 && !DRAINED(i) ->
#ifdef RX_FENCE_RELEASE_FIRST
		nfence++; send(i, R_UNL, tep[i]); gst[i] = G_UNL; /* wrong: the term's requests go on */
#else
		nfence++; term_end(i); send(i, R_UNL, tep[i]); gst[i] = G_UNL;
#endif
		printf("r%d: FENCED by the receiver (409) in term %d: term ended, requests aborted, unlock sent\n", i, tep[i]) }
#endif
#ifdef STEPDOWN
	/* an operator asks this replica to step down: at any moment of its
	 * term, whatever its lease requests in flight (G_REN, G_CHK) */
	:: atomic { ALIVE(i) && tep[i] != 0 && tdl[i] > 0 && !sd[i] && nsd < MAXSD &&
	            (gst[i] == G_LEAD || gst[i] == G_REN || gst[i] == G_CHK) ->
		nsd++; sd[i] = 1;
		printf("r%d: STEP-DOWN asked in term %d (guard state %d): consuming stops, draining\n", i, tep[i], gst[i]);
#ifdef STEPDOWN_RELEASE_EARLY
		if
		:: gst[i] == G_LEAD && !DRAINED(i) ->
			send(i, R_UNL, tep[i]); gst[i] = G_UNL; /* wrong: the drain goes on */
			printf("r%d: unlock sent before the drain finished\n", i)
		:: else -> skip
		fi
#else
		skip
#endif
	}
	/* stepping down: drained (no write in flight) and no lease request of
	 * the guard in flight (G_LEAD): the graceful release below */
#ifndef RENEWER
	:: atomic { ALIVE(i) && gst[i] == G_LEAD && tdl[i] > 0 && sd[i] && DRAINED(i) ->
		term_end(i); send(i, R_UNL, tep[i]); gst[i] = G_UNL;
		printf("r%d: stepped down from term %d: drained, term ended, unlock sent\n", i, tep[i]) }
#else
	:: atomic { ALIVE(i) && gst[i] == G_LEAD && tdl[i] > 0 && sd[i] && DRAINED(i) ->
		term_end(i); gst[i] = G_DONE;
		printf("r%d: stepped down from term %d: drained, term ended\n", i, tep[i]) }
#endif
#endif
	/* leader: graceful release -- drained (no write in flight), term ended, unlock */
#ifndef RENEWER
	:: atomic { ALIVE(i) && gst[i] == G_LEAD && tdl[i] > 0 && nrel < MAXREL && DRAINED(i) ->
		nrel++; term_end(i); send(i, R_UNL, tep[i]); gst[i] = G_UNL;
		printf("r%d: graceful release of term %d: term ended, unlock sent\n", i, tep[i]) }
#else
	/* term_end, then renewer_remove (waits while its request is in flight),
	 * then unlock */
	:: atomic { ALIVE(i) && gst[i] == G_LEAD && tdl[i] > 0 && nrel < MAXREL && DRAINED(i) ->
		nrel++; term_end(i); gst[i] = G_DONE;
		printf("r%d: graceful release of term %d: term ended\n", i, tep[i]) }
	:: atomic { ALIVE(i) && gst[i] == G_DONE && REN_IDLE(i) ->
		REN_OFF(i) send(i, R_UNL, tep[i]); gst[i] = G_UNL;
		printf("r%d: renewer removed: unlock sent (term %d)\n", i, tep[i]) }
	/* check LOST (term already ended): standby once the renewer is idle */
	:: atomic { ALIVE(i) && gst[i] == G_GONE && REN_IDLE(i) ->
		printf("r%d: renewer removed: standby\n", i); standby(i) }
	/* handed back by the renewer: its renew failed (connection): the guard
	 * notices and renews itself (G_REN) until one is answered OK */
	:: atomic { ALIVE(i) && gst[i] == G_LEAD && hb[i] == HB_ERR ->
		noticed(i); hb[i] = HB_NONE;
		printf("r%d: renewer handed back (error): the guard renews itself\n", i) }
	/* handed back by the renewer: its renew said LOST (END_LOST: no unlock) */
	:: atomic { ALIVE(i) && gst[i] == G_LEAD && hb[i] == HB_LOST && REN_IDLE(i) ->
		printf("r%d: renewer handed back LOST: term %d ended\n", i, tep[i]); term_end(i); standby(i) }
#endif
	/* renew answered (RENEWER: the renewer is idle, it was not delegated) */
	:: atomic { ALIVE(i) && gst[i] == G_REN && rp[i] != P_PEND && REN_IDLE(i) ->
		if
		:: rp[i] == P_OK && tdl[i] > 0 ->          /* term_extend: never shrinks */
#ifdef DEADLINE_FROM_REPLY
			tdl[i] = LEASE;
#else
			if
			:: cand[i] > tdl[i] -> tdl[i] = cand[i]
			:: else -> skip
			fi;
#endif
			chg[i] = chgs[i]; done_req(i); gst[i] = G_LEAD;
			REN_ON(i)                            /* RENEWER: delegated again */
			printf("r%d: renew OK: deadline in %d ticks\n", i, tdl[i])
		:: rp[i] == P_OK && tdl[i] == 0 ->         /* answered after the deadline */
#if defined(LATE_RENEW_EXTENDS)
			if
			:: cand[i] > 0 ->        /* revived (tend stays: the term had ended) */
				tdl[i] = cand[i]; chg[i] = chgs[i]; done_req(i); gst[i] = G_LEAD;
				printf("r%d: renew OK after the deadline: term %d REVIVED, deadline in %d ticks\n", i, tep[i], tdl[i]);
				maybe_arrive(i)
			:: else -> done_req(i); send(i, R_UNL, tep[i]); gst[i] = G_UNL
			fi
#elif defined(ZOMBIE_RENEW)
			done_req(i); gst[i] = G_LEAD     /* keeps the key, never leads again */
#else
			done_req(i); REN_OFF(i) send(i, R_UNL, tep[i]); gst[i] = G_UNL;
			printf("r%d: renew OK after the deadline: the term stays ended; unlock sent\n", i)
#endif
		:: rp[i] == P_NO ->
			printf("r%d: renew LOST: term %d ended\n", i, tep[i]); term_end(i); standby(i)
		:: rp[i] == P_ERR ->                       /* retry until the deadline */
			noticed(i); done_req(i); gst[i] = G_LEAD; printf("r%d: renew failed (connection)\n", i)
		fi }
	/* check answered */
	:: atomic { ALIVE(i) && gst[i] == G_CHK && rp[i] != P_PEND ->
		if
		:: rp[i] == P_OK ->
			chg[i] = chgs[i]; done_req(i); gst[i] = G_LEAD; printf("r%d: check OK (unsure=%d)\n", i, chg[i])
		:: rp[i] == P_NO ->
			printf("r%d: check LOST: term %d ended\n", i, tep[i]); term_end(i);
#ifdef RENEWER
			done_req(i); gst[i] = G_GONE     /* standby once the renewer is idle */
#else
			standby(i)
#endif
		:: rp[i] == P_ERR ->
			noticed(i); done_req(i); gst[i] = G_LEAD; printf("r%d: check failed (connection)\n", i)
		fi }
	od
}

#ifdef RENEWER
/* ================================================================== */
/* the renewer thread (guard/renewer.c): renews the delegated terms of the
 * replica (all of them in one pipelined batch; here one lease) */

proctype Ren(byte i) {
	do
	/* renew the current term (any time; (reduction) not in the tick its
	 * deadline was set) */
	:: atomic { ALIVE(i) && ren_on[i] && rrq[i] == R_NONE && tdl[i] > 0 && tdl[i] < LEASE ->
		rsend(i); printf("r%d: renewer: renew sent (term %d)\n", i, tep[i]) }
	/* its answer */
	:: atomic { ALIVE(i) && rrq[i] == R_REN && rrp[i] != P_PEND ->
		if
		:: rrp[i] == P_OK && tdl[i] > 0 ->
#ifndef REN_NO_CAS
			/* term_extend: a CAS from a live deadline, never shrinks */
			if
			:: rcand[i] > tdl[i] -> tdl[i] = rcand[i]
			:: else -> skip
			fi;
			chg[i] = rchgs[i]; rdone(i);
			printf("r%d: renewer: renew OK: deadline in %d ticks\n", i, tdl[i])
#else
			/* step 1: reads a live deadline (and a later one to store) */
			chg[i] = rchgs[i]; rlive[i] = (rcand[i] > tdl[i]); rrq[i] = R_EXT;
			printf("r%d: renewer: renew OK, term live (deadline in %d ticks): store next\n", i, tdl[i])
#endif
		:: rrp[i] == P_OK && tdl[i] == 0 ->      /* late: the term stays ended */
			rdone(i); ren_on[i] = 0;
			printf("r%d: renewer: renew OK after the deadline: not revived, handed back\n", i)
		:: rrp[i] == P_NO ->
			rdone(i); ren_on[i] = 0; hb[i] = HB_LOST;
			printf("r%d: renewer: renew LOST: handed back\n", i)
		:: rrp[i] == P_ERR ->
			rdone(i); ren_on[i] = 0; hb[i] = HB_ERR;
			printf("r%d: renewer: renew failed (connection): handed back\n", i)
		fi }
#ifdef REN_NO_CAS
	/* step 2: a plain store of the new deadline (the guard and time may
	 * have moved since step 1) */
	:: atomic { ALIVE(i) && rrq[i] == R_EXT ->
		if
		:: rlive[i] && rcand[i] > 0 ->
			if
			:: tdl[i] == 0 ->            /* revived (tend stays: the term had ended) */
				tdl[i] = rcand[i];
				printf("r%d: renewer: stores the deadline: term %d REVIVED, deadline in %d ticks\n", i, tep[i], tdl[i]);
				maybe_arrive(i)
			:: else -> tdl[i] = rcand[i];
				printf("r%d: renewer: stores the deadline: in %d ticks\n", i, tdl[i])
			fi
		:: else -> skip
		fi;
		rlive[i] = 0; rdone(i) }
#endif
	od
}
#endif

#ifdef LATE_NOTICE
/* the subscriber thread: notices a broken connection on its own schedule */
proctype Watch(byte i) {
	do
	:: atomic { pn[i] -> pn[i] = 0; noticed(i);
		printf("r%d: notices the broken connection (generation changes)\n", i) }
	od
}
#endif

/* ================================================================== */
/* environment                                                         */

#ifdef LIVE
/* L1: Redis applies, and a running replica reads its reply, within the tick */
#ifdef RENEWER
#define URGENT(i) ((rq[i] == R_NONE || (dead[i] && rp[i] != P_PEND)) && \
                   (rrq[i] == R_NONE || (dead[i] && rrp[i] != P_PEND)))
#else
#define URGENT(i) (rq[i] == R_NONE || (dead[i] && rp[i] != P_PEND))
#endif
#define TICK_OK (URGENT(0) && URGENT(1) && URGENT(2))
#elif defined(STORE_FENCE)
/* no bound on message delays: a request is applied arbitrarily late (an
 * acquisition waits for the share locks as long as they are held) */
#define TICK_OK 1
#else
/* a request is applied (or dropped by a break) within DMAX ticks of its send */
#ifdef RENEWER
#define APPLIED(i) ((rq[i] == R_NONE || rp[i] != P_PEND || cand[i] + DMAX > LEASE) && \
                    (rrq[i] == R_NONE || rrp[i] != P_PEND || rcand[i] + DMAX > LEASE))
#else
#define APPLIED(i) (rq[i] == R_NONE || rp[i] != P_PEND || cand[i] + DMAX > LEASE)
#endif
#define TICK_OK (APPLIED(0) && APPLIED(1) && APPLIED(2))
#endif

#if defined(RESTART_MID_WRITE) || defined(STORE_FENCE)
#define RESTART_OK 1
#else
#define RESTART_OK NO_LIVE_WRITE
#endif

proctype Env() {
	do
	:: atomic { TICK_OK ->
		printf("---- tick ----\n");
		if
		:: ktok != 0 -> krem--;
			if
			:: krem == 0 -> printf("redis: key (epoch %d) expires\n", ktok); ktok = 0
			:: else -> skip
			fi
		:: else -> skip
		fi;
		if
		:: frem > 0 -> frem--
		:: else -> skip
		fi;
		rtick(0); rtick(1); rtick(2) }
#ifndef STORE_FENCE
	/* Redis restarts: all data lost, every connection broken; TIME goes on */
	:: atomic { nrst < MAXRESTART && RESTART_OK ->
		nrst++; ktok = 0; krem = 0; stored = 0; frem = 0; rtime++;
		printf("redis: RESTART: all data lost, every connection broken\n");
		brk(0); brk(1); brk(2) }
#else
	/* the database restarts (any time, also mid-write): the rows are kept
	 * (durable), every open transaction is aborted (its lock released,
	 * nothing committed), every connection broken; the clock goes on */
	:: atomic { nrst < MAXRESTART ->
		nrst++; rtime++;
		printf("pg: RESTART: rows kept, open transactions aborted, every connection broken\n");
		txn_close(0); txn_close(1); txn_close(2);
		brk(0); brk(1); brk(2) }
	/* each replica's clock ticks on its own, at any rate relative to the
	 * store's (drift unrestricted: stands still for any time, or runs
	 * ahead); only when it times something */
	:: atomic { cand[0] > 0 || tdl[0] > 0 -> printf("   (r0's clock ticks)\n"); ltick(0) }
	:: atomic { cand[1] > 0 || tdl[1] > 0 -> printf("   (r1's clock ticks)\n"); ltick(1) }
	:: atomic { cand[2] > 0 || tdl[2] > 0 -> printf("   (r2's clock ticks)\n"); ltick(2) }
#endif
	/* one replica's connection breaks (Redis keeps its data) */
	:: atomic { nbrk < MAXBRK && gst[0] != G_STBY -> nbrk++; printf("r0: connection breaks\n"); brk(0) }
	:: atomic { nbrk < MAXBRK && gst[1] != G_STBY -> nbrk++; printf("r1: connection breaks\n"); brk(1) }
	:: atomic { nbrk < MAXBRK && gst[2] != G_STBY -> nbrk++; printf("r2: connection breaks\n"); brk(2) }
#ifdef LIVE
	/* replicas 1 and 2 may stop for good at any point */
	:: atomic { !dead[1] -> dead[1] = 1; printf("r1 stops for good\n") }
	:: atomic { !dead[2] -> dead[2] = 1; printf("r2 stops for good\n") }
#endif
	od
}

#ifdef LIVE
#define LEADS(i) (tdl[i] > 0 && !dead[i])
ltl L1 { []<> (LEADS(0) || LEADS(1) || LEADS(2)) }
#endif

init {
	atomic {
		stored = 1; rtime = 1;      /* the cluster ran before: the epoch key exists */
		run Env(); run Redis();
		run Guard(0); run Guard(1); run Guard(2);
		run Fwd(0); run Fwd(1); run Fwd(2);
#ifdef RENEWER
		run Ren(0); run Ren(1); run Ren(2);
#endif
#ifdef LATE_NOTICE
		run Watch(0); run Watch(1); run Watch(2);
#endif
	}
}
