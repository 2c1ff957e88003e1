#!/usr/bin/env bash
# guard/model/run.sh -- model-check baton's lease protocol (lease.pml) with spin.
#
# Runs the real model, without and with the renewer thread (-DRENEWER) and
# with two requests in flight per replica (-DINFLIGHT2), and the
# same-database fencing of a PostgreSQL store and sink (-DSTORE_FENCE)
# (must verify: 0 errors, search complete) and every switch that
# reintroduces a known wrong design or drops an assumption (each must give a
# counterexample: errors >= 1), then prints a summary table. Exits non-zero
# if any run does not give its expected verdict.
#
#   guard/model/run.sh            the CI set (4-7 minutes, one core)
#   MODEL_EXTRA=1 run.sh          also the FENCE design candidate and two
#                                 more STORE_FENCE checks (~50 s more)
#   MODEL_ONLY=name run.sh        only the run(s) whose name contains `name`
#                                 (several: MODEL_ONLY="store-fence STORE_FENCE",
#                                 spaces or commas between them)
#   MODEL_TRAIL=all run.sh        print whole counterexample trails, not the end
#
# Nothing is written to the source tree: every run works in a mktemp -d that
# is removed on exit. Needs spin (Debian package `spin`) and a C compiler.
set -u

here=$(cd "$(dirname "$0")" && pwd)
model="$here/lease.pml"
CC=${CC:-cc}
PAN_TIMEOUT=${PAN_TIMEOUT:-240}   # seconds, per pan run
MEMLIM=${MEMLIM:-4096}            # MB, per pan run

# ---- spin -------------------------------------------------------------------
if ! command -v spin >/dev/null 2>&1; then
    echo "spin not found: installing the Debian package"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            SUDO="sudo -n"
        else
            echo "run.sh: spin is missing and this is not root (install the 'spin' package)" >&2
            exit 2
        fi
    fi
    export DEBIAN_FRONTEND=noninteractive
    if ! $SUDO apt-get install -y -qq spin >/dev/null; then
        $SUDO apt-get update -qq && $SUDO apt-get install -y -qq spin >/dev/null || {
            echo "run.sh: cannot install spin" >&2
            exit 2
        }
    fi
fi
command -v "$CC" >/dev/null 2>&1 || { echo "run.sh: no C compiler ($CC)" >&2; exit 2; }
echo "$(spin -V)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/baton-model.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

