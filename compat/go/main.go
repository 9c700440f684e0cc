// Command weir-franz-go drives franz-go (kgo and kadm) against a broker for the
// compatibility suite (compat/tests/test_franz_go.py). Every subcommand prints JSON on
// stdout and logs to stderr; byte fields are base64 (null for a null key, value or
// header value).
//
//	weir-franz-go produce       BOOTSTRAP TOPIC CODEC    < {"records":[{"key","value","headers":[[k,v]]}]}
//	                            (each record is sent as soon as it is read)
//	weir-franz-go consume       BOOTSTRAP TOPIC [ISOLATION]
//	                            (every partition, start to high watermark; ISOLATION
//	                            read_committed skips aborted records and markers, and ends once
//	                            nothing more arrives for 3 s, as markers leave no record)
//	weir-franz-go group-consume BOOTSTRAP TOPIC GROUP CLIENT_ID
//	weir-franz-go admin         BOOTSTRAP GROUP TOPIC
//	weir-franz-go transact      BOOTSTRAP SOURCE SINK GROUP TRANSACTIONAL_ID COUNT
//	weir-franz-go txn-writer    BOOTSTRAP TOPIC PARTITIONS TRANSACTIONAL_ID WRITER SEED
//	                            (the fault harness's transactional writer: txn_writer.go)
//
// transact is a GroupTransactSession read-process-write loop: it consumes SOURCE
// (read_committed) in GROUP and, in one transaction per poll of at most 20 records, produces "out-"+value of each
// record to SINK and commits the group's offsets, until COUNT records are committed; every
// third transaction is aborted instead (its records are consumed again). It prints
// {"processed", "aborted", "committed_transactions"}.
//
// Security comes from the environment, for every subcommand: WEIR_FRANZ_CA (a PEM file of
// CAs) connects over TLS; WEIR_FRANZ_SASL=MECHANISM:USER:PASSWORD (SCRAM-SHA-256,
// SCRAM-SHA-512 or PLAIN) logs in.
//
// group-consume is a long-lived member: it prints one JSON event a line (assigned,
// revoked, lost, consumed, committed, error, done) and reads commands a line on stdin:
// "commit" commits what it polled; "stop" (or end of input) commits, leaves the group and
// prints the done event with every record it read.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

const timeout = 90 * time.Second

func main() {
	if len(os.Args) < 2 {
		fail("usage: weir-franz-go produce|consume|group-consume|admin|transact|txn-writer ARGS...")
	}
	cmd, args := os.Args[1], os.Args[2:]
	var err error
	switch {
	case cmd == "produce" && len(args) == 3:
		err = produce(args[0], args[1], args[2])
	case cmd == "consume" && len(args) == 2:
		err = consume(args[0], args[1], "read_uncommitted")
	case cmd == "consume" && len(args) == 3:
		err = consume(args[0], args[1], args[2])
	case cmd == "group-consume" && len(args) == 4:
		err = groupConsume(args[0], args[1], args[2], args[3])
	case cmd == "admin" && len(args) == 3:
		err = admin(args[0], args[1], args[2])
	case cmd == "transact" && len(args) == 6:
		err = transact(args[0], args[1], args[2], args[3], args[4], args[5])
	case cmd == "txn-writer" && len(args) == 6:
		err = txnWriter(args[0], args[1], args[2], args[3], args[4], args[5])
	default:
		fail(fmt.Sprintf("bad arguments for %q: %q", cmd, args))
	}
	if err != nil {
		fail(fmt.Sprintf("%s: %v", cmd, err))
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "weir-franz-go:", msg)
	os.Exit(1)
}

// versions names the franz-go modules this binary was built with.
func versions() map[string]string {
	out := map[string]string{}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			switch dep.Path {
			case "github.com/twmb/franz-go":
				out["franz-go"] = dep.Version
			case "github.com/twmb/franz-go/pkg/kadm":
				out["kadm"] = dep.Version
			case "github.com/twmb/franz-go/pkg/kmsg":
				out["kmsg"] = dep.Version
			}
		}
	}
	return out
}

func logOpt() kgo.Opt {
	level := kgo.LogLevelWarn
	switch strings.ToLower(os.Getenv("FRANZ_GO_LOG")) {
	case "info":
		level = kgo.LogLevelInfo
	case "debug":
		level = kgo.LogLevelDebug
	}
	return kgo.WithLogger(kgo.BasicLogger(os.Stderr, level, nil))
}

