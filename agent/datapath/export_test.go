package datapath

import "time"

// SetLeftoverRecheck sets, until the test ends, when OpenFamilies looks for
// another backend's rules after a start that did not.
func SetLeftoverRecheck(d time.Duration) (restore func()) {
	old := leftoverRecheck
	leftoverRecheck = d
	return func() { leftoverRecheck = old }
}
