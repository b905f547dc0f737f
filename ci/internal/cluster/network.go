package cluster

import (
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
)

// network puts each member in its own network namespace, joined to a bridge
// in the root namespace by a veth pair. Isolating a member is taking its
// host-side veth down: it then reaches neither its peers nor its clients.
type network struct {
	id     string // short, unique per run: interface names are limited to 15 bytes
	subnet string // "10.199.N"
	bridge string
}

// NetnsAvailable reports whether this process can create network
// namespaces (root and iproute2), with the reason when it cannot.
func NetnsAvailable() error {
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("%w: the ip command (iproute2) is not installed: apt-get install -y iproute2", ErrNetns)
	}
	name := fmt.Sprintf("lgprobe%d", rand.IntN(1<<20))
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: ip netns add: %s (run as root)", ErrNetns, strings.TrimSpace(string(out)))
	}
	_ = exec.Command("ip", "netns", "del", name).Run()
	return nil
}

// subnets are the subnets this process's networks use: two clusters of
// one run must not share one (their members' addresses would clash).
var subnets = struct {
	sync.Mutex
	used map[int]bool
}{used: map[int]bool{}}

func newNetwork() (*network, error) {
	subnets.Lock()
	s := rand.IntN(250) + 1
	for subnets.used[s] {
		s = s%250 + 1
	}
	subnets.used[s] = true
	subnets.Unlock()
	n := &network{id: fmt.Sprintf("%04x", rand.IntN(1<<16)), subnet: fmt.Sprintf("10.199.%d", s)}
	n.bridge = "lg" + n.id + "br"
	if err := run("ip", "link", "add", n.bridge, "type", "bridge"); err != nil {
		return nil, err
	}
	if err := run("ip", "addr", "add", n.subnet+".1/24", "dev", n.bridge); err != nil {
		n.close(0)
		return nil, err
	}
	if err := run("ip", "link", "set", n.bridge, "up"); err != nil {
		n.close(0)
		return nil, err
	}
	return n, nil
}

func (n *network) ns(i int) string      { return fmt.Sprintf("lg%sm%d", n.id, i) }
func (n *network) hostIf(i int) string  { return fmt.Sprintf("lg%sv%d", n.id, i) }
func (n *network) innerIf(i int) string { return fmt.Sprintf("lg%sp%d", n.id, i) }
func (n *network) ip(i int) string      { return fmt.Sprintf("%s.%d", n.subnet, 10+i) }

// addMember creates member i's namespace and its link to the bridge.
func (n *network) addMember(i int) error {
	ns, host, inner := n.ns(i), n.hostIf(i), n.innerIf(i)
	steps := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "link", "add", host, "type", "veth", "peer", "name", inner},
		{"ip", "link", "set", inner, "netns", ns},
		{"ip", "link", "set", host, "master", n.bridge, "up"},
		{"ip", "netns", "exec", ns, "ip", "addr", "add", n.ip(i) + "/24", "dev", inner},
		{"ip", "netns", "exec", ns, "ip", "link", "set", inner, "up"},
		{"ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// setLink takes member i's link down (isolated) or up.
func (n *network) setLink(i int, up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return run("ip", "link", "set", n.hostIf(i), state)
}

func (n *network) close(members int) {
	for i := range members {
		_ = exec.Command("ip", "netns", "del", n.ns(i)).Run()
		_ = exec.Command("ip", "link", "del", n.hostIf(i)).Run()
	}
	_ = exec.Command("ip", "link", "del", n.bridge).Run()
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s %s: %v: %s", ErrNetns, name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
