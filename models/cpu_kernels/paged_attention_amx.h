/* The "amx" variant of kvgate's paged attention: the products run on AMX tiles in bf16, the softmax
   in fp32 as in paged_attention.h. Its own arithmetic (named "amx" in the fingerprint, never mixed
   with the fp32 variants' state), fixed like theirs, so a row's bits depend only on its q row and the
   keys and values it sees, whatever the batch, the other rows, the table's width or the threads:

     q is rounded to bf16 (to nearest even, as torch); keys go in tiles of KEY_TILE = 64 from key 0;
     s_j  = TDPBF16PS(q, k_j) * scale: one tile product per 32 dims, accumulated from 0 in dim
            order (the hardware's fixed sum; dims past a multiple of 32 padded with 0)
     tile by tile, per query row: m, M', c as in paged_attention.h, but with amx_exp below;
       p_j = bf16(exp(s_j - M')), 0 for the keys the row does not see
       t   = v_sum((p[0:16] + p[16:32]) + (p[32:48] + p[48:64])) of those rounded p
       l   = l * c + t
       T   = TDPBF16PS(p[0:32], v[0:32]) then += TDPBF16PS(p[32:64], v[32:64]), from 0
       acc = fma(acc, c, T)
     out = acc * (1 / l)

   A tile product reads 16 rows of q or p; each output row depends only on its own row, so rows
   that share a tile never see each other. A row that sees none of a tile's keys skips it, and
   keys past a tile's end are zeros, so garbage in the pool past a sequence's keys is never read.
   Work is split as in paged_attention.h: (run of up to AMX_ROW_BLOCK rows, kv head) pairs, each
   tile's keys and values packed once for all the run's query rows, 16 rows to a tile product. */
#ifndef KVGATE_PAGED_ATTENTION_AMX_H
#define KVGATE_PAGED_ATTENTION_AMX_H
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_ROWS 16
#define AMX_ROW_BLOCK 32 /* consecutive rows of one sequence whose query rows share each packed tile */
#define AMX_GROUP_KEYS 16 /* keys of one score tile */
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

/* 0 where the OS lets this process use AMX tiles (asked once; the grant is the whole process's) */
static int amx_permitted(void) { return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) ? -1 : 0; }

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tile_config;

/* every thread that runs tile products loads this first: 8 tiles of 16 rows of 64 bytes */
static void amx_configure(void) {
    amx_tile_config config;
    memset(&config, 0, sizeof config);
    config.palette = 1;
    for (int t = 0; t < 8; t++) {
        config.colsb[t] = 64;
        config.rows[t] = 16;
    }
    _tile_loadconfig(&config);
}

/* e^x for x <= 0, to well within p's rounding to bf16: x below -87 gives 0 (so -inf gives 0);
   else n = round-to-even(t), t = max(x, -87) * log2(e), f = t - n (exact), and
   e^x = 2^n * (1 + f(ln2 + f(ln2^2/2 + f(ln2^3/6 + f ln2^4/24)))), Taylor's degree 4 by fma
   (at most 5e-5 from 2^f over |f| <= 1/2; p's bf16 rounding is up to 2e-3) */
static inline __m512 amx_exp(__m512 x) {
    __m512 t = _mm512_mul_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(ATT_LOG2E));
    __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 f = _mm512_sub_ps(t, n);
    __m512 y = _mm512_fmadd_ps(f, _mm512_set1_ps(9.6181291e-3f), _mm512_set1_ps(5.5504109e-2f));
    y = _mm512_fmadd_ps(f, y, _mm512_set1_ps(2.4022651e-1f));
    y = _mm512_fmadd_ps(f, y, _mm512_set1_ps(6.9314718e-1f));
    y = _mm512_fmadd_ps(f, y, _mm512_set1_ps(1.0f));
    __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
    return _mm512_maskz_scalef_ps(live, y, n);
}

