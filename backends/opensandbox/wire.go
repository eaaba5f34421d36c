package opensandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// The JSON shapes of the two OpenSandbox APIs that this package uses, from
// sandbox-lifecycle.yml and execd-api.yaml.

// Sandbox states of the lifecycle API. Others may appear; they are
// tolerated.
const (
	statePending    = "Pending"
	stateRunning    = "Running"
	statePausing    = "Pausing"
	statePaused     = "Paused"
	stateResuming   = "Resuming"
	stateStopping   = "Stopping"
	stateTerminated = "Terminated"
	stateFailed     = "Failed"
)

type imageSpec struct {
	URI string `json:"uri"`
}

type sandboxStatus struct {
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// sandboxJSON is the lifecycle API's Sandbox (and CreateSandboxResponse,
// which lacks image).
type sandboxJSON struct {
	ID         string            `json:"id"`
	Image      *imageSpec        `json:"image,omitempty"`
	Status     sandboxStatus     `json:"status"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	ExpiresAt  wireTime          `json:"expiresAt,omitzero"`
	CreatedAt  wireTime          `json:"createdAt,omitzero"`
}

type createRequest struct {
	Image imageSpec `json:"image"`
	// Timeout in seconds; nil means no expiry.
	Timeout        *int               `json:"timeout,omitempty"`
	ResourceLimits map[string]string  `json:"resourceLimits"`
	Env            map[string]string  `json:"env,omitempty"`
	Metadata       map[string]string  `json:"metadata,omitempty"`
	Entrypoint     []string           `json:"entrypoint"`
	Volumes        []volumeJSON       `json:"volumes,omitempty"`
	NetworkPolicy  *networkPolicyJSON `json:"networkPolicy,omitempty"`
}

type volumeJSON struct {
	Name      string   `json:"name"`
	Host      *hostVol `json:"host,omitempty"`
	PVC       *pvcVol  `json:"pvc,omitempty"`
	MountPath string   `json:"mountPath"`
	ReadOnly  bool     `json:"readOnly,omitempty"`
}

type hostVol struct {
	Path string `json:"path"`
}

type pvcVol struct {
	ClaimName string `json:"claimName"`
}

type listResponse struct {
	Items      []sandboxJSON `json:"items"`
	Pagination struct {
		Page        int  `json:"page"`
		PageSize    int  `json:"pageSize"`
		TotalItems  int  `json:"totalItems"`
		TotalPages  int  `json:"totalPages"`
		HasNextPage bool `json:"hasNextPage"`
	} `json:"pagination"`
}

type renewRequest struct {
	ExpiresAt string `json:"expiresAt"`
}

type renewResponse struct {
	ExpiresAt wireTime `json:"expiresAt"`
}

type endpointJSON struct {
	Endpoint string            `json:"endpoint"`
	Headers  map[string]string `json:"headers,omitempty"`
}

// runCommandRequest is execd's RunCommandRequest. Timeout is in
// milliseconds.
type runCommandRequest struct {
	Command string            `json:"command"`
	Cwd     string            `json:"cwd,omitempty"`
	Timeout int64             `json:"timeout,omitempty"`
	UID     *int              `json:"uid,omitempty"`
	GID     *int              `json:"gid,omitempty"`
	Envs    map[string]string `json:"envs,omitempty"`
}

// Event types of execd's command stream.
const (
	eventInit              = "init"
	eventStdout            = "stdout"
	eventStderr            = "stderr"
	eventStatus            = "status"
	eventResult            = "result"
	eventExecutionCount    = "execution_count"
	eventExecutionComplete = "execution_complete"
	eventErr               = "error"
	eventPing              = "ping"
)

// event is one ServerStreamEvent.
type event struct {
	Type          string          `json:"type"`
	Text          string          `json:"text,omitempty"`
	ExecutionTime int64           `json:"execution_time,omitempty"`
	Timestamp     int64           `json:"timestamp,omitempty"`
	Results       map[string]any  `json:"results,omitempty"`
	Error         *eventErrorJSON `json:"error,omitempty"`
}

type eventErrorJSON struct {
	EName     string   `json:"ename"`
	EValue    string   `json:"evalue"`
	Traceback []string `json:"traceback,omitempty"`
}

// fileInfoJSON is execd's FileInfo. Mode holds octal digits written as a
// decimal number (0o755 is 755).
type fileInfoJSON struct {
	Path       string   `json:"path"`
	Type       string   `json:"type,omitempty"`
	Size       int64    `json:"size"`
	ModifiedAt wireTime `json:"modified_at,omitzero"`
	Owner      string   `json:"owner,omitempty"`
	Group      string   `json:"group,omitempty"`
	Mode       int      `json:"mode"`
}

// fileMetadata is the JSON of an upload's metadata part.
type fileMetadata struct {
	Path  string `json:"path"`
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	Mode  int    `json:"mode,omitempty"`
}

type permissionJSON struct {
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	Mode  int    `json:"mode"`
}

type renameItem struct {
	Src  string `json:"src"`
	Dest string `json:"dest"`
}

// wireTime reads the timestamps the Python server writes: RFC 3339 with or
// without fractional seconds, and also without a zone (taken as UTC).
type wireTime struct{ time.Time }

var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999"}

func (t *wireTime) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		t.Time = time.Time{}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	if s == "" {
		t.Time = time.Time{}
		return nil
	}
	for _, layout := range timeLayouts {
		if v, err := time.Parse(layout, s); err == nil {
			t.Time = v
			return nil
		}
	}
	return fmt.Errorf("time %q: want RFC 3339", s)
}

func (t wireTime) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(t.UTC().Format(time.RFC3339Nano))
}

// octalMode converts a permission to execd's octal-digits-as-decimal form.
func octalMode(perm uint32) int {
	n := 0
	for mul := 1; perm > 0; mul *= 10 {
		n += int(perm&7) * mul
		perm >>= 3
	}
	return n
}

// modeFromOctal reverses octalMode.
func modeFromOctal(m int) uint32 {
	var perm uint32
	for shift := 0; m > 0; shift += 3 {
		perm |= uint32(m%10&7) << shift
		m /= 10
	}
	return perm
}
