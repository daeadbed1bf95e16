package worker

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// The destination guard of http jobs. A job's URL comes from whoever may define jobs, and the
// worker runs inside the operator's network, often on a cloud host: without a guard an http job
// could read the instance's metadata service (credentials included) or poke services that listen
// on the worker's loopback interface only. The guard refuses, unless the HTTPAllowList says
// otherwise:
//
//   - loopback: 127.0.0.0/8, ::1;
//   - link-local: 169.254.0.0/16, fe80::/10 (169.254.169.254 is the metadata service of AWS,
//     GCP, Azure, Oracle and others);
//   - other cloud metadata addresses: fd00:ec2::254 (AWS, IPv6), 100.100.100.200 (Alibaba);
//   - unspecified addresses: 0.0.0.0/8 and :: (connecting to them reaches the local host).
//
// Private ranges (10/8, 172.16/12, 192.168/16, fc00::/7) are allowed: calling services on the
// operator's network is what http jobs are for, and the issue that asked for the guard lists only
// the three classes above. An IPv4-mapped IPv6 address (::ffff:127.0.0.1) is judged as the IPv4
// address it maps.
//
// The check runs in the Control hook of the net.Dialer, on the address actually being connected
// to, after DNS resolution and for every address tried: a name that resolves (or is rebound) to a
// refused address is refused, and a redirect is checked when its connection is dialed, like any
// request. HTTP_PROXY and HTTPS_PROXY are not used: a proxy would connect to the destination on
// the worker's behalf, out of the guard's reach.

// HTTPAllowList names destinations that http jobs may reach although the guard refuses them by
// default. Its zero value allows nothing more. It is a pflag/flag Value: Set adds the
// comma-separated entries of its argument.
type HTTPAllowList struct {
	// Prefixes allow the addresses they contain, whatever name the URL used.
	Prefixes []netip.Prefix
	// Hosts allow these host names whatever they resolve to: the name is trusted, not its
	// addresses. Compared without regard to case or a trailing dot.
	Hosts []string
}

// ParseHTTPAllowList parses a comma-separated list of CIDRs (10.0.0.0/8, ::1/128), IP addresses
// (one address: 127.0.0.1 is 127.0.0.1/32) and host names (localhost, metadata.internal).
// Blank entries are ignored.
func ParseHTTPAllowList(s string) (HTTPAllowList, error) {
	var a HTTPAllowList
	err := a.Set(s)
	return a, err
}

// Set adds the entries of s (see ParseHTTPAllowList) to a, or, if one is invalid, none of them.
func (a *HTTPAllowList) Set(s string) error {
	var add HTTPAllowList
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if strings.Contains(e, "://") {
			return fmt.Errorf("%q is neither a CIDR (10.0.0.0/8), an IP address nor a host name: give a bare host name, without scheme, port or path", e)
		}
		if strings.Contains(e, "/") {
			p, err := netip.ParsePrefix(e)
			if err != nil {
				return fmt.Errorf("%q is not a CIDR such as 10.0.0.0/8, 127.0.0.1/32 or ::1/128", e)
			}
			add.Prefixes = append(add.Prefixes, unmapPrefix(p.Masked()))
			continue
		}
		if addr, err := netip.ParseAddr(e); err == nil {
			if addr.Zone() != "" {
				return fmt.Errorf("%q: an IPv6 zone cannot be allowed; give the address without %%%s", e, addr.Zone())
			}
			addr = addr.Unmap()
			add.Prefixes = append(add.Prefixes, netip.PrefixFrom(addr, addr.BitLen()))
			continue
		}
		h, err := normalizeHost(e)
		if err != nil {
			return err
		}
		add.Hosts = append(add.Hosts, h)
	}
	a.Prefixes = append(a.Prefixes, add.Prefixes...)
	a.Hosts = append(a.Hosts, add.Hosts...)
	return nil
}

// String is the list in the form Set reads.
func (a *HTTPAllowList) String() string {
	if a == nil {
		return ""
	}
	parts := make([]string, 0, len(a.Prefixes)+len(a.Hosts))
	for _, p := range a.Prefixes {
		parts = append(parts, p.String())
	}
	parts = append(parts, a.Hosts...)
	return strings.Join(parts, ",")
}

// Type names the value's kind in --help.
func (a *HTTPAllowList) Type() string { return "list" }

