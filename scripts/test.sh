#!/usr/bin/env bash
# `npm test`: lint (package boundaries included), typecheck, then every test tier against a real
# nats-server and a real PostgreSQL that the test harness starts on free ports.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --cluster-tools --containers --torch
export TRAINYARD_LOG_LEVEL="${TRAINYARD_LOG_LEVEL:-warn}"

echo "== lint"
npx eslint .
npx prettier --check "**/*.{ts,js,json}" --log-level warn
echo "== typecheck"
npx tsc -p tsconfig.json
echo "== tests"
report=$(mktemp)
status=0
npx vitest run --reporter=default --reporter=json --outputFile.json="$report" "$@" || status=$?
node -e '
  const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  console.log(`${r.numPassedTests} passed, ${r.numFailedTests} failed` + (r.numPendingTests ? `, ${r.numPendingTests} skipped` : ""));
' "$report" || true
rm -f "$report"
exit "$status"
