// A Go Kafka consumer in a group, for kmon's wire tests: franz-go or segmentio/kafka-go.
//
//	kmon-go-consumer franz-go|kafka-go BOOTSTRAP GROUP TOPIC
//
// It joins GROUP, consumes TOPIC from the beginning, prints READY once the group has
// assigned it partitions, and exits when stdin ends or says "exit".
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: kmon-go-consumer franz-go|kafka-go BOOTSTRAP GROUP TOPIC")
		os.Exit(2)
	}
	library, brokers, group, topic := os.Args[1], strings.Split(os.Args[2], ","), os.Args[3], os.Args[4]
	ctx, cancel := context.WithCancel(context.Background())
	var ready sync.Once
	assigned := func() { ready.Do(func() { fmt.Println("READY") }) }
	var stop func()
	switch library {
	case "franz-go":
		stop = franzGo(ctx, brokers, group, topic, assigned)
	case "kafka-go":
		stop = kafkaGo(ctx, brokers, group, topic, assigned)
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
func franzGo(ctx context.Context, brokers []string, group, topic string, assigned func()) func() {
	client, err := kgo.NewClient(
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
	)
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
// group synced, subscribes to its partitions (its logger says so: the Reader has no hook).
func kafkaGo(ctx context.Context, brokers []string, group, topic string, assigned func()) func() {
	reader := kafka.NewReader(kafka.ReaderConfig{
		Brokers:     brokers,
		GroupID:     group,
		Topic:       topic,
		StartOffset: kafka.FirstOffset,
		Dialer:      &kafka.Dialer{ClientID: "kmon-kafka-go", DualStack: true},
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
