// The job baton does, written the way Go users commonly write it
// (bench/peers/README.md): a Redis SET NX PX lease (the seed's TryLock +
// Lua CAS renewal, ttl 3000 ms, renewed every 1000 ms) in a goroutine; the
// leader PSUBSCRIBEs with redigo (Debian's golang-github-gomodule-redigo-dev)
// and writes one JSON line per message to stdout with encoding/json.
//
//	redis_psub_peer LOCK_PORT SOURCE_PORT PATTERN
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
)

const (
	key     = "peer:lease:bench"
	ttlMs   = 3000
	renewMs = 1000
)

var renewScript = redis.NewScript(1, `if redis.call('get', KEYS[1]) == ARGV[1] then
return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end`)
var releaseScript = redis.NewScript(1, `if redis.call('get', KEYS[1]) == ARGV[1] then
return redis.call('del', KEYS[1]) else return 0 end`)

type envelope struct {
	Endpoint   string `json:"endpoint"`
	Type       string `json:"type"`
	Epoch      int    `json:"epoch"`
	ReceivedAt string `json:"received_at"`
	Channel    string `json:"channel"`
	Pattern    string `json:"pattern"`
	Payload    string `json:"payload"`
}

type consumer struct {
	conn redis.Conn
	done chan struct{}
}

func consume(addr, pattern string, epoch int) (*consumer, error) {
	c, err := redis.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	psc := redis.PubSubConn{Conn: c}
	if err := psc.PSubscribe(pattern); err != nil {
		c.Close()
		return nil, err
	}
	cons := &consumer{conn: c, done: make(chan struct{})}
	go func() {
		defer close(cons.done)
		enc := json.NewEncoder(os.Stdout)
		for {
			switch v := psc.Receive().(type) {
			case redis.Message:
				enc.Encode(envelope{"bench", "redis_psub", epoch,
					time.Now().UTC().Format(time.RFC3339Nano), v.Channel, v.Pattern, string(v.Data)})
			case error:
				return
			}
		}
	}()
	return cons, nil
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: redis_psub_peer LOCK_PORT SOURCE_PORT PATTERN")
		os.Exit(64)
	}
	host, _ := os.Hostname()
	token := fmt.Sprintf("%s-%d-%d", host, os.Getpid(), time.Now().UnixNano())
	lock, err := redis.Dial("tcp", "127.0.0.1:"+os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "lock:", err)
		os.Exit(69)
	}
	src := "127.0.0.1:" + os.Args[2]
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
		if cons == nil {
			ok, err := redis.String(lock.Do("SET", key, token, "PX", ttlMs, "NX"))
			if err == nil && ok == "OK" {
				epoch++
				if cons, err = consume(src, os.Args[3], epoch); err != nil {
					fmt.Fprintln(os.Stderr, "consume:", err)
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
	t := time.NewTicker(renewMs * time.Millisecond)
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
