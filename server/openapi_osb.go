package server

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// The OpenSandbox document (GET /openapi/opensandbox.json): the lifecycle
// API as osb.go serves it, execd's API (osb_execd.go, osb_files.go,
// osb_sessions.go) as reached through the server's proxy, the egress
// sidecar's /policy (osb_egress.go), and the direct endpoints. Request
// bodies are the schemas of the types the server decodes; answers, which
// the server writes as maps, are the doc types below
// (TestAPIDocsAnswersMatch checks real answers against them). Facts and
// wording from OpenSandbox's published specs (Apache-2.0), as far as they
// hold here.

// Answers of the lifecycle API as the documents show them.
type (
	osbDocError struct {
		Code    string `json:"code" jsonschema:"a namespaced code: SANDBOX::NOT_FOUND, SANDBOX::INVALID_PARAMETER, MISSING_API_KEY, ..."`
		Message string `json:"message" jsonschema:"what went wrong"`
	}
	osbDocValidation struct {
		Detail []osbDocValidationItem `json:"detail" jsonschema:"what did not validate"`
	}
	osbDocValidationItem struct {
		Type string `json:"type" jsonschema:"value_error"`
		Loc  []any  `json:"loc" jsonschema:"where: body, query or path, then the field"`
		Msg  string `json:"msg" jsonschema:"what is wrong"`
	}
	osbDocStatus struct {
		State            string `json:"state" jsonschema:"the sandbox's state"`
		Reason           string `json:"reason" jsonschema:"the state in lower case"`
		Message          string `json:"message" jsonschema:"empty"`
		LastTransitionAt string `json:"lastTransitionAt" jsonschema:"the time of the answer (RFC 3339)"`
	}
	osbDocImageRef struct {
		URI string `json:"uri" jsonschema:"the image the sandbox was made from, or snapshot:ID"`
	}
	osbDocSandbox struct {
		ID         string            `json:"id" jsonschema:"the sandbox's ID"`
		Status     osbDocStatus      `json:"status"`
		Metadata   map[string]string `json:"metadata" jsonschema:"the sandbox's metadata (labels)"`
		Entrypoint []string          `json:"entrypoint" jsonschema:"what the sandbox runs; null for a sandbox made by other means (the MCP tools)"`
		Image      osbDocImageRef    `json:"image"`
		CreatedAt  string            `json:"createdAt" jsonschema:"when it was made (RFC 3339)"`
		ExpiresAt  string            `json:"expiresAt,omitempty" jsonschema:"when it is removed unless renewed; absent for a sandbox made without a timeout"`
	}
	osbDocPagination struct {
		Page        int  `json:"page" jsonschema:"this page, from 1"`
		PageSize    int  `json:"pageSize" jsonschema:"items per page"`
		TotalItems  int  `json:"totalItems" jsonschema:"items on all pages"`
		TotalPages  int  `json:"totalPages" jsonschema:"pages"`
		HasNextPage bool `json:"hasNextPage" jsonschema:"whether a later page has items"`
	}
	osbDocEndpoint struct {
		Endpoint string            `json:"endpoint" jsonschema:"host:port[/path], with NO scheme: prepend http://"`
		Headers  map[string]string `json:"headers,omitempty" jsonschema:"headers to send with every request to the endpoint (the route secret standing for the API key)"`
	}
	osbDocExpiry struct {
		ExpiresAt string `json:"expiresAt" jsonschema:"when the sandbox is removed unless renewed again (RFC 3339)"`
	}
	osbDocSnapshotStatus struct {
		State            string `json:"state" jsonschema:"Ready"`
		Reason           string `json:"reason" jsonschema:"snapshot_ready"`
		LastTransitionAt string `json:"lastTransitionAt" jsonschema:"when the snapshot was taken (RFC 3339)"`
	}
	osbDocSnapshot struct {
		ID        string               `json:"id" jsonschema:"the snapshot's ID: snapshotId of a create request starts a sandbox from it"`
		SandboxID string               `json:"sandboxId" jsonschema:"the sandbox it was taken of"`
		Name      string               `json:"name,omitempty" jsonschema:"the name given when it was taken"`
		Status    osbDocSnapshotStatus `json:"status"`
		CreatedAt string               `json:"createdAt" jsonschema:"when it was taken (RFC 3339)"`
	}
	osbDocEgressStatus struct {
		Status          string    `json:"status" jsonschema:"ok"`
		Mode            string    `json:"mode" jsonschema:"deny_all or allow_all: what the default action gives"`
		EnforcementMode string    `json:"enforcementMode" jsonschema:"dns"`
		Policy          osbPolicy `json:"policy"`
	}
)

