// Stand-in for @std/io's writeAll: keep writing until the whole buffer is out.
export async function writeAll(w: { write(p: Uint8Array): Promise<number> }, data: Uint8Array): Promise<void> {
  let off = 0;
  while (off < data.length) off += await w.write(data.subarray(off));
}
