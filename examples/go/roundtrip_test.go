package main

// Against a real dedupd ($DEDUPD), started here with TLS and a tenants file
// on a free port in a temp dir, and stopped by its PID: Begin → Complete →
// Begin again is DUPLICATE with the stored result; RunOnce runs its side
// effect once; the bearer token is what lets the calls in; a follower's
// "dedup-leader" hint is followed; a RetryInfo is waited out; unknown
// outcomes are sent again only where that is safe.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"dedupgen/dedupv1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	testToken    = "go-example-token-5b1f"
	meteredToken = "go-example-metered-91c4" // a tenant limited to 2 calls/s
)

// server is one dedupd with its files.
type server struct {
	address, caFile, tokenFile string
}

// startDedupd starts dedupd (TLS on, tenant "billing" with testToken) and
// registers its stop: SIGTERM to its PID, which must exit 0.
func startDedupd(t *testing.T) server {
	t.Helper()
	binary := os.Getenv("DEDUPD")
	if binary == "" {
		t.Fatal("set DEDUPD to the dedupd binary (tests/go/CMakeLists.txt does)")
	}
	dir := t.TempDir()
	pki := filepath.Join(dir, "pki")
	if out, err := exec.Command(os.Getenv("DEDUP_MAKE_TEST_PKI"), pki).CombinedOutput(); err != nil {
		t.Fatalf("make-test-pki: %v\n%s", err, out)
	}
	digest := sha256.Sum256([]byte(testToken))
	metered := sha256.Sum256([]byte(meteredToken))
	tenants, _ := json.Marshal(map[string]interface{}{"tenants": []interface{}{
		map[string]interface{}{"name": "billing", "token_sha256": []string{hex.EncodeToString(digest[:])},
			"namespace_prefixes": []string{"billing:"}, "roles": []string{"client"}},
		map[string]interface{}{"name": "metered", "token_sha256": []string{hex.EncodeToString(metered[:])},
			"namespace_prefixes": []string{"metered:"}, "roles": []string{"client"},
			"limits": map[string]int{"rps": 2}}}})
	write(t, filepath.Join(dir, "tenants.json"), tenants)
	tokenFile := filepath.Join(dir, "token")
	write(t, tokenFile, []byte(testToken+"\n"))

	ready := filepath.Join(dir, "ready.json")
	log, err := os.Create(filepath.Join(dir, "dedupd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "--address=127.0.0.1:0", "--metrics_address=",
		"--data_dir="+filepath.Join(dir, "data"), "--durability=none", "--ready_file="+ready,
		"--tls_cert_file="+filepath.Join(pki, "server.pem"),
		"--tls_key_file="+filepath.Join(pki, "server.key"),
		"--tenants_file="+filepath.Join(dir, "tenants.json"))
	cmd.Stdout, cmd.Stderr = log, log
	// If the test process dies, dedupd goes too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("dedupd exit: %v\n%s", err, tail(log.Name()))
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			t.Errorf("dedupd did not stop in 30 s")
		}
	})
	address := waitReady(t, ready, cmd.Process.Pid, exited, log.Name())
	return server{address: address, caFile: filepath.Join(pki, "ca.pem"), tokenFile: tokenFile}
}

// waitReady polls the ready file until it names our process.
func waitReady(t *testing.T, path string, pid int, exited chan error, log string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var ready struct {
			Pid     int    `json:"pid"`
			Address string `json:"address"`
		}
		if text, err := os.ReadFile(path); err == nil && json.Unmarshal(text, &ready) == nil &&
			ready.Pid == pid {
			return ready.Address
		}
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("dedupd exited before serving: %v\n%s", err, tail(log))
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("dedupd not ready after 20 s\n%s", tail(log))
	return ""
}

