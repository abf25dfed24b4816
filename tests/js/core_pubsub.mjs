// Core NATS through nats.js: handshake, pub/sub, wildcards, queue groups,
// request/reply, headers, no responders, auto-unsubscribe, drain.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ErrorCode, StringCodec, createInbox, headers } from "nats";
import { collect, conn, uniq, within } from "./lib.mjs";

const sc = StringCodec();

test("connect sees a 2.x server with headers", async () => {
  const nc = await conn({ name: "compat" });
  const info = nc.info;
  assert.ok(info, "no INFO");
  assert.match(info.version, /^2\.\d+\.\d+/);
  assert.equal(info.headers, true);
  assert.ok(info.max_payload > 0);
  assert.ok(typeof info.server_id === "string" && info.server_id.length > 0);
  const rtt = await nc.rtt();
  assert.ok(rtt >= 0);
  await nc.close();
  assert.equal(nc.isClosed(), true);
});

test("publish reaches an exact subscriber", async () => {
  const nc = await conn();
  const subj = uniq("core.exact.");
  const sub = collect(nc.subscribe(subj));
  nc.publish(subj, sc.encode("hello"));
  const [m] = await sub.next(1);
  assert.equal(m.subject, subj);
  assert.equal(sc.decode(m.data), "hello");
  await nc.close();
});

test("wildcards match by token", async () => {
  const nc = await conn();
  const root = uniq("wc");
  const star = collect(nc.subscribe(`${root}.*`));
  const full = collect(nc.subscribe(`${root}.>`));
  const mid = collect(nc.subscribe(`${root}.*.paid`));
  await nc.flush();
  for (const s of [`${root}.new`, `${root}.eu.paid`, `${root}`, `other.new`, `${root}.eu.paid.x`]) {
    nc.publish(s, sc.encode(s));
  }
  // A final marker on each pattern so the counts can be checked without sleeping.
  nc.publish(`${root}.zz`, sc.encode("end"));
  nc.publish(`${root}.zz.paid`, sc.encode("end"));
  await nc.flush();
  assert.deepEqual((await star.next(2)).map((m) => m.subject), [`${root}.new`, `${root}.zz`]);
  assert.deepEqual(
    (await full.next(5)).map((m) => m.subject),
    [`${root}.new`, `${root}.eu.paid`, `${root}.eu.paid.x`, `${root}.zz`, `${root}.zz.paid`],
  );
  assert.deepEqual(
    (await mid.next(2)).map((m) => m.subject),
    [`${root}.eu.paid`, `${root}.zz.paid`],
  );
  await nc.close();
});

test("a queue group gets each message once", async () => {
  const nc = await conn();
  const subj = uniq("work.");
  const counts = [0, 0, 0];
  const seen = new Map();
  const total = 90;
  let got = 0;
  let resolveAll;
  const all = new Promise((r) => (resolveAll = r));
  const members = counts.map((_, i) =>
    nc.subscribe(subj, {
      queue: "workers",
      callback: (err, m) => {
        assert.equal(err, null);
        counts[i] += 1;
        const k = sc.decode(m.data);
        seen.set(k, (seen.get(k) ?? 0) + 1);
        got += 1;
        if (got === total) resolveAll();
      },
    }),
  );
  const plain = collect(nc.subscribe(subj));
  await nc.flush();
  for (let i = 0; i < total; i++) nc.publish(subj, sc.encode(String(i)));
  await within(all, 5000, "queue deliveries");
  assert.equal((await plain.next(total)).length, total);
  // Another round trip: any extra (duplicate) delivery would have arrived by now.
  await nc.flush();
  assert.equal(got, total);
  for (let i = 0; i < total; i++) assert.equal(seen.get(String(i)), 1, `msg ${i}`);
  // With 90 random picks the chance a member gets none is 3*(2/3)^90, about 4e-16.
  assert.ok(counts.every((c) => c > 0), `uneven ${counts}`);
  members.forEach((s) => s.unsubscribe());
  await nc.close();
});

test("request/reply across two connections", async () => {
  const responder = await conn();
  const requester = await conn();
  const subj = uniq("svc.echo.");
  responder.subscribe(subj, {
    callback: (_err, m) => m.respond(sc.encode(`re: ${sc.decode(m.data)}`)),
  });
  await responder.flush();
  const r = await requester.request(subj, sc.encode("ping"), { timeout: 2000 });
  assert.equal(sc.decode(r.data), "re: ping");
  // The old style (one inbox per request) works too.
  const r2 = await requester.request(subj, sc.encode("two"), { timeout: 2000, noMux: true });
  assert.equal(sc.decode(r2.data), "re: two");
  await responder.close();
  await requester.close();
});

