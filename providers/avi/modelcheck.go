package avi

import (
	"github.com/nodeportlocal/npl/lbmodel"
	"github.com/nodeportlocal/npl/providers"
)

var _ providers.ModelChecker = (*Provider)(nil)

// CheckModel refuses what gatewaySubset, the check Ensure runs, refuses.
func (p *Provider) CheckModel(lb *lbmodel.LoadBalancer) error { return gatewaySubset(lb) }
