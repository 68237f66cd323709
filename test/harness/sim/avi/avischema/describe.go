package avischema

import (
	"regexp"
	"strconv"
	"strings"
)

// The limits Avi's swagger files keep in descriptions, in the forms every
// release uses (20.1 quotes special values, 22.1 and later do not):
//
//	Enum options - V4, DNS, V6.
//	Allowed values are 1-65535.   Allowed values are 0 - 10.   Allowed values are 0,1,2,4,8,16.
//	Special values are 0- 'use backend port in pool'.   Special values are 0 - Immediate, -1 - Infinite.
//	Maximum of 5000 items allowed.   Minimum of 1 items required.
//	It is a reference to an object of type HealthMonitor.
//	Field introduced in 17.2.12, 18.1.3, 18.2.1.
var (
	enumRe       = regexp.MustCompile(`Enum options - ([A-Za-z0-9_, -]+?)\.(?:\s|$)`)
	rangeRe      = regexp.MustCompile(`Allowed values are (-?\d+)\s*-\s*(-?\d+)\.`)
	listRe       = regexp.MustCompile(`Allowed values are (-?\d+(?:,\s*-?\d+)+)\.`)
	specialRe    = regexp.MustCompile(`Special values are (.*)`)
	specialValRe = regexp.MustCompile(`(?:^|,\s*)(-?\d+)\s*-`)
	maxItemsRe   = regexp.MustCompile(`Maximum of (\d+) items`)
	minItemsRe   = regexp.MustCompile(`Minimum of (\d+) items`)
	refRe        = regexp.MustCompile(`reference to an object of type (\w+)`)
	introducedRe = regexp.MustCompile(`Field introduced in ((?:\d+\.\d+\.\d+(?:,\s*)?)+)`)
	// sentenceEnd ends the special values: the sentences that may follow
	// them.
	sentenceEnd = regexp.MustCompile(`\.\s+(?:Unit is|Field |Allowed in|Special default|Units\(|Field deprecated)|\.$`)
)

// describe reads the limits in a property's description into p.
func describe(p *Prop, d string) {
	if m := enumRe.FindStringSubmatch(d); m != nil {
		for _, v := range strings.Split(m[1], ",") {
			if v = strings.TrimSpace(v); v != "" {
				p.Enum = append(p.Enum, v)
			}
		}
	}
	if m := rangeRe.FindStringSubmatch(d); m != nil {
		lo, _ := strconv.ParseInt(m[1], 10, 64)
		hi, _ := strconv.ParseInt(m[2], 10, 64)
		p.Range = &[2]int64{lo, hi}
	} else if m := listRe.FindStringSubmatch(d); m != nil {
		for _, v := range strings.Split(m[1], ",") {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			p.Special = append(p.Special, n)
		}
		p.Range = &[2]int64{1, 0} // empty: only the listed values
	}
	if m := specialRe.FindStringSubmatch(d); m != nil {
		text := m[1]
		if loc := sentenceEnd.FindStringIndex(text); loc != nil {
			text = text[:loc[0]]
		}
		for _, sm := range specialValRe.FindAllStringSubmatch(text, -1) {
			n, _ := strconv.ParseInt(sm[1], 10, 64)
			p.Special = append(p.Special, n)
		}
	}
	if m := maxItemsRe.FindStringSubmatch(d); m != nil {
		p.MaxItems, _ = strconv.Atoi(m[1])
	}
	if m := minItemsRe.FindStringSubmatch(d); m != nil {
		p.MinItems, _ = strconv.Atoi(m[1])
	}
	if m := refRe.FindStringSubmatch(d); m != nil {
		p.RefType = strings.ToLower(m[1])
	}
	if m := introducedRe.FindStringSubmatch(d); m != nil {
		for _, v := range strings.Split(m[1], ",") {
			if ver, ok := ParseVersion(strings.TrimSpace(v)); ok {
				p.Introduced = append(p.Introduced, ver)
			}
		}
	}
}

// Version is an Avi API version, major.minor.patch.
type Version [3]int

// ParseVersion reads "22.1.3" (a fourth part, as in 18.2.10.1, is ignored).
func ParseVersion(s string) (Version, bool) {
	parts := strings.Split(s, ".")
	if len(parts) < 2 {
		return Version{}, false
	}
	var v Version
	for i := 0; i < 3 && i < len(parts); i++ {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return Version{}, false
		}
		v[i] = n
	}
	return v, true
}

func (v Version) String() string {
	return strconv.Itoa(v[0]) + "." + strconv.Itoa(v[1]) + "." + strconv.Itoa(v[2])
}

// Less orders versions.
func (v Version) Less(w Version) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}
	return false
}

// knownIn reports whether a field introduced in the versions intro exists
// in version v: a field introduced in 17.2.12, 18.1.3, 18.2.1 exists in
// 17.2.12 and later 17.2 releases, 18.1.3 and later 18.1 releases, and from
// 18.2.1 on.
func knownIn(intro []Version, v Version) bool {
	if len(intro) == 0 {
		return true
	}
	for _, in := range intro {
		if in[0] == v[0] && in[1] == v[1] {
			return !v.Less(in)
		}
	}
	// No release of v's branch is listed: v has it if its branch came after
	// the earliest listed one.
	earliest := intro[0]
	for _, in := range intro[1:] {
		if in.Less(earliest) {
			earliest = in
		}
	}
	return earliest.Less(v)
}
