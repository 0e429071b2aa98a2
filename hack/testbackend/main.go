// Command testbackend is the node's test backend beside busybox httpd: it answers with the
// backend's name (the first line of /www/name) over gRPC (h2c, :9090, grpc.testing.TestService
// UnaryCall: the name in SimpleResponse.hostname), over TLS (:8443, a self-signed certificate
// made at start: the name as a line after the handshake) and over plain TCP (:9000: one line
// read, the name written back as a line). Readiness stays httpd's: the Pod's probe reads
// /www/ready on :8080.
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log"
	"math/big"
	"net"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// idle is how long a connection may wait for its next line.
const idle = 5 * time.Minute

// name is the backend's name, read on each answer (the Pod's command writes it at start).
func name() string {
	b, err := os.ReadFile("/www/name")
	if err != nil {
		return "unnamed"
	}
	return strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
}

type testService struct {
	testpb.UnimplementedTestServiceServer
}

func (testService) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	n := name()
	return &testpb.SimpleResponse{Hostname: n, ServerId: n}, nil
}

// selfSigned is a certificate for any name, valid for a day from now.
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	template := x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: name()},
		DNSNames:     []string{"*"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, &template, &template, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// serve accepts connections on l for ever, each handled on its own goroutine.
func serve(l net.Listener, handle func(net.Conn)) {
	for {
		c, err := l.Accept()
		if err != nil {
			log.Printf("accept: %v", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go func() {
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(idle))
			handle(c)
		}()
	}
}

// answerLines writes the name for each line the client sends, until it closes: one exchange per
// line, so a connection kept open shows whether it still reaches this backend.
func answerLines(c net.Conn) {
	r := bufio.NewReader(c)
	for {
		if _, err := r.ReadString('\n'); err != nil {
			return
		}
		if _, err := c.Write([]byte(name() + "\n")); err != nil {
			return
		}
		_ = c.SetDeadline(time.Now().Add(idle))
	}
}

func main() {
	cert, err := selfSigned()
	if err != nil {
		log.Fatalf("certificate: %v", err)
	}
	tlsListener, err := tls.Listen("tcp", ":8443", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		log.Fatalf("tls: %v", err)
	}
	go serve(tlsListener, answerLines)
	tcpListener, err := net.Listen("tcp", ":9000")
	if err != nil {
		log.Fatalf("tcp: %v", err)
	}
	go serve(tcpListener, answerLines)
	grpcListener, err := net.Listen("tcp", ":9090")
	if err != nil {
		log.Fatalf("grpc: %v", err)
	}
	server := grpc.NewServer()
	testpb.RegisterTestServiceServer(server, testService{})
	log.Fatal(server.Serve(grpcListener))
}