// seedBrokers is the client option for a comma-separated bootstrap list.
func seedBrokers(bootstrap string) kgo.Opt {
	return kgo.SeedBrokers(strings.Split(bootstrap, ",")...)
}

// noOpt is an option that changes nothing.
func noOpt() kgo.Opt {
	return kgo.WithHooks()
}

// tlsOpt connects over TLS, trusting the CAs of WEIR_FRANZ_CA, when it is set.
func tlsOpt() kgo.Opt {
	path := os.Getenv("WEIR_FRANZ_CA")
	if path == "" {
		return noOpt()
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		fail(fmt.Sprintf("WEIR_FRANZ_CA: %v", err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		fail("WEIR_FRANZ_CA holds no certificate")
	}
	return kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
}

// saslOpt logs in as WEIR_FRANZ_SASL says (MECHANISM:USER:PASSWORD), when it is set.
func saslOpt() kgo.Opt {
	spec := os.Getenv("WEIR_FRANZ_SASL")
	if spec == "" {
		return noOpt()
	}
	parts := strings.SplitN(spec, ":", 3)
	if len(parts) != 3 {
		fail("WEIR_FRANZ_SASL must be MECHANISM:USER:PASSWORD")
	}
	mechanism, user, password := parts[0], parts[1], parts[2]
	auth := scram.Auth{User: user, Pass: password}
	switch mechanism {
	case "SCRAM-SHA-256":
		return kgo.SASL(auth.AsSha256Mechanism())
	case "SCRAM-SHA-512":
		return kgo.SASL(auth.AsSha512Mechanism())
	case "PLAIN":
		return kgo.SASL(plain.Auth{User: user, Pass: password}.AsMechanism())
	}
	fail(fmt.Sprintf("WEIR_FRANZ_SASL: unknown mechanism %q", mechanism))
	return nil
}

func printJSON(v any) error {
	return json.NewEncoder(os.Stdout).Encode(v)
}

// record is one record as read: [partition, offset, key, value, headers, timestamp ms,
// timestamp type, batch codec].
func record(r *kgo.Record) []any {
	headers := make([][2]any, 0, len(r.Headers))
	for _, h := range r.Headers {
		headers = append(headers, [2]any{h.Key, h.Value})
	}
	tsType := "CreateTime"
	if r.Attrs.TimestampType() == 1 {
		tsType = "LogAppendTime"
	}
	codecs := []string{"none", "gzip", "snappy", "lz4", "zstd"}
	codec := fmt.Sprint(r.Attrs.CompressionType())
	if c := int(r.Attrs.CompressionType()); c < len(codecs) {
		codec = codecs[c]
	}
	return []any{r.Partition, r.Offset, r.Key, r.Value, headers, r.Timestamp.UnixMilli(), tsType, codec}
}

// ---------------------------------------------------------------------------------
// produce
// ---------------------------------------------------------------------------------

type inRecord struct {
	Key     []byte            `json:"key"`
	Value   []byte            `json:"value"`
	Headers []json.RawMessage `json:"headers"`
}

// record converts what stdin said into a kgo record for topic.
func (in inRecord) record() (*kgo.Record, error) {
	r := &kgo.Record{Key: in.Key, Value: in.Value}
	for _, raw := range in.Headers {
		var kv [2]json.RawMessage
		if err := json.Unmarshal(raw, &kv); err != nil {
			return nil, fmt.Errorf("header %s: %w", raw, err)
		}
		var h kgo.RecordHeader
		if err := json.Unmarshal(kv[0], &h.Key); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(kv[1], &h.Value); err != nil {
			return nil, err
		}
		r.Headers = append(r.Headers, h)
	}
	return r, nil
}

func codec(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "none":
		return kgo.NoCompression(), nil
	case "gzip":
		return kgo.GzipCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("unknown codec %q", name)
}

// expectDelim reads the next JSON token of dec and fails unless it is want.
func expectDelim(dec *json.Decoder, want json.Token) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok != want {
		return fmt.Errorf("expected %v, got %v", want, tok)
	}
	return nil
}

// produce sends the records of stdin in order, each as soon as it has been read (so a
// caller can pace them), with franz-go's defaults (idempotent, acks=all, its default
// partitioner) and the given codec, and prints each record's partition, offset and
// timestamp, and the producer id and epoch it was written with.
func produce(bootstrap, topic, codecName string) error {
	c, err := codec(codecName)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(
		seedBrokers(bootstrap), tlsOpt(), saslOpt(),
		kgo.DefaultProduceTopic(topic),
		kgo.ProducerBatchCompression(c),
		kgo.ClientID("weir-franz-go-producer"),
		logOpt(),
	)
	if err != nil {
		return err
	}
	defer cl.Close()

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	type result struct {
		partition int32
		offset    int64
		ts        int64
		pid       int64
		epoch     int16
		err       error
		done      bool
	}
	var results []*result
	var mu sync.Mutex
	dec := json.NewDecoder(os.Stdin)
	if err := expectDelim(dec, json.Delim('{')); err != nil {
		return fmt.Errorf("reading records from stdin: %w", err)
	}
	if key, err := dec.Token(); err != nil || key != "records" {
		return fmt.Errorf("reading records from stdin: expected \"records\", got %v (%v)", key, err)
	}
	if err := expectDelim(dec, json.Delim('[')); err != nil {
		return fmt.Errorf("reading records from stdin: %w", err)
	}
	for dec.More() {
		var in inRecord
		if err := dec.Decode(&in); err != nil {
			return fmt.Errorf("record %d: %w", len(results), err)
		}
		r, err := in.record()
		if err != nil {
			return fmt.Errorf("record %d: %w", len(results), err)
		}
		res := &result{}
		mu.Lock()
		results = append(results, res)
		mu.Unlock()
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			*res = result{r.Partition, r.Offset, r.Timestamp.UnixMilli(), r.ProducerID, r.ProducerEpoch, err, true}
		})
	}
	if err := expectDelim(dec, json.Delim(']')); err != nil {
		return fmt.Errorf("reading records from stdin: %w", err)
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	delivered := make([][3]int64, len(results))
	producers := map[string]bool{}
	for i, r := range results {
		if !r.done {
			return fmt.Errorf("record %d: no produce result", i)
		}
		if r.err != nil {
			return fmt.Errorf("record %d: %w", i, r.err)
		}
		delivered[i] = [3]int64{int64(r.partition), r.offset, r.ts}
		producers[fmt.Sprintf("%d/%d", r.pid, r.epoch)] = true
	}
	ids := make([]string, 0, len(producers))
	for id := range producers {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return printJSON(map[string]any{"versions": versions(), "delivered": delivered, "producers": ids})
}

// ---------------------------------------------------------------------------------
// consume (direct, no group)
// ---------------------------------------------------------------------------------

// consume reads every partition of the topic from its start offset up to the high
// watermark listed before reading, by assignment.
func consume(bootstrap, topic, isolation string) error {
	level := kgo.ReadUncommitted()
	switch isolation {
	case "read_uncommitted":
	case "read_committed":
		level = kgo.ReadCommitted()
	default:
		return fmt.Errorf("isolation %q: read_committed or read_uncommitted", isolation)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	adm, err := kgo.NewClient(seedBrokers(bootstrap), tlsOpt(), saslOpt(), logOpt())
	if err != nil {
		return err
	}
	defer adm.Close()
	kadmin := kadm.NewClient(adm)
	starts, err := kadmin.ListStartOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("ListStartOffsets: %w", err)
	}
	ends, err := kadmin.ListEndOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("ListEndOffsets: %w", err)
	}
	next := map[int32]int64{}
	start := map[int32]int64{}
	end := map[int32]int64{}
	startAt := map[int32]kgo.Offset{}
	var listErr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			listErr = fmt.Errorf("end offset of %s[%d]: %w", o.Topic, o.Partition, o.Err)
		}
		end[o.Partition] = o.Offset
	})
	starts.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			listErr = fmt.Errorf("start offset of %s[%d]: %w", o.Topic, o.Partition, o.Err)
		}
		next[o.Partition] = o.Offset
		start[o.Partition] = o.Offset
		startAt[o.Partition] = kgo.NewOffset().At(o.Offset)
	})
	if listErr != nil {
		return listErr
	}
	if len(end) == 0 {
		return fmt.Errorf("topic %s has no partitions", topic)
	}
	cl, err := kgo.NewClient(
		seedBrokers(bootstrap), tlsOpt(), saslOpt(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: startAt}),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.FetchIsolationLevel(level),
		kgo.ClientID("weir-franz-go-reader"),
		logOpt(),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	records := [][]any{}
	behind := func() bool {
		for p, e := range end {
			if next[p] < e {
				return true
			}
		}
		return false
	}
	// Transaction markers are never returned (nor aborted records, read_committed), and a
	// marker may be a partition's last offset (written after its commit returned, behind a
	// later plain record), so a reader cannot always count its way to the end: it stops once
	// nothing arrives for a while (read_uncommitted: once something has arrived, so a broker
	// slow to answer at first is waited for).
	idleSince := time.Now()
	arrived := false
	idle := func() bool {
		return (arrived || level == kgo.ReadCommitted()) && time.Since(idleSince) >= 3*time.Second
	}
	for behind() && !idle() {
		poll, cancelPoll := context.WithTimeout(ctx, 500*time.Millisecond)
		fetches := cl.PollFetches(poll)
		cancelPoll()
		if fetches.NumRecords() > 0 {
			idleSince = time.Now()
			arrived = true
		}
		if ctx.Err() != nil {
			return fmt.Errorf("read incomplete after %v: at %v, high watermarks %v", timeout, next, end)
		}
		var fetchErr error
		fetches.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				fetchErr = fmt.Errorf("fetch %s[%d]: %w", t, p, err)
			}
		})
		if fetchErr != nil {
			return fetchErr
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Offset < end[r.Partition] {
				records = append(records, record(r))
			}
			next[r.Partition] = r.Offset + 1
		})
	}
	sort.SliceStable(records, func(i, j int) bool { return records[i][0].(int32) < records[j][0].(int32) })
	return printJSON(map[string]any{"versions": versions(), "starts": start, "ends": end, "records": records})
}

