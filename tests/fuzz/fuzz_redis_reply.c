/* libFuzzer target: the redis_psub endpoint's reply handling and the RESP
 * reader as baton configures it. Arbitrary bytes are fed to a hiredis reader
 * (as if they came from the source Redis); every parsed reply goes through
 * redis_psub_decode and, for messages, through the envelope builder, exactly
 * as the consumer thread does. The reader is bounded as on every baton
 * connection: replies built from a reply pool (endpoints/redis_reply_pool.h)
 * or, when the first byte is odd, hiredis's own objects behind
 * redis_reader_bound; array size and depth, strict integers, and a reply
 * size limit (max_reply_bytes) taken from the first byte, small enough for
 * fuzz inputs to reach it (16 bytes to 64 KiB); the input is fed in pieces
 * and redis_reader_fed_ok checked after each, as redis_buffer_read does. */
#include <hiredis/hiredis.h>
#include <hiredis/read.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "endpoints/redis_psub.h"
#include "endpoints/redis_reply_pool.h"
#include "redis/io.h"
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
    if (size == 0) return 0;
    uint8_t mode = data[0];
    data++;
    size--;
    bool pooled = (mode & 1) == 0;
    struct reply_pool *pool = pooled ? reply_pool_create() : NULL;
    redisReader *r = redisReaderCreate();
    if (pooled) reply_pool_attach(pool, r);
    else redis_reader_bound(r);
    redis_reader_set_max(r, 16 + (int64_t)(mode >> 1) * 516);
    struct envelope e;
    envelope_init(&e);
    /* in pieces of 1 to 64 bytes (from the mode byte), as reads bring them */
    size_t piece = 1 + (mode % 64), off = 0;
    bool failed = false;
    while (off < size && !failed) {
        size_t n = size - off < piece ? size - off : piece;
        if (redisReaderFeed(r, (const char *)data + off, n) != REDIS_OK) break;
        off += n;
        char why[128];
        if (!redis_reader_fed_ok(r, why, sizeof why)) break;
        for (int i = 0; i < 1000; i++) {
            void *reply = NULL;
            if (redisReaderGetReply(r, &reply) != REDIS_OK) {
                failed = true;
                break;
            }
            if (reply == NULL) break;
            struct psub_event ev;
            enum psub_kind k = redis_psub_decode(reply, &ev);
            if (k == PSUB_MESSAGE || k == PSUB_PMESSAGE) {
                redis_psub_envelope(&e, "fuzz", 1, 1700000000000, &ev, NULL);
                struct message *m = envelope_finish(&e);
                if (!utf8_valid(m->json, m->len)) abort();
                message_finish(m, MSG_DELIVERED);
            }
            if (pooled) reply_pool_put(reply);
            else freeReplyObject(reply);
        }
    }
    envelope_free(&e);
    redisReaderFree(r);
    reply_pool_destroy(pool);
    return 0;
}
