// llama-layer-kinds: llama.cpp's (ggml's) time for the recurrent and per-layer-embedding layer
// cores at real width, the peer of `joule bench layers` (benches/layer-kinds.sh runs both).
// Built by benches/layer-kinds.sh against the llama.cpp tree scripts/fetch-llama-cpp.sh makes
// (de3ff81), the way scripts/llama-logits.cpp is.
//
// Each kind is the subgraph llama.cpp builds for one layer between the projections (which are
// the shared matmul kernels, measured elsewhere), with the same ops in the same order:
//   delta  Qwen3.5-4B's gated delta net (src/models/qwen35.cpp build_layer_attn_linear): beta
//          sigmoid, softplus gate, conv-state concat + ssm_conv + SiLU, the L2 norms of q and
//          k, GGML_OP_GATED_DELTA_NET (the fused op the CPU backend runs for decode and
//          prompts), and the copies of the new conv and delta states into the state buffers.
//   mamba  Nemotron-H's Mamba-2 mixer core (src/models/mamba-base.cpp build_mamba2_layer):
//          conv-state concat + ssm_conv + bias + SiLU, dt bias, GGML_OP_SSM_SCAN, the state
//          copies, y + D·x. The z gate, group norm and out-projection are left out (Joule's
//          core leaves them out too).
//   ple    Gemma 4's per-layer inputs (src/models/gemma4.cpp build_inp_per_layer +
//          project_per_layer_inputs): get_rows from per_layer_token_embd, scale, the
//          per_layer_model_proj product, scale, RMS norm, add, scale, permute. The three
//          tensors are the real file's, mapped in place (`--gemma FILE`).
// Cases: decode1 (one sequence, one token), decode5 (five sequences, one token each) and
// prompt512 (one sequence, 512 tokens); the states carry over from one repetition to the next.
// Inputs are random (seeded); the state starts at zero.
//
// usage: llama-layer-kinds [--kinds delta,mamba,ple] [--cases decode1,decode5,prompt512]
//                          [--threads N] [--reps R] [--seconds S] [--gemma FILE]
// Each measurement repeats until both R repetitions and S seconds of wall time are done, after
// one warm-up. It prints one line per kind and case:
//   side=llama kind=delta case=decode1 threads=1 reps=R wall_ms=… cpu_ms=…
// (per repetition; cpu_ms is the process CPU time, all threads, per repetition)
#include "ggml.h"
#include "ggml-cpu.h"
#include "gguf.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double cpu_now() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double wall_now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static std::mt19937 rng(42);

static void fill(ggml_tensor * t, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    float * p = (float *) t->data;
    for (int64_t i = 0; i < ggml_nelements(t); i++) {
        p[i] = d(rng);
    }
}

static void zero(ggml_tensor * t) { memset(t->data, 0, ggml_nbytes(t)); }

struct Case {
    std::string name;
    int64_t n_seqs;
    int64_t n_tokens; // per sequence
};

