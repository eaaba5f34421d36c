// OpenSandbox's official TypeScript SDK, unchanged, against `sbx serve`.
//
// Every SDK method is called once in the SDK's default mode (endpoints
// handed out by the server, as a real OpenSandbox server does) and once with
// useServerProxy. Any failure makes the run exit 1.
//
//   OPEN_SANDBOX_DOMAIN=127.0.0.1:8765 OPEN_SANDBOX_API_KEY=key \
//   SBX_IMAGE=sandboxkit-test/debian:1 SBX_BACKEND=native node conformance.mjs
//
// SBX_BACKEND says what to expect where backends differ: local cannot pause
// (the server answers 501 SANDBOX::NOT_SUPPORTED) nor enforce egress.
import { ConnectionConfig, Sandbox, SandboxManager } from "@alibaba-group/opensandbox";

const domain = process.env.OPEN_SANDBOX_DOMAIN;
const apiKey = process.env.OPEN_SANDBOX_API_KEY;
const image = process.env.SBX_IMAGE ?? "sandboxkit-test/debian:1";
const backend = process.env.SBX_BACKEND ?? "native";
const modes = (process.env.SBX_MODES ?? "default,proxy").split(",");
const canPause = backend !== "local";
const canEgress = backend !== "local"; // local's host processes have no network of their own
const hostDir = process.env.SBX_HOST_DIR; // in serve's allowed_host_paths, holding hello.txt

let failures = 0;
let checks = 0;

async function check(name, fn) {
  checks++;
  const t0 = performance.now();
  try {
    await fn();
    console.log(`ok   ${name} (${(performance.now() - t0).toFixed(0)} ms)`);
  } catch (err) {
    failures++;
    console.log(`FAIL ${name}: ${err?.stack ?? err}`);
  }
}

function expect(cond, what) {
  if (!cond) throw new Error(what);
}

// sorted is v with its objects' keys in order, for comparing.
const sorted = (v) => (v && typeof v === "object" && !Array.isArray(v)
  ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted(v[k])]))
  : Array.isArray(v) ? v.map(sorted) : v);

function equal(got, want, what) {
  const g = JSON.stringify(sorted(got)), w = JSON.stringify(sorted(want));
  if (g !== w) throw new Error(`${what}: got ${g}, want ${w}`);
}

// refused expects fn to fail with an API error of this HTTP status.
async function refused(fn, status) {
  try {
    await fn();
  } catch (err) {
    equal(err.statusCode, status, `status of the refusal (${err.message})`);
    return err;
  }
  throw new Error(`succeeded, want a ${status} refusal`);
}

const stdout = (ex) => ex.logs.stdout.map((m) => m.text).join("\n");

