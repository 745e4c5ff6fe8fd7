package main

// A dedup client in plain grpc-go, with no helper library: the pieces every
// language needs (docs/any-language.md walks through them).
//   - Client.call: the retry rule. UNAVAILABLE with a "dedup-leader" trailer
//     naming another node goes there at once; any other UNAVAILABLE moves to
//     the next address after a backoff; RESOURCE_EXHAUSTED with a RetryInfo
//     waits the server's delay; ABORTED with "dedup-outcome: unknown" is
//     sent again only when re-sending is safe. Everything else is the answer.
//   - RunOnce: Begin → run the side effect → Complete (or Release when it
//     certainly did not happen); DUPLICATE replays the stored result.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mathrand "math/rand"
	"sync"
	"time"

	"dedupgen/dedupv1"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	leaderTrailer  = "dedup-leader"  // a follower's hint: the leader's address
	outcomeTrailer = "dedup-outcome" // "unknown": the call may have taken effect
	maxAttempts    = 6
	maxLeaderHops  = 3
	backoffBase    = 50 * time.Millisecond
	backoffCap     = 2 * time.Second
	maxServerDelay = 30 * time.Second // so a wrong server cannot park us for hours
)

// Config says how to reach dedupd.
type Config struct {
	Addresses []string // host:port of one node or of every node of a group
	Token     string   // bearer token ("" for none)
	// TLS: nil for plaintext (dedupd allows it on loopback only).
	TLS credentials.TransportCredentials
}

// Client talks to dedupd through one connection per address. Safe for
// concurrent use.
type Client struct {
	cfg Config

	mu      sync.Mutex
	conns   map[string]*grpc.ClientConn
	current string // the address the next call goes to
}

// NewClient prepares a client; connections open lazily on first use.
func NewClient(cfg Config) (*Client, error) {
	if len(cfg.Addresses) == 0 {
		return nil, errors.New("no dedupd address")
	}
	return &Client{cfg: cfg, conns: map[string]*grpc.ClientConn{}, current: cfg.Addresses[0]}, nil
}

// Close closes every connection.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = map[string]*grpc.ClientConn{}
}

// bearer sends "authorization: Bearer <token>" with every call.
type bearer struct{ token string }

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity is false so the example also runs against a
// plaintext dedupd on loopback; dedupd refuses plaintext anywhere else.
func (bearer) RequireTransportSecurity() bool { return false }

func (c *Client) stub(address string) (dedupv1.DedupClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	conn, ok := c.conns[address]
	if !ok {
		opts := []grpc.DialOption{grpc.WithInsecure()}
		if c.cfg.TLS != nil {
			opts = []grpc.DialOption{grpc.WithTransportCredentials(c.cfg.TLS)}
		}
		if c.cfg.Token != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(bearer{c.cfg.Token}))
		}
		var err error
		if conn, err = grpc.Dial(address, opts...); err != nil {
			return nil, err
		}
		c.conns[address] = conn
	}
	return dedupv1.NewDedupClient(conn), nil
}

// call runs rpc under the retry rule. safeToResend says whether a call whose
// outcome is unknown may be sent again (a Begin with an owner, a Complete
// with the same fence and result, a Release: yes).
func (c *Client) call(ctx context.Context, safeToResend bool,
	rpc func(ctx context.Context, stub dedupv1.DedupClient, opts ...grpc.CallOption) error) error {
	var err error
	for attempt := 1; ; attempt++ {
		c.mu.Lock()
		address := c.current
		c.mu.Unlock()
		for hops := 0; ; hops++ {
			var stub dedupv1.DedupClient
			if stub, err = c.stub(address); err != nil {
				return err
			}
			var trailer metadata.MD
			err = rpc(ctx, stub, grpc.Trailer(&trailer))
			leader := first(trailer, leaderTrailer)
			if status.Code(err) == codes.Unavailable && leader != "" && leader != address &&
				hops < maxLeaderHops {
				address = leader // follow the hint within this attempt
				c.mu.Lock()
				c.current = leader
				c.mu.Unlock()
				continue
			}
			if delay, retry := c.retryDelay(err, trailer, address, attempt, safeToResend); retry &&
				attempt < maxAttempts {
				if sleepErr := sleep(ctx, delay); sleepErr != nil {
					return err
				}
				break // next attempt
			}
			return err
		}
	}
}

