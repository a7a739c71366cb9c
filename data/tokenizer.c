/* Tokenizers (data/tokenizer.h): byte-level (V = 256) and byte-level BPE.
 *
 * Both work on raw bytes, so decode(encode(x)) == x for any input (invalid
 * UTF-8, NUL bytes included): every token is a byte string, and encoding only
 * ever joins adjacent tokens.
 *
 * BPE choices (written down because they change the token stream):
 * - Pre-split, GPT-2 style, on bytes: the text is cut into chunks and merges
 *   never cross a chunk boundary. A chunk is an English contraction ('s 't 're
 *   've 'm 'll 'd), or an optional single leading space followed by a run of
 *   letters (A-Z, a-z and every byte >= 0x80, so UTF-8 characters stay inside
 *   words), of digits, or of other bytes (punctuation, control bytes), or a run
 *   of whitespace that leaves its last byte to the next word when a word
 *   follows (GPT-2's `\s+(?!\S)`). Chunks are capped at BPE_MAX_CHUNK bytes so
 *   a pathological run (a megabyte of '=') costs linear time. Pre-splitting
 *   makes training fast (it works on the distinct chunks with their counts)
 *   and keeps tokens word-like.
 * - Training: the most frequent adjacent pair (counted over chunk occurrences,
 *   overlapping occurrences included, as in GPT-2/HF) is merged next; ties go
 *   to the lowest (left id, right id). Incremental: pair counts in a hash map,
 *   a max-heap with lazy deletion, and per pair the list of symbol positions
 *   where it occurs; symbols of each distinct chunk form a linked list, and a
 *   merge only touches the neighbours of its occurrences. When no pair is left
 *   (tiny corpora) training stops early and vocab_size is smaller than asked.
 * - Encoding: per chunk, merges are applied lowest rank first (all occurrences
 *   of that pair, left to right), which reproduces the training segmentation;
 *   the result for each distinct chunk is cached for the duration of the call.
 */
#include "data/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "core/h5.h"

enum {
    BYTE_VOCAB = 256,
    BPE_MAX_CHUNK = 128,        /* bytes in one pre-split chunk */
    TOKEN_MAX_BYTES = 1024,     /* longest token accepted from a file */
    ENCODE_CACHE_MAX = 1 << 20, /* distinct chunks remembered by one encode call */
};
#define BPE_MAX_VOCAB ((int64_t)1 << 24)

/* ---------------------------------------------------------------- hashing */

static uint64_t hash_bytes(const uint8_t *bytes, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ bytes[i]) * 0x100000001b3ULL;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static uint64_t pair_key(int32_t left, int32_t right) { return ((uint64_t)(uint32_t)left << 32) | (uint32_t)right; }

/* Open-addressing map from a pair key to an int32 (pair index or merge rank). */
typedef struct {
    uint64_t *keys; /* EMPTY_KEY marks a free slot */
    int32_t *values;
    size_t capacity; /* power of two */
    size_t count;
} pair_map;

#define EMPTY_KEY UINT64_MAX

static void pair_map_free(pair_map *map) {
    free(map->keys);
    free(map->values);
    memset(map, 0, sizeof *map);
}

static dt_status pair_map_init(pair_map *map, size_t expected) {
    size_t capacity = 64;
    while (capacity < 2 * expected)
        capacity *= 2;
    map->keys = malloc(capacity * sizeof *map->keys);
    map->values = malloc(capacity * sizeof *map->values);
    map->capacity = capacity;
    map->count = 0;
    if (!map->keys || !map->values) {
        pair_map_free(map);
        return dt_errorf("out of memory for a pair map of %zu slots", capacity);
    }
    memset(map->keys, 0xff, capacity * sizeof *map->keys);
    return DT_OK;
}

static int32_t pair_map_find(const pair_map *map, uint64_t key) {
    size_t mask = map->capacity - 1;
    for (size_t slot = hash_u64(key) & mask;; slot = (slot + 1) & mask) {
        if (map->keys[slot] == key) return map->values[slot];
        if (map->keys[slot] == EMPTY_KEY) return -1;
    }
}

static void pair_map_put_unchecked(pair_map *map, uint64_t key, int32_t value) {
    size_t mask = map->capacity - 1;
    size_t slot = hash_u64(key) & mask;
    while (map->keys[slot] != EMPTY_KEY && map->keys[slot] != key)
        slot = (slot + 1) & mask;
    if (map->keys[slot] == EMPTY_KEY) map->count++;
    map->keys[slot] = key;
    map->values[slot] = value;
}

static dt_status pair_map_put(pair_map *map, uint64_t key, int32_t value) {
    if (2 * (map->count + 1) > map->capacity) { /* keep the load under 1/2 */
        pair_map bigger;
        if (pair_map_init(&bigger, map->capacity) != DT_OK) return DT_ERR;
        for (size_t i = 0; i < map->capacity; i++)
            if (map->keys[i] != EMPTY_KEY) pair_map_put_unchecked(&bigger, map->keys[i], map->values[i]);
        pair_map_free(map);
        *map = bigger;
    }
    pair_map_put_unchecked(map, key, value);
    return DT_OK;
}

/* --------------------------------------------------------------- pre-split */

typedef enum { CLASS_SPACE, CLASS_LETTER, CLASS_DIGIT, CLASS_OTHER } byte_class;

