/* xoshiro256** (Blackman & Vigna) with splitmix64 seeding. */
#include "core/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void dt_rng_seed(dt_rng *rng, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        rng->s[i] = splitmix64(&x);
    rng->has_spare = 0;
    rng->spare = 0.0;
}

uint64_t dt_rng_next(dt_rng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float dt_rng_uniform(dt_rng *rng) { return (float)(dt_rng_next(rng) >> 40) * (1.0f / 16777216.0f); }

uint64_t dt_rng_below(dt_rng *rng, uint64_t n) {
    /* Rejection sampling removes the modulo bias. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = dt_rng_next(rng);
    while (x >= limit);
    return x % n;
}

double dt_rng_normal(dt_rng *rng) {
    if (rng->has_spare) {
        rng->has_spare = 0;
        return rng->spare;
    }
    /* u1 in (0, 1] so log never sees 0. */
    double u1 = ((double)(dt_rng_next(rng) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(dt_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
    double radius = sqrt(-2.0 * log(u1));
    double angle = 2.0 * M_PI * u2;
    rng->spare = radius * sin(angle);
    rng->has_spare = 1;
    return radius * cos(angle);
}

void dt_rng_fill_normal(dt_rng *rng, float *x, int64_t n, float std) {
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(dt_rng_normal(rng) * std);
}