// retryDelay says whether the error `err` of one attempt to `address` is
// worth another attempt, and after how long.
func (c *Client) retryDelay(err error, trailer metadata.MD, address string, attempt int,
	safeToResend bool) (time.Duration, bool) {
	switch status.Code(err) {
	case codes.Unavailable:
		c.advance(address) // that node is down, or knows no leader
		return backoff(attempt), true
	case codes.ResourceExhausted:
		for _, detail := range status.Convert(err).Details() {
			if info, ok := detail.(*errdetails.RetryInfo); ok {
				delay := info.GetRetryDelay().AsDuration()
				if delay > maxServerDelay {
					delay = maxServerDelay
				}
				return delay, true
			}
		}
	case codes.Aborted:
		if first(trailer, outcomeTrailer) == "unknown" && safeToResend {
			return backoff(attempt), true
		}
	}
	return 0, false
}

// advance moves the next call past `address` (if it is still current).
func (c *Client) advance(address string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current != address {
		return
	}
	for i, a := range c.cfg.Addresses {
		if a == address {
			c.current = c.cfg.Addresses[(i+1)%len(c.cfg.Addresses)]
			return
		}
	}
	c.current = c.cfg.Addresses[0] // a leader hint that failed
}

func first(md metadata.MD, key string) string {
	if values := md.Get(key); len(values) > 0 {
		return values[0]
	}
	return ""
}