// Qwen3.5-4B: 16 key heads, 32 value heads, 128 each, conv kernel 4.
static void build_delta(ggml_context * ctx, ggml_cgraph * gf, const Case & c) {
    const int64_t n_k = 16, n_v = 32, dk = 128, dv = 128, kc = 4;
    const int64_t conv_dim = 2 * n_k * dk + n_v * dv;
    const int64_t nt = c.n_tokens, ns = c.n_seqs;

    ggml_tensor * qkv_mixed = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, conv_dim, nt, ns);
    ggml_tensor * beta_raw  = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 1, n_v, nt, ns);
    ggml_tensor * alpha     = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, n_v, nt, ns);
    ggml_tensor * ssm_dt    = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n_v);
    ggml_tensor * ssm_a     = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n_v);
    ggml_tensor * conv_w    = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, kc, conv_dim);
    ggml_tensor * conv_all  = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, (kc - 1) * conv_dim, ns);
    ggml_tensor * ssm_all   = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, dv * dv * n_v, ns);
    fill(qkv_mixed, -1, 1);
    fill(beta_raw, -2, 2);
    fill(alpha, -2, 2);
    fill(ssm_dt, -1, 1);
    fill(ssm_a, -8, -0.5f);
    fill(conv_w, -0.5f, 0.5f);
    zero(conv_all);
    zero(ssm_all);

    ggml_tensor * beta = ggml_sigmoid(ctx, beta_raw);
    ggml_tensor * gate = ggml_mul(ctx, ggml_softplus(ctx, ggml_add(ctx, alpha, ssm_dt)), ssm_a);
    gate = ggml_reshape_4d(ctx, gate, 1, n_v, nt, ns);

    ggml_tensor * conv_states = ggml_reshape_3d(ctx, conv_all, kc - 1, conv_dim, ns);
    ggml_tensor * conv_input = ggml_concat(ctx, conv_states, ggml_transpose(ctx, qkv_mixed), 0);
    ggml_tensor * last = ggml_view_3d(ctx, conv_input, kc - 1, conv_dim, ns, conv_input->nb[1], conv_input->nb[2],
                                      ggml_row_size(conv_input->type, conv_input->ne[0] - (kc - 1)));
    ggml_build_forward_expand(gf, ggml_cpy(ctx, last, conv_all));

    ggml_tensor * state = ggml_reshape_4d(ctx, ssm_all, dv, dv, n_v, ns);
    ggml_tensor * conv_out = ggml_silu(ctx, ggml_ssm_conv(ctx, conv_input, conv_w));
    const size_t nb1 = ggml_row_size(GGML_TYPE_F32, conv_dim);
    ggml_tensor * q = ggml_view_4d(ctx, conv_out, dk, n_k, nt, ns, ggml_row_size(GGML_TYPE_F32, dk), nb1, nb1 * nt, 0);
    ggml_tensor * k = ggml_view_4d(ctx, conv_out, dk, n_k, nt, ns, ggml_row_size(GGML_TYPE_F32, dk), nb1, nb1 * nt,
                                   ggml_row_size(GGML_TYPE_F32, dk * n_k));
    ggml_tensor * v = ggml_view_4d(ctx, conv_out, dv, n_v, nt, ns, ggml_row_size(GGML_TYPE_F32, dv), nb1, nb1 * nt,
                                   ggml_row_size(GGML_TYPE_F32, 2 * dk * n_k));
    const float eps = 1e-6f; // Qwen3.5's f_norm_rms_eps
    q = ggml_scale(ctx, ggml_rms_norm(ctx, q, eps / dk), 1.0f / sqrtf((float) dk));
    k = ggml_scale(ctx, ggml_rms_norm(ctx, k, eps / dk), 1.0f / sqrtf((float) dk));

    ggml_tensor * result = ggml_gated_delta_net(ctx, q, k, v, gate, beta, state, 1);
    ggml_tensor * output = ggml_view_4d(ctx, result, dv, n_v, nt, ns, ggml_row_size(result->type, dv),
                                        ggml_row_size(result->type, dv * n_v), ggml_row_size(result->type, dv * n_v * nt), 0);
    ggml_tensor * new_state = ggml_view_4d(ctx, result, dv, dv, n_v, ns, ggml_row_size(result->type, dv),
                                           ggml_row_size(result->type, dv * dv), ggml_row_size(result->type, dv * dv * n_v),
                                           ggml_row_size(result->type, dv * n_v * nt * ns));
    ggml_build_forward_expand(gf, ggml_cpy(ctx, new_state, ggml_view_2d(ctx, ssm_all, dv * dv * n_v, ns, ssm_all->nb[1], 0)));
    ggml_build_forward_expand(gf, output);
}

