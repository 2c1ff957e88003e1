// The job baton's mqtt endpoint does for a plain subscription under a lease
// (guard = active), written the way Go users commonly write it
// (bench/peers/README.md): a Redis SET NX PX lease (the seed's TryLock + Lua
// CAS renewal, ttl PEER_TTL_MS, default 3000 ms, renewed every ttl/3) in a
// goroutine; the leader connects with paho.mqtt.golang (Debian's
// golang-github-eclipse-paho.mqtt.golang-dev) under a fixed client id with
// CleanSession = false (a persistent session: what is published while it is
// away is queued for it), subscribes to the filter and writes one JSON line
// per message to stdout with encoding/json. Losing the lease disconnects.
//
//	mqtt_peer LOCK_PORT MQTT_PORT CLIENT_ID TOPIC_FILTER QOS
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	"github.com/gomodule/redigo/redis"
)

const key = "peer:lease:bench"

var renewScript = redis.NewScript(1, `if redis.call('get', KEYS[1]) == ARGV[1] then
return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end`)
var releaseScript = redis.NewScript(1, `if redis.call('get', KEYS[1]) == ARGV[1] then
return redis.call('del', KEYS[1]) else return 0 end`)

// The fields of baton's mqtt envelope (endpoints/mqtt.c build_message).
type envelope struct {
	Endpoint   string `json:"endpoint"`
	Type       string `json:"type"`
	Epoch      int    `json:"epoch"`
	ReceivedAt string `json:"received_at"`
	Topic      string `json:"topic"`
	QoS        byte   `json:"qos"`
	Retained   bool   `json:"retained"`
	Dup        bool   `json:"dup"`
	PacketID   uint16 `json:"packet_id,omitempty"`
	Payload    string `json:"payload"`
}

func consume(broker, clientID, filter string, qos byte, epoch int) (mqtt.Client, error) {
	enc := json.NewEncoder(os.Stdout)
	handler := func(_ mqtt.Client, m mqtt.Message) {
		enc.Encode(envelope{"bench", "mqtt", epoch, time.Now().UTC().Format(time.RFC3339Nano),
			m.Topic(), m.Qos(), m.Retained(), m.Duplicate(), m.MessageID(), string(m.Payload())})
	}
	opts := mqtt.NewClientOptions().AddBroker(broker).SetClientID(clientID).
		SetCleanSession(false).
		// what the session had queued may arrive before Subscribe adds its route
		SetDefaultPublishHandler(handler)
	c := mqtt.NewClient(opts)
	if t := c.Connect(); !t.WaitTimeout(10*time.Second) || t.Error() != nil {
		c.Disconnect(0)
		return nil, fmt.Errorf("connect: %v", t.Error())
	}
	t := c.Subscribe(filter, qos, handler)
	if !t.WaitTimeout(10 * time.Second) {
		c.Disconnect(0)
		return nil, errors.New("subscribe: no SUBACK")
	}
	if err := t.Error(); err != nil {
		c.Disconnect(0)
		return nil, fmt.Errorf("subscribe: %v", err)
	}
	return c, nil
}

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: mqtt_peer LOCK_PORT MQTT_PORT CLIENT_ID TOPIC_FILTER QOS")
		os.Exit(64)
	}
	qos, err := strconv.Atoi(os.Args[5])
	if err != nil || qos < 0 || qos > 2 {
		fmt.Fprintln(os.Stderr, "QOS: 0, 1 or 2")
		os.Exit(64)
	}
	ttlMs := 3000
	if v, err := strconv.Atoi(os.Getenv("PEER_TTL_MS")); err == nil && v > 0 {
		ttlMs = v
	}
	host, _ := os.Hostname()
	token := fmt.Sprintf("%s-%d-%d", host, os.Getpid(), time.Now().UnixNano())
	lock, err := redis.Dial("tcp", "127.0.0.1:"+os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "lock:", err)
		os.Exit(69)
	}
	broker := "tcp://127.0.0.1:" + os.Args[2]
	var mu sync.Mutex
	var cons mqtt.Client
	epoch := 0
	stop := func() {
		if cons != nil {
			cons.Disconnect(250)
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
				if cons, err = consume(broker, os.Args[3], os.Args[4], byte(qos), epoch); err != nil {
					fmt.Fprintln(os.Stderr, err)
					releaseScript.Do(lock, key, token) // try again at the next tick
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