static inline float amx_exp1(float x) { return _mm512_cvtss_f32(amx_exp(_mm512_set1_ps(x))); }

static inline __m256i bf16_round16(__m512 x) { /* 16 fp32 -> bf16 bits, to nearest even */
    return (__m256i)_mm512_cvtneps_pbh(x);
}

static inline __m512 bf16_widen16(__m256i bits) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

/* 16x16 dwords: r[i] lane j -> r[j] lane i */
static inline void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++) {
            t[8 * i + k] = _mm512_shuffle_i32x4(r[8 * i + k], r[8 * i + 4 + k], 0x88);
            t[8 * i + 4 + k] = _mm512_shuffle_i32x4(r[8 * i + k], r[8 * i + 4 + k], 0xDD);
        }
    for (int k = 0; k < 8; k++) {
        r[k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0x88);
        r[8 + k] = _mm512_shuffle_i32x4(t[k], t[8 + k], 0xDD);
    }
}

/* what one thread works in */
typedef struct {
    int dim, padded;   /* padded: dim rounded up to 32 */
    uint16_t *keys;    /* [KEY_TILE / 16 groups][padded / 32 chunks][16 dim pairs][16 keys][2]: B tiles of k */
    uint16_t *values;  /* [dim / 16 blocks][2 halves][16 key pairs][16 dims][2]: B tiles of v */
    uint16_t *q;       /* [queries rounded up to 16][padded]: A tiles of the run's q rows */
    uint16_t *p;       /* [16][KEY_TILE]: A tiles of one block's p */
    float *scores;     /* [16][KEY_TILE] */
    float *products;   /* [2][16][16] */
    float *acc;        /* [queries][dim] */
    float *max, *sum;  /* [queries] */
    int *seen;         /* [queries]: how many keys each sees */
} amx_scratch;

/* the next part of `bytes` at *offset within memory (NULL: only counted), 64-byte aligned */
static void *amx_carve(char *memory, size_t *offset, size_t bytes) {
    void *out = memory ? memory + *offset : NULL;
    *offset += (bytes + 63) / 64 * 64;
    return out;
}

/* lays the scratch out in memory (64-byte aligned) for up to `queries` query rows; returns the
   bytes it takes, which is all it does where memory is NULL */
static size_t amx_scratch_init(amx_scratch *s, char *memory, int dim, int queries) {
    size_t at = 0, rounded = (queries + AMX_ROWS - 1) / AMX_ROWS * AMX_ROWS;
    s->dim = dim;
    s->padded = (dim + 31) / 32 * 32;
    s->keys = amx_carve(memory, &at, 2 * (size_t)KEY_TILE * s->padded);
    s->values = amx_carve(memory, &at, 2 * (size_t)KEY_TILE * dim);
    s->q = amx_carve(memory, &at, 2 * rounded * s->padded);
    s->p = amx_carve(memory, &at, 2 * AMX_ROWS * KEY_TILE);
    s->scores = amx_carve(memory, &at, 4 * AMX_ROWS * KEY_TILE);
    s->products = amx_carve(memory, &at, 4 * 2 * AMX_ROWS * 16);
    s->acc = amx_carve(memory, &at, 4 * (size_t)queries * dim);
    s->max = amx_carve(memory, &at, 4 * (size_t)queries);
    s->sum = amx_carve(memory, &at, 4 * (size_t)queries);
    s->seen = amx_carve(memory, &at, 4 * (size_t)queries);
    return at;
}

/* 16 bf16 of a pool row (or zeros past the tile's keys) as the low halves of 16 dwords */
static inline __m512i amx_words(const uint16_t *row, int present) {
    return present ? _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)row)) : _mm512_setzero_si512();
}

/* the tile's count keys and values from the pool into the B layouts (keys and values past count: 0),
   asking meanwhile for the next tile's rows (its first `ahead` keys at slots + KEY_TILE): a decode
   step's keys come from memory, and only this hides the wait */