// Nemotron-3-Nano-4B: 96 heads x 80, state 128, 8 groups, conv kernel 4.
static void build_mamba(ggml_context * ctx, ggml_cgraph * gf, const Case & c) {
    const int64_t n_head = 96, head_dim = 80, d_state = 128, n_group = 8, kc = 4;
    const int64_t d_inner = n_head * head_dim;
    const int64_t conv_dim = d_inner + 2 * n_group * d_state;
    const int64_t d_in_proj = 2 * d_inner + 2 * n_group * d_state + n_head;
    const int64_t nt = c.n_tokens, ns = c.n_seqs;

    ggml_tensor * zxBCdt   = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, d_in_proj, nt, ns);
    ggml_tensor * conv_w   = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, kc, conv_dim);
    ggml_tensor * conv_b   = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, conv_dim);
    ggml_tensor * dt_b     = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n_head);
    ggml_tensor * A        = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 1, n_head);
    ggml_tensor * D        = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 1, n_head);
    ggml_tensor * conv_all = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, (kc - 1) * conv_dim, ns);
    ggml_tensor * ssm_all  = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, d_state * d_inner, ns);
    ggml_tensor * ids      = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, ns);
    fill(zxBCdt, -1, 1);
    fill(conv_w, -0.5f, 0.5f);
    fill(conv_b, -0.1f, 0.1f);
    fill(dt_b, -3, -1);
    fill(A, -8, -0.5f);
    fill(D, 0.5f, 1.5f);
    zero(conv_all);
    zero(ssm_all);
    for (int64_t i = 0; i < ns; i++) {
        ((int32_t *) ids->data)[i] = (int32_t) i;
    }

    ggml_tensor * conv = ggml_reshape_3d(ctx, conv_all, kc - 1, conv_dim, ns);
    ggml_tensor * xBC = ggml_view_3d(ctx, zxBCdt, conv_dim, nt, ns, zxBCdt->nb[1], zxBCdt->nb[2],
                                     d_inner * ggml_element_size(zxBCdt));
    ggml_tensor * dt = ggml_view_3d(ctx, zxBCdt, n_head, nt, ns, zxBCdt->nb[1], zxBCdt->nb[2],
                                    (2 * d_inner + 2 * n_group * d_state) * ggml_element_size(zxBCdt));
    ggml_tensor * conv_x = ggml_concat(ctx, conv, ggml_transpose(ctx, xBC), 0);
    ggml_tensor * last = ggml_view_3d(ctx, conv_x, kc - 1, conv_dim, ns, conv_x->nb[1], conv_x->nb[2], nt * conv_x->nb[0]);
    ggml_build_forward_expand(gf, ggml_cpy(ctx, last, conv_all));
    xBC = ggml_silu(ctx, ggml_add(ctx, ggml_ssm_conv(ctx, conv_x, conv_w), conv_b));

    ggml_tensor * x = ggml_view_4d(ctx, xBC, head_dim, n_head, nt, ns, head_dim * xBC->nb[0], xBC->nb[1], xBC->nb[2], 0);
    ggml_tensor * B = ggml_view_4d(ctx, xBC, d_state, n_group, nt, ns, d_state * xBC->nb[0], xBC->nb[1], xBC->nb[2],
                                   d_inner * ggml_element_size(xBC));
    ggml_tensor * C = ggml_view_4d(ctx, xBC, d_state, n_group, nt, ns, d_state * xBC->nb[0], xBC->nb[1], xBC->nb[2],
                                   (d_inner + n_group * d_state) * ggml_element_size(xBC));
    dt = ggml_add(ctx, ggml_cont(ctx, dt), dt_b);
    ggml_tensor * ssm = ggml_reshape_4d(ctx, ssm_all, d_state, head_dim, n_head, ns);
    ggml_tensor * y_ssm = ggml_ssm_scan(ctx, ssm, x, dt, A, B, C, ids, 1);
    const int64_t Dn = d_state * d_inner;
    const size_t y_row = ggml_row_size(y_ssm->type, Dn);
    ggml_build_forward_expand(gf, ggml_cpy(ctx, ggml_view_2d(ctx, y_ssm, Dn, ns, y_row, ggml_nelements(x) * ggml_element_size(x)),
                                           ggml_view_2d(ctx, ssm_all, Dn, ns, ssm_all->nb[1], 0)));
    ggml_tensor * y = ggml_view_4d(ctx, y_ssm, head_dim, n_head, nt, ns, x->nb[1], n_head * x->nb[1], nt * n_head * x->nb[1], 0);
    y = ggml_add(ctx, y, ggml_mul(ctx, x, D));
    ggml_build_forward_expand(gf, y);
}

// Gemma 4 E4B's per-layer inputs from the real file's tensors, mapped in place.
struct GemmaFile {
    const uint8_t * base = nullptr;
    size_t size = 0;
    gguf_context * g = nullptr;
    ggml_context * meta = nullptr;
    int64_t n_embd = 0, n_layer = 0, d_ple = 0;
};