# ---- the runs ---------------------------------------------------------------
# name | spin -D flags | kind (dfs, bfs, live) | expected (pass, fail)
# pass = no error in the whole state space; fail = spin finds a counterexample.
RUNS=(
"real-restart|-DS4 -DMAXBRK=0|dfs|pass"
"real-break|-DS4 -DMAXRESTART=0|dfs|pass"
"real-both|-DS4 -DMAXTERMS=2 -DDRIFT_WINDOW|dfs|pass"
"real-queue2|-DS4 -DMAXTERMS=2 -DMAXBRK=0 -DQLEN=2 -DMAXMSG=3|dfs|pass"
"LATE_RENEW_EXTENDS|-DMAXTERMS=2 -DLATE_RENEW_EXTENDS|dfs|fail"
"CHECK_PER_BATCH|-DMAXTERMS=2 -DQLEN=2 -DMAXMSG=3 -DCHECK_PER_BATCH|dfs|fail"
"DEADLINE_FROM_REPLY|-DMAXTERMS=2 -DDEADLINE_FROM_REPLY|dfs|fail"
"GEN_AFTER_GRANT|-DMAXTERMS=2 -DGEN_AFTER_GRANT|dfs|fail"
"NO_MARGIN|-DMAXTERMS=2 -DNO_MARGIN|dfs|fail"
"NO_TIME_FLOOR|-DMAXTERMS=2 -DNO_TIME_FLOOR|dfs|fail"
"gap:RESTART_MID_WRITE|-DMAXTERMS=2 -DNO_S3 -DRESTART_MID_WRITE|bfs|fail"
"gap:LATE_NOTICE|-DMAXTERMS=2 -DNO_S3 -DLATE_NOTICE|bfs|fail"
"L1|-DLIVE|live|pass"
"L1:ZOMBIE_RENEW|-DLIVE -DZOMBIE_RENEW|live|fail"
# the renewer thread (-DRENEWER): MAXTERMS=2 (with 3, ren-restart and
# ren-break reach MEMLIM at 24.7M states); MAXBRK=2 only with one grant (the
# second break reaches the guard's own renew failing after the renewer
# handed back; with two grants it takes > 2 min); the mutations without
# breaks and restarts (they need neither; REN_NO_CAS with them: DFS needs
# 7.3M states, 64 s)
"ren-restart|-DS4 -DRENEWER -DMAXBRK=0 -DMAXTERMS=2|dfs|pass"
"ren-break|-DS4 -DRENEWER -DMAXRESTART=0 -DMAXTERMS=2|dfs|pass"
"ren-break2|-DS4 -DRENEWER -DMAXRESTART=0 -DMAXBRK=2 -DMAXTERMS=1|dfs|pass"
"REN_NO_CAS|-DMAXTERMS=2 -DMAXBRK=0 -DMAXRESTART=0 -DRENEWER -DREN_NO_CAS|dfs|fail"
"REN_NO_WAIT|-DMAXTERMS=2 -DMAXBRK=0 -DMAXRESTART=0 -DRENEWER -DREN_NO_WAIT|dfs|fail"
"L1:ren|-DLIVE -DRENEWER|live|pass"
# concurrent delivery (-DINFLIGHT2): two requests in flight per replica, one
# per ordering key (2 keys), S1-S5; MAXTERMS=2 (with 3, inflight2-restart
# takes 18.3M states, 253 s; restart and break together with 2 grants 8.6M,
# 100 s); 3 messages (a key's second one waits while the other key's runs)
# without breaks and restarts
"inflight2-restart|-DS4 -DINFLIGHT2 -DMAXTERMS=2 -DMAXBRK=0|dfs|pass"
"inflight2-break|-DS4 -DINFLIGHT2 -DMAXTERMS=2 -DMAXRESTART=0|dfs|pass"
"inflight2-queue3|-DS4 -DINFLIGHT2 -DMAXTERMS=2 -DMAXBRK=0 -DMAXRESTART=0 -DQLEN=3 -DMAXMSG=3|dfs|pass"
"inflight2-rxfence|-DS4 -DINFLIGHT2 -DRX_FENCE -DMAXTERMS=2 -DMAXBRK=0|dfs|pass"
"RX_FENCE_RELEASE_FIRST|-DMAXTERMS=2 -DMAXBRK=0 -DINFLIGHT2 -DRX_FENCE -DRX_FENCE_RELEASE_FIRST|dfs|fail"
"NO_ABORT_INFLIGHT|-DMAXTERMS=2 -DINFLIGHT2 -DNO_ABORT_INFLIGHT|dfs|fail"
"NO_KEY_BUSY|-DMAXTERMS=2 -DINFLIGHT2 -DNO_KEY_BUSY|dfs|fail"
# an operator's step-down (-DSTEPDOWN): asked at any moment of a term, also
# with a renew in flight, racing the standbys' try_locks; released only once
# drained. The mutation releases when it is asked, before the drain finished
"stepdown|-DS4 -DSTEPDOWN -DMAXTERMS=2 -DMAXBRK=0|dfs|pass"
"ren-stepdown|-DS4 -DRENEWER -DSTEPDOWN -DMAXTERMS=2 -DMAXBRK=0 -DMAXRESTART=0|dfs|pass"
"STEPDOWN_RELEASE_EARLY|-DMAXTERMS=2 -DMAXBRK=0 -DMAXRESTART=0 -DSTEPDOWN -DSTEPDOWN_RELEASE_EARLY|dfs|fail"
# same-database fencing (-DSTORE_FENCE, issue 41): a PostgreSQL lease store
# that is also the sink; each write a transaction that holds the lease row's
# FOR KEY SHARE from its check to its commit; replica clocks unrelated to
# the store's, no margin, no bound on delays or pauses. A restart and a break
# together with 2 grants: 5.7M states, 38 s; 3 grants: MODEL_EXTRA. The
# mutations need neither restarts nor breaks
"store-fence-restart|-DSTORE_FENCE -DMAXTERMS=2 -DMAXBRK=0|dfs|pass"
"store-fence-break|-DSTORE_FENCE -DMAXTERMS=2 -DMAXRESTART=0|dfs|pass"
"STORE_FENCE_NO_LOCK|-DMAXTERMS=2 -DMAXBRK=0 -DMAXRESTART=0 -DSTORE_FENCE -DSTORE_FENCE_NO_LOCK|dfs|fail"
"STORE_FENCE_CLIENT_CLOCK|-DMAXTERMS=2 -DMAXBRK=0 -DMAXRESTART=0 -DSTORE_FENCE -DSTORE_FENCE_CLIENT_CLOCK|dfs|fail"
)
if [ "${MODEL_EXTRA:-0}" = 1 ]; then
    RUNS+=(
    "FENCE:S1S2|-DMAXTERMS=2 -DMAXBRK=0 -DNO_S3 -DFENCE -DRESTART_MID_WRITE -DLATE_NOTICE|dfs|pass"
    "FENCE:S3|-DMAXTERMS=2 -DFENCE -DRESTART_MID_WRITE -DLATE_NOTICE|bfs|fail"
    # three grants (neither restarts nor breaks); and S1, S2 without the
    # store's expiry in the check: the lock and the token alone hold them
    "store-fence-terms3|-DSTORE_FENCE -DMAXTERMS=3 -DMAXBRK=0 -DMAXRESTART=0|dfs|pass"
    "STORE_FENCE_CLIENT_CLOCK:S1S2|-DMAXTERMS=2 -DMAXBRK=0 -DNO_S3 -DSTORE_FENCE -DSTORE_FENCE_CLIENT_CLOCK|dfs|pass"
    )
