/* Seeded random numbers, reproducible across runs and machines.
 *
 * xoshiro256** seeded through splitmix64. Normals use Box-Muller in double
 * precision and cache the second value, so the whole state (including the
 * cache) is in the struct and can be checkpointed as plain integers. */
#ifndef DT_RNG_H
#define DT_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
    int has_spare; /* a cached second Box-Muller normal is valid */
    double spare;
} dt_rng;

void dt_rng_seed(dt_rng *rng, uint64_t seed);
uint64_t dt_rng_next(dt_rng *rng);
/* Uniform in [0, 1) with 24 random bits (exactly representable in float). */
float dt_rng_uniform(dt_rng *rng);
/* Uniform integer in [0, n), unbiased. */
uint64_t dt_rng_below(dt_rng *rng, uint64_t n);
/* Standard normal. */
double dt_rng_normal(dt_rng *rng);
/* Fills x[n] with normal(0, std). */
void dt_rng_fill_normal(dt_rng *rng, float *x, int64_t n, float std);

#endif