static byte_class classify(uint8_t c) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') return CLASS_SPACE;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80) return CLASS_LETTER;
    if (c >= '0' && c <= '9') return CLASS_DIGIT;
    return CLASS_OTHER;
}

/* text[0] == '\'': length of a GPT-2 contraction starting there, or 0. */
static size_t contraction_length(const uint8_t *text, size_t n) {
    static const char *const suffixes[] = {"s", "t", "re", "ve", "m", "ll", "d"};
    for (size_t k = 0; k < sizeof suffixes / sizeof suffixes[0]; k++) {
        size_t len = strlen(suffixes[k]);
        if (n > len && memcmp(text + 1, suffixes[k], len) == 0) return len + 1;
    }
    return 0;
}

/* Length of the chunk starting at text[0] (n >= 1 bytes remain); see the top comment. */
static size_t chunk_length(const uint8_t *text, size_t n) {
    size_t length = 0;
    if (text[0] == '\'' && (length = contraction_length(text, n)) > 0) return length;
    byte_class cls = classify(text[0]);
    if (text[0] == ' ' && n > 1 && classify(text[1]) != CLASS_SPACE) { /* " word" keeps its space */
        length = 1;
        cls = classify(text[1]);
    }
    while (length < n && classify(text[length]) == cls)
        length++;
    /* A whitespace run followed by a word leaves its last byte to that word. */
    if (cls == CLASS_SPACE && length < n && length > 1) length--;
    return length < BPE_MAX_CHUNK ? length : BPE_MAX_CHUNK;
}

/* ------------------------------------------------- tokenizer from merges */

/* What encoding needs beyond the public fields. */
typedef struct {
    pair_map rank; /* (left, right) -> merge rank */
} bpe_internal;

void data_tokenizer_free(data_tokenizer *tok) {
    if (!tok) return;
    if (tok->internal) {
        bpe_internal *bpe = tok->internal;
        pair_map_free(&bpe->rank);
        free(bpe);
    }
    /* token_bytes[0] is the start of the one pool that holds every token's bytes. */
    if (tok->token_bytes) free(tok->token_bytes[0]);
    free(tok->token_bytes);
    free(tok->token_length);
    free(tok->merges);
    memset(tok, 0, sizeof *tok);
}

/* Fills tok from merges[n_merges][2] (copied): byte strings, lengths, and for
 * BPE the rank map (also with zero merges). Merge i may only use tokens
 * < 256 + i, and no token may exceed TOKEN_MAX_BYTES. */
static dt_status tokenizer_from_merges(data_tokenizer *tok, data_tokenizer_kind kind, const int32_t (*merges)[2],
                                       int64_t n_merges) {
    memset(tok, 0, sizeof *tok);
    int64_t vocab = BYTE_VOCAB + n_merges;
    if (n_merges < 0 || vocab > BPE_MAX_VOCAB)
        return dt_errorf("vocab_size %lld is out of range [256, %lld]", (long long)vocab, (long long)BPE_MAX_VOCAB);
    tok->kind = kind;
    tok->vocab_size = vocab;
    tok->token_length = malloc((size_t)vocab * sizeof *tok->token_length);
    tok->token_bytes = calloc((size_t)vocab, sizeof *tok->token_bytes);
    if (n_merges > 0) tok->merges = malloc((size_t)n_merges * sizeof *tok->merges);
    if (!tok->token_length || !tok->token_bytes || (n_merges > 0 && !tok->merges)) goto out_of_memory;

    size_t pool_size = 0;
    for (int32_t b = 0; b < BYTE_VOCAB; b++)
        tok->token_length[b] = 1;
    pool_size = BYTE_VOCAB;
    for (int64_t i = 0; i < n_merges; i++) {
        for (int side = 0; side < 2; side++) {
            int32_t id = merges[i][side];
            if (id < 0 || id >= BYTE_VOCAB + i) {
                data_tokenizer_free(tok);
                return dt_errorf("merge %lld uses token %d, which is not defined before it", (long long)i, id);
            }
        }
        int64_t length = (int64_t)tok->token_length[merges[i][0]] + tok->token_length[merges[i][1]];
        if (length > TOKEN_MAX_BYTES) {
            data_tokenizer_free(tok);
            return dt_errorf("merge %lld makes a token of %lld bytes (at most %d allowed)", (long long)i,
                             (long long)length, TOKEN_MAX_BYTES);
        }
        tok->token_length[BYTE_VOCAB + i] = (int32_t)length;
        tok->merges[i][0] = merges[i][0];
        tok->merges[i][1] = merges[i][1];
        pool_size += (size_t)length;
    }

    uint8_t *pool = malloc(pool_size);
    if (!pool) goto out_of_memory;
    tok->token_bytes[0] = pool;
    for (int32_t b = 0; b < BYTE_VOCAB; b++) {
        tok->token_bytes[b] = pool + b;
        pool[b] = (uint8_t)b;
    }
    uint8_t *cursor = pool + BYTE_VOCAB;
    for (int64_t i = 0; i < n_merges; i++) {
        int32_t left = merges[i][0], right = merges[i][1];
        tok->token_bytes[BYTE_VOCAB + i] = cursor;
        memcpy(cursor, tok->token_bytes[left], (size_t)tok->token_length[left]);
        cursor += tok->token_length[left];
        memcpy(cursor, tok->token_bytes[right], (size_t)tok->token_length[right]);
        cursor += tok->token_length[right];
    }

    if (tok->kind == TOKENIZER_BPE) {
        bpe_internal *bpe = calloc(1, sizeof *bpe);
        if (!bpe) goto out_of_memory;
        tok->internal = bpe;
        if (pair_map_init(&bpe->rank, (size_t)n_merges) != DT_OK) {
            data_tokenizer_free(tok);
            return DT_ERR;
        }
        /* A duplicated merge (only in a crafted file) can never fire twice: keep the first rank. */
        for (int64_t i = n_merges - 1; i >= 0; i--)
            if (pair_map_put(&bpe->rank, pair_key(merges[i][0], merges[i][1]), (int32_t)i) != DT_OK) {
                data_tokenizer_free(tok);
                return DT_ERR;
            }
    }
    return DT_OK;

out_of_memory:
    data_tokenizer_free(tok);
    return dt_errorf("out of memory building a tokenizer of %lld tokens", (long long)vocab);
}

