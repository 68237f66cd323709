package mock

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nodeportlocal/npl/internal/strictjson"
	"github.com/nodeportlocal/npl/providers"
)

// Name is the provider's name in npl-lbsync's configuration (provider.name).
const Name = "mock"

// Config is the mock's decoded configuration section. Its zero value plus a
// Common is a valid in-memory mock.
type Config struct {
	// Common is npl-lbsync's shared configuration: the cluster name that
	// marks ownership and the pool VIPs are taken from.
	Common providers.Common
	// StateFile, when set, is where the state is kept across restarts. It is
	// used as given: a relative path is relative to the working directory.
	StateFile string
	// Latency is added to every call.
	Latency time.Duration
	// FailCalls makes the first FailCalls calls fail.
	FailCalls int
	// AllowFaultInjection serves POST /providers/mock/fault.
	AllowFaultInjection bool
}

// section is the YAML/JSON shape of provider.mock.
type section struct {
	StateFile           string `json:"stateFile"`
	Latency             string `json:"latency"`
	FailCalls           int    `json:"failCalls"`
	AllowFaultInjection bool   `json:"allowFaultInjection"`
}

// Parse decodes the mock's configuration section strictly; it is the mock's
// providers.ParseFunc. An empty or null section is the default mock. Errors
// start with the field they concern, for example "latency: ...".
func Parse(common providers.Common, data []byte) (providers.Config, error) {
	var s section
	if err := strictjson.Decode(data, &s, ""); err != nil {
		return nil, err
	}
	cfg := &Config{Common: common, StateFile: s.StateFile, FailCalls: s.FailCalls, AllowFaultInjection: s.AllowFaultInjection}
	if s.Latency != "" {
		d, err := time.ParseDuration(s.Latency)
		if err != nil {
			return nil, fmt.Errorf("latency: %w", err)
		}
		if d < 0 {
			return nil, fmt.Errorf("latency: %s is negative", s.Latency)
		}
		cfg.Latency = d
	}
	if s.FailCalls < 0 {
		return nil, fmt.Errorf("failCalls: %d is negative", s.FailCalls)
	}
	if s.StateFile != "" {
		// The file itself appears on the first write; its directory must exist.
		dir := filepath.Dir(s.StateFile)
		fi, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("stateFile: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("stateFile: %s is not a directory", dir)
		}
	}
	return cfg, nil
}

// Open builds the mock, loading StateFile if it exists.
func (c *Config) Open(_ context.Context) (providers.Provider, error) {
	return New(*c)
}
