/* The values of config keys, shared by the model keys (models/config_keys.def)
 * and the run keys (train/run_config_keys.def): number parsing that refuses
 * overflow, underflow and trailing text, and the declared ranges with one
 * message form ("KEY = VALUE must be in [lo, hi]"). */
#ifndef MODEL_CONFIG_VALUE_H
#define MODEL_CONFIG_VALUE_H

#include <math.h>
#include <stdint.h>

#include "core/error.h"

/* lo <= value <= hi, with either end open. */
typedef struct config_range {
    double lo, hi;
    int lo_open, hi_open;
} config_range;

/* The range forms the .def tables use (expanding to a config_range's fields). */
#define IN(lo, hi)         lo, hi, 0, 0
#define IN_OPEN_HI(lo, hi) lo, hi, 0, 1 /* [lo, hi) */
#define IN_OPEN_LO(lo, hi) lo, hi, 1, 0 /* (lo, hi] */
#define ABOVE(lo)          lo, INFINITY, 1, 1
#define AT_LEAST(lo)       lo, INFINITY, 0, 1
#define NO_RANGE           0, 0, 0, 0

static inline int config_range_is_set(const config_range *r) { return r->lo != 0 || r->hi != 0; }

/* Checks value against the range; the error names key (as given, e.g. "train.lr"). */
dt_status config_range_check(const char *key, double value, const config_range *range);
/* "[1, 65536]", "(0, inf)", ... */
void config_range_format(const config_range *range, char *text, int capacity);

/* A decimal int64 ("1000000"); with allow_exponent also an exactly integral
 * real such as "2e6" (token budgets). Overflow ("2^64"), underflow ("1e-400"),
 * fractions and trailing text are errors naming key and text. */
dt_status config_parse_int(const char *key, const char *text, int allow_exponent, int64_t *out);
/* A finite double; overflow and underflow to zero are errors. */
dt_status config_parse_real(const char *key, const char *text, double *out);
/* The shortest "%.Ng" that reads back as the same double: 1e-05, not 1.0000000000000001e-05. */
void config_format_real(double value, char *text, int capacity);
/* Copies value without surrounding blanks (INI values, hand-typed --set);
 * fails when it does not fit. */
dt_status config_trim(const char *key, const char *value, char *out, int capacity);

#endif
