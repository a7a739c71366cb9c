/* A bump allocator for per-step memory (activations, their gradients, tape
 * nodes).
 *
 * Why chunks: the first training step discovers how much it needs; the arena
 * grows by malloc'ing extra chunks then, and the next dt_arena_reset() folds
 * them into one chunk of the peak size. From the second step on a step
 * performs no malloc at all (dt_arena_mallocs() lets tests check that). */
#ifndef DT_ARENA_H
#define DT_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

enum { DT_ARENA_ALIGN = 64, DT_ARENA_MAX_CHUNKS = 64 };

typedef struct {
    uint8_t *base;
    size_t capacity;
    size_t used;
} dt_arena_chunk;

typedef struct {
    dt_arena_chunk chunks[DT_ARENA_MAX_CHUNKS];
    int n_chunks;      /* chunks in use; chunks[n_chunks-1] is the current one */
    size_t total_used; /* bytes handed out since the last reset (incl. padding) */
    size_t peak;       /* largest total_used ever seen */
    long n_mallocs;    /* chunk allocations over the arena's life */
    size_t limit;      /* 0, or the most total_used may reach: a request past it fails as if out of
                          memory (a memory cap, and how the tests fail an allocation at a chosen point) */
} dt_arena;

/* capacity may be 0: the first chunk is then sized by the first request. */
dt_status dt_arena_init(dt_arena *arena, size_t capacity);
void dt_arena_free(dt_arena *arena);

/* 64-byte aligned, uninitialised; NULL (with an error message) when out of
 * memory or past the limit. */
void *dt_arena_alloc(dt_arena *arena, size_t bytes);
/* Same, zero-filled. */
void *dt_arena_calloc(dt_arena *arena, size_t bytes);

/* Forget every allocation; folds chunks into one of the peak size. */
void dt_arena_reset(dt_arena *arena);

size_t dt_arena_capacity(const dt_arena *arena);
static inline long dt_arena_mallocs(const dt_arena *arena) { return arena->n_mallocs; }

#endif
