// JetStream streams through nats.js: jetstreamManager CRUD, purge, list, message get/delete,
// js.publish with Nats-Msg-Id dedupe and Nats-Expected-* headers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { DiscardPolicy, RetentionPolicy, StorageType, StringCodec, headers } from "nats";
import { REPLICAS, addStream, conn, uniq } from "./lib.mjs";

const sc = StringCodec();

/** The JetStream API error code of a rejected call (throws if the call did not fail so). */
async function apiErr(p) {
  try {
    await p;
  } catch (err) {
    assert.ok(err.api_error, `not an API error: ${err}`);
    return err.api_error.err_code;
  }
  assert.fail("call should have failed");
}

test("account info reports JetStream limits and usage", async () => {
  const nc = await conn();
  const jsm = await nc.jetstreamManager();
  const ai = await jsm.getAccountInfo();
  assert.equal(typeof ai.memory, "number");
  assert.equal(typeof ai.storage, "number");
  assert.equal(typeof ai.streams, "number");
  assert.ok(ai.limits, "limits missing");
  assert.equal(typeof ai.api.total, "number");
  await nc.close();
});

test("streams add, info, update, delete", async () => {
  const nc = await conn();
  const jsm = await nc.jetstreamManager();
  const name = uniq("ST");
  const si = await addStream(jsm, { name, subjects: [`${name}.>`], max_msgs: 100 });
  assert.equal(si.config.name, name);
  assert.deepEqual(si.config.subjects, [`${name}.>`]);
  assert.equal(si.config.max_msgs, 100);
  assert.equal(si.config.storage, StorageType.File);
  assert.equal(si.config.retention, RetentionPolicy.Limits);
  assert.equal(si.config.discard, DiscardPolicy.Old);
  assert.equal(si.config.num_replicas, REPLICAS);
  if (REPLICAS > 1) {
    // A replicated stream names its leader and the other replicas.
    assert.ok(si.cluster?.leader, `no leader in ${JSON.stringify(si.cluster)}`);
    assert.equal(si.cluster.replicas?.length, REPLICAS - 1, JSON.stringify(si.cluster));
  }
  assert.equal(si.state.messages, 0);
  assert.equal(si.state.first_seq, 0);
  assert.ok(si.created, "created timestamp missing");

  // Creating again with the same config is idempotent; with another config it is an error.
  const again = await addStream(jsm, { name, subjects: [`${name}.>`], max_msgs: 100 });
  assert.equal(again.config.name, name);
  assert.equal(
    await apiErr(addStream(jsm, { name, subjects: [`${name}.other`], max_msgs: 100 })),
    10058,
  );

  const up = await jsm.streams.update(name, { subjects: [`${name}.>`, `${name}x.*`], max_msgs: 5 });
  assert.equal(up.config.max_msgs, 5);
  assert.deepEqual(up.config.subjects, [`${name}.>`, `${name}x.*`]);
  const info = await jsm.streams.info(name);
  assert.equal(info.config.max_msgs, 5);

  // Changing storage type is not allowed.
  assert.ok(
    (await apiErr(jsm.streams.update(name, { ...info.config, storage: StorageType.Memory }))) > 0,
  );

  assert.equal(await jsm.streams.delete(name), true);
  assert.equal(await apiErr(jsm.streams.info(name)), 10059);
  assert.equal(await apiErr(jsm.streams.delete(name)), 10059);
  await nc.close();
});

test("memory storage and max_msgs limit", async () => {
  const nc = await conn();
  const jsm = await nc.jetstreamManager();
  const js = nc.jetstream();
  const name = uniq("MEM");
  await addStream(jsm, {
    name,
    subjects: [`${name}.*`],
    storage: StorageType.Memory,
    max_msgs: 3,
  });
  for (let i = 1; i <= 5; i++) await js.publish(`${name}.a`, sc.encode(String(i)));
  const si = await jsm.streams.info(name);
  assert.equal(si.config.storage, StorageType.Memory);
  assert.equal(si.state.messages, 3);
  assert.equal(si.state.first_seq, 3);
  assert.equal(si.state.last_seq, 5);
  await jsm.streams.delete(name);
  await nc.close();
});

test("discard new rejects publishes over the limit", async () => {
  const nc = await conn();
  const jsm = await nc.jetstreamManager();
  const js = nc.jetstream();
  const name = uniq("DN");
  await addStream(jsm, { name, subjects: [name], max_msgs: 2, discard: DiscardPolicy.New });
  await js.publish(name, sc.encode("1"));
  await js.publish(name, sc.encode("2"));
  assert.equal(await apiErr(js.publish(name, sc.encode("3"))), 10077);
  assert.equal((await jsm.streams.info(name)).state.messages, 2);
  await jsm.streams.delete(name);
  await nc.close();
});

