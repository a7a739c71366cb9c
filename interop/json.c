/* The strict JSON reader of json.h: recursive descent over the bytes. */
#include "interop/json.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { JSON_MAX_DEPTH = 64 };

typedef struct {
    const char *text;
    size_t n, at;
} parser;

static dt_status fail(const parser *p, const char *what) {
    return dt_errorf("JSON error at byte %zu: %s", p->at, what);
}

static void skip_space(parser *p) {
    while (p->at < p->n &&
           (p->text[p->at] == ' ' || p->text[p->at] == '\t' || p->text[p->at] == '\n' || p->text[p->at] == '\r'))
        p->at++;
}

static int literal(parser *p, const char *word) {
    size_t len = strlen(word);
    if (p->n - p->at < len || memcmp(p->text + p->at, word, len) != 0) return 0;
    p->at += len;
    return 1;
}

static int hex4(parser *p, unsigned *out) {
    if (p->n - p->at < 4) return 0;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->text[p->at + i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned)(c - 'A' + 10);
        else
            return 0;
    }
    p->at += 4;
    *out = v;
    return 1;
}

static size_t put_utf8(char *out, unsigned cp) {
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) return out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | ((cp >> 6) & 0x3F)),
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18), out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* At the opening quote; *out is malloc'ed. The decoded text is never longer than the source. */
static dt_status parse_string(parser *p, char **out, size_t *length) {
    p->at++; /* " */
    size_t start = p->at, end = start;
    while (end < p->n && p->text[end] != '"')
        end += p->text[end] == '\\' ? 2 : 1;
    if (end >= p->n) return fail(p, "unterminated string");
    char *s = malloc(end - start + 1);
    if (!s) return dt_errorf("out of memory parsing JSON");
    size_t len = 0;
    while (p->text[p->at] != '"') {
        unsigned char c = (unsigned char)p->text[p->at];
        if (c < 0x20) {
            free(s);
            return fail(p, "control character in a string");
        }
        if (c != '\\') {
            s[len++] = (char)c;
            p->at++;
            continue;
        }
        p->at++;
        char e = p->text[p->at++];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            s[len++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            continue;
        }
        unsigned cp = 0, low = 0;
        if (e != 'u' || !hex4(p, &cp)) {
            free(s);
            return fail(p, "bad escape in a string");
        }
        if (cp >= 0xD800 && cp < 0xDC00) { /* a surrogate pair */
            if (!literal(p, "\\u") || !hex4(p, &low) || low < 0xDC00 || low >= 0xE000) {
                free(s);
                return fail(p, "unpaired surrogate in a string");
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        } else if ((cp >= 0xDC00 && cp < 0xE000) || cp == 0) {
            free(s);
            return fail(p, cp ? "unpaired surrogate in a string" : "\\u0000 in a string");
        }
        len += put_utf8(s + len, cp);
    }
    p->at++; /* " */
    s[len] = '\0';
    *out = s;
    *length = len;
    return DT_OK;
}

static dt_status parse_number(parser *p, json_value *v) {
    size_t start = p->at;
    int integer = 1;
    if (p->text[p->at] == '-') p->at++;
    if (p->at >= p->n || !(p->text[p->at] >= '0' && p->text[p->at] <= '9')) return fail(p, "bad number");
    if (p->text[p->at] == '0' && p->at + 1 < p->n && p->text[p->at + 1] >= '0' && p->text[p->at + 1] <= '9')
        return fail(p, "leading zero in a number");
    while (p->at < p->n && p->text[p->at] >= '0' && p->text[p->at] <= '9')
        p->at++;
    if (p->at < p->n && p->text[p->at] == '.') {
        integer = 0;
        p->at++;
        if (p->at >= p->n || !(p->text[p->at] >= '0' && p->text[p->at] <= '9')) return fail(p, "bad fraction");
        while (p->at < p->n && p->text[p->at] >= '0' && p->text[p->at] <= '9')
            p->at++;
    }
    if (p->at < p->n && (p->text[p->at] == 'e' || p->text[p->at] == 'E')) {
        integer = 0;
        p->at++;
        if (p->at < p->n && (p->text[p->at] == '+' || p->text[p->at] == '-')) p->at++;
        if (p->at >= p->n || !(p->text[p->at] >= '0' && p->text[p->at] <= '9')) return fail(p, "bad exponent");
        while (p->at < p->n && p->text[p->at] >= '0' && p->text[p->at] <= '9')
            p->at++;
    }
    char buf[64];
    size_t len = p->at - start;
    if (len >= sizeof buf) return fail(p, "number too long");
    memcpy(buf, p->text + start, len);
    buf[len] = '\0';
    v->type = JSON_NUMBER;
    v->number = strtod(buf, NULL);
    if (!isfinite(v->number)) return fail(p, "number out of range");
    if (integer) {
        errno = 0;
        long long i = strtoll(buf, NULL, 10);
        if (!errno) v->number_is_integer = 1, v->integer = i;
    }
    return DT_OK;
}

static dt_status parse_value(parser *p, json_value *v, int depth);

/* Appends a parsed element to an array or object under construction. */
static dt_status grow(json_value *v, size_t *capacity, int with_keys) {
    if (v->length < *capacity) return DT_OK;
    size_t c = *capacity ? 2 * *capacity : 8;
    json_value *items = realloc(v->items, c * sizeof *items);
    if (!items) return dt_errorf("out of memory parsing JSON");
    v->items = items;
    if (with_keys) {
        char **keys = realloc(v->keys, c * sizeof *keys);
        if (!keys) return dt_errorf("out of memory parsing JSON");
        v->keys = keys;
    }
    *capacity = c;
    return DT_OK;
}

static dt_status parse_container(parser *p, json_value *v, int depth, int object) {
    v->type = object ? JSON_OBJECT : JSON_ARRAY;
    const char close = object ? '}' : ']';
    size_t capacity = 0;
    p->at++;
    skip_space(p);
    if (p->at < p->n && p->text[p->at] == close) {
        p->at++;
        return DT_OK;
    }
    for (;;) {
        skip_space(p);
        if (grow(v, &capacity, object) != DT_OK) return DT_ERR;
        if (object) {
            if (p->at >= p->n || p->text[p->at] != '"') return fail(p, "expected a string key");
            char *key = NULL;
            size_t key_length = 0;
            if (parse_string(p, &key, &key_length) != DT_OK) return DT_ERR;
            for (size_t i = 0; i < v->length; i++)
                if (!strcmp(v->keys[i], key)) {
                    free(key);
                    return fail(p, "duplicate key");
                }
            v->keys[v->length] = key;
            skip_space(p);
            if (p->at >= p->n || p->text[p->at] != ':') {
                memset(&v->items[v->length++], 0, sizeof *v->items); /* so json_free sees the key */
                return fail(p, "expected ':'");
            }
            p->at++;
        }
        json_value *item = &v->items[v->length++];
        memset(item, 0, sizeof *item);
        if (parse_value(p, item, depth + 1) != DT_OK) return DT_ERR;
        skip_space(p);
        if (p->at < p->n && p->text[p->at] == ',') {
            p->at++;
            continue;
        }
        if (p->at < p->n && p->text[p->at] == close) {
            p->at++;
            return DT_OK;
        }
        return fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static dt_status parse_value(parser *p, json_value *v, int depth) {
    if (depth > JSON_MAX_DEPTH) return fail(p, "nested too deeply");
    skip_space(p);
    if (p->at >= p->n) return fail(p, "unexpected end");
    char c = p->text[p->at];
    if (c == '{' || c == '[') return parse_container(p, v, depth, c == '{');
    if (c == '"') {
        v->type = JSON_STRING;
        return parse_string(p, &v->string, &v->length);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, v);
    if (literal(p, "true")) return v->type = JSON_BOOL, v->boolean = 1, DT_OK;
    if (literal(p, "false")) return v->type = JSON_BOOL, v->boolean = 0, DT_OK;
    if (literal(p, "null")) return v->type = JSON_NULL, DT_OK;
    return fail(p, "unexpected character");
}

dt_status json_parse(const char *text, size_t n, json_value *root) {
    memset(root, 0, sizeof *root);
    parser p = {text, n, 0};
    dt_status status = parse_value(&p, root, 0);
    if (status == DT_OK) {
        skip_space(&p);
        if (p.at != n) status = fail(&p, "text after the value");
    }
    if (status != DT_OK) json_free(root);
    return status;
}

void json_free(json_value *v) {
    if (!v) return;
    free(v->string);
    for (size_t i = 0; i < v->length && (v->type == JSON_ARRAY || v->type == JSON_OBJECT); i++) {
        json_free(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    memset(v, 0, sizeof *v);
}

const json_value *json_get(const json_value *object, const char *key) {
    if (!object || object->type != JSON_OBJECT) return NULL;
    for (size_t i = 0; i < object->length; i++)
        if (!strcmp(object->keys[i], key)) return &object->items[i];
    return NULL;
}
