// The console's script: live updates (server-sent events carrying the
// server-rendered fragments), the sandboxes filter, and the terminal.
// The fragments come from the server's templates, which escape what
// agents chose; nothing here builds HTML from data.

const body = document.body;

function applyFilter() {
  const q = (document.getElementById("filter")?.value || "").trim().toLowerCase();
  const st = document.getElementById("state-filter")?.value || "";
  for (const tr of document.querySelectorAll("#sandbox-table tbody tr[data-id]")) {
    const show = (!q || tr.textContent.toLowerCase().includes(q)) && (!st || tr.dataset.state === st);
    tr.hidden = !show;
  }
}

for (const id of ["filter", "state-filter"]) {
  document.getElementById(id)?.addEventListener("input", applyFilter);
}

if (body.dataset.events) {
  const es = new EventSource(body.dataset.events);
  es.addEventListener("update", (ev) => {
    const parts = JSON.parse(ev.data);
    for (const [id, html] of Object.entries(parts)) {
      const el = document.getElementById(id);
      if (el) el.innerHTML = html;
    }
    if (parts.gone) {
      body.dataset.gone = "1";
      es.close();
    }
    applyFilter();
    body.dataset.updated = String(Date.now());
  });
}

const termEl = document.getElementById("term");
const openBtn = document.getElementById("term-open");
if (termEl && openBtn) {
  openBtn.addEventListener("click", async () => {
    openBtn.disabled = true;
    const [{ Terminal }, { FitAddon }] = await Promise.all([
      import("/ui/assets/vendor/xterm/xterm.mjs"),
      import("/ui/assets/vendor/xterm/addon-fit.mjs"),
    ]);
    const link = document.createElement("link");
    link.rel = "stylesheet";
    link.href = "/ui/assets/vendor/xterm/xterm.css";
    document.head.appendChild(link);
    const term = new Terminal({ convertEol: false, cursorBlink: true, fontSize: 13 });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(termEl);
    fit.fit();
    const status = document.getElementById("term-status");
    const q = new URLSearchParams({ csrf: body.dataset.csrf || "", rows: term.rows, cols: term.cols });
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const ws = new WebSocket(`${proto}//${location.host}/ui/sandboxes/${encodeURIComponent(body.dataset.sandbox)}/terminal?${q}`);
    ws.binaryType = "arraybuffer";
    const enc = new TextEncoder();
    ws.onmessage = (ev) => {
      if (typeof ev.data === "string") {
        const msg = JSON.parse(ev.data);
        if (msg.type === "started") { status.textContent = "terminal " + msg.terminal_id; termEl.dataset.terminal = msg.terminal_id; }
        if (msg.type === "exit") { status.textContent = "exited with " + msg.exit_code; termEl.dataset.exit = String(msg.exit_code); }
        return;
      }
      term.write(new Uint8Array(ev.data));
    };
    ws.onclose = () => { if (!termEl.dataset.exit) status.textContent = "closed"; openBtn.disabled = false; };
    term.onData((d) => { if (ws.readyState === WebSocket.OPEN) ws.send(enc.encode(d)); });
    term.onResize(({ rows, cols }) => { if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", rows, cols })); });
    new ResizeObserver(() => fit.fit()).observe(termEl);
    term.focus();
    window.sbxTerm = term; // for the console's browser test
  });
}
