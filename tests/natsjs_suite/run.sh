#!/bin/bash
# Run nats.js's own Deno test suite against jetraft (or, with NATSJS_SERVER=/path/to/nats-server,
# against a real nats-server to tell harness failures from jetraft's).
#
#   tests/natsjs_suite/run.sh NATS_JS_CHECKOUT OUT_DIR [test files relative to the checkout...]
#
# NATS_JS_CHECKOUT: a clone of github.com/nats-io/nats.js (v3; checked with commit 3a7b736b);
# its deno.json files are rewritten in place (rewrite_imports.py). Default test files: those of
# jetstream/tests, kv/tests, obj/tests, services/tests and core/tests. Each file runs on its own
# with a time limit (NATSJS_FILE_TIMEOUT, default 420 s), its log and JUnit XML under OUT_DIR.
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
src=$(cd "$1" && pwd); out=$(mkdir -p "$2" && cd "$2" && pwd); shift 2
python=${JETRAFT_PYTHON:-$repo/.venv/bin/python}
tools=${NATSJS_TOOLS:-$out/tools}

# Deno comes from npm (the `deno` package ships the binary).
if [ ! -x "$tools/node_modules/.bin/deno" ]; then
  mkdir -p "$tools" && npm install --prefix "$tools" --no-audit --no-fund --loglevel=error deno@2.9.6 || exit 1
fi
"$python" "$here/rewrite_imports.py" "$src" || exit 1

bin="$out/bin"; mkdir -p "$bin"
if [ -n "${NATSJS_SERVER:-}" ]; then
  ln -sf "$NATSJS_SERVER" "$bin/nats-server"
else
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$python" "$here/nats_server_shim.py" > "$bin/nats-server"
  chmod +x "$bin/nats-server"
  export PYTHONPATH="$repo/src${PYTHONPATH:+:$PYTHONPATH}"
fi
export PATH="$bin:$tools/node_modules/.bin:$PATH" DENO_NO_UPDATE_CHECK=1 NO_COLOR=1

cd "$src"
if [ $# -eq 0 ]; then
  set -- jetstream/tests/*_test.ts kv/tests/*_test.ts obj/tests/*_test.ts services/tests/*_test.ts core/tests/*_test.ts
fi
: > "$out/summary"
for t in "$@"; do
  name=$(echo "$t" | tr '/' '_')
  timeout "${NATSJS_FILE_TIMEOUT:-420}" deno test -A --no-check "$t" --junit-path="$out/$name.xml" > "$out/$name.log" 2>&1
  echo "$t rc=$?" >> "$out/summary"
done
passed=$(cat "$out"/*.log | grep -cE '^[^ ].* \.\.\. ok \(')
failed=$(cat "$out"/*.log | grep -cE '^[^ ].* \.\.\. FAILED \(')
echo "nats.js suite: $passed passed, $failed failed (per-file exit codes in $out/summary; rc=124: file timed out)"
