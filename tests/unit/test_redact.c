/* redact_urls: the password of every URL's user information masked, the
 * rest of the text unchanged; redact_needed; redact_urls_inplace; a small
 * out buffer never shows a piece of the password. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "common/redact.h"

static void check(const char *in, const char *want)
{
    char out[512];
    assert_ptr_equal(redact_urls(in, out, sizeof out), out);
    if (strcmp(out, want) != 0) fail_msg("redact_urls(\"%s\") = \"%s\", want \"%s\"", in, out, want);
}

static void test_masks_password(void **state)
{
    (void)state;
    check("http://root:PW@host:2379", "http://root:***@host:2379");
    check("https://u:Pw-s3cr3t@h/path?q=1", "https://u:***@h/path?q=1");
    check("amqp://guest:guest@[::1]:5672/vhost", "amqp://guest:***@[::1]:5672/vhost");
    /* no ':' in the user information: it may be a token, masked whole */
    check("https://TOKEN@host/x", "https://***@host/x");
    /* an '@' or ':' inside the password: masked to the last '@' */
    check("http://u:p@ss:w@host:1/a@b", "http://u:***@host:1/a@b");
    /* empty password */
    check("http://u:@host", "http://u:***@host");
}

static void test_leaves_the_rest(void **state)
{
    (void)state;
    check("", "");
    check("no url here", "no url here");
    check("http://host:2379", "http://host:2379");
    check("http://host/a@b", "http://host/a@b");        /* '@' in the path */
    check("http://host?x=a@b", "http://host?x=a@b");    /* '@' in the query */
    check("mail me@example.com at http://h:1/ ok", "mail me@example.com at http://h:1/ ok");
}

static void test_in_text(void **state)
{
    (void)state;
    check("etcd http://root:PW@h1:2379/v3/kv/range: Couldn't connect",
          "etcd http://root:***@h1:2379/v3/kv/range: Couldn't connect");
    check("locker etcd http://a:X@h1:2379,http://h2:2379,https://b:Y@h3:2379: down",
          "locker etcd http://a:***@h1:2379,http://h2:2379,https://b:***@h3:2379: down");
    check("endpoint \"http://root:PW@h:2379\": expected", "endpoint \"http://root:***@h:2379\": expected");
    check("sink 'out': POST http://u:PW@127.0.0.1:1/in failed",
          "sink 'out': POST http://u:***@127.0.0.1:1/in failed");
}

static void test_small_buffer(void **state)
{
    (void)state;
    const char *in = "x http://user:Pw-s3cr3t-XYZ@host:1/";
    char out[64];
    for (size_t n = 1; n <= sizeof out; n++) {
        memset(out, 'Z', sizeof out);
        redact_urls(in, out, n);
        assert_true(strlen(out) < n);
        /* no piece of the password, not even its first letters */
        assert_null(strstr(out, "Pw"));
    }
    redact_urls(in, out, sizeof out);
    assert_string_equal(out, "x http://user:***@host:1/");
    /* len 0 writes nothing */
    out[0] = 'Q';
    redact_urls(in, out, 0);
    assert_int_equal(out[0], 'Q');
    assert_string_equal(redact_urls(NULL, out, sizeof out), "");
}

static void test_needed_and_inplace(void **state)
{
    (void)state;
    assert_true(redact_needed("see http://a:b@h"));
    assert_true(redact_needed("https://tok@h"));
    assert_false(redact_needed("http://h:1/a@b"));
    assert_false(redact_needed("plain text"));
    assert_false(redact_needed(NULL));
    char buf[40] = "u http://a:b@h:1/ and more";
    redact_urls_inplace(buf, sizeof buf);
    assert_string_equal(buf, "u http://a:***@h:1/ and more");
    /* grows past the buffer: cut, never the password */
    char small[20] = "http://a:b@hostname";
    redact_urls_inplace(small, sizeof small);
    assert_string_equal(small, "http://a:***@hostna");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_masks_password),
        cmocka_unit_test(test_leaves_the_rest),
        cmocka_unit_test(test_in_text),
        cmocka_unit_test(test_small_buffer),
        cmocka_unit_test(test_needed_and_inplace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
