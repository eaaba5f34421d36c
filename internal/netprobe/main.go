// Command netprobe is what egress tests run inside a sandbox to try the
// network the way an agent's code would, and to try to get around the
// enforcer the way hostile code would. Each subcommand prints what it got
// on stdout and exits 0, or prints the error on stderr and exits 1.
//
//	netprobe get URL [HOST]        HTTP GET (Host header HOST if given);
//	                               prints the body's first line
//	netprobe tls IP:PORT SNI       TLS to IP:PORT naming SNI (certificate
//	                               not checked), then GET /; prints the
//	                               body's first line
//	netprobe lookup NAME           A records through the sandbox's resolver
//	netprobe txt NAME              TXT records through it
//	netprobe udp IP:PORT           sends "ping", prints the echo (1 s)
//	netprobe route-del             tries to delete the default route
//	netprobe route-add CIDR GW     tries to add a route
//	netprobe raw-udp IP:PORT       sends a UDP "ping" through a raw socket
//	                               and waits 1 s for the echo
//	netprobe nft-flush             tries to delete every nftables rule of
//	                               its network namespace
//	netprobe mark-udp IP:PORT MARK sends a UDP "ping" from a socket with
//	                               firewall mark MARK (SO_MARK) and prints
//	                               the echo (1 s)
//	netprobe download URL HOST     GET, counting bytes; prints the count
//	netprobe stream URL HOST       GET a stream, printing each line as it
//	                               comes until the connection ends; exits 0
//	                               when it was cut
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables"
)

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: netprobe get|get-verified|tls|lookup|txt|udp|route-del|route-add|raw-udp|nft-flush|mark-udp|download|stream|wait ARGS"))
	}
	var err error
	a := os.Args[2:]
	switch os.Args[1] {
	case "get":
		err = get(arg(a, 0), arg(a, 1))
	case "tls":
		err = tlsGet(arg(a, 0), arg(a, 1))
	case "get-verified":
		err = getVerified(arg(a, 0), arg(a, 1), arg(a, 2))
	case "lookup":
		var addrs []string
		addrs, err = net.DefaultResolver.LookupHost(ctx(), arg(a, 0))
		if err == nil {
			fmt.Println(strings.Join(addrs, " "))
		}
	case "txt":
		var txt []string
		txt, err = net.DefaultResolver.LookupTXT(ctx(), arg(a, 0))
		if err == nil {
			fmt.Println(strings.Join(txt, " "))
		}
	case "udp":
		err = udpEcho(arg(a, 0))
	case "route-del":
		err = routeDel()
	case "route-add":
		err = routeAdd(arg(a, 0), arg(a, 1))
	case "raw-udp":
		err = rawUDP(arg(a, 0))
	case "nft-flush":
		err = nftFlush()
	case "mark-udp":
		err = markUDP(arg(a, 0), arg(a, 1))
	case "download":
		err = download(arg(a, 0), arg(a, 1))
	case "stream":
		err = stream(arg(a, 0), arg(a, 1))
	case "wait":
		err = waitFirst(arg(a, 0))
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func arg(a []string, i int) string {
	if i < len(a) {
		return a[i]
	}
	return ""
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "netprobe:", err)
	os.Exit(1)
}

// ctx bounds a lookup; the process ends soon after, so its timer may
// outlive the call.
func ctx() context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	time.AfterFunc(6*time.Second, cancel)
	return c
}

var client = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true},
}

func request(url, host string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if host != "" {
		req.Host = host
	}
	return client.Do(req)
}

func get(url, host string) error {
	resp, err := request(url, host)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	fmt.Print(line)
	return nil
}

// getVerified GETs url with header name: value (when name is set; a value
// "$VAR" is that variable's),
// verifying the server's certificate against the system's roots
// ($SSL_CERT_FILE where set, as Go reads it), and prints the first line
// of the answer.
func getVerified(url, name, value string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if strings.HasPrefix(value, "$") {
		value = os.Getenv(value[1:])
	}
	if name != "" {
		req.Header.Set(name, value)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	fmt.Print(line)
	return nil
}

func tlsGet(addr, sni string) error {
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", sni)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	fmt.Print(line)
	return nil
}

func udpEcho(addr string) error {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return echo(c)
}

// echo sends "ping" on c and prints the answer (1 s).
func echo(c net.Conn) error {
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	fmt.Println(string(buf[:n]))
	return nil
}

// waitFirst connects to addr over TCP and, sending nothing, waits up to
// 5 s for the first bytes (as a client of a protocol where the server
// speaks first does), printing them.
func waitFirst(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	fmt.Println(string(buf[:n]))
	return nil
}

func download(url, host string) error {
	start := time.Now()
	resp, err := request(url, host)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return err
	}
	fmt.Println(n, time.Since(start).Seconds())
	return nil
}