static void amx_pack_tile(amx_scratch *s, const uint16_t *k_pool, const uint16_t *v_pool, const int64_t *slots,
                          int count, int ahead, int kv_head, int kv_heads) {
    int dim = s->dim, chunks = s->padded / 32;
    const uint16_t *k_rows[KEY_TILE], *v_rows[KEY_TILE];
    for (int j = 0; j < KEY_TILE; j++) {
        size_t at = j < count ? ((size_t)slots[j] * kv_heads + kv_head) * dim : 0;
        k_rows[j] = k_pool + at;
        v_rows[j] = v_pool + at;
    }
    for (int g = 0; g < (count + AMX_GROUP_KEYS - 1) / AMX_GROUP_KEYS; g++) {  /* scores read no group past count */
        for (int j = 16 * g; j < 16 * (g + 1) && j < ahead; j++) {
            size_t later = ((size_t)slots[KEY_TILE + j] * kv_heads + kv_head) * dim;
            att_prefetch_row(k_pool + later, dim);
            att_prefetch_row(v_pool + later, dim);
        }
        for (int c = 0; c < chunks; c++) {
            __m512i r[16];  /* key n's dims 32c .. 32c + 31 as 16 dwords */
            for (int n = 0; n < 16; n++) {
                int key = g * 16 + n, d = 32 * c;
                if (key >= count) r[n] = _mm512_setzero_si512();
                else if (d + 32 <= dim) r[n] = _mm512_loadu_si512(k_rows[key] + d);
                else r[n] = _mm512_maskz_loadu_epi16((1u << (dim - d)) - 1, k_rows[key] + d);
            }
            transpose16(r);
            uint16_t *tile = s->keys + ((size_t)g * chunks + c) * 512;
            for (int pair = 0; pair < 16; pair++) _mm512_storeu_si512(tile + 32 * pair, r[pair]);
        }
    }
    for (int b = 0; b < dim / 16; b++)
        for (int half = 0; half < 2; half++) {
            uint16_t *tile = s->values + ((size_t)b * 2 + half) * 512;
            for (int pair = 0; pair < 16; pair++) {
                int key = half * 32 + 2 * pair;
                __m512i even = amx_words(v_rows[key] + 16 * b, key < count);
                __m512i odd = amx_words(v_rows[key + 1] + 16 * b, key + 1 < count);
                _mm512_storeu_si512(tile + 32 * pair, _mm512_or_si512(even, _mm512_slli_epi32(odd, 16)));
            }
        }
}

/* scores of the 16 q rows at q (row stride padded) against the tile's first groups * 16 keys, two
   groups at a time in tiles 0 and 7 so that one's products run while the other's wait */
static void amx_scores(amx_scratch *s, const uint16_t *q, int groups) {
    int chunks = s->padded / 32;
    for (int g = 0; g < groups; g += 2) {
        const uint16_t *keys = s->keys + (size_t)g * chunks * 512;
        _tile_zero(0);
        _tile_zero(7);
        for (int c = 0; c < chunks; c++) {
            _tile_loadd(1, q + 32 * c, s->padded * 2);
            _tile_loadd(2, keys + (size_t)c * 512, 64);
            _tile_dpbf16ps(0, 1, 2);
            if (g + 1 < groups) {
                _tile_loadd(5, keys + (size_t)(chunks + c) * 512, 64);
                _tile_dpbf16ps(7, 1, 5);
            }
        }
        _tile_stored(0, s->scores + 16 * g, KEY_TILE * 4);
        if (g + 1 < groups) _tile_stored(7, s->scores + 16 * (g + 1), KEY_TILE * 4);
    }
}

/* acc of the block's rows that see the tile (seen[i] > 0): fma(acc, c, T) for the 16 dims of
   products (T [16 rows][16]) from dim first */