// ---------------------------------------------------------------------------------
// group-consume
// ---------------------------------------------------------------------------------

type member struct {
	mu       sync.Mutex
	out      *json.Encoder
	topic    string
	owned    map[int32]bool
	count    int
	failures int // error events
}

func (m *member) emit(event map[string]any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.emitLocked(event)
}

func (m *member) emitLocked(event map[string]any) {
	if err := m.out.Encode(event); err != nil {
		fail(fmt.Sprintf("writing an event: %v", err))
	}
}

func sortedPartitions(ps map[int32]bool) []int32 {
	out := make([]int32, 0, len(ps))
	for p := range ps {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// change records an assignment change reported by a group callback.
func (m *member) change(kind string, cl *kgo.Client, tps map[string][]int32) {
	memberID, generation := cl.GroupMetadata()
	m.mu.Lock()
	defer m.mu.Unlock()
	ps := append([]int32{}, tps[m.topic]...)
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	for _, p := range ps {
		if kind == "assigned" {
			m.owned[p] = true
		} else {
			delete(m.owned, p)
		}
	}
	m.emitLocked(map[string]any{
		"event": kind, "partitions": ps, "owned": sortedPartitions(m.owned),
		"memberId": memberID, "generation": generation,
	})
}

func committedOffsets(cl *kgo.Client, topic string) map[int32]int64 {
	out := map[int32]int64{}
	for p, eo := range cl.CommittedOffsets()[topic] {
		out[p] = eo.Offset
	}
	return out
}

// groupConsume joins GROUP (classic protocol, cooperative-sticky, no autocommit) as one
// member subscribed to TOPIC and commits what it polled on "commit", before giving up
// partitions, and on "stop".
func groupConsume(bootstrap, topic, group, clientID string) error {
	m := &member{out: json.NewEncoder(os.Stdout), topic: topic, owned: map[int32]bool{}}
	commit := func(ctx context.Context, cl *kgo.Client, why string) {
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			m.mu.Lock()
			m.failures++
			m.mu.Unlock()
			m.emit(map[string]any{"event": "error", "error": fmt.Sprintf("commit (%s): %v", why, err)})
			return
		}
		m.emit(map[string]any{"event": "committed", "why": why, "offsets": committedOffsets(cl, topic)})
	}
	cl, err := kgo.NewClient(
		seedBrokers(bootstrap), tlsOpt(), saslOpt(),
		kgo.ClientID(clientID),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.HeartbeatInterval(500*time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, tps map[string][]int32) {
			m.change("assigned", cl, tps)
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, tps map[string][]int32) {
			// A manual committer commits before giving partitions up, so that the next
			// owner resumes where this member stopped.
			if len(tps[topic]) > 0 {
				commit(ctx, cl, "revoke")
			}
			m.change("revoked", cl, tps)
		}),
		kgo.OnPartitionsLost(func(_ context.Context, cl *kgo.Client, tps map[string][]int32) {
			m.change("lost", cl, tps)
		}),
		logOpt(),
	)
	if err != nil {
		return err
	}

	pollCtx, stopPolling := context.WithCancel(context.Background())
	commands := make(chan string)
	go func() {
		scanner := bufio.NewScanner(os.Stdin)
		for scanner.Scan() {
			line := strings.TrimSpace(scanner.Text())
			if line == "stop" {
				break
			}
			commands <- line
		}
		stopPolling()
	}()
	records := [][]any{}
	polled := make(chan kgo.Fetches)
	go func() {
		for {
			f := cl.PollFetches(pollCtx)
			polled <- f
			if pollCtx.Err() != nil {
				close(polled)
				return
			}
		}
	}()
	overall := time.After(5 * timeout)
loop:
	for {
		select {
		case <-overall:
			return fmt.Errorf("still running after %v without a stop command", 5*timeout)
		case line := <-commands:
			switch line {
			case "commit":
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				commit(ctx, cl, "command")
				cancel()
			default:
				m.emit(map[string]any{"event": "error", "error": fmt.Sprintf("unknown command %q", line)})
			}
		case fetches, ok := <-polled:
			if !ok {
				break loop
			}
			n := 0
			fetches.EachError(func(t string, p int32, err error) {
				if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
					return
				}
				m.mu.Lock()
				m.failures++
				m.mu.Unlock()
				m.emit(map[string]any{"event": "error", "error": fmt.Sprintf("fetch %s[%d]: %v", t, p, err)})
			})
			fetches.EachRecord(func(r *kgo.Record) {
				records = append(records, record(r))
				n++
			})
			if n > 0 {
				m.mu.Lock()
				m.count += n
				m.emitLocked(map[string]any{"event": "consumed", "count": m.count})
				m.mu.Unlock()
			}
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	commit(ctx, cl, "stop")
	memberID, generation := cl.GroupMetadata()
	m.mu.Lock()
	owned := sortedPartitions(m.owned)
	m.mu.Unlock()
	committed := committedOffsets(cl, topic)
	// Close leaves the group (LeaveGroup), revoking what the member still owns.
	cl.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.emitLocked(map[string]any{
		"event": "done", "versions": versions(), "memberId": memberID, "generation": generation,
		"owned": owned, "committed": committed, "errors": m.failures, "records": records,
	})
	return nil
}

// ---------------------------------------------------------------------------------
// admin
// ---------------------------------------------------------------------------------

func assigned(m kadm.DescribedGroupMember) map[string][]int32 {
	out := map[string][]int32{}
	if c, ok := m.Assigned.AsConsumer(); ok {
		for _, t := range c.Topics {
			ps := append([]int32{}, t.Partitions...)
			sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
			out[t.Topic] = ps
		}
	}
	return out
}

func errText(err error) any {
	if err == nil {
		return nil
	}
	return err.Error()
}

// admin prints what kadm says about GROUP: ListGroups, DescribeGroups, FetchOffsets,
// ListEndOffsets of TOPIC and Lag.
func admin(bootstrap, group, topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cl, err := kgo.NewClient(seedBrokers(bootstrap), tlsOpt(), saslOpt(), kgo.ClientID("weir-franz-go-admin"), logOpt())
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return fmt.Errorf("ListGroups: %w", err)
	}
	groups := map[string]any{}
	for _, g := range listed.Sorted() {
		groups[g.Group] = map[string]any{
			"state": g.State, "protocolType": g.ProtocolType, "groupType": g.GroupType, "coordinator": g.Coordinator,
		}
	}
	stable, err := adm.ListGroups(ctx, "Stable")
	if err != nil {
		return fmt.Errorf("ListGroups(Stable): %w", err)
	}

	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		return fmt.Errorf("DescribeGroups: %w", err)
	}
	d, err := described.On(group, nil)
	if err != nil {
		return fmt.Errorf("DescribeGroups has no %s: %w", group, err)
	}
	members := []any{}
	for _, m := range d.Members {
		var join []string
		if c, ok := m.Join.AsConsumer(); ok {
			join = c.Topics
		}
		members = append(members, map[string]any{
			"memberId": m.MemberID, "instanceId": m.InstanceID, "clientId": m.ClientID, "clientHost": m.ClientHost,
			"joinTopics": join, "assigned": assigned(m),
		})
	}
	description := map[string]any{
		"group": d.Group, "state": d.State, "protocolType": d.ProtocolType, "protocol": d.Protocol,
		"coordinator": []any{d.Coordinator.NodeID, d.Coordinator.Host, d.Coordinator.Port},
		"members":     members, "error": errText(d.Err),
	}

	fetched, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return fmt.Errorf("FetchOffsets: %w", err)
	}
	offsets := map[string]map[int32]int64{}
	fetched.Each(func(o kadm.OffsetResponse) {
		if o.Err != nil {
			err = fmt.Errorf("FetchOffsets %s[%d]: %w", o.Topic, o.Partition, o.Err)
		}
		if offsets[o.Topic] == nil {
			offsets[o.Topic] = map[int32]int64{}
		}
		offsets[o.Topic][o.Partition] = o.At
	})
	if err != nil {
		return err
	}
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("ListEndOffsets: %w", err)
	}
	endOffsets := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			err = fmt.Errorf("ListEndOffsets %s[%d]: %w", o.Topic, o.Partition, o.Err)
		}
		endOffsets[o.Partition] = o.Offset
	})
	if err != nil {
		return err
	}
	calculated := []any{}
	for _, l := range kadm.CalculateGroupLag(d, fetched, ends).Sorted() {
		calculated = append(calculated, []any{l.Topic, l.Partition, l.Commit.At, l.End.Offset, l.Lag, errText(l.Err)})
	}

	lags, err := adm.Lag(ctx, group)
	if err != nil {
		return fmt.Errorf("Lag: %w", err)
	}
	gl, ok := lags[group]
	if !ok {
		return fmt.Errorf("Lag has no %s", group)
	}
	lag := []any{}
	for _, l := range gl.Lag.Sorted() {
		var memberID any
		if l.Member != nil {
			memberID = l.Member.MemberID
		}
		lag = append(lag, map[string]any{
			"topic": l.Topic, "partition": l.Partition, "commit": l.Commit.At, "start": l.Start.Offset,
			"end": l.End.Offset, "lag": l.Lag, "memberId": memberID, "error": errText(l.Err),
		})
	}
	return printJSON(map[string]any{
		"versions": versions(), "listGroups": groups, "listGroupsStable": stable.Groups(), "describe": description,
		"fetchOffsets": offsets, "endOffsets": endOffsets, "calculatedLag": calculated,
		"lag": map[string]any{"state": gl.State, "total": gl.Lag.Total(), "partitions": lag, "error": errText(gl.Error())},
	})
}

