// Package registry builds a provider's configuration from its name and its
// section of npl-lbsync's configuration file. The table of providers is
// explicit: a provider is linked in only when it is listed here.
package registry

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nodeportlocal/npl/providers"
	"github.com/nodeportlocal/npl/providers/avi"
	"github.com/nodeportlocal/npl/providers/bigip"
	"github.com/nodeportlocal/npl/providers/haproxy"
	"github.com/nodeportlocal/npl/providers/mock"
)

// parsers maps provider.name to the provider's ParseFunc.
var parsers = map[string]providers.ParseFunc{
	avi.Name:     avi.Parse,
	bigip.Name:   bigip.Parse,
	haproxy.Name: haproxy.Parse,
	mock.Name:    mock.Parse,
}

// Names returns the valid provider names, sorted.
func Names() []string {
	return slices.Sorted(maps.Keys(parsers))
}

// Known reports whether name is a valid provider name.
func Known(name string) bool {
	_, ok := parsers[name]
	return ok
}

// Parse decodes and checks the configuration section of the provider name.
// An unknown name is an error listing the valid ones. A provider's own error
// is returned as is: by convention it starts with the path of the field it
// concerns ("passwordFile: open /x: no such file"), which the config package
// joins to its own ("config: provider.avi.passwordFile: ...").
//
// The Config's Open returns the provider behind providers.Validated, so
// that no provider opened here receives a model that breaks the rules of
// the model.
func Parse(name string, common providers.Common, section []byte) (providers.Config, error) {
	parse, ok := parsers[name]
	if !ok {
		return nil, fmt.Errorf("unknown provider %q (valid: %s)", name, strings.Join(Names(), ", "))
	}
	cfg, err := parse(common, section)
	if err != nil {
		return nil, err
	}
	return validatedConfig{cfg}, nil
}

// validatedConfig opens its provider behind providers.Validated.
type validatedConfig struct{ providers.Config }

func (c validatedConfig) Open(ctx context.Context) (providers.Provider, error) {
	p, err := c.Config.Open(ctx)
	if err != nil {
		return nil, err
	}
	return providers.Validated(p), nil
}

// Unwrap returns the provider's own configuration.
func (c validatedConfig) Unwrap() providers.Config { return c.Config }