static void amx_take_products(amx_scratch *s, const float *products, int block_first, int rows, const int *seen,
                              const float *c, int first) {
    for (int i = 0; i < rows; i++) {
        if (!seen[i]) continue;
        float *acc = s->acc + (size_t)(block_first + i) * s->dim + first;
        v_store(acc, v_fma(v_load(acc), v_set1(c[i]), v_load(products + 16 * i)));
    }
}

/* row i of the block: scores -> rounded p (bf16 into s->p, zeros past seen), returns c; updates max, sum */
static float amx_softmax_row(amx_scratch *s, int i, int query, int seen, float scale) {
    const float *scores = s->scores + i * KEY_TILE;
    v16 part[KEY_TILE / 16], best = v_set1(-INFINITY), factor = v_set1(scale);
    for (int c = 0; c < KEY_TILE / 16; c++) {
        __mmask16 visible = seen >= 16 * (c + 1) ? 0xffff : seen <= 16 * c ? 0 : (1u << (seen - 16 * c)) - 1;
        part[c] = _mm512_mask_mul_ps(v_set1(-INFINITY), visible, v_load(scores + 16 * c), factor);
        best = v_max(best, part[c]);
    }
    float tile_max = _mm512_reduce_max_ps(best), old = s->max[query];
    float new_max = tile_max > old ? tile_max : old;
    float c = old == -INFINITY ? 0.0f : amx_exp1(old - new_max);
    v16 shift = v_set1(new_max);
    for (int k = 0; k < KEY_TILE / 16; k++) {
        __m256i rounded = bf16_round16(amx_exp(v_sub(part[k], shift)));
        _mm256_storeu_si256((__m256i *)(s->p + i * KEY_TILE + 16 * k), rounded);
        part[k] = bf16_widen16(rounded);
    }
    float t = v_sum(v_add(v_add(part[0], part[1]), v_add(part[2], part[3])));
    s->sum[query] = s->sum[query] * c + t;
    s->max[query] = new_max;
    return c;
}

/* the block of rows first .. first + rows - 1 of the run's query rows over one tile */
static void amx_block(amx_scratch *s, int first, int rows, int tile_first, float scale) {
    int most = 0, dim = s->dim;
    int seen[AMX_ROWS];
    float c[AMX_ROWS];
    for (int i = 0; i < rows; i++) {
        int n = s->seen[first + i] - tile_first;
        seen[i] = n <= 0 ? 0 : n < KEY_TILE ? n : KEY_TILE;
        most = seen[i] > most ? seen[i] : most;
    }
    if (most == 0) return;
    amx_scores(s, s->q + (size_t)first * s->padded, (most + AMX_GROUP_KEYS - 1) / AMX_GROUP_KEYS);
    memset(s->p, 0, 2 * AMX_ROWS * KEY_TILE);
    for (int i = 0; i < rows; i++)
        if (seen[i]) c[i] = amx_softmax_row(s, i, first + i, seen[i], scale);
    _tile_loadd(3, s->p, KEY_TILE * 2);
    _tile_loadd(4, s->p + 32, KEY_TILE * 2);
    for (int b = 0; b < dim / 16; b += 2) {  /* two blocks of 16 dims at a time, in tiles 0 and 7 */
        const uint16_t *values = s->values + (size_t)b * 2 * 512;
        int pair = b + 1 < dim / 16;
        _tile_zero(0);
        _tile_zero(7);
        _tile_loadd(5, values, 64);
        _tile_loadd(6, values + 512, 64);
        if (pair) {
            _tile_loadd(1, values + 1024, 64);
            _tile_loadd(2, values + 1536, 64);
        }
        _tile_dpbf16ps(0, 3, 5);
        if (pair) _tile_dpbf16ps(7, 3, 1);
        _tile_dpbf16ps(0, 4, 6);
        if (pair) _tile_dpbf16ps(7, 4, 2);
        _tile_stored(0, s->products, 64);
        if (pair) _tile_stored(7, s->products + AMX_ROWS * 16, 64);
        amx_take_products(s, s->products, first, rows, seen, c, 16 * b);
        if (pair) amx_take_products(s, s->products + AMX_ROWS * 16, first, rows, seen, c, 16 * (b + 1));
    }
}

