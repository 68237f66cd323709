package gateway

import "github.com/nodeportlocal/npl/lbmodel"

// weighted joins the members of several backends so that each backend
// gets its weight's share of requests, and returns them with the weight of
// the share of the invalid backendRefs, whose weights add up to invalid
// (0 for none): a member's weight is its backend's weight divided by the
// backend's member count, the invalid share counts as a backend of one
// member, and all are scaled to 1-256 and divided by their greatest common
// divisor. A backend without members has no share: its requests go to the
// others (the invalid share among them). One backend, or equal shares,
// leave the members' weights unset (1); an invalid share is then 1.
func weighted(valid []backend, groups [][]lbmodel.Member, invalid int32) ([]lbmodel.Member, int32) {
	var out []lbmodel.Member
	share := make([]float64, len(valid))
	most := float64(invalid)
	for i, be := range valid {
		if n := len(groups[i]); n > 0 {
			share[i] = float64(be.weight) / float64(n)
			most = max(most, share[i])
		}
	}
	same := invalid == 0 || float64(invalid) == most
	for i := range valid {
		if len(groups[i]) > 0 && share[i] != most {
			same = false
		}
	}
	scaled := func(share float64) int32 {
		if same {
			return 1
		}
		return max(1, int32(share/most*256+0.5))
	}
	for i, g := range groups {
		for _, m := range g {
			if !same {
				m.Weight = scaled(share[i])
			}
			out = append(out, m)
		}
	}
	invalidWeight := int32(0)
	if invalid > 0 {
		invalidWeight = scaled(float64(invalid))
	}
	if !same {
		g := invalidWeight
		for _, m := range out {
			g = lbmodel.WeightGCD(g, m.Weight)
		}
		for i := range out {
			out[i].Weight /= g
		}
		invalidWeight /= g
	}
	return lbmodel.SortMembers(out), invalidWeight
}
