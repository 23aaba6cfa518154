package wiring

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/backendslice/backendslice/controllers"
)

// TestDeniedDefaultsAlwaysApply: whatever --denied-cidrs and --denied-names
// say (a list of the cluster's own ranges, or an empty one), the cloud
// metadata addresses and names stay denied; only
// --unsafe-allow-default-denied, naming each entry, removes one.
func TestDeniedDefaultsAlwaysApply(t *testing.T) {
	metadata := []string{"fd00:ec2::254/128", "100.100.100.200/32", "168.63.129.16/32"}
	metadataNames := []string{"metadata.google.internal", "*.metadata.google.internal", "metadata.goog", "*.metadata.goog"}
	cases := []struct {
		name      string
		args      []string
		wantCIDRs []string
		wantNames []string
		err       string
	}{
		{name: "no flags", wantCIDRs: metadata, wantNames: metadataNames},
		{name: "the cluster's ranges are added", args: []string{"--denied-cidrs=10.0.0.0/16", "--denied-names=*.corp.example"},
			wantCIDRs: append(slices.Clone(metadata), "10.0.0.0/16"), wantNames: append(slices.Clone(metadataNames), "*.corp.example")},
		{name: "empty lists keep the defaults", args: []string{"--denied-cidrs=", "--denied-names="}, wantCIDRs: metadata, wantNames: metadataNames},
		{name: "one default removed by name", args: []string{"--unsafe-allow-default-denied=100.100.100.200/32,metadata.goog"},
			wantCIDRs: []string{"fd00:ec2::254/128", "168.63.129.16/32"}, wantNames: []string{"metadata.google.internal", "*.metadata.google.internal", "*.metadata.goog"}},
		{name: "only built-in entries can be removed", args: []string{"--unsafe-allow-default-denied=169.254.169.254/32"},
			err: `--unsafe-allow-default-denied: "169.254.169.254/32" is not a built-in denied entry`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts, err := OptionsFromArgs(c.args)
			if !wantErr(t, err, c.err) {
				return
			}
			var want []netip.Prefix
			for _, s := range c.wantCIDRs {
				want = append(want, netip.MustParsePrefix(s))
			}
			if !slices.Equal(opts.Config.DeniedPrefixes, want) {
				t.Errorf("denied networks %v, want %v", opts.Config.DeniedPrefixes, want)
			}
			if !slices.Equal(opts.Config.DeniedNames, c.wantNames) {
				t.Errorf("denied names %v, want %v", opts.Config.DeniedNames, c.wantNames)
			}
		})
	}
}

// TestProviderCheckFlags: the connection checks of BackendProviders take
// their interval and timeout from the flags, and refuse values that would
// check in a tight loop or time out after the next check is due.
func TestProviderCheckFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		err  string
	}{
		{args: []string{"--provider-check-interval=30s", "--provider-check-timeout=5s"}},
		{args: []string{"--provider-check-interval=100ms"}, err: "--provider-check-interval=100ms: must be at least 1s"},
		{args: []string{"--provider-check-interval=10s", "--provider-check-timeout=20s"}, err: "--provider-check-timeout=20s: must be positive and at most --provider-check-interval=10s"},
	} {
		opts, err := OptionsFromArgs(c.args)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.err == "" && (opts.ProviderChecks.Interval != 30*time.Second || opts.ProviderChecks.Timeout != 5*time.Second):
			t.Errorf("%v: checks %+v", c.args, opts.ProviderChecks)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%v: %v, want an error containing %q", c.args, err, c.err)
		}
	}
}

