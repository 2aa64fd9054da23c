#!/usr/bin/env bash
# Assemble a CUDA toolkit, enough to build `--features cuda` (compile and link; no GPU needed),
# from NVIDIA's CUDA packages on PyPI, pinned to exact versions, into a cache folder outside the
# repository. Idempotent: a second run checks the finished toolkit and only prints its root.
#
#   root=$(./scripts/fetch-cuda-toolkit.sh | tail -n1)
#   export CUDA_ROOT=$root CUDA_PATH=$root CUDA_HOME=$root PATH=$root/bin:$PATH
#   CUDA_COMPUTE_CAP=90 cargo build --release --features cuda --target-dir target-cuda
#
# What the build needs (candle 0.11.1 with cudarc 0.19 "dynamic-linking"):
# - nvcc + ptxas + cicc + libdevice + headers: candle-kernels compiles its .cu files to PTX and a
#   static library (nvidia-cuda-nvcc, nvidia-nvvm, nvidia-cuda-crt, nvidia-cuda-cccl, runtime
#   headers), and Joule's own kernels (kernels/*.cu, build.rs) are compiled the same way;
# - libcudart (nvidia-cuda-runtime): candle-kernels links it;
# - libcublas, libcublasLt, libcurand, libnvrtc (nvidia-cublas, nvidia-curand,
#   nvidia-cuda-nvrtc): cudarc links them at build time;
# - libcuda: the driver's library, which no PyPI package ships. Like the toolkit's own
#   lib/stubs/libcuda.so, a link-time stub is generated here from the toolkit's cuda.h (every
#   driver API name, after the header's _v2/_v3 renames), with the soname libcuda.so.1, so that
#   at run time the dynamic loader binds the real driver. The stub is never loaded: nothing
#   named libcuda.so.1 exists in this folder.
#
# Pinned to CUDA 13.0, the newest release the 580 driver series runs (PTX from a newer nvcc is
# refused by an older driver). Needs python3 with pip (its zipfile module unpacks) and a C compiler
# (cc) for the stub. Cache root: $JOULE_CUDA_CACHE, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/joule. Prints the toolkit's root as its last line.
set -euo pipefail

CUDA_TAG=13.0.88
PINS=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-cuda-crt==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cuda-runtime==13.0.96
  nvidia-cuda-cccl==13.0.85
  nvidia-cuda-nvrtc==13.0.88
  nvidia-cublas==13.0.2.14
  nvidia-curand==10.4.0.35
)

cache=${JOULE_CUDA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/joule}
root=$cache/cuda-$CUDA_TAG
stamp=$root/joule-toolkit.txt
want=$(printf '%s\n' "${PINS[@]}")

log() { echo "fetch-cuda-toolkit: $*" >&2; }

toolkit_ok() {
  [[ -f $stamp ]] && [[ "$(sed -n '2,$p' "$stamp")" == "$want" ]] &&
    "$root/bin/nvcc" --version >/dev/null 2>&1 &&
    [[ -f $root/lib/stubs/libcuda.so && -f $root/lib/libcublas.so && -f $root/lib/libcudart.so ]]
}

if toolkit_ok; then
  echo "$root"
  exit 0
fi

for tool in python3 cc; do
  command -v "$tool" >/dev/null || { log "needs $tool on PATH"; exit 1; }
done
python3 -m pip --version >/dev/null 2>&1 || { log "needs pip (python3 -m pip)"; exit 1; }

mkdir -p "$cache"
work=$(mktemp -d "$cache/.cuda-build.XXXXXX")
trap 'rm -rf "$work"' EXIT

log "downloading ${#PINS[@]} pinned wheels (about 700 MB)"
python3 -m pip download --quiet --no-cache-dir --no-deps --only-binary=:all: \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64 \
  -d "$work/wheels" "${PINS[@]}" >&2

n=$(find "$work/wheels" -name '*.whl' | wc -l)
[[ $n -eq ${#PINS[@]} ]] || { log "expected ${#PINS[@]} wheels, got $n"; exit 1; }

log "unpacking"
python3 - "$work/wheels" "$work/unpacked" <<'EOF'
import os, stat, sys, zipfile
src, dst = sys.argv[1], sys.argv[2]
for name in sorted(os.listdir(src)):
    with zipfile.ZipFile(os.path.join(src, name)) as z:
        for info in z.infolist():
            if not info.filename.startswith("nvidia/cu13/") or info.is_dir():
                continue
            path = z.extract(info, dst)
            mode = info.external_attr >> 16
            if mode & 0o111 or "/bin/" in info.filename:
                os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
EOF
tk=$work/unpacked/nvidia/cu13
[[ -x $tk/bin/nvcc && -f $tk/include/cuda.h ]] || { log "wheels did not unpack to nvidia/cu13/{bin,include}"; exit 1; }

# The layout a toolkit install has and build scripts search: unversioned library names for the
# linker, lib64 beside lib, nvvm/lib64, targets/x86_64-linux/{include,lib}.
(
  cd "$tk/lib"
  for f in lib*.so.*; do
    base=${f%%.so.*}.so
    [[ -e $base ]] || ln -s "$f" "$base"
  done
)
ln -s lib "$tk/lib64"
mkdir -p "$tk/nvvm" "$tk/targets/x86_64-linux"
ln -s ../lib "$tk/nvvm/lib64"
ln -s ../../include "$tk/targets/x86_64-linux/include"
ln -s ../../lib "$tk/targets/x86_64-linux/lib"

log "generating the link-time stub of libcuda (soname libcuda.so.1)"
mkdir -p "$tk/lib/stubs"
python3 - "$tk/include/cuda.h" "$work/stub.c" <<'EOF'
import re, subprocess, sys
header, out = sys.argv[1], sys.argv[2]
raw = open(header, encoding="utf-8", errors="replace").read()
pre = subprocess.run(["cc", "-E", "-P", "-x", "c", header], check=True,
                     capture_output=True, text=True).stdout
decl = re.compile(r"\b(cu[A-Z][A-Za-z0-9_]*)\s*\(")
names = set(decl.findall(pre)) | set(decl.findall(raw))
if len(names) < 300:
    sys.exit(f"only {len(names)} driver functions found in {header}")
with open(out, "w") as f:
    f.write("/* Link-time stub of the CUDA driver library: never loaded at run time. */\n")
    for n in sorted(names):
        f.write(f"int {n}(void) {{ return 999; }}\n")
EOF
cc -shared -fPIC -O0 -Wl,-soname,libcuda.so.1 -o "$tk/lib/stubs/libcuda.so" "$work/stub.c"

"$tk/bin/nvcc" --version >&2

{
  echo "# CUDA toolkit assembled by scripts/fetch-cuda-toolkit.sh from these packages:"
  printf '%s\n' "${PINS[@]}"
} >"$tk/joule-toolkit.txt"

rm -rf "$root"
mv "$tk" "$root"
log "toolkit ready"
echo "$root"
