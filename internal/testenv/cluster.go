package testenv

import (
	"context"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster started by a test: masters and, with
// replicas, their replicas. Roles change on a failover: ask MasterOf and
// ReplicasOf, which read the cluster's own view.
type Cluster struct {
	Nodes []*RedisServer
}

// StartCluster starts n masters (no replicas) with cluster mode on, joins
// them with redis-cli --cluster create, waits until the cluster state is ok,
// and returns the servers. Any one address reaches the whole cluster.
func StartCluster(t testing.TB, n int) []*RedisServer {
	t.Helper()
	return StartClusterReplicas(t, n, 0, 2*time.Second).Nodes
}

// StartClusterReplicas starts a cluster of masters masters with replicas
// replicas each (redis-cli assigns them), whose nodes declare a peer failed
// after nodeTimeout (cluster-node-timeout: a replica of a killed master is
// promoted about one to two nodeTimeouts later). It waits until every node
// sees the cluster ok and every replica is in sync with its master.
func StartClusterReplicas(t testing.TB, masters, replicas int, nodeTimeout time.Duration) *Cluster {
	t.Helper()
	NeedBinary(t, "redis-cli")
	c := &Cluster{Nodes: make([]*RedisServer, masters*(1+replicas))}
	args := []string{"--cluster", "create"}
	for i := range c.Nodes {
		c.Nodes[i] = StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
			"--repl-diskless-sync-delay", "0")
		args = append(args, c.Nodes[i].Addr)
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range c.Nodes {
		for {
			info := cli(s, "cluster", "info")
			repl := cli(s, "info", "replication")
			if strings.Contains(info, "cluster_state:ok") &&
				(strings.Contains(repl, "role:master") || strings.Contains(repl, "master_link_status:up")) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s not ok and in sync:\n%s\n%s", s.Addr, info, repl)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Every node knows every other's role before the test starts.
	for _, s := range c.Nodes {
		for strings.Count(cli(s, "cluster", "nodes"), "\n") < len(c.Nodes) || strings.Contains(cli(s, "cluster", "nodes"), "handshake") {
			if time.Now().After(deadline) {
				t.Fatalf("cluster node %s does not see %d nodes:\n%s", s.Addr, len(c.Nodes), cli(s, "cluster", "nodes"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Addr returns the address of the first node, which reaches the cluster.
func (c *Cluster) Addr() string { return c.Nodes[0].Addr }

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr, master string
	flags            []string
	slots            [][2]int
}

func (n clusterNode) has(flag string) bool { return slices.Contains(n.flags, flag) }

// view reads CLUSTER NODES from the first node that answers, other than
// skip (a node the test killed or froze).
func (c *Cluster) view(t testing.TB, skip ...*RedisServer) []clusterNode {
	t.Helper()
	for _, s := range c.Nodes {
		if slices.Contains(skip, s) || s.cmd == nil {
			continue
		}
		out := cli(s, "cluster", "nodes")
		if strings.TrimSpace(out) == "" {
			continue
		}
		var nodes []clusterNode
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 8 {
				continue
			}
			n := clusterNode{id: f[0], addr: strings.SplitN(f[1], "@", 2)[0], flags: strings.Split(f[2], ","), master: f[3]}
			for _, r := range f[8:] {
				if strings.HasPrefix(r, "[") {
					continue // a slot being migrated
				}
				lo, hi, _ := strings.Cut(r, "-")
				a, _ := strconv.Atoi(lo)
				b := a
				if hi != "" {
					b, _ = strconv.Atoi(hi)
				}
				n.slots = append(n.slots, [2]int{a, b})
			}
			nodes = append(nodes, n)
		}
		return nodes
	}
	t.Fatal("no cluster node answers CLUSTER NODES")
	return nil
}

// Slot returns the hash slot of key.
func (c *Cluster) Slot(t testing.TB, key string) int {
	t.Helper()
	for _, s := range c.Nodes {
		if s.cmd == nil {
			continue
		}
		if n, err := strconv.Atoi(strings.TrimSpace(cli(s, "cluster", "keyslot", key))); err == nil {
			return n
		}
	}
	t.Fatal("no cluster node answers CLUSTER KEYSLOT")
	return 0
}

// MasterOf returns the node that serves key's slot as a master, as a node
// other than skip sees the cluster; nil if none (a failover under way).
func (c *Cluster) MasterOf(t testing.TB, key string, skip ...*RedisServer) *RedisServer {
	t.Helper()
	slot := c.Slot(t, key)
	for _, n := range c.view(t, skip...) {
		if !n.has("master") || n.has("fail") || n.has("fail?") {
			continue
		}
		for _, r := range n.slots {
			if r[0] <= slot && slot <= r[1] {
				return c.byAddr(n.addr)
			}
		}
	}
	return nil
}

// ReplicasOf returns the replicas in sync with master, as master (running)
// reports them.
func (c *Cluster) ReplicasOf(t testing.TB, master *RedisServer) []*RedisServer {
	t.Helper()
	var out []*RedisServer
	for _, line := range strings.Split(cli(master, "info", "replication"), "\n") {
		// slave0:ip=127.0.0.1,port=30004,state=online,offset=...,lag=0
		if !strings.HasPrefix(line, "slave") || !strings.Contains(line, "state=online") {
			continue
		}
		var ip, port string
		for _, kv := range strings.Split(strings.TrimSpace(line[strings.Index(line, ":")+1:]), ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "ip":
				ip = v
			case "port":
				port = v
			}
		}
		if s := c.byAddr(ip + ":" + port); s != nil {
			out = append(out, s)
		}
	}
	return out
}

// WaitPromoted waits until key's slot is served by a master other than old
// (kill or freeze old to make the cluster fail over), as every node but
// old sees it, and returns that master.
func (c *Cluster) WaitPromoted(t testing.TB, key string, old *RedisServer) *RedisServer {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := c.MasterOf(t, key, old); m != nil && m != old && strings.Contains(cli(m, "cluster", "info"), "cluster_state:ok") {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("no replica of %s promoted in 60s:\n%s", old.Addr, cli(c.Nodes[0], "cluster", "nodes"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Cluster) byAddr(addr string) *RedisServer {
	for _, s := range c.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// cli runs redis-cli against s and returns its output ("" on error, or
// after 5s: a frozen node never answers).
func cli(s *RedisServer, args ...string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", append([]string{"-p", strconv.Itoa(s.Port)}, args...)...).Output()
	if err != nil {
		return ""
	}
	return string(out)
}
