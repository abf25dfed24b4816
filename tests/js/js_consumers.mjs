// JetStream consumers through nats.js: pull consumers (fetch / next / consume) with acks,
// nak and term, ordered consumers, consumer CRUD, and a plain push consumer.
import { test } from "node:test";
import assert from "node:assert/strict";
import { AckPolicy, DeliverPolicy, StringCodec, createInbox } from "nats";
import { addStream, collect, conn, uniq, within } from "./lib.mjs";

const sc = StringCodec();

async function setup(n, subjects = null) {
  const nc = await conn();
  const jsm = await nc.jetstreamManager();
  const js = nc.jetstream();
  const name = uniq("C");
  await addStream(jsm, { name, subjects: subjects ?? [`${name}.*`] });
  for (let i = 0; i < n; i++) await js.publish(`${name}.${i % 2 ? "b" : "a"}`, sc.encode(`m${i}`));
  return { nc, jsm, js, name };
}

async function drainFetch(iter) {
  const out = [];
  for await (const m of iter) out.push(m);
  return out;
}

test("consumer add, info, list, delete", async () => {
  const { nc, jsm, name } = await setup(4);
  const ci = await jsm.consumers.add(name, {
    durable_name: "dur",
    ack_policy: AckPolicy.Explicit,
    filter_subject: `${name}.a`,
  });
  assert.equal(ci.name, "dur");
  assert.equal(ci.stream_name, name);
  assert.equal(ci.config.durable_name, "dur");
  assert.equal(ci.config.ack_policy, AckPolicy.Explicit);
  assert.equal(ci.config.deliver_policy, DeliverPolicy.All);
  assert.equal(ci.num_pending, 2);
  assert.equal(ci.num_ack_pending, 0);
  const info = await jsm.consumers.info(name, "dur");
  assert.equal(info.config.filter_subject, `${name}.a`);
  const listed = [];
  for await (const c of jsm.consumers.list(name)) listed.push(c.name);
  assert.deepEqual(listed, ["dur"]);
  // An ephemeral consumer gets a server-chosen name.
  const eph = await jsm.consumers.add(name, { ack_policy: AckPolicy.None });
  assert.ok(eph.name.length > 0);
  assert.equal(eph.config.durable_name, undefined);
  assert.equal(await jsm.consumers.delete(name, "dur"), true);
  await assert.rejects(jsm.consumers.info(name, "dur"), (e) => e.api_error?.err_code === 10014);
  await jsm.streams.delete(name);
  await nc.close();
});

test("fetch a batch and ack each message", async () => {
  const { nc, jsm, js, name } = await setup(10);
  await jsm.consumers.add(name, { durable_name: "f", ack_policy: AckPolicy.Explicit });
  const c = await js.consumers.get(name, "f");
  const first = await drainFetch(await c.fetch({ max_messages: 4, expires: 2000 }));
  assert.deepEqual(first.map((m) => sc.decode(m.data)), ["m0", "m1", "m2", "m3"]);
  assert.equal(first[0].info.streamSequence, 1);
  assert.equal(first[3].info.deliverySequence, 4);
  assert.equal(first[3].info.pending, 6);
  assert.equal(first[0].info.redeliveryCount, 1);
  assert.equal(first[0].info.stream, name);
  assert.equal(first[0].info.consumer, "f");
  let ci = await c.info();
  assert.equal(ci.num_ack_pending, 4);
  assert.equal(ci.num_pending, 6);
  for (const m of first) assert.equal(await m.ackAck(), true);
  ci = await c.info();
  assert.equal(ci.num_ack_pending, 0);
  assert.equal(ci.ack_floor.stream_seq, 4);
  assert.equal(ci.delivered.consumer_seq, 4);
  // The rest, then an empty fetch that ends when it expires.
  const rest = await drainFetch(await c.fetch({ max_messages: 100, expires: 1000 }));
  assert.equal(rest.length, 6);
  rest.forEach((m) => m.ack());
  const started = Date.now();
  const none = await drainFetch(await c.fetch({ max_messages: 5, expires: 1000 }));
  assert.equal(none.length, 0);
  assert.ok(Date.now() - started < 5000);
  await jsm.streams.delete(name);
  await nc.close();
});

