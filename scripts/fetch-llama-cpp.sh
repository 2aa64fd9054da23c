#!/usr/bin/env bash
# Build llama.cpp's `llama-server`, `llama-bench`, `llama-batched-bench` and `llama-quantize`
# (and Joule's own `llama-logits`, scripts/llama-logits.cpp, linked against that build) from the llama.cpp release bundled in the npm package node-llama-cpp@3.22.1 (llama.cpp
# de3ff81), the way a user would: `npm pack`, unpack, clone the bundled git repository, cmake.
#
# Everything lives in a cache outside the repository,
#   ${XDG_CACHE_HOME:-$HOME/.cache}/joule/llama.cpp-de3ff81   (JOULE_LLAMA_CPP_DIR overrides),
# and a second run finds the binaries there and does nothing, so a machine builds them once.
# Needs npm, git, cmake and a C++ compiler for the first run.
#
# Usage: scripts/fetch-llama-cpp.sh      (progress on stderr; the bin directory is the last line
#                                          of stdout)
set -euo pipefail

version=3.22.1
commit=de3ff81
root=${JOULE_LLAMA_CPP_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/joule/llama.cpp-$commit}
src=$root/src
build=$root/build
bin=$build/bin
targets=(llama-server llama-bench llama-batched-bench llama-quantize)

have_all() {
    local t
    for t in "${targets[@]}"; do [[ -x $bin/$t ]] || return 1; done
}

# llama-logits (tests/full/synth_vs_llama.rs's peer): rebuilt when its source changes.
logits_src=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/llama-logits.cpp
build_logits() {
    [[ -f $logits_src ]] || return 0
    local sum
    sum=$(sha256sum "$logits_src" | cut -d' ' -f1)
    if [[ -x $bin/llama-logits && $(cat "$bin/llama-logits.sha256" 2>/dev/null) == "$sum" ]]; then
        return 0
    fi
    echo "fetch-llama-cpp: building llama-logits" >&2
    c++ -O2 -std=c++17 -I "$src/include" -I "$src/ggml/include" "$logits_src" \
        "$build/src/libllama.a" "$build/ggml/src/libggml.a" "$build/ggml/src/libggml-cpu.a" \
        "$build/ggml/src/libggml-base.a" -fopenmp -lpthread -ldl -lm -o "$bin/llama-logits.tmp.$$" >&2
    mv "$bin/llama-logits.tmp.$$" "$bin/llama-logits"
    echo "$sum" >"$bin/llama-logits.sha256"
}

if have_all; then
    build_logits
    echo "$bin"
    exit 0
fi

for tool in npm git cmake c++; do
    if ! command -v "$tool" >/dev/null; then
        echo "fetch-llama-cpp: '$tool' is needed to build llama.cpp but is not installed" >&2
        exit 1
    fi
done

mkdir -p "$root"
# One build at a time per cache (a test run and a benchmark may both ask for it).
exec 9>"$root/.lock"
flock 9
if have_all; then
    build_logits
    echo "$bin"
    exit 0
fi

if [[ ! -f $src/CMakeLists.txt ]]; then
    rm -rf "$root/package" "$src"
    tarball=$root/node-llama-cpp-$version.tgz
    if [[ ! -f $tarball ]]; then
        echo "fetch-llama-cpp: npm pack node-llama-cpp@$version" >&2
        (cd "$root" && npm pack --silent "node-llama-cpp@$version" >&2)
    fi
    tar -xzf "$tarball" -C "$root" package/llama/gitRelease.bundle
    git -c advice.detachedHead=false -c init.defaultBranch=master \
        clone --quiet "$root/package/llama/gitRelease.bundle" "$src" >&2
    rm -rf "$root/package"
fi
head=$(git -C "$src" rev-parse --short=7 HEAD)
if [[ $head != "$commit" ]]; then
    echo "fetch-llama-cpp: $src is at $head, expected llama.cpp $commit" >&2
    exit 1
fi

# -mno-amx-*: with GGML_NATIVE on a CPU that reports AMX, ggml's AMX path crashes; keep the
# native AVX2/AVX-512 paths and leave AMX out.
noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
echo "fetch-llama-cpp: configuring in $build" >&2
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DCMAKE_C_FLAGS="$noamx" -DCMAKE_CXX_FLAGS="$noamx" \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF >&2
echo "fetch-llama-cpp: building ${targets[*]} (this takes a while the first time)" >&2
cmake --build "$build" --config Release -j2 --target "${targets[@]}" >&2
have_all
build_logits
echo "$bin"
