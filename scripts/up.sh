#!/usr/bin/env bash
# `npm run up`: install what is missing, then run the embedded stack until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
# `--runtime docker` needs Docker and a registry too.
setup=()
prev=
for arg in "$@"; do
  if [ "$arg" = --runtime=docker ] || { [ "$prev" = --runtime ] && [ "$arg" = docker ]; }; then setup+=(--containers); fi
  prev=$arg
done
bash scripts/setup.sh "${setup[@]}"
exec node services/cli/bin/trainyard.js up "$@"
