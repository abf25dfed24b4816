// Key-value buckets through nats.js: create, put/get, create/update with revisions,
// delete/purge, history, keys, watch, status, destroy.
import { test } from "node:test";
import assert from "node:assert/strict";
import { KvWatchInclude, StringCodec } from "nats";
import { REPLICAS, collect, conn, uniq } from "./lib.mjs";

const sc = StringCodec();

async function bucket(opts = {}) {
  const nc = await conn();
  const js = nc.jetstream();
  const name = uniq("kv");
  const kv = await js.views.kv(name, { replicas: REPLICAS, ...opts });
  return { nc, js, kv, name };
}

async function all(iterPromise) {
  const out = [];
  for await (const v of await iterPromise) out.push(v);
  return out;
}

test("bucket is a stream with KV conventions", async () => {
  const { nc, kv, name } = await bucket({ history: 5 });
  const jsm = await nc.jetstreamManager();
  const si = await jsm.streams.info(`KV_${name}`);
  assert.deepEqual(si.config.subjects, [`$KV.${name}.>`]);
  assert.equal(si.config.max_msgs_per_subject, 5);
  assert.equal(si.config.allow_rollup_hdrs, true);
  assert.equal(si.config.discard, "new");
  assert.equal(si.config.allow_direct, true);
  assert.equal(si.config.num_replicas, REPLICAS);
  const st = await kv.status();
  assert.equal(st.bucket, name);
  assert.equal(st.history, 5);
  assert.equal(st.values, 0);
  assert.equal(st.replicas, REPLICAS);
  await kv.destroy();
  await nc.close();
});

test("put, get, revisions", async () => {
  const { nc, kv } = await bucket({ history: 10 });
  const r1 = await kv.put("a", sc.encode("1"));
  const r2 = await kv.put("b", sc.encode("2"));
  const r3 = await kv.put("a", sc.encode("3"));
  assert.deepEqual([r1, r2, r3], [1, 2, 3]);
  const e = await kv.get("a");
  assert.equal(sc.decode(e.value), "3");
  assert.equal(e.revision, 3);
  assert.equal(e.key, "a");
  assert.equal(e.operation, "PUT");
  assert.ok(e.created instanceof Date);
  const old = await kv.get("a", { revision: 1 });
  assert.equal(sc.decode(old.value), "1");
  assert.equal(await kv.get("missing"), null);
  // Keys with dots and the allowed punctuation.
  await kv.put("x.y/z_w-v=1", sc.encode("ok"));
  assert.equal(sc.decode((await kv.get("x.y/z_w-v=1")).value), "ok");
  await kv.destroy();
  await nc.close();
});

test("create only once, update only at the expected revision", async () => {
  const { nc, kv } = await bucket();
  const r1 = await kv.create("k", sc.encode("v1"));
  await assert.rejects(kv.create("k", sc.encode("again")));
  const r2 = await kv.update("k", sc.encode("v2"), r1);
  assert.equal(r2, r1 + 1);
  await assert.rejects(kv.update("k", sc.encode("stale"), r1));
  assert.equal(sc.decode((await kv.get("k")).value), "v2");
  // After a delete, create succeeds again.
  await kv.delete("k");
  const r4 = await kv.create("k", sc.encode("v3"));
  assert.ok(r4 > r2);
  await kv.destroy();
  await nc.close();
});

test("delete and purge leave markers; history shows them", async () => {
  const { nc, kv } = await bucket({ history: 10 });
  await kv.put("h", sc.encode("1"));
  await kv.put("h", sc.encode("2"));
  await kv.delete("h");
  const del = await kv.get("h");
  assert.ok(del === null || del.operation === "DEL", `deleted entry: ${JSON.stringify(del)}`);
  const hist = await all(kv.history({ key: "h" }));
  assert.deepEqual(hist.map((e) => e.operation), ["PUT", "PUT", "DEL"]);
  assert.deepEqual(hist.map((e) => e.revision), [1, 2, 3]);
  await kv.put("h", sc.encode("3"));
  await kv.purge("h");
  const hist2 = await all(kv.history({ key: "h" }));
  assert.deepEqual(hist2.map((e) => e.operation), ["PURGE"]);
  await kv.destroy();
  await nc.close();
});