dt_status data_tokenizer_byte(data_tokenizer *tok) { return tokenizer_from_merges(tok, TOKENIZER_BYTE, NULL, 0); }

dt_status data_tokenizer_external(data_tokenizer *tok, int64_t vocab_size) {
    memset(tok, 0, sizeof *tok);
    if (vocab_size < 1 || vocab_size > (1LL << 32))
        return dt_errorf("external tokenizer: vocab_size %lld is outside [1, 2^32]", (long long)vocab_size);
    tok->kind = TOKENIZER_EXTERNAL;
    tok->vocab_size = vocab_size;
    tok->token_length = calloc((size_t)vocab_size, sizeof *tok->token_length); /* every string empty */
    if (!tok->token_length)
        return dt_errorf("out of memory for an external tokenizer of %lld ids", (long long)vocab_size);
    return DT_OK;
}

/* ---------------------------------------------------------- BPE training */

/* Distinct pre-split chunks of the corpus with their counts. Memory matters
 * here: a corpus of mostly distinct chunks (code, numbers, base64) has about
 * one distinct chunk per 3-5 bytes, so the table is compact: an open-addressed
 * index of 8-byte slots (a 32-bit hash tag and the chunk's number; load at
 * most 3/4) over dense arrays of offset, length and count (grown by 1.5x).
 * The old table of 32-byte slots at load 1/2 took up to 128 bytes per chunk. */
typedef struct {
    uint64_t *slots; /* (hash >> 32) << 32 | (word + 1); 0 marks a free slot */
    size_t capacity; /* power of two */
    size_t *offset;  /* [count] first occurrence in the text */
    int32_t *length; /* [count] */
    int64_t *count;  /* [count] occurrences */
    size_t n_words, cap_words;
} word_table;

static void word_table_free(word_table *table) {
    free(table->slots);
    free(table->offset);
    free(table->length);
    free(table->count);
    memset(table, 0, sizeof *table);
}

/* The slot holding this chunk, or the free slot where it belongs. */
static uint64_t *word_slot(const word_table *table, const uint8_t *text, size_t offset, size_t length, uint64_t hash) {
    const size_t mask = table->capacity - 1;
    const uint64_t tag = hash >> 32;
    for (size_t slot = hash & mask;; slot = (slot + 1) & mask) {
        uint64_t *entry = &table->slots[slot];
        if (*entry == 0) return entry;
        size_t w = (size_t)(*entry & 0xffffffffu) - 1;
        if ((*entry >> 32) == tag && (size_t)table->length[w] == length &&
            memcmp(text + table->offset[w], text + offset, length) == 0)
            return entry;
    }
}

static dt_status word_table_rehash(word_table *table, const uint8_t *text, size_t capacity) {
    uint64_t *slots = calloc(capacity, sizeof *slots);
    if (!slots) return dt_errorf("out of memory counting words");
    free(table->slots);
    table->slots = slots;
    table->capacity = capacity;
    for (size_t w = 0; w < table->n_words; w++) {
        uint64_t hash = hash_bytes(text + table->offset[w], (size_t)table->length[w]);
        *word_slot(table, text, table->offset[w], (size_t)table->length[w], hash) =
            (hash >> 32) << 32 | (uint64_t)(w + 1);
    }
    return DT_OK;
}

static dt_status word_table_add(word_table *table, const uint8_t *text, size_t offset, size_t length) {
    if (4 * (table->n_words + 1) > 3 * table->capacity &&
        word_table_rehash(table, text, table->capacity ? 2 * table->capacity : 1024) != DT_OK)
        return DT_ERR;
    uint64_t hash = hash_bytes(text + offset, length);
    uint64_t *entry = word_slot(table, text, offset, length, hash);
    if (*entry == 0) {
        if (table->n_words >= INT32_MAX - 1) return dt_errorf("too many distinct words for BPE training");
        if (table->n_words == table->cap_words) {
            size_t bigger = table->cap_words ? table->cap_words + table->cap_words / 2 : 1024;
            size_t *offsets = realloc(table->offset, bigger * sizeof *offsets);
            if (offsets) table->offset = offsets;
            int32_t *lengths = offsets ? realloc(table->length, bigger * sizeof *lengths) : NULL;
            if (lengths) table->length = lengths;
            int64_t *counts = lengths ? realloc(table->count, bigger * sizeof *counts) : NULL;
            if (!counts) return dt_errorf("out of memory counting words");
            table->count = counts;
            table->cap_words = bigger;
        }
        size_t w = table->n_words++;
        table->offset[w] = offset;
        table->length[w] = (int32_t)length;
        table->count[w] = 0;
        *entry = (hash >> 32) << 32 | (uint64_t)(w + 1);
    }
    table->count[(*entry & 0xffffffffu) - 1]++;
    return DT_OK;
}

