// A Go Kafka consumer in a group, for kmon's wire tests: franz-go or segmentio/kafka-go.
//
//	kmon-go-consumer [-group-protocol consumer] franz-go|kafka-go BOOTSTRAP GROUP TOPIC [CAFILE]
//
// It joins GROUP (with -group-protocol consumer, franz-go only: a KIP-848 group), consumes TOPIC from the beginning, prints READY once the group has
// assigned it partitions, and exits when stdin ends or says "exit". With CAFILE it speaks
// TLS, trusting that CA, and prints its own view of each connection: a line
// "WROTE <local port> <api key> <remote port>" for each request it writes. (Its "produce" mode, a
// producer for the benchmarks: produce.go.)
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "produce" {
		produce(os.Args[2:])
		return
	}
	flags := flag.NewFlagSet("kmon-go-consumer", flag.ExitOnError)
	protocol := flags.String("group-protocol", "classic", "classic, or consumer: a KIP-848 group (franz-go only)")
	flags.Parse(os.Args[1:])
	args := flags.Args()
	if (len(args) != 4 && len(args) != 5) || (*protocol != "classic" && *protocol != "consumer") {
		fmt.Fprintln(os.Stderr, "usage: kmon-go-consumer [-group-protocol classic|consumer] franz-go|kafka-go BOOTSTRAP GROUP TOPIC [CAFILE]")
		os.Exit(2)
	}
	library, brokers, group, topic := args[0], strings.Split(args[1], ","), args[2], args[3]
	var dial func(ctx context.Context, network, host string) (net.Conn, error)
	if len(args) == 5 {
		dial = tlsDialer(args[4])
	}
	ctx, cancel := context.WithCancel(context.Background())
	var ready sync.Once
	assigned := func() { ready.Do(func() { fmt.Println("READY") }) }
	var stop func()
	switch library {
	case "franz-go":
		var opts []kgo.Opt
		if dial != nil {
			opts = append(opts, kgo.Dialer(dial))
		}
		if *protocol == "consumer" {
			opts = append(opts, kgo.ServerSideBalancer())
		}
		stop = franzGo(ctx, brokers, group, topic, assigned, opts...)
	case "kafka-go":
		if *protocol != "classic" {
			fmt.Fprintln(os.Stderr, "kafka-go has no KIP-848 groups")
			os.Exit(2)
		}
		stop = kafkaGo(ctx, brokers, group, topic, assigned, dial)
	default:
		fmt.Fprintf(os.Stderr, "unknown library %q\n", library)
		os.Exit(2)
	}
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() && strings.TrimSpace(lines.Text()) != "exit" {
	}
	cancel()
	stop()
}

// franzGo consumes with twmb/franz-go's kgo client; assigned runs when partitions arrive.
func franzGo(ctx context.Context, brokers []string, group, topic string, assigned func(), opts ...kgo.Opt) func() {
	client, err := kgo.NewClient(append(opts,
		kgo.SeedBrokers(brokers...),
		kgo.ClientID("kmon-franz-go"),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, partitions map[string][]int32) {
			if len(partitions[topic]) > 0 {
				assigned()
			}
		}),
	)...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go func() {
		for ctx.Err() == nil {
			client.PollFetches(ctx)
		}
	}()
	return client.Close
}

// kafkaGo consumes with segmentio/kafka-go's Reader; assigned runs when the reader, its
// group synced, subscribes to its partitions (its logger says so: the Reader has no hook);
// dial, when not nil, makes its connections.
func kafkaGo(ctx context.Context, brokers []string, group, topic string, assigned func(),
	dial func(ctx context.Context, network, host string) (net.Conn, error)) func() {
	reader := kafka.NewReader(kafka.ReaderConfig{
		Brokers:     brokers,
		GroupID:     group,
		Topic:       topic,
		StartOffset: kafka.FirstOffset,
		Dialer:      &kafka.Dialer{ClientID: "kmon-kafka-go", DualStack: true, DialFunc: dial},
		Logger: kafka.LoggerFunc(func(format string, _ ...interface{}) {
			if strings.HasPrefix(format, "subscribed to topics and partitions") {
				assigned()
			}
		}),
	})
	go func() {
		for ctx.Err() == nil {
			if _, err := reader.ReadMessage(ctx); err != nil && ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, err)
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	return func() { reader.Close() }
}

// tlsDialer dials TLS connections trusting the CA in caFile; each connection tells the api
// key of each request written to it (franz-go and kafka-go write a request in one Write).
func tlsDialer(caFile string) func(ctx context.Context, network, host string) (net.Conn, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		name, _, _ := net.SplitHostPort(host)
		dialer := &tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: name}}
		conn, err := dialer.DialContext(ctx, network, host)
		if err != nil {
			return nil, err
		}
		return told{conn}, nil
	}
}

// told is a connection that prints "WROTE <local port> <api key> <remote port>" for each
// request written (a local port may serve two connections, to two brokers).
type told struct{ net.Conn }

func (c told) Write(b []byte) (int, error) {
	if len(b) >= 6 {
		fmt.Printf("WROTE %d %d %d\n", c.LocalAddr().(*net.TCPAddr).Port,
			int16(binary.BigEndian.Uint16(b[4:6])), c.RemoteAddr().(*net.TCPAddr).Port)
	}
	return c.Conn.Write(b)
}