test("history is limited by the bucket's history setting", async () => {
  const { nc, kv } = await bucket({ history: 3 });
  for (let i = 0; i < 6; i++) await kv.put("k", sc.encode(`${i}`));
  const hist = await all(kv.history({ key: "k" }));
  assert.deepEqual(hist.map((e) => sc.decode(e.value)), ["3", "4", "5"]);
  await kv.destroy();
  await nc.close();
});

test("keys lists live keys only", async () => {
  const { nc, kv } = await bucket();
  await kv.put("a", sc.encode("1"));
  await kv.put("b.c", sc.encode("2"));
  await kv.put("d", sc.encode("3"));
  await kv.delete("d");
  const keys = (await all(kv.keys())).sort();
  assert.deepEqual(keys, ["a", "b.c"]);
  const filtered = await all(kv.keys("b.*"));
  assert.deepEqual(filtered, ["b.c"]);
  await kv.destroy();
  const empty = await bucket();
  assert.deepEqual(await all(empty.kv.keys()), []);
  await empty.kv.destroy();
  await nc.close();
  await empty.nc.close();
});

test("watch sends current values, then updates", async () => {
  const { nc, kv } = await bucket();
  await kv.put("w.1", sc.encode("a"));
  await kv.put("w.2", sc.encode("b"));
  await kv.put("w.1", sc.encode("c"));
  let initialized = false;
  const raw = await kv.watch({ key: "w.>", initializedFn: () => (initialized = true) });
  const w = collect(raw);
  const initial = await w.next(2);
  assert.deepEqual(
    initial.map((e) => [e.key, sc.decode(e.value)]).sort(),
    [["w.1", "c"], ["w.2", "b"]],
  );
  await kv.put("w.3", sc.encode("d"));
  await kv.delete("w.2");
  await kv.put("other", sc.encode("ignored"));
  const updates = await w.next(2);
  assert.deepEqual(updates.map((e) => [e.key, e.operation]), [["w.3", "PUT"], ["w.2", "DEL"]]);
  assert.equal(initialized, true);
  raw.stop();
  await kv.destroy();
  await nc.close();
});

test("watch on an empty bucket initializes and then sees puts", async () => {
  const { nc, kv } = await bucket();
  let initialized = false;
  const raw = await kv.watch({ initializedFn: () => (initialized = true) });
  const w = collect(raw);
  await kv.put("first", sc.encode("1"));
  const [e] = await w.next(1);
  assert.equal(e.key, "first");
  assert.equal(e.revision, 1);
  assert.equal(initialized, true);
  raw.stop();
  await kv.destroy();
  await nc.close();
});

test("watch with all history and updates only", async () => {
  const { nc, kv } = await bucket({ history: 5 });
  await kv.put("k", sc.encode("1"));
  await kv.put("k", sc.encode("2"));
  const rawAll = await kv.watch({ key: "k", include: KvWatchInclude.AllHistory });
  const allW = collect(rawAll);
  assert.deepEqual((await allW.next(2)).map((e) => sc.decode(e.value)), ["1", "2"]);
  const rawNew = await kv.watch({ key: "k", include: KvWatchInclude.UpdatesOnly });
  const newW = collect(rawNew);
  await kv.put("k", sc.encode("3"));
  assert.deepEqual((await newW.next(1)).map((e) => sc.decode(e.value)), ["3"]);
  assert.deepEqual((await allW.next(1)).map((e) => sc.decode(e.value)), ["3"]);
  rawAll.stop();
  rawNew.stop();
  await kv.destroy();
  await nc.close();
});

test("binding to an existing bucket sees its data", async () => {
  const { nc, js, kv, name } = await bucket();
  await kv.put("shared", sc.encode("yes"));
  const again = await js.views.kv(name, { bindOnly: true });
  assert.equal(sc.decode((await again.get("shared")).value), "yes");
  await kv.destroy();
  const jsm = await nc.jetstreamManager();
  await assert.rejects(jsm.streams.info(`KV_${name}`), (e) => e.message === "stream not found");
  await nc.close();
});

test("bucket with ttl reports it in status", async () => {
  const { nc, kv } = await bucket({ ttl: 60_000 });
  const st = await kv.status();
  assert.equal(st.ttl, 60_000);
  await kv.destroy();
  await nc.close();
});
