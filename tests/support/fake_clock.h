/* The test clock (issue 35): a fake CLOCK_MONOTONIC / CLOCK_BOOTTIME for the
 * unit tests of the guard, so that a test of lease ttls, renew intervals and
 * back-off sleeps takes as long as its threads compute, not as long as its
 * timeouts.
 *
 * The seam. base/util.c's clock_mono_ms, clock_mono_us, clock_boot_ms,
 * clock_deadline, clock_wait_in / clock_cond_wait and sleep_ms_cancellable
 * look at one atomic pointer, the hooks clock_hooks_set installs (base/util.h)
 * and, when none are set, do exactly what they did before: production never
 * sets them, so nothing changes there. CLOCK_REALTIME (clock_wall_ms) is
 * never faked. This file lives in the test support library
 * (baton_testsupport), not in libbaton-guard.
 *
 * The fake clock. fake_clock_install() installs its hooks: the monotonic and the
 * boot clock then read the same fake time, which starts at the real
 * monotonic reading and moves only forward, by a ticker thread, as in an
 * event-driven simulation: when every other thread of the process sleeps in
 * the kernel (none is running or ready to run, /proc/self/task/<tid>/stat)
 * and every thread woken for a deadline has taken it in, time jumps to the
 * earliest deadline any thread waits for (at most FAKE_CLOCK_MAX_STEP_MS at
 * once) and wakes the waiters whose deadline it reached. Computing takes no
 * fake time; a thread never sees a deadline pass while it (or a thread it
 * just started or woke) still runs, however slow the machine: the tests'
 * bounds hold in fake ms as they did in real ms, without the real waits.
 * Under valgrind, which runs one thread at a time (a thread ready to run
 * waits for its turn asleep, so /proc cannot tell it from a blocked one),
 * fake_clock_install installs nothing: the tests run on the real clock there,
 * as before, and fake_clock_sleep sleeps in real time (BATON_FAKE_CLOCK=0
 * asks for the real clock anywhere, =1 for the fake one under valgrind too).
 *
 * Timed waits wake when fake time passes their deadline:
 *   - clock_wait_in + clock_cond_wait (the guard's waits): registered with
 *     the fake clock, woken by the ticker's broadcast;
 *   - clock_deadline + a plain pthread_cond_timedwait (callers not routed
 *     through clock_cond_wait): the deadline is noted, and the wait returns
 *     within FAKE_CLOCK_POLL_MS of real time, after which the caller's loop
 *     reads the clock again (spurious-wakeup semantics);
 *   - sleep_ms_cancellable and fake_clock_sleep: fake sleeps.
 *
 * Test use: install before the threads under test start, uninstall after
 * they ended (e.g. at the start and the end of main). A test waits with
 * fake_clock_sleep, never usleep: fake time does not know when a real sleep
 * ends and runs on meanwhile, as far as the other threads' deadlines go.
 * Linux only (/proc), like the rest of baton. */
#ifndef BATON_TESTS_SUPPORT_FAKE_CLOCK_H
#define BATON_TESTS_SUPPORT_FAKE_CLOCK_H

#include <stdbool.h>
#include <stdint.h>

/* The largest jump of fake time at once: bounds what a quiet moment judged
 * wrongly (a thread ready to run that /proc showed asleep) can cost. */
#define FAKE_CLOCK_MAX_STEP_MS 10
/* How long (real time) a wait noted only through clock_deadline sleeps
 * before its caller looks at the fake clock again. */
#define FAKE_CLOCK_POLL_MS 1

/* Whether the fake clock is installed. */
bool fake_clock_active(void);

/* Starts the fake clock (and its ticker thread); under valgrind, or with
 * BATON_FAKE_CLOCK=0, leaves the real clocks. Returns 0 or -1. */
int fake_clock_install(void);
/* Stops it: the real clocks again. Call when no thread waits on it. */
void fake_clock_uninstall(void);
/* Fake time in ms (the same scale as clock_mono_ms; the real one when the
 * fake clock is not installed). */
int64_t fake_clock_now(void);
/* Sleeps ms of fake time (the caller is a blocked thread meanwhile), or of
 * real time when the fake clock is not installed. */
void fake_clock_sleep(int64_t ms);
/* How many times fake time moved (a measure of the work the ticker did). */
uint64_t fake_clock_steps(void);

#endif
