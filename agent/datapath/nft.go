package datapath

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The nft command. The nftables backend builds its transactions with
// knftables' types and runs them with `nft -f -` itself: knftables.New
// runs nft twice to probe it (--version, then a --check of a table with a
// comment), which were two of the five commands of a restart. Here one
// `nft -j list tables` probes nft (its version, and that it runs with the
// rights it needs) and lists the tables, which the start needs anyway (the
// backend choice, the other backend's leftovers); knftables' own
// interface, with its probes, is made only for the drift check's
// listings.

// nftInfo is what the process learnt of the nft command.
type nftInfo struct {
	path string
	// objectComments says tables, chains, maps and sets take comments
	// here (Linux 5.10 and later); knftables drops them otherwise.
	objectComments bool
}

// nftProbed is the probe of the nft command, made once per process: the
// binary does not change under a running agent.
var nftProbed struct {
	sync.Mutex
	done bool
	info nftInfo
	err  error
}

// probeNFT returns what the process knows of nft, listing the tables to
// learn it the first time.
func probeNFT(ctx context.Context) (nftInfo, error) {
	nftProbed.Lock()
	done, info, err := nftProbed.done, nftProbed.info, nftProbed.err
	nftProbed.Unlock()
	if done {
		return info, err
	}
	_, err = nftTables(ctx)
	nftProbed.Lock()
	defer nftProbed.Unlock()
	if !nftProbed.done { // nft is missing: nftTables probed nothing
		nftProbed.done, nftProbed.err = true, err
	}
	return nftProbed.info, nftProbed.err
}

// nftTables lists the nftables tables of every family, as "ip npl" or "ip6
// kube-proxy", with one `nft -j list tables`, and probes nft with that
// listing the first time. It fails when nft is missing, older than 1.0.1,
// or does not run here (no nf_tables, no CAP_NET_ADMIN: nftables answers
// no request without it).
func nftTables(ctx context.Context) (map[string]bool, error) {
	path, err := exec.LookPath("nft")
	if err != nil {
		return nil, fmt.Errorf("list nftables tables: %w", err)
	}
	processExecs.Add(1)
	out, err := runNFTCommand(exec.CommandContext(ctx, path, "-j", "list", "tables"))
	if err != nil {
		err = fmt.Errorf("nft list tables: %w", err)
		recordProbe(nftInfo{}, err)
		return nil, err
	}
	version, tables, err := parseTables(out)
	if err == nil {
		err = checkNFTVersion(version)
	}
	if err != nil {
		err = fmt.Errorf("nft list tables: %w", err)
		recordProbe(nftInfo{}, err)
		return nil, err
	}
	nftProbed.Lock()
	first := !nftProbed.done
	nftProbed.Unlock()
	if first {
		info := nftInfo{path: path, objectComments: true}
		if !kernelAtLeast(5, 10) {
			info.objectComments = nftCheck(ctx, path, "add table ip "+TableName+" { comment \"probe\" ; }\n") == nil
		}
		recordProbe(info, nil)
	}
	return tables, nil
}

// recordProbe keeps the first probe of the process.
func recordProbe(info nftInfo, err error) {
	nftProbed.Lock()
	defer nftProbed.Unlock()
	if !nftProbed.done {
		nftProbed.done, nftProbed.info, nftProbed.err = true, info, err
	}
}

// parseTables reads the output of `nft -j list tables`: nft's version and
// the tables.
func parseTables(out []byte) (version string, tables map[string]bool, err error) {
	var doc struct {
		Nftables []struct {
			Metainfo *struct {
				Version string `json:"version"`
			} `json:"metainfo"`
			Table *struct {
				Family string `json:"family"`
				Name   string `json:"name"`
			} `json:"table"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return "", nil, fmt.Errorf("parse the tables: %w", err)
	}
	tables = map[string]bool{}
	for _, o := range doc.Nftables {
		if o.Metainfo != nil {
			version = o.Metainfo.Version
		}
		if o.Table != nil {
			tables[o.Table.Family+" "+o.Table.Name] = true
		}
	}
	return version, tables, nil
}

// checkNFTVersion refuses nft older than 1.0.1, as knftables does: older
// ones parse the whole ruleset on every run, and may choke on rules newer
// ones wrote.
func checkNFTVersion(version string) error {
	parts := strings.SplitN(version, ".", 3)
	var n [3]int
	for i := range parts {
		v, err := strconv.Atoi(parts[i])
		if err != nil {
			return fmt.Errorf("nft version %q: not a version", version)
		}
		n[i] = v
	}
	if n[0] < 1 || (n[0] == 1 && n[1] == 0 && n[2] < 1) {
		return fmt.Errorf("nft version must be 1.0.1 or later (got %s)", version)
	}
	return nil
}

// kernelAtLeast reports whether the running kernel's release is at least
// major.minor.
func kernelAtLeast(major, minor int) bool {
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		return false
	}
	var b strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return releaseAtLeast(b.String(), major, minor)
}

// releaseAtLeast reports whether a kernel release ("6.1.0-18-amd64") is
// at least major.minor.
func releaseAtLeast(release string, major, minor int) bool {
	parts := strings.SplitN(release, ".", 3)
	if len(parts) < 2 {
		return false
	}
	maj, err1 := strconv.Atoi(parts[0])
	digits := strings.IndexFunc(parts[1], func(r rune) bool { return r < '0' || r > '9' })
	if digits >= 0 {
		parts[1] = parts[1][:digits]
	}
	mnr, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return maj > major || (maj == major && mnr >= minor)
}

// errNFTNotFound is an nft error about an object that does not exist.
var errNFTNotFound = errors.New("no such object")

// runNFT runs the transaction text with `nft -f -`. A transaction knftables
// could not build carries its error as a last line without a newline
// (Transaction.String); it is refused rather than run in part.
func runNFT(ctx context.Context, path, text string) error {
	if i := strings.LastIndexByte(text, '\n'); i+1 < len(text) {
		return fmt.Errorf("invalid nftables transaction: %s", strings.TrimPrefix(text[i+1:], "# ERROR: "))
	}
	cmd := exec.CommandContext(ctx, path, "-f", "-")
	cmd.Stdin = strings.NewReader(text)
	_, err := runNFTCommand(cmd)
	return err
}

// nftCheck dry-runs the transaction text with `nft --check -f -`.
func nftCheck(ctx context.Context, path, text string) error {
	processExecs.Add(1)
	cmd := exec.CommandContext(ctx, path, "--check", "-f", "-")
	cmd.Stdin = strings.NewReader(text)
	_, err := runNFTCommand(cmd)
	return err
}

// runNFTCommand runs an nft command and returns its output; its error holds
// nft's message, and wraps errNFTNotFound when the message's first line
// says an object does not exist (nft never translates its messages).
func runNFTCommand(cmd *exec.Cmd) ([]byte, error) {
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err == nil {
		return out, nil
	}
	msg := strings.TrimSpace(stderr.String())
	if msg == "" {
		return nil, err
	}
	if first, _, _ := strings.Cut(msg, "\n"); strings.Contains(first, "No such file or directory") {
		return nil, fmt.Errorf("%w: %s", errNFTNotFound, msg)
	}
	return nil, fmt.Errorf("%w: %s", err, msg)
}
