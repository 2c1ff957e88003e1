/* libFuzzer target: the redis_psub endpoint's reply handling. Arbitrary bytes
 * are fed to a hiredis reader (as if they came from the source Redis); every
 * parsed reply goes through redis_psub_decode and, for messages, through the
 * envelope builder, exactly as the consumer thread does: the replies are
 * built from a reply pool (endpoints/redis_reply_pool.h), which bounds
 * arrays as every baton connection's reader does (redis_reader_bound). */
#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#include <stdint.h>
#include <stdlib.h>

#include "endpoints/redis_psub.h"
#include "endpoints/redis_reply_pool.h"
#include "guard/redis_conn.h"
#include "common/log.h"
#include "common/envelope.h"
#include "common/json.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    log_set_level(LOG_ERROR); /* refusals of huge arrays are expected, and frequent */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct reply_pool *pool = reply_pool_create();
    redisReader *r = redisReaderCreate();
    reply_pool_attach(pool, r);
    struct envelope e;
    envelope_init(&e);
    redisReaderFeed(r, (const char *)data, size);
    for (int i = 0; i < 1000; i++) {
        void *reply = NULL;
        if (redisReaderGetReply(r, &reply) != REDIS_OK || reply == NULL) break;
        struct psub_event ev;
        enum psub_kind k = redis_psub_decode(reply, &ev);
        if (k == PSUB_MESSAGE || k == PSUB_PMESSAGE) {
            redis_psub_envelope(&e, "fuzz", 1, 1700000000000, &ev, NULL);
            struct message *m = envelope_finish(&e);
            if (!utf8_valid(m->json, m->len)) abort();
            message_finish(m, MSG_DELIVERED);
        }
        reply_pool_put(reply);
    }
    envelope_free(&e);
    redisReaderFree(r);
    reply_pool_destroy(pool);
    return 0;
}