test("next returns one message, or null when none arrives", async () => {
  const { nc, jsm, js, name } = await setup(2);
  await jsm.consumers.add(name, { durable_name: "n", ack_policy: AckPolicy.Explicit });
  const c = await js.consumers.get(name, "n");
  const m1 = await c.next({ expires: 2000 });
  assert.equal(sc.decode(m1.data), "m0");
  m1.ack();
  const m2 = await c.next({ expires: 2000 });
  assert.equal(sc.decode(m2.data), "m1");
  await m2.ackAck();
  const m3 = await c.next({ expires: 1000 });
  assert.equal(m3, null);
  // A message published while a next() is waiting is delivered to it.
  const waiting = c.next({ expires: 5000 });
  await js.publish(`${name}.late`, sc.encode("late"));
  const m4 = await waiting;
  assert.equal(sc.decode(m4.data), "late");
  m4.ack();
  await jsm.streams.delete(name);
  await nc.close();
});

test("consume keeps pulling as messages arrive", async () => {
  const { nc, jsm, js, name } = await setup(5);
  await jsm.consumers.add(name, { durable_name: "cons", ack_policy: AckPolicy.Explicit });
  const c = await js.consumers.get(name, "cons");
  const iter = await c.consume({ max_messages: 3, expires: 2000 });
  const got = [];
  const done = (async () => {
    for await (const m of iter) {
      got.push(sc.decode(m.data));
      m.ack();
      if (got.length === 5) {
        for (let i = 5; i < 12; i++) await js.publish(`${name}.x`, sc.encode(`m${i}`));
      }
      if (got.length === 12) break;
    }
  })();
  await within(done, 15000, "consume 12 messages");
  assert.deepEqual(got, Array.from({ length: 12 }, (_, i) => `m${i}`));
  iter.stop();
  const ci = await c.info();
  assert.equal(ci.num_pending, 0);
  await jsm.streams.delete(name);
  await nc.close();
});

test("nak redelivers, term does not", async () => {
  const { nc, jsm, js, name } = await setup(2);
  await jsm.consumers.add(name, { durable_name: "nk", ack_policy: AckPolicy.Explicit });
  const c = await js.consumers.get(name, "nk");
  const [a, b] = await drainFetch(await c.fetch({ max_messages: 2, expires: 2000 }));
  a.nak();
  b.term();
  const again = await c.next({ expires: 3000 });
  assert.ok(again, "nak'd message not redelivered");
  assert.equal(sc.decode(again.data), "m0");
  assert.equal(again.info.redelivered, true);
  assert.equal(again.info.redeliveryCount, 2);
  await again.ackAck();
  assert.equal(await c.next({ expires: 1000 }), null);
  const ci = await c.info();
  assert.equal(ci.num_ack_pending, 0);
  assert.equal(ci.num_redelivered, 0);
  await jsm.streams.delete(name);
  await nc.close();
});

test("an unacked message is redelivered after ack_wait", async () => {
  const { nc, jsm, js, name } = await setup(1);
  await jsm.consumers.add(name, {
    durable_name: "aw",
    ack_policy: AckPolicy.Explicit,
    ack_wait: 1_000_000_000,
  });
  const c = await js.consumers.get(name, "aw");
  const m = await c.next({ expires: 2000 });
  assert.equal(m.info.redeliveryCount, 1);
  const m2 = await c.next({ expires: 5000 });
  assert.ok(m2, "not redelivered after ack_wait");
  assert.equal(m2.info.streamSequence, 1);
  assert.equal(m2.info.redeliveryCount, 2);
  m2.ack();
  await jsm.streams.delete(name);
  await nc.close();
});

test("max_ack_pending limits what is outstanding", async () => {
  const { nc, jsm, js, name } = await setup(6);
  await jsm.consumers.add(name, {
    durable_name: "map",
    ack_policy: AckPolicy.Explicit,
    max_ack_pending: 2,
  });
  const c = await js.consumers.get(name, "map");
  const got = await drainFetch(await c.fetch({ max_messages: 6, expires: 1000 }));
  assert.equal(got.length, 2);
  for (const m of got) await m.ackAck();
  const more = await drainFetch(await c.fetch({ max_messages: 6, expires: 1000 }));
  assert.equal(more.length, 2);
  assert.equal(more[0].info.streamSequence, 3);
  await jsm.streams.delete(name);
  await nc.close();
});

