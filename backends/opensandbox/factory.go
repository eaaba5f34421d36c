package opensandbox

import (
	"context"
	"time"

	"github.com/sandboxkit/sandboxkit/backend"
)

// EntryTTLKey is OpenSage's [extra] key for an entry's time to live on
// OpenSandbox, in seconds.
const EntryTTLKey = "opensandbox_timeout_sec"

// Factory opens the opensandbox backend from a config file's
// [sandbox.opensandbox] table (OPEN_SANDBOX_DOMAIN and OPEN_SANDBOX_API_KEY
// fill what it leaves out). Its default_timeout_sec is the default TTL of
// files that set no [sandbox] default_ttl, and an entry's
// extra.opensandbox_timeout_sec its own TTL. A host volume of OpenSandbox
// is a folder of the server's machine, not of this one, so [sandbox]
// host_shared_mem_dir is refused (NoHostFolders).
var Factory = backend.Factory{
	Name:      Name,
	NewConfig: func() any { return new(Config) },
	Open: func(_ context.Context, req backend.OpenRequest) (backend.Backend, error) {
		c, err := backend.TableAs[Config](Name, req.Table)
		if err != nil {
			return nil, err
		}
		return New(c, WithLogger(req.Logger))
	},
	DefaultTTL: func(table any) time.Duration {
		c, _ := backend.TableAs[Config](Name, table)
		return c.DefaultTTL()
	},
	EntryTTLKey:   EntryTTLKey,
	NoHostFolders: true,
}