typedef struct {
    int32_t left, right;
    int64_t count;
    int32_t *positions; /* symbol indices where the pair (may have) occurred; stale ones are skipped */
    int32_t n_positions, cap_positions;
    int touched; /* on this merge's list of new pairs */
} bpe_pair;

typedef struct {
    int64_t count;
    int32_t left, right;
} heap_entry;

typedef struct {
    /* Symbols of all distinct chunks, each chunk's contiguous: a merged
     * symbol becomes -1 and its neighbours are found by skipping those (a
     * token spans few bytes), and a symbol's chunk by binary search of
     * word_start, so a symbol costs 4 bytes, not the 16 of linked lists with
     * a chunk index (which dominated memory on corpora of distinct chunks). */
    int32_t *symbol;     /* token id, -1 once merged into its left neighbour */
    int32_t *word_start; /* [n_words + 1] first symbol of each chunk; the last is n_symbols */
    int64_t *word_count; /* [n_words] occurrences of each chunk */
    int32_t n_words;
    pair_map pair_index;
    bpe_pair *pairs;
    int64_t n_pairs, cap_pairs;
    heap_entry *heap;
    int64_t heap_size, heap_capacity;
    int32_t *touched; /* pairs created or changed by the current merge */
    int64_t n_touched, cap_touched;
} bpe_trainer;

static void bpe_trainer_free(bpe_trainer *tr) {
    free(tr->symbol);
    free(tr->word_start);
    free(tr->word_count);
    pair_map_free(&tr->pair_index);
    for (int64_t i = 0; i < tr->n_pairs; i++)
        free(tr->pairs[i].positions);
    free(tr->pairs);
    free(tr->heap);
    free(tr->touched);
}

/* Grows *array (element size `size`) to hold at least `need` elements. */
static int grow_from(void **array, int64_t *capacity, int64_t need, size_t size, int64_t first) {
    if (need <= *capacity) return 1;
    int64_t bigger = *capacity ? *capacity * 2 : first;
    while (bigger < need)
        bigger *= 2;
    void *grown = realloc(*array, (size_t)bigger * size);
    if (!grown) return 0;
    *array = grown;
    *capacity = bigger;
    return 1;
}

static int grow(void **array, int64_t *capacity, int64_t need, size_t size) {
    return grow_from(array, capacity, need, size, 16);
}

/* Heap order: larger count first, then lower left id, then lower right id. */
static int heap_before(const heap_entry *a, const heap_entry *b) {
    if (a->count != b->count) return a->count > b->count;
    if (a->left != b->left) return a->left < b->left;
    return a->right < b->right;
}

static void heap_sift_down(heap_entry *heap, int64_t size, int64_t i) {
    for (;;) {
        int64_t best = i, l = 2 * i + 1, r = 2 * i + 2;
        if (l < size && heap_before(&heap[l], &heap[best])) best = l;
        if (r < size && heap_before(&heap[r], &heap[best])) best = r;
        if (best == i) return;
        heap_entry t = heap[i];
        heap[i] = heap[best];
        heap[best] = t;
        i = best;
    }
}

static dt_status heap_push(bpe_trainer *tr, int64_t count, int32_t left, int32_t right) {
    if (!grow((void **)&tr->heap, &tr->heap_capacity, tr->heap_size + 1, sizeof *tr->heap))
        return dt_errorf("out of memory in the BPE heap");
    int64_t i = tr->heap_size++;
    tr->heap[i] = (heap_entry){count, left, right};
    while (i > 0) {
        int64_t parent = (i - 1) / 2;
        if (!heap_before(&tr->heap[i], &tr->heap[parent])) break;
        heap_entry t = tr->heap[i];
        tr->heap[i] = tr->heap[parent];
        tr->heap[parent] = t;
        i = parent;
    }
    return DT_OK;
}

static int heap_pop(bpe_trainer *tr, heap_entry *top) {
    if (tr->heap_size == 0) return 0;
    *top = tr->heap[0];
    tr->heap[0] = tr->heap[--tr->heap_size];
    heap_sift_down(tr->heap, tr->heap_size, 0);
    return 1;
}

/* Index of pair (left, right), created with count 0 if new; -1 when out of memory. */
static int64_t pair_get(bpe_trainer *tr, int32_t left, int32_t right) {
    uint64_t key = pair_key(left, right);
    int32_t index = pair_map_find(&tr->pair_index, key);
    if (index >= 0) return index;
    if (tr->n_pairs >= INT32_MAX) return -1;
    if (!grow((void **)&tr->pairs, &tr->cap_pairs, tr->n_pairs + 1, sizeof *tr->pairs)) return -1;
    index = (int32_t)tr->n_pairs++;
    tr->pairs[index] = (bpe_pair){left, right, 0, NULL, 0, 0, 0};
    if (pair_map_put(&tr->pair_index, key, index) != DT_OK) return -1;
    return index;
}

