// Command http-load measures publishing to Weir over its HTTP API beside the same load over
// the Kafka protocol: WORKERS concurrent senders, each sending one request at a time (one
// record, or a batch of BATCH records) and waiting for its answer, for DURATION. It prints
// one JSON line: requests and records per second and the request latency percentiles.
//
//	http-load -mode http  -http http://127.0.0.1:8080 -topic T -batch 1 -workers 16
//	http-load -mode kafka -brokers 127.0.0.1:9092     -topic T -batch 1 -workers 16
//
// Both sides use acks=all. Over HTTP a batch is one POST /topics/T/publish carrying BATCH
// records; over Kafka it is one ProduceSync of BATCH records through one shared franz-go
// client (idempotent, as Kafka clients are by default).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

type result struct {
	Mode          string  `json:"mode"`
	Batch         int     `json:"batch"`
	Workers       int     `json:"workers"`
	ValueBytes    int     `json:"value_bytes"`
	Seconds       float64 `json:"seconds"`
	Requests      int     `json:"requests"`
	Records       int     `json:"records"`
	Errors        int     `json:"errors"`
	RequestsPerS  float64 `json:"requests_per_s"`
	RecordsPerS   float64 `json:"records_per_s"`
	MiBPerS       float64 `json:"mib_per_s"`
	P50Ms         float64 `json:"p50_ms"`
	P99Ms         float64 `json:"p99_ms"`
	MaxMs         float64 `json:"max_ms"`
	FirstErrorMsg string  `json:"first_error,omitempty"`
}

// sender sends one request of `batch` records and waits for its answer.
type sender func(ctx context.Context) error

func main() {
	mode := flag.String("mode", "http", "http or kafka")
	base := flag.String("http", "http://127.0.0.1:8080", "the gateway's base URL (mode http)")
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap brokers (mode kafka)")
	topic := flag.String("topic", "http-load", "topic to publish to (must exist)")
	batch := flag.Int("batch", 1, "records per request")
	workers := flag.Int("workers", 16, "concurrent senders, each with one request outstanding")
	size := flag.Int("size", 100, "value bytes per record")
	duration := flag.Duration("duration", 20*time.Second, "how long to measure")
	warmup := flag.Duration("warmup", 3*time.Second, "load before measuring")
	flag.Parse()

	value := strings.Repeat("x", *size)
	var newSender func() sender
	switch *mode {
	case "http":
		newSender = httpSender(*base, *topic, *batch, value, *workers)
	case "kafka":
		newSender = kafkaSender(*brokers, *topic, *batch, value)
	default:
		fmt.Fprintln(os.Stderr, "-mode is http or kafka")
		os.Exit(2)
	}

	run := func(d time.Duration, keep bool) result {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var mu sync.Mutex
		var latencies []time.Duration
		errors := 0
		first := ""
		var wg sync.WaitGroup
		start := time.Now()
		for w := 0; w < *workers; w++ {
			wg.Add(1)
			send := newSender()
			go func() {
				defer wg.Done()
				mine := make([]time.Duration, 0, 1<<16)
				for ctx.Err() == nil {
					t := time.Now()
					err := send(ctx)
					if ctx.Err() != nil {
						break
					}
					if err != nil {
						mu.Lock()
						errors++
						if first == "" {
							first = err.Error()
						}
						mu.Unlock()
						continue
					}
					mine = append(mine, time.Since(t))
				}
				mu.Lock()
				latencies = append(latencies, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		elapsed := time.Since(start).Seconds()
		if !keep {
			return result{}
		}
		sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
		pct := func(p float64) float64 {
			if len(latencies) == 0 {
				return 0
			}
			i := int(p * float64(len(latencies)-1))
			return float64(latencies[i].Microseconds()) / 1000
		}
		n := len(latencies)
		return result{
			Mode: *mode, Batch: *batch, Workers: *workers, ValueBytes: *size, Seconds: elapsed,
			Requests: n, Records: n * *batch, Errors: errors,
			RequestsPerS: float64(n) / elapsed, RecordsPerS: float64(n**batch) / elapsed,
			MiBPerS: float64(n**batch**size) / elapsed / (1 << 20),
			P50Ms: pct(0.50), P99Ms: pct(0.99), MaxMs: pct(1), FirstErrorMsg: first,
		}
	}
	run(*warmup, false)
	out, _ := json.Marshal(run(*duration, true))
	fmt.Println(string(out))
}

func httpSender(base, topic string, batch int, value string, workers int) func() sender {
	records := make([]map[string]string, batch)
	for i := range records {
		records[i] = map[string]string{"value": value}
	}
	body, _ := json.Marshal(map[string]any{"records": records})
	url := fmt.Sprintf("%s/topics/%s/publish?acks=all", strings.TrimRight(base, "/"), topic)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}}
	return func() sender {
		return func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("content-type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			answer, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK || bytes.Contains(answer, []byte(`"error"`)) {
				return fmt.Errorf("status %d: %.200s", resp.StatusCode, answer)
			}
			return nil
		}
	}
}

func kafkaSender(brokers, topic string, batch int, value string) func() sender {
	client, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(brokers, ",")...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(time.Millisecond),
		kgo.DefaultProduceTopic(topic),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return func() sender {
		records := make([]*kgo.Record, batch)
		return func(ctx context.Context) error {
			for i := range records {
				records[i] = &kgo.Record{Value: []byte(value)}
			}
			return client.ProduceSync(ctx, records...).FirstErr()
		}
	}
}