test("publish returns acks with stream and sequence", async () => {
  const nc = await conn();
  const jsm = await nc.jetstreamManager();
  const js = nc.jetstream();
  const name = uniq("PA");
  await addStream(jsm, { name, subjects: [`${name}.*`] });
  const a1 = await js.publish(`${name}.a`, sc.encode("one"));
  const a2 = await js.publish(`${name}.b`, sc.encode("two"));
  assert.equal(a1.stream, name);
  assert.equal(a1.seq, 1);
  assert.equal(a2.seq, 2);
  assert.equal(a1.duplicate, false);
  // A subject no stream captures: the request gets no responders.
  await assert.rejects(js.publish(uniq("nostream."), sc.encode("x")), (e) => e.code === "503");
  await jsm.streams.delete(name);
  await nc.close();
});

test("msgID dedupe inside the duplicate window", async () => {
  const nc = await conn();
  const jsm = await nc.jetstreamManager();
  const js = nc.jetstream();
  const name = uniq("DD");
  await addStream(jsm, { name, subjects: [name], duplicate_window: 60_000_000_000 });
  const a = await js.publish(name, sc.encode("x"), { msgID: "id-1" });
  const b = await js.publish(name, sc.encode("x"), { msgID: "id-1" });
  const c = await js.publish(name, sc.encode("y"), { msgID: "id-2" });
  assert.equal(a.duplicate, false);
  assert.equal(b.duplicate, true);
  assert.equal(b.seq, a.seq);
  assert.equal(c.seq, a.seq + 1);
  const si = await jsm.streams.info(name);
  assert.equal(si.state.messages, 2);
  assert.equal(si.config.duplicate_window, 60_000_000_000);
  await jsm.streams.delete(name);
  await nc.close();
});

test("expect headers guard publishes", async () => {
  const nc = await conn();
  const jsm = await nc.jetstreamManager();
  const js = nc.jetstream();
  const name = uniq("EX");
  await addStream(jsm, { name, subjects: [`${name}.*`] });
  await js.publish(`${name}.a`, sc.encode("1"), { msgID: "m1" });
  // Expected stream.
  await js.publish(`${name}.a`, sc.encode("2"), { expect: { streamName: name } });
  assert.equal(
    await apiErr(js.publish(`${name}.a`, sc.encode("x"), { expect: { streamName: "WRONG" } })),
    10060,
  );
  // Expected last sequence.
  await js.publish(`${name}.b`, sc.encode("3"), { expect: { lastSequence: 2 } });
  assert.equal(
    await apiErr(js.publish(`${name}.b`, sc.encode("x"), { expect: { lastSequence: 1 } })),
    10071,
  );
  // Expected last message id.
  await js.publish(`${name}.a`, sc.encode("4"), { msgID: "m4" });
  await js.publish(`${name}.a`, sc.encode("5"), { expect: { lastMsgID: "m4" } });
  assert.equal(
    await apiErr(js.publish(`${name}.a`, sc.encode("x"), { expect: { lastMsgID: "m1" } })),
    10070,
  );
  // Expected last sequence per subject (b's last is 3; 0 means "no message yet").
  await js.publish(`${name}.b`, sc.encode("6"), { expect: { lastSubjectSequence: 3 } });
  await js.publish(`${name}.c`, sc.encode("7"), { expect: { lastSubjectSequence: 0 } });
  assert.equal(
    await apiErr(js.publish(`${name}.b`, sc.encode("x"), { expect: { lastSubjectSequence: 3 } })),
    10071,
  );
  const si = await jsm.streams.info(name);
  assert.equal(si.state.messages, 7);
  await jsm.streams.delete(name);
  await nc.close();
});

test("purge all, by subject, keep and up to a sequence", async () => {
  const nc = await conn();
  const jsm = await nc.jetstreamManager();
  const js = nc.jetstream();
  const name = uniq("PU");
  await addStream(jsm, { name, subjects: [`${name}.*`] });
  for (let i = 0; i < 10; i++) await js.publish(`${name}.${i % 2 ? "odd" : "even"}`, sc.encode(`${i}`));
  let pr = await jsm.streams.purge(name, { filter: `${name}.odd` });
  assert.equal(pr.success, true);
  assert.equal(pr.purged, 5);
  pr = await jsm.streams.purge(name, { filter: `${name}.even`, keep: 2 });
  assert.equal(pr.purged, 3);
  let si = await jsm.streams.info(name);
  assert.equal(si.state.messages, 2);
  for (let i = 0; i < 4; i++) await js.publish(`${name}.odd`, sc.encode(`x${i}`));
  // seq: purge everything below sequence 13 (messages 11 and 12 are odd ones published above).
  pr = await jsm.streams.purge(name, { seq: 13 });
  si = await jsm.streams.info(name);
  assert.equal(si.state.first_seq, 13);
  assert.equal(si.state.messages, 2);
  pr = await jsm.streams.purge(name);
  assert.equal(pr.purged, 2);
  si = await jsm.streams.info(name);
  assert.equal(si.state.messages, 0);
  assert.equal(si.state.last_seq, 14);
  assert.equal(si.state.first_seq, 15);
  await jsm.streams.delete(name);
  await nc.close();
});

