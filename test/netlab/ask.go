package netlab

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strings"
	"time"
)

// AskTCP opens a TCP connection from inside n to addr and returns the first
// line it reads, trimmed: a host's ServeTCP answers its name. The whole
// exchange is bounded by timeout, and the connection is closed with a
// reset (CloseNow).
func (n *Namespace) AskTCP(addr string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := n.Dial(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer CloseNow(c)
	_ = c.SetDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// CloseNow closes a TCP connection with a reset, so that the thousands of
// connections a test opens leave no TIME_WAIT behind on the node.
func CloseNow(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// ErrorKind is a short, stable name for a failed connection, to count
// failures by: refused, reset, unreachable, timeout, or else the error.
func ErrorKind(err error) string {
	var ne net.Error
	switch s := err.Error(); {
	case strings.Contains(s, "connection refused"):
		return "refused"
	case strings.Contains(s, "connection reset"):
		return "reset"
	case strings.Contains(s, "network is unreachable"):
		return "unreachable"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	default:
		return s
	}
}
