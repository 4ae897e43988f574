#!/usr/bin/env bash
# `npm run chaos`: short jobs on several workers while workers, the scheduler leader and the
# projector are killed (kill -9) and restarted at random. Flags: --jobs N --workers N
# --kill-every-ms MS --kills N --timeout-ms MS.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --cluster-tools
exec node --import tsx bench/chaos-main.ts "$@"
