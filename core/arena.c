/* Chunked bump allocator; see arena.h for the growth policy. */
#include "core/arena.h"

#include <stdlib.h>
#include <string.h>

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static dt_status add_chunk(dt_arena *arena, size_t capacity) {
    if (arena->n_chunks == DT_ARENA_MAX_CHUNKS) return dt_errorf("arena: more than %d chunks", DT_ARENA_MAX_CHUNKS);
    capacity = round_up(capacity, DT_ARENA_ALIGN);
    void *base = NULL;
    if (posix_memalign(&base, DT_ARENA_ALIGN, capacity) != 0)
        return dt_errorf("arena: out of memory allocating %zu bytes", capacity);
    arena->chunks[arena->n_chunks++] = (dt_arena_chunk){.base = base, .capacity = capacity, .used = 0};
    arena->n_mallocs++;
    return DT_OK;
}

dt_status dt_arena_init(dt_arena *arena, size_t capacity) {
    memset(arena, 0, sizeof *arena);
    if (capacity == 0) return DT_OK;
    return add_chunk(arena, capacity);
}

void dt_arena_free(dt_arena *arena) {
    for (int i = 0; i < arena->n_chunks; i++)
        free(arena->chunks[i].base);
    memset(arena, 0, sizeof *arena);
}

void *dt_arena_alloc(dt_arena *arena, size_t bytes) {
    size_t need = round_up(bytes ? bytes : 1, DT_ARENA_ALIGN);
    if (arena->limit && (need > arena->limit || arena->total_used > arena->limit - need)) { /* no size_t overflow */
        dt_errorf("arena: out of memory: %zu bytes past the arena's limit of %zu", need, arena->limit);
        return NULL;
    }
    dt_arena_chunk *chunk = arena->n_chunks ? &arena->chunks[arena->n_chunks - 1] : NULL;
    if (!chunk || chunk->capacity - chunk->used < need) {
        /* Grow geometrically so a first step needs few chunks. */
        size_t grow = arena->n_chunks ? 2 * arena->chunks[arena->n_chunks - 1].capacity : 0;
        if (grow < need) grow = need;
        if (add_chunk(arena, grow) != DT_OK) return NULL;
        chunk = &arena->chunks[arena->n_chunks - 1];
    }
    void *p = chunk->base + chunk->used;
    chunk->used += need;
    arena->total_used += need;
    if (arena->total_used > arena->peak) arena->peak = arena->total_used;
    return p;
}

void *dt_arena_calloc(dt_arena *arena, size_t bytes) {
    void *p = dt_arena_alloc(arena, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void dt_arena_reset(dt_arena *arena) {
    if (arena->n_chunks > 1) {
        /* Fold into one chunk large enough for the peak seen so far. */
        for (int i = 0; i < arena->n_chunks; i++)
            free(arena->chunks[i].base);
        arena->n_chunks = 0;
        if (add_chunk(arena, arena->peak) != DT_OK) {
            /* Leave the arena empty; the next alloc retries and reports. */
        }
    }
    for (int i = 0; i < arena->n_chunks; i++)
        arena->chunks[i].used = 0;
    arena->total_used = 0;
}

size_t dt_arena_capacity(const dt_arena *arena) {
    size_t total = 0;
    for (int i = 0; i < arena->n_chunks; i++)
        total += arena->chunks[i].capacity;
    return total;
}
