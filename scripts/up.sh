#!/usr/bin/env bash
# `npm run up`: install what is missing, then run the embedded stack until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec node services/cli/bin/trainyard.js up "$@"
