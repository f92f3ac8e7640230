/* A whole Llama layer in one call, on a residual stream kept in fp32, kvgate's own arithmetic
   throughout (the "native" arithmetic of llama_layer.py):

     h    = rms_norm(x) * attn_norm          (squares summed in 16 lanes + kquant's tree; one 1/sqrt)
     qkv  = h @ Wqkv.T (+ bias)              (q8i.h: int8 activations, the GGUF blocks repacked at load)
     q, k = RoPE over the first rotary_dim of each head: x * cos + swap(x) * signed_sin
     K, V of each row -> the pool, rounded to bf16, at the row's slot
     a    = paged attention of q over the pool (paged_attention.h: fixed key tiles from key 0)
     x   += a @ Wo.T (+ bias)
     h    = rms_norm(x) * mlp_norm
     g, u = h @ Wgate_up.T;  x += (silu(g) * u) @ Wdown.T

   Every step computes a row from that row alone (and the keys it sees), so a prefill, a split
   prefill, an append and a decode step in any batch give the same bits for the same token. All
   rows' K/V are written before any row attends, so a prefill's rows see each other causally. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "paged_attention.h"
#include "q8i.h"

#define MAX_PARTS 4

typedef struct { const uint8_t *packed; int type, rows; } matrix_part;  /* rows of one GGUF type, q8i.h's layout */
typedef struct { matrix_part parts[MAX_PARTS]; int count, cols; } matrix;  /* parts stacked by rows */

typedef struct {
    int hidden, heads, kv_heads, head_dim, rotary_dim, intermediate;
    float eps, scale;
    const float *attn_norm, *mlp_norm;  /* fp32 [hidden] */
    const float *qkv_bias, *o_bias;     /* fp32, or NULL */
    matrix qkv, o, gate_up, down;
    uint16_t *k_pool, *v_pool;          /* this layer's bf16 [slots][kv_heads][head_dim] */
} layer_spec;

typedef struct {  /* what one call's rows are: positions' tables, slots, who sees what */
    int rows, width, threads;
    const float *cos, *sin;      /* [rows][rotary_dim]; sin signed: [-sin, +sin] */
    const int64_t *new_slots;    /* [rows]: where each row's K/V goes */
    const int64_t *tables;       /* [seqs][width]: slot of key j of a sequence */
    const int32_t *row_seq, *row_keys;  /* [rows]: its sequence; it sees keys 0..row_keys-1 */
} step_rows;

const char *llama_layer_variant(void) { return VARIANT; }

/* out[r] = x[r] * (1 / sqrt(mean(x[r]^2) + eps)) * w, each row alone; cols a multiple of 16 */
static void rms_norm_rows(const float *x, const float *w, float *out, int rows, int cols, float eps) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * cols;
        v16 acc = v_zero();
        for (int k = 0; k < cols; k += 16) {
            v16 xv = v_load(xr + k);
            acc = v_fma(xv, xv, acc);
        }
        v16 scale = v_set1(1.0f / sqrtf(v_sum(acc) / (float)cols + eps));
        for (int k = 0; k < cols; k += 16) v_store(out + (size_t)r * cols + k, v_mul(v_mul(v_load(xr + k), scale), v_load(w + k)));
    }
}

/* x [rows][cols] quantized for q8i, threads over rows where there are many; NULL without memory */
static q8i_x *quantized(const float *x, int rows, int cols, int threads) {
    int blocks = cols / 32;
    q8i_x *xq = malloc(sizeof(q8i_x) * (size_t)rows * blocks);
    if (!xq) return NULL;
#pragma omp parallel for schedule(static) num_threads(threads) if (rows > 16)
    for (int r = 0; r < rows; r++) q8i_quantize_row(x + (size_t)r * cols, cols, xq + (size_t)r * blocks);
    return xq;
}

/* y [rows][m->rows summed] = x @ W.T, the parts side by side; 0, or -1 without memory */
static int matmul(const float *x, const matrix *m, float *y, int rows, int threads) {
    int ld = 0, first = 0;
    q8i_x *xq = quantized(x, rows, m->cols, threads);
    if (!xq) return -1;
    for (int p = 0; p < m->count; p++) ld += m->parts[p].rows;
    for (int p = 0; p < m->count; p++) {
        const matrix_part *part = &m->parts[p];
        q8i_matmul_into(xq, part->packed, y + first, rows, part->rows, m->cols, ld, part->type, threads);
        first += part->rows;
    }
    free(xq);
    return 0;
}

static void add_bias(float *y, const float *bias, int rows, int cols) {
    if (!bias) return;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) y[(size_t)r * cols + c] += bias[c];
}

/* RoPE of `count` heads at head (dim floats apart), first `rotary` dims; the rest pass through */
static void rotate_heads(float *head, int count, int dim, int rotary, const float *cos, const float *sin) {
    float tmp[512];
    int half = rotary / 2;
    for (int h = 0; h < count; h++, head += dim) {
        for (int i = 0; i < rotary; i++) {
            float swapped = head[i < half ? i + half : i - half];
            float a = head[i] * cos[i], b = swapped * sin[i];
            tmp[i] = a + b;
        }
        memcpy(head, tmp, sizeof(float) * rotary);
    }
}

