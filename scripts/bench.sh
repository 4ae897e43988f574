#!/usr/bin/env bash
# `npm run bench`: the benchmarks, on simulated GPUs. `npm run bench -- --quick` for a short run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --cluster-tools
exec node --import tsx bench/main.ts "$@"
