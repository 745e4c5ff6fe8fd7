// Command dedup-go-example sends an invoice at most once, however often it
// is run with the same key: the first run executes the side effect and
// records its result in dedupd; every later run (any language, any process)
// gets the stored result back without executing it.
//
//	DEDUP_ADDRESS=127.0.0.1:50051 dedup-go-example -key inv-981 \
//	    -args '{"customer":"ana@example.com","amount":129.99}'
//
// Prints one JSON line: {"replayed":false,"fence":1,"result":{...}}.
//
// Environment (the names every dedup client honours):
//
//	DEDUP_ADDRESS     host:port, or every node of a group comma-separated
//	                  (default 127.0.0.1:50051)
//	DEDUP_TOKEN_FILE  a file holding the bearer token
//	DEDUP_CA_FILE     PEM CA that signs dedupd's certificate: turns TLS on
//	DEDUP_CERT_FILE   with DEDUP_KEY_FILE: a client certificate (mTLS)
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc/credentials"
)

func main() {
	namespace := flag.String("namespace", "billing:send_invoice", "dedup namespace")
	key := flag.String("key", "", "idempotency key of this invoice (required)")
	args := flag.String("args", "{}", "the tool arguments, a JSON object")
	flag.Parse()
	if err := run(*namespace, *key, *args); err != nil {
		fmt.Fprintln(os.Stderr, "dedup-go-example:", err)
		os.Exit(1)
	}
}

func run(namespace, key, args string) error {
	if key == "" {
		return fmt.Errorf("-key is required")
	}
	cfg, err := configFromEnv()
	if err != nil {
		return err
	}
	client, err := NewClient(cfg)
	if err != nil {
		return err
	}
	defer client.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	op := Op{Namespace: namespace, Key: key, Args: json.RawMessage(args)}
	out, err := client.RunOnce(ctx, op, func(ctx context.Context) (interface{}, error) {
		return sendInvoice(key, json.RawMessage(args))
	})
	if err != nil {
		return err
	}
	line, err := json.Marshal(map[string]interface{}{
		"replayed": out.Replayed, "fence": out.Fence, "result": out.Result})
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}

// sendInvoice stands for the real side effect (an email, a charge).
func sendInvoice(key string, args json.RawMessage) (interface{}, error) {
	fmt.Fprintf(os.Stderr, "sending invoice %s: %s\n", key, args)
	return map[string]interface{}{"invoice_id": "INV-" + newOwner()[:8], "key": key}, nil
}

func configFromEnv() (Config, error) {
	var cfg Config
	for _, a := range strings.Split(os.Getenv("DEDUP_ADDRESS"), ",") {
		if a = strings.TrimSpace(a); a != "" {
			cfg.Addresses = append(cfg.Addresses, a)
		}
	}
	if len(cfg.Addresses) == 0 {
		cfg.Addresses = []string{"127.0.0.1:50051"}
	}
	if path := os.Getenv("DEDUP_TOKEN_FILE"); path != "" {
		token, err := os.ReadFile(path)
		if err != nil {
			return cfg, err
		}
		if cfg.Token = strings.TrimSpace(string(token)); cfg.Token == "" {
			return cfg, fmt.Errorf("token file %s: holds only whitespace", path)
		}
	}
	if caFile := os.Getenv("DEDUP_CA_FILE"); caFile != "" {
		tlsConfig, err := clientTLS(caFile, os.Getenv("DEDUP_CERT_FILE"), os.Getenv("DEDUP_KEY_FILE"))
		if err != nil {
			return cfg, err
		}
		cfg.TLS = credentials.NewTLS(tlsConfig)
	}
	return cfg, nil
}

func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate", caFile)
	}
	config := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if certFile != "" || keyFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		config.Certificates = []tls.Certificate{pair}
	}
	return config, nil
}