fi

prop_of() { # the property a pan output says was violated
    local f=$1
    if grep -q "acceptance cycle" "$f"; then echo L1; return; fi
    local a
    a=$(grep -m1 "assertion violated" "$f")
    case "$a" in
    *"ktok=="*) echo S4 ;;
    *">=last"*) echo S2 ;;
    *tend* | *"stored=="* | *"wlv["*) echo S3 ;;
    *"kn["*) echo S5 ;;
    *"wr["* | *"nfl["*) echo S1 ;;
    "") echo "-" ;;
    *) echo "?" ;;
    esac
}

summary=()
failed=0
t_all0=$(date +%s.%N)
n=0
for r in "${RUNS[@]}"; do
    IFS='|' read -r name defs kind expect <<<"$r"
    if [ -n "${MODEL_ONLY:-}" ]; then
        sel=no
        for w in ${MODEL_ONLY//,/ }; do
            if [[ "$name" == *"$w"* ]]; then sel=yes; fi
        done
        [ $sel = yes ] || continue
    fi
    n=$((n + 1))
    d="$tmp/run$n"
    mkdir -p "$d"
    cp "$model" "$d/lease.pml"
    echo
    echo "=== $name: spin -a $defs lease.pml ($kind; expected: $([ "$expect" = pass ] && echo "no error" || echo "a counterexample"))"
    # -O2 pays off only for the long exhaustive runs (pan.c takes ~8 s to
    # compile with it, ~1 s without)
    opt=-O0
    [ "$kind" = dfs ] && [ "$expect" = pass ] && opt=-O2
    ccflags="$opt -w -DCOLLAPSE -DMEMLIM=$MEMLIM"
    panflags="-m100000 -w24"
    case "$kind" in
    dfs) ccflags="$ccflags -DSAFETY" ;;
    bfs) ccflags="$ccflags -DSAFETY -DBFS" ;;
    # NFAIR=3 allows 10 processes, -DRENEWER runs 12 (the L1 figures are
    # the same with 3 or 4)
    live) ccflags="$ccflags -DNFAIR=4"; panflags="-a -f -m100000 -w22 -N L1" ;;
    esac
    verdict="" states="-" trans="-" mem="-" secs="-" prop="-"
    if ! (cd "$d" && spin -a $defs lease.pml >spin.out 2>&1); then
        cat "$d/spin.out"
        verdict="SPIN FAILED"
    elif ! (cd "$d" && $CC $ccflags -o pan pan.c >cc.out 2>&1); then
        cat "$d/cc.out"
        verdict="CC FAILED"
    else
        t0=$(date +%s.%N)
        (cd "$d" && timeout "$PAN_TIMEOUT" ./pan $panflags >pan.out 2>&1)
        rc=$?
        t1=$(date +%s.%N)
        wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
        out="$d/pan.out"
        errors=$(sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' "$out" | head -1)
        states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' "$out" | head -1)
        trans=$(sed -n 's/^ *\([0-9.e+]*\) transitions.*/\1/p' "$out" | head -1)
        mem=$(sed -n 's/^ *\([0-9.]*\)[[:space:]]*total actual memory usage.*/\1/p' "$out" | head -1)
        secs=$(sed -n 's/^pan: elapsed time \([0-9.e+]*\) seconds.*/\1/p' "$out" | head -1)
        grep -E "^(State-vector|pan:1:|pan: error|error:)|errors:|states, stored|states, matched|transitions|total actual memory|elapsed time" "$out" | sed 's/^/  /'
        if [ $rc -eq 124 ]; then
            verdict="TIMEOUT (${PAN_TIMEOUT}s)"
        elif [ -z "$errors" ]; then
            tail -20 "$out"
            verdict="PAN FAILED"
        elif grep -q "search not completed\|max search depth too small\|reached -DMEMLIM bound" "$out" &&
            [ "$errors" = 0 ]; then
            verdict="INCOMPLETE"
        else
            prop=$(prop_of "$out")
            if [ "$errors" = 0 ]; then verdict="verified"; else verdict="counterexample"; fi
        fi
        echo "  wall clock: ${wall}s"
        if [ -f "$d/lease.pml.trail" ]; then
            echo "  counterexample ($prop violated), events of the trail (spin -t):"
            (cd "$d" && spin -t $defs lease.pml 2>&1) |
                sed 's/^[[:space:]]*//' | grep -v '^$' | sed '/^#processes/,$d' |
                grep -v '^spin: trail ends\|^spin: text of failed' >"$d/events.txt"
            if [ "${MODEL_TRAIL:-}" = all ]; then
                sed 's/^/    /' "$d/events.txt"
            else
                total=$(wc -l <"$d/events.txt")
                [ "$total" -gt 24 ] && echo "    ... ($((total - 24)) earlier events; MODEL_TRAIL=all shows them)"
                tail -24 "$d/events.txt" | sed 's/^/    /'
            fi
        fi
    fi
    ok=no
    if [ "$expect" = pass ] && [ "$verdict" = verified ]; then ok=yes; fi
    if [ "$expect" = fail ] && [ "$verdict" = counterexample ]; then ok=yes; fi
    [ $ok = yes ] || failed=$((failed + 1))
    echo "  verdict: $verdict -> $([ $ok = yes ] && echo OK || echo "NOT AS EXPECTED")"
    summary+=("$(printf '%-29s %-6s %-15s %-5s %12s %12s %9s %8s  %s' \
        "$name" "$expect" "$verdict" "$prop" "$states" "$trans" "$mem" "$secs" "$ok")")
done
t_all1=$(date +%s.%N)

echo
echo "=== summary (states = states stored, memory in MB, time = pan seconds)"
printf '%-29s %-6s %-15s %-5s %12s %12s %9s %8s  %s\n' \
    run expect verdict prop states transitions memory time ok
for s in "${summary[@]}"; do echo "$s"; done
echo "total wall clock: $(awk -v a="$t_all0" -v b="$t_all1" 'BEGIN { printf "%.0f", b - a }') s"
if [ $failed -ne 0 ]; then
    echo "FAILED: $failed run(s) not as expected"
    exit 1
fi
echo "all runs as expected"
