package avisim

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"net/http"
	"os"
	"testing"

	"github.com/vmware/alb-sdk/go/clients"
	"github.com/vmware/alb-sdk/go/models"
	"github.com/vmware/alb-sdk/go/session"
)

// TestMain sends the alb-sdk's glog lines to files in a temporary directory
// that is removed at the end, instead of glog's default of the system temp
// directory.
func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "avisim-glog-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = flag.Set("log_dir", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestServer_servesTheALBSDK drives the simulator with the real alb-sdk and
// its default options: login, version, typed CRUD, and the SDK's own
// re-login after the sessions expire.
func TestServer_servesTheALBSDK(t *testing.T) {
	srv := startServer(t, Options{Username: "admin", Password: "pw", Version: "22.1.3"})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(srv.CACertPEM())
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}

	client, err := clients.NewAviClient(srv.Host(), "admin",
		session.SetPassword("pw"), session.SetTransport(transport), session.SetVersion("22.1.3"),
		session.SetControllerStatusCheckLimits(1, 1))
	if err != nil {
		t.Fatalf("NewAviClient: %v", err)
	}
	version, err := client.AviSession.GetControllerVersion()
	if err != nil || version != "22.1.3" {
		t.Fatalf("GetControllerVersion: %q, %v", version, err)
	}

	name, cksum := "sdk-pool", "1"
	addr, typ, port := "198.18.0.1", "V4", int32(61000)
	created, err := client.Pool.Create(&models.Pool{
		Name:              &name,
		CloudConfigCksum:  &cksum,
		Servers:           []*models.Server{{IP: &models.IPAddr{Addr: &addr, Type: &typ}, Port: &port}},
		HealthMonitorRefs: []string{"/api/healthmonitor?name=System-TCP"},
	})
	if err != nil {
		t.Fatalf("Pool.Create: %v", err)
	}
	if created.UUID == nil || created.LastModified == nil || created.CloudConfigCksum == nil || *created.CloudConfigCksum != "1" {
		t.Fatalf("Pool.Create answer lacks uuid, _last_modified or cloud_config_cksum: %+v", created)
	}

	got, err := client.Pool.GetByName(name)
	if err != nil || *got.UUID != *created.UUID {
		t.Fatalf("Pool.GetByName: %v, %v", got, err)
	}

	srv.ExpireSessions()
	cksum = "2"
	got.CloudConfigCksum = &cksum
	updated, err := client.Pool.Update(got)
	if err != nil {
		t.Fatalf("Pool.Update after the sessions expired: %v", err)
	}
	if *updated.CloudConfigCksum != "2" {
		t.Errorf("updated cloud_config_cksum: got %s, want 2", *updated.CloudConfigCksum)
	}
	// The SDK logs in once on the 401 and once more after its controller
	// status check.
	if n := srv.Calls()["POST login"]; n < 2 {
		t.Errorf("logins: got %d, want the first and at least one re-login", n)
	}

	if err := client.Pool.Delete(*created.UUID); err != nil {
		t.Fatalf("Pool.Delete: %v", err)
	}
	err = client.Pool.Delete(*created.UUID)
	aviErr, ok := err.(session.AviError)
	if !ok || aviErr.HttpStatusCode != http.StatusNotFound {
		t.Errorf("second Pool.Delete: got %v, want AviError 404", err)
	}
}
