// Shared helpers for the nats.js compatibility scripts.
// Each script is run by tests/integration/test_nats_js.py as `node <script>` with
// NATS_URL pointing at a jetraft server (or at nats-server, to check the script itself).
import { after } from "node:test";
import { connect } from "nats";

export const URL = process.env.NATS_URL ?? "nats://127.0.0.1:4222";

// How many replicas every stream, KV bucket and object store of the scripts gets: 1 against
// one server, 3 when tests/cluster/test_nats_js_cluster.py runs them against a cluster.
export const REPLICAS = Number(process.env.NATS_REPLICAS ?? "1");

/** `jsm.streams.add(cfg)` with the run's replica count (unless `cfg` sets its own). */
export function addStream(jsm, cfg) {
  return jsm.streams.add({ num_replicas: REPLICAS, ...cfg });
}

// Every connection a script opens is closed when its tests end, pass or fail, so a
// failed assertion never leaves a socket that keeps node alive.
const opened = [];
after(async () => {
  await Promise.allSettled(opened.map((nc) => (nc.isClosed() ? null : nc.close())));
});

/** Connect without reconnect, so a dead server fails the script fast. */
export async function conn(opts = {}) {
  const nc = await connect({ servers: URL, reconnect: false, timeout: 5000, ...opts });
  opened.push(nc);
  return nc;
}

let counter = 0;
/** A name unique within this process run (stream, bucket and subject names). */
export function uniq(prefix) {
  counter += 1;
  return `${prefix}${process.pid}x${counter}`;
}

/** Resolve with the first `n` values of an async iterator, failing after `timeoutMs`. */
export async function take(iter, n, timeoutMs = 5000) {
  const out = [];
  if (n === 0) return out;
  const timer = new Promise((_, reject) => {
    const t = setTimeout(
      () => reject(new Error(`timed out after ${timeoutMs} ms with ${out.length}/${n} values`)),
      timeoutMs,
    );
    t.unref();
  });
  const loop = (async () => {
    for await (const v of iter) {
      out.push(v);
      if (out.length >= n) break;
    }
    return out;
  })();
  return Promise.race([loop, timer]);
}

/** Reject after `ms` unless `p` settles first. */
export function within(p, ms, what) {
  return Promise.race([
    p,
    new Promise((_, reject) => {
      const t = setTimeout(() => reject(new Error(`timed out: ${what}`)), ms);
      t.unref();
    }),
  ]);
}

/**
 * Read an iterator that may be iterated only once (nats.js subscriptions) from one
 * background loop, and hand out its values in batches: `await c.next(n)`.
 */
export function collect(iter) {
  const buf = [];
  let wake = null;
  let error = null;
  let ended = false;
  const notify = () => {
    if (wake) {
      const w = wake;
      wake = null;
      w();
    }
  };
  (async () => {
    try {
      for await (const v of iter) {
        buf.push(v);
        notify();
      }
    } catch (e) {
      error = e;
    }
    ended = true;
    notify();
  })();
  return {
    get ended() {
      return ended;
    },
    get buffered() {
      return buf.length;
    },
    async next(n, timeoutMs = 5000) {
      const deadline = Date.now() + timeoutMs;
      while (buf.length < n) {
        if (error) throw error;
        if (ended) throw new Error(`iterator ended with ${buf.length}/${n} values`);
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`timed out with ${buf.length}/${n} values`);
        await new Promise((resolve) => {
          wake = resolve;
          setTimeout(resolve, left).unref();
        });
      }
      return buf.splice(0, n);
    },
  };
}
