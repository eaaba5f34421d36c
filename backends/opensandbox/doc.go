// Package opensandbox is the sandboxkit backend that makes sandboxes on an
// OpenSandbox deployment (github.com/alibaba/OpenSandbox): its lifecycle
// server creates, lists, pauses, renews and deletes them over REST, and the
// execd daemon inside each sandbox runs commands and file operations. The
// client is written from the published OpenAPI specs (no SDK); it needs only
// the network path to the server and, unless use_server_proxy is set, to
// the sandboxes' execd endpoints.
//
// # Configuration
//
// Config is the [sandbox.opensandbox] table, with OpenSage's keys:
//
//	[sandbox.opensandbox]
//	domain = "opensandbox.example.com:8080"  # else OPEN_SANDBOX_DOMAIN, else localhost:8080
//	protocol = "http"             # or "https"
//	api_key = "..."               # else OPEN_SANDBOX_API_KEY; never logged
//	request_timeout_sec = 30      # per non-streaming request
//	use_server_proxy = false      # reach execd through the server
//	default_timeout_sec = 1800    # OpenSage's sandbox timeout; see below
//	execd_port = 44772
//	request_working_directory = ""  # working directory when an entry sets none
//	ready_timeout_sec = 300       # (ours) wait for Running and execd's /ping
//	# Accepted so OpenSage files load; informational only:
//	runtime_type = "docker"       # "kubernetes": pausing does not keep memory
//	docker_host = ""
//	docker_remote_host = ""
//	namespace = ""
//	context = ""
//	kubeconfig = ""
//
// The API key goes to the lifecycle server only (and to execd only through
// the server proxy, which strips it). Config.Redacted, String and LogValue
// hide it; errors never carry it.
//
// A sandbox's lifetime is its Spec.TTL (the entry's ttl, else [sandbox]
// default_ttl), sent as OpenSandbox's timeout (at least 60 s); a Spec
// without TTL gets no expiry. default_timeout_sec is accepted and exposed as
// Config.DefaultTTL but does not override Spec.TTL.
//
// # Sandboxes
//
// Create sends the image, an entrypoint (Spec.Command, else
// KeepAliveEntrypoint, "tail -f /dev/null"), the environment, resource
// limits (cpus as cores or millicores, mem_limit in Ki/Mi/Gi, gpus as a
// count; DefaultCPU and DefaultMemory, the SDKs' defaults, when the entry
// sets none, because the API requires limits), volumes (a bind of an
// absolute path becomes a host volume, a named volume a pvc volume, read-only
// kept) and the TTL. It then polls until the sandbox is Running (Failed or
// Terminated end it with the server's reason and message; unknown states
// are waited out), resolves execd's endpoint (sending the headers the
// endpoints API returns on every request), polls execd's /ping, and finds
// the sandbox's working directory and TMPDIR with one command. If any step
// fails the sandbox is deleted again.
//
// Every sandbox carries the labels of package backend in its metadata.
// OpenSandbox holds metadata to Kubernetes label rules, which our keys
// satisfy but values such as "host:pid:start" or paths do not; such values
// (and keys) are stored base32-encoded, spread over "<key>.2".. keys when
// long, and decoded on read (see labels.go). Internal keys under
// "sandboxkit.opensandbox." (working directory, default user, published
// ports, token nonce) are not shown in Info.Labels. Get, List (paginated,
// filtered by the server on what it can match and here on the rest) and a
// reaper therefore need nothing but the server. Terminated sandboxes count
// as gone; Failed ones are listed (as exited) so they can be removed. The
// Docker runtime fails a whole listing (500 DOCKER::SANDBOX_QUERY_FAILED,
// "No such container") when a container vanishes while it lists them: List
// then lists again from the first page, a few times, pausing in between.
//
// execd is not left open to anyone who can reach it: Create puts an access
// token in the sandbox's environment (EXECD_ACCESS_TOKEN, which makes execd
// require X-EXECD-ACCESS-TOKEN) and sends it on every execd request. The
// token is derived from the API key and a nonce kept in the metadata, so any
// backend with the key can reattach, and readers of the metadata (such as
// Kubernetes users who see pod labels) cannot use execd. Rotating the API
// key therefore locks out execd of existing sandboxes.
//
// # Exec
//
// execd's command stream reports output line by line (line ends dropped,
// invalid UTF-8 replaced), and its commands have no stdin. So each command
// runs through a small sh wrapper that writes its stdout and stderr to
// files under the sandbox's TMPDIR. When the command has ended the wrapper
// reports on the stream the files' sizes and, up to 64 KiB each, their bytes
// in base64 (text the stream carries unchanged), so most commands need one
// request: no download, and no tool but the shell when there is no output.
// Larger output (or an image without wc and base64) is fetched with ranged
// downloads, while the command runs when the caller streams it to writers:
// output is byte-exact either way and never fetched past the capture limit.
// Stdin is uploaded in
// pieces that the wrapper feeds to the command through a FIFO (so the image
// needs mkfifo, sleep and cat, which coreutils and busybox have), and a
// command that never reads it does not wait for it. execd runs the wrapper
// with bash (so the image needs bash, as execd itself requires).
//
// Exit codes come from the stream's terminal event: execution_complete is
// 0, an error event carries the code (128+N after signal N, which the
// wrapper reports). A timeout is sent as execd's millisecond timeout and
// enforced by a client deadline as well; it gives exit code 124 and
// TimedOut. A timeout or a cancelled context SIGKILLs the command's process
// group and every process carrying its SANDBOXKIT_EXEC_ID marker, and
// interrupts it in execd (DELETE /command). The client stops reading at the
// terminal event. ExecRequest.User (and Spec.User, the default) is sent as
// execd's uid/gid; names are resolved in the sandbox.
//
// # Files
//
// Sandbox implements backend.FileSystem with execd's file API, so fileops
// needs no tools in the image: ReadFile downloads, WriteFile uploads
// (multipart, with the mode; parents are created), Stat uses /files/info and
// ReadDir /directories/list. execd does not follow symlinks in /files/info,
// so Stat of a symlink (and ReadDir through one) reports
// errors.ErrUnsupported and sbfiles.Stat falls back to Exec. Errors are
// *fs.PathError wrapping fs.ErrNotExist, fs.ErrPermission, syscall.ENOTDIR
// or syscall.EISDIR as execd's answers say. edit_file keeps its uniqueness
// rule because fileops reads and writes whole files (execd's
// /files/replace replaces every occurrence).
//
// # Other capabilities
//
// Sandbox implements backend.Renewer (renew-expiration; a sandbox created
// without TTL cannot get one: errors.ErrUnsupported), backend.Pauser
// (pause/resume, waiting for Paused/Running) and backend.Endpointer:
// Endpoint(port) answers for ports listed in Spec.Ports with the endpoints
// API's direct host:port (host addresses and ports asked for in the entry
// cannot be chosen and are ignored with a warning; UDP is refused); a port
// the server publishes only as an HTTP route (host:port/proxy/PORT) has no
// TCP address, and Endpoint answers a *RouteError naming its URL.
// HTTPEndpoint gives the URL and headers of an HTTP service, through the
// proxy when use_server_proxy is set.
//
// Sandbox implements backend.Terminaler with execd's bash sessions where
// execd has them (POST /session, then a WebSocket on GET
// /ws/session/{id}?pty=1 carrying JSON frames; newer execd versions than
// the specs here): bash starts on a pseudo-terminal, the line typed to it
// prints a marker and execs the program in its directory with its
// environment, and the client drops the output up to the marker and holds
// keystrokes until then. Terminals end with their client (Close deletes
// the session) and run as execd's user. An execd without sessions
// answers 404: errors.ErrUnsupported saying so.
//
// Not supported, and refused at Create naming the option: networks,
// privileged, cap_add, cap_drop, security_opt, read_only, pids_limit,
// shm_size, runtimes, command = "" (the image's own entrypoint: the API
// requires one), GPU device lists. There is no Attacher (execd has no
// bidirectional stream; sbxd is not used), Archiver or Checkpointer
// (OpenSandbox snapshots are not wired in yet).
//
// # Errors
//
// Answers that are errors become *APIError, which understands both of the
// server's shapes ({"code","message"} and FastAPI's 422 {"detail": [...]})
// and execd's {"error"}, and unwraps to the contract's sentinels: 404 to
// backend.ErrNotFound, 400/401/403/422 to backend.ErrInvalidConfig, 405/501
// to errors.ErrUnsupported, 502/503/504 to backend.ErrUnavailable. A server
// that cannot be reached gives backend.ErrUnavailable naming the domain to
// check. Everything is wrapped in a *backend.OpError.
package opensandbox
