/* Pure logic of the mqtt endpoint, kept apart from the client library calls
 * so it can be unit tested: topic filter and share group validation,
 * $share composition, client id templates, server URI (list) checks, a
 * message's envelope and the MQTT 5 properties -> envelope fields mapping. */
#ifndef BATON_MQTT_UTIL_H
#define BATON_MQTT_UTIL_H

#include <stdbool.h>
#include <stddef.h>

#include <MQTTAsync.h>
#include <MQTTProperties.h>

#include "common/envelope.h"
#include "common/message.h"

/* Longest topic filter / client id MQTT can carry (two-byte length). */
#define MQTT_STRING_MAX 65535

/* Checks a subscription topic filter (MQTT 3.1.1 4.7 / 5.0 4.7): non-empty,
 * at most 65535 bytes, valid UTF-8 without NUL, '#' only as the whole last
 * level, '+' only as a whole level. A "$share/<group>/<filter>" filter is
 * checked as a share (group and inner filter). Returns 0, or -1 with msg. */
int mqtt_filter_validate(const char *filter, char *msg, size_t msglen);

/* A share group name: non-empty, valid UTF-8, no '/', '+' or '#'. */
int mqtt_group_validate(const char *group, char *msg, size_t msglen);

/* True when filter is a shared subscription ("$share/..."). */
bool mqtt_filter_is_shared(const char *filter);

/* "$share/<group>/<filter>" into a new string (caller frees). */
char *mqtt_share_compose(const char *group, const char *filter);

/* Expands a client id template: %n endpoint name, %h host name, %p pid,
 * %% a percent sign. Returns the length written (excluding NUL), or -1 when
 * the template has an unknown %-escape or the result does not fit in out
 * (len bytes) or exceeds MQTT_STRING_MAX; msg then says why. */
int mqtt_client_id_format(const char *tmpl, const char *name, const char *host, long pid,
                          char *out, size_t len, char *msg, size_t msglen);

/* Accepts tcp://, mqtt://, ssl://, mqtts://, ws://, wss:// URIs with a host
 * and an optional port. Sets *tls for ssl/mqtts/wss. */
int mqtt_server_validate(const char *uri, bool *tls, char *msg, size_t msglen);

/* Checks a list of server URIs (the `servers` setting, or the one
 * `server`): each as mqtt_server_validate (with n > 1 the message starts
 * "servers[i]: "), and all of one kind: TLS (ssl, mqtts, wss) or plain (tcp,
 * mqtt, ws) - paho uses one TLS setup for every URI of a connect, so a mix
 * is refused. Sets *tls. Returns 0, or -1 with msg. */
int mqtt_servers_validate(const char *const *uris, size_t n, bool *tls, char *msg,
                          size_t msglen);

/* The URIs joined with ", " (for messages); caller frees. */
char *mqtt_servers_join(const char *const *uris, size_t n);

/* Which of the configured uris paho reports as connected (the serverURI of
 * its connect success data, which may lack the scheme): the index, or -1. */
int mqtt_servers_match(const char *const *uris, size_t n, const char *connected);

/* Writes the MQTT 5 message properties as envelope fields:
 *   content_type, response_topic, correlation_data (string when UTF-8, else
 *   base64 with correlation_data_encoding), payload_format_indicator,
 *   message_expiry_interval, subscription_identifiers (array),
 *   user_properties (object; a repeated name becomes an array of its values
 *   in order).
 * Properties that only matter to the transport (topic alias) are skipped. */
void mqtt_properties_to_envelope(const MQTTProperties *props, struct envelope *e);

/* Builds the envelope of a message received on topic (topic_len bytes) into
 * e (reused buffer): endpoint, type, epoch, id (NULL: none), received_at,
 * topic, qos, retained, dup, packet_id (QoS 1/2), the MQTT 5 properties
 * when v5 (mqtt_properties_to_envelope), payload. Its ordering key
 * (message.key) is the topic's (message_key_hash of the topic name the
 * message was published on, not the subscription's filter). */
void mqtt_envelope(struct envelope *e, const char *endpoint, const char *type, uint64_t epoch,
                   const char *id, int64_t received_wall_ms, const char *topic, size_t topic_len,
                   const MQTTAsync_message *msg, bool v5);

/* The first value of the user property called name, copied into out (NUL
 * terminated, truncated to outlen - 1 bytes). Returns true when found and
 * non-empty. */
bool mqtt_properties_find_user(const MQTTProperties *props, const char *name, char *out,
                               size_t outlen);

/* ack = "after_sink", QoS 1/2: what the message callback does with the
 * outcome of the message it waits for.
 *   MQTT_VERDICT_ACK         delivered: return, paho sends PUBACK/PUBCOMP
 *   MQTT_VERDICT_REEMIT      evicted by the queue (drop_oldest) or the sink
 *                            gave up, within a running term: emit it again
 *                            after a pause
 *   MQTT_VERDICT_AWAIT_STOP  final, not delivered: not leader, shutdown, or
 *                            its lease term ended (MSG_DROPPED_TERM_ENDED:
 *                            never delivered in a later term, so never
 *                            re-emitted). stop() always follows (a term's end
 *                            always demotes): the callback waits for it, and
 *                            stop() decides at once, without its
 *                            stop_timeout_ms wait (nothing more can come). */
enum mqtt_verdict { MQTT_VERDICT_ACK, MQTT_VERDICT_REEMIT, MQTT_VERDICT_AWAIT_STOP };
enum mqtt_verdict mqtt_after_sink_verdict(enum msg_outcome o);

#endif