test("list and names find streams, by subject too", async () => {
  const nc = await conn();
  const jsm = await nc.jetstreamManager();
  const names = [uniq("LA"), uniq("LB")];
  for (const n of names) await addStream(jsm, { name: n, subjects: [`${n}.*`] });
  const listed = [];
  for await (const si of jsm.streams.list()) listed.push(si.config.name);
  for (const n of names) assert.ok(listed.includes(n), `${n} not listed`);
  const named = [];
  for await (const n of jsm.streams.names()) named.push(n);
  for (const n of names) assert.ok(named.includes(n), `${n} not in names`);
  const bySubject = [];
  for await (const n of jsm.streams.names(`${names[1]}.x`)) bySubject.push(n);
  assert.deepEqual(bySubject, [names[1]]);
  // find() is what js.subscribe uses to map a subject to its stream.
  assert.equal(await jsm.streams.find(`${names[0]}.y`), names[0]);
  for (const n of names) await jsm.streams.delete(n);
  await nc.close();
});

test("get and delete single messages", async () => {
  const nc = await conn();
  const jsm = await nc.jetstreamManager();
  const js = nc.jetstream();
  const name = uniq("GM");
  await addStream(jsm, { name, subjects: [`${name}.*`] });
  const h = headers();
  h.set("X-Tag", "t1");
  await js.publish(`${name}.a`, sc.encode("first"), { headers: h });
  await js.publish(`${name}.b`, sc.encode("second"));
  await js.publish(`${name}.a`, sc.encode("third"));
  const m1 = await jsm.streams.getMessage(name, { seq: 1 });
  assert.equal(m1.subject, `${name}.a`);
  assert.equal(m1.seq, 1);
  assert.equal(sc.decode(m1.data), "first");
  assert.equal(m1.header.get("X-Tag"), "t1");
  assert.ok(m1.time instanceof Date && !isNaN(m1.time.getTime()));
  const last = await jsm.streams.getMessage(name, { last_by_subj: `${name}.a` });
  assert.equal(last.seq, 3);
  assert.equal(await jsm.streams.deleteMessage(name, 2), true);
  assert.equal(await apiErr(jsm.streams.getMessage(name, { seq: 2 })), 10037);
  const si = await jsm.streams.info(name);
  assert.equal(si.state.messages, 2);
  assert.equal(si.state.num_deleted, 1);
  await jsm.streams.delete(name);
  await nc.close();
});

test("stream info with subject details", async () => {
  const nc = await conn();
  const jsm = await nc.jetstreamManager();
  const js = nc.jetstream();
  const name = uniq("SD");
  await addStream(jsm, { name, subjects: [`${name}.*`] });
  await js.publish(`${name}.a`);
  await js.publish(`${name}.a`);
  await js.publish(`${name}.b`);
  const si = await jsm.streams.info(name, { subjects_filter: ">" });
  assert.deepEqual(si.state.subjects, { [`${name}.a`]: 2, [`${name}.b`]: 1 });
  assert.equal(si.state.num_subjects, 2);
  await jsm.streams.delete(name);
  await nc.close();
});

test("workqueue retention removes acked messages", async () => {
  const nc = await conn();
  const jsm = await nc.jetstreamManager();
  const js = nc.jetstream();
  const name = uniq("WQ");
  await addStream(jsm, { name, subjects: [`${name}.*`], retention: RetentionPolicy.Workqueue });
  for (let i = 0; i < 3; i++) await js.publish(`${name}.job`, sc.encode(`${i}`));
  await jsm.consumers.add(name, { durable_name: "w", ack_policy: "explicit" });
  const c = await js.consumers.get(name, "w");
  const batch = await c.fetch({ max_messages: 3, expires: 2000 });
  let n = 0;
  for await (const m of batch) {
    await m.ackAck();
    n += 1;
  }
  assert.equal(n, 3);
  if (REPLICAS > 1) {
    // In a cluster the stream's leader removes them after the consumer committed the acks
    // (nats-server too): soon, not necessarily before the last ackAck returns.
    const deadline = Date.now() + 5000;
    while ((await jsm.streams.info(name)).state.messages > 0 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
  }
  const si = await jsm.streams.info(name);
  assert.equal(si.state.messages, 0);
  await jsm.streams.delete(name);
  await nc.close();
});
