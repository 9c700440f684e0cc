package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The transactional writer of the fault harness (compat/faults/txn.py), as its librdkafka
// TxnWriter runs: the same transactions, the same bounds.
const (
	writerTxnTimeout  = 20 * time.Second
	writerCallTimeout = 30 * time.Second
	writerEndTimeout  = 90 * time.Second
	writerAbortRatio  = 0.2
	writerFlushAborts = 0.5
	writerMaxRecords  = 6
)

// txnWriter runs transactions one after another until stdin ends (or reads "stop"), each of
// 1-6 records "t{WRITER}-{n}-{k}" to random partitions of topic, four in five committed and
// the rest aborted, half of those once their records were written. It prints a JSON line
// as each transaction begins ({"begin", "partitions"}) and one as it ends ({"txn",
// "outcome", "delivered": {value: [partition, offset]}}): committed only when the commit
// was confirmed, aborted when no commit was asked or it was refused before it was tried,
// unknown when a commit was asked and its outcome never confirmed. A client whose
// transaction ended in an error is replaced ({"replaced", "reason"}): the new one's
// InitProducerID fences it and aborts what it left open. Last {"done", "replaced"}.
func txnWriter(bootstrap, topic, partitionsText, txnID, writerText, seedText string) error {
	var partitions, writer int
	var seed int64
	for _, p := range []struct {
		text string
		into any
	}{{partitionsText, &partitions}, {writerText, &writer}, {seedText, &seed}} {
		if _, err := fmt.Sscan(p.text, p.into); err != nil {
			return fmt.Errorf("%q: %w", p.text, err)
		}
	}
	var stopping atomic.Bool
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() && in.Text() != "stop" {
		}
		stopping.Store(true)
	}()
	newClient := func() (*kgo.Client, error) {
		return kgo.NewClient(
			seedBrokers(bootstrap), tlsOpt(), saslOpt(),
			kgo.TransactionalID(txnID),
			kgo.TransactionTimeout(writerTxnTimeout),
			kgo.RecordDeliveryTimeout(writerTxnTimeout),
			kgo.ProducerLinger(5*time.Millisecond),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.ClientID("weir-franz-go-txn-writer"),
			logOpt(),
		)
	}
	cl, err := newClient()
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewSource(seed))
	replaced := 0
	for n := 0; !stopping.Load(); n++ {
		count := 1 + rng.Intn(writerMaxRecords)
		chosen := make([]int32, count)
		for i := range chosen {
			chosen[i] = int32(rng.Intn(partitions))
		}
		commit := rng.Float64() >= writerAbortRatio
		flushAbort := !commit && rng.Float64() < writerFlushAborts
		if err := printJSON(map[string]any{"begin": n, "partitions": chosen}); err != nil {
			return err
		}
		outcome, delivered, failure := writeTransaction(cl, topic, writer, n, chosen, commit, flushAbort)
		if err := printJSON(map[string]any{"txn": n, "outcome": outcome, "delivered": delivered}); err != nil {
			return err
		}
		if failure != nil {
			replaced++
			_ = printJSON(map[string]any{"replaced": replaced, "reason": fmt.Sprintf("transaction %d ended %s: %v", n, outcome, failure)})
			cl.Close()
			if cl, err = newClient(); err != nil {
				return err
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	cl.Close()
	return printJSON(map[string]any{"done": true, "replaced": replaced})
}

// writeTransaction runs one transaction: its outcome, the place of each record delivered,
// and the error that leaves the client to be replaced (nil when it can go on).
func writeTransaction(cl *kgo.Client, topic string, writer, n int, chosen []int32, commit, flushAbort bool) (string, map[string][2]int64, error) {
	delivered := map[string][2]int64{}
	var mu sync.Mutex
	var produceErr error
	ctx, cancel := context.WithTimeout(context.Background(), writerCallTimeout)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		return "aborted", delivered, err
	}
	for k, p := range chosen {
		value := "t" + strconv.Itoa(writer) + "-" + strconv.Itoa(n) + "-" + strconv.Itoa(k)
		cl.Produce(ctx, &kgo.Record{Topic: topic, Partition: p, Value: []byte(value)}, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				produceErr = errors.Join(produceErr, err)
				return
			}
			delivered[value] = [2]int64{int64(r.Partition), r.Offset}
		})
	}
	if commit || flushAbort {
		if err := cl.Flush(ctx); err != nil {
			commit = false
		}
	}
	mu.Lock()
	if produceErr != nil {
		commit = false
	}
	mu.Unlock()
	if !commit {
		if err := cl.AbortBufferedRecords(ctx); err != nil {
			return "aborted", delivered, err
		}
	}
	endCtx, endCancel := context.WithTimeout(context.Background(), writerEndTimeout)
	defer endCancel()
	if !commit {
		return "aborted", delivered, cl.EndTransaction(endCtx, kgo.TryAbort)
	}
	err := cl.EndTransaction(endCtx, kgo.TryCommit)
	if err == nil {
		return "committed", delivered, nil
	}
	// Refused before the commit was tried (the producer id had failed), or refused by the
	// coordinator so that it must abort: not committed. Anything else is unconfirmed.
	outcome := "unknown"
	if errors.Is(err, kerr.OperationNotAttempted) || errors.Is(err, kerr.TransactionAbortable) {
		outcome = "aborted"
	}
	if abortErr := cl.EndTransaction(endCtx, kgo.TryAbort); abortErr != nil {
		err = errors.Join(err, abortErr)
	}
	return outcome, delivered, err
}