static bool open_gemma(const char * path, GemmaFile & f) {
    gguf_init_params p = { /*no_alloc =*/ true, /*ctx =*/ &f.meta };
    f.g = gguf_init_from_file(path, p);
    if (!f.g) {
        fprintf(stderr, "llama-layer-kinds: %s: not a GGUF file\n", path);
        return false;
    }
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "llama-layer-kinds: %s: cannot open\n", path);
        return false;
    }
    f.size = st.st_size;
    f.base = (const uint8_t *) mmap(nullptr, f.size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (f.base == MAP_FAILED) {
        fprintf(stderr, "llama-layer-kinds: %s: cannot map\n", path);
        return false;
    }
    const size_t data = gguf_get_data_offset(f.g);
    for (const char * name : { "per_layer_token_embd.weight", "per_layer_model_proj.weight", "per_layer_proj_norm.weight" }) {
        const int64_t id = gguf_find_tensor(f.g, name);
        ggml_tensor * t = ggml_get_tensor(f.meta, name);
        if (id < 0 || !t) {
            fprintf(stderr, "llama-layer-kinds: %s: no tensor %s (not a Gemma 4 file with per-layer inputs)\n", path, name);
            return false;
        }
        t->data = (void *) (f.base + data + gguf_get_tensor_offset(f.g, id));
        fprintf(stderr, "llama-layer-kinds: %s %s [%lld, %lld]\n", name, ggml_type_name(t->type), (long long) t->ne[0],
                (long long) t->ne[1]);
    }
    ggml_tensor * norm = ggml_get_tensor(f.meta, "per_layer_proj_norm.weight");
    ggml_tensor * proj = ggml_get_tensor(f.meta, "per_layer_model_proj.weight");
    f.d_ple = norm->ne[0];
    f.n_embd = proj->ne[0];
    f.n_layer = proj->ne[1] / f.d_ple;
    return true;
}

static void build_ple(ggml_context * ctx, ggml_cgraph * gf, const Case & c, GemmaFile & f) {
    const int64_t n = c.n_seqs * c.n_tokens;
    ggml_tensor * table = ggml_get_tensor(f.meta, "per_layer_token_embd.weight");
    ggml_tensor * model_proj = ggml_get_tensor(f.meta, "per_layer_model_proj.weight");
    ggml_tensor * norm_w = ggml_get_tensor(f.meta, "per_layer_proj_norm.weight");
    ggml_tensor * tokens = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n);
    ggml_tensor * inp = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, f.n_embd, n);
    std::uniform_int_distribution<int32_t> tok(0, (int32_t) table->ne[1] - 1);
    for (int64_t i = 0; i < n; i++) {
        ((int32_t *) tokens->data)[i] = tok(rng);
    }
    fill(inp, -1, 1);
    ggml_tensor * per = ggml_get_rows(ctx, table, tokens);
    per = ggml_reshape_3d(ctx, per, f.d_ple, f.n_layer, n);
    per = ggml_scale(ctx, per, sqrtf((float) f.d_ple));
    ggml_tensor * proj = ggml_mul_mat(ctx, model_proj, inp);
    proj = ggml_scale(ctx, proj, 1.0f / sqrtf((float) f.n_embd));
    proj = ggml_reshape_3d(ctx, proj, f.d_ple, f.n_layer, n);
    proj = ggml_mul(ctx, ggml_rms_norm(ctx, proj, 1e-6f), norm_w);
    ggml_tensor * out = ggml_scale(ctx, ggml_add(ctx, proj, per), 1.0f / sqrtf(2.0f));
    out = ggml_cont(ctx, ggml_permute(ctx, out, 0, 2, 1, 3));
    ggml_build_forward_expand(gf, out);
}

static std::vector<std::string> split(const std::string & s) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i <= s.size()) {
        size_t j = s.find(',', i);
        if (j == std::string::npos) j = s.size();
        if (j > i) out.push_back(s.substr(i, j - i));
        i = j + 1;
    }
    return out;
}