/* count += delta for pair (left, right); a positive delta also records where it occurs. */
static dt_status pair_add(bpe_trainer *tr, int32_t left, int32_t right, int64_t delta, int32_t position,
                          int track_touched) {
    int64_t index = pair_get(tr, left, right);
    if (index < 0) return dt_errorf("out of memory in the BPE pair table");
    bpe_pair *pair = &tr->pairs[index];
    pair->count += delta;
    if (delta > 0) {
        int64_t capacity = pair->cap_positions;
        /* From 2: most of the millions of pairs a large corpus makes occur in a few places only. */
        if (!grow_from((void **)&pair->positions, &capacity, (int64_t)pair->n_positions + 1, sizeof *pair->positions,
                       2) ||
            capacity > INT32_MAX)
            return dt_errorf("out of memory in the BPE position lists");
        pair->cap_positions = (int32_t)capacity;
        pair->positions[pair->n_positions++] = position;
    }
    if (track_touched && !pair->touched) {
        if (!grow((void **)&tr->touched, &tr->cap_touched, tr->n_touched + 1, sizeof *tr->touched))
            return dt_errorf("out of memory in the BPE trainer");
        pair->touched = 1;
        tr->touched[tr->n_touched++] = (int32_t)index;
    }
    return DT_OK;
}

static int compare_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The chunk holding symbol i: the last w with word_start[w] <= i. */
static int32_t word_of(const bpe_trainer *tr, int32_t i) {
    int32_t low = 0, high = tr->n_words - 1;
    while (low < high) {
        int32_t mid = low + (high - low + 1) / 2;
        if (tr->word_start[mid] <= i)
            low = mid;
        else
            high = mid - 1;
    }
    return low;
}

/* The live symbol after i (before end), or -1. */
static int32_t next_symbol(const bpe_trainer *tr, int32_t i, int32_t end) {
    for (int32_t j = i + 1; j < end; j++)
        if (tr->symbol[j] >= 0) return j;
    return -1;
}

/* The live symbol before i (from start), or -1. */
static int32_t prev_symbol(const bpe_trainer *tr, int32_t i, int32_t start) {
    for (int32_t j = i - 1; j >= start; j--)
        if (tr->symbol[j] >= 0) return j;
    return -1;
}

/* Replaces every occurrence of pair `index` by token new_id, left to right
 * within each chunk, updating the counts of the neighbouring pairs. */
static dt_status bpe_merge(bpe_trainer *tr, int64_t index, int32_t new_id) {
    int32_t left = tr->pairs[index].left, right = tr->pairs[index].right;
    int32_t *positions = tr->pairs[index].positions;
    int32_t n_positions = tr->pairs[index].n_positions;
    /* Detach the list: pair_add may grow tr->pairs (moving it), and the merged pair gets no new positions. */
    tr->pairs[index].positions = NULL;
    tr->pairs[index].n_positions = tr->pairs[index].cap_positions = 0;
    /* Increasing order = left to right inside a chunk, which decides overlapping cases like "aaa". */
    qsort(positions, (size_t)n_positions, sizeof *positions, compare_i32);
    dt_status status = DT_OK;
    for (int32_t k = 0; k < n_positions && status == DT_OK; k++) {
        int32_t i = positions[k];
        if (k > 0 && positions[k - 1] == i) continue;
        if (tr->symbol[i] != left) continue; /* stale */
        const int32_t w = word_of(tr, i), start = tr->word_start[w], end = tr->word_start[w + 1];
        int32_t j = next_symbol(tr, i, end);
        if (j < 0 || tr->symbol[j] != right) continue; /* stale */
        int64_t weight = tr->word_count[w];
        int32_t before = prev_symbol(tr, i, start), after = next_symbol(tr, j, end);
        if (before >= 0) {
            status = pair_add(tr, tr->symbol[before], left, -weight, 0, 0);
            if (status == DT_OK) status = pair_add(tr, tr->symbol[before], new_id, weight, before, 1);
        }
        if (after >= 0 && status == DT_OK) {
            status = pair_add(tr, right, tr->symbol[after], -weight, 0, 0);
            if (status == DT_OK) status = pair_add(tr, new_id, tr->symbol[after], weight, i, 1);
        }
        tr->pairs[index].count -= weight;
        tr->symbol[i] = new_id;
        tr->symbol[j] = -1;
    }
    free(positions);
    tr->pairs[index].count = 0; /* every occurrence is gone */
    /* Counts of older pairs only ever decrease (the heap re-files them lazily);
     * the new pairs all contain new_id and enter the heap here, once. */
    for (int64_t t = 0; t < tr->n_touched && status == DT_OK; t++) {
        bpe_pair *pair = &tr->pairs[tr->touched[t]];
        pair->touched = 0;
        if (pair->count > 0) status = heap_push(tr, pair->count, pair->left, pair->right);
    }
    tr->n_touched = 0;
    return status;
}

