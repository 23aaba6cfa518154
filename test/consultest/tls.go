package consultest

import (
	"fmt"

	"github.com/backendslice/backendslice/test/tlstest"
)

// writeCertificates writes a CA and a server certificate it signs for
// TLSServerName into the agent's directory, sets a.CAFile, and returns the
// agent configuration that serves them.
func (a *Agent) writeCertificates() (string, error) {
	f, err := tlstest.WriteCertificates(a.dir, TLSServerName)
	if err != nil {
		return "", err
	}
	a.CAFile = f.CA
	return fmt.Sprintf(`tls { defaults { ca_file = %q, cert_file = %q, key_file = %q } }`, f.CA, f.Cert, f.Key), nil
}
