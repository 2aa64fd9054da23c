#!/usr/bin/env bash
# Type-check Joule for Apple Silicon with the `metal` feature on a machine that is not a Mac
# (CI does this so the Metal and aarch64 code paths cannot rot): `cargo check --all-targets` for
# aarch64-apple-darwin, so the library, the binary, the tests, the benches and candle's Metal
# backend with its Objective-C bindings are all compiled to metadata and type-checked.
#
# What it does not do: no macOS SDK exists here, so the C code some dependencies build
# (mimalloc, zstd, ring) is handed to a stand-in compiler that writes empty objects, and nothing
# is linked or run. A Mac user builds with `cargo build --release --features metal`.
#
# The target's standard library comes from `rustup target add aarch64-apple-darwin` (about 30 MB,
# once); without rustup, or where it cannot download, the check says so and exits 0 with a note
# (JOULE_MACOS_CHECK=require makes that an error). The target folder is its own, outside the
# repository ($JOULE_MACOS_TARGET, default <cache>/target-macos), so it never invalidates the
# CPU build.
set -euo pipefail
cd "$(dirname "$0")/.."
triple=aarch64-apple-darwin
cache=${XDG_CACHE_HOME:-$HOME/.cache}/joule
target=${JOULE_MACOS_TARGET:-$cache/target-macos}

skip() {
    if [[ "${JOULE_MACOS_CHECK:-auto}" == require ]]; then
        echo "check-macos: $1" >&2
        exit 1
    fi
    echo "check-macos: SKIPPED: $1" >&2
    exit 0
}

if ! rustup target list --installed 2>/dev/null | grep -qx "$triple"; then
    command -v rustup >/dev/null || skip "no rustup to install the $triple standard library"
    rustup target add "$triple" >&2 || skip "rustup could not install the $triple standard library"
fi

# The stand-in C compiler: cc-rs asks which family it is (the preprocessor's output names
# "clang"; a cl-style `-?` is refused) and then compiles each file to the `-o` path.
stub=$(mktemp -d)
trap 'rm -rf "$stub"' EXIT
cat >"$stub/cc" <<'EOF'
#!/bin/sh
out=""
prev=""
for a in "$@"; do
    case "$a" in
        -E) echo '"clang"'; exit 0 ;;
        "-?") exit 1 ;;
    esac
    [ "$prev" = "-o" ] && out="$a"
    prev="$a"
done
[ -n "$out" ] && : >"$out"
exit 0
EOF
chmod +x "$stub/cc"

start=$(date +%s)
CC_aarch64_apple_darwin="$stub/cc" CXX_aarch64_apple_darwin="$stub/cc" AR_aarch64_apple_darwin=ar \
    RUSTFLAGS="-D warnings" \
    cargo check --release --all-targets --features metal --target "$triple" --target-dir "$target"
echo "check-macos: --features metal type-checked for $triple in $(($(date +%s) - start)) s (target $target)" >&2
