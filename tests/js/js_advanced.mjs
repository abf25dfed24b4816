// JetStream features nats.js users reach for beyond the basics: the legacy push/pull
// subscription APIs, queue-group push consumers with flow control, direct get, limits,
// rollups, sealed streams, concurrent publishes, consumer updates, multi-filter consumers
// and inactive ephemeral consumers.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  AckPolicy,
  DeliverPolicy,
  StringCodec,
  consumerOpts,
  createInbox,
  headers,
} from "nats";
import { addStream, conn, uniq, within } from "./lib.mjs";

const sc = StringCodec();

async function setup(cfg = {}) {
  const nc = await conn();
  const jsm = await nc.jetstreamManager();
  const js = nc.jetstream();
  const name = uniq("A");
  await addStream(jsm, { name, subjects: [`${name}.>`], ...cfg });
  return { nc, jsm, js, name };
}

async function eventually(fn, what, timeoutMs = 8000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function apiErr(p) {
  try {
    await p;
  } catch (err) {
    assert.ok(err.api_error, `not an API error: ${err}`);
    return err.api_error.err_code;
  }
  assert.fail("call should have failed");
}

test("legacy js.subscribe push consumer with explicit acks", async () => {
  const { nc, jsm, js, name } = await setup();
  for (let i = 0; i < 5; i++) await js.publish(`${name}.a`, sc.encode(`m${i}`));
  const opts = consumerOpts().durable("legacy").deliverTo(createInbox()).ackExplicit().manualAck();
  const sub = await js.subscribe(`${name}.a`, opts);
  const got = [];
  await within(
    (async () => {
      for await (const m of sub) {
        got.push(sc.decode(m.data));
        m.ack();
        if (got.length === 5) break;
      }
    })(),
    5000,
    "push deliveries",
  );
  assert.deepEqual(got, ["m0", "m1", "m2", "m3", "m4"]);
  const ci = await jsm.consumers.info(name, "legacy");
  assert.equal(ci.delivered.stream_seq, 5);
  await jsm.streams.delete(name);
  await nc.close();
});

test("push consumer in a queue group shares the messages", async () => {
  const { nc, jsm, js, name } = await setup();
  const total = 200;
  await Promise.all(
    Array.from({ length: total }, (_, i) => js.publish(`${name}.q`, sc.encode(`${i}`))),
  );
  const seen = new Set();
  const perSub = [0, 0];
  let finish;
  const all = new Promise((r) => (finish = r));
  const subs = [];
  for (let i = 0; i < 2; i++) {
    const o = consumerOpts()
      .durable("grp")
      .queue("grp")
      .deliverTo(`${name}-deliver`)
      .ackExplicit()
      .callback((err, m) => {
        if (err || !m) return;
        seen.add(m.info.streamSequence);
        perSub[i] += 1;
        m.ack();
        if (seen.size === total) finish();
      });
    subs.push(await js.subscribe(`${name}.q`, o));
  }
  await within(all, 15000, `all ${total} messages (have ${seen.size})`);
  assert.equal(perSub[0] + perSub[1], total, `duplicates: ${perSub}`);
  const ci = await jsm.consumers.info(name, "grp");
  assert.equal(ci.config.deliver_group, "grp");
  for (const s of subs) s.unsubscribe();
  await jsm.streams.delete(name);
  await nc.close();
});

test("push consumer with flow control and idle heartbeats", async () => {
  const { nc, jsm, js, name } = await setup();
  const total = 300;
  const payload = new Uint8Array(8192).fill(65);
  await Promise.all(Array.from({ length: total }, () => js.publish(`${name}.f`, payload)));
  const seqs = [];
  let finish;
  const all = new Promise((r) => (finish = r));
  const o = consumerOpts()
    .durable("fc")
    .deliverTo(createInbox())
    .ackExplicit()
    .flowControl()
    .idleHeartbeat(500)
    .callback((err, m) => {
      if (err || !m) return;
      seqs.push(m.info.streamSequence);
      m.ack();
      if (seqs.length === total) finish();
    });
  const sub = await js.subscribe(`${name}.f`, o);
  await within(all, 20000, `flow-controlled delivery (have ${seqs.length})`);
  assert.deepEqual(seqs, Array.from({ length: total }, (_, i) => i + 1));
  const ci = await jsm.consumers.info(name, "fc");
  assert.equal(ci.config.flow_control, true);
  assert.equal(ci.config.idle_heartbeat, 500_000_000);
  sub.unsubscribe();
  await jsm.streams.delete(name);
  await nc.close();
});

test("legacy pullSubscribe and js.fetch", async () => {
  const { nc, jsm, js, name } = await setup();
  for (let i = 0; i < 6; i++) await js.publish(`${name}.p`, sc.encode(`m${i}`));
  const sub = await js.pullSubscribe(`${name}.p`, consumerOpts().durable("ps").ackExplicit());
  const got = [];
  const done = (async () => {
    for await (const m of sub) {
      got.push(sc.decode(m.data));
      m.ack();
      if (got.length === 3) break;
    }
  })();
  sub.pull({ batch: 3, expires: 2000 });
  await within(done, 5000, "pullSubscribe batch");
  assert.deepEqual(got, ["m0", "m1", "m2"]);
  const rest = [];
  for await (const m of js.fetch(name, "ps", { batch: 10, expires: 1000 })) {
    rest.push(sc.decode(m.data));
    m.ack();
  }
  assert.deepEqual(rest, ["m3", "m4", "m5"]);
  await jsm.streams.delete(name);
  await nc.close();
});

test("direct get by sequence, last and next by subject, multi last", async () => {
  const { nc, jsm, js, name } = await setup({ allow_direct: true });
  await js.publish(`${name}.x`, sc.encode("x1"));
  await js.publish(`${name}.y`, sc.encode("y1"));
  await js.publish(`${name}.x`, sc.encode("x2"));
  const m1 = await jsm.direct.getMessage(name, { seq: 2 });
  assert.equal(m1.subject, `${name}.y`);
  assert.equal(m1.seq, 2);
  assert.equal(sc.decode(m1.data), "y1");
  const last = await jsm.direct.getMessage(name, { last_by_subj: `${name}.x` });
  assert.equal(last.seq, 3);
  const next = await jsm.direct.getMessage(name, { next_by_subj: `${name}.x`, seq: 2 });
  assert.equal(next.seq, 3);
  await assert.rejects(jsm.direct.getMessage(name, { seq: 99 }));
  // Last message of each listed subject in one request (server 2.10+ multi_last).
  const batch = await jsm.direct.getBatch(name, { multi_last: [`${name}.x`, `${name}.y`] });
  const seqs = [];
  for await (const m of batch) seqs.push(m.seq);
  assert.deepEqual(seqs, [2, 3]);
  await jsm.streams.delete(name);
  await nc.close();
});

test("many concurrent publishes get distinct sequences", async () => {
  const { nc, jsm, js, name } = await setup();
  const acks = await Promise.all(
    Array.from({ length: 300 }, (_, i) => js.publish(`${name}.c`, sc.encode(String(i)))),
  );
  const seqs = acks.map((a) => a.seq).sort((a, b) => a - b);
  assert.deepEqual(seqs, Array.from({ length: 300 }, (_, i) => i + 1));
  assert.equal((await jsm.streams.info(name)).state.messages, 300);
  await jsm.streams.delete(name);
  await nc.close();
});

test("per-subject limit, max_msg_size and max_bytes", async () => {
  const { nc, jsm, js, name } = await setup({
    max_msgs_per_subject: 2,
    max_msg_size: 100,
    max_bytes: 10_000,
  });
  for (let i = 0; i < 5; i++) await js.publish(`${name}.s`, sc.encode(`${i}`));
  await js.publish(`${name}.t`, sc.encode("t"));
  let si = await jsm.streams.info(name);
  assert.equal(si.state.messages, 3);
  assert.equal(si.config.max_msgs_per_subject, 2);
  assert.equal(await apiErr(js.publish(`${name}.s`, new Uint8Array(200))), 10054);
  for (let i = 0; i < 200; i++) await js.publish(`${name}.m${i}`, new Uint8Array(90));
  si = await jsm.streams.info(name);
  assert.ok(si.state.bytes <= 10_000, `bytes ${si.state.bytes}`);
  assert.ok(si.state.messages < 200);
  await jsm.streams.delete(name);
  await nc.close();
});

test("max_age expires messages", async () => {
  const { nc, jsm, js, name } = await setup({ max_age: 1_000_000_000 });
  await js.publish(`${name}.e`, sc.encode("old"));
  assert.equal((await jsm.streams.info(name)).state.messages, 1);
  await eventually(async () => (await jsm.streams.info(name)).state.messages === 0, "expiry");
  const si = await jsm.streams.info(name);
  assert.equal(si.state.last_seq, 1);
  await jsm.streams.delete(name);
  await nc.close();
});

test("rollup by subject keeps only the rollup message", async () => {
  const { nc, jsm, js, name } = await setup({ allow_rollup_hdrs: true });
  for (let i = 0; i < 4; i++) await js.publish(`${name}.r`, sc.encode(`${i}`));
  await js.publish(`${name}.other`, sc.encode("stays"));
  const h = headers();
  h.set("Nats-Rollup", "sub");
  await js.publish(`${name}.r`, sc.encode("rolled"), { headers: h });
  const si = await jsm.streams.info(name, { subjects_filter: ">" });
  assert.equal(si.state.messages, 2);
  assert.equal(si.state.subjects[`${name}.r`], 1);
  // Rollups are refused where the stream does not allow them.
  const other = await setup();
  const code = await apiErr(other.js.publish(`${other.name}.r`, sc.encode("x"), { headers: h }));
  assert.equal(code, 10111);
  await other.jsm.streams.delete(other.name);
  await other.nc.close();
  await jsm.streams.delete(name);
  await nc.close();
});

test("a sealed stream refuses writes, deletes and purges", async () => {
  const { nc, jsm, js, name } = await setup();
  await js.publish(`${name}.s`, sc.encode("1"));
  const si = await jsm.streams.info(name);
  const sealed = await jsm.streams.update(name, { ...si.config, sealed: true });
  assert.equal(sealed.config.sealed, true);
  assert.equal(sealed.config.deny_delete, true);
  assert.equal(sealed.config.deny_purge, true);
  await assert.rejects(js.publish(`${name}.s`, sc.encode("2")));
  await assert.rejects(jsm.streams.purge(name));
  await assert.rejects(jsm.streams.deleteMessage(name, 1));
  assert.equal((await jsm.streams.info(name)).state.messages, 1);
  await jsm.streams.delete(name);
  await nc.close();
});

test("consumer update changes mutable fields only", async () => {
  const { nc, jsm, name } = await setup();
  await jsm.consumers.add(name, {
    durable_name: "u",
    ack_policy: AckPolicy.Explicit,
    max_ack_pending: 10,
  });
  const up = await jsm.consumers.update(name, "u", {
    description: "updated",
    max_ack_pending: 20,
  });
  assert.equal(up.config.description, "updated");
  assert.equal(up.config.max_ack_pending, 20);
  // The ack policy cannot change.
  await assert.rejects(
    jsm.consumers.add(name, { durable_name: "u", ack_policy: AckPolicy.None }),
  );
  await jsm.streams.delete(name);
  await nc.close();
});

test("a consumer with several filter subjects", async () => {
  const { nc, jsm, js, name } = await setup();
  for (const s of ["a", "b", "c", "a", "b", "c"]) await js.publish(`${name}.${s}`, sc.encode(s));
  await jsm.consumers.add(name, {
    durable_name: "multi",
    ack_policy: AckPolicy.Explicit,
    filter_subjects: [`${name}.a`, `${name}.c`],
  });
  const c = await js.consumers.get(name, "multi");
  const got = [];
  for await (const m of await c.fetch({ max_messages: 10, expires: 1000 })) {
    got.push(m.info.streamSequence);
    m.ack();
  }
  assert.deepEqual(got, [1, 3, 4, 6]);
  const ci = await c.info();
  assert.deepEqual(ci.config.filter_subjects, [`${name}.a`, `${name}.c`]);
  await jsm.streams.delete(name);
  await nc.close();
});

test("an inactive ephemeral consumer goes away", async () => {
  const { nc, jsm, name } = await setup();
  const ci = await jsm.consumers.add(name, {
    ack_policy: AckPolicy.Explicit,
    inactive_threshold: 500_000_000,
  });
  await eventually(async () => {
    try {
      await jsm.consumers.info(name, ci.name);
      return false;
    } catch (e) {
      return e.api_error?.err_code === 10014;
    }
  }, "ephemeral consumer removal");
  await jsm.streams.delete(name);
  await nc.close();
});

test("deliver last per subject", async () => {
  const { nc, jsm, js, name } = await setup();
  for (const [s, v] of [["a", 1], ["b", 2], ["a", 3], ["c", 4], ["b", 5]]) {
    await js.publish(`${name}.${s}`, sc.encode(String(v)));
  }
  await jsm.consumers.add(name, {
    durable_name: "lps",
    ack_policy: AckPolicy.None,
    deliver_policy: DeliverPolicy.LastPerSubject,
    filter_subject: `${name}.*`,
  });
  const c = await js.consumers.get(name, "lps");
  const got = [];
  for await (const m of await c.fetch({ max_messages: 10, expires: 1000 })) {
    got.push(sc.decode(m.data));
  }
  assert.deepEqual(got, ["3", "4", "5"]);
  await jsm.streams.delete(name);
  await nc.close();
});

test("stream first_seq and an API error for a bad config", async () => {
  const nc = await conn();
  const jsm = await nc.jetstreamManager();
  const js = nc.jetstream();
  const name = uniq("FS");
  await addStream(jsm, { name, subjects: [name], first_seq: 100 });
  const pa = await js.publish(name, sc.encode("x"));
  assert.equal(pa.seq, 100);
  await jsm.streams.delete(name);
  // A stream whose subjects overlap another stream's is refused.
  const a = uniq("OV");
  await addStream(jsm, { name: a, subjects: [`${a}.>`] });
  assert.equal(await apiErr(addStream(jsm, { name: uniq("OV"), subjects: [`${a}.x`] })), 10065);
  await jsm.streams.delete(a);
  await nc.close();
});
