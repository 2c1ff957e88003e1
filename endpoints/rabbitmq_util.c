/* Pure helpers of the rabbitmq endpoint: field tables to JSON, a delivery's
 * envelope, queue name templates, the ack decision. See rabbitmq_util.h. */
#include "endpoints/rabbitmq_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void write_bytes(struct jbuf *b, const amqp_bytes_t *x, bool text)
{
    if (text && utf8_valid(x->bytes, x->len)) jbuf_str(b, x->bytes, x->len);
    else jbuf_base64(b, x->bytes, x->len);
}

/* An exact decimal: value with `decimals` digits after the point. */
static void write_decimal(struct jbuf *b, const amqp_decimal_t *d)
{
    char digits[16];
    int n = snprintf(digits, sizeof digits, "%u", (unsigned)d->value);
    if (d->decimals == 0) {
        jbuf_raw(b, digits, (size_t)n);
        return;
    }
    int dec = d->decimals;
    if (n <= dec) { /* 0.000ddd */
        jbuf_raw(b, "0.", 2);
        for (int i = 0; i < dec - n; i++) jbuf_char(b, '0');
        jbuf_raw(b, digits, (size_t)n);
    } else {
        jbuf_raw(b, digits, (size_t)(n - dec));
        jbuf_char(b, '.');
        jbuf_raw(b, digits + (n - dec), (size_t)dec);
    }
}

int rmq_field_to_json(struct jbuf *b, const amqp_field_value_t *v, int depth)
{
    int lost = 0;
    switch (v->kind) {
    case AMQP_FIELD_KIND_BOOLEAN: jbuf_bool(b, v->value.boolean != 0); break;
    case AMQP_FIELD_KIND_I8: jbuf_i64(b, v->value.i8); break;
    case AMQP_FIELD_KIND_U8: jbuf_i64(b, v->value.u8); break;
    case AMQP_FIELD_KIND_I16: jbuf_i64(b, v->value.i16); break;
    case AMQP_FIELD_KIND_U16: jbuf_i64(b, v->value.u16); break;
    case AMQP_FIELD_KIND_I32: jbuf_i64(b, v->value.i32); break;
    case AMQP_FIELD_KIND_U32: jbuf_i64(b, v->value.u32); break;
    case AMQP_FIELD_KIND_I64: jbuf_i64(b, v->value.i64); break;
    case AMQP_FIELD_KIND_U64: jbuf_u64(b, v->value.u64); break;
    case AMQP_FIELD_KIND_TIMESTAMP: jbuf_u64(b, v->value.u64); break;
    case AMQP_FIELD_KIND_F32: jbuf_double(b, (double)v->value.f32); break;
    case AMQP_FIELD_KIND_F64: jbuf_double(b, v->value.f64); break;
    case AMQP_FIELD_KIND_DECIMAL: write_decimal(b, &v->value.decimal); break;
    case AMQP_FIELD_KIND_UTF8: write_bytes(b, &v->value.bytes, true); break;
    case AMQP_FIELD_KIND_BYTES: write_bytes(b, &v->value.bytes, false); break;
    case AMQP_FIELD_KIND_VOID: jbuf_null(b); break;
    case AMQP_FIELD_KIND_TABLE:
        if (depth >= RMQ_JSON_MAX_DEPTH) {
            jbuf_null(b);
            return 1;
        }
        jbuf_char(b, '{');
        {
            bool first = true;
            for (int i = 0; i < v->value.table.num_entries; i++) {
                const amqp_table_entry_t *e = &v->value.table.entries[i];
                /* keys are short strings: written as JSON strings (invalid
                 * UTF-8 becomes U+FFFD, like every other key baton writes) */
                if (!first) jbuf_char(b, ',');
                first = false;
                jbuf_str(b, e->key.bytes, e->key.len);
                jbuf_char(b, ':');
                lost += rmq_field_to_json(b, &e->value, depth + 1);
            }
        }
        jbuf_char(b, '}');
        break;
    case AMQP_FIELD_KIND_ARRAY:
        if (depth >= RMQ_JSON_MAX_DEPTH) {
            jbuf_null(b);
            return 1;
        }
        jbuf_char(b, '[');
        for (int i = 0; i < v->value.array.num_entries; i++) {
            if (i) jbuf_char(b, ',');
            lost += rmq_field_to_json(b, &v->value.array.entries[i], depth + 1);
        }
        jbuf_char(b, ']');
        break;
    default:
        jbuf_null(b);
        return 1;
    }
    return lost;
}

int rmq_table_to_json(struct jbuf *b, const amqp_table_t *t)
{
    amqp_field_value_t v;
    v.kind = AMQP_FIELD_KIND_TABLE;
    v.value.table = *t;
    return rmq_field_to_json(b, &v, 0);
}