// TestWatchBudgetFlags: the watch budgets, bound by their kinds, and the
// namespaces' floor take what is given, with their defaults when not.
func TestWatchBudgetFlags(t *testing.T) {
	for _, c := range []struct {
		args                    []string
		perAgent, plugin, floor int
	}{
		{args: nil, perAgent: 150, plugin: 10000, floor: 10},
		{args: []string{"--consul-max-watches-per-agent=120", "--plugin-max-watches=500", "--namespace-watch-floor=4"}, perAgent: 120, plugin: 500, floor: 4},
	} {
		var f ControllerFlags
		fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
		f.Bind(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		perAgent, plugin := fs.Lookup("consul-max-watches-per-agent").Value.String(), fs.Lookup("plugin-max-watches").Value.String()
		if perAgent != strconv.Itoa(c.perAgent) || plugin != strconv.Itoa(c.plugin) || f.namespaceWatchFloor != c.floor {
			t.Errorf("%v: per agent %s, plugin %s, floor %d; want %d, %d, %d", c.args,
				perAgent, plugin, f.namespaceWatchFloor, c.perAgent, c.plugin, c.floor)
		}
	}
}

// TestLeaseFlags: the leader election lease's times reach the manager's
// options, and times client-go would refuse (or that would make leadership
// flap, or cost a request every few milliseconds) are refused naming the
// flag to change.
func TestLeaseFlags(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want controllers.LeaseTimings
		err  string
	}{
		{name: "defaults", want: controllers.LeaseTimings{Duration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 500 * time.Millisecond}},
		{name: "a faster takeover", args: []string{"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms"},
			want: controllers.LeaseTimings{Duration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}},
		{name: "the smallest accepted", args: []string{"--leader-elect-lease-duration=2s", "--leader-elect-renew-deadline=250ms", "--leader-elect-retry-period=200ms"},
			want: controllers.LeaseTimings{Duration: 2 * time.Second, RenewDeadline: 250 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}},
		{name: "renew deadline as long as the lease", args: []string{"--leader-elect-renew-deadline=15s"},
			err: "--leader-elect-lease-duration=15s: must be longer than --leader-elect-renew-deadline=15s"},
		{name: "renew deadline longer than the lease", args: []string{"--leader-elect-lease-duration=8s"},
			err: "--leader-elect-lease-duration=8s: must be longer than --leader-elect-renew-deadline=10s"},
		{name: "retry period as long as the renew deadline", args: []string{"--leader-elect-retry-period=10s"},
			err: "--leader-elect-renew-deadline=10s: must be longer than 1.2 times --leader-elect-retry-period=10s"},
		{name: "retry period within the jitter of the deadline", args: []string{"--leader-elect-renew-deadline=600ms"},
			err: "--leader-elect-renew-deadline=600ms: must be longer than 1.2 times --leader-elect-retry-period=500ms"},
		{name: "retry period too short", args: []string{"--leader-elect-retry-period=50ms"},
			err: "--leader-elect-retry-period=50ms: must be at least 200ms"},
		{name: "zero retry period", args: []string{"--leader-elect-retry-period=0s"},
			err: "--leader-elect-retry-period=0s: must be at least 200ms"},
		{name: "lease too short", args: []string{"--leader-elect-lease-duration=1s", "--leader-elect-renew-deadline=500ms", "--leader-elect-retry-period=200ms"},
			err: "--leader-elect-lease-duration=1s: must be whole seconds, at least 2s"},
		{name: "lease in fractions of a second", args: []string{"--leader-elect-lease-duration=12500ms"},
			err: "--leader-elect-lease-duration=12.5s: must be whole seconds"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts, err := OptionsFromArgs(c.args)
			if !wantErr(t, err, c.err) {
				return
			}
			if opts.Lease != c.want {
				t.Errorf("lease %+v, want %+v", opts.Lease, c.want)
			}
		})
	}
}

// wantErr checks err against want, a part of the message expected ("" for
// none), and tells whether the case goes on to check the options.
func wantErr(t *testing.T, err error, want string) bool {
	t.Helper()
	switch {
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Fatalf("got %v, want an error containing %q", err, want)
	case want == "" && err != nil:
		t.Fatal(err)
	}
	return want == ""
}
