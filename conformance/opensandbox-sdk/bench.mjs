// Latency of the official SDK against sbx serve: commands.run("true"), and
// create-to-first-output (Sandbox.create, then the first stdout event of a
// command), as p50 and p90 over N runs.
//
//   OPEN_SANDBOX_DOMAIN=... OPEN_SANDBOX_API_KEY=... SBX_IMAGE=... \
//   SBX_POOLS_URL=http://.../pools node bench.mjs
import { ConnectionConfig, Sandbox } from "@alibaba-group/opensandbox";

const config = new ConnectionConfig({
  domain: process.env.OPEN_SANDBOX_DOMAIN,
  apiKey: process.env.OPEN_SANDBOX_API_KEY,
  useServerProxy: process.env.SBX_MODE === "proxy",
});
const image = process.env.SBX_IMAGE ?? "sandboxkit-test/debian:1";
const runs = Number(process.env.SBX_RUNS ?? 200);
const creates = Number(process.env.SBX_CREATES ?? 20);

const pct = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
const report = (name, xs) =>
  console.log(`${name}: p50 ${pct(xs, 0.5).toFixed(1)} ms, p90 ${pct(xs, 0.9).toFixed(1)} ms (n=${xs.length})`);

const sbx = await Sandbox.create({ connectionConfig: config, image, timeoutSeconds: 600 });
for (let i = 0; i < 10; i++) await sbx.commands.run("true"); // warm the connections
const run = [];
for (let i = 0; i < runs; i++) {
  const t0 = performance.now();
  await sbx.commands.run("true");
  run.push(performance.now() - t0);
}
report('commands.run("true")', run);
await sbx.kill();
await sbx.close();

// poolFull waits until sbx serve's pools are full again ("from a warm
// pool"), when SBX_POOLS_URL names its /pools.
async function poolFull() {
  const url = process.env.SBX_POOLS_URL;
  if (!url) return;
  for (;;) {
    const res = await fetch(url, { headers: { Authorization: `Bearer ${process.env.OPEN_SANDBOX_API_KEY}` } });
    const { pools } = await res.json();
    if (pools.every((p) => p.ready >= p.size)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
}

const ttfo = [], create = [];
for (let i = 0; i < creates; i++) {
  await poolFull();
  const t0 = performance.now();
  const s = await Sandbox.create({ connectionConfig: config, image, timeoutSeconds: 600 });
  create.push(performance.now() - t0);
  let first;
  await s.commands.run("echo hi", undefined, { onStdout: () => { first ??= performance.now(); } });
  ttfo.push(first - t0);
  await s.kill();
  await s.close();
}
report("Sandbox.create", create);
report("create-to-first-output", ttfo);
