/* Free TCP ports on 127.0.0.1 for tests. They are drawn at random from the
 * 12,000 ports just below the kernel's ephemeral range, never twice in one
 * process: a port read back from bind(0) lies in the ephemeral range, where
 * every outgoing connect() also takes its local port, so it can be gone (or
 * be handed out again) before the server meant for it binds. */
#ifndef BATON_TEST_FREE_PORT_H
#define BATON_TEST_FREE_PORT_H

/* A port nothing is bound to now, or -1. Thread safe. */
int test_free_port(void);

#endif
