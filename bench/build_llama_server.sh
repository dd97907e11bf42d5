#!/usr/bin/env bash
# Builds llama.cpp's own OpenAI-compatible server (llama-server) from the llama.cpp that the installed
# llama-cpp-python vendors (same version as lmchat's embedded engine), for `python -m bench kv_cache`.
# Result: ${LLAMA_SERVER_HOME:-~/.cache/lmchat/llama-server}/bin/llama-server (one static binary).
# Idempotent: does nothing when that binary exists (FORCE=1 rebuilds). About 10 minutes on 2 cores.
# Usage: bench/build_llama_server.sh   (with the project's virtualenv active, or PYTHON=/path/to/python)
set -euo pipefail

PREFIX="${LLAMA_SERVER_HOME:-$HOME/.cache/lmchat/llama-server}"
BIN="$PREFIX/bin/llama-server"
PYTHON="${PYTHON:-python}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

if [[ -x "$BIN" && -z "${FORCE:-}" ]]; then
    echo "llama-server already built: $BIN ($("$BIN" --version 2>&1 | grep -m1 version || true))"
    exit 0
fi

VERSION="${LCP_VERSION:-$("$PYTHON" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')}"
WORK="${LCP_WORK:-/tmp/lcp-src}"
mkdir -p "$WORK"
SDIST="$WORK/llama_cpp_python-$VERSION.tar.gz"
if [[ ! -f "$SDIST" ]]; then
    "$PYTHON" -m pip download --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$WORK"
fi
SRC="$WORK/llama_cpp_python-$VERSION"
if [[ ! -d "$SRC/vendor/llama.cpp" ]]; then
    tar -xzf "$SDIST" -C "$WORK"
fi

cd "$SRC"
cmake -S vendor/llama.cpp -B build -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DCMAKE_BUILD_TYPE=Release \
      -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF
cmake --build build --target llama-server -j"$JOBS"

mkdir -p "$PREFIX/bin"
cp build/bin/llama-server "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
echo "built $BIN"
"$BIN" --version 2>&1 | tail -n 2 || true