test("headers round-trip with multiple values and case", async () => {
  const nc = await conn();
  const subj = uniq("hdr.");
  const sub = collect(nc.subscribe(subj));
  const h = headers();
  h.append("X-Trace", "abc");
  h.append("X-Multi", "one");
  h.append("X-Multi", "two");
  h.append("mixedCase-Key", "v");
  nc.publish(subj, sc.encode("body"), { headers: h });
  const [m] = await sub.next(1);
  assert.ok(m.headers, "headers lost");
  assert.equal(m.headers.get("X-Trace"), "abc");
  assert.deepEqual(m.headers.values("X-Multi"), ["one", "two"]);
  assert.equal(m.headers.get("mixedCase-Key"), "v");
  assert.equal(m.headers.hasError, false);
  assert.equal(sc.decode(m.data), "body");
  // A header-only message with an empty body.
  const h2 = headers();
  h2.set("Only", "headers");
  nc.publish(subj, undefined, { headers: h2 });
  const [m2] = await sub.next(1);
  assert.equal(m2.data.length, 0);
  assert.equal(m2.headers.get("Only"), "headers");
  await nc.close();
});

test("request with headers is answered with headers", async () => {
  const nc = await conn();
  const subj = uniq("hdr.req.");
  nc.subscribe(subj, {
    callback: (_e, m) => {
      const h = headers();
      h.set("Reply-To-Id", m.headers?.get("Req-Id") ?? "missing");
      m.respond(m.data, { headers: h });
    },
  });
  await nc.flush();
  const h = headers();
  h.set("Req-Id", "42");
  const r = await nc.request(subj, sc.encode("x"), { headers: h, timeout: 2000 });
  assert.equal(r.headers?.get("Reply-To-Id"), "42");
  await nc.close();
});

test("no responders fails a request at once", async () => {
  const nc = await conn();
  const started = Date.now();
  await assert.rejects(
    nc.request(uniq("nobody.home."), sc.encode("?"), { timeout: 5000 }),
    (err) => err.code === ErrorCode.NoResponders,
  );
  assert.ok(Date.now() - started < 4000, "no responders should not wait for the timeout");
  await assert.rejects(
    nc.request(uniq("nobody.home."), sc.encode("?"), { timeout: 5000, noMux: true }),
    (err) => err.code === ErrorCode.NoResponders,
  );
  await nc.close();
});

test("request times out when a responder stays silent", async () => {
  const nc = await conn();
  const subj = uniq("silent.");
  nc.subscribe(subj, { callback: () => {} });
  await nc.flush();
  await assert.rejects(
    nc.request(subj, sc.encode("?"), { timeout: 300 }),
    (err) => err.code === ErrorCode.Timeout,
  );
  await nc.close();
});

test("max messages auto-unsubscribes", async () => {
  const nc = await conn();
  const subj = uniq("max.");
  const sub = nc.subscribe(subj, { max: 3 });
  await nc.flush();
  for (let i = 0; i < 10; i++) nc.publish(subj, sc.encode(String(i)));
  const got = [];
  await within(
    (async () => {
      for await (const m of sub) got.push(sc.decode(m.data));
    })(),
    5000,
    "auto-unsubscribed iterator end",
  );
  assert.deepEqual(got, ["0", "1", "2"]);
  assert.equal(sub.isClosed(), true);
  // Server-side unsub with max: a later subscription on the same connection is unaffected.
  const raw2 = nc.subscribe(subj);
  raw2.unsubscribe(2);
  const sub2 = collect(raw2);
  nc.publish(subj, sc.encode("a"));
  nc.publish(subj, sc.encode("b"));
  nc.publish(subj, sc.encode("c"));
  assert.deepEqual((await sub2.next(2)).map((m) => sc.decode(m.data)), ["a", "b"]);
  await nc.close();
});