// normalizeHost checks that e is a host name (no scheme, port, path or wildcard) and returns it
// in lower case without a trailing dot.
func normalizeHost(e string) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("%q is neither a CIDR (10.0.0.0/8), an IP address nor a host name: %s", e, why)
	}
	if strings.ContainsAny(e, ":/?#@[]") {
		return "", bad("give a bare host name, without scheme, port or path")
	}
	if strings.Contains(e, "*") {
		return "", bad("wildcards are not supported; list each host name, or the CIDR of its addresses")
	}
	h := strings.ToLower(strings.TrimSuffix(e, "."))
	if h == "" || len(h) > 253 {
		return "", bad("a host name has 1 to 253 characters")
	}
	labels := strings.Split(h, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return "", bad("each dot-separated label has 1 to 63 characters")
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return "", bad(fmt.Sprintf("%q is not a letter, digit, '-' or '_'", r))
			}
		}
	}
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" {
		// A URL host ending in a number is read as an IPv4 address, never looked up as a name.
		return "", bad("it looks like an IPv4 address but is not a valid one")
	}
	return h, nil
}

// unmapPrefix turns a prefix of IPv4-mapped IPv6 addresses into the IPv4 prefix it maps, since
// dialed addresses are unmapped before they are judged.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}

func (a HTTPAllowList) allowsHost(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, h := range a.Hosts {
		if strings.ToLower(strings.TrimSuffix(h, ".")) == host {
			return true
		}
	}
	return false
}

func (a HTTPAllowList) allowsAddr(addr netip.Addr) bool {
	for _, p := range a.Prefixes {
		if unmapPrefix(p).Contains(addr) {
			return true
		}
	}
	return false
}

// refusedRanges are the destinations the guard refuses by default, most specific first: the
// first match names the class in the error.
var refusedRanges = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "a cloud metadata address"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "a cloud metadata address"},
	{netip.MustParsePrefix("100.100.100.200/32"), "a cloud metadata address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified address"},
	{netip.MustParsePrefix("::/128"), "an unspecified address"},
}

// DestinationRefusedError is the error of an http job whose connection the guard refused. The
// job fails permanently: retrying will dial the same address.
type DestinationRefusedError struct {
	Host string     // the host name being dialed; "" when the URL named an address
	Addr netip.Addr // the address refused
	What string     // its class: "a loopback address", "a cloud metadata address", …
}

func (e *DestinationRefusedError) Error() string {
	dest := e.Addr.String()
	allow := "--http-allow " + netip.PrefixFrom(e.Addr, e.Addr.BitLen()).String()
	if e.Host != "" {
		dest = e.Host + " (" + dest + ")"
		allow = "--http-allow " + e.Host + " or " + allow
	}
	return fmt.Sprintf("destination %s is %s, which http jobs may not reach; allow it with %s (AGATE_HTTP_ALLOW)",
		dest, e.What, allow)
}

// checkDestination judges address, the "ip:port" a dialer is about to connect to for host (the
// URL's host name, or "" for an address).
func (a HTTPAllowList) checkDestination(host, address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		// Dialers hand Control a resolved address; anything else is not judged, so not dialed.
		return fmt.Errorf("http job destination %q is not an IP address and port", address)
	}
	addr := ap.Addr().WithZone("").Unmap()
	if a.allowsAddr(addr) {
		return nil
	}
	for _, r := range refusedRanges {
		if r.prefix.Contains(addr) {
			return &DestinationRefusedError{Host: host, Addr: addr, What: r.what}
		}
	}
	return nil
}

// maxRedirects is how many redirects an http job follows.
const maxRedirects = 10

// newGuardedClient is the default client of http jobs: no overall timeout (the job's timeout and
// data.timeout bound each request), at most maxRedirects redirects, no proxy, and every
// connection's address checked by the guard. extra, if not nil, runs after the guard's check (tests
// use it to make sure nothing but loopback is ever dialed).
func newGuardedClient(allow HTTPAllowList, extra func(network, address string, c syscall.RawConn) error) *http.Client {
	// http.DefaultTransport's settings, without its Proxy.
	t := &http.Transport{
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
	}
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if _, err := netip.ParseAddr(host); err == nil {
			host = "" // the URL named an address: judge it as such
		}
		byName := host != "" && allow.allowsHost(host)
		d := &net.Dialer{
			Timeout:   30 * time.Second,
			KeepAlive: 30 * time.Second,
			Control: func(network, address string, c syscall.RawConn) error {
				if !byName {
					if err := allow.checkDestination(host, address); err != nil {
						return err
					}
				}
				if extra != nil {
					return extra(network, address, c)
				}
				return nil
			},
		}
		return d.DialContext(ctx, network, addr)
	}
	return &http.Client{
		Transport: t,
		CheckRedirect: func(_ *http.Request, via []*http.Request) error {
			if len(via) > maxRedirects {
				return fmt.Errorf("stopped after %d redirects", maxRedirects)
			}
			return nil
		},
	}
}
