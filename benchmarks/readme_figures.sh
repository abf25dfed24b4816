#!/bin/bash
# The runs behind the README's Benchmarks tables, one after the other, each output in OUT_DIR:
#   benchmarks/readme_figures.sh OUT_DIR
# Needs `make compiled` first (the compiled build in build/mypyc-site). Core and single-server
# JetStream run once on each build (ab_builds: pure, then compiled; each run beside its own
# nats-server runs); the cluster and Spark benchmarks run on the compiled build. About 11
# minutes on 2 cores; run it on an otherwise quiet machine. `python -m
# benchmarks.readme_tables OUT_DIR` then prints the README's tables from the logs.
set -u
cd "$(dirname "$0")/.."
out=$(mkdir -p "$1" && cd "$1" && pwd)
py=.venv/bin/python
compiled="$PWD/build/mypyc-site:$PWD"
run() { name=$1; shift; echo "== $name $(date -u +%H:%M:%S) load $(cut -d' ' -f1-3 /proc/loadavg)"; "$@" > "$out/$name.log" 2>&1; echo "   rc=$?"; }
run core_pubsub $py -m benchmarks.ab_builds --rounds 1 core_pubsub --msgs 200000
run js_publish $py -m benchmarks.ab_builds --rounds 1 js_publish --ids
run js_consume $py -m benchmarks.ab_builds --rounds 1 js_consume --msgs 50000
run js_cluster env PYTHONPATH="$compiled" $py -m benchmarks.js_cluster
run spark_bench env PYTHONPATH="$compiled" $py -m benchmarks.spark_bench --msgs 1000000
echo "== done $(date -u +%H:%M:%S)"