test("deliver policies: last, new, by start sequence", async () => {
  const { nc, jsm, js, name } = await setup(5);
  await jsm.consumers.add(name, {
    durable_name: "last",
    ack_policy: AckPolicy.None,
    deliver_policy: DeliverPolicy.Last,
  });
  await jsm.consumers.add(name, {
    durable_name: "seq",
    ack_policy: AckPolicy.None,
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: 4,
  });
  await jsm.consumers.add(name, {
    durable_name: "new",
    ack_policy: AckPolicy.None,
    deliver_policy: DeliverPolicy.New,
  });
  await js.publish(`${name}.z`, sc.encode("m5"));
  const last = await drainFetch(await (await js.consumers.get(name, "last")).fetch({ max_messages: 10, expires: 1000 }));
  assert.deepEqual(last.map((m) => sc.decode(m.data)), ["m4", "m5"]);
  const seq = await drainFetch(await (await js.consumers.get(name, "seq")).fetch({ max_messages: 10, expires: 1000 }));
  assert.deepEqual(seq.map((m) => sc.decode(m.data)), ["m3", "m4", "m5"]);
  const nw = await drainFetch(await (await js.consumers.get(name, "new")).fetch({ max_messages: 10, expires: 1000 }));
  assert.deepEqual(nw.map((m) => sc.decode(m.data)), ["m5"]);
  await jsm.streams.delete(name);
  await nc.close();
});

test("ordered consumer reads everything in order", async () => {
  const { nc, jsm, js, name } = await setup(20);
  const oc = await js.consumers.get(name);
  const batch = await drainFetch(await oc.fetch({ max_messages: 20, expires: 2000 }));
  assert.deepEqual(batch.map((m) => sc.decode(m.data)), Array.from({ length: 20 }, (_, i) => `m${i}`));
  // Filtered ordered consumer via consume(): only the .b half, in order.
  const ob = await js.consumers.get(name, { filterSubjects: [`${name}.b`] });
  const it = await ob.consume();
  const got = [];
  await within(
    (async () => {
      for await (const m of it) {
        got.push(m.info.streamSequence);
        if (got.length === 10) break;
      }
    })(),
    10000,
    "ordered consume",
  );
  assert.deepEqual(got, [2, 4, 6, 8, 10, 12, 14, 16, 18, 20]);
  await jsm.streams.delete(name);
  await nc.close();
});

test("ordered consumer from a start sequence, headers only", async () => {
  const { nc, jsm, js, name } = await setup(6);
  const oc = await js.consumers.get(name, {
    deliver_policy: DeliverPolicy.StartSequence,
    opt_start_seq: 3,
    headers_only: true,
  });
  const got = await drainFetch(await oc.fetch({ max_messages: 4, expires: 2000 }));
  assert.deepEqual(got.map((m) => m.info.streamSequence), [3, 4, 5, 6]);
  assert.ok(got.every((m) => m.data.length === 0));
  assert.ok(got.every((m) => m.headers?.get("Nats-Msg-Size") === "2"));
  await jsm.streams.delete(name);
  await nc.close();
});

test("push consumer delivers to its deliver subject", async () => {
  const { nc, jsm, name } = await setup(3);
  const inbox = createInbox();
  const sub = collect(nc.subscribe(inbox));
  await jsm.consumers.add(name, {
    durable_name: "push",
    deliver_subject: inbox,
    ack_policy: AckPolicy.Explicit,
  });
  const msgs = await sub.next(3);
  assert.deepEqual(msgs.map((m) => sc.decode(m.data)), ["m0", "m1", "m2"]);
  for (const m of msgs) {
    assert.ok(m.reply.startsWith(`$JS.ACK.${name}.push.`), m.reply);
    m.respond();
  }
  await nc.flush();
  let ci = await jsm.consumers.info(name, "push");
  for (let i = 0; i < 50 && ci.num_ack_pending > 0; i++) ci = await jsm.consumers.info(name, "push");
  assert.equal(ci.num_ack_pending, 0);
  assert.equal(ci.push_bound, true);
  await jsm.streams.delete(name);
  await nc.close();
});
