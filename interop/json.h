/* A small strict JSON reader (RFC 8259) for the files other tools write:
 * HF config.json and safetensors headers. Strict because a silently
 * misread config loads a wrong model: trailing commas, comments, control
 * characters in strings, leading zeros, duplicate keys, nesting deeper than
 * 64 and anything after the value are errors naming the byte offset. */
#ifndef INTEROP_JSON_H
#define INTEROP_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef enum { JSON_NULL = 0, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json_value {
    json_type type;
    int boolean;
    double number;
    int number_is_integer;    /* written without fraction or exponent, and exact in an int64 */
    int64_t integer;          /* when number_is_integer */
    char *string;             /* NUL-terminated UTF-8 (strings may not hold NUL: \u0000 is refused) */
    size_t length;            /* string bytes, or elements of an array/object */
    struct json_value *items; /* array elements, or object values */
    char **keys;              /* object keys, parallel to items */
} json_value;

/* Parses text[n] into *root (the caller frees with json_free). */
dt_status json_parse(const char *text, size_t n, json_value *root);
void json_free(json_value *value);

/* The member of an object by key; NULL when absent or not an object. */
const json_value *json_get(const json_value *object, const char *key);

#endif