int rmq_envelope(struct envelope *e, const char *endpoint, const char *type, uint64_t epoch,
                 int64_t received_wall_ms, const amqp_envelope_t *d, const char *queue)
{
    const amqp_basic_properties_t *p = &d->message.properties;
    char id[256];
    const char *idp = NULL;
    if ((p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) && p->message_id.len) {
        size_t n = p->message_id.len < sizeof id - 1 ? p->message_id.len : sizeof id - 1;
        memcpy(id, p->message_id.bytes, n);
        id[n] = '\0';
        idp = id;
    }
    envelope_begin(e, endpoint, type, epoch, idp, received_wall_ms);
    /* ordered per routing key */
    envelope_order_key(e, d->routing_key.bytes, d->routing_key.len);
    envelope_str(e, "exchange", d->exchange.bytes, d->exchange.len);
    envelope_str(e, "routing_key", d->routing_key.bytes, d->routing_key.len);
    envelope_u64(e, "delivery_tag", d->delivery_tag);
    envelope_bool(e, "redelivered", d->redelivered != 0);
    if (queue) envelope_strz(e, "queue", queue);
    if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
        envelope_str(e, "message_id", p->message_id.bytes, p->message_id.len);
    if (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG)
        envelope_str(e, "content_type", p->content_type.bytes, p->content_type.len);
    int lost = 0;
    if (p->_flags & AMQP_BASIC_HEADERS_FLAG) {
        envelope_key(e, "headers");
        lost = rmq_table_to_json(&e->buf, &p->headers);
    }
    envelope_payload(e, d->message.body.bytes, d->message.body.len);
    return lost;
}

static int placeholder(const char *p, size_t n, const struct rmq_name_vars *v, char *val,
                       size_t vallen)
{
#define IS(word) (n == sizeof(word) - 1 && memcmp(p, word, n) == 0)
    if (IS("name")) snprintf(val, vallen, "%s", v && v->name ? v->name : "");
    else if (IS("owner")) snprintf(val, vallen, "%s", v && v->owner ? v->owner : "");
    else if (IS("type")) snprintf(val, vallen, "%s", v && v->type ? v->type : "");
    else if (IS("hostname")) snprintf(val, vallen, "%s", v && v->hostname ? v->hostname : "");
    else if (IS("pid")) snprintf(val, vallen, "%ld", v ? v->pid : 0L);
    else return -1;
#undef IS
    return 0;
}

int rmq_queue_name_expand(const char *tmpl, const struct rmq_name_vars *v, char *out,
                          size_t outlen, char *err, size_t errlen)
{
    size_t o = 0;
    char val[256];
    size_t limit = outlen ? outlen - 1 : 0;
    if (limit > 255) limit = 255; /* AMQP short string */
    for (const char *p = tmpl; *p;) {
        const char *piece;
        size_t n;
        if (p[0] == '{' && p[1] == '{') {
            piece = "{", n = 1, p += 2;
        } else if (p[0] == '}' && p[1] == '}') {
            piece = "}", n = 1, p += 2;
        } else if (p[0] == '{') {
            const char *close = strchr(p + 1, '}');
            if (!close) {
                snprintf(err, errlen, "queue template \"%s\": unclosed '{'", tmpl);
                return -1;
            }
            if (placeholder(p + 1, (size_t)(close - p - 1), v, val, sizeof val) < 0) {
                snprintf(err, errlen,
                         "queue template \"%s\": unknown placeholder {%.*s} (known: {name}, "
                         "{owner}, {type}, {hostname}, {pid})",
                         tmpl, (int)(close - p - 1), p + 1);
                return -1;
            }
            piece = val, n = strlen(val), p = close + 1;
        } else if (p[0] == '}') {
            snprintf(err, errlen, "queue template \"%s\": unmatched '}' (write '}}')", tmpl);
            return -1;
        } else {
            piece = p, n = 1, p++;
        }
        if (o + n > limit) {
            snprintf(err, errlen, "queue name longer than %zu bytes (template \"%.60s%s\")",
                     limit, tmpl, strlen(tmpl) > 60 ? "..." : "");
            return -1;
        }
        if (out) memcpy(out + o, piece, n);
        o += n;
    }
    if (out && outlen) out[o] = '\0';
    if (o == 0) {
        snprintf(err, errlen, "queue template \"%s\" expands to an empty name", tmpl);
        return -1;
    }
    return 0;
}

int rmq_queue_name_check(const char *tmpl, char *err, size_t errlen)
{
    /* placeholder values are short; a dry run with typical values catches
     * syntax errors and absurd lengths */
    struct rmq_name_vars v = { "n", "o", "rabbitmq", "h", 1 };
    char buf[256];
    return rmq_queue_name_expand(tmpl, &v, buf, sizeof buf, err, errlen);
}

enum rmq_ack_action rmq_ack_action_for(enum msg_outcome o, bool group_mode)
{
    switch (o) {
    case MSG_DELIVERED: return RMQ_ACK;
    case MSG_DROPPED_NOT_LEADER:
    case MSG_DROPPED_SHUTDOWN:
        /* demotion or exit closes the connection next: the broker requeues
         * what is unacked (group) or deletes the private queue (private) */
        return RMQ_LEAVE;
    case MSG_DROPPED_TERM_ENDED:
        /* received in a lease term that ended before the sink took it; it
         * is never delivered in a later term. group: the term's end always
         * demotes, and demotion closes this connection next, so the broker
         * requeues it for the next leader; a requeue now would only
         * redeliver it to this same consumer, whose every copy would end as
         * term_ended again. private: dropped (the gateway counted it);
         * rejected at once so it never holds a prefetch slot. */
        return group_mode ? RMQ_LEAVE : RMQ_NACK_DROP;
    case MSG_DROPPED_QUEUE_FULL:
    case MSG_DROPPED_SINK_FAILED:
        return group_mode ? RMQ_NACK_REQUEUE : RMQ_NACK_DROP;
    }
    return group_mode ? RMQ_NACK_REQUEUE : RMQ_NACK_DROP;
}