test("unsubscribe stops delivery", async () => {
  const nc = await conn();
  const subj = uniq("unsub.");
  const raw = nc.subscribe(subj);
  const sub = collect(raw);
  const watcher = collect(nc.subscribe(subj));
  nc.publish(subj, sc.encode("1"));
  await sub.next(1);
  raw.unsubscribe();
  nc.publish(subj, sc.encode("2"));
  await nc.flush();
  assert.deepEqual((await watcher.next(2)).map((m) => sc.decode(m.data)), ["1", "2"]);
  assert.equal(raw.getProcessed(), 1);
  assert.equal(sub.buffered, 0);
  await nc.close();
});

test("noEcho hides a connection's own messages", async () => {
  const quiet = await conn({ noEcho: true });
  const other = await conn();
  const subj = uniq("echo.");
  const mine = collect(quiet.subscribe(subj));
  const theirs = collect(other.subscribe(subj));
  await quiet.flush();
  await other.flush();
  quiet.publish(subj, sc.encode("from-quiet"));
  other.publish(subj, sc.encode("from-other"));
  await quiet.flush();
  assert.deepEqual((await theirs.next(2)).map((m) => sc.decode(m.data)).sort(), [
    "from-other",
    "from-quiet",
  ]);
  assert.deepEqual((await mine.next(1)).map((m) => sc.decode(m.data)), ["from-other"]);
  await quiet.flush();
  assert.equal(mine.buffered, 0, "own message echoed");
  await quiet.close();
  await other.close();
});

test("subscription drain delivers what was already sent", async () => {
  const nc = await conn();
  const subj = uniq("drain.sub.");
  const got = [];
  const sub = nc.subscribe(subj, { callback: (_e, m) => got.push(sc.decode(m.data)) });
  await nc.flush();
  for (let i = 0; i < 50; i++) nc.publish(subj, sc.encode(String(i)));
  await sub.drain();
  assert.equal(got.length, 50);
  assert.equal(sub.isClosed(), true);
  await nc.close();
});

test("connection drain finishes in-flight work then closes", async () => {
  const pub = await conn();
  const nc = await conn();
  const subj = uniq("drain.conn.");
  let n = 0;
  nc.subscribe(subj, { callback: () => (n += 1) });
  await nc.flush();
  for (let i = 0; i < 100; i++) pub.publish(subj, sc.encode(String(i)));
  await pub.flush();
  // The publisher's flush made the server process all 100 before answering PONG, and
  // the server delivers to `nc` in order before anything `nc` asks later.
  await nc.drain();
  assert.equal(n, 100);
  assert.equal(nc.isClosed(), true);
  await pub.close();
});

test("large payload near max_payload round-trips", async () => {
  const nc = await conn();
  const subj = uniq("big.");
  const size = Math.min(nc.info.max_payload, 1024 * 1024) - 64;
  const data = new Uint8Array(size);
  for (let i = 0; i < size; i++) data[i] = i % 251;
  const sub = collect(nc.subscribe(subj));
  nc.publish(subj, data);
  const [m] = await sub.next(1);
  assert.equal(m.data.length, size);
  assert.equal(m.data[size - 1], (size - 1) % 251);
  await nc.close();
});

test("an inbox-based manual reply works", async () => {
  const nc = await conn();
  const subj = uniq("manual.");
  const inbox = createInbox();
  const replies = collect(nc.subscribe(inbox));
  nc.subscribe(subj, { callback: (_e, m) => nc.publish(m.reply, sc.encode("pong")) });
  await nc.flush();
  nc.publish(subj, sc.encode("ping"), { reply: inbox });
  const [m] = await replies.next(1);
  assert.equal(sc.decode(m.data), "pong");
  await nc.close();
});

test("a micro service answers requests and discovery", async () => {
  const nc = await conn();
  const name = uniq("svc");
  const srv = await nc.services.add({ name, version: "1.0.0", description: "echo" });
  const subj = uniq("svc.echo.");
  srv.addEndpoint("echo", { subject: subj, handler: (_err, m) => m.respond(m.data) });
  const r = await nc.request(subj, sc.encode("hi"), { timeout: 2000 });
  assert.equal(sc.decode(r.data), "hi");
  const client = nc.services.client();
  const pings = [];
  for await (const p of await client.ping(name)) pings.push(p.name);
  assert.deepEqual(pings, [name]);
  const stats = [];
  for await (const s of await client.stats(name)) stats.push(s.endpoints[0].num_requests);
  assert.deepEqual(stats, [1]);
  const infos = [];
  for await (const i of await client.info(name, srv.info().id)) infos.push(i.endpoints[0].subject);
  assert.deepEqual(infos, [subj]);
  await srv.stop();
  await nc.close();
});
