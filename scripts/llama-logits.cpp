// llama-logits: llama.cpp's logits for a list of token ids, at every position, written as a
// float32 .npy array [n_ids, n_vocab]: the peer that tests/full/synth_vs_llama.rs holds Joule's
// `joule logits` against. Built by scripts/fetch-llama-cpp.sh beside llama-server, against
// the same llama.cpp tree (de3ff81).
//
// usage: llama-logits MODEL.gguf --ids "1 2 3" --out FILE.npy [--prefill K] [--threads N]
//        llama-logits MODEL.gguf --load-only [--no-mmap] [--threads N]
//   without --prefill: all ids in one decode call (one micro-batch);
//   with --prefill K:  the first K in one call, then one id per call through the cache/state;
//   --dump DIR: also write every f32 tensor whose name starts with l_out, attn_residual,
//   linear_attn_out, attn_out, ffn_out or result_norm (llama.cpp's graph names, `-IL` per layer) to
//   DIR/NAME.npy as [rows, ne0]: the layer-by-layer side of `joule logits --dump DIR`;
//   --load-only: time llama_model_load_from_file and llama_init_from_model (a 4,096-token
//   context) and print `load_ms=… context_ms=…` (scripts/real-size.sh's load time; --no-mmap
//   reads the weights into memory instead of mapping the file, as Joule does).
// The KV cache is kept in F32 and the sliding-window cache at full size, so the comparison
// measures the model's arithmetic, not cache rounding.
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

static void quiet_log(enum ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_ERROR || std::getenv("LLAMA_LOGITS_VERBOSE")) {
        std::fputs(text, stderr);
    }
}

static bool write_npy(const std::string & path, const std::vector<float> & data, size_t rows, size_t cols) {
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) +
                         ", " + std::to_string(cols) + "), }";
    size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header.push_back('\n');
    FILE * f = std::fopen(path.c_str(), "wb");
    if (!f) {
        return false;
    }
    const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
    uint16_t hlen = (uint16_t) header.size();
    bool ok = std::fwrite(magic, 1, 8, f) == 8 && std::fwrite(&hlen, 2, 1, f) == 1 &&
              std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
              std::fwrite(data.data(), sizeof(float), data.size(), f) == data.size();
    return std::fclose(f) == 0 && ok;
}

static std::string g_dump_dir;

// cb_eval: asked first whether a tensor is wanted, then handed it once computed.
static bool dump_cb(struct ggml_tensor * t, bool ask, void *) {
    static const char * prefixes[] = {"l_out", "attn_residual", "linear_attn_out", "attn_out", "ffn_out", "result_norm"};
    bool wanted = false;
    for (const char * p : prefixes) {
        if (std::strncmp(t->name, p, std::strlen(p)) == 0 && (t->name[std::strlen(p)] == '-' || t->name[std::strlen(p)] == 0)) {
            wanted = true;
        }
    }
    if (ask) {
        return wanted;
    }
    if (!wanted || t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) {
        return true;
    }
    std::vector<float> data((size_t) ggml_nelements(t));
    ggml_backend_tensor_get(t, data.data(), 0, ggml_nbytes(t));
    const size_t cols = (size_t) t->ne[0];
    write_npy(g_dump_dir + "/" + t->name + ".npy", data, data.size() / cols, cols);
    return true;
}

static bool decode(llama_context * ctx, const std::vector<llama_token> & ids, size_t from, size_t to) {
    llama_batch batch = llama_batch_init((int32_t) (to - from), 0, 1);
    for (size_t i = from; i < to; ++i) {
        const int32_t j = (int32_t) (i - from);
        batch.token[j]     = ids[i];
        batch.pos[j]       = (llama_pos) i;
        batch.n_seq_id[j]  = 1;
        batch.seq_id[j][0] = 0;
        batch.logits[j]    = 1;
    }
    batch.n_tokens = (int32_t) (to - from);
    const int rc = llama_decode(ctx, batch);
    llama_batch_free(batch);
    if (rc != 0) {
        std::fprintf(stderr, "llama-logits: llama_decode failed (%d)\n", rc);
    }
    return rc == 0;
}