dt_status data_tokenizer_train_bpe(data_tokenizer *tok, const uint8_t *text, size_t n_bytes, int64_t vocab_size) {
    memset(tok, 0, sizeof *tok);
    if (vocab_size < BYTE_VOCAB || vocab_size > BPE_MAX_VOCAB)
        return dt_errorf("BPE vocab_size %lld is out of range [256, %lld]", (long long)vocab_size,
                         (long long)BPE_MAX_VOCAB);
    if (n_bytes > 0 && !text) return dt_errorf("BPE training text is NULL");
    int64_t target_merges = vocab_size - BYTE_VOCAB;

    bpe_trainer tr = {0};
    word_table words = {0};
    int32_t(*merges)[2] = malloc((size_t)(target_merges > 0 ? target_merges : 1) * sizeof *merges);
    dt_status status = DT_OK;
    if (!merges) {
        status = dt_errorf("out of memory for BPE training");
        goto done;
    }

    /* 1. Distinct chunks and their counts. */
    for (size_t offset = 0; offset < n_bytes && status == DT_OK;) {
        size_t length = chunk_length(text + offset, n_bytes - offset);
        status = word_table_add(&words, text, offset, length);
        offset += length;
    }
    if (status != DT_OK) goto done;
    /* The index is done with: free it before the symbol arrays take its place. */
    free(words.slots);
    words.slots = NULL;

    /* 2. One linked list of symbols (bytes, to begin with) per distinct chunk. */
    int64_t n_symbols = 0;
    for (size_t w = 0; w < words.n_words; w++)
        n_symbols += words.length[w];
    if (n_symbols >= INT32_MAX) {
        status = dt_errorf("BPE training text has too many distinct words (%lld bytes of them)", (long long)n_symbols);
        goto done;
    }
    size_t symbols_size = (size_t)(n_symbols > 0 ? n_symbols : 1);
    tr.symbol = malloc(symbols_size * sizeof *tr.symbol);
    tr.word_start = malloc((words.n_words + 1) * sizeof *tr.word_start);
    tr.n_words = (int32_t)words.n_words;
    /* The counts move over as they are (the trainer frees them). */
    tr.word_count = words.count;
    words.count = NULL;
    if (!tr.symbol || !tr.word_start ||
        pair_map_init(&tr.pair_index, 1024) != DT_OK) { /* grows with the pairs: far fewer than symbols */
        status = dt_errorf("out of memory for BPE training on %lld distinct bytes", (long long)n_symbols);
        goto done;
    }
    /* Two passes, so that every position list is allocated at its exact size
     * (grown by doubling they held up to twice the positions): the first
     * counts each pair's occurrences (weighted) and positions, the second fills. */
    int32_t cursor = 0;
    for (size_t w = 0; w < words.n_words && status == DT_OK; w++) {
        const int32_t length = words.length[w];
        const size_t offset = words.offset[w];
        tr.word_start[w] = cursor;
        for (int32_t k = 0; k < length && status == DT_OK; k++) {
            int32_t i = cursor + k;
            tr.symbol[i] = text[offset + (size_t)k];
            if (k == 0) continue;
            int64_t index = pair_get(&tr, tr.symbol[i - 1], tr.symbol[i]);
            if (index < 0) {
                status = dt_errorf("out of memory in the BPE pair table");
                break;
            }
            tr.pairs[index].count += tr.word_count[w];
            tr.pairs[index].cap_positions++; /* a count until the lists are allocated */
        }
        cursor += length;
    }
    tr.word_start[words.n_words] = cursor;
    word_table_free(&words);
    for (int64_t p = 0; p < tr.n_pairs && status == DT_OK; p++) {
        tr.pairs[p].positions = malloc((size_t)tr.pairs[p].cap_positions * sizeof *tr.pairs[p].positions);
        if (!tr.pairs[p].positions) status = dt_errorf("out of memory in the BPE position lists");
    }
    for (int32_t w = 0; w < tr.n_words && status == DT_OK; w++)
        for (int32_t i = tr.word_start[w] + 1; i < tr.word_start[w + 1]; i++) {
            bpe_pair *pair = &tr.pairs[pair_map_find(&tr.pair_index, pair_key(tr.symbol[i - 1], tr.symbol[i]))];
            pair->positions[pair->n_positions++] = i - 1;
        }
    if (status != DT_OK) goto done;

    /* 3. Every pair into the max-heap, then merge until the vocabulary is full. */
    for (int64_t p = 0; p < tr.n_pairs && status == DT_OK; p++)
        status = heap_push(&tr, tr.pairs[p].count, tr.pairs[p].left, tr.pairs[p].right);
    int64_t n_merges = 0;
    heap_entry top;
    while (status == DT_OK && n_merges < target_merges && heap_pop(&tr, &top)) {
        int64_t index = pair_map_find(&tr.pair_index, pair_key(top.left, top.right));
        int64_t count = tr.pairs[index].count;
        if (count != top.count) { /* stale: the pair lost occurrences since it was filed */
            if (count > 0) status = heap_push(&tr, count, top.left, top.right);
            continue;
        }
        merges[n_merges][0] = top.left;
        merges[n_merges][1] = top.right;
        status = bpe_merge(&tr, index, (int32_t)(BYTE_VOCAB + n_merges));
        n_merges++;
    }
    if (status == DT_OK) status = tokenizer_from_merges(tok, TOKENIZER_BPE, (const int32_t(*)[2])merges, n_merges);

done:
    word_table_free(&words);
    free(merges);
    bpe_trainer_free(&tr);
    return status;
}