int main(int argc, char ** argv) {
    std::string kinds = "delta,mamba,ple", cases = "decode1,decode5,prompt512", gemma;
    int threads = 1, reps = 20;
    double seconds = 0;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                fprintf(stderr, "llama-layer-kinds: %s needs a value\n", a.c_str());
                exit(2);
            }
            return argv[++i];
        };
        if (a == "--kinds") kinds = next();
        else if (a == "--cases") cases = next();
        else if (a == "--threads" || a == "-t") threads = atoi(next().c_str());
        else if (a == "--reps" || a == "-r") reps = atoi(next().c_str());
        else if (a == "--seconds") seconds = atof(next().c_str());
        else if (a == "--gemma") gemma = next();
        else {
            fprintf(stderr, "usage: llama-layer-kinds [--kinds delta,mamba,ple] [--cases decode1,decode5,prompt512] "
                            "[--threads N] [--reps R] [--seconds S] [--gemma FILE]\n");
            return 2;
        }
    }
    if (threads < 1 || reps < 1) {
        fprintf(stderr, "llama-layer-kinds: --threads and --reps must be at least 1\n");
        return 2;
    }
    GemmaFile gf_file;
    ggml_threadpool_params tpp = ggml_threadpool_params_default(threads);
    ggml_threadpool * tp = ggml_threadpool_new(&tpp);
    for (const std::string & kind : split(kinds)) {
        if (kind == "ple" && !gf_file.g) {
            if (gemma.empty()) {
                fprintf(stderr, "llama-layer-kinds: kind ple needs --gemma FILE (a Gemma 4 GGUF)\n");
                return 2;
            }
            if (!open_gemma(gemma.c_str(), gf_file)) return 1;
        }
        for (const std::string & cname : split(cases)) {
            Case c;
            if (cname == "decode1") c = { cname, 1, 1 };
            else if (cname == "decode5") c = { cname, 5, 1 };
            else if (cname == "prompt512") c = { cname, 1, 512 };
            else {
                fprintf(stderr, "llama-layer-kinds: unknown case `%s` (decode1, decode5, prompt512)\n", cname.c_str());
                return 2;
            }
            ggml_init_params ip = { /*mem_size =*/ (size_t) 1536 << 20, /*mem_buffer =*/ nullptr, /*no_alloc =*/ false };
            ggml_context * ctx = ggml_init(ip);
            ggml_cgraph * gf = ggml_new_graph_custom(ctx, 256, false);
            if (kind == "delta") build_delta(ctx, gf, c);
            else if (kind == "mamba") build_mamba(ctx, gf, c);
            else if (kind == "ple") build_ple(ctx, gf, c, gf_file);
            else {
                fprintf(stderr, "llama-layer-kinds: unknown kind `%s` (delta, mamba, ple)\n", kind.c_str());
                return 2;
            }
            ggml_cplan plan = ggml_graph_plan(gf, threads, tp);
            std::vector<uint8_t> work(plan.work_size + 1);
            plan.work_data = work.data();
            if (ggml_graph_compute(gf, &plan) != GGML_STATUS_SUCCESS) { // warm-up
                fprintf(stderr, "llama-layer-kinds: %s %s: graph failed\n", kind.c_str(), cname.c_str());
                return 1;
            }
            const double w0 = wall_now(), c0 = cpu_now();
            int n = 0;
            while (n < reps || wall_now() - w0 < seconds) {
                ggml_graph_compute(gf, &plan);
                n++;
            }
            const double wall = (wall_now() - w0) / n, cpu = (cpu_now() - c0) / n;
            ggml_tensor * out = ggml_graph_node(gf, -1);
            double sum = 0;
            for (int64_t i = 0; i < ggml_nelements(out); i++) sum += fabs(((float *) out->data)[i]);
            if (!std::isfinite(sum)) {
                fprintf(stderr, "llama-layer-kinds: %s %s: output not finite\n", kind.c_str(), cname.c_str());
                return 1;
            }
            printf("side=llama kind=%s case=%s threads=%d reps=%d wall_ms=%.4f cpu_ms=%.4f\n", kind.c_str(), cname.c_str(),
                   threads, n, wall * 1e3, cpu * 1e3);
            fflush(stdout);
            ggml_free(ctx);
        }
    }
    ggml_threadpool_free(tp);
    return 0;
}