// backoff is full jitter: uniform in [0, min(cap, base * 2^(attempt-1))].
func backoff(attempt int) time.Duration {
	ceiling := backoffBase << (attempt - 1)
	if ceiling > backoffCap || ceiling <= 0 {
		ceiling = backoffCap
	}
	return time.Duration(mathrand.Int63n(int64(ceiling) + 1))
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Begin claims (namespace, key). The owner makes a retried Begin re-entrant.
func (c *Client) Begin(ctx context.Context, req *dedupv1.BeginRequest) (*dedupv1.BeginResponse, error) {
	var resp *dedupv1.BeginResponse
	err := c.call(ctx, req.GetOwner() != "", func(ctx context.Context, stub dedupv1.DedupClient,
		opts ...grpc.CallOption) (err error) {
		resp, err = stub.Begin(ctx, req, opts...)
		return err
	})
	return resp, err
}

// Complete records the outcome; re-sent with the same fence and result it
// answers OK again, so it is safe after an unknown outcome.
func (c *Client) Complete(ctx context.Context, req *dedupv1.CompleteRequest) (*dedupv1.CompleteResponse, error) {
	var resp *dedupv1.CompleteResponse
	err := c.call(ctx, true, func(ctx context.Context, stub dedupv1.DedupClient,
		opts ...grpc.CallOption) (err error) {
		resp, err = stub.Complete(ctx, req, opts...)
		return err
	})
	return resp, err
}

// Release gives a claim back. A retry after an unknown outcome that finds no
// record means the first one released it: NOT_FOUND then reads as OK.
func (c *Client) Release(ctx context.Context, req *dedupv1.ReleaseRequest) (*dedupv1.ReleaseResponse, error) {
	var resp *dedupv1.ReleaseResponse
	unknown := false
	err := c.call(ctx, true, func(ctx context.Context, stub dedupv1.DedupClient,
		opts ...grpc.CallOption) (err error) {
		var trailer metadata.MD
		resp, err = stub.Release(ctx, req, append(opts, grpc.Trailer(&trailer))...)
		if first(trailer, outcomeTrailer) == "unknown" {
			unknown = true
		}
		return err
	})
	if err == nil && unknown && resp.GetStatus() == dedupv1.ReleaseResponse_NOT_FOUND {
		resp.Status = dedupv1.ReleaseResponse_OK
	}
	return resp, err
}

// PermanentError is a side effect's failure that is recorded and replayed
// to duplicates (as ERROR), like a success. Any other error from the side
// effect releases the claim: it must mean the side effect did not happen.
type PermanentError struct {
	Name    string `json:"name"`
	Message string `json:"message"`
}

func (e *PermanentError) Error() string { return e.Name + ": " + e.Message }

// Outcome is what RunOnce returns.
type Outcome struct {
	Result   json.RawMessage // the success value (JSON), nil for an error
	Replayed bool            // true: stored by an earlier call, fn did not run
	Fence    uint64
}

// Op names one logical operation.
type Op struct {
	Namespace string
	Key       string
	Args      interface{} // the tool arguments: their args_hash guards the key
	LeaseMs   uint32      // 0: the server's default
}

// RunOnce runs fn at most once for op across every caller and retry, and
// returns its result, or the stored one. A stored ERROR comes back as a
// *PermanentError. fn must finish within the lease (op.LeaseMs, the
// server's 60 s by default): a longer side effect would call Renew every
// third of the lease, which this example leaves out.
func (c *Client) RunOnce(ctx context.Context, op Op, fn func(ctx context.Context) (interface{}, error)) (Outcome, error) {
	argsHash, err := ArgsHash(op.Args)
	if err != nil {
		return Outcome{}, fmt.Errorf("args_hash: %w", err)
	}
	begin := &dedupv1.BeginRequest{
		Namespace: op.Namespace, Key: op.Key, ArgsHash: argsHash, Owner: newOwner(),
		LeaseMs: op.LeaseMs, WaitMs: 5000,
	}
	for {
		resp, err := c.Begin(ctx, begin)
		if err != nil {
			return Outcome{}, err
		}
		switch resp.GetStatus() {
		case dedupv1.BeginResponse_STARTED:
			return c.execute(ctx, op, resp.GetFence(), fn)
		case dedupv1.BeginResponse_DUPLICATE:
			return replay(resp)
		case dedupv1.BeginResponse_IN_USE: // another owner is running it
			if err := sleep(ctx, time.Duration(resp.GetRetryAfterMs())*time.Millisecond); err != nil {
				return Outcome{}, err
			}
		case dedupv1.BeginResponse_CONFLICT:
			return Outcome{}, fmt.Errorf("key %q was used with different arguments", op.Key)
		case dedupv1.BeginResponse_EXPIRED:
			return Outcome{}, fmt.Errorf("key %q completed long ago; its result expired "+
				"(send accept_rerun to run it again)", op.Key)
		default:
			return Outcome{}, fmt.Errorf("unexpected Begin answer %v", resp.GetStatus())
		}
	}
}

func (c *Client) execute(ctx context.Context, op Op, fence uint64,
	fn func(ctx context.Context) (interface{}, error)) (Outcome, error) {
	value, fnErr := fn(ctx)
	var permanent *PermanentError
	complete := &dedupv1.CompleteRequest{Namespace: op.Namespace, Key: op.Key, Fence: fence}
	switch {
	case fnErr == nil:
		complete.Outcome = dedupv1.Outcome_SUCCESS
	case errors.As(fnErr, &permanent):
		complete.Outcome = dedupv1.Outcome_ERROR
		value = permanent
	default: // it did not happen: give the key back for the next attempt
		_, releaseErr := c.Release(ctx, &dedupv1.ReleaseRequest{
			Namespace: op.Namespace, Key: op.Key, Fence: fence})
		if releaseErr != nil {
			return Outcome{}, fmt.Errorf("%w (and Release failed: %v)", fnErr, releaseErr)
		}
		return Outcome{}, fnErr
	}
	result, err := json.Marshal(value)
	if err != nil {
		return Outcome{}, fmt.Errorf("result is not JSON: %w", err)
	}
	complete.Result = result
	resp, err := c.Complete(ctx, complete)
	if err != nil {
		return Outcome{}, err
	}
	if resp.GetStatus() != dedupv1.CompleteResponse_OK {
		// STALE_FENCE: our lease ran out and someone took over; our result
		// was not recorded. Renew (or a longer lease) prevents it.
		return Outcome{}, fmt.Errorf("Complete answered %v", resp.GetStatus())
	}
	if permanent != nil {
		return Outcome{Fence: fence}, permanent
	}
	return Outcome{Result: result, Fence: fence}, nil
}

func replay(resp *dedupv1.BeginResponse) (Outcome, error) {
	out := Outcome{Replayed: true, Fence: resp.GetFence()}
	if resp.GetOutcome() == dedupv1.Outcome_SUCCESS {
		out.Result = resp.GetResult()
		return out, nil
	}
	// ERROR: {"name":...,"message":...}; anything else is the message.
	stored := &PermanentError{}
	if json.Unmarshal(resp.GetResult(), stored) != nil || stored.Name == "" {
		stored = &PermanentError{Name: "Error", Message: string(resp.GetResult())}
	}
	return out, stored
}

// newOwner is a random UUID (version 4) naming this attempt.
func newOwner() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