/* ---------------------------------------------------------------- encoding */

/* Applies the merges to one chunk: ids [length] in, returns the token count. */
static int32_t bpe_encode_chunk(const data_tokenizer *tok, const uint8_t *chunk, int32_t length, int32_t *ids) {
    const bpe_internal *bpe = tok->internal;
    int32_t n = length;
    for (int32_t i = 0; i < n; i++)
        ids[i] = chunk[i];
    while (n > 1) {
        int32_t best = INT32_MAX;
        for (int32_t i = 0; i + 1 < n; i++) {
            int32_t rank = pair_map_find(&bpe->rank, pair_key(ids[i], ids[i + 1]));
            if (rank >= 0 && rank < best) best = rank;
        }
        if (best == INT32_MAX) break;
        int32_t left = tok->merges[best][0], right = tok->merges[best][1];
        int32_t kept = 0;
        for (int32_t i = 0; i < n;) {
            if (i + 1 < n && ids[i] == left && ids[i + 1] == right) {
                ids[kept++] = BYTE_VOCAB + best;
                i += 2;
            } else {
                ids[kept++] = ids[i++];
            }
        }
        n = kept;
    }
    return n;
}

/* Remembers where the tokens of each distinct chunk already sit in the output. */
typedef struct {
    uint64_t hash;
    size_t text_offset;
    int64_t token_offset; /* -1 marks a free slot */
    int32_t length, n_tokens;
} encode_cache_entry;

dt_status data_tokenizer_encode(const data_tokenizer *tok, const uint8_t *text, size_t n_bytes, int32_t **tokens,
                                int64_t *n_tokens) {
    *tokens = NULL;
    *n_tokens = 0;
    if (!tok || !tok->token_length) return dt_errorf("encode: tokenizer is not initialised");
    if (n_bytes > 0 && !text) return dt_errorf("encode: text is NULL");
    if (tok->kind == TOKENIZER_EXTERNAL)
        return dt_errorf("encode: tokenizer 'external' holds no vocabulary to encode with");
    int32_t *out = malloc((n_bytes > 0 ? n_bytes : 1) * sizeof *out); /* a token covers at least one byte */
    if (!out) return dt_errorf("out of memory encoding %zu bytes", n_bytes);
    if (tok->kind == TOKENIZER_BYTE) {
        for (size_t i = 0; i < n_bytes; i++)
            out[i] = text[i];
        *tokens = out;
        *n_tokens = (int64_t)n_bytes;
        return DT_OK;
    }
    if (!tok->internal) {
        free(out);
        return dt_errorf("encode: BPE tokenizer has no rank table");
    }

    size_t capacity = 1024;
    encode_cache_entry *cache = malloc(capacity * sizeof *cache);
    if (!cache) {
        free(out);
        return dt_errorf("out of memory for the encode cache");
    }
    for (size_t s = 0; s < capacity; s++)
        cache[s].token_offset = -1;
    size_t cached = 0;
    int64_t written = 0;
    for (size_t offset = 0; offset < n_bytes;) {
        int32_t length = (int32_t)chunk_length(text + offset, n_bytes - offset);
        uint64_t hash = hash_bytes(text + offset, (size_t)length);
        size_t mask = capacity - 1, slot = hash & mask;
        for (; cache[slot].token_offset >= 0; slot = (slot + 1) & mask) {
            const encode_cache_entry *entry = &cache[slot];
            if (entry->hash == hash && entry->length == length &&
                memcmp(text + entry->text_offset, text + offset, (size_t)length) == 0)
                break;
        }
        if (cache[slot].token_offset >= 0) { /* seen before: copy its tokens */
            memcpy(out + written, out + cache[slot].token_offset, (size_t)cache[slot].n_tokens * sizeof *out);
            written += cache[slot].n_tokens;
        } else {
            int32_t count = bpe_encode_chunk(tok, text + offset, length, out + written);
            if (cached < ENCODE_CACHE_MAX) {
                cache[slot] = (encode_cache_entry){hash, offset, written, length, count};
                cached++;
                if (2 * cached > capacity) { /* rehash into a table twice the size */
                    encode_cache_entry *bigger = malloc(2 * capacity * sizeof *bigger);
                    if (!bigger) {
                        free(cache);
                        free(out);
                        return dt_errorf("out of memory for the encode cache");
                    }
                    for (size_t s = 0; s < 2 * capacity; s++)
                        bigger[s].token_offset = -1;
                    size_t big_mask = 2 * capacity - 1;
                    for (size_t s = 0; s < capacity; s++) {
                        if (cache[s].token_offset < 0) continue;
                        size_t b = cache[s].hash & big_mask;
                        while (bigger[b].token_offset >= 0)
                            b = (b + 1) & big_mask;
                        bigger[b] = cache[s];
                    }
                    free(cache);
                    cache = bigger;
                    capacity *= 2;
                }
            }
            written += count;
        }
        offset += (size_t)length;
    }
    free(cache);
    int32_t *shrunk = realloc(out, (size_t)(written > 0 ? written : 1) * sizeof *out);
    *tokens = shrunk ? shrunk : out;
    *n_tokens = written;
    return DT_OK;
}