// transact runs the read-process-write loop of the package comment.
func transact(bootstrap, source, sink, group, txnID, countText string) error {
	var count int
	if _, err := fmt.Sscan(countText, &count); err != nil {
		return fmt.Errorf("count %q: %w", countText, err)
	}
	sess, err := kgo.NewGroupTransactSession(
		seedBrokers(bootstrap), tlsOpt(), saslOpt(),
		kgo.TransactionalID(txnID),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(source),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.ClientID("weir-franz-go-transact"),
		logOpt(),
	)
	if err != nil {
		return err
	}
	defer sess.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	processed, aborted, committed, attempt := 0, 0, 0, 0
	for processed < count {
		fetches := sess.PollRecords(ctx, 20)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("after %d records: %w", processed, err)
		}
		var fetchErr error
		fetches.EachError(func(_ string, _ int32, err error) { fetchErr = err })
		if fetchErr != nil {
			return fetchErr
		}
		records := fetches.Records()
		if len(records) == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			return err
		}
		var failed sync.Once
		var produceErr error
		for _, r := range records {
			out := &kgo.Record{Topic: sink, Key: r.Key, Value: append([]byte("out-"), r.Value...), Partition: r.Partition}
			sess.Produce(ctx, out, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.Do(func() { produceErr = err })
				}
			})
		}
		if err := sess.Client().Flush(ctx); err != nil {
			return err
		}
		attempt++
		abort := attempt%3 == 0
		end := kgo.TryCommit
		if abort || produceErr != nil {
			// A record that failed must not have its input's offset committed.
			end = kgo.TryAbort
		}
		ok, err := sess.End(ctx, end)
		if err != nil {
			return err
		}
		switch {
		case produceErr != nil:
			fmt.Fprintln(os.Stderr, "weir-franz-go: transact: a record failed; aborted:", produceErr)
			aborted++
		case abort:
			aborted++
		case ok:
			committed++
			processed += len(records)
		}
	}
	return printJSON(map[string]any{
		"versions":               versions(),
		"processed":              processed,
		"aborted":                aborted,
		"committed_transactions": committed,
	})
}