func stream(url, host string) error {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Host = host
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if line != "" {
			fmt.Print(line)
		}
		if err != nil {
			fmt.Println("cut:", err)
			return nil
		}
	}
}

// Netlink route changes, without a library: they must fail for want of
// CAP_NET_ADMIN.
func routeDel() error { return routeMsg(syscall.RTM_DELROUTE, 0, netip.Prefix{}, netip.Addr{}) }

func routeAdd(cidr, gw string) error {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return err
	}
	g, err := netip.ParseAddr(gw)
	if err != nil {
		return err
	}
	return routeMsg(syscall.RTM_NEWROUTE, syscall.NLM_F_CREATE|syscall.NLM_F_EXCL, p, g)
}

func routeMsg(typ uint16, flags uint16, dst netip.Prefix, gw netip.Addr) error {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_RAW, syscall.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if err := syscall.Bind(fd, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return err
	}
	rt := []byte{syscall.AF_INET, byte(dst.Bits()), 0, 0, syscall.RT_TABLE_MAIN, syscall.RTPROT_BOOT, syscall.RT_SCOPE_UNIVERSE, syscall.RTN_UNICAST, 0, 0, 0, 0}
	var attrs []byte
	addAttr := func(t uint16, v []byte) {
		a := make([]byte, 4, 4+len(v)+3)
		binary.NativeEndian.PutUint16(a[0:], uint16(4+len(v)))
		binary.NativeEndian.PutUint16(a[2:], t)
		a = append(a, v...)
		for len(a)%4 != 0 {
			a = append(a, 0)
		}
		attrs = append(attrs, a...)
	}
	if dst.IsValid() {
		b := dst.Addr().As4()
		addAttr(syscall.RTA_DST, b[:])
	}
	if gw.IsValid() {
		b := gw.As4()
		addAttr(syscall.RTA_GATEWAY, b[:])
	}
	msg := make([]byte, 16)
	body := append(rt, attrs...)
	binary.NativeEndian.PutUint32(msg[0:], uint32(16+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], syscall.NLM_F_REQUEST|syscall.NLM_F_ACK|flags)
	binary.NativeEndian.PutUint32(msg[8:], 1)
	msg = append(msg, body...)
	if err := syscall.Sendto(fd, msg, 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, _, err := syscall.Recvfrom(fd, buf, 0)
	if err != nil {
		return err
	}
	if n >= 20 && binary.NativeEndian.Uint16(buf[4:]) == syscall.NLMSG_ERROR {
		if code := int32(binary.NativeEndian.Uint32(buf[16:])); code != 0 {
			return syscall.Errno(-code)
		}
	}
	fmt.Println("changed")
	return nil
}

// rawUDP sends a UDP datagram built by hand through a raw IP socket (which
// CAP_NET_RAW allows) and waits for the echo on an ordinary socket bound to
// the source port it used.
// nftFlush tries what `nft flush ruleset` does.
func nftFlush() error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	c.FlushRuleset()
	return c.Flush()
}

// markUDP is udpEcho from a socket marked mark: an enforcer that lets
// its own marked sockets out must not let this one out.
func markUDP(addr, mark string) error {
	m, err := strconv.ParseUint(mark, 0, 32)
	if err != nil {
		return err
	}
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, int(m))
		}); err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("SO_MARK: %w", serr)
		}
		return nil
	}}
	c, err := d.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return echo(c)
}

func rawUDP(addr string) error {
	dst, err := netip.ParseAddrPort(addr)
	if err != nil {
		return err
	}
	// The source address is the one the kernel would use.
	probe, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	src := probe.LocalAddr().(*net.UDPAddr).AddrPort()
	probe.Close()
	l, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(src))
	if err != nil {
		return err
	}
	defer l.Close()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_UDP)
	if err != nil {
		return fmt.Errorf("raw socket: %w", err)
	}
	defer syscall.Close(fd)
	payload := []byte("ping")
	udp := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], dst.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	udp = append(udp, payload...) // checksum 0: none, allowed over IPv4
	sa := &syscall.SockaddrInet4{Addr: dst.Addr().As4()}
	if err := syscall.Sendto(fd, udp, 0, sa); err != nil {
		return fmt.Errorf("raw send: %w", err)
	}
	l.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 64)
	n, err := l.Read(buf)
	if err != nil {
		return err
	}
	fmt.Println(string(buf[:n]))
	return nil
}
