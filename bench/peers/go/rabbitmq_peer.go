// The job baton's rabbitmq endpoint does (private mode), written the way Go
// users commonly write it (bench/peers/README.md): a Redis SET NX PX lease
// (the seed's TryLock + Lua CAS renewal; ttl PEER_TTL_MS, default 3000 ms,
// renewed every ttl/3) with redigo; the leader consumes a RabbitMQ fanout
// exchange with amqp091-go (both from Debian: golang-github-gomodule-redigo-dev,
// golang-github-rabbitmq-amqp091-go-dev) through a server-named exclusive
// auto-delete queue, and writes one JSON line per message to stdout with
// encoding/json. Losing the lease closes the connection (the broker then
// deletes the queue); SIGTERM/SIGINT also gives the lease back.
//
//	rabbitmq_peer LOCK_PORT AMQP_PORT EXCHANGE
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
	amqp "github.com/rabbitmq/amqp091-go"
)

const key = "peer:lease:bench"

var renewScript = redis.NewScript(1, `if redis.call('get', KEYS[1]) == ARGV[1] then
return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end`)
var releaseScript = redis.NewScript(1, `if redis.call('get', KEYS[1]) == ARGV[1] then
return redis.call('del', KEYS[1]) else return 0 end`)

// baton's rabbitmq envelope fields (endpoints/rabbitmq.md)
type envelope struct {
	Endpoint    string     `json:"endpoint"`
	Type        string     `json:"type"`
	Epoch       int        `json:"epoch"`
	ID          string     `json:"id,omitempty"`
	ReceivedAt  string     `json:"received_at"`
	Exchange    string     `json:"exchange"`
	RoutingKey  string     `json:"routing_key"`
	DeliveryTag uint64     `json:"delivery_tag"`
	Redelivered bool       `json:"redelivered"`
	MessageID   string     `json:"message_id,omitempty"`
	ContentType string     `json:"content_type,omitempty"`
	Headers     amqp.Table `json:"headers,omitempty"`
	Payload     string     `json:"payload"`
}

type consumer struct {
	conn *amqp.Connection
	done chan struct{}
}

func consume(url, exchange string, epoch int) (*consumer, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err == nil {
		// durable, as baton declares it (exchange_durable defaults to true)
		err = ch.ExchangeDeclare(exchange, "fanout", true, false, false, false, nil)
	}
	var q amqp.Queue
	if err == nil {
		// server-named, not durable, auto-delete, exclusive
		q, err = ch.QueueDeclare("", false, true, true, false, nil)
	}
	if err == nil {
		err = ch.QueueBind(q.Name, "", exchange, false, nil)
	}
	var msgs <-chan amqp.Delivery
	if err == nil {
		// autoAck: what most users write for a private broadcast queue (and
		// baton's private-mode default, ack = "auto"); no basic.qos, as there
		msgs, err = ch.Consume(q.Name, "", true, false, false, false, nil)
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "consuming from queue %s\n", q.Name)
	cons := &consumer{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(cons.done)
		enc := json.NewEncoder(os.Stdout)
		for d := range msgs { // closed when the connection closes
			enc.Encode(envelope{"bench", "rabbitmq", epoch, d.MessageId,
				time.Now().UTC().Format(time.RFC3339Nano), d.Exchange, d.RoutingKey,
				d.DeliveryTag, d.Redelivered, d.MessageId, d.ContentType, d.Headers,
				string(d.Body)})
		}
	}()
	return cons, nil
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: rabbitmq_peer LOCK_PORT AMQP_PORT EXCHANGE")
		os.Exit(64)
	}
	ttlMs := 3000
	if v, err := strconv.Atoi(os.Getenv("PEER_TTL_MS")); err == nil && v >= 3 {
		ttlMs = v
	}
	host, _ := os.Hostname()
	token := fmt.Sprintf("%s-%d-%d", host, os.Getpid(), time.Now().UnixNano())
	lock, err := redis.Dial("tcp", "127.0.0.1:"+os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "lock:", err)
		os.Exit(69)
	}
	url := "amqp://guest:guest@127.0.0.1:" + os.Args[2] + "/"
	var mu sync.Mutex
	var cons *consumer
	epoch := 0
	stop := func() {
		if cons != nil {
			cons.conn.Close()
			<-cons.done
			cons = nil
		}
	}
	tick := func() {
		mu.Lock()
		defer mu.Unlock()
		if cons != nil {
			select {
			case <-cons.done: // the broker connection is gone: lead again later
				fmt.Fprintln(os.Stderr, "consumer ended")
				stop()
				releaseScript.Do(lock, key, token)
			default:
			}
		}
		if cons == nil {
			ok, err := redis.String(lock.Do("SET", key, token, "PX", ttlMs, "NX"))
			if err == nil && ok == "OK" {
				epoch++
				if cons, err = consume(url, os.Args[3], epoch); err != nil {
					fmt.Fprintln(os.Stderr, "consume:", err)
					releaseScript.Do(lock, key, token)
				}
			}
			return
		}
		if n, err := redis.Int(renewScript.Do(lock, key, token, ttlMs)); err != nil || n != 1 {
			stop()
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	t := time.NewTicker(time.Duration(ttlMs/3) * time.Millisecond)
	tick()
	for {
		select {
		case <-t.C:
			tick()
		case <-sig:
			mu.Lock()
			stop()
			releaseScript.Do(lock, key, token)
			os.Exit(0)
		}
	}
}
