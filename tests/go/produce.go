package main

// A franz-go producer over TLS for kmon's benchmarks (benchmarks/tls_cost.py):
//
//	kmon-go-consumer produce BOOTSTRAP TOPIC CAFILE MB_PER_S
//
// It sends 100 kB records paced at MB_PER_S, prints READY once connected, then every 0.25 s
// "ACKED <CLOCK_MONOTONIC seconds> <bytes the broker acknowledged>".

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"
)

const recordBytes = 100_000

func produce(args []string) {
	if len(args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: kmon-go-consumer produce BOOTSTRAP TOPIC CAFILE MB_PER_S")
		os.Exit(2)
	}
	mbPerS, err := strconv.ParseFloat(args[3], 64)
	pem, readErr := os.ReadFile(args[2])
	if err != nil || readErr != nil {
		fmt.Fprintln(os.Stderr, "kmon-go-consumer produce: a bad MB_PER_S or CAFILE")
		os.Exit(2)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	client, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(args[0], ",")...),
		kgo.ClientID("kmon-franz-go-producer"),
		kgo.DialTLSConfig(&tls.Config{RootCAs: roots}),
		kgo.DefaultProduceTopic(args[1]),
		kgo.ProducerBatchMaxBytes(1_000_000), // under the broker's message.max.bytes (1 MiB)
		kgo.ProducerLinger(5*time.Millisecond),
		// franz-go snappy-compresses by default: the payload's bytes, not a fraction, go
		// through TLS, as librdkafka's and KafkaJS's (uncompressed by default) do
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.AllowAutoTopicCreation(),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx := context.Background()
	if err := client.Ping(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("READY")
	var acked atomic.Int64
	go func() {
		for range time.Tick(250 * time.Millisecond) {
			fmt.Printf("ACKED %.3f %d\n", monotonic(), acked.Load())
		}
	}()
	payload := make([]byte, recordBytes)
	perSecond := mbPerS * 1e6 / recordBytes
	started, sent := time.Now(), 0
	for {
		for due := int(time.Since(started).Seconds() * perSecond); sent < due; sent++ {
			client.Produce(ctx, &kgo.Record{Value: payload}, func(r *kgo.Record, err error) {
				if err == nil {
					acked.Add(int64(len(r.Value)))
				}
			})
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// monotonic is CLOCK_MONOTONIC in seconds: Python's time.monotonic, which the benchmark
// reads its windows by.
func monotonic() float64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0)
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}
