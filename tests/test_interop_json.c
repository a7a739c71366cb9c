/* The strict JSON reader: values it must read exactly, and the malformed
 * texts it must refuse (each with the byte offset in the message). */
#include <criterion/criterion.h>
#include <string.h>

#include "interop/json.h"

static json_value parse_ok(const char *text) {
    json_value v;
    cr_assert_eq(json_parse(text, strlen(text), &v), DT_OK, "%s: %s", text, dt_error_message());
    return v;
}

Test(json, reads_objects_arrays_numbers_strings) {
    json_value v = parse_ok(" {\"a\": [1, -2.5e3, 0, true, null], \"b\": \"x\\u00e9\\ud83d\\ude00\\n\", \"c\": {}} ");
    cr_assert_eq(v.type, JSON_OBJECT);
    const json_value *a = json_get(&v, "a");
    cr_assert(a && a->type == JSON_ARRAY && a->length == 5);
    cr_assert(a->items[0].number_is_integer && a->items[0].integer == 1);
    cr_assert(!a->items[1].number_is_integer && a->items[1].number == -2500.0);
    cr_assert(a->items[3].type == JSON_BOOL && a->items[3].boolean);
    cr_assert_eq(a->items[4].type, JSON_NULL);
    const json_value *b = json_get(&v, "b");
    cr_assert_str_eq(b->string, "x\xc3\xa9\xf0\x9f\x98\x80\n");
    cr_assert_eq(json_get(&v, "c")->length, 0);
    cr_assert_null(json_get(&v, "d"));
    json_free(&v);
    v = parse_ok("9007199254740993");
    cr_assert(v.number_is_integer && v.integer == 9007199254740993LL, "integers beyond 2^53 stay exact");
    json_free(&v);
}

Test(json, refuses_malformed_text) {
    const char *bad[] = {"{\"a\": 1,}",
                         "[1, 2,]",
                         "{\"a\": 1, \"a\": 2}",
                         "01",
                         "1.",
                         "-",
                         "\"tab\there\"",
                         "\"\\x\"",
                         "\"\\ud800\"",
                         "{\"a\" 1}",
                         "[1] 2",
                         "",
                         "tru",
                         "\"\\u0000\"",
                         "{'a': 1}",
                         "[1 2]",
                         "// c\n1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_value v;
        cr_assert_eq(json_parse(bad[i], strlen(bad[i]), &v), DT_ERR, "refuses %s", bad[i]);
        cr_assert(strstr(dt_error_message(), "JSON error at byte"), "%s: %s", bad[i], dt_error_message());
    }
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    json_value v;
    cr_assert_eq(json_parse(deep, 200, &v), DT_ERR, "nesting beyond 64 is refused");
}