func write(t *testing.T, path string, data []byte) {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func tail(path string) string {
	text, _ := os.ReadFile(path)
	if len(text) > 3000 {
		text = text[len(text)-3000:]
	}
	return string(text)
}

func (s server) client(t *testing.T, token string, addresses ...string) *Client {
	t.Helper()
	tlsConfig, err := clientTLS(s.caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(addresses) == 0 {
		addresses = []string{s.address}
	}
	c, err := NewClient(Config{Addresses: addresses, Token: token, TLS: credentials.NewTLS(tlsConfig)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestAgainstDedupd(t *testing.T) {
	s := startDedupd(t)
	t.Run("BeginCompleteDuplicate", func(t *testing.T) { beginCompleteDuplicate(t, s) })
	t.Run("RunOnceRunsOnce", func(t *testing.T) { runOnceRunsOnce(t, s) })
	t.Run("TokenRequired", func(t *testing.T) { tokenRequired(t, s) })
	t.Run("FollowsLeaderHint", func(t *testing.T) { followsLeaderHint(t, s) })
	t.Run("WaitsRetryInfo", func(t *testing.T) { waitsRetryInfo(t, s) })
	t.Run("RetriesUnknownOutcomes", func(t *testing.T) { retriesUnknownOutcomes(t, s) })
	t.Run("CommandLine", func(t *testing.T) { commandLine(t, s) })
}

// The raw protocol: what any language's stubs do.
func beginCompleteDuplicate(t *testing.T, s server) {
	c, ctx := s.client(t, testToken), testContext(t)
	hash, err := ArgsHashOfJSON([]byte(`{"amount":129.99,"customer":"ana@example.com"}`))
	if err != nil {
		t.Fatal(err)
	}
	begin := &dedupv1.BeginRequest{Namespace: "billing:send_invoice", Key: "raw-1", ArgsHash: hash,
		Owner: newOwner()}
	started, err := c.Begin(ctx, begin)
	if err != nil || started.GetStatus() != dedupv1.BeginResponse_STARTED || started.GetFence() == 0 {
		t.Fatalf("first Begin: %v, %v", started, err)
	}
	result := []byte(`{"invoice_id":"INV-1"}`)
	done, err := c.Complete(ctx, &dedupv1.CompleteRequest{Namespace: begin.Namespace, Key: begin.Key,
		Fence: started.GetFence(), Outcome: dedupv1.Outcome_SUCCESS, Result: result})
	if err != nil || done.GetStatus() != dedupv1.CompleteResponse_OK {
		t.Fatalf("Complete: %v, %v", done, err)
	}
	// The same arguments spelled differently: the same args_hash.
	again := &dedupv1.BeginRequest{Namespace: begin.Namespace, Key: begin.Key, Owner: newOwner()}
	if again.ArgsHash, err = ArgsHashOfJSON([]byte(`{ "customer": "ana@example.com", "amount": 129.990 }`)); err != nil {
		t.Fatal(err)
	}
	dup, err := c.Begin(ctx, again)
	if err != nil || dup.GetStatus() != dedupv1.BeginResponse_DUPLICATE {
		t.Fatalf("second Begin: %v, %v", dup, err)
	}
	if dup.GetOutcome() != dedupv1.Outcome_SUCCESS || !bytes.Equal(dup.GetResult(), result) ||
		dup.GetFence() != started.GetFence() {
		t.Errorf("DUPLICATE carries %v %q fence %d, want SUCCESS %q fence %d",
			dup.GetOutcome(), dup.GetResult(), dup.GetFence(), result, started.GetFence())
	}
	// Other arguments under the same key: CONFLICT.
	other := &dedupv1.BeginRequest{Namespace: begin.Namespace, Key: begin.Key, Owner: newOwner()}
	other.ArgsHash, _ = ArgsHashOfJSON([]byte(`{"amount":130,"customer":"ana@example.com"}`))
	if conflict, err := c.Begin(ctx, other); err != nil || conflict.GetStatus() != dedupv1.BeginResponse_CONFLICT {
		t.Errorf("Begin with other args: %v, %v", conflict, err)
	}
}

func runOnceRunsOnce(t *testing.T, s server) {
	c, ctx := s.client(t, testToken), testContext(t)
	runs := 0
	op := Op{Namespace: "billing:send_invoice", Key: "run-once-1",
		Args: map[string]interface{}{"customer": "bo@example.com", "amount": 12.5}}
	send := func(context.Context) (interface{}, error) {
		runs++
		return map[string]string{"invoice_id": fmt.Sprintf("INV-%d", runs)}, nil
	}
	first, err := c.RunOnce(ctx, op, send)
	if err != nil || first.Replayed {
		t.Fatalf("first RunOnce: %+v, %v", first, err)
	}
	second, err := c.RunOnce(ctx, op, send)
	if err != nil || !second.Replayed || !bytes.Equal(second.Result, first.Result) {
		t.Fatalf("second RunOnce: %+v (%s), %v; first %s", second, second.Result, err, first.Result)
	}
	if runs != 1 {
		t.Errorf("the side effect ran %d times", runs)
	}

	// A permanent error is stored and replayed like a success.
	failing := Op{Namespace: op.Namespace, Key: "run-once-2", Args: op.Args}
	refuse := func(context.Context) (interface{}, error) {
		runs++
		return nil, &PermanentError{Name: "CardDeclined", Message: "insufficient funds"}
	}
	for i, wantReplayed := range []bool{false, true} {
		out, err := c.RunOnce(ctx, failing, refuse)
		var permanent *PermanentError
		if !errors.As(err, &permanent) || permanent.Name != "CardDeclined" ||
			permanent.Message != "insufficient funds" || out.Replayed != wantReplayed {
			t.Errorf("call %d: %+v, %v", i, out, err)
		}
	}
	if runs != 2 {
		t.Errorf("side effects ran %d times, want 2", runs)
	}

	// A failure that is not permanent releases the claim: the next call runs.
	transient := Op{Namespace: op.Namespace, Key: "run-once-3", Args: op.Args}
	if _, err := c.RunOnce(ctx, transient, func(context.Context) (interface{}, error) {
		return nil, errors.New("mail server down")
	}); err == nil || !strings.Contains(err.Error(), "mail server down") {
		t.Fatalf("transient failure: %v", err)
	}
	if out, err := c.RunOnce(ctx, transient, send); err != nil || out.Replayed {
		t.Errorf("after a released claim: %+v, %v", out, err)
	}
}

func tokenRequired(t *testing.T, s server) {
	ctx := testContext(t)
	begin := &dedupv1.BeginRequest{Namespace: "billing:send_invoice", Key: "auth-1", Owner: newOwner()}
	if _, err := s.client(t, "").Begin(ctx, begin); status.Code(err) != codes.Unauthenticated {
		t.Errorf("no token: %v, want UNAUTHENTICATED", err)
	}
	if _, err := s.client(t, "wrong-token").Begin(ctx, begin); status.Code(err) != codes.Unauthenticated {
		t.Errorf("unknown token: %v, want UNAUTHENTICATED", err)
	}
	foreign := &dedupv1.BeginRequest{Namespace: "ops:x", Key: "auth-1", Owner: newOwner()}
	if _, err := s.client(t, testToken).Begin(ctx, foreign); status.Code(err) != codes.PermissionDenied {
		t.Errorf("foreign namespace: %v, want PERMISSION_DENIED", err)
	}
}

// follower answers like a cluster follower: UNAVAILABLE naming the leader.
type follower struct {
	dedupv1.UnimplementedDedupServer
	leader string
	calls  int32
}

func (f *follower) Begin(ctx context.Context, _ *dedupv1.BeginRequest) (*dedupv1.BeginResponse, error) {
	atomic.AddInt32(&f.calls, 1)
	grpc.SetTrailer(ctx, metadata.Pairs(leaderTrailer, f.leader))
	return nil, status.Error(codes.Unavailable, "not the leader")
}

// serveFake serves impl on a free port with dedupd's certificate and
// returns its address.
func serveFake(t *testing.T, s server, impl dedupv1.DedupServer) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pki := filepath.Dir(s.caFile)
	tlsServer, err := credentials.NewServerTLSFromFile(
		filepath.Join(pki, "server.pem"), filepath.Join(pki, "server.key"))
	if err != nil {
		t.Fatal(err)
	}
	grpcServer := grpc.NewServer(grpc.Creds(tlsServer))
	dedupv1.RegisterDedupServer(grpcServer, impl)
	go grpcServer.Serve(listener)
	t.Cleanup(grpcServer.Stop)
	return listener.Addr().String()
}

func followsLeaderHint(t *testing.T, s server) {
	f := &follower{leader: s.address}
	c, ctx := s.client(t, testToken, serveFake(t, s, f)), testContext(t)
	begin := &dedupv1.BeginRequest{Namespace: "billing:send_invoice", Key: "hop-1", Owner: newOwner()}
	resp, err := c.Begin(ctx, begin)
	if err != nil || resp.GetStatus() != dedupv1.BeginResponse_STARTED {
		t.Fatalf("Begin through the follower: %v, %v", resp, err)
	}
	if calls := atomic.LoadInt32(&f.calls); calls != 1 {
		t.Errorf("the follower got %d calls, want 1", calls)
	}
}

// losingLeader passes each call on to the real dedupd, where it takes
// effect, but answers the first one of each method as a leader that lost
// its leadership would: ABORTED with "dedup-outcome: unknown".
type losingLeader struct {
	dedupv1.UnimplementedDedupServer
	real  dedupv1.DedupClient
	calls sync.Map // method -> *int32
}

func (l *losingLeader) unknownFirst(ctx context.Context, method string, err error) error {
	n, _ := l.calls.LoadOrStore(method, new(int32))
	if atomic.AddInt32(n.(*int32), 1) == 1 && err == nil {
		grpc.SetTrailer(ctx, metadata.Pairs(outcomeTrailer, "unknown"))
		return status.Error(codes.Aborted, "leadership lost; the outcome is unknown")
	}
	return err
}

func (l *losingLeader) count(method string) int32 {
	n, _ := l.calls.LoadOrStore(method, new(int32))
	return atomic.LoadInt32(n.(*int32))
}

func (l *losingLeader) Begin(ctx context.Context, req *dedupv1.BeginRequest) (*dedupv1.BeginResponse, error) {
	resp, err := l.real.Begin(ctx, req)
	return resp, l.unknownFirst(ctx, "Begin", err)
}

func (l *losingLeader) Complete(ctx context.Context, req *dedupv1.CompleteRequest) (*dedupv1.CompleteResponse, error) {
	resp, err := l.real.Complete(ctx, req)
	return resp, l.unknownFirst(ctx, "Complete", err)
}

func (l *losingLeader) Release(ctx context.Context, req *dedupv1.ReleaseRequest) (*dedupv1.ReleaseResponse, error) {
	resp, err := l.real.Release(ctx, req)
	return resp, l.unknownFirst(ctx, "Release", err)
}

// An unknown outcome is sent again only where that is safe, and the
// retry's answer is the right one although the first call took effect.
func retriesUnknownOutcomes(t *testing.T, s server) {
	ctx := testContext(t)
	realConn, err := s.client(t, testToken).stub(s.address)
	if err != nil {
		t.Fatal(err)
	}
	newFake := func() (*losingLeader, *Client) {
		l := &losingLeader{real: realConn}
		return l, s.client(t, testToken, serveFake(t, s, l))
	}

	l, c := newFake()
	begin := &dedupv1.BeginRequest{Namespace: "billing:send_invoice", Key: "unknown-1", Owner: newOwner()}
	started, err := c.Begin(ctx, begin)
	if err != nil || started.GetStatus() != dedupv1.BeginResponse_STARTED || l.count("Begin") != 2 {
		t.Fatalf("Begin with an owner: %v, %v after %d calls, want STARTED after 2", started, err, l.count("Begin"))
	}
	complete := &dedupv1.CompleteRequest{Namespace: begin.Namespace, Key: begin.Key,
		Fence: started.GetFence(), Outcome: dedupv1.Outcome_SUCCESS, Result: []byte(`"sent"`)}
	if done, err := c.Complete(ctx, complete); err != nil || done.GetStatus() != dedupv1.CompleteResponse_OK ||
		l.count("Complete") != 2 {
		t.Errorf("Complete: %v, %v after %d calls, want OK after 2", done, err, l.count("Complete"))
	}

	// Released by the first call: the retry's NOT_FOUND means OK.
	claim, err := c.Begin(ctx, &dedupv1.BeginRequest{Namespace: begin.Namespace, Key: "unknown-2", Owner: newOwner()})
	if err != nil {
		t.Fatal(err)
	}
	released, err := c.Release(ctx, &dedupv1.ReleaseRequest{Namespace: begin.Namespace, Key: "unknown-2",
		Fence: claim.GetFence()})
	if err != nil || released.GetStatus() != dedupv1.ReleaseResponse_OK || l.count("Release") != 2 {
		t.Errorf("Release: %v, %v after %d calls, want OK after 2", released, err, l.count("Release"))
	}

	// An anonymous Begin is not re-entrant: its unknown outcome is the answer.
	l, c = newFake()
	anonymous := &dedupv1.BeginRequest{Namespace: begin.Namespace, Key: "unknown-3"}
	if _, err := c.Begin(ctx, anonymous); status.Code(err) != codes.Aborted || l.count("Begin") != 1 {
		t.Errorf("anonymous Begin: %v after %d calls, want ABORTED after 1", err, l.count("Begin"))
	}
}

// Over its tenant's rps limit, dedupd answers RESOURCE_EXHAUSTED with a
// RetryInfo: the client waits that long and the call succeeds.
func waitsRetryInfo(t *testing.T, s server) {
	c, ctx := s.client(t, meteredToken), testContext(t)
	start := time.Now()
	for i := 0; i < 6; i++ {
		begin := &dedupv1.BeginRequest{Namespace: "metered:x", Key: fmt.Sprintf("k%d", i), Owner: newOwner()}
		if resp, err := c.Begin(ctx, begin); err != nil || resp.GetStatus() != dedupv1.BeginResponse_STARTED {
			t.Fatalf("Begin %d: %v, %v", i, resp, err)
		}
	}
	// 6 calls at 2/s (after a burst of 2) cannot all pass at once.
	if elapsed := time.Since(start); elapsed < time.Second {
		t.Errorf("6 calls over a 2/s limit took only %v: were they limited?", elapsed)
	}
}

// The example command, configured by the environment as a user runs it.
func commandLine(t *testing.T, s server) {
	binary := os.Getenv("DEDUP_GO_EXAMPLE")
	if binary == "" {
		t.Fatal("set DEDUP_GO_EXAMPLE to the built example (examples/go/build does)")
	}
	type line struct {
		Replayed bool            `json:"replayed"`
		Fence    uint64          `json:"fence"`
		Result   json.RawMessage `json:"result"`
	}
	var lines []line
	for i := 0; i < 2; i++ {
		cmd := exec.Command(binary, "-key", "cli-1", "-args", `{"customer":"cy@example.com","amount":5}`)
		cmd.Env = append(os.Environ(), "DEDUP_ADDRESS=127.0.0.1:1,"+s.address,
			"DEDUP_TOKEN_FILE="+s.tokenFile, "DEDUP_CA_FILE="+s.caFile)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, stderr.String())
		}
		var l line
		if err := json.Unmarshal(stdout.Bytes(), &l); err != nil {
			t.Fatalf("run %d printed %q: %v", i, stdout.String(), err)
		}
		if sent := strings.Contains(stderr.String(), "sending invoice"); sent == l.Replayed {
			t.Errorf("run %d: replayed %v but sent %v", i, l.Replayed, sent)
		}
		lines = append(lines, l)
	}
	if lines[0].Replayed || !lines[1].Replayed || !bytes.Equal(lines[0].Result, lines[1].Result) ||
		lines[0].Fence != lines[1].Fence {
		t.Errorf("runs: %+v", lines)
	}
}