/* rows first .. first + count - 1 of one sequence, the query heads of kv_head: all in the scratch */
static void amx_rows(amx_scratch *s, const float *q, float *out, const uint16_t *k_pool, const uint16_t *v_pool,
                     const int64_t *slots, const int32_t *row_keys, int first, int count, int heads, int kv_heads,
                     int kv_head, float scale) {
    int group = heads / kv_heads, total = count * group, dim = s->dim, keys = 0;
    int rounded = (total + AMX_ROWS - 1) / AMX_ROWS * AMX_ROWS;
    memset(s->q, 0, 2 * (size_t)rounded * s->padded);
    for (int i = 0; i < total; i++) {
        int row = first + i / group, head = kv_head * group + i % group;
        const float *qi = q + ((size_t)row * heads + head) * dim;
        for (int d = 0; d < dim; d += 16)
            _mm256_storeu_si256((__m256i *)(s->q + (size_t)i * s->padded + d), bf16_round16(v_load(qi + d)));
        s->seen[i] = row_keys[row];
        keys = s->seen[i] > keys ? s->seen[i] : keys;
        s->max[i] = -INFINITY;
        s->sum[i] = 0.0f;
    }
    memset(s->acc, 0, 4 * (size_t)total * dim);
    for (int tile = 0; tile < keys; tile += KEY_TILE) {
        int n = keys - tile < KEY_TILE ? keys - tile : KEY_TILE;
        amx_pack_tile(s, k_pool, v_pool, slots + tile, n, keys - tile - n, kv_head, kv_heads);
        for (int b = 0; b < total; b += AMX_ROWS) amx_block(s, b, total - b < AMX_ROWS ? total - b : AMX_ROWS, tile, scale);
    }
    for (int i = 0; i < total; i++) {
        int row = first + i / group, head = kv_head * group + i % group;
        v16 inverse = v_set1(1.0f / s->sum[i]);
        for (int d = 0; d < dim; d += 16)
            v_store(out + ((size_t)row * heads + head) * dim + d, v_mul(v_load(s->acc + (size_t)i * dim + d), inverse));
    }
}

/* paged_attention (arguments and result as in paged_attention.h) in the amx arithmetic */
static int paged_attention_amx(const float *q, const uint16_t *k_pool, const uint16_t *v_pool, const int64_t *tables,
                               int width, const int32_t *row_seq, const int32_t *row_keys, float *out, int rows,
                               int heads, int kv_heads, int dim, float scale, int threads) {
    int *starts = malloc(sizeof(int) * ((size_t)rows + 1)), failed = 0;
    if (!starts) return -1;
    long work = (long)att_runs(row_seq, rows, starts, AMX_ROW_BLOCK) * kv_heads;
    int queries = AMX_ROW_BLOCK * (heads / kv_heads);
    amx_scratch sizing;
    size_t bytes = amx_scratch_init(&sizing, NULL, dim, queries);
#pragma omp parallel num_threads(threads) if (work > 1) reduction(| : failed)
    {
        char *memory = aligned_alloc(64, bytes);
        amx_scratch s;
        failed = memory == NULL;
        if (memory) {
            amx_scratch_init(&s, memory, dim, queries);
            amx_configure();
        }
#pragma omp for schedule(static)
        for (long w = 0; w < work; w++) {
            int run = (int)(w / kv_heads), first = starts[run];
            if (memory)
                amx_rows(&s, q, out, k_pool, v_pool, tables + (size_t)row_seq[first] * width, row_keys, first,
                         starts[run + 1] - first, heads, kv_heads, (int)(w % kv_heads), scale);
        }
        if (memory) _tile_release();
        free(memory);
    }
    free(starts);
    return failed ? -1 : 0;
}
#endif
