// Object store through nats.js: put (stream and blob, multi-chunk), get, info, list,
// replace, delete, update metadata, links, status, seal, destroy.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { REPLICAS, addStream, conn, uniq } from "./lib.mjs";

function bytes(n, seed = 7) {
  const b = new Uint8Array(n);
  let x = seed;
  for (let i = 0; i < n; i++) {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    b[i] = x & 0xff;
  }
  return b;
}

function streamOf(data, pieceSize = 10_000) {
  let off = 0;
  return new ReadableStream({
    pull(controller) {
      if (off >= data.length) {
        controller.close();
        return;
      }
      controller.enqueue(data.subarray(off, off + pieceSize));
      off += pieceSize;
    },
  });
}

async function readAll(rs) {
  const parts = [];
  const reader = rs.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    parts.push(value);
  }
  return Buffer.concat(parts);
}

async function store() {
  const nc = await conn();
  const js = nc.jetstream();
  const name = uniq("os");
  if (REPLICAS > 1) {
    // nats.js 2.x copies its `replicas` option into the stream config it sends, which strict
    // servers (nats-server 2.11+, jetraft) refuse as an unknown field; so the replicated
    // store's stream is made first, as nats.js would make it, and views.os() binds to it.
    const jsm = await nc.jetstreamManager();
    await addStream(jsm, {
      name: `OBJ_${name}`,
      subjects: [`$O.${name}.C.>`, `$O.${name}.M.>`],
      allow_direct: true,
      allow_rollup_hdrs: true,
      discard: "new",
    });
  }
  const os = await js.views.os(name);
  return { nc, js, os, name };
}

test("put from a stream in chunks, get it back, digest checked", async () => {
  const { nc, os, name } = await store();
  const data = bytes(300_000);
  const info = await os.put({ name: "big.bin", options: { max_chunk_size: 64 * 1024 } }, streamOf(data));
  assert.equal(info.name, "big.bin");
  assert.equal(info.bucket, name);
  assert.equal(info.size, data.length);
  assert.equal(info.chunks, Math.ceil(data.length / (64 * 1024)));
  // nats.js writes the digest base64url-encoded with padding.
  const want = "SHA-256=" + createHash("sha256").update(data).digest("base64").replaceAll("+", "-").replaceAll("/", "_");
  assert.equal(info.digest, want);
  const r = await os.get("big.bin");
  const got = await readAll(r.data);
  assert.equal((await r.error) ?? null, null);
  assert.equal(got.length, data.length);
  assert.ok(Buffer.compare(got, Buffer.from(data)) === 0, "content differs");
  await os.destroy();
  await nc.close();
});

test("blobs: put, get, replace, empty", async () => {
  const { nc, os } = await store();
  await os.putBlob({ name: "a.txt", description: "first" }, new TextEncoder().encode("hello"));
  assert.equal(new TextDecoder().decode(await os.getBlob("a.txt")), "hello");
  await os.putBlob({ name: "a.txt" }, new TextEncoder().encode("replaced"));
  assert.equal(new TextDecoder().decode(await os.getBlob("a.txt")), "replaced");
  const empty = await os.putBlob({ name: "empty" }, new Uint8Array(0));
  assert.equal(empty.size, 0);
  assert.equal((await os.getBlob("empty")).length, 0);
  assert.equal(await os.getBlob("missing"), null);
  assert.equal(await os.info("missing"), null);
  // Replacing purged the old chunks: the stream holds one chunk + one meta per object.
  const st = await os.status();
  assert.equal(st.streamInfo.state.messages, 3);
  await os.destroy();
  await nc.close();
});

test("list, info and delete", async () => {
  const { nc, os } = await store();
  for (const n of ["one", "two", "dir/three"]) {
    await os.putBlob({ name: n }, new TextEncoder().encode(n));
  }
  const names = (await os.list()).map((i) => i.name).sort();
  assert.deepEqual(names, ["dir/three", "one", "two"]);
  const info = await os.info("two");
  assert.equal(info.size, 3);
  assert.equal(info.deleted, false);
  const pr = await os.delete("two");
  assert.equal(pr.success, true);
  assert.equal(await os.getBlob("two"), null);
  const after = (await os.list()).map((i) => i.name).sort();
  assert.deepEqual(after, ["dir/three", "one"]);
  await os.destroy();
  await nc.close();
});

test("update metadata and rename", async () => {
  const { nc, os } = await store();
  await os.putBlob({ name: "old" }, new TextEncoder().encode("payload"));
  await os.update("old", { name: "new", description: "renamed" });
  assert.equal(await os.info("old"), null);
  const info = await os.info("new");
  assert.equal(info.description, "renamed");
  assert.equal(new TextDecoder().decode(await os.getBlob("new")), "payload");
  await os.destroy();
  await nc.close();
});

test("links to objects resolve to the target", async () => {
  const { nc, os } = await store();
  const target = await os.putBlob({ name: "target" }, new TextEncoder().encode("linked data"));
  await os.link("alias", target);
  const li = await os.info("alias");
  assert.equal(li.options.link.name, "target");
  assert.equal(new TextDecoder().decode(await os.getBlob("alias")), "linked data");
  await os.destroy();
  await nc.close();
});

test("status, seal and destroy", async () => {
  const { nc, js, os, name } = await store();
  await os.putBlob({ name: "x" }, new TextEncoder().encode("12345"));
  let st = await os.status();
  assert.equal(st.bucket, name);
  assert.equal(st.sealed, false);
  assert.equal(st.replicas, REPLICAS);
  assert.ok(st.size > 0);
  st = await os.seal();
  assert.equal(st.sealed, true);
  await assert.rejects(os.putBlob({ name: "y" }, new TextEncoder().encode("no")));
  assert.equal(new TextDecoder().decode(await os.getBlob("x")), "12345");
  assert.equal(await os.destroy(), true);
  const jsm = await js.jetstreamManager();
  await assert.rejects(jsm.streams.info(`OBJ_${name}`), (e) => e.message === "stream not found");
  await nc.close();
});

test("watch reports puts", async () => {
  const { nc, os } = await store();
  await os.putBlob({ name: "before" }, new TextEncoder().encode("1"));
  const w = await os.watch({ includeHistory: true });
  const seen = [];
  const done = (async () => {
    for await (const info of w) {
      if (info === null) continue; // end of initial data marker
      seen.push(info.name);
      if (seen.length === 2) break;
    }
  })();
  await os.putBlob({ name: "after" }, new TextEncoder().encode("2"));
  await done;
  assert.deepEqual(seen, ["before", "after"]);
  await os.destroy();
  await nc.close();
});