// Answers of execd as the documents show them.
type (
	osbDocCommandStatus struct {
		ID         string `json:"id" jsonschema:"the command's ID (the text of its init event)"`
		Content    string `json:"content" jsonschema:"the command"`
		Running    bool   `json:"running" jsonschema:"whether it still runs"`
		ExitCode   *int   `json:"exit_code,omitempty" jsonschema:"its exit code, once it ended (-1: interrupted or timed out)"`
		Error      string `json:"error,omitempty" jsonschema:"why it failed, if it did"`
		StartedAt  string `json:"started_at" jsonschema:"when it started (RFC 3339)"`
		FinishedAt string `json:"finished_at,omitempty" jsonschema:"when it ended (RFC 3339)"`
	}
	osbDocEvent struct {
		Type          string            `json:"type" jsonschema:"init (text: the command ID), stdout, stderr (text: a line), ping, error, execution_complete"`
		Text          string            `json:"text,omitempty" jsonschema:"the command ID (init), a line of output (stdout, stderr), pong (ping)"`
		Error         *osbDocEventError `json:"error,omitempty" jsonschema:"(error) how the command failed"`
		ExecutionTime int64             `json:"execution_time,omitempty" jsonschema:"(execution_complete) milliseconds the command ran"`
		Timestamp     int64             `json:"timestamp" jsonschema:"when, in Unix milliseconds"`
	}
	osbDocEventError struct {
		EName     string   `json:"ename" jsonschema:"CommandExecError"`
		EValue    string   `json:"evalue" jsonschema:"the exit code; -1 when it was killed (timeout)"`
		Traceback []string `json:"traceback" jsonschema:"what happened"`
	}
	osbDocFileInfo struct {
		Path       string `json:"path" jsonschema:"the file's path"`
		Type       string `json:"type" jsonschema:"file, directory, symlink or other"`
		Size       int64  `json:"size" jsonschema:"its size in bytes"`
		ModifiedAt string `json:"modified_at" jsonschema:"when it was last changed (RFC 3339)"`
		CreatedAt  string `json:"created_at" jsonschema:"the same as modified_at"`
		Owner      string `json:"owner" jsonschema:"its owner's name"`
		Group      string `json:"group" jsonschema:"its group's name"`
		Mode       int    `json:"mode" jsonschema:"its permissions as octal digits written as a decimal number (755)"`
	}
	osbDocSession struct {
		SessionID string `json:"session_id" jsonschema:"the session's ID"`
	}
	osbDocMetrics struct {
		CPUCount    int     `json:"cpu_count,omitempty" jsonschema:"CPUs the sandbox sees"`
		MemTotalMiB float64 `json:"mem_total_mib,omitempty" jsonschema:"memory, MiB"`
		MemUsedMiB  float64 `json:"mem_used_mib,omitempty" jsonschema:"memory in use, MiB"`
		Error       string  `json:"error,omitempty" jsonschema:"(watch) why this sample failed"`
		Timestamp   int64   `json:"timestamp" jsonschema:"when, in Unix milliseconds"`
	}
	osbDocSessionRun struct {
		Command string `json:"command" jsonschema:"the command, run by the session's shell"`
		Cwd     string `json:"cwd,omitempty" jsonschema:"where it starts; default where the last one left off"`
		Timeout int64  `json:"timeout,omitempty" jsonschema:"milliseconds before it is killed; 0: none"`
	}
	osbDocNewSession struct {
		Cwd string `json:"cwd,omitempty" jsonschema:"where the session's first command starts"`
	}
	osbDocMove struct {
		Src  string `json:"src" jsonschema:"the path to move"`
		Dest string `json:"dest" jsonschema:"where to"`
	}
	osbDocReplace struct {
		Old string `json:"old" jsonschema:"the text to replace: every occurrence is"`
		New string `json:"new" jsonschema:"the replacement"`
	}
	osbDocUploadMeta struct {
		Path string `json:"path" jsonschema:"where the next file part goes (parents are made)"`
		osbPerm
	}
)

// loosen makes a schema of a type the server decodes fit a request: no
// field is required and unknown ones are allowed (encoding/json ignores
// them), at every level; callers then require what the server does.
func loosen(s *jsonschema.Schema) *jsonschema.Schema {
	if s == nil {
		return s
	}
	s.Required, s.AdditionalProperties = nil, nil
	for _, p := range s.Properties {
		loosen(p)
	}
	loosen(s.Items)
	return s
}