/* q [rows][heads][dim] rotated out of qkv; each row's rotated K and its V -> the pool as bf16 */
static void split_qkv(const layer_spec *L, const step_rows *s, float *qkv, float *q) {
    int qw = L->heads * L->head_dim, kw = L->kv_heads * L->head_dim, width = qw + 2 * kw;
    for (int r = 0; r < s->rows; r++) {
        float *row = qkv + (size_t)r * width;
        const float *cos = s->cos + (size_t)r * L->rotary_dim, *sin = s->sin + (size_t)r * L->rotary_dim;
        rotate_heads(row, L->heads + L->kv_heads, L->head_dim, L->rotary_dim, cos, sin);
        memcpy(q + (size_t)r * qw, row, sizeof(float) * qw);
        uint16_t *k = L->k_pool + s->new_slots[r] * kw, *v = L->v_pool + s->new_slots[r] * kw;
        for (int i = 0; i < kw; i++) {
            k[i] = f32_to_bf16(row[qw + i]);
            v[i] = f32_to_bf16(row[qw + kw + i]);
        }
    }
}

static int attention_block(const layer_spec *L, const step_rows *s, float *x, float *h, float *qkv, float *q,
                           float *a) {
    int rows = s->rows, qw = L->heads * L->head_dim, width = qw + 2 * L->kv_heads * L->head_dim;
    rms_norm_rows(x, L->attn_norm, h, rows, L->hidden, L->eps);
    if (matmul(h, &L->qkv, qkv, rows, s->threads)) return -1;
    add_bias(qkv, L->qkv_bias, rows, width);
    split_qkv(L, s, qkv, q);
    if (paged_attention(q, L->k_pool, L->v_pool, s->tables, s->width, s->row_seq, s->row_keys, a, rows, L->heads,
                        L->kv_heads, L->head_dim, L->scale, s->threads)) return -1;
    if (matmul(a, &L->o, h, rows, s->threads)) return -1;
    add_bias(h, L->o_bias, rows, L->hidden);
    for (size_t i = 0; i < (size_t)rows * L->hidden; i++) x[i] += h[i];
    return 0;
}

static int mlp_block(const layer_spec *L, const step_rows *s, float *x, float *h, float *gu, float *act) {
    int rows = s->rows, inter = L->intermediate;
    rms_norm_rows(x, L->mlp_norm, h, rows, L->hidden, L->eps);
    if (matmul(h, &L->gate_up, gu, rows, s->threads)) return -1;
    for (int r = 0; r < rows; r++) {
        const float *g = gu + (size_t)r * 2 * inter, *u = g + inter;
        for (int i = 0; i < inter; i++) act[(size_t)r * inter + i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
    if (matmul(act, &L->down, h, rows, s->threads)) return -1;
    for (size_t i = 0; i < (size_t)rows * L->hidden; i++) x[i] += h[i];
    return 0;
}

/* layers[0..count) over x fp32 [rows][hidden] in place; 0, or -1 where memory ran out */
int llama_layers(const layer_spec *layers, int count, float *x, const step_rows *s) {
    const layer_spec *L = layers;
    size_t rows = s->rows, qw = (size_t)L->heads * L->head_dim, width = qw + 2 * (size_t)L->kv_heads * L->head_dim;
    size_t floats = rows * (L->hidden + width + 2 * qw + 3 * (size_t)L->intermediate);
    float *buffer = malloc(sizeof(float) * floats);
    if (!buffer) return -1;
    float *h = buffer, *qkv = h + rows * L->hidden, *q = qkv + rows * width, *a = q + rows * qw;
    float *gu = a + rows * qw, *act = gu + rows * 2 * L->intermediate;
    int failed = 0;
    for (int i = 0; i < count && !failed; i++)
        failed = attention_block(&layers[i], s, x, h, qkv, q, a) || mlp_block(&layers[i], s, x, h, gu, act);
    free(buffer);
    return failed ? -1 : 0;
}

/* the final norm: out = rms_norm(x) * w, rows of cols fp32 */
void llama_final_norm(const float *x, const float *w, float *out, int rows, int cols, float eps) {
    rms_norm_rows(x, w, out, rows, cols, eps);
}

/* q8i (q8i.h) for the loader and the tests: the bytes the packed copy of an N x K matrix of `type`
   takes, the repacking, the rows read back, and the matmul alone (x fp32 [M][K], y fp32 [M][N]; 0, or
   -1 without memory) */
size_t q8i_bytes(int type, int N, int K) { return q8i_packed_bytes(type, N, K); }

void q8i_repack(const uint8_t *raw, uint8_t *out, int N, int K, int type) { q8i_repack_into(raw, out, N, K, type); }

/* rows ids[0..count) of a packed N x K matrix, dequantized as ggml does, into out fp32 [count][K] */
void q8i_rows(const uint8_t *packed, int type, int K, const int64_t *ids, int count, float *out) {
    for (int i = 0; i < count; i++) q8i_dequantize_row(type, packed, K, (int)ids[i], out + (size_t)i * K);
}

int q8i_matmul(const float *x, const uint8_t *packed, float *y, int M, int N, int K, int type, int threads) {
    q8i_x *xq = quantized(x, M, K, threads);
    if (!xq) return -1;
    q8i_matmul_into(xq, packed, y, M, N, K, N, type, threads);
    free(xq);
    return 0;
}