async function run(mode) {
  const config = new ConnectionConfig({ domain, apiKey, useServerProxy: mode === "proxy" });
  const manager = SandboxManager.create({ connectionConfig: config });
  const tag = `[${backend} ${mode}]`;
  let sbx;

  // --- lifecycle --------------------------------------------------------
  await check(`${tag} Sandbox.create`, async () => {
    sbx = await Sandbox.create({
      connectionConfig: config, image, timeoutSeconds: 600,
      env: { GREETING: "hello" }, metadata: { suite: "sdk-conformance", mode },
    });
    expect(sbx.id, "a sandbox id");
  });
  if (!sbx) return;
  await check(`${tag} getInfo`, async () => {
    const info = await sbx.getInfo();
    equal(info.status.state, "Running", "state");
    equal(info.metadata.suite, "sdk-conformance", "metadata");
    expect(info.expiresAt, "an expiry");
  });
  await check(`${tag} isHealthy`, async () => equal(await sbx.isHealthy(), true, "healthy"));
  await check(`${tag} getMetrics`, async () => {
    const m = await sbx.getMetrics();
    expect(m.cpuCount > 0 && m.memoryTotalMiB > 0, `metrics ${JSON.stringify(m)}`);
  });
  await check(`${tag} renew`, async () => {
    const before = (await sbx.getInfo()).expiresAt;
    await sbx.renew(1800);
    const after = (await sbx.getInfo()).expiresAt;
    expect(new Date(after) > new Date(before), `expiry ${before} -> ${after}`);
  });
  await check(`${tag} patchMetadata`, async () => {
    const info = await sbx.patchMetadata({ mode: null, stage: "patched" });
    equal(info.metadata, { suite: "sdk-conformance", stage: "patched" }, "metadata");
  });
  await check(`${tag} Sandbox.connect`, async () => {
    const again = await Sandbox.connect({ sandboxId: sbx.id, connectionConfig: config });
    equal(stdout(await again.commands.run("echo $GREETING")), "hello", "output");
    await again.close();
  });

  // --- endpoints --------------------------------------------------------
  await check(`${tag} getEndpoint(44772) and getEndpointUrl`, async () => {
    const ep = await sbx.getEndpoint(44772);
    expect(ep.endpoint && !ep.endpoint.includes("://"), `endpoint ${ep.endpoint}`);
    expect((await sbx.getEndpointUrl(44772)).startsWith("http://"), "an http URL");
  });
  await check(`${tag} getEndpoint of a port nothing publishes`, async () => {
    expect((await sbx.getEndpoint(18080)).endpoint, "an endpoint");
    expect((await sbx.getEndpoint(9999)).endpoint, "an endpoint");
  });
  await check(`${tag} getSignedEndpoint is refused as on the real Docker runtime`, async () => {
    const err = await refused(() => sbx.getSignedEndpoint(8080, Math.floor(Date.now() / 1000) + 600), 400);
    equal(err.error.code, "SANDBOX::API_NOT_SUPPORTED", "code");
  });

  // --- egress (no networkPolicy at create: no sidecar, 502 as on the real server)
  await check(`${tag} getEgressPolicy without a policy`, async () => {
    await refused(() => sbx.getEgressPolicy(), 502);
  });
  await check(`${tag} patchEgressRules without a policy`, async () => {
    await refused(() => sbx.patchEgressRules([{ action: "allow", target: "example.com" }]), 502);
  });

  if (canEgress) {
    await check(`${tag} networkPolicy at create, getEgressPolicy, patchEgressRules, deleteEgressRules`, async () => {
      const guarded = await Sandbox.create({
        connectionConfig: config, image, timeoutSeconds: 600,
        networkPolicy: { defaultAction: "deny", egress: [{ action: "allow", target: "example.com" }] },
      });
      try {
        const targets = async () => (await guarded.getEgressPolicy()).egress.map((r) => `${r.action} ${r.target}`).sort();
        equal((await guarded.getEgressPolicy()).defaultAction, "deny", "default");
        equal(await targets(), ["allow example.com"], "rules at create");
        await guarded.patchEgressRules([{ action: "allow", target: "pypi.org" }]);
        equal(await targets(), ["allow example.com", "allow pypi.org"], "rules after the patch");
        await guarded.deleteEgressRules(["example.com"]);
        equal(await targets(), ["allow pypi.org"], "rules after the delete");
      } finally {
        await guarded.kill();
        await guarded.close();
      }
    });
  }

  if (hostDir && backend !== "local") {
    await check(`${tag} volumes: a host path the operator allows, a named volume`, async () => {
      const vols = await Sandbox.create({
        connectionConfig: config, image, timeoutSeconds: 600,
        volumes: [
          { name: "src", host: { path: hostDir }, mountPath: "/src", readOnly: true },
          ...(backend === "native" ? [{ name: "cache", pvc: { claimName: `sdk-${mode}` }, mountPath: "/cache" }] : []),
        ],
      });
      try {
        equal(stdout(await vols.commands.run("cat /src/hello.txt")), "from the host", "the host file");
        if (backend === "native") {
          equal((await vols.commands.run("echo x > /cache/f && cat /cache/f")).exitCode, 0, "the named volume is writable");
        }
      } finally {
        await vols.kill();
        await vols.close();
      }
    });
  }

  // --- commands ---------------------------------------------------------
  await check(`${tag} commands.run`, async () => {
    const ex = await sbx.commands.run("echo out; echo err >&2");
    equal(stdout(ex), "out", "stdout");
    equal(ex.logs.stderr.map((m) => m.text), ["err"], "stderr");
    equal(ex.exitCode, 0, "exit code");
  });
  await check(`${tag} commands.run with a non-zero exit`, async () => {
    const ex = await sbx.commands.run("exit 7");
    equal(ex.exitCode, 7, "exit code");
  });
  await check(`${tag} commands.run with options`, async () => {
    const ex = await sbx.commands.run("pwd; echo $V", { workingDirectory: "/tmp", envs: { V: "v1" } });
    equal(stdout(ex), "/tmp\nv1", "stdout");
  });
  await check(`${tag} commands.run with a timeout`, async () => {
    const ex = await sbx.commands.run("sleep 30", { timeoutSeconds: 1 });
    expect(ex.error, "an error for the timeout");
  });
  await check(`${tag} commands.run streaming handlers`, async () => {
    const seen = [];
    let done = false;
    await sbx.commands.run("for i in 1 2 3; do echo $i; done", undefined, {
      onStdout: (m) => seen.push(m.text),
      onExecutionComplete: () => { done = true; },
    });
    equal(seen, ["1", "2", "3"], "streamed lines");
    expect(done, "onExecutionComplete");
  });
  await check(`${tag} commands.runStream`, async () => {
    const types = [];
    for await (const ev of sbx.commands.runStream("echo streamed")) types.push(ev.type);
    expect(types.includes("stdout") && types.at(-1) === "execution_complete", `events ${types}`);
  });
  await check(`${tag} background command, status and logs`, async () => {
    const ex = await sbx.commands.run("echo l1; echo l2", { background: true });
    expect(ex.id, "a command id");
    let st;
    for (let i = 0; i < 200; i++) {
      st = await sbx.commands.getCommandStatus(ex.id);
      if (!st.running) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    equal(st.exitCode, 0, "exit code");
    const logs = await sbx.commands.getBackgroundCommandLogs(ex.id);
    equal(logs.content, "l1\nl2\n", "logs");
    equal(logs.cursor, 6, "cursor (a byte offset)");
    equal((await sbx.commands.getBackgroundCommandLogs(ex.id, 3)).content, "l2\n", "logs after the cursor");
  });
  await check(`${tag} commands.interrupt`, async () => {
    const ex = await sbx.commands.run("sleep 60", { background: true });
    await sbx.commands.interrupt(ex.id);
    let st;
    for (let i = 0; i < 200; i++) {
      st = await sbx.commands.getCommandStatus(ex.id);
      if (!st.running) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    equal(st.running, false, "running");
    equal(st.exitCode, -1, "exit code");
  });
  await check(`${tag} sessions: createSession, runInSession, deleteSession`, async () => {
    const id = await sbx.commands.createSession({ workingDirectory: "/tmp" });
    await sbx.commands.runInSession(id, "x=41; export Y=1; mkdir -p s && cd s");
    const ex = await sbx.commands.runInSession(id, "echo $((x+Y)) $PWD");
    equal(stdout(ex), "42 /tmp/s", "state kept between commands");
    await sbx.commands.deleteSession(id);
  });

  // --- files ------------------------------------------------------------
  const dir = `/tmp/sdk-${mode}`;
  await check(`${tag} files.createDirectories`, async () => {
    await sbx.files.createDirectories([{ path: `${dir}/sub`, mode: 755 }]);
  });
  await check(`${tag} files.writeFiles (text, bytes, stream) and read them`, async () => {
    const bytes = new Uint8Array(256).map((_, i) => i);
    async function* chunks() { yield new TextEncoder().encode("part1-"); yield new TextEncoder().encode("part2"); }
    await sbx.files.writeFiles([
      { path: `${dir}/a.txt`, data: "alpha beta alpha", mode: 644 },
      { path: `${dir}/b.bin`, data: bytes },
      { path: `${dir}/sub/c.txt`, data: chunks() },
    ]);
    equal(await sbx.files.readFile(`${dir}/a.txt`), "alpha beta alpha", "text");
    equal(Array.from(await sbx.files.readBytes(`${dir}/b.bin`)), Array.from(bytes), "bytes");
    const parts = [];
    for await (const c of sbx.files.readBytesStream(`${dir}/sub/c.txt`)) parts.push(Buffer.from(c));
    equal(Buffer.concat(parts).toString(), "part1-part2", "streamed");
    equal(await sbx.files.readFile(`${dir}/a.txt`, { range: "bytes=6-9" }), "beta", "a range");
  });
  await check(`${tag} files.getFileInfo`, async () => {
    const info = await sbx.files.getFileInfo([`${dir}/a.txt`]);
    equal(info[`${dir}/a.txt`].size, 16, "size");
    equal(info[`${dir}/a.txt`].mode, 644, "mode");
  });
  await check(`${tag} files.listDirectory and search`, async () => {
    const list = await sbx.files.listDirectory({ path: dir, depth: 1 });
    equal(list.map((f) => f.path).sort(), [`${dir}/a.txt`, `${dir}/b.bin`, `${dir}/sub`], "listing");
    const found = await sbx.files.search({ path: dir, pattern: "*.txt" });
    equal(found.map((f) => f.path).sort(), [`${dir}/a.txt`, `${dir}/sub/c.txt`], "search");
  });
  await check(`${tag} files.replaceContents and replaceContentsDetailed`, async () => {
    await sbx.files.replaceContents([{ path: `${dir}/a.txt`, oldContent: "beta", newContent: "gamma" }]);
    const res = await sbx.files.replaceContentsDetailed([{ path: `${dir}/a.txt`, oldContent: "alpha", newContent: "A" }]);
    equal(res, [{ path: `${dir}/a.txt`, replacedCount: 2 }], "details");
    equal(await sbx.files.readFile(`${dir}/a.txt`), "A gamma A", "content");
  });
  await check(`${tag} files.setPermissions`, async () => {
    await sbx.files.setPermissions([{ path: `${dir}/a.txt`, mode: 600 }]);
    equal((await sbx.files.getFileInfo([`${dir}/a.txt`]))[`${dir}/a.txt`].mode, 600, "mode");
  });
  await check(`${tag} files.moveFiles and deleteFiles`, async () => {
    await sbx.files.moveFiles([{ src: `${dir}/a.txt`, dest: `${dir}/moved.txt` }]);
    equal(await sbx.files.readFile(`${dir}/moved.txt`), "A gamma A", "moved");
    await sbx.files.deleteFiles([`${dir}/moved.txt`]);
    await refused(() => sbx.files.readFile(`${dir}/moved.txt`), 404);
  });
  await check(`${tag} files.deleteDirectories`, async () => {
    await sbx.files.deleteDirectories([dir]);
    await refused(() => sbx.files.listDirectory({ path: dir }), 404);
  });

  // --- snapshots ----------------------------------------------------------
  await check(`${tag} snapshots: create, get, list, restore, delete`, async () => {
    await sbx.commands.run("echo kept > snap.txt");
    const snap = await manager.createSnapshot(sbx.id, { name: `sdk-${mode}` });
    equal(snap.status.state, "Ready", "state");
    equal((await manager.getSnapshot(snap.id)).name, `sdk-${mode}`, "name");
    const list = await manager.listSnapshots({ sandboxId: sbx.id });
    equal(list.items.map((s) => s.id), [snap.id], "listed");
    const restored = await Sandbox.create({ connectionConfig: config, snapshotId: snap.id, timeoutSeconds: 600 });
    equal(stdout(await restored.commands.run("cat snap.txt")), "kept", "the snapshot's file");
    await restored.kill();
    await restored.close();
    await manager.deleteSnapshot(snap.id);
    await refused(() => manager.getSnapshot(snap.id), 404);
  });

  // --- manager, pause and resume ------------------------------------------
  await check(`${tag} SandboxManager.listSandboxInfos and getSandboxInfo`, async () => {
    const list = await manager.listSandboxInfos({ metadata: { suite: "sdk-conformance" } });
    expect(list.items.some((s) => s.id === sbx.id), "the sandbox in the list");
    equal((await manager.getSandboxInfo(sbx.id)).id, sbx.id, "info");
  });
  await check(`${tag} SandboxManager.renewSandbox`, async () => manager.renewSandbox(sbx.id, 1200));
  if (canPause) {
    await check(`${tag} pause and resume`, async () => {
      await sbx.pause();
      equal((await sbx.getInfo()).status.state, "Paused", "state");
      // The resumed Sandbox shares the SDK's HTTP agent with this one:
      // use it from here on, and close only one of them.
      sbx = await sbx.resume();
      equal(stdout(await sbx.commands.run("echo back")), "back", "output after resume");
    });
    await check(`${tag} SandboxManager.pauseSandbox and resumeSandbox`, async () => {
      await manager.pauseSandbox(sbx.id);
      await manager.resumeSandbox(sbx.id);
      equal((await manager.getSandboxInfo(sbx.id)).status.state, "Running", "state");
    });
  } else {
    await check(`${tag} pause is refused (${backend} cannot pause)`, async () => {
      await refused(() => sbx.pause(), 501);
    });
  }

  // --- the end ----------------------------------------------------------
  await check(`${tag} kill`, async () => {
    await sbx.kill();
    await refused(() => manager.getSandboxInfo(sbx.id), 404);
  });
  await sbx.close();
  await manager.close();
}

if (!domain) {
  console.error("set OPEN_SANDBOX_DOMAIN (sbx serve's host:port) and OPEN_SANDBOX_API_KEY");
  process.exit(2);
}
for (const mode of modes) await run(mode);
console.log(`${checks - failures}/${checks} checks passed`);
process.exit(failures ? 1 : 0);
