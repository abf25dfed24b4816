#!/bin/bash
# Run nats.py's own test suite (nats/tests of github.com/nats-io/nats.py) against jetraft, or,
# with NATSPY_SERVER=/path/to/nats-server, against a real nats-server for the baseline.
#
#   tests/natspy_suite/run.sh NATS_PY_CHECKOUT OUT_DIR [pytest arguments...]
#
# nats.py's tests start servers themselves (tests/utils.py: a `nats-server` executable in the
# working directory comes first, then ~/nats-server/, then PATH), with nats-server's command-line
# flags, which `jetraft server` takes too. So a two-line `nats-server` script that runs
# `jetraft server "$@"` goes into the checkout's `nats/` directory, the tests' working directory
# (some read nats.py's own README.md and pyproject.toml from there). The checkout's client
# (`nats/src`) is the one tested, on this repository's virtual environment (pytest,
# pytest-asyncio and nkeys are in its dev extra). Websocket tests are left out: jetraft has no
# websocket listener. The tests use fixed ports (4222 and up): run one suite at a time, or each
# in a network namespace of its own (as root: `unshare -n sh -c 'ip link set lo up; ...'`).
# Output: OUT_DIR/pytest.log and OUT_DIR/junit.xml.
set -u
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
src=$(cd "$1" && pwd); out=$(mkdir -p "$2" && cd "$2" && pwd); shift 2
python=${JETRAFT_PYTHON:-$repo/.venv/bin/python}
work="$src/nats"
[ -d "$work/tests" ] || { echo "no nats/tests in $src: not a nats.py checkout" >&2; exit 2; }

rm -f "$work/nats-server"
if [ -n "${NATSPY_SERVER:-}" ]; then
  ln -s "$NATSPY_SERVER" "$work/nats-server"
else
  printf '#!/bin/sh\nexec "%s" -m jetraft server "$@"\n' "$python" > "$work/nats-server"
  chmod +x "$work/nats-server"
fi
export PYTHONPATH="$work/src:$work:$repo/src"
cd "$work"
"$python" -m pytest -p no:cacheprovider -o asyncio_mode=auto \
  -o asyncio_default_fixture_loop_scope=function -q -rf \
  --ignore=tests/test_client_websocket.py --ignore=tests/test_custom_headers_websocket.py \
  --junitxml="$out/junit.xml" "$@" tests > "$out/pytest.log" 2>&1
rc=$?
tail -n 1 "$out/pytest.log"
exit $rc