dt_status data_tokenizer_decode(const data_tokenizer *tok, const int32_t *tokens, int64_t n_tokens, uint8_t **text,
                                size_t *n_bytes) {
    *text = NULL;
    *n_bytes = 0;
    if (!tok || !tok->token_length) return dt_errorf("decode: tokenizer is not initialised");
    if (n_tokens < 0 || (n_tokens > 0 && !tokens)) return dt_errorf("decode: bad token array");
    if (tok->kind == TOKENIZER_EXTERNAL)
        return dt_errorf(
            "decode: the tokens came from another tool (tokenizer 'external'); decode them with its tokenizer");
    size_t total = 0;
    for (int64_t i = 0; i < n_tokens; i++) {
        if (tokens[i] < 0 || tokens[i] >= tok->vocab_size)
            return dt_errorf("decode: token %d at position %lld is outside the vocabulary [0, %lld)", tokens[i],
                             (long long)i, (long long)tok->vocab_size);
        total += (size_t)tok->token_length[tokens[i]];
    }
    uint8_t *out = malloc(total + 1);
    if (!out) return dt_errorf("out of memory decoding %lld tokens", (long long)n_tokens);
    size_t cursor = 0;
    for (int64_t i = 0; i < n_tokens; i++) {
        memcpy(out + cursor, tok->token_bytes[tokens[i]], (size_t)tok->token_length[tokens[i]]);
        cursor += (size_t)tok->token_length[tokens[i]];
    }
    out[total] = '\0';
    *text = out;
    *n_bytes = total;
    return DT_OK;
}

/* ------------------------------------------------------------ HDF5 storage */

dt_status data_tokenizer_write_h5(const data_tokenizer *tok, hid_t file) {
    if (!tok || !tok->token_length) return dt_errorf("write tokenizer: tokenizer is not initialised");
    int is_bpe = tok->kind == TOKENIZER_BPE;
    const char *kind = is_bpe ? "bpe" : tok->kind == TOKENIZER_EXTERNAL ? "external" : "byte";
    if (h5_write_attr_string(file, "tokenizer", kind) != DT_OK ||
        h5_write_attr_int(file, "vocab_size", tok->vocab_size) != DT_OK)
        return DT_ERR;
    if (!is_bpe) return DT_OK;
    static const int32_t no_merges[1][2] = {{0, 0}}; /* HDF5 wants a buffer even for 0 rows */
    int64_t shape[2] = {tok->vocab_size - BYTE_VOCAB, 2};
    const int32_t *data = tok->merges ? &tok->merges[0][0] : &no_merges[0][0];
    return h5_write_i32(file, "/tokenizer/merges", data, 2, shape);
}

dt_status data_tokenizer_read_h5(data_tokenizer *tok, hid_t file, const char *path_for_errors) {
    memset(tok, 0, sizeof *tok);
    const char *path = path_for_errors ? path_for_errors : "token file";
    char kind[64];
    int64_t vocab_size = 0;
    if (h5_read_attr_string(file, "tokenizer", kind, sizeof kind) != DT_OK ||
        h5_read_attr_int(file, "vocab_size", &vocab_size) != DT_OK)
        return dt_error_context("%s", path);
    if (strcmp(kind, "external") == 0)
        return data_tokenizer_external(tok, vocab_size) == DT_OK ? DT_OK : dt_error_context("%s", path);
    if (strcmp(kind, "byte") == 0) {
        if (vocab_size != BYTE_VOCAB)
            return dt_errorf("%s: tokenizer 'byte' needs vocab_size 256, file says %lld", path, (long long)vocab_size);
        return data_tokenizer_byte(tok);
    }
    if (strcmp(kind, "bpe") != 0)
        return dt_errorf("%s: unknown tokenizer '%s' (expected byte, bpe or external)", path, kind);
    if (vocab_size < BYTE_VOCAB || vocab_size > BPE_MAX_VOCAB)
        return dt_errorf("%s: vocab_size %lld is out of range [256, %lld]", path, (long long)vocab_size,
                         (long long)BPE_MAX_VOCAB);
    int ndim = 0;
    int64_t shape[4] = {0};
    if (h5_dataset_shape(file, "/tokenizer/merges", &ndim, shape) != DT_OK) return dt_error_context("%s", path);
    if (ndim != 2 || shape[1] != 2 || shape[0] != vocab_size - BYTE_VOCAB)
        return dt_errorf("%s: /tokenizer/merges must be [%lld, 2] for vocab_size %lld", path,
                         (long long)(vocab_size - BYTE_VOCAB), (long long)vocab_size);
    int64_t n_merges = shape[0];
    int32_t(*merges)[2] = malloc((size_t)(n_merges > 0 ? n_merges : 1) * sizeof *merges);
    if (!merges) return dt_errorf("%s: out of memory for %lld merges", path, (long long)n_merges);
    dt_status status = h5_read_i32(file, "/tokenizer/merges", &merges[0][0], 2, shape);
    if (status == DT_OK) status = tokenizer_from_merges(tok, TOKENIZER_BPE, (const int32_t(*)[2])merges, n_merges);
    free(merges);
    if (status != DT_OK) return dt_error_context("%s: /tokenizer/merges", path);
    return DT_OK;
}