// osbDoc is the OpenSandbox document; execdPort is the port the server
// answers for as execd's (Options.OSBExecdPort).
func osbDoc(execdPort int) *oaDoc {
	port := strconv.Itoa(execdPort)
	d := newDoc("sandboxkit OpenSandbox-compatible API", `OpenSandbox's lifecycle API (sandbox-lifecycle.yml) and its in-sandbox execd API (execd-api.yaml), served by `+"`sbx serve`"+` over its own sandboxes, so that OpenSandbox's SDKs work against any sandboxkit backend.

**Paths.** The lifecycle routes are documented under `+"`/v1`"+`, as clients use them; the same paths without `+"`/v1`"+` answer too (`+"`/sandboxes`"+`, `+"`/snapshots/{snapshotId}`"+`, `+"`/sandboxes/{id}/proxy/{port}/{path}`"+`, ...), as on OpenSandbox's own server.

**Keys.** When the server has an API key, send it as `+"`OPEN-SANDBOX-API-KEY`"+` (or `+"`X-API-Key`"+`, or `+"`Authorization: Bearer`"+`); 401 answers `+"`{\"code\":\"MISSING_API_KEY\"|\"INVALID_API_KEY\"}`"+`. The direct endpoints (/execd/..., /port/...) that the endpoints route hands out take a per-sandbox route header instead, and the API key never goes there.

**Conversations.** The sandboxes belong to the conversation `+"`opensandbox`"+`, or to the one `+"`X-Conversation-Id`"+` names: the MCP tools of that conversation see them too.

**Errors.** `+"`{\"code\",\"message\"}`"+` with namespaced codes (`+"`SANDBOX::NOT_FOUND`"+`, ...), except request bodies that do not validate: FastAPI's 422 `+"`{\"detail\":[...]}`"+`, as the real server answers.

**execd.** Each sandbox's execd (commands, bash sessions, files, metrics) is reached through the server's proxy at port `+port+` (this server's execd port): `+"`/v1/sandboxes/{id}/proxy/"+port+"/...`"+` with the API key, or at the endpoint `+"`GET .../endpoints/"+port+"`"+` hands out with its route header. Differences from OpenSandbox's execd: a foreground command's stream ends with its last event, a foreground command ends when its client goes, commands run with bash where the image has it (else sh), and there is no code interpreter (`+"`/code`"+`: 501). Port 18080 is the egress sidecar's API (`+"`/policy`"+`); other ports reach what the sandbox publishes.`)
	d.Tags = []oaTag{
		{Name: "Sandboxes", Description: "create, list, inspect, pause, renew and delete sandboxes"},
		{Name: "Snapshots", Description: "snapshots of sandboxes, to start new ones from"},
		{Name: "Endpoints", Description: "how to reach a port of a sandbox: the endpoints route, the server's proxy and the direct endpoints"},
		{Name: "execd: commands", Description: "execd (port " + port + "): run commands, streamed as events"},
		{Name: "execd: sessions", Description: "execd: bash sessions that keep their state between commands"},
		{Name: "execd: files", Description: "execd: files and directories in the sandbox"},
		{Name: "execd: metrics", Description: "execd: the sandbox's CPU and memory"},
		{Name: "Egress", Description: "the egress sidecar's API (port 18080) of a sandbox created with a networkPolicy"},
	}
	d.pathParams["id"] = "the sandbox's ID"
	d.pathParams["snapshotId"] = "the snapshot's ID"
	d.pathParams["port"] = "a port of the sandbox"
	d.pathParams["path"] = "the rest of the path, slashes included"
	d.pathParams["commandId"] = "the command's ID (the text of its init event)"
	d.pathParams["sessionId"] = "the session's ID (session_id)"

	d.Components.SecuritySchemes["openSandboxKey"] = &oaSecurity{Type: "apiKey", In: "header", Name: osbHeaderAPIKey,
		Description: "the API key, as OpenSandbox's SDKs send it (needed only when the server has one)"}
	d.Components.SecuritySchemes["apiKey"] = &oaSecurity{Type: "apiKey", In: "header", Name: "X-API-Key", Description: "the API key"}
	d.Components.SecuritySchemes["bearer"] = &oaSecurity{Type: "http", Scheme: "bearer", Description: "the API key, as Authorization: Bearer KEY"}
	d.Components.SecuritySchemes["routeHeader"] = &oaSecurity{Type: "apiKey", In: "header", Name: OSBHeaderRoute,
		Description: "the route secret the endpoints route handed out with a direct endpoint (its headers); it stands for the API key there"}
	d.Security = []oaRequirement{{"openSandboxKey": {}}, {"apiKey": {}}, {"bearer": {}}}
	direct := &[]oaRequirement{{"routeHeader": {}}}
	d.Components.Parameters["Conversation"] = &oaParam{Name: HeaderConversation, In: "header",
		Description: "the conversation the sandboxes belong to; default opensandbox",
		Schema:      &jsonschema.Schema{Type: "string", Pattern: conversationPattern}}
	d.Components.Parameters["ExecdToken"] = &oaParam{Name: osbHeaderToken, In: "header",
		Description: "the execd access token, needed when the sandbox was created with EXECD_ACCESS_TOKEN in its env", Schema: str("")}

	// Schemas.
	sc := d.Components.Schemas
	sc["ErrorResponse"] = schemaFor[osbDocError](nil)
	sc["ValidationError"] = schemaFor[osbDocValidation](nil)
	status := schemaFor[osbDocStatus](nil)
	status.Properties["state"].Enum = []any{"Pending", "Running", "Paused", "Failed", "Terminating", "Unknown"}
	sc["SandboxStatus"] = status
	sandbox := schemaFor[osbDocSandbox](nil)
	sandbox.Properties["status"] = ref("SandboxStatus")
	sc["Sandbox"] = sandbox
	sc["PaginationInfo"] = schemaFor[osbDocPagination](nil)
	sc["ListSandboxesResponse"] = object("", map[string]*jsonschema.Schema{"items": arrayOf(ref("Sandbox"), ""), "pagination": ref("PaginationInfo")})
	sc["Endpoint"] = schemaFor[osbDocEndpoint](nil)
	sc["RenewSandboxExpirationResponse"] = schemaFor[osbDocExpiry](nil)
	sc["RenewSandboxExpirationRequest"] = schemaFor[osbDocExpiry](map[string]string{"expiresAt": "the new expiry (RFC 3339), in the future; at most the sandbox's hard limit"})
	snapStatus := schemaFor[osbDocSnapshotStatus](nil)
	snapStatus.Properties["state"].Enum = []any{"Ready"}
	sc["SnapshotStatus"] = snapStatus
	snapshot := schemaFor[osbDocSnapshot](nil)
	snapshot.Properties["status"] = ref("SnapshotStatus")
	sc["Snapshot"] = snapshot
	sc["ListSnapshotsResponse"] = object("", map[string]*jsonschema.Schema{"items": arrayOf(ref("Snapshot"), ""), "pagination": ref("PaginationInfo")})
	rule := schemaFor[osbRule](map[string]string{
		"action": "allow or deny",
		"target": "a host name (*.example.com for subdomains), an IP address or a CIDR range",
	})
	rule.Properties["action"].Enum = []any{"allow", "deny"}
	sc["NetworkRule"] = rule
	policy := schemaFor[osbPolicy](map[string]string{
		"defaultAction": "what is not listed gets: deny (default) or allow",
		"egress":        "the rules; deny rules win over allow rules",
	})
	policy.Properties["defaultAction"].Enum = []any{"allow", "deny"}
	policy.Properties["egress"] = arrayOf(ref("NetworkRule"), "the rules; deny rules win over allow rules")
	policy.Required = []string{"egress"}
	policy.Description = "An egress policy, enforced outside the sandbox (backends that enforce egress). Unknown fields are refused. The operator's policy bounds it."
	sc["NetworkPolicy"] = policy
	vol := loosen(schemaFor[osbVolume](map[string]string{
		"name":      "the volume's name, unique in the sandbox",
		"host":      "a bind of a host path, under one of the operator's allowed_host_paths (none allowed: refused)",
		"pvc":       "a named volume of the backend (osb-INSTANCE-CLAIM), made when it does not exist and createIfNotExists is not false",
		"ossfs":     "refused: no OSS here",
		"mountPath": "where it is mounted in the sandbox: an absolute path other than /",
		"readOnly":  "mount it read-only",
		"subPath":   "a folder of the volume to mount instead of all of it",
	}))
	vol.Required = []string{"name", "mountPath"}
	vol.Properties["host"].Required = []string{"path"}
	vol.Properties["pvc"].Required = []string{"claimName"}
	vol.Description = "A volume mounted in the sandbox: exactly one of host, pvc (ossfs is refused)."
	sc["Volume"] = vol
	create := loosen(schemaFor[osbCreateRequest](map[string]string{
		"image":           "the image to start from (give exactly one of image and snapshotId)",
		"snapshotId":      "a snapshot to start from instead of an image",
		"entrypoint":      `what the sandbox runs; required (the SDKs send ["tail","-f","/dev/null"])`,
		"timeout":         "seconds the sandbox lives without renewal, an integer >= 60; absent or null: no expiry (the server's hard limit only)",
		"resourceLimits":  `cpu ("1", "500m"), memory ("512Mi", "2Gi") and gpu (a count); a limit the backend cannot enforce is left out (the server's log says so)`,
		"env":             "environment variables; EXECD_ACCESS_TOKEN sets the token execd requires",
		"metadata":        "labels of the sandbox (Kubernetes label rules; the opensandbox.io/ prefix is reserved), to filter lists by",
		"extensions":      "accepted and ignored",
		"networkPolicy":   "an egress policy (refused when the operator does not let agents set them: agent_egress = false)",
		"volumes":         "volumes to mount",
		"platform":        "refused: set it in the server's config entry",
		"credentialProxy": "refused: sandboxkit brokers credentials in its egress enforcer, configured by the operator",
		"secureAccess":    "accepted; the direct endpoints always take a route header",
	}))
	create.Properties["image"].Properties["uri"].Description = "the image, such as python:3.12"
	create.Properties["image"].Properties["auth"] = &jsonschema.Schema{Description: "registry credentials: refused (400); log the backend's engine in instead"}
	create.Properties["timeout"] = &jsonschema.Schema{Types: []string{"integer", "null"}, Minimum: ptr(60.0), Description: create.Properties["timeout"].Description}
	create.Properties["networkPolicy"] = ref("NetworkPolicy")
	create.Properties["volumes"] = arrayOf(ref("Volume"), "volumes to mount")
	for _, name := range []string{"platform", "credentialProxy"} {
		create.Properties[name] = &jsonschema.Schema{Description: create.Properties[name].Description}
	}
	create.Required = []string{"entrypoint"}
	create.Description = "A sandbox to create: from image (with entrypoint) or from snapshotId."
	sc["CreateSandboxRequest"] = create
	sc["EgressStatus"] = schemaFor[osbDocEgressStatus](nil)
	sc["EgressStatus"].Properties["policy"] = ref("NetworkPolicy")

	sc["ExecdError"] = schemaFor[osbDocError](map[string]string{"code": "FILE_NOT_FOUND, INVALID_REQUEST_BODY, MISSING_QUERY, COMMAND_NOT_FOUND, RUNTIME_ERROR, ..."})
	run := loosen(schemaFor[osbRunRequest](map[string]string{
		"command":    "the command, run with bash -c (sh -c where the image has no bash)",
		"cwd":        "where it runs; default the sandbox's working directory",
		"background": "run it in the background: the stream ends after its init event, and its output goes to its log (GET /command/{commandId}/logs)",
		"timeout":    "MILLISECONDS before it is killed; 0: none",
		"uid":        "the user ID to run it as",
		"gid":        "the group ID to run it as (needs uid)",
		"envs":       "environment variables to add",
	}))
	run.Required = []string{"command"}
	sc["RunCommandRequest"] = run
	sc["ServerStreamEvent"] = schemaFor[osbDocEvent](nil)
	sc["CommandStatus"] = schemaFor[osbDocCommandStatus](nil)
	sc["FileInfo"] = schemaFor[osbDocFileInfo](nil)
	perm := loosen(schemaFor[osbPerm](map[string]string{
		"owner": "the owner's name (default: unchanged, or root)", "group": "the group's name",
		"mode": "permissions as octal digits written as a decimal number (755); 0: the default",
	}))
	sc["Permission"] = perm
	sc["Metrics"] = schemaFor[osbDocMetrics](nil)

	// Lifecycle.
	osbErr := func(desc string) *oaResponse { return jsonResponse(desc, ref("ErrorResponse")) }
	unauthorized := osbErr("missing (MISSING_API_KEY) or wrong (INVALID_API_KEY) API key")
	notFound := osbErr("no such sandbox in this conversation (SANDBOX::NOT_FOUND)")
	invalid := jsonResponse("the body or a parameter does not validate (FastAPI's shape)", ref("ValidationError"))
	conv := paramRef("Conversation")
	v1 := "/v1"
	life := func(method, path, tag, summary, desc string, op *oaOp) {
		op.Tags, op.Summary, op.Description = []string{tag}, summary, desc
		op.Parameters = append([]*oaParam{conv}, op.Parameters...)
		op.Responses["401"] = unauthorized
		d.add(method, v1+path, op)
	}
	pageParams := []*oaParam{
		query("page", "the page, from 1 (default 1)", &jsonschema.Schema{Type: "integer", Minimum: ptr(1.0)}),
		query("pageSize", "items per page (default 20)", &jsonschema.Schema{Type: "integer", Minimum: ptr(1.0)}),
	}
	life("POST", "/sandboxes", "Sandboxes", "Create a sandbox", "Creates a sandbox and answers 202 with it, already Running: sandboxkit's backends start it before answering. A ready sandbox of the server's warm pool is used when the request asks for nothing it lacks.",
		&oaOp{OperationID: "createSandbox", RequestBody: jsonBody("the sandbox to create", ref("CreateSandboxRequest"),
			map[string]any{"image": map[string]any{"uri": "python:3.12"}, "entrypoint": []string{"tail", "-f", "/dev/null"}, "timeout": 3600,
				"resourceLimits": map[string]string{"cpu": "1", "memory": "2Gi"}, "metadata": map[string]string{"team": "ml"}}),
			Responses: map[string]*oaResponse{
				"202": jsonResponse("the sandbox", ref("Sandbox")),
				"400": osbErr("a value the server or backend refuses (SANDBOX::INVALID_PARAMETER, SANDBOX::INVALID_METADATA_LABEL)"),
				"404": osbErr("no such snapshot (SANDBOX::SNAPSHOT_NOT_FOUND)"),
				"413": osbErr(fmt.Sprintf("a body larger than %d MiB", MaxJSONBodyBytes>>20)),
				"422": invalid,
				"500": osbErr("the backend failed (SANDBOX::CREATE_FAILED)"),
				"501": osbErr("the backend cannot do what was asked (SANDBOX::NOT_SUPPORTED)"),
				"503": osbErr("the server is stopping, or holds as many request bodies as it may"),
			}})
	life("GET", "/sandboxes", "Sandboxes", "List sandboxes", "The conversation's sandboxes, oldest first, filtered and paged.",
		&oaOp{OperationID: "listSandboxes", Parameters: append([]*oaParam{
			{Name: "state", In: "query", Description: "only sandboxes in one of these states (repeat it)", Schema: arrayOf(str(""), "")},
			query("metadata", "only sandboxes with this metadata, as k=v pairs joined by & (URL-encode the whole value)", str("")),
		}, pageParams[0], &oaParam{Name: "pageSize", In: "query", Description: "items per page, 1 to 200 (default 20)",
			Schema: &jsonschema.Schema{Type: "integer", Minimum: ptr(1.0), Maximum: ptr(200.0)}}),
			Responses: map[string]*oaResponse{
				"200": jsonResponse("the page", ref("ListSandboxesResponse")),
				"400": osbErr("a bad metadata filter (INVALID_METADATA_FORMAT)"),
				"422": invalid,
			}})
	life("GET", "/sandboxes/{id}", "Sandboxes", "Get a sandbox", "",
		&oaOp{OperationID: "getSandbox", Responses: map[string]*oaResponse{"200": jsonResponse("the sandbox", ref("Sandbox")), "404": notFound}})
	life("DELETE", "/sandboxes/{id}", "Sandboxes", "Delete a sandbox", "",
		&oaOp{OperationID: "deleteSandbox", Responses: map[string]*oaResponse{"204": emptyResponse("deleted"), "404": notFound}})
	life("PATCH", "/sandboxes/{id}/metadata", "Sandboxes", "Change a sandbox's metadata",
		"A JSON merge patch of the metadata: a key with a string sets it, a key with null ({\"old\": null}) removes it. The server keeps the result; a restarted server shows the metadata the sandbox was created with.",
		&oaOp{OperationID: "patchSandboxMetadata",
			RequestBody: jsonBody("the patch", &jsonschema.Schema{Type: "object", AdditionalProperties: &jsonschema.Schema{Types: []string{"string", "null"}}},
				// No null in the example: RapiDoc 9.3.8 fails on one.
				map[string]any{"team": "infra"}),
			Responses: map[string]*oaResponse{
				"200": jsonResponse("the sandbox", ref("Sandbox")), "400": osbErr("a key or value the label rules refuse"),
				"404": notFound, "422": invalid,
			}})
	for _, verb := range []string{"pause", "resume"} {
		life("POST", "/sandboxes/{id}/"+verb, "Sandboxes", map[string]string{"pause": "Pause a sandbox", "resume": "Resume a paused sandbox"}[verb], "",
			&oaOp{OperationID: verb + "Sandbox", Responses: map[string]*oaResponse{
				"202": emptyResponse("done"), "404": notFound,
				"501": osbErr("the backend cannot pause sandboxes (SANDBOX::NOT_SUPPORTED)"),
			}})
	}
	life("POST", "/sandboxes/{id}/renew-expiration", "Sandboxes", "Renew a sandbox's expiry", "Moves its expiry to the time asked for (at most its hard limit); a sandbox made without a timeout gets one.",
		&oaOp{OperationID: "renewSandboxExpiration", RequestBody: jsonBody("the new expiry", ref("RenewSandboxExpirationRequest"), nil),
			Responses: map[string]*oaResponse{
				"200": jsonResponse("the expiry in force", ref("RenewSandboxExpirationResponse")),
				"400": osbErr("a time not in the future (SANDBOX::INVALID_EXPIRATION)"), "404": notFound, "422": invalid,
			}})
	life("GET", "/sandboxes/{id}/endpoints/{port}", "Endpoints", "Where to reach a port of a sandbox",
		"With use_server_proxy=true: through this server's proxy (/sandboxes/{id}/proxy/{port}, send the API key). Otherwise for execd's port ("+port+
			"): the direct execd endpoint (/execd/{id}) with its route header; for another port the address the backend publishes it at, else the direct port endpoint (/port/{id}/{port}) with its route header.",
		&oaOp{OperationID: "getSandboxEndpoint", Parameters: []*oaParam{
			{Name: "port", In: "path", Required: true, Description: "the port, 1 to 65535", Schema: &jsonschema.Schema{Type: "integer", Minimum: ptr(1.0), Maximum: ptr(65535.0)}},
			query("use_server_proxy", "answer an endpoint through this server's proxy", boolean("")),
			query("expires", "signed routes: refused (SANDBOX::API_NOT_SUPPORTED)", integer("")),
		},
			Responses: map[string]*oaResponse{
				"200": jsonResponse("the endpoint", ref("Endpoint")),
				"400": osbErr("a port outside 1 to 65535, or expires"), "404": notFound, "422": invalid,
			}})
	life("POST", "/sandboxes/{id}/snapshots", "Snapshots", "Take a snapshot of a sandbox", "",
		&oaOp{OperationID: "createSnapshot", RequestBody: &oaBody{Description: "optional: a name",
			Content: map[string]oaMedia{"application/json": {Schema: object("", map[string]*jsonschema.Schema{"name": str("a name for the snapshot")}, "name")}}},
			Responses: map[string]*oaResponse{
				"202": jsonResponse("the snapshot", ref("Snapshot")), "404": notFound, "422": invalid,
				"501": osbErr("the backend takes no snapshots (SANDBOX::NOT_SUPPORTED)"),
			}})
	life("GET", "/snapshots", "Snapshots", "List snapshots", "The conversation's snapshots, oldest first.",
		&oaOp{OperationID: "listSnapshots", Parameters: append([]*oaParam{
			query("sandboxId", "only snapshots of this sandbox", str("")),
			{Name: "state", In: "query", Description: "only snapshots in one of these states (all are Ready)", Schema: arrayOf(str(""), "")},
		}, pageParams...),
			Responses: map[string]*oaResponse{
				"200": jsonResponse("the page", ref("ListSnapshotsResponse")), "422": invalid,
				"501": osbErr("the backend takes no snapshots (SANDBOX::NOT_SUPPORTED)"),
			}})
	snapGone := osbErr("no such snapshot (SANDBOX::SNAPSHOT_NOT_FOUND)")
	life("GET", "/snapshots/{snapshotId}", "Snapshots", "Get a snapshot", "",
		&oaOp{OperationID: "getSnapshot", Responses: map[string]*oaResponse{"200": jsonResponse("the snapshot", ref("Snapshot")), "404": snapGone}})
	life("DELETE", "/snapshots/{snapshotId}", "Snapshots", "Delete a snapshot", "",
		&oaOp{OperationID: "deleteSnapshot", Responses: map[string]*oaResponse{"204": emptyResponse("deleted"), "404": snapGone}})

	// The proxy and the direct endpoints, generically.
	anyMethod := []string{"GET", "POST", "PUT", "PATCH", "DELETE"}
	passThrough := map[string]*oaResponse{
		"default": {Description: "what the port answers"},
		"400":     osbErr("a port outside 1 to 65535 (SANDBOX::INVALID_PORT)"),
		"404":     notFound,
		"502":     osbErr("nothing this server can reach listens there: the port is not published (SANDBOX::PORT_NOT_REACHABLE)"),
	}
	for _, m := range anyMethod {
		d.add(m, v1+"/sandboxes/{id}/proxy/{port}/{path}", &oaOp{Tags: []string{"Endpoints"}, Summary: "The server's proxy to a port of a sandbox (" + m + ")",
			Description: "Any method, any path: execd's port (" + port + ") goes to this server's execd (its routes are documented below as paths of this proxy), 18080 to the egress sidecar's API (/policy), other ports to the address the backend publishes them at. " +
				"Send the API key; it never goes on to the sandbox.",
			Parameters: []*oaParam{conv, {Name: "port", In: "path", Required: true, Description: "the port, 1 to 65535", Schema: &jsonschema.Schema{Type: "integer", Minimum: ptr(1.0), Maximum: ptr(65535.0)}}},
			Responses:  withUnauthorized(passThrough, unauthorized)})
		d.add(m, "/execd/{id}/{path}", &oaOp{Tags: []string{"Endpoints"}, Summary: "The direct execd endpoint (" + m + ")", Security: direct,
			Description: "execd of sandbox {id} at the endpoint GET /v1/sandboxes/{id}/endpoints/" + port + " hands out: {path} is an execd route (see the execd paths under the proxy). " +
				"Send the route header handed out with it, not the API key.",
			Parameters: []*oaParam{conv},
			Responses: map[string]*oaResponse{"default": {Description: "execd's answer"},
				"401": jsonResponse("missing or wrong route header", object("", map[string]*jsonschema.Schema{"error": str("")})), "404": notFound}})
		d.add(m, "/port/{id}/{port}/{path}", &oaOp{Tags: []string{"Endpoints"}, Summary: "A direct port endpoint (" + m + ")", Security: direct,
			Description: "A port the backend does not publish, at the endpoint GET /v1/sandboxes/{id}/endpoints/{port} hands out. Send the route header handed out with it, not the API key.",
			Parameters:  []*oaParam{conv},
			Responses: map[string]*oaResponse{"default": {Description: "what the port answers"},
				"401": jsonResponse("missing or wrong route header", object("", map[string]*jsonschema.Schema{"error": str("")})), "404": notFound,
				"502": passThrough["502"]}})
	}

	// execd, through the proxy.
	xp := v1 + "/sandboxes/{id}/proxy/" + port
	xErr := func(desc string) *oaResponse { return jsonResponse(desc, ref("ExecdError")) }
	xok := emptyResponse("done")
	stream := &oaResponse{Description: "the command's events: each one JSON object (a ServerStreamEvent) followed by a blank line, no data: prefix. " +
		"Exit 0 ends with execution_complete; another exit code with an error event ({\"ename\":\"CommandExecError\",\"evalue\":\"CODE\"}); a timeout with evalue -1. Stop reading at either.",
		Content: map[string]oaMedia{"text/event-stream": {Schema: ref("ServerStreamEvent")}}}
	pathsQuery := &oaParam{Name: "path", In: "query", Required: true, Description: "a path in the sandbox (repeat it for several)", Schema: arrayOf(str(""), "")}
	execd := func(method, path, tag, summary, desc string, op *oaOp) {
		op.Tags, op.Summary, op.Description = []string{tag}, summary, desc
		op.Parameters = append([]*oaParam{conv, paramRef("ExecdToken")}, op.Parameters...)
		op.Responses["401"] = jsonResponse("a wrong API key, or a missing or wrong execd access token ({\"error\":...})", &jsonschema.Schema{Type: "object"})
		if op.Responses["404"] == nil {
			op.Responses["404"] = notFound
		}
		if op.OperationID == "" {
			id := operationID(strings.ToLower(method), path)
			op.OperationID = "execd" + strings.ToUpper(id[:1]) + id[1:]
		}
		d.add(method, xp+path, op)
	}
	execd("GET", "/ping", "execd: commands", "Readiness probe", "200 once execd answers.", &oaOp{Responses: map[string]*oaResponse{"200": xok}})
	execd("POST", "/command", "execd: commands", "Run a command", "Runs a command and streams its events; in the background, only the init event (the output goes to the command's log).",
		&oaOp{RequestBody: jsonBody("the command", ref("RunCommandRequest"), map[string]any{"command": "ls -la", "cwd": "/tmp", "timeout": 60000}),
			Responses: map[string]*oaResponse{"200": stream, "400": xErr("no command, a negative timeout, gid without uid")}})
	execd("DELETE", "/command", "execd: commands", "Interrupt a command", "SIGTERM to its process group, SIGKILL after 3 s.",
		&oaOp{Parameters: []*oaParam{{Name: "id", In: "query", Required: true, Description: "the command's ID", Schema: str("")}},
			Responses: map[string]*oaResponse{"200": xok, "400": xErr("no id (MISSING_QUERY)"), "404": xErr("no such command (COMMAND_NOT_FOUND), or no such sandbox")}})
	execd("GET", "/command/status/{commandId}", "execd: commands", "A command's status", "",
		&oaOp{Responses: map[string]*oaResponse{"200": jsonResponse("the status", ref("CommandStatus")), "404": xErr("no such command (COMMAND_NOT_FOUND), or no such sandbox")}})
	execd("GET", "/command/{commandId}/logs", "execd: commands", "A background command's output", "The output after cursor, a BYTE offset (what was already read); the next cursor comes in EXECD-COMMANDS-TAIL-CURSOR.",
		&oaOp{Parameters: []*oaParam{query("cursor", "bytes already read (default 0)", &jsonschema.Schema{Type: "integer", Minimum: ptr(0.0)})},
			Responses: map[string]*oaResponse{
				"200": {Description: "the output", Headers: map[string]*oaHeader{"EXECD-COMMANDS-TAIL-CURSOR": {Description: "the cursor to send next time", Schema: integer("")}},
					Content: map[string]oaMedia{"text/plain": {Schema: str("")}}},
				"400": xErr("a bad cursor"), "404": xErr("no such background command (COMMAND_NOT_FOUND), or no such sandbox"),
			}})
	execd("POST", "/session", "execd: sessions", "Start a bash session", "A session keeps its variables, functions and working directory between commands (exported variables and the directory only where the image has no bash).",
		&oaOp{RequestBody: &oaBody{Description: "optional", Content: map[string]oaMedia{"application/json": {Schema: schemaFor[osbDocNewSession](nil)}}},
			Responses: map[string]*oaResponse{"200": jsonResponse("the session", schemaFor[osbDocSession](nil)), "400": xErr("a bad body")}})
	execd("POST", "/session/{sessionId}/run", "execd: sessions", "Run a command in a session", "One command at a time per session; streamed as POST /command's.",
		&oaOp{RequestBody: jsonBody("the command", schemaFor[osbDocSessionRun](nil), map[string]any{"command": "cd /work && export X=1"}),
			Responses: map[string]*oaResponse{"200": stream, "400": xErr("no command, a negative timeout"), "404": xErr("no such session (CONTEXT_NOT_FOUND), or no such sandbox")}})
	execd("DELETE", "/session/{sessionId}", "execd: sessions", "End a session", "",
		&oaOp{Responses: map[string]*oaResponse{"200": xok, "404": xErr("no such session (CONTEXT_NOT_FOUND), or no such sandbox")}})
	execd("GET", "/ws/session/{sessionId}", "execd: sessions", "A session's terminal, over a WebSocket",
		"Steers the session's bash on a pseudo-terminal (pty=1) over a WebSocket until it ends or the client goes: a replay of recent output (since an offset) first, then a connected message, then the terminal's bytes.",
		&oaOp{Parameters: []*oaParam{
			header("Upgrade", "websocket", true),
			query("pty", "1: a pseudo-terminal (required)", str("")),
			query("since", "replay the output from this offset", &jsonschema.Schema{Type: "integer", Minimum: ptr(0.0)}),
		}, Responses: map[string]*oaResponse{"101": emptyResponse("Switching Protocols"), "400": xErr("not a WebSocket, or pty is not 1"),
			"404": xErr("no such session, or no such sandbox")}})
	execd("GET", "/files/info", "execd: files", "Describe files", "Without following symlinks.",
		&oaOp{Parameters: []*oaParam{pathsQuery}, Responses: map[string]*oaResponse{
			"200": jsonResponse("each path's FileInfo, by path", &jsonschema.Schema{Type: "object", AdditionalProperties: ref("FileInfo")}),
			"400": xErr("no path (MISSING_QUERY)"), "404": xErr("a path does not exist (FILE_NOT_FOUND), or no such sandbox")}})
	execd("GET", "/files/download", "execd: files", "Download a file", "Range requests are supported.",
		&oaOp{Parameters: []*oaParam{{Name: "path", In: "query", Required: true, Description: "the file", Schema: str("")}, header("Range", "bytes=START-END", false)},
			Responses: map[string]*oaResponse{
				"200": {Description: "the file", Content: map[string]oaMedia{"application/octet-stream": {Schema: &jsonschema.Schema{Type: "string", Format: "binary"}}}},
				"206": {Description: "the range asked for", Content: map[string]oaMedia{"application/octet-stream": {Schema: &jsonschema.Schema{Type: "string", Format: "binary"}}}},
				"400": xErr("no path, or a directory"), "404": xErr("no such file (FILE_NOT_FOUND), or no such sandbox"),
				"416": xErr("a range outside the file"),
			}})
	upload := object("pairs of parts: metadata (it MUST carry a filename, e.g. filename=\"metadata\"; JSON as UploadMetadata), then file", map[string]*jsonschema.Schema{
		"metadata": loosen(schemaFor[osbDocUploadMeta](nil)), "file": {Type: "string", Format: "binary", Description: "the file's bytes"},
	})
	execd("POST", "/files/upload", "execd: files", "Upload files", "A multipart form of metadata and file parts, one pair per file; parents are made. The body streams to the sandbox.",
		&oaOp{RequestBody: &oaBody{Required: true, Content: map[string]oaMedia{"multipart/form-data": {Schema: upload}}},
			Responses: map[string]*oaResponse{"200": xok, "400": xErr("a bad form (INVALID_FILE, INVALID_FILE_METADATA)")}})
	execd("POST", "/files/mv", "execd: files", "Move files", "",
		&oaOp{RequestBody: jsonBody("what to move where", arrayOf(schemaFor[osbDocMove](nil), ""), []map[string]string{{"src": "/tmp/a", "dest": "/tmp/b"}}),
			Responses: map[string]*oaResponse{"200": xok, "400": xErr("a bad body"), "404": xErr("a source does not exist, or no such sandbox")}})
	execd("POST", "/files/permissions", "execd: files", "Change files' owner, group and mode", "",
		&oaOp{RequestBody: jsonBody("each path's permissions, by path", &jsonschema.Schema{Type: "object", AdditionalProperties: ref("Permission")},
			map[string]any{"/tmp/run.sh": map[string]any{"mode": 755}}),
			Responses: map[string]*oaResponse{"200": xok, "400": xErr("a bad body or mode"), "404": xErr("a path does not exist, or no such sandbox")}})
	execd("DELETE", "/files", "execd: files", "Remove files", "",
		&oaOp{Parameters: []*oaParam{pathsQuery}, Responses: map[string]*oaResponse{"200": xok, "400": xErr("no path")}})
	execd("GET", "/files/search", "execd: files", "Find files by name", "Matches the glob pattern against BASENAMES only, and returns files only.",
		&oaOp{Parameters: []*oaParam{{Name: "path", In: "query", Required: true, Description: "the directory to search", Schema: str("")},
			query("pattern", "a glob pattern of base names (default *)", str(""))},
			Responses: map[string]*oaResponse{"200": jsonResponse("the files", arrayOf(ref("FileInfo"), "")), "400": xErr("no path"),
				"404": xErr("no such directory (FILE_NOT_FOUND), or no such sandbox")}})
	execd("POST", "/files/replace", "execd: files", "Replace text in files", "Replaces ALL occurrences in each file.",
		&oaOp{Parameters: []*oaParam{query("verbose", "true: answer how many occurrences each file had", str(""))},
			RequestBody: jsonBody("each file's replacement, by path", &jsonschema.Schema{Type: "object", AdditionalProperties: schemaFor[osbDocReplace](nil)},
				map[string]any{"/app/config.yaml": map[string]string{"old": "debug: true", "new": "debug: false"}}),
			Responses: map[string]*oaResponse{
				"200": jsonResponse("done; with verbose, {path: {\"replacedCount\": N}}", &jsonschema.Schema{Type: "object"}),
				"400": xErr("a bad body, or an empty old"), "404": xErr("a file does not exist (FILE_NOT_FOUND), or no such sandbox"),
			}})
	execd("GET", "/directories/list", "execd: files", "List a directory", "To depth levels, without following symlinks.",
		&oaOp{Parameters: []*oaParam{{Name: "path", In: "query", Required: true, Description: "the directory", Schema: str("")},
			query("depth", "levels to list (default 1)", &jsonschema.Schema{Type: "integer", Minimum: ptr(0.0)})},
			Responses: map[string]*oaResponse{"200": jsonResponse("the entries", arrayOf(ref("FileInfo"), "")), "400": xErr("no path, a bad depth, or not a directory"),
				"404": xErr("no such directory (FILE_NOT_FOUND), or no such sandbox")}})
	execd("POST", "/directories", "execd: files", "Make directories", "mkdir -p of each path, with its permissions.",
		&oaOp{RequestBody: jsonBody("each directory's permissions, by path", &jsonschema.Schema{Type: "object", AdditionalProperties: ref("Permission")},
			map[string]any{"/work/out": map[string]any{"mode": 755}}),
			Responses: map[string]*oaResponse{"200": xok, "400": xErr("a bad body or mode")}})
	execd("DELETE", "/directories", "execd: files", "Remove directories", "rm -rf of each path.",
		&oaOp{Parameters: []*oaParam{pathsQuery}, Responses: map[string]*oaResponse{"200": xok}})
	execd("GET", "/metrics", "execd: metrics", "The sandbox's CPU and memory", "",
		&oaOp{Responses: map[string]*oaResponse{"200": jsonResponse("the metrics", ref("Metrics")), "500": xErr("they could not be read")}})
	execd("GET", "/metrics/watch", "execd: metrics", "The metrics every second", "A stream of Metrics, one JSON object and a blank line each, until the client goes.",
		&oaOp{Responses: map[string]*oaResponse{"200": {Description: "the stream", Content: map[string]oaMedia{"text/event-stream": {Schema: ref("Metrics")}}}}})
	execd("POST", "/code", "execd: commands", "Code interpreter: not supported", "sandboxkit's execd has no code interpreter (Jupyter contexts): every /code route answers 501. Run code with POST /command (python3 -c ...) or a session.",
		&oaOp{Responses: map[string]*oaResponse{"501": xErr("NOT_SUPPORTED")}})
	execd("GET", "/proxy/{targetPort}/{path}", "Endpoints", "execd's proxy to another port (any method)",
		"HTTP to a port of the sandbox, as execd's /proxy/{port}/ forwards it: the same as the server's proxy to that port.",
		&oaOp{OperationID: "execdProxy", Parameters: []*oaParam{{Name: "targetPort", In: "path", Required: true, Description: "the port, 1 to 65535",
			Schema: &jsonschema.Schema{Type: "integer", Minimum: ptr(1.0), Maximum: ptr(65535.0)}}},
			Responses: map[string]*oaResponse{"default": {Description: "what the port answers"}, "400": xErr("a bad port")}})

	// The egress sidecar's API, through the proxy.
	ep := v1 + "/sandboxes/{id}/proxy/18080/policy"
	egressResponses := func() map[string]*oaResponse {
		return map[string]*oaResponse{
			"200": jsonResponse("the policy in force", ref("EgressStatus")),
			"401": unauthorized, "404": notFound,
			"502": osbErr("the sandbox has no egress sidecar: it was created without a networkPolicy, or the backend enforces none (EGRESS_UNAVAILABLE)"),
		}
	}
	d.add("GET", ep, &oaOp{Tags: []string{"Egress"}, Summary: "The sandbox's egress policy", OperationID: "getEgressPolicy",
		Parameters: []*oaParam{conv}, Responses: egressResponses()})
	patch := egressResponses()
	patch["400"] = osbErr("not a non-empty array of rules, or a rule outside the operator's bound (INVALID_REQUEST_BODY)")
	d.add("PATCH", ep, &oaOp{Tags: []string{"Egress"}, Summary: "Add egress rules", OperationID: "patchEgressPolicy",
		Description: "The rules go before the current ones (they win over them). The operator's bound and the config entry's policy still hold.",
		Parameters:  []*oaParam{conv},
		RequestBody: jsonBody("the rules to add", arrayOf(ref("NetworkRule"), ""), []map[string]string{{"action": "allow", "target": "pypi.org"}}),
		Responses:   patch})
	del := egressResponses()
	del["400"] = osbErr("not a non-empty array of targets (INVALID_REQUEST_BODY)")
	d.add("DELETE", ep, &oaOp{Tags: []string{"Egress"}, Summary: "Remove egress rules", OperationID: "deleteEgressRules",
		Description: "Removes the rules of the targets given.", Parameters: []*oaParam{conv},
		RequestBody: jsonBody("the targets whose rules go", arrayOf(str(""), ""), []string{"pypi.org"}),
		Responses:   del})
	return d
}

// withUnauthorized is m with a 401.
func withUnauthorized(m map[string]*oaResponse, r *oaResponse) map[string]*oaResponse {
	out := maps.Clone(m)
	out["401"] = r
	return out
}