int main(int argc, char ** argv) {
    std::string model_path, ids_arg, out;
    long prefill = -1;
    bool load_only = false, no_mmap = false;
    int threads = (int) std::thread::hardware_concurrency();
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&](const char * name) -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "llama-logits: %s needs a value\n", name);
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--ids") ids_arg = next("--ids");
        else if (a == "--out") out = next("--out");
        else if (a == "--prefill") prefill = std::strtol(next("--prefill").c_str(), nullptr, 10);
        else if (a == "--threads") threads = std::atoi(next("--threads").c_str());
        else if (a == "--load-only") load_only = true;
        else if (a == "--no-mmap") no_mmap = true;
        else if (a == "--dump") g_dump_dir = next("--dump");
        else if (model_path.empty() && a[0] != '-') model_path = a;
        else {
            std::fprintf(stderr, "llama-logits: unknown argument %s\n", a.c_str());
            return 2;
        }
    }
    if (load_only) {
        if (model_path.empty()) {
            std::fprintf(stderr, "usage: llama-logits MODEL.gguf --load-only [--no-mmap] [--threads N]\n");
            return 2;
        }
        using clock = std::chrono::steady_clock;
        llama_log_set(quiet_log, nullptr);
        llama_backend_init();
        llama_model_params mp = llama_model_default_params();
        mp.n_gpu_layers = 0;
        mp.load_mode    = no_mmap ? LLAMA_LOAD_MODE_NONE : LLAMA_LOAD_MODE_MMAP;
        const auto t0 = clock::now();
        llama_model * model = llama_model_load_from_file(model_path.c_str(), mp);
        const auto t1 = clock::now();
        if (!model) {
            std::fprintf(stderr, "llama-logits: cannot load %s\n", model_path.c_str());
            return 1;
        }
        llama_context_params cp = llama_context_default_params();
        cp.n_ctx           = 4096;
        cp.n_threads       = threads;
        cp.n_threads_batch = threads;
        llama_context * ctx = llama_init_from_model(model, cp);
        const auto t2 = clock::now();
        if (!ctx) {
            std::fprintf(stderr, "llama-logits: cannot create a context for %s\n", model_path.c_str());
            return 1;
        }
        const auto ms = [](clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
        std::printf("load_ms=%.1f context_ms=%.1f mmap=%d\n", ms(t1 - t0), ms(t2 - t1), no_mmap ? 0 : 1);
        llama_free(ctx);
        llama_model_free(model);
        llama_backend_free();
        return 0;
    }
    std::vector<llama_token> ids;
    for (char * p = ids_arg.data(); *p;) {
        if (*p == ' ' || *p == ',') { ++p; continue; }
        char * end = nullptr;
        long v = std::strtol(p, &end, 10);
        if (end == p || v < 0) {
            std::fprintf(stderr, "llama-logits: --ids: `%s` is not a token id\n", p);
            return 2;
        }
        ids.push_back((llama_token) v);
        p = end;
    }
    if (model_path.empty() || out.empty() || ids.empty()) {
        std::fprintf(stderr, "usage: llama-logits MODEL.gguf --ids \"1 2 3\" --out FILE.npy [--prefill K] [--threads N]\n");
        return 2;
    }
    const size_t n = ids.size();
    const size_t k = prefill < 0 ? n : (size_t) prefill;
    if (k > n || k == 0) {
        std::fprintf(stderr, "llama-logits: --prefill must be 1..%zu\n", n);
        return 2;
    }

    llama_log_set(quiet_log, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) {
        std::fprintf(stderr, "llama-logits: cannot load %s\n", model_path.c_str());
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx           = (uint32_t) ((n + 255) / 256 * 256);
    cp.n_batch         = (uint32_t) n;
    cp.n_ubatch        = (uint32_t) n;
    cp.n_seq_max       = 1;
    cp.n_threads       = threads;
    cp.n_threads_batch = threads;
    cp.type_k          = GGML_TYPE_F32;
    cp.type_v          = GGML_TYPE_F32;
    cp.swa_full        = true;
    cp.no_perf         = true;
    if (!g_dump_dir.empty()) {
        cp.cb_eval           = dump_cb;
        cp.cb_eval_user_data = nullptr;
    }
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        std::fprintf(stderr, "llama-logits: cannot create a context for %s\n", model_path.c_str());
        return 1;
    }
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    std::vector<float> logits;
    logits.reserve(n * (size_t) n_vocab);
    if (!decode(ctx, ids, 0, k)) return 1;
    for (size_t i = 0; i < k; ++i) {
        const float * row = llama_get_logits_ith(ctx, (int32_t) i);
        logits.insert(logits.end(), row, row + n_vocab);
    }
    for (size_t i = k; i < n; ++i) {
        if (!decode(ctx, ids, i, i + 1)) return 1;
        const float * row = llama_get_logits_ith(ctx, 0);
        logits.insert(logits.end(), row, row + n_vocab);
    }
    if (!write_npy(out, logits, n, (size_t) n_vocab)) {
        std::fprintf(stderr, "llama-logits: cannot write %s\n", out.c_str());
        return 1;
    }
    std::printf("%s: %zu positions x %d logits\n", out.c_str(), n, n_vocab);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
